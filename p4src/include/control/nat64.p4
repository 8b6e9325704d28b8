// Stateful NAT64 (RFC 6146) with the header translation of RFC 7915, for v1model builds
// (OG_IPV6). docs/explanation/ipv6.md ("NAT64") walks through it.
//
// A flow from an IPv6 inside host to an address in a NAT64 prefix (routing_v6's route_v6_nat64,
// 64:ff9b::/96 by default) opens at the CPM like every IPv6 flow; the CPM picks the IPv4 source
// address and port (or ICMP identifier) and installs the session as two entries: the original
// direction in session_v6 (session_v6_nat64: the IPv4 addresses, the port and the IPv4 route),
// the reply direction in the IPv4 session table (session_nat64_reply: the IPv6 addresses, the
// inside port and the IPv6 route). The data plane rewrites every later packet of both directions
// from those parameters alone: the prefix, the port choice and the routes are the CPM's.
//
// What is translated: TCP, UDP and ICMP echo, without IPv6 extension headers, IPv4 options or
// fragments. An ICMPv4 error about a NAT64 flow goes to the CPM (CPU_REASON_NAT64_ICMP_ERROR),
// which translates it and its quoted packet (RFC 7915 section 4.2). Anything else of a NAT64
// session (an ICMPv6 error about it, a fragment, a UDP datagram without a checksum, which IPv6
// forbids) is dropped as DROP_NAT64_UNTRANSLATABLE (RFC 7915 lets a translator drop what it
// does not translate; section 4.5 for the checksum).
#ifndef OPENGATE_CONTROL_NAT64_P4
#define OPENGATE_CONTROL_NAT64_P4

// Checksum updates (RFC 1624 equation 3, HC' = ~(~HC + ~m + m')) as one flat sum of 16-bit
// words, folded once at the end: a word taken out is added as its complement. (A fold per step
// would copy each step's expression into the next, since p4c propagates them, many times over.)
bit<32> words_of(in bit<64> v) {
    return (bit<32>)v[63:48] + (bit<32>)v[47:32] + (bit<32>)v[31:16] + (bit<32>)v[15:0];
}

bit<32> complements_of(in bit<64> v) {
    return (bit<32>)(~v[63:48]) + (bit<32>)(~v[47:32]) + (bit<32>)(~v[31:16])
        + (bit<32>)(~v[15:0]);
}

bit<16> csum_fold(in bit<32> sum) {
    bit<32> s = (sum & 0xffff) + (sum >> 16);
    s = (s & 0xffff) + (s >> 16);
    return ~s[15:0];
}

