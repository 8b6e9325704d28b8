// IPv6 (v1model builds, OG_IPV6): neighbour discovery for the gateway's own addresses, stateful
// firewalling by sessions the CPM installs, routing, and the packets the CPM answers (hop limit
// run out, no route, a ping of the gateway). docs/explanation/ipv6.md walks through it.
//
// Inspection: a session's entry may pin its flow to an SPM (the CPM chose the class and the
// pool's member when it set the session up); both directions go there first, tagged as IPv4's
// are, and are routed when they come back with the tag.
//
// A flow opens by its first packet (a TCP SYN, any UDP datagram, an ICMPv6 echo request) that the
// ACL permits: it goes to the CPM (CPU_REASON_SESSION_V6), which installs the session's two exact
// entries (original and reply direction) in session_v6 and sends the packet back through the
// pipeline, where it now hits. Every later packet of either direction hits session_v6; a TCP
// packet of no session is dropped (DROP_NO_SESSION), so an inbound connection that no rule
// permits never reaches an inside host (RFC 6092). ICMPv6 errors and other protocols the ACL
// permits are forwarded without a session.
#ifndef OPENGATE_CONTROL_IPV6_P4
#define OPENGATE_CONTROL_IPV6_P4

// ff02::1:ff00:0/104, the solicited-node multicast prefix (RFC 4291 section 2.7.1), as the
// destination's high half and the top 40 bits of its low half.
const ipv6_half_t SOLICITED_NODE_HI = 0xff02000000000000;
const bit<40>     SOLICITED_NODE_LO = 0x00000001ff;
const ipv6_half_t ALL_NODES_HI = 0xff02000000000000;
const ipv6_half_t ALL_NODES_LO = 0x0000000000000001;
const mac_addr_t  ALL_NODES_MAC = 0x333300000001;

// An address's high half translated by NPTv6 (below): the prefix's bits replaced, the subnet
// word adjusted in one's complement arithmetic, 0xffff folded to 0.
ipv6_half_t npt_translate(in ipv6_half_t hi, in ipv6_half_t prefix, in ipv6_half_t mask,
                          in bit<16> adjustment) {
    ipv6_half_t mapped = (hi & ~mask) | prefix;
    bit<17> sum = (bit<17>)mapped[15:0] + (bit<17>)adjustment;
    bit<16> word = sum[15:0] + (bit<16>)sum[16:16];
    if (word == 0xffff) {
        word = 0;
    }
    return mapped[63:16] ++ word;
}

