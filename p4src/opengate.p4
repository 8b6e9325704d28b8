// OpenGate NPM pipeline, v1model shell (BMv2 simple_switch_grpc and the built-in software switch).
// Everything but the architecture glue is shared with the TNA shell (include/).
#include <core.p4>
#include "include/arch/v1model_externs.p4"
#include "include/sizes.p4"
#include "include/headers.p4"
#include "include/parser.p4"
#include "include/pipeline.p4"

parser V1Parser(packet_in pkt, out headers_t hdr, inout local_metadata_t meta,
                inout standard_metadata_t sm) {
    OgPacketParser() packet_parser;

    state start {
        packet_parser.apply(pkt, hdr, meta, sm.ingress_port);
        transition accept;
    }
}

control V1VerifyChecksum(inout headers_t hdr, inout local_metadata_t meta) {
    apply {
        verify_checksum(hdr.ipv4.isValid() && hdr.ipv4.ihl >= 5, {
            hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp_ecn, hdr.ipv4.total_len,
            hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
            hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr, hdr.ipv4_options.options
        }, hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
        // A neighbour solicitation the responder may answer (RFC 4861 section 7.1.1: a valid
        // ICMPv6 checksum), without and with its link-layer address option.
        verify_checksum(meta.nd_solicit == 1 && !hdr.nd_option.isValid(), {
            hdr.ipv6.src_hi, hdr.ipv6.src_lo, hdr.ipv6.dst_hi, hdr.ipv6.dst_lo,
            16w0, hdr.ipv6.payload_len, 24w0, IP_PROTO_ICMPV6,
            hdr.icmp.icmp_type, hdr.icmp.code, hdr.icmp.identifier, hdr.icmp.seq_no,
            hdr.nd_target.target_hi, hdr.nd_target.target_lo
        }, hdr.icmp.checksum, HashAlgorithm.csum16);
        verify_checksum(meta.nd_solicit == 1 && hdr.nd_option.isValid(), {
            hdr.ipv6.src_hi, hdr.ipv6.src_lo, hdr.ipv6.dst_hi, hdr.ipv6.dst_lo,
            16w0, hdr.ipv6.payload_len, 24w0, IP_PROTO_ICMPV6,
            hdr.icmp.icmp_type, hdr.icmp.code, hdr.icmp.identifier, hdr.icmp.seq_no,
            hdr.nd_target.target_hi, hdr.nd_target.target_lo,
            hdr.nd_option.opt_type, hdr.nd_option.opt_len, hdr.nd_option.mac
        }, hdr.icmp.checksum, HashAlgorithm.csum16);
    }
}

control V1Ingress(inout headers_t hdr, inout local_metadata_t meta,
                  inout standard_metadata_t sm) {
    OgIngress() pipeline;

    apply {
        meta.ingress_port = sm.ingress_port;
        meta.packet_length = sm.packet_length;
        meta.checksum_error = sm.checksum_error;
        meta.now = sm.ingress_global_timestamp[41:10];
        if (sm.parser_error != error.NoError) {
            meta.parser_truncated = 1;
        }
        pipeline.apply(hdr, meta);
        if (meta.drop_reason != DROP_NONE) {
            mark_to_drop(sm);
        } else {
            sm.egress_spec = meta.egress_port;
            if (meta.send_session_request == 1) {
                // Keys as the packet arrived: the data plane may have rewritten it since.
                digest<session_request_t>(1, {
                    meta.key_src, meta.key_dst, hdr.ipv4.protocol,
                    meta.key_sport, meta.key_dport, meta.ingress_port, meta.acl_rule,
                    meta.ids_class, meta.spm_port, meta.spm_mac, meta.nat_addr, meta.nat_port,
                    meta.nat_kind, meta.dp_session
                });
            }
        }
        // Keys as the packet arrived (NAT64 may have changed its family since).
        if (meta.send_session_close == 1 && meta.close_v6 == 1) {
            digest<session_close_v6_t>(3, {
                meta.close_src_hi, meta.close_src_lo, meta.close_dst_hi, meta.close_dst_lo,
                meta.l4_proto, meta.l4_sport, meta.l4_dport, meta.tcp_flags
            });
        } else if (meta.send_session_close == 1) {
            digest<session_close_t>(2, {
                meta.key_src, meta.key_dst, meta.flow_proto,
                meta.key_sport, meta.key_dport, meta.tcp_flags
            });
        }
    }
}

control V1Egress(inout headers_t hdr, inout local_metadata_t meta,
                 inout standard_metadata_t sm) {
    OgEgress() pipeline;

    apply {
        meta.egress_port = sm.egress_port;
        pipeline.apply(hdr, meta);
    }
}

control V1ComputeChecksum(inout headers_t hdr, inout local_metadata_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(), {
            hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp_ecn, hdr.ipv4.total_len,
            hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
            hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr, hdr.ipv4_options.options
        }, hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
        // The neighbour advertisement the responder made of a solicitation.
        update_checksum(meta.nd_reply == 1, {
            hdr.ipv6.src_hi, hdr.ipv6.src_lo, hdr.ipv6.dst_hi, hdr.ipv6.dst_lo,
            16w0, hdr.ipv6.payload_len, 24w0, IP_PROTO_ICMPV6,
            hdr.icmp.icmp_type, hdr.icmp.code, hdr.icmp.identifier, hdr.icmp.seq_no,
            hdr.nd_target.target_hi, hdr.nd_target.target_lo,
            hdr.nd_option.opt_type, hdr.nd_option.opt_len, hdr.nd_option.mac
        }, hdr.icmp.checksum, HashAlgorithm.csum16);
    }
}

control V1Deparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.packet_in);
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.vlan);
        pkt.emit(hdr.arp);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.ipv4_options);
        pkt.emit(hdr.ipv6);
        pkt.emit(hdr.ipv6_hop_by_hop);
        pkt.emit(hdr.ipv6_hop_by_hop_rest);
        pkt.emit(hdr.ipv6_dest_opts);
        pkt.emit(hdr.ipv6_dest_opts_rest);
        pkt.emit(hdr.ipv6_routing);
        pkt.emit(hdr.ipv6_routing_rest);
        pkt.emit(hdr.ipv6_fragment);
        pkt.emit(hdr.ipv6_dest_opts2);
        pkt.emit(hdr.ipv6_dest_opts2_rest);
        pkt.emit(hdr.tcp);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.icmp);
        pkt.emit(hdr.nd_target);
        pkt.emit(hdr.nd_option);
        pkt.emit(hdr.quoted_ipv4);
        pkt.emit(hdr.quoted_l4);
    }
}

V1Switch(V1Parser(), V1VerifyChecksum(), V1Ingress(), V1Egress(), V1ComputeChecksum(),
         V1Deparser()) main;
