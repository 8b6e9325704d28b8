// Step 8: NAT. PortForward and NatPolicy say whether a session being set up needs NAT (then the
// controller allocates it, or the data plane: SessionSetup); Nat applies a session's rewrite with incremental checksum updates (RFC 1624), so
// neither the payload nor Ethernet padding is ever read.
#ifndef OPENGATE_CONTROL_NAT_P4
#define OPENGATE_CONTROL_NAT_P4

// One's-complement update of `csum` when a 32-bit word changes from old_v to new_v and a 16-bit
// word from old_p to new_p: HC' = ~(~HC + ~m + m'). The v1model shell's OG_L4_CSUM_REPLACE uses
// it; the TNA shell instead flags the packet and its deparser's Checksum extern recomputes the
// checksum from the residual the parser deposited.
bit<16> csum_replace(in bit<16> csum, in bit<32> old_v, in bit<32> new_v,
                     in bit<16> old_p, in bit<16> new_p) {
    bit<32> sum = (bit<32>)(~csum)
        + (bit<32>)(~old_v[31:16]) + (bit<32>)(~old_v[15:0])
        + (bit<32>)new_v[31:16] + (bit<32>)new_v[15:0]
        + (bit<32>)(~old_p) + (bit<32>)new_p;
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return ~sum[15:0];
}

#ifdef OG_ICMP_RELATED
// The same with a second 32-bit word changed (for an ICMP error's quoted packet, Nat).
bit<16> csum_replace_more(in bit<16> csum, in bit<32> old_v, in bit<32> new_v,
                          in bit<16> old_p, in bit<16> new_p, in bit<32> old_w, in bit<32> new_w) {
    bit<32> sum = (bit<32>)(~csum)
        + (bit<32>)(~old_v[31:16]) + (bit<32>)(~old_v[15:0])
        + (bit<32>)new_v[31:16] + (bit<32>)new_v[15:0]
        + (bit<32>)(~old_p) + (bit<32>)new_p
        + (bit<32>)(~old_w[31:16]) + (bit<32>)(~old_w[15:0])
        + (bit<32>)new_w[31:16] + (bit<32>)new_w[15:0];
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return ~sum[15:0];
}
#endif

