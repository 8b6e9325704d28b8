// OpenGate NPM pipeline, TNA shell (Tofino; -D__TARGET_TOFINO__=2 with --arch t2na for Tofino 2).
// Everything but the architecture glue is shared with the v1model shell (include/): the parser
// states, every control body and the table names. This file holds only what TNA does differently:
// intrinsic metadata, the CPU port number, bridged metadata from ingress to egress, the Checksum
// units in the deparser, digests, and the drop/egress decisions.
#include <core.p4>
#include "include/arch/tna_externs.p4"
#include "include/arch/tna_sizes.p4"
#include "include/headers.p4"
#include "include/parser.p4"
#include "include/pipeline.p4"

const DigestType_t DIGEST_SESSION_REQUEST = 1;
const DigestType_t DIGEST_SESSION_CLOSE   = 2;

// What egress needs from ingress (v1model keeps the whole metadata struct across the queues; TNA
// carries only this header in front of the packet, and egress strips it). It is a packet-in
// header: egress builds the real one from it, field for field at the same bit positions, which
// is what Tofino's PHV allocation needs (its padding is left as it is).
struct tna_headers_t {
    packet_in_h      bridged;
#ifdef OG_FLOW_SLOTS
    flow_resubmit_h  resubmit;   // an opening packet's second pass (arch/tna_flow_slots.p4)
#endif
    headers_t        og;
}

const ResubmitType_t RESUBMIT_FLOW_CLAIM = 1;
#ifdef OG_FLOW_SLOTS
#define OG_RESUBMITTING(meta) ((meta).flow_resubmit == 1)
#else
#define OG_RESUBMITTING(meta) false
#endif

parser TnaIngressParser(packet_in pkt, out tna_headers_t hdr, out local_metadata_t meta,
                        out ingress_intrinsic_metadata_t ig_intr_md) {
    OgPacketParser() packet_parser;

    // The pipeline's view of the ingress port is set here, not in the first MAU stage, so that the
    // port's role is looked up in stage 0.
#ifdef OG_FLOW_SLOTS
    state start {
        pkt.extract(ig_intr_md);
        transition select(ig_intr_md.resubmit_flag, ig_intr_md.ingress_port) {
            (1, _): resubmitted;
            (0, OG_TOFINO_CPU_PORT): from_cpu;
            default: from_wire;
        }
    }

    // The second pass of an opening packet that claims a data-plane session slot (never one
    // from the CPU).
    state resubmitted {
        pkt.extract(hdr.resubmit);
        meta.flow_claim = hdr.resubmit.claim[0:0];
        meta.flow_claim_way = hdr.resubmit.way;
        meta.ingress_port = hdr.resubmit.ingress_port;
        pkt.advance(PORT_METADATA_SIZE - 64);
        transition packet;
    }
#else
    state start {
        pkt.extract(ig_intr_md);
        transition select(ig_intr_md.ingress_port) {
            OG_TOFINO_CPU_PORT: from_cpu;
            default: from_wire;
        }
    }
#endif

    state from_cpu {
        pkt.advance(PORT_METADATA_SIZE);
        meta.ingress_port = CPU_PORT;
        transition packet;
    }

    state from_wire {
        pkt.advance(PORT_METADATA_SIZE);
        meta.ingress_port = ig_intr_md.ingress_port;
        transition packet;
    }

    state packet {
        packet_parser.apply(pkt, hdr.og, meta, ig_intr_md.ingress_port);
        transition accept;
    }
}