// IPv6 to IPv4 (RFC 7915 section 5), last in Ipv6Pipeline for a session_v6_nat64 hit that is
// not dropped: the IPv4 header from the IPv6 one, the source port (identifier) from the session,
// the transport checksum adjusted for the new pseudo-header (ICMPv6's covers one, ICMP's does
// not), the MACs and the port from the session's IPv4 route.
control Nat64Outbound(inout headers_t hdr, inout local_metadata_t meta) {
    apply {
        // Out: the IPv6 addresses; in: the IPv4 ones (the pseudo-headers' lengths and
        // protocols are equal for TCP and UDP).
        bit<32> addrs = complements_of(hdr.ipv6.src_hi) + complements_of(hdr.ipv6.src_lo)
            + complements_of(hdr.ipv6.dst_hi) + complements_of(hdr.ipv6.dst_lo)
            + words_of(meta.nat64_v4_src ++ meta.nat64_v4_dst);
        if (hdr.tcp.isValid()) {
            hdr.tcp.checksum = csum_fold((bit<32>)(~hdr.tcp.checksum) + addrs
                + (bit<32>)(~hdr.tcp.sport) + (bit<32>)meta.nat64_l4_port);
            hdr.tcp.sport = meta.nat64_l4_port;
        } else if (hdr.udp.isValid()) {
            hdr.udp.checksum = csum_fold((bit<32>)(~hdr.udp.checksum) + addrs
                + (bit<32>)(~hdr.udp.sport) + (bit<32>)meta.nat64_l4_port);
            if (hdr.udp.checksum == 0) {
                hdr.udp.checksum = 0xffff;
            }
            hdr.udp.sport = meta.nat64_l4_port;
        } else {
            // An echo request or reply (Ipv6Pipeline let no other ICMPv6 through): the type
            // changes, the pseudo-header (addresses, length, next header 58) leaves the
            // checksum, and a request's identifier is the session's.
            bit<8> new_type = ICMP_ECHO_REPLY;
            bit<16> new_ident = hdr.icmp.identifier;
            if (hdr.icmp.icmp_type == ICMPV6_ECHO_REQUEST) {
                new_type = ICMP_ECHO_REQUEST;
                new_ident = meta.nat64_l4_port;
            }
            hdr.icmp.checksum = csum_fold((bit<32>)(~hdr.icmp.checksum)
                + complements_of(hdr.ipv6.src_hi) + complements_of(hdr.ipv6.src_lo)
                + complements_of(hdr.ipv6.dst_hi) + complements_of(hdr.ipv6.dst_lo)
                + (bit<32>)(~hdr.ipv6.payload_len) + (bit<32>)(~(8w0 ++ IP_PROTO_ICMPV6))
                + (bit<32>)(~(hdr.icmp.icmp_type ++ hdr.icmp.code))
                + (bit<32>)(~hdr.icmp.identifier)
                + (bit<32>)(new_type ++ hdr.icmp.code) + (bit<32>)new_ident);
            hdr.icmp.icmp_type = new_type;
            hdr.icmp.identifier = new_ident;
        }
        hdr.ipv4.setValid();
        hdr.ipv4.version = 4;
        hdr.ipv4.ihl = 5;
        hdr.ipv4.dscp_ecn = hdr.ipv6.traffic_class;
        hdr.ipv4.total_len = hdr.ipv6.payload_len + 20;
        hdr.ipv4.identification = 0;
        hdr.ipv4.flags = 0b010;  // don't fragment (section 5.1: the path MTU is IPv6's)
        hdr.ipv4.frag_offset = 0;
        hdr.ipv4.ttl = hdr.ipv6.hop_limit - 1;
        hdr.ipv4.protocol = hdr.ipv6.next_hdr;
        if (hdr.icmp.isValid()) {
            hdr.ipv4.protocol = IP_PROTO_ICMP;
        }
        hdr.ipv4.hdr_checksum = 0;  // the shell's checksum unit computes it
        hdr.ipv4.src_addr = meta.nat64_v4_src;
        hdr.ipv4.dst_addr = meta.nat64_v4_dst;
        hdr.ipv6.setInvalid();
        if (hdr.vlan.isValid()) {
            hdr.vlan.ether_type = ETHERTYPE_IPV4;
        } else {
            hdr.ethernet.ether_type = ETHERTYPE_IPV4;
        }
        meta.egress_port = meta.nat64_egress;
        hdr.ethernet.dst_addr = meta.nat64_next_hop_mac;
        hdr.ethernet.src_addr = meta.nat64_router_mac;
    }
}