// Before routing, for a packet without a session: is it to a port forward? A forward the
// controller sets up (port_forward) goes to it as a new NAT flow; one the data plane carries
// (port_forward_dp) is rewritten here to its target, from the rule alone, unless the packet goes
// to its SPM first (the SPM sees the flow as it arrived, as with the controller's forwards): then
// it is rewritten on its way back. SessionSetup gives its flow a slot, keyed by its public end.
control PortForward(inout headers_t hdr, inout local_metadata_t meta) {
    @name(".port_forward")
    action port_forward() {
        meta.dnat_required = 1;
    }

#ifdef OG_DP_SESSIONS
    @name(".port_forward_dp")
    action port_forward_dp(ipv4_addr_t to_addr, l4_port_t to_port) {
        meta.dnat_required = 1;
        meta.dp_dnat = 1;
        meta.dp_dnat_addr = to_addr;
        meta.dp_dnat_port = to_port;
    }
#endif

    // Destination NAT: a packet to one of these (address, protocol, port) needs a port forward.
    @name(".dnat_rule")
    table dnat_rule {
        key = {
            hdr.ipv4.dst_addr : exact @name("ipv4_dst");
            hdr.ipv4.protocol : exact @name("ip_proto");
            meta.l4_dport     : exact @name("l4_dport");
        }
        actions = {
            port_forward;
#ifdef OG_DP_SESSIONS
            port_forward_dp;
#endif
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = NAT_TABLE_SIZE;
    }

    apply {
        dnat_rule.apply();
#ifdef OG_DP_SESSIONS
        if (meta.dp_dnat == 1 && (meta.returned == 1 || meta.sel_spm_port == 0)) {
            meta.nat_kind = NAT_REWRITE_DST;
            meta.nat_addr = meta.dp_dnat_addr;
            meta.nat_port = meta.dp_dnat_port;
            meta.dp_dnat_now = 1;
        }
#endif
    }
}

// After routing, for a packet without a session: does it leave masqueraded?
control NatPolicy(inout headers_t hdr, inout local_metadata_t meta) {
    @name(".masquerade")
    action masquerade() {
        meta.snat_required = 1;
    }

#ifdef OG_DP_SESSIONS
    // Masquerade as `address`, the data plane picking the port of a new flow from the block of
    // NAT_DP_SLOTS ports at port_base (SessionSetup); the controller's own ports lie outside it.
    @name(".masquerade_dp")
    action masquerade_dp(ipv4_addr_t address, l4_port_t port_base) {
        meta.snat_required = 1;
        meta.dp_nat = 1;
        meta.dp_nat_addr = address;
        meta.dp_nat_base = port_base;
    }
#endif

    // Source NAT: traffic from these sources leaving by this port is masqueraded.
    @name(".snat_rule")
    table snat_rule {
        key = {
            meta.egress_port  : exact @name("egress_port");
            hdr.ipv4.src_addr : lpm @name("ipv4_src");
        }
        actions = {
            masquerade;
#ifdef OG_DP_SESSIONS
            masquerade_dp;
#endif
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = NAT_TABLE_SIZE;
    }

    apply {
        if (meta.routed == 1) {
            snat_rule.apply();
        }
    }
}

control Nat(inout headers_t hdr, inout local_metadata_t meta) {
    apply {
        if (meta.nat_kind == NAT_REWRITE_SRC) {
            ipv4_addr_t old_addr = hdr.ipv4.src_addr;
            hdr.ipv4.src_addr = meta.nat_addr;
            if (hdr.tcp.isValid()) {
                OG_L4_CSUM_REPLACE(meta, hdr.tcp.checksum, old_addr, meta.nat_addr,
                                                hdr.tcp.sport, meta.nat_port);
                hdr.tcp.sport = meta.nat_port;
            } else if (hdr.udp.isValid()) {
                if (hdr.udp.checksum != 0) {
                    OG_UDP_CSUM_REPLACE(meta, hdr.udp.checksum, old_addr, meta.nat_addr,
                                        hdr.udp.sport, meta.nat_port);
                }
                hdr.udp.sport = meta.nat_port;
            } else if (hdr.icmp.isValid() && hdr.icmp.icmp_type == ICMP_ECHO_REQUEST) {
                // No pseudo-header in ICMP: only the identifier enters its checksum.
                OG_L4_CSUM_REPLACE(meta, hdr.icmp.checksum, 0, 0,
                                                 hdr.icmp.identifier, meta.nat_port);
                hdr.icmp.identifier = meta.nat_port;
            }
#ifdef OG_ICMP_RELATED
            if (meta.icmp_error == 0) {
                meta.l4_sport = meta.nat_port;
            }
            meta.flow_src = meta.nat_addr;
            meta.flow_sport = meta.nat_port;
#else
            meta.l4_sport = meta.nat_port;
#endif
            meta.nat_applied = 1;
        } else if (meta.nat_kind == NAT_REWRITE_DST) {
            ipv4_addr_t old_addr = hdr.ipv4.dst_addr;
            hdr.ipv4.dst_addr = meta.nat_addr;
            if (hdr.tcp.isValid()) {
                OG_L4_CSUM_REPLACE(meta, hdr.tcp.checksum, old_addr, meta.nat_addr,
                                                hdr.tcp.dport, meta.nat_port);
                hdr.tcp.dport = meta.nat_port;
            } else if (hdr.udp.isValid()) {
                if (hdr.udp.checksum != 0) {
                    OG_UDP_CSUM_REPLACE(meta, hdr.udp.checksum, old_addr, meta.nat_addr,
                                        hdr.udp.dport, meta.nat_port);
                }
                hdr.udp.dport = meta.nat_port;
            } else if (hdr.icmp.isValid() && hdr.icmp.icmp_type == ICMP_ECHO_REPLY) {
                OG_L4_CSUM_REPLACE(meta, hdr.icmp.checksum, 0, 0,
                                                 hdr.icmp.identifier, meta.nat_port);
                hdr.icmp.identifier = meta.nat_port;
            }
#ifdef OG_ICMP_RELATED
            if (meta.icmp_error == 0) {
                meta.l4_dport = meta.nat_port;
            }
            meta.flow_dst = meta.nat_addr;
            meta.flow_dport = meta.nat_port;
#else
            meta.l4_dport = meta.nat_port;
#endif
            meta.nat_applied = 1;
        }
#ifdef OG_ICMP_RELATED
        // An ICMP error about a translated flow's packet quotes that packet as it was on the
        // wire: the quoted address and port on the side the outer header changed change too
        // (RFC 5508; a rewritten destination means the error goes to the quoted packet's
        // source, and the other way round; a quoted echo request's port is its identifier).
        // The quoted IPv4 checksum, a quoted UDP or ICMP checksum and the ICMP checksum, which
        // covers the quoted bytes, are updated incrementally (RFC 1624). A quoted TCP checksum
        // lies beyond the 8 bytes read and is left as it was: hosts do not check it.
        if (meta.icmp_error == 1 && meta.nat_kind != NAT_NONE
                && (meta.quoted_echo == 0 || meta.nat_kind == NAT_REWRITE_DST)) {
            // Old values in metadata fields, not locals, and each step's result in its field:
            // p4c would otherwise nest the checksum expressions into one another.
            meta.quoted_old_addr = hdr.quoted_ipv4.dst_addr;
            meta.quoted_old_port = hdr.quoted_l4.dport;
            if (meta.nat_kind == NAT_REWRITE_DST) {
                meta.quoted_old_addr = hdr.quoted_ipv4.src_addr;
                hdr.quoted_ipv4.src_addr = meta.nat_addr;
                if (meta.quoted_echo == 1) {
                    meta.quoted_old_port = hdr.quoted_l4.word2;
                    hdr.quoted_l4.word2 = meta.nat_port;
                } else {
                    meta.quoted_old_port = hdr.quoted_l4.sport;
                    hdr.quoted_l4.sport = meta.nat_port;
                }
            } else {
                hdr.quoted_ipv4.dst_addr = meta.nat_addr;
                hdr.quoted_l4.dport = meta.nat_port;
            }
            meta.quoted_old_ip_csum = hdr.quoted_ipv4.hdr_checksum;
            hdr.quoted_ipv4.hdr_checksum = csum_replace(meta.quoted_old_ip_csum,
                meta.quoted_old_addr, meta.nat_addr, 0, 0);
            if (meta.quoted_echo == 1) {
                // An echo's checksum has no pseudo-header: only the identifier changed.
                meta.quoted_old_l4_csum = hdr.quoted_l4.dport;
                hdr.quoted_l4.dport = csum_replace(meta.quoted_old_l4_csum, 0, 0,
                    meta.quoted_old_port, meta.nat_port);
                meta.quoted_new_l4_csum = hdr.quoted_l4.dport;
            } else {
                meta.quoted_old_l4_csum = hdr.quoted_l4.word3;
                if (hdr.quoted_ipv4.protocol == IP_PROTO_UDP && meta.quoted_old_l4_csum != 0) {
                    hdr.quoted_l4.word3 = csum_replace(meta.quoted_old_l4_csum,
                        meta.quoted_old_addr, meta.nat_addr, meta.quoted_old_port, meta.nat_port);
                    if (hdr.quoted_l4.word3 == 0) {
                        hdr.quoted_l4.word3 = 0xffff;
                    }
                }
                meta.quoted_new_l4_csum = hdr.quoted_l4.word3;
            }
            // Address, port and both checksums: the ICMP checksum covers all four.
            hdr.icmp.checksum = csum_replace_more(hdr.icmp.checksum, meta.quoted_old_addr,
                meta.nat_addr, meta.quoted_old_port, meta.nat_port,
                meta.quoted_old_ip_csum ++ meta.quoted_old_l4_csum,
                hdr.quoted_ipv4.hdr_checksum ++ meta.quoted_new_l4_csum);
        }
#endif
    }
}

#endif
