// Step 3: bidirectional sessions, one exact-match entry per direction, keyed on the 5-tuple as the
// packet arrives (an ICMP error about a flow's packet: the flow's, FLOW_* in headers.p4). A hit
// says how to inspect (pinned SPM), how to NAT, and counts the packet.
#ifndef OPENGATE_CONTROL_SESSION_P4
#define OPENGATE_CONTROL_SESSION_P4

control Session(inout headers_t hdr, inout local_metadata_t meta) {
    @name(".session_counter")
    OG_DIRECT_COUNTER(session_counter);

    // spm_port 0: no inspection (or bypassed). nat_before_spm: reply direction of a NAT session,
    // rewritten before inspection so that the SPM sees both directions with the same addresses.
    @name(".session_forward")
    action session_forward(class_id_t class_id, port_id_t spm_port, mac_addr_t spm_mac,
                           nat_kind_t nat_kind, ipv4_addr_t nat_addr, l4_port_t nat_port,
                           bit<1> nat_before_spm) {
        meta.session_hit = 1;
        meta.session_class = class_id;
        meta.spm_port = spm_port;
        meta.spm_mac = spm_mac;
        meta.nat_kind = nat_kind;
        meta.nat_addr = nat_addr;
        meta.nat_port = nat_port;
        meta.nat_before_spm = nat_before_spm;
        OG_DIRECT_COUNT(session_counter);
    }

    @name(".session_block")
    action session_block() {
        meta.session_hit = 1;
        meta.drop_session = DROP_SESSION_BLOCKED;
        OG_DIRECT_COUNT(session_counter);
    }

#ifdef OG_IPV6
    // The reply direction of a NAT64 session (control/nat64.p4): the IPv6 packet it becomes,
    // and that packet's route. No SPM: NAT64 flows are not inspected.
    @name(".session_nat64_reply")
    action session_nat64_reply(ipv6_half_t src_hi, ipv6_half_t src_lo, ipv6_half_t dst_hi,
                               ipv6_half_t dst_lo, l4_port_t dport, port_id_t port,
                               mac_addr_t next_hop_mac, mac_addr_t router_mac) {
        meta.session_hit = 1;
        meta.session_class = 0;
        meta.spm_port = 0;
        meta.nat_kind = NAT_NONE;
        meta.nat64_in = 1;
        meta.nat64_src_hi = src_hi;
        meta.nat64_src_lo = src_lo;
        meta.nat64_dst_hi = dst_hi;
        meta.nat64_dst_lo = dst_lo;
        meta.nat64_l4_port = dport;
        meta.nat64_egress = port;
        meta.nat64_next_hop_mac = next_hop_mac;
        meta.nat64_router_mac = router_mac;
        OG_DIRECT_COUNT(session_counter);
    }
#endif

    @name(".session_miss")
    action session_miss() {
        meta.session_hit = 0;
    }

    @name(".session")
    table session {
        key = {
            FLOW_SRC   : exact @name("ipv4_src");
            FLOW_DST   : exact @name("ipv4_dst");
            FLOW_PROTO : exact @name("ip_proto");
            FLOW_SPORT : exact @name("l4_sport");
            FLOW_DPORT : exact @name("l4_dport");
        }
        actions = {
            session_forward;
            session_block;
#ifdef OG_IPV6
            session_nat64_reply;
#endif
            @defaultonly session_miss;
        }
        const default_action = session_miss();
        counters = session_counter;
        OG_SESSION_IDLE_TIMEOUT;
        size = SESSION_TABLE_SIZE;
    }

    apply {
        session.apply();
        if (meta.session_hit == 1 && hdr.tcp.isValid()
                && (hdr.tcp.flags & (TCP_FLAG_FIN | TCP_FLAG_RST)) != 0) {
            meta.send_session_close = 1;
        }
    }
}

#endif