// Tofino 2: the IPv4 options in PHV, not a CLOT. The options are read-only, which makes them a
// CLOT candidate, but bf-p4c (p4c 34b86e9b) gives the CLOT no length for the options' varbit
// and its assembler stops ("No length for clot 0"). bf-p4c splits the varbit into one header
// per length (32 to 320 bits), named as below.
@do_not_use_clot("ingress", "hdr.og.ipv4_options_h_ipv4_options_options_32b")
@do_not_use_clot("ingress", "hdr.og.ipv4_options_h_ipv4_options_options_64b")
@do_not_use_clot("ingress", "hdr.og.ipv4_options_h_ipv4_options_options_96b")
@do_not_use_clot("ingress", "hdr.og.ipv4_options_h_ipv4_options_options_128b")
@do_not_use_clot("ingress", "hdr.og.ipv4_options_h_ipv4_options_options_160b")
@do_not_use_clot("ingress", "hdr.og.ipv4_options_h_ipv4_options_options_192b")
@do_not_use_clot("ingress", "hdr.og.ipv4_options_h_ipv4_options_options_224b")
@do_not_use_clot("ingress", "hdr.og.ipv4_options_h_ipv4_options_options_256b")
@do_not_use_clot("ingress", "hdr.og.ipv4_options_h_ipv4_options_options_288b")
@do_not_use_clot("ingress", "hdr.og.ipv4_options_h_ipv4_options_options_320b")
#ifdef OG_FLOW_SLOTS
// What a way's RegisterAction found is its stateful ALU's predicate, bits 11:4 of the ALU's
// output word: in an 8-bit container those bits come from two action data bus slots, which
// one ALU operation cannot read ("invalid container action": bf-p4c picks such a container
// for them with the ordered slot key). A 16-bit container takes them from one.
@pa_container_size("ingress", "meta.flow_way0_found", 16)
@pa_container_size("ingress", "meta.flow_way1_found", 16)
#endif
control TnaIngress(inout tna_headers_t hdr, inout local_metadata_t meta,
                   in ingress_intrinsic_metadata_t ig_intr_md,
                   in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                   inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                   inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    OgIngress() pipeline;

    apply {
        if (ig_prsr_md.parser_err != 0) {
            meta.parser_truncated = 1;
        }
#ifdef OG_FLOW_SLOTS
        // Data-plane time in ticks of 2^16 ns (arch/tna_flow_slots.p4).
        meta.now = ig_prsr_md.global_tstamp[47:16];
#endif
        pipeline.apply(hdr.og, meta);
        // Each decision below reads only what the pipeline left, so they share one MAU stage.
        if (meta.drop_reason != DROP_NONE) {
            ig_dprsr_md.drop_ctl = 1;
        }
#ifdef OG_FLOW_SLOTS
        else if (meta.flow_resubmit == 1) {
            // Claim the slot in a second pass; this one is not forwarded.
            ig_dprsr_md.resubmit_type = RESUBMIT_FLOW_CLAIM;
            hdr.resubmit.setValid();
            hdr.resubmit.claim = 1;  // (each field its own container's only source)
            hdr.resubmit.way = meta.flow_claim_way;
            hdr.resubmit.ingress_port = meta.ingress_port;
        }
#endif
        if (meta.egress_port == CPU_PORT) {
            ig_tm_md.ucast_egress_port = OG_TOFINO_CPU_PORT;
        } else {
            ig_tm_md.ucast_egress_port = meta.egress_port;
        }
        // A session-opening packet misses the session table, a closing one hits it: never both.
        if (meta.send_session_close == 1) {
            ig_dprsr_md.digest_type = DIGEST_SESSION_CLOSE;
        } else if (meta.drop_reason == DROP_NONE && meta.send_session_request == 1
                && !OG_RESUBMITTING(meta)) {
            ig_dprsr_md.digest_type = DIGEST_SESSION_REQUEST;
        }
        hdr.bridged.setValid();
        hdr.bridged.ingress_port = meta.ingress_port;
        hdr.bridged.reason = meta.cpu_reason;
        hdr.bridged.ids_class = meta.ids_class;
        hdr.bridged.acl_rule = meta.acl_rule;
        hdr.bridged.spm_port = meta.spm_port;
    }
}

