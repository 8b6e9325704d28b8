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
#ifdef OG_IPV6
            ETHERTYPE_IPV6: parse_ipv6;
#endif
            default: accept;
        }
    }

    state parse_vlan {
        pkt.extract(hdr.vlan);
        transition select(hdr.vlan.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            ETHERTYPE_ARP: parse_arp;
#ifdef OG_IPV6
            ETHERTYPE_IPV6: parse_ipv6;
#endif
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

#ifdef OG_IPV6
    // IPv6 and its extension headers in RFC 8200's order (section 4.1): hop-by-hop, destination
    // options, routing, fragment, destination options, then the upper-layer header. A header out
    // of that order, repeated, or longer than 256 bytes stops the walk (ipv6_chain_bad: dropped
    // and counted, RFC 9098 lets a router drop what it cannot parse); so does a first fragment
    // whose chain ends before the upper-layer header (a parser error: truncated, RFC 7112). A
    // later fragment carries no ports: the walk stops at its fragment header. meta.l4_proto is
    // the upper-layer protocol (or the header the walk stopped at).
    state parse_ipv6 {
        pkt.extract(hdr.ipv6);
        meta.l4_proto = hdr.ipv6.next_hdr;
        meta.ipv6_plain = 1;
        transition select(hdr.ipv6.next_hdr) {
            IPV6_EXT_HOP_BY_HOP: parse_ipv6_hop_by_hop;
            IPV6_EXT_DEST_OPTS: parse_ipv6_dest_opts;
            IPV6_EXT_ROUTING: parse_ipv6_routing;
            IPV6_EXT_FRAGMENT: parse_ipv6_fragment;
            IP_PROTO_TCP: parse_tcp;
            IP_PROTO_UDP: parse_udp;
            IP_PROTO_ICMPV6: parse_icmpv6_plain;
            default: accept;
        }
    }

    state parse_ipv6_hop_by_hop {
        pkt.extract(hdr.ipv6_hop_by_hop);
        meta.ipv6_plain = 0;
        meta.l4_proto = hdr.ipv6_hop_by_hop.next_hdr;
        transition select(hdr.ipv6_hop_by_hop.hdr_ext_len) {
            0: after_ipv6_hop_by_hop;
            1 .. 31: parse_ipv6_hop_by_hop_rest;
            default: ipv6_chain_bad;
        }
    }

    state parse_ipv6_hop_by_hop_rest {
        pkt.extract(hdr.ipv6_hop_by_hop_rest,
                    (bit<32>)(((bit<16>)hdr.ipv6_hop_by_hop.hdr_ext_len) << 6));
        transition after_ipv6_hop_by_hop;
    }

    state after_ipv6_hop_by_hop {
        transition select(hdr.ipv6_hop_by_hop.next_hdr) {
            IPV6_EXT_DEST_OPTS: parse_ipv6_dest_opts;
            IPV6_EXT_ROUTING: parse_ipv6_routing;
            IPV6_EXT_FRAGMENT: parse_ipv6_fragment;
            IPV6_EXT_HOP_BY_HOP: ipv6_chain_bad;
            IP_PROTO_TCP: parse_tcp;
            IP_PROTO_UDP: parse_udp;
            IP_PROTO_ICMPV6: parse_icmpv6;
            default: accept;
        }
    }

    state parse_ipv6_dest_opts {
        pkt.extract(hdr.ipv6_dest_opts);
        meta.ipv6_plain = 0;
        meta.l4_proto = hdr.ipv6_dest_opts.next_hdr;
        transition select(hdr.ipv6_dest_opts.hdr_ext_len) {
            0: after_ipv6_dest_opts;
            1 .. 31: parse_ipv6_dest_opts_rest;
            default: ipv6_chain_bad;
        }
    }

    state parse_ipv6_dest_opts_rest {
        pkt.extract(hdr.ipv6_dest_opts_rest,
                    (bit<32>)(((bit<16>)hdr.ipv6_dest_opts.hdr_ext_len) << 6));
        transition after_ipv6_dest_opts;
    }

    // Destination options before a routing header; otherwise they are the last ones (RFC 8200),
    // and what follows them is the upper layer.
    state after_ipv6_dest_opts {
        transition select(hdr.ipv6_dest_opts.next_hdr) {
            IPV6_EXT_ROUTING: parse_ipv6_routing;
            IPV6_EXT_FRAGMENT: parse_ipv6_fragment;
            IPV6_EXT_HOP_BY_HOP: ipv6_chain_bad;
            IPV6_EXT_DEST_OPTS: ipv6_chain_bad;
            IP_PROTO_TCP: parse_tcp;
            IP_PROTO_UDP: parse_udp;
            IP_PROTO_ICMPV6: parse_icmpv6;
            default: accept;
        }
    }

    state parse_ipv6_routing {
        pkt.extract(hdr.ipv6_routing);
        meta.ipv6_plain = 0;
        meta.l4_proto = hdr.ipv6_routing.next_hdr;
        transition select(hdr.ipv6_routing.hdr_ext_len) {
            0: after_ipv6_routing;
            1 .. 31: parse_ipv6_routing_rest;
            default: ipv6_chain_bad;
        }
    }

    state parse_ipv6_routing_rest {
        pkt.extract(hdr.ipv6_routing_rest,
                    (bit<32>)(((bit<16>)hdr.ipv6_routing.hdr_ext_len) << 6));
        transition after_ipv6_routing;
    }

    state after_ipv6_routing {
        transition select(hdr.ipv6_routing.next_hdr) {
            IPV6_EXT_FRAGMENT: parse_ipv6_fragment;
            IPV6_EXT_DEST_OPTS: parse_ipv6_dest_opts2;
            IPV6_EXT_HOP_BY_HOP: ipv6_chain_bad;
            IPV6_EXT_ROUTING: ipv6_chain_bad;
            IP_PROTO_TCP: parse_tcp;
            IP_PROTO_UDP: parse_udp;
            IP_PROTO_ICMPV6: parse_icmpv6;
            default: accept;
        }
    }

    state parse_ipv6_fragment {
        pkt.extract(hdr.ipv6_fragment);
        meta.ipv6_plain = 0;
        meta.l4_proto = hdr.ipv6_fragment.next_hdr;
        transition select(hdr.ipv6_fragment.frag_offset) {
            0: after_ipv6_fragment;
            default: ipv6_later_fragment;
        }
    }

    state ipv6_later_fragment {
        meta.ipv6_later_fragment = 1;
        transition accept;
    }

    state after_ipv6_fragment {
        transition select(hdr.ipv6_fragment.next_hdr) {
            IPV6_EXT_DEST_OPTS: parse_ipv6_dest_opts2;
            IPV6_EXT_HOP_BY_HOP: ipv6_chain_bad;
            IPV6_EXT_ROUTING: ipv6_chain_bad;
            IPV6_EXT_FRAGMENT: ipv6_chain_bad;
            IP_PROTO_TCP: parse_tcp;
            IP_PROTO_UDP: parse_udp;
            IP_PROTO_ICMPV6: parse_icmpv6;
            default: accept;
        }
    }

    state parse_ipv6_dest_opts2 {
        pkt.extract(hdr.ipv6_dest_opts2);
        meta.l4_proto = hdr.ipv6_dest_opts2.next_hdr;
        transition select(hdr.ipv6_dest_opts2.hdr_ext_len) {
            0: after_ipv6_dest_opts2;
            1 .. 31: parse_ipv6_dest_opts2_rest;
            default: ipv6_chain_bad;
        }
    }

    state parse_ipv6_dest_opts2_rest {
        pkt.extract(hdr.ipv6_dest_opts2_rest,
                    (bit<32>)(((bit<16>)hdr.ipv6_dest_opts2.hdr_ext_len) << 6));
        transition after_ipv6_dest_opts2;
    }

    state after_ipv6_dest_opts2 {
        transition select(hdr.ipv6_dest_opts2.next_hdr) {
            IPV6_EXT_HOP_BY_HOP: ipv6_chain_bad;
            IPV6_EXT_DEST_OPTS: ipv6_chain_bad;
            IPV6_EXT_ROUTING: ipv6_chain_bad;
            IPV6_EXT_FRAGMENT: ipv6_chain_bad;
            IP_PROTO_TCP: parse_tcp;
            IP_PROTO_UDP: parse_udp;
            IP_PROTO_ICMPV6: parse_icmpv6;
            default: accept;
        }
    }

    state ipv6_chain_bad {
        meta.ipv6_chain_bad = 1;
        transition accept;
    }

    // ICMPv6 right after the IPv6 header: a neighbour solicitation is read whole if it has the
    // shape the responder answers (RFC 4861 section 4.3: 24 bytes, or 32 with a source
    // link-layer address option).
    state parse_icmpv6_plain {
        transition select(pkt.lookahead<bit<8>>(), hdr.ipv6.payload_len) {
            (ICMPV6_NEIGHBOR_SOLICIT, 24): parse_neighbor_solicit;
            (ICMPV6_NEIGHBOR_SOLICIT, 32): parse_neighbor_solicit_option;
            default: parse_icmpv6;
        }
    }

    state parse_neighbor_solicit {
        pkt.extract(hdr.icmp);
        pkt.extract(hdr.nd_target);
        meta.nd_solicit = 1;
        transition accept;
    }

    state parse_neighbor_solicit_option {
        pkt.extract(hdr.icmp);
        pkt.extract(hdr.nd_target);
        transition select(pkt.lookahead<bit<16>>()) {
            0x0101: parse_nd_source_option;   // type 1, length 1 (8 bytes)
            default: accept;
        }
    }

    state parse_nd_source_option {
        pkt.extract(hdr.nd_option);
        meta.nd_solicit = 1;
        transition accept;
    }

    // Echo sessions as ICMP's: the identifier is the requester's port.
    state parse_icmpv6 {
        transition select(pkt.lookahead<bit<8>>()) {
            ICMPV6_ECHO_REQUEST: parse_icmp_echo_request;
            ICMPV6_ECHO_REPLY: parse_icmp_echo_reply;
            default: parse_icmp_other;
        }
    }
#endif

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
