// The architecture-neutral parser: Ethernet, 802.1Q, ARP, IPv4 (with options), TCP, UDP, ICMP.
// The architecture shells call it after their own intrinsic metadata (e.g. Tofino port metadata).
// Packets from the CPU port start with the packet-out header. The OG_PARSER_* hooks are empty on
// v1model (its checksum units work on whole headers); on TNA they feed the parser's Checksum
// externs (IPv4 verification, TCP/UDP/ICMP residuals for the deparser's incremental update).
#ifndef OPENGATE_PARSER_P4
#define OPENGATE_PARSER_P4

#include "headers.p4"

parser OgPacketParser(packet_in pkt, out headers_t hdr, inout local_metadata_t meta,
                      in port_id_t ingress_port) {
    OG_PARSER_DECLS

    state start {
        transition select(ingress_port) {
            OG_WIRE_CPU_PORT: parse_packet_out;
            default: parse_ethernet;
        }
    }

    state parse_packet_out {
        pkt.extract(hdr.packet_out);
        meta.port_role = ROLE_CPU;
        transition parse_ethernet;
    }

    // A destination MAC 02:4f:47:00:TT:TT carries a next-hop tag. The parser notes it, so that the
    // tag table is looked up in the first MAU stage, alongside the port's role.
    state parse_ethernet {
        transition select(pkt.lookahead<bit<32>>()) {
            TAG_MAC_PREFIX: parse_tagged_ethernet;
            default: parse_ethernet_header;
        }
    }

    state parse_tagged_ethernet {
        meta.tagged = 1;
        transition parse_ethernet_header;
    }

    state parse_ethernet_header {
        pkt.extract(hdr.ethernet);
        meta.tag = hdr.ethernet.dst_addr[15:0];
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_VLAN: parse_vlan;
            ETHERTYPE_IPV4: parse_ipv4;
            ETHERTYPE_ARP: parse_arp;
            default: accept;
        }
    }

    state parse_vlan {
        pkt.extract(hdr.vlan);
        transition select(hdr.vlan.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            ETHERTYPE_ARP: parse_arp;
            default: accept;
        }
    }

    state parse_arp {
        pkt.extract(hdr.arp);
        transition accept;
    }

    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        OG_PARSER_IPV4(hdr, meta);
#ifdef OG_ICMP_RELATED
        meta.flow_src = hdr.ipv4.src_addr;
        meta.flow_dst = hdr.ipv4.dst_addr;
        meta.flow_proto = hdr.ipv4.protocol;