control TnaIngressDeparser(packet_out pkt, inout tna_headers_t hdr, in local_metadata_t meta,
                           in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    Checksum() ipv4_checksum;
    Checksum() tcp_checksum;
    Checksum() udp_checksum;
    Checksum() icmp_checksum;
    @name(".session_request_t")
    Digest<session_request_t>(DIGEST_SESSION_REQUEST) session_request;
    @name(".session_close_t")
    Digest<session_close_t>(DIGEST_SESSION_CLOSE) session_close;
#ifdef OG_FLOW_SLOTS
    Resubmit(RESUBMIT_FLOW_CLAIM) resubmit;
#endif

    apply {
        hdr.og.ipv4.hdr_checksum = ipv4_checksum.update({
            hdr.og.ipv4.version, hdr.og.ipv4.ihl, hdr.og.ipv4.dscp_ecn, hdr.og.ipv4.total_len,
            hdr.og.ipv4.identification, hdr.og.ipv4.flags, hdr.og.ipv4.frag_offset,
            hdr.og.ipv4.ttl, hdr.og.ipv4.protocol, hdr.og.ipv4.src_addr, hdr.og.ipv4.dst_addr,
            hdr.og.ipv4_options.options
        });
        if (meta.l4_checksum_update == 1) {
            hdr.og.tcp.checksum = tcp_checksum.update({
                hdr.og.ipv4.src_addr, hdr.og.ipv4.dst_addr, hdr.og.tcp.sport, hdr.og.tcp.dport,
                meta.l4_residual
            });
            // A UDP checksum that comes out as 0 is sent as 0xffff (0 means "no checksum").
            hdr.og.udp.checksum = udp_checksum.update({
                hdr.og.ipv4.src_addr, hdr.og.ipv4.dst_addr, hdr.og.udp.sport, hdr.og.udp.dport,
                meta.l4_residual
            }, true);
            hdr.og.icmp.checksum = icmp_checksum.update({hdr.og.icmp.identifier, meta.l4_residual});
        }
        if (ig_dprsr_md.digest_type == DIGEST_SESSION_REQUEST) {
            session_request.pack({
                meta.key_src, meta.key_dst, hdr.og.ipv4.protocol,
                meta.key_sport, meta.key_dport, meta.ingress_port, meta.acl_rule,
                meta.ids_class, meta.spm_port, meta.spm_mac
#ifdef OG_FLOW_SLOTS
                , meta.dp_session
#endif
            });
        }
        if (ig_dprsr_md.digest_type == DIGEST_SESSION_CLOSE) {
            session_close.pack({
                meta.key_src, meta.key_dst, hdr.og.ipv4.protocol,
                meta.key_sport, meta.key_dport, meta.tcp_flags
            });
        }
#ifdef OG_FLOW_SLOTS
        if (ig_dprsr_md.resubmit_type == RESUBMIT_FLOW_CLAIM) {
            resubmit.emit(hdr.resubmit);
        }
#endif
        pkt.emit(hdr.bridged);
        pkt.emit(hdr.og.ethernet);
        pkt.emit(hdr.og.vlan);
        pkt.emit(hdr.og.arp);
        pkt.emit(hdr.og.ipv4);
        pkt.emit(hdr.og.ipv4_options);
        pkt.emit(hdr.og.tcp);
        pkt.emit(hdr.og.udp);
        pkt.emit(hdr.og.icmp);
    }
}

// Egress parses only the bridged header: the packet itself passes through as payload.
parser TnaEgressParser(packet_in pkt, out tna_headers_t hdr, out local_metadata_t meta,
                       out egress_intrinsic_metadata_t eg_intr_md) {
    state start {
        pkt.extract(eg_intr_md);
        pkt.extract(hdr.bridged);
        transition accept;
    }
}

control TnaEgress(inout tna_headers_t hdr, inout local_metadata_t meta,
                  in egress_intrinsic_metadata_t eg_intr_md,
                  in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
                  inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
                  inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {
    OgEgress() pipeline;

    apply {
        if (eg_intr_md.egress_port == OG_TOFINO_CPU_PORT) {
            meta.egress_port = CPU_PORT;
        } else {
            meta.egress_port = eg_intr_md.egress_port;
        }
        meta.ingress_port = hdr.bridged.ingress_port;
        meta.cpu_reason = hdr.bridged.reason;
        meta.ids_class = hdr.bridged.ids_class;
        meta.acl_rule = hdr.bridged.acl_rule;
        meta.spm_port = hdr.bridged.spm_port;
        pipeline.apply(hdr.og, meta);
    }
}

control TnaEgressDeparser(packet_out pkt, inout tna_headers_t hdr, in local_metadata_t meta,
                          in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    apply {
        pkt.emit(hdr.og.packet_in);
    }
}

Pipeline(TnaIngressParser(), TnaIngress(), TnaIngressDeparser(),
         TnaEgressParser(), TnaEgress(), TnaEgressDeparser()) pipe;

Switch(pipe) main;
