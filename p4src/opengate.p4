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
        if (meta.send_session_close == 1) {
            digest<session_close_t>(2, {
                meta.key_src, meta.key_dst, hdr.ipv4.protocol,
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
        pkt.emit(hdr.tcp);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.icmp);
        pkt.emit(hdr.quoted_ipv4);
        pkt.emit(hdr.quoted_l4);
    }
}

V1Switch(V1Parser(), V1VerifyChecksum(), V1Ingress(), V1Egress(), V1ComputeChecksum(),
         V1Deparser()) main;