control Ipv6Pipeline(inout headers_t hdr, inout local_metadata_t meta) {
    Nat64Outbound() nat64_outbound;

    @name(".nd_advertise")
    action nd_advertise(mac_addr_t mac) {
        meta.router_mac = mac;
        meta.nd_reply = 1;
    }

    @name(".nd_ignore")
    action nd_ignore() {
        meta.drop_arp = DROP_UNSUPPORTED;
    }

    // The gateway's own IPv6 addresses (and each port's link-local one) and the MAC it answers
    // a neighbour solicitation for them with.
    @name(".nd_responder")
    table nd_responder {
        key = {
            hdr.nd_target.target_hi : exact @name("target_hi");
            hdr.nd_target.target_lo : exact @name("target_lo");
        }
        actions = { nd_advertise; @defaultonly nd_ignore; }
        const default_action = nd_ignore();
        size = ND_TABLE_SIZE;
    }

    @name(".session_v6_counter")
    OG_DIRECT_COUNTER(session_v6_counter);

    // spm_port 0: no inspection (or bypassed); otherwise the SPM the CPM pinned the flow to,
    // which both directions visit before they are routed (IPv6 is not translated, so there is
    // no NAT to do before or after it).
    @name(".session_v6_forward")
    action session_v6_forward(class_id_t class_id, port_id_t spm_port, mac_addr_t spm_mac) {
        meta.session_hit = 1;
        meta.session_class = class_id;
        meta.spm_port = spm_port;
        meta.spm_mac = spm_mac;
        OG_DIRECT_COUNT(session_v6_counter);
    }

    // The original direction of a NAT64 session (control/nat64.p4): the IPv4 addresses and
    // source port (identifier) it leaves with, and its IPv4 route. No SPM.
    @name(".session_v6_nat64")
    action session_v6_nat64(ipv4_addr_t v4_src, ipv4_addr_t v4_dst, l4_port_t sport,
                            port_id_t port, mac_addr_t next_hop_mac, mac_addr_t router_mac) {
        meta.session_hit = 1;
        meta.session_class = 0;
        meta.spm_port = 0;
        meta.nat64_out = 1;
        meta.nat64_v4_src = v4_src;
        meta.nat64_v4_dst = v4_dst;
        meta.nat64_l4_port = sport;
        meta.nat64_egress = port;
        meta.nat64_next_hop_mac = next_hop_mac;
        meta.nat64_router_mac = router_mac;
        OG_DIRECT_COUNT(session_v6_counter);
    }

    @name(".session_v6_block")
    action session_v6_block() {
        meta.session_hit = 1;
        meta.drop_session = DROP_SESSION_BLOCKED;
        OG_DIRECT_COUNT(session_v6_counter);
    }

    @name(".session_v6_miss")
    action session_v6_miss() {
        meta.session_hit = 0;
    }

    // One exact entry per direction, keyed on the packet as it arrives.
    @name(".session_v6")
    table session_v6 {
        key = {
            hdr.ipv6.src_hi : exact @name("ipv6_src_hi");
            hdr.ipv6.src_lo : exact @name("ipv6_src_lo");
            hdr.ipv6.dst_hi : exact @name("ipv6_dst_hi");
            hdr.ipv6.dst_lo : exact @name("ipv6_dst_lo");
            meta.l4_proto   : exact @name("ip_proto");
            meta.l4_sport   : exact @name("l4_sport");
            meta.l4_dport   : exact @name("l4_dport");
        }
        actions = {
            session_v6_forward;
            session_v6_nat64;
            session_v6_block;
            @defaultonly session_v6_miss;
        }
        const default_action = session_v6_miss();
        counters = session_v6_counter;
        OG_SESSION_IDLE_TIMEOUT;
        size = SESSION_V6_TABLE_SIZE;
    }

    @name(".ipv6_acl_permit")
    action ipv6_acl_permit(rule_id_t rule) {
        meta.acl_verdict = ACL_PERMIT;
        meta.acl_rule = rule;
    }

    @name(".ipv6_acl_deny")
    action ipv6_acl_deny(rule_id_t rule) {
        meta.acl_verdict = ACL_DENY;
        meta.acl_rule = rule;
    }

    @name(".ipv6_acl_to_cpu")
    action ipv6_acl_to_cpu(rule_id_t rule) {
        meta.acl_verdict = ACL_TO_CPU;
        meta.acl_rule = rule;
    }

    // The policy's ACL rules that apply to IPv6, first match by priority (a TCAM on hardware);
    // the default entry is the policy's default verdict. ICMPv6 rules may name the type.
    @name(".ipv6_acl")
    table ipv6_acl {
        key = {
            hdr.ipv6.src_hi  : ternary @name("ipv6_src_hi");
            hdr.ipv6.src_lo  : ternary @name("ipv6_src_lo");
            hdr.ipv6.dst_hi  : ternary @name("ipv6_dst_hi");
            hdr.ipv6.dst_lo  : ternary @name("ipv6_dst_lo");
            meta.l4_proto    : ternary @name("ip_proto");
            meta.l4_sport    : range @name("l4_sport");
            meta.l4_dport    : range @name("l4_dport");
            meta.icmpv6_type : ternary @name("icmpv6_type");
        }
        actions = { ipv6_acl_permit; ipv6_acl_deny; ipv6_acl_to_cpu; }
        default_action = ipv6_acl_deny(RULE_NONE);
        size = IPV6_ACL_TABLE_SIZE;
    }

    @name(".route_v6_to")
    action route_v6_to(port_id_t port, mac_addr_t next_hop_mac, mac_addr_t router_mac) {
        meta.egress_port = port;
        meta.next_hop_mac = next_hop_mac;
        meta.router_mac = router_mac;
        meta.routed = 1;
    }

    // A NAT64 prefix (RFC 6052's 64:ff9b::/96 or the policy's own): its flows open at the CPM,
    // which translates them (session_v6_nat64); without a session nothing is sent there.
    @name(".route_v6_nat64")
    action route_v6_nat64() {
        meta.routed = 1;
        meta.nat64_prefix = 1;
    }

    @name(".no_route_v6")
    action no_route_v6() {
        meta.routed = 0;
        meta.route_drop = DROP_NO_ROUTE;
    }

    // Longest prefix first: a /n route is a ternary entry on the two halves with priority n + 1
    // (the CPM writes it so), as one LPM key cannot span two fields.
    @name(".routing_v6")
    table routing_v6 {
        key = {
            hdr.ipv6.dst_hi : ternary @name("ipv6_dst_hi");
            hdr.ipv6.dst_lo : ternary @name("ipv6_dst_lo");
        }
        // no_route_v6 as an entry: the gateway's own addresses (a /128 each), so that a
        // default route does not take a ping of the gateway out of it (the CPM answers it).
        actions = { route_v6_to; route_v6_nat64; no_route_v6; }
        const default_action = no_route_v6();
        size = ROUTE_V6_TABLE_SIZE;
    }

    // NPTv6 (RFC 6296): an inside prefix of /48 or shorter maps one to one onto an outside
    // prefix of the same length, stateless and checksum-neutral. The prefix's bits are replaced
    // and the 16-bit word that follows a /48 (bits 79..64 of the address, the low 16 bits of the
    // high half) takes the mapping's adjustment in one's complement arithmetic (0xffff becomes
    // 0), so that the address's one's-complement sum, and with it every transport checksum over
    // the pseudo-header, is unchanged. The CPM computes the adjustment of each direction.
    @name(".npt_rewrite_dst")
    action npt_rewrite_dst(ipv6_half_t prefix, ipv6_half_t mask, bit<16> adjustment) {
        hdr.ipv6.dst_hi = npt_translate(hdr.ipv6.dst_hi, prefix, mask, adjustment);
    }

    @name(".npt_rewrite_src")
    action npt_rewrite_src(ipv6_half_t prefix, ipv6_half_t mask, bit<16> adjustment) {
        hdr.ipv6.src_hi = npt_translate(hdr.ipv6.src_hi, prefix, mask, adjustment);
    }

    // Inbound: a destination in an outside prefix, on the port the mapping is for, becomes the
    // inside address before anything looks at it (sessions, the ACL and routes see inside
    // addresses only).
    @name(".nptv6_inbound")
    table nptv6_inbound {
        key = {
            meta.ingress_port : exact @name("ingress_port");
            hdr.ipv6.dst_hi   : ternary @name("ipv6_dst_hi");
        }
        actions = { npt_rewrite_dst; @defaultonly NoAction; }
        const default_action = NoAction();
        size = NPTV6_TABLE_SIZE;
    }

    // Outbound: a source in an inside prefix, leaving by its route through the mapping's port,
    // becomes the outside address (last, after the MAC rewrite).
    @name(".nptv6_outbound")
    table nptv6_outbound {
        key = {
            meta.egress_port : exact @name("egress_port");
            hdr.ipv6.src_hi  : ternary @name("ipv6_src_hi");
        }
        actions = { npt_rewrite_src; @defaultonly NoAction; }
        const default_action = NoAction();
        size = NPTV6_TABLE_SIZE;
    }

    apply {
        if (hdr.icmp.isValid()) {
            meta.icmpv6_type = hdr.icmp.icmp_type;
        }
        bool unspecified_src = hdr.ipv6.src_hi == 0 && hdr.ipv6.src_lo == 0;
        bool multicast_dst = hdr.ipv6.dst_hi[63:56] == 0xff;
        if (meta.nd_solicit == 1) {
            // RFC 4861 section 7.1.1: hop limit 255, code 0, a unicast target; to the target or
            // its solicited-node group; from the unspecified address (duplicate address
            // detection) only to the group and without a link-layer address option.
            bool to_group = hdr.ipv6.dst_hi == SOLICITED_NODE_HI
                && hdr.ipv6.dst_lo[63:24] == SOLICITED_NODE_LO
                && hdr.ipv6.dst_lo[23:0] == hdr.nd_target.target_lo[23:0];
            bool to_target = hdr.ipv6.dst_hi == hdr.nd_target.target_hi
                && hdr.ipv6.dst_lo == hdr.nd_target.target_lo;
            if (meta.checksum_error == 1) {
                meta.drop_arp = DROP_BAD_CHECKSUM;
            } else if (hdr.ipv6.hop_limit != 255 || hdr.icmp.code != 0
                    || hdr.nd_target.target_hi[63:56] == 0xff
                    || !(to_group || to_target)
                    || (unspecified_src && (!to_group || hdr.nd_option.isValid()))) {
                meta.drop_arp = DROP_UNSUPPORTED;
            } else {
                nd_responder.apply();
            }
            if (meta.nd_reply == 1) {
                // The advertisement (RFC 4861 section 7.2.4): router, override, and solicited
                // unless it answers duplicate address detection, which goes to all nodes.
                if (unspecified_src) {
                    hdr.ipv6.dst_hi = ALL_NODES_HI;
                    hdr.ipv6.dst_lo = ALL_NODES_LO;
                    hdr.ethernet.dst_addr = ALL_NODES_MAC;
                    hdr.icmp.identifier = 0xa000;
                } else {
                    hdr.ipv6.dst_hi = hdr.ipv6.src_hi;
                    hdr.ipv6.dst_lo = hdr.ipv6.src_lo;
                    hdr.ethernet.dst_addr = hdr.ethernet.src_addr;
                    hdr.icmp.identifier = 0xe000;
                }
                hdr.ipv6.src_hi = hdr.nd_target.target_hi;
                hdr.ipv6.src_lo = hdr.nd_target.target_lo;
                hdr.ipv6.hop_limit = 255;
                hdr.ipv6.payload_len = 32;
                hdr.icmp.icmp_type = ICMPV6_NEIGHBOR_ADVERT;
                hdr.icmp.seq_no = 0;
                hdr.nd_option.setValid();
                hdr.nd_option.opt_type = ND_OPT_TARGET_LL_ADDR;
                hdr.nd_option.opt_len = 1;
                hdr.nd_option.mac = meta.router_mac;
                hdr.ethernet.src_addr = meta.router_mac;
                meta.egress_port = meta.ingress_port;
            }
        } else if (multicast_dst || hdr.ipv6.dst_hi[63:54] == 0x3fa
                || hdr.ipv6.src_hi[63:54] == 0x3fa) {
            // Multicast (MLD, router solicitations...) and link-local traffic stays on its link
            // (RFC 4291 section 2.5.6): the gateway neither forwards nor answers it.
            meta.drop_arp = DROP_UNSUPPORTED;
        } else {
            if (meta.port_role == ROLE_OUTSIDE) {
                nptv6_inbound.apply();
            }
            // From an inside host, a hop limit that runs out here: to the CPM as it arrived,
            // which answers with a time exceeded (traceroute), before any filter.
            if (hdr.ipv6.hop_limit[7:1] == 0 && hdr.ethernet.dst_addr[40:40] == 0) {
                meta.last_hop = 1;
            }
            if (og_expires_here(meta)) {
                meta.expires_here = 1;
                meta.to_cpu = 1;
                meta.cpu_reason = CPU_REASON_TTL_EXPIRED;
            }
            if (meta.expires_here == 0 && og_session_lookup(meta)) {
                session_v6.apply();
            }
            if (meta.expires_here == 0 && meta.session_hit == 0) {
                ipv6_acl.apply();
            }
            if (hdr.ipv6.hop_limit[7:1] == 0) {
                meta.route_drop = DROP_TTL_EXPIRED;
            }
            routing_v6.apply();
            bool opening = (hdr.tcp.isValid()
                    && (hdr.tcp.flags & (TCP_FLAG_SYN | TCP_FLAG_ACK | TCP_FLAG_RST | TCP_FLAG_FIN))
                        == TCP_FLAG_SYN)
                || hdr.udp.isValid()
                || (hdr.icmp.isValid() && hdr.icmp.icmp_type == ICMPV6_ECHO_REQUEST);
            bool needs_session = hdr.tcp.isValid()
                || (hdr.icmp.isValid() && hdr.icmp.icmp_type == ICMPV6_ECHO_REPLY);
            if (meta.expires_here == 1) {
                // To the CPM (above).
            } else if (meta.nat64_out == 1) {
                // NAT64 (its session has its route): what RFC 7915 maps here is translated
                // below, unless the hop limit runs out.
                if (meta.ipv6_plain == 0 || !(hdr.tcp.isValid() || hdr.udp.isValid()
                        || (hdr.icmp.isValid() && (hdr.icmp.icmp_type == ICMPV6_ECHO_REQUEST
                                                   || hdr.icmp.icmp_type == ICMPV6_ECHO_REPLY)))) {
                    meta.drop_fwd = DROP_NAT64_UNTRANSLATABLE;
                } else if (hdr.ipv6.hop_limit[7:1] == 0) {
                    meta.drop_fwd = DROP_TTL_EXPIRED;
                }
            } else if (og_admitted(meta) && meta.port_role == ROLE_INSIDE && meta.routed == 0
                    && meta.drop_session == 0
                    && (meta.session_hit == 1 || meta.acl_verdict == ACL_PERMIT)
                    && hdr.ethernet.dst_addr[40:40] == 0) {
                // Permitted, from inside, and no route takes it (or it is for the gateway):
                // the CPM answers (destination unreachable, or an echo reply).
                meta.to_cpu = 1;
                meta.cpu_reason = CPU_REASON_NO_ROUTE;
            } else if (meta.session_hit == 1 && meta.spm_port != 0 && meta.returned == 0) {
                // To the session's SPM (the route's verdict holds when it comes back).
                meta.meter_class = meta.session_class;
            } else if (meta.session_hit == 1) {
                meta.meter_class = meta.session_class;
                meta.drop_fwd = meta.route_drop;
            } else if (meta.returned == 1) {
                // Back from an SPM, and its session is gone: no session admits it.
                meta.drop_setup = DROP_NO_SESSION;
            } else if (meta.acl_verdict == ACL_DENY) {
                meta.drop_setup = DROP_ACL_DENY;
            } else if (meta.acl_verdict == ACL_TO_CPU) {
                meta.to_cpu = 1;
                meta.cpu_reason = CPU_REASON_ACL;
            } else if (meta.route_drop != 0) {
                meta.drop_fwd = meta.route_drop;
            } else if (meta.nat64_prefix == 1 && !opening) {
                // To a NAT64 prefix, of no session: nothing to translate it with.
                meta.drop_setup = DROP_NO_SESSION;
            } else if (opening) {
                meta.to_cpu = 1;
                meta.cpu_reason = CPU_REASON_SESSION_V6;
            } else if (needs_session) {
                meta.drop_setup = DROP_NO_SESSION;
            }
            if (meta.to_cpu == 1 && meta.port_role == ROLE_CPU) {
                // Sent by the CPM and bound for it again (its session was not installed).
                meta.to_cpu = 0;
                meta.drop_setup = DROP_CPU_LOOP;
            }
            if (meta.session_hit == 1 && hdr.tcp.isValid()
                    && (hdr.tcp.flags & (TCP_FLAG_FIN | TCP_FLAG_RST)) != 0) {
                meta.send_session_close = 1;
                meta.close_v6 = 1;
                meta.close_src_hi = hdr.ipv6.src_hi;
                meta.close_src_lo = hdr.ipv6.src_lo;
                meta.close_dst_hi = hdr.ipv6.dst_hi;
                meta.close_dst_lo = hdr.ipv6.dst_lo;
            }
            if (meta.to_cpu == 1) {
                meta.egress_port = CPU_PORT;
            } else if (meta.session_hit == 1 && meta.spm_port != 0 && meta.returned == 0) {
                // Towards the SPM: the tag rides in the source MAC (NAT bit 0: nothing to do).
                meta.egress_port = meta.spm_port;
                hdr.ethernet.dst_addr = meta.spm_mac;
                hdr.ethernet.src_addr = TAG_MAC_PREFIX ++ meta.tag_base;
            } else if (meta.nat64_out == 1 && meta.drop_fwd == 0) {
                nat64_outbound.apply(hdr, meta);
            } else if (meta.routed == 1 && hdr.ipv6.hop_limit[7:1] != 0) {
                hdr.ipv6.hop_limit = hdr.ipv6.hop_limit - 1;
                hdr.ethernet.dst_addr = meta.next_hop_mac;
                if (meta.router_mac != 0) {
                    hdr.ethernet.src_addr = meta.router_mac;
                }
                nptv6_outbound.apply();
            }
        }
    }
}

#endif