#endif
        transition select(hdr.ipv4.ihl) {
            0 .. 4: accept;             // malformed; validation drops it
            5: parse_l4;
            default: parse_ipv4_options;
        }
    }

    state parse_ipv4_options {
        pkt.extract(hdr.ipv4_options, (bit<32>)((((bit<16>)hdr.ipv4.ihl) - 5) << 5));
        OG_PARSER_IPV4_OPTIONS(hdr, meta);
        transition parse_l4;
    }

    state parse_l4 {
        OG_PARSER_IPV4_END(hdr, meta);
        // Only first fragments carry the transport header.
        transition select(hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
            (0, IP_PROTO_TCP): parse_tcp;
            (0, IP_PROTO_UDP): parse_udp;
            (0, IP_PROTO_ICMP): parse_icmp;
            default: accept;
        }
    }

    state parse_tcp {
        pkt.extract(hdr.tcp);
        OG_PARSER_TCP(hdr, meta);
        meta.l4_sport = hdr.tcp.sport;
        meta.l4_dport = hdr.tcp.dport;
#ifdef OG_ICMP_RELATED
        meta.flow_sport = hdr.tcp.sport;
        meta.flow_dport = hdr.tcp.dport;
#endif
        meta.tcp_flags = hdr.tcp.flags;
        transition accept;
    }

    state parse_udp {
        pkt.extract(hdr.udp);
        OG_PARSER_UDP(hdr, meta);
        meta.l4_sport = hdr.udp.sport;
        meta.l4_dport = hdr.udp.dport;
#ifdef OG_ICMP_RELATED
        meta.flow_sport = hdr.udp.sport;
        meta.flow_dport = hdr.udp.dport;
#endif
        transition accept;
    }

    // The ICMP type is looked at before extraction, so that each state extracts the header and
    // reads the identifier at once (Tofino's parser cannot copy a field extracted states ago).
    state parse_icmp {
        transition select(pkt.lookahead<bit<8>>()) {
            ICMP_ECHO_REQUEST: parse_icmp_echo_request;
            ICMP_ECHO_REPLY: parse_icmp_echo_reply;
#ifdef OG_ICMP_RELATED
            ICMP_DEST_UNREACHABLE: parse_icmp_error;
            ICMP_TIME_EXCEEDED: parse_icmp_error;
            ICMP_PARAM_PROBLEM: parse_icmp_error;
#endif
            default: parse_icmp_other;
        }
    }

    // ICMP echo sessions: the identifier plays the part of the port on the requester's side, so
    // that the reply's 5-tuple is the request's reversed.
    state parse_icmp_echo_request {
        pkt.extract(hdr.icmp);
        OG_PARSER_ICMP_ECHO(hdr, meta);
        meta.l4_sport = hdr.icmp.identifier;
#ifdef OG_ICMP_RELATED
        meta.flow_sport = hdr.icmp.identifier;
#endif
        transition accept;
    }

    state parse_icmp_echo_reply {
        pkt.extract(hdr.icmp);
        OG_PARSER_ICMP_ECHO(hdr, meta);
        meta.l4_dport = hdr.icmp.identifier;
#ifdef OG_ICMP_RELATED
        meta.flow_dport = hdr.icmp.identifier;
#endif
        transition accept;
    }

    state parse_icmp_other {
        pkt.extract(hdr.icmp);
        transition accept;
    }

#ifdef OG_ICMP_RELATED
    // An error quotes the IPv4 header and the first 8 bytes of the packet it is about (RFC 792;
    // an error cut shorter is a parser error, dropped as truncated). A quoted first fragment of
    // TCP, UDP or an ICMP echo request without IP options gives the flow the error belongs to:
    // the quoted packet reversed. Anything else quoted leaves the error to the ACL, as before.
    state parse_icmp_error {
        pkt.extract(hdr.icmp);
        pkt.extract(hdr.quoted_ipv4);
        transition select(hdr.quoted_ipv4.ihl, hdr.quoted_ipv4.frag_offset,
                          hdr.quoted_ipv4.protocol) {
            (5, 0, IP_PROTO_TCP): parse_quoted_l4;
            (5, 0, IP_PROTO_UDP): parse_quoted_l4;
            (5, 0, IP_PROTO_ICMP): parse_quoted_icmp;
            default: accept;
        }
    }

    state parse_quoted_icmp {
        transition select(pkt.lookahead<bit<8>>()) {
            ICMP_ECHO_REQUEST: parse_quoted_echo;
            default: accept;
        }
    }

    // A ping's error: the flow is the echo's, keyed as its reply would be.
    state parse_quoted_echo {
        pkt.extract(hdr.quoted_l4);
        meta.icmp_error = 1;
        meta.quoted_echo = 1;
        meta.flow_src = hdr.quoted_ipv4.dst_addr;
        meta.flow_dst = hdr.quoted_ipv4.src_addr;
        meta.flow_proto = IP_PROTO_ICMP;
        meta.flow_dport = hdr.quoted_l4.word2;
        transition accept;
    }

    state parse_quoted_l4 {
        pkt.extract(hdr.quoted_l4);
        meta.icmp_error = 1;
        meta.flow_src = hdr.quoted_ipv4.dst_addr;
        meta.flow_dst = hdr.quoted_ipv4.src_addr;
        meta.flow_proto = hdr.quoted_ipv4.protocol;
        meta.flow_sport = hdr.quoted_l4.dport;
        meta.flow_dport = hdr.quoted_l4.sport;
        transition accept;
    }
#endif
}

#endif