// IPv4 to IPv6 (RFC 7915 section 4), in OgIngress's IPv4 branch for a session_nat64_reply hit,
// instead of NAT, routing and session set-up: the IPv6 header from the IPv4 one, the inside
// host's port (identifier) back, the checksum adjusted, the session's IPv6 route.
control Nat64Inbound(inout headers_t hdr, inout local_metadata_t meta) {
    apply {
        bool icmp_echo = hdr.icmp.isValid() && (hdr.icmp.icmp_type == ICMP_ECHO_REPLY
                                                || hdr.icmp.icmp_type == ICMP_ECHO_REQUEST);
        bool fragment = hdr.ipv4.flags[0:0] == 1 || hdr.ipv4.frag_offset != 0;
        if (meta.drop_session != 0) {
            // Blocked (session_block): DropDecision drops it.
        } else if (meta.icmp_error == 1 && hdr.ipv4.ihl == 5 && !fragment) {
            // An ICMP error about the flow (its quoted packet is the flow's): RFC 7915 section
            // 4.2 translates the quoted packet too, which the CPM does (metered like every
            // packet-in) before it sends the ICMPv6 error to the inside host.
            meta.to_cpu = 1;
            meta.cpu_reason = CPU_REASON_NAT64_ICMP_ERROR;
            meta.egress_port = CPU_PORT;
        } else if (hdr.ipv4.ihl != 5 || fragment || meta.icmp_error == 1
                || (hdr.icmp.isValid() && !icmp_echo)
                || (hdr.udp.isValid() && hdr.udp.checksum == 0)) {
            meta.drop_fwd = DROP_NAT64_UNTRANSLATABLE;
        } else if (hdr.ipv4.ttl[7:1] == 0) {
            meta.drop_fwd = DROP_TTL_EXPIRED;
        } else {
            bit<16> payload_len = hdr.ipv4.total_len - 20;
            bit<32> v6_words = words_of(meta.nat64_src_hi) + words_of(meta.nat64_src_lo)
                + words_of(meta.nat64_dst_hi) + words_of(meta.nat64_dst_lo);
            bit<32> addrs = complements_of(hdr.ipv4.src_addr ++ hdr.ipv4.dst_addr) + v6_words;
            if (hdr.tcp.isValid()) {
                hdr.tcp.checksum = csum_fold((bit<32>)(~hdr.tcp.checksum) + addrs
                    + (bit<32>)(~hdr.tcp.dport) + (bit<32>)meta.nat64_l4_port);
                hdr.tcp.dport = meta.nat64_l4_port;
            } else if (hdr.udp.isValid()) {
                hdr.udp.checksum = csum_fold((bit<32>)(~hdr.udp.checksum) + addrs
                    + (bit<32>)(~hdr.udp.dport) + (bit<32>)meta.nat64_l4_port);
                if (hdr.udp.checksum == 0) {
                    hdr.udp.checksum = 0xffff;
                }
                hdr.udp.dport = meta.nat64_l4_port;
            } else if (hdr.icmp.isValid()) {
                // An echo: ICMPv6's checksum takes the pseudo-header in; a reply's identifier
                // is the inside host's.
                bit<8> new_type = ICMPV6_ECHO_REQUEST;
                bit<16> new_ident = hdr.icmp.identifier;
                if (hdr.icmp.icmp_type == ICMP_ECHO_REPLY) {
                    new_type = ICMPV6_ECHO_REPLY;
                    new_ident = meta.nat64_l4_port;
                }
                hdr.icmp.checksum = csum_fold((bit<32>)(~hdr.icmp.checksum)
                    + (bit<32>)(~(hdr.icmp.icmp_type ++ hdr.icmp.code))
                    + (bit<32>)(~hdr.icmp.identifier) + v6_words + (bit<32>)payload_len
                    + (bit<32>)(8w0 ++ IP_PROTO_ICMPV6)
                    + (bit<32>)(new_type ++ hdr.icmp.code) + (bit<32>)new_ident);
                hdr.icmp.icmp_type = new_type;
                hdr.icmp.identifier = new_ident;
            }
            hdr.ipv6.setValid();
            hdr.ipv6.version = 6;
            hdr.ipv6.traffic_class = hdr.ipv4.dscp_ecn;
            hdr.ipv6.flow_label = 0;
            hdr.ipv6.payload_len = payload_len;
            hdr.ipv6.next_hdr = hdr.ipv4.protocol;
            if (hdr.icmp.isValid()) {
                hdr.ipv6.next_hdr = IP_PROTO_ICMPV6;
            }
            hdr.ipv6.hop_limit = hdr.ipv4.ttl - 1;
            hdr.ipv6.src_hi = meta.nat64_src_hi;
            hdr.ipv6.src_lo = meta.nat64_src_lo;
            hdr.ipv6.dst_hi = meta.nat64_dst_hi;
            hdr.ipv6.dst_lo = meta.nat64_dst_lo;
            hdr.ipv4.setInvalid();
            if (hdr.vlan.isValid()) {
                hdr.vlan.ether_type = ETHERTYPE_IPV6;
            } else {
                hdr.ethernet.ether_type = ETHERTYPE_IPV6;
            }
            meta.egress_port = meta.nat64_egress;
            hdr.ethernet.dst_addr = meta.nat64_next_hop_mac;
            hdr.ethernet.src_addr = meta.nat64_router_mac;
        }
    }
}

#endif
