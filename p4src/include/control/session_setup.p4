// Step 5: sessions made by the data plane, and what to do with a packet that has no session.
//
// Data-plane sessions (where the shell defines OG_DP_SESSIONS): a table of FLOW_SLOTS slots in
// registers. Two hashes (crc32 of the key's fields in two orders) of the direction-agnostic flow
// key (its two ends in order, the lower first) give each flow two candidate slots, the same for both directions; a flow lives in
// either, and a new flow takes the first one no live flow holds. A slot holds the flow's full 5-tuple as its
// first packet arrived (never a fingerprint: a slot admits only its own flow, in either
// direction), its state word (protocol, flags, IDS class), its SPM and the time it was last seen.
// - A permitted opening packet that needs no NAT claims its slot if the slot is free or its flow
//   has aged out, and is forwarded with a digest: the reply and every later packet of both
//   directions are admitted by the slot at once, steered to the same SPM, while the controller
//   installs the exact-match entries (counters, idle timeout, block, bypass) off the critical path.
// - Both candidates held by other live flows is a collision: the packet goes to the controller
//   (packet-in, CPU_REASON_SESSION_COLLISION), which writes its session and sends it on, so that
//   its reply never comes back before the session exists. Counted. (Tofino's too.)
// - Once a direction's exact entry is hit, the slot is marked installed for that direction and
//   only refreshed by it; if a packet of that direction later finds the slot but no exact
//   entry, the controller has removed the session (idle, close, block expiry, API): the slot is
//   freed and the packet is handled as a miss. Per direction, because the controller's two
//   entries do not appear at once: the original's may carry packets before the reply's exists,
//   and the reply must still be admitted by the slot then.
// - Ageing: a slot older than its protocol's idle time (flow_ageing, set by the controller from
//   the policy's timeouts), or than the closing linger after a FIN or RST, is free to reclaim.
// - Masquerade (snat_rule's masquerade_dp): a masqueraded flow lives in one of the first
//   NAT_DP_SLOTS slots, and its public port is the block's base plus its slot's index, so that
//   claiming the slot claims the port. The opening packet leaves rewritten (after its SPM, if it
//   has one); a reply to address:port finds its slot from the port (NatReverse, before routing)
//   and is rewritten back. The digest carries the binding, with which the controller installs
//   the exact entries; packets they carry keep the slot alive, in both directions (NatReverse).
//   Both candidate ports taken: the controller allocates the binding (packet-in), as before.
// - Port forwards (dnat_rule's port_forward_dp): PortForward rewrites the destination before
//   routing, from the rule alone. The flow's slot is keyed by its public end (client, public
//   address and port), so the original direction probes with the packet as it arrived, and a
//   reply, whose source is a forward's target (dnat_dp_reverse), with its source replaced by the
//   forward's public end; a reply its slot admits leaves rewritten to that end. A forward that
//   finds no slot is undone and goes to the controller (packet-in), as before; a reply without a
//   slot never makes a data-plane masquerade (the controller path, as before).
// - New flows per source are metered (new_flow_meter, in packets): a host that opens flows
//   faster than the policy allows has the excess dropped here, before it takes a slot, a digest
//   or the path to the CPU.
//
// The rest (no slot hit) is the verdict on a packet without a session. A permitted opening packet
// (TCP SYN without ACK, UDP, ICMP echo request, other IP protocols) is forwarded and reported with
// a digest; one that needs NAT goes to the controller, which allocates the NAT binding, installs
// both directions and re-injects it. Anything else that needs a session is dropped. A packet back
// from its SPM whose session is gone is dropped if it needed NAT.
#ifndef OPENGATE_CONTROL_SESSION_SETUP_P4
#define OPENGATE_CONTROL_SESSION_SETUP_P4

#ifdef OG_DP_SESSIONS
// The slots, shared by NatReverse (before routing) and SessionSetup (after it).
@name(".flow_key_src")
OG_REGISTER(bit<32>, flow_key_src, FLOW_SLOTS);
@name(".flow_key_dst")
OG_REGISTER(bit<32>, flow_key_dst, FLOW_SLOTS);
@name(".flow_key_ports")
OG_REGISTER(bit<32>, flow_key_ports, FLOW_SLOTS);
@name(".flow_state")
OG_REGISTER(bit<32>, flow_state, FLOW_SLOTS);
@name(".flow_spm")
OG_REGISTER(bit<64>, flow_spm, FLOW_SLOTS);
@name(".flow_seen")
OG_REGISTER(flow_ticks_t, flow_seen, FLOW_SLOTS);
// When the flow was last reported to the controller (its digest): claimed, or reported again.
@name(".flow_reported")
OG_REGISTER(flow_ticks_t, flow_reported, FLOW_SLOTS);
// Masqueraded slots only: public address ++ public port ++ 16 zero bits.
@name(".flow_nat")
OG_REGISTER(bit<64>, flow_nat, NAT_DP_SLOTS);
@name(".flow_event_counter")
OG_COUNTER(flow_event_counter, FLOW_EVENT_COUNT);
#endif

// Before routing, for every TCP, UDP and ICMP echo packet: the slot lifetimes of its protocol, and the slot of a
// flow the data plane masqueraded, found by its public port (the slot's index). Without an exact
// entry, a reply is translated back here; with one, either direction keeps the slot alive (the
// controller's entries use its port), and once they are gone the slot is retired.
control NatReverse(inout headers_t hdr, inout local_metadata_t meta) {
#ifdef OG_DP_SESSIONS
    bit<1> pool = 0;
    l4_port_t base = 0;

    @name(".set_flow_timeout")
    action set_flow_timeout(flow_ticks_t idle, flow_ticks_t closing, flow_ticks_t report) {
        meta.flow_idle_ticks = idle;
        meta.flow_closing_ticks = closing;
        meta.flow_report_ticks = report;
    }

    // Per IP protocol: how long a slot lives without packets, and after a FIN or RST; how often
    // a routed flow without exact entries is reported again.
    @name(".flow_ageing")
    table flow_ageing {
        key = {
            FLOW_PROTO : exact @name("ip_proto");
        }
        actions = { set_flow_timeout; }
        default_action = set_flow_timeout(FLOW_DEFAULT_IDLE_TICKS, FLOW_DEFAULT_CLOSING_TICKS,
                                          FLOW_DEFAULT_REPORT_TICKS);
        size = FLOW_AGEING_TABLE_SIZE;
    }

    @name(".dp_unmasquerade")
    action dp_unmasquerade(l4_port_t port_base) {
        pool = 1;
        base = port_base;
    }

    // The addresses the data plane masquerades as, with the first port of their block.
    @name(".nat_dp_reverse")
    table nat_dp_reverse {
        key = {
            meta.dp_public_addr : exact @name("ipv4_addr");
        }
        actions = { dp_unmasquerade; @defaultonly NoAction; }
        const default_action = NoAction();
        size = NAT_TABLE_SIZE;
    }
#endif

    apply {
#ifdef OG_DP_SESSIONS
        // Only the packets a slot can hold (TCP, UDP, ICMP echo, and an ICMP error about one of
        // their packets, by the flow's key) need lifetimes or a slot.
        bool l4 = hdr.tcp.isValid() || hdr.udp.isValid() || FLOW_ICMP_ERROR
            || (hdr.icmp.isValid() && (hdr.icmp.icmp_type == ICMP_ECHO_REQUEST
                                       || hdr.icmp.icmp_type == ICMP_ECHO_REPLY));
        if (l4) {
            flow_ageing.apply();
        }
        // The public end of the packet's flow, if the data plane masqueraded it: a packet of the
        // original direction carried by its exact entry is to be rewritten to it; any other
        // packet (a reply) is sent to it.
        bool forward = meta.session_hit == 1 && meta.nat_kind == NAT_REWRITE_SRC;
        l4_port_t public_port = FLOW_DPORT;
        meta.dp_public_addr = FLOW_DST;
        if (forward) {
            meta.dp_public_addr = meta.nat_addr;
            public_port = meta.nat_port;
        }
        if (meta.returned == 0 && og_admitted(meta) && l4) {
            nat_dp_reverse.apply();
        }
        l4_port_t offset = public_port - base;
        if (pool == 1 && public_port >= base && offset < NAT_DP_SLOTS) {
            flow_slot_t slot = (flow_slot_t)offset;
            bit<32> state;
            bit<32> k_src;
            bit<32> k_dst;
            bit<32> k_ports;
            bit<64> nat;
            flow_ticks_t seen;
            flow_state.read(state, slot);
            flow_key_src.read(k_src, slot);
            flow_key_dst.read(k_dst, slot);
            flow_key_ports.read(k_ports, slot);
            flow_nat.read(nat, slot);
            flow_seen.read(seen, slot);
            flow_ticks_t limit = (state & FLOW_STATE_CLOSING) != 0
                ? meta.flow_closing_ticks : meta.flow_idle_ticks;
            bool mine = (state & (FLOW_STATE_VALID | FLOW_STATE_NAT))
                    == (FLOW_STATE_VALID | FLOW_STATE_NAT)
                && state[7:0] == FLOW_PROTO
                && nat == meta.dp_public_addr ++ public_port ++ 16w0;
            if (forward) {
                mine = mine && k_src == FLOW_SRC && k_dst == FLOW_DST
                    && k_ports == FLOW_SPORT ++ FLOW_DPORT;
            } else {
                // The reply: from the flow's remote end and port.
                mine = mine && k_dst == FLOW_SRC && k_ports[15:0] == FLOW_SPORT;
            }
            // This direction's "installed" flag (see the top of this file).
            bit<32> installed = forward ? FLOW_STATE_INSTALLED : FLOW_STATE_INSTALLED_REPLY;
            if (mine && meta.now - seen <= limit) {
                if (meta.session_hit == 1) {
                    // Its exact entries carry it: the slot, and with it the port, stays taken
                    // (not by an ICMP error: it says nothing of the flow's life).
                    if (meta.drop_session == 0 && !FLOW_ICMP_ERROR) {
                        state = state | installed;
                        if (hdr.tcp.isValid() && (hdr.tcp.flags & (TCP_FLAG_FIN | TCP_FLAG_RST)) != 0
                                && (state & FLOW_STATE_CLOSING) == 0) {
                            state = state | FLOW_STATE_CLOSING;
                            OG_COUNT(flow_event_counter, FLOW_EVENT_CLOSING);
                        }
                        flow_state.write(slot, state);
                        flow_seen.write(slot, meta.now);
                    }
                } else if ((state & installed) != 0) {
                    // Its exact entry was there and is gone: the controller ended it.
                    flow_state.write(slot, 0);
                    OG_COUNT(flow_event_counter, FLOW_EVENT_RETIRED);
                } else if (!forward) {
                    meta.dp_nat_reverse = 1;
                    meta.dp_nat_slot = slot;
                    meta.nat_kind = NAT_REWRITE_DST;
                    meta.nat_addr = k_src;
                    meta.nat_port = k_ports[31:16];
                    OG_COUNT(flow_event_counter, FLOW_EVENT_NAT_REVERSE);
                }
            }
        }
#endif
    }
}

control SessionSetup(inout headers_t hdr, inout local_metadata_t meta) {
#if defined(OG_DP_SESSIONS) || defined(OG_FLOW_SLOTS)
    // New flows per source (the low bits of its address), in packets: one host's flood of new
    // flows cannot take the slots, the digests and the CPU that other hosts' new flows need.
    @name(".new_flow_meter")
    OG_PACKET_METER(new_flow_meter, NEW_FLOW_METERS);
#endif
#ifdef OG_DP_SESSIONS

    // The targets of the port forwards the data plane carries -> their public end.
    @name(".forwarded_reply")
    action forwarded_reply(ipv4_addr_t public_addr, l4_port_t public_port) {
        meta.dp_dnat_reply = 1;
        meta.dp_dnat_addr = public_addr;
        meta.dp_dnat_port = public_port;
    }

    @name(".dnat_dp_reverse")
    table dnat_dp_reverse {
        key = {
            hdr.ipv4.src_addr : exact @name("ipv4_src");
            hdr.ipv4.protocol : exact @name("ip_proto");
            meta.l4_sport     : exact @name("l4_sport");
        }
        actions = { forwarded_reply; @defaultonly NoAction; }
        const default_action = NoAction();
        size = NAT_TABLE_SIZE;
    }

    // A flow's two candidate slots (src:sport -> dst:dport, either direction). The key is the
    // flow's two ends in order (by address, then port: the lower end first), the same for both
    // directions and never the same for two flows; slot 0 is crc32 of its fields, slot 1 crc32
    // of them in the reverse order (crc16 would reach only the first 65,536 slots). On floods
    // from one host, port scans and many hosts' flows the pair collides as often as two random
    // choices (tests/test_slot_hashes.py; opengate/flow_slots.py is this in Python). crc32 is
    // linear: it is the key, not the hash, that must tell flows apart. The XORs and sums of
    // the addresses and of the ports, the key before, gave (a, b) and (a ^ m, b ^ m) one key
    // for any bits m that a and b do not share: a host's flows to neighbouring ports took each
    // other's slots, and a flood's third phase met a collision in one flow of twelve, not of
    // 400. (TNA's slots, arch/tna_flow_slots.p4, hash the same ends in another form.)
    @hidden
    action candidate_slots(in bit<32> src, in bit<32> dst, in bit<8> proto, in l4_port_t sport,
                           in l4_port_t dport, out flow_slot_t slot0, out flow_slot_t slot1) {
        bool low_first = src < dst || (src == dst && sport <= dport);
        bit<32> lo_addr = low_first ? src : dst;
        bit<32> hi_addr = low_first ? dst : src;
        l4_port_t lo_port = low_first ? sport : dport;
        l4_port_t hi_port = low_first ? dport : sport;
        hash(slot0, HashAlgorithm.crc32, 32w0, { lo_addr, hi_addr, proto, lo_port, hi_port },
             (bit<32>)FLOW_SLOTS);
        hash(slot1, HashAlgorithm.crc32, 32w0, { hi_port, lo_port, proto, hi_addr, lo_addr },
             (bit<32>)FLOW_SLOTS);
    }

    // Read one candidate slot: its state word, whether it holds the flow src:ports -> dst (in
    // either direction, by the whole 5-tuple, of the kind wanted: plain, masqueraded or
    // forwarded) and whether it is alive.
    @hidden
    action probe(in flow_slot_t index, in bit<32> src, in bit<32> dst, in bit<32> ports,
                 in bit<32> want_nat, out bit<32> state, out bool mine, out bool live,
                 out bool original) {
        bit<32> k_src;
        bit<32> k_dst;
        bit<32> k_ports;
        flow_ticks_t seen;
        flow_state.read(state, index);
        flow_key_src.read(k_src, index);
        flow_key_dst.read(k_dst, index);
        flow_key_ports.read(k_ports, index);
        flow_seen.read(seen, index);
        bit<32> reversed = ports[15:0] ++ ports[31:16];
        original = k_src == src && k_dst == dst && k_ports == ports;
        mine = (state & FLOW_STATE_VALID) != 0 && state[7:0] == FLOW_PROTO
            && (state & (FLOW_STATE_NAT | FLOW_STATE_DNAT)) == want_nat
            && (original || (k_src == dst && k_dst == src && k_ports == reversed));
        flow_ticks_t limit = (state & FLOW_STATE_CLOSING) != 0
            ? meta.flow_closing_ticks : meta.flow_idle_ticks;
        live = (state & FLOW_STATE_VALID) != 0 && meta.now - seen <= limit;
    }
#endif

    apply {
#ifdef OG_FLOW_SLOTS
        // Tofino's slots (arch/tna_flow_slots.p4): FlowSlotWays has looked the flow up, or
        // claimed its slot, or ended it.
        if (FLOW_END_FRAME) {
            meta.drop_setup = DROP_CPU_CONTROL;
            return;
        }
        bool flow_mine = FLOW_WAY_MINE(meta.flow_way0_found)
            || FLOW_WAY_MINE(meta.flow_way1_found);
        if (meta.flow_claim == 1) {
            if (flow_mine) {
                meta.flow_claim_mine = 1;
            }
        } else if (flow_mine && meta.session_hit == 0) {
            // Admitted by its slot; FlowSlotVerdict reads the flow's class and SPM.
            meta.flow_hit = 1;
        }
#endif
#ifdef OG_DP_SESSIONS
        if (hdr.packet_out.isValid() && hdr.packet_out.end_flow == 1) {
            // The CPM ends a routed flow that its slot alone carries (a session recorded
            // without entries, deleted): a packet of the flow's original direction, sent
            // through the pipeline, frees the flow's slot if it holds the flow, and goes no
            // further. (A flow with exact entries ends when they go: its slot is retired by
            // its next packet.)
            bit<32> e_src = meta.key_src;
            bit<32> e_dst = meta.key_dst;
            bit<32> e_ports = meta.key_sport ++ meta.key_dport;
            flow_slot_t e_slot0;
            flow_slot_t e_slot1;
            candidate_slots(e_src, e_dst, hdr.ipv4.protocol, meta.key_sport, meta.key_dport,
                            e_slot0, e_slot1);
            bit<32> e_state;
            bool e_mine;
            bool e_live;
            bool e_original;
            probe(e_slot0, e_src, e_dst, e_ports, 0, e_state, e_mine, e_live, e_original);
            flow_slot_t e_slot = e_slot0;
            if (!e_mine) {
                probe(e_slot1, e_src, e_dst, e_ports, 0, e_state, e_mine, e_live, e_original);
                e_slot = e_slot1;
            }
            if (e_mine) {
                flow_state.write(e_slot, 0);
                OG_COUNT(flow_event_counter, FLOW_EVENT_ENDED);
            }
            meta.drop_setup = DROP_CPU_CONTROL;
            return;
        }
        bool l4 = hdr.tcp.isValid() || hdr.udp.isValid() || FLOW_ICMP_ERROR
            || (hdr.icmp.isValid() && (hdr.icmp.icmp_type == ICMP_ECHO_REQUEST
                                       || hdr.icmp.icmp_type == ICMP_ECHO_REPLY));
        bool first_pass = meta.returned == 0 && og_admitted(meta) && meta.port_role != ROLE_CPU;
        bool ports_l4 = hdr.tcp.isValid() || hdr.udp.isValid();
        // A port forward's reply: its source is a forward's target.
        if (first_pass && ports_l4 && meta.session_hit == 0 && meta.dp_dnat == 0) {
            dnat_dp_reverse.apply();
        }
        // The flows of port forwards, by the packet or by their exact entries (the original
        // direction rewrites the destination before any SPM, the reply the source after it).
        bool dnat_orig = ports_l4 && (meta.dp_dnat == 1 || (meta.session_hit == 1
            && meta.nat_kind == NAT_REWRITE_DST && meta.nat_before_spm == 0));
        bool dnat_reply = ports_l4 && (meta.dp_dnat_reply == 1 || (meta.session_hit == 1
            && meta.nat_kind == NAT_REWRITE_SRC && meta.nat_before_spm == 1));
        bool dnat_flow = dnat_orig || dnat_reply;
        // A masqueraded flow (the masquerade rule lets the data plane pick its port) lives in
        // the first NAT_DP_SLOTS slots; any other in all of them.
        bool nat_flow = meta.snat_required == 1 && meta.dp_nat == 1 && meta.dnat_required == 0
            && !dnat_reply;
        // First passes of packets that nothing has stopped so far, but not those of the
        // controller's NAT sessions (their headers may be rewritten already, and the data plane
        // has no slot for them) nor the controller's port forwards.
        bool eligible = first_pass && l4
            && ((meta.nat_kind == NAT_NONE && meta.dnat_required == 0) || dnat_flow);
        // The flow's key as its slot holds it: the packet as it is now, but a forward's flow by
        // its public end (the original direction as it arrived; a reply from the public end).
        bit<32> k_src = FLOW_SRC;
        bit<32> k_dst = FLOW_DST;
        l4_port_t k_sport = FLOW_SPORT;
        l4_port_t k_dport = FLOW_DPORT;
        if (dnat_orig) {
            k_src = meta.key_src;
            k_dst = meta.key_dst;
            k_sport = meta.key_sport;
            k_dport = meta.key_dport;
        } else if (dnat_reply) {
            if (meta.dp_dnat_reply == 1) {
                k_src = meta.dp_dnat_addr;
                k_sport = meta.dp_dnat_port;
            }
        }
        // Back from its SPM, a masqueraded flow's packet is rewritten now: read its slot only.
        bool returned_nat = meta.returned == 1 && nat_flow && l4;
        // A reply NatReverse translated: its slot is known.
        bool reverse = meta.dp_nat_reverse == 1;
        bit<32> want_nat = 0;
        if (nat_flow || reverse) {
            want_nat = FLOW_STATE_NAT;
        } else if (dnat_flow) {
            want_nat = FLOW_STATE_DNAT;
        }
        // Two candidate slots (two hashes of the flow's key, candidate_slots): a flow lives in
        // either, a new flow takes the first free one, so a collision needs both taken by live
        // flows.
        flow_slot_t slot0 = 0;
        flow_slot_t slot1 = 0;
        bit<32> state0 = 0;
        bit<32> state1 = 0;
        bool mine0 = false;
        bool mine1 = false;
        bool original0 = false;
        bool original1 = false;
        bool live0 = false;
        bool live1 = false;
        bit<32> ports = k_sport ++ k_dport;
        bool closing_packet = hdr.tcp.isValid()
            && (hdr.tcp.flags & (TCP_FLAG_FIN | TCP_FLAG_RST)) != 0;
        if (reverse) {
            slot0 = meta.dp_nat_slot;
            slot1 = meta.dp_nat_slot;
        } else if (eligible || returned_nat) {
            candidate_slots(k_src, k_dst, FLOW_PROTO, k_sport, k_dport, slot0, slot1);
            if (nat_flow) {
                slot0 = slot0 & (NAT_DP_SLOTS - 1);
                slot1 = slot1 & (NAT_DP_SLOTS - 1);
            }
        }
        if (eligible || returned_nat || reverse) {
            probe(slot0, k_src, k_dst, ports, want_nat, state0, mine0, live0, original0);
            probe(slot1, k_src, k_dst, ports, want_nat, state1, mine1, live1, original1);
        }
        // The flow's own live slot, if it has one.
        bool on0 = mine0 && live0;
        flow_slot_t slot = slot1;
        bit<32> state = state1;
        bool mine = mine1;
        bool live = live1;
        bool original = original1;
        if (on0) {
            slot = slot0;
            state = state0;
            mine = mine0;
            live = live0;
            original = original0;
        }
        // The packet's direction's "installed" flag (see the top of this file).
        bit<32> installed = original ? FLOW_STATE_INSTALLED : FLOW_STATE_INSTALLED_REPLY;

        if (returned_nat && mine && live) {
            // After its SPM: the original direction of a masqueraded flow is rewritten now.
            bit<64> nat;
            flow_nat.read(nat, slot);
            meta.flow_hit = 1;
            meta.dp_late_nat = 1;
            meta.nat_kind = NAT_REWRITE_SRC;
            meta.nat_addr = nat[63:32];
            meta.nat_port = nat[31:16];
        } else if (eligible && mine && live && meta.session_hit == 1) {
            // The exact entries carry the flow: keep the slot alive and note that this
            // direction's exists (an ICMP error says nothing of the flow's life).
            if (meta.drop_session == 0 && !FLOW_ICMP_ERROR) {
                state = state | installed;
                if (closing_packet && (state & FLOW_STATE_CLOSING) == 0) {
                    state = state | FLOW_STATE_CLOSING;
                    OG_COUNT(flow_event_counter, FLOW_EVENT_CLOSING);
                }
                flow_state.write(slot, state);
                flow_seen.write(slot, meta.now);
            }
        } else if (eligible && mine && live && (state & installed) != 0) {
            // This direction's exact entry was there and is gone: the controller ended the
            // session.
            flow_state.write(slot, 0);
            OG_COUNT(flow_event_counter, FLOW_EVENT_RETIRED);
            if (on0) {
                live0 = false;
                state0 = 0;
            } else {
                live1 = false;
                state1 = 0;
            }
        } else if ((eligible || reverse) && mine && live) {
            // A later packet of a flow the data plane made, before its exact entries exist.
            meta.flow_hit = 1;
            bit<64> spm;
            flow_spm.read(spm, slot);
            meta.session_class = (class_id_t)state[23:16];
            meta.meter_class = (class_id_t)state[23:16];
            meta.spm_port = (port_id_t)spm[56:48];
            meta.spm_mac = spm[47:0];
            if (FLOW_ICMP_ERROR) {
                meta.spm_port = 0;  // an error goes straight to the flow's end (as with a session)
            }
            // Steering's "no SPM up" was about a new flow; this one keeps its SPM, like a session.
            meta.drop_session = DROP_NONE;
            if (meta.spm_port == 0) {
                meta.drop_fwd = meta.route_drop;
            } else {
                meta.drop_fwd = DROP_NONE;
            }
            if (meta.dp_dnat_reply == 1) {
                // A forward's reply leaves from the forward's public end (before any SPM: the
                // SPM sees the flow as it arrived).
                meta.dp_late_nat = 1;
                meta.nat_kind = NAT_REWRITE_SRC;
                meta.nat_addr = meta.dp_dnat_addr;
                meta.nat_port = meta.dp_dnat_port;
                OG_COUNT(flow_event_counter, FLOW_EVENT_DNAT_REPLY);
            }
            if (nat_flow && meta.spm_port == 0) {
                // The original direction of a masqueraded flow with no SPM: rewrite it now.
                bit<64> nat;
                flow_nat.read(nat, slot);
                meta.dp_late_nat = 1;
                meta.nat_kind = NAT_REWRITE_SRC;
                meta.nat_addr = nat[63:32];
                meta.nat_port = nat[31:16];
            }
            if (want_nat == 0 && !closing_packet && !FLOW_ICMP_ERROR) {
                // A routed flow, still without exact entries: report it again (from a packet of
                // either direction) once its protocol's report interval has passed since its
                // last report.
                flow_ticks_t reported;
                flow_reported.read(reported, slot);
                if (meta.now - reported >= meta.flow_report_ticks) {
                    flow_reported.write(slot, meta.now);
                    meta.send_session_request = 1;
                    meta.dp_session = 1;
                    OG_COUNT(flow_event_counter, FLOW_EVENT_REPORTED);
                }
            }
            if (closing_packet) {
                meta.send_session_close = 1;
                if ((state & FLOW_STATE_CLOSING) == 0) {
                    state = state | FLOW_STATE_CLOSING;
                    OG_COUNT(flow_event_counter, FLOW_EVENT_CLOSING);
                    flow_state.write(slot, state);
                }
            }
            if (FLOW_ICMP_ERROR) {
                OG_COUNT(flow_event_counter, FLOW_EVENT_RELATED);
            } else {
                flow_seen.write(slot, meta.now);
                OG_COUNT(flow_event_counter, FLOW_EVENT_HIT);
            }
        }
#endif

        if (meta.session_hit == 1 || meta.flow_hit == 1) {
            // A session carries the packet.
        } else if (meta.returned == 1
                && (meta.snat_required == 1 || meta.dnat_required == 1) && meta.dp_dnat == 0) {
            // Back from its SPM without a session: a NAT flow needs its session. (A forward the
            // data plane carries was admitted on its way to the SPM and is rewritten by its
            // rule.)
            meta.drop_setup = DROP_NAT_NO_SESSION;
        } else if (meta.returned == 1) {
            // Back from its SPM without a session, no NAT: as it was admitted.
        } else if (meta.acl_verdict == ACL_DENY) {
            meta.drop_setup = DROP_ACL_DENY;
        } else if (meta.acl_verdict == ACL_TO_CPU) {
            meta.to_cpu = 1;
            meta.cpu_reason = CPU_REASON_ACL;
        } else if ((hdr.tcp.isValid()
                        && (hdr.tcp.flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) != TCP_FLAG_SYN)
                || (hdr.icmp.isValid() && hdr.icmp.icmp_type == ICMP_ECHO_REPLY)) {
            // Not an opening packet (one assignment for both: a Tofino stage holds 16 tables).
            meta.drop_setup = DROP_NO_SESSION;
        } else if (hdr.icmp.isValid() && hdr.icmp.icmp_type != ICMP_ECHO_REQUEST) {
            // Errors, unreachables...: permitted by the ACL alone, no session.
        } else if (meta.port_role == ROLE_CPU) {
            // Re-injected by the controller but still without a session: never loop.
            meta.drop_setup = DROP_CPU_LOOP;
        } else {
            // A permitted opening packet: a new session.
#ifdef OG_DP_SESSIONS
            bool nat = meta.snat_required == 1 || meta.dnat_required == 1;
            meter_color_t color = METER_GREEN;
            OG_METER_EXECUTE(new_flow_meter, hdr.ipv4.src_addr[11:0], color);
            bool claimed = false;
            bool collided = false;
            if (OG_METER_IS_RED(color)) {
                meta.drop_setup = DROP_NEW_FLOW_RATE;
            } else if (eligible && (!nat || nat_flow || meta.dp_dnat == 1)
                    && meta.dp_dnat_reply == 0 && meta.drop_session == 0
                    && meta.drop_fwd == 0) {
                // Claim the first candidate slot that no live flow holds. (The flow's own live
                // slot cannot reach here: that is a hit above, or a retired slot, now free.)
                bool free = !live0 || !live1;
                slot = slot1;
                state = state1;
                if (!live0) {
                    slot = slot0;
                    state = state0;
                }
                if (free) {
                    flow_key_src.write(slot, k_src);
                    flow_key_dst.write(slot, k_dst);
                    flow_key_ports.write(slot, ports);
                    flow_state.write(slot, FLOW_STATE_VALID | want_nat
                                           | (bit<32>)hdr.ipv4.protocol
                                           | ((bit<32>)meta.ids_class << 16));
                    flow_spm.write(slot, (bit<7>)0 ++ meta.spm_port ++ meta.spm_mac);
                    flow_seen.write(slot, meta.now);
                    flow_reported.write(slot, meta.now);
                    if (nat_flow) {
                        // The slot is the port: claimed with it, free again with it.
                        l4_port_t port = meta.dp_nat_base + (l4_port_t)slot;
                        flow_nat.write(slot, meta.dp_nat_addr ++ port ++ 16w0);
                        meta.nat_kind = NAT_REWRITE_SRC;
                        meta.nat_addr = meta.dp_nat_addr;
                        meta.nat_port = port;
                        // With an SPM, after it (returned_nat above), as the controller does.
                        if (meta.spm_port == 0) {
                            meta.dp_late_nat = 1;
                        }
                        OG_COUNT(flow_event_counter, FLOW_EVENT_NAT_CREATED);
                    }
                    if (meta.dp_dnat == 1) {
                        // The binding the digest reports (the rewrite is PortForward's).
                        meta.nat_kind = NAT_REWRITE_DST;
                        meta.nat_addr = meta.dp_dnat_addr;
                        meta.nat_port = meta.dp_dnat_port;
                        OG_COUNT(flow_event_counter, FLOW_EVENT_DNAT_CREATED);
                    }
                    if ((state & FLOW_STATE_VALID) != 0) {
                        OG_COUNT(flow_event_counter, FLOW_EVENT_RECLAIMED);
                    }
                    OG_COUNT(flow_event_counter, FLOW_EVENT_CREATED);
                    claimed = true;
                    meta.dp_session = 1;
                } else if (nat_flow) {
                    OG_COUNT(flow_event_counter, FLOW_EVENT_NAT_FULL);
                } else {
                    OG_COUNT(flow_event_counter, FLOW_EVENT_COLLISION);
                    collided = true;
                }
            }
            if (meta.drop_setup != 0) {
                // Over its rate: nothing more.
            } else if (nat && !claimed) {
                meta.to_cpu = 1;
                meta.cpu_reason = CPU_REASON_SESSION_NAT;
                if (meta.dp_dnat == 1) {
                    OG_COUNT(flow_event_counter, FLOW_EVENT_DNAT_FALLBACK);
                }
                if (meta.dp_dnat_now == 1) {
                    // The controller sets the forward up from the packet as it arrived.
                    meta.dp_late_nat = 1;
                    meta.nat_kind = NAT_REWRITE_DST;
                    meta.nat_addr = meta.key_dst;
                    meta.nat_port = meta.key_dport;
                }
            } else if (collided) {
                // Forwarded with a digest, its reply would come back before the controller's
                // entries and be dropped (a TCP client then waits a second to send its SYN
                // again): it waits at the controller instead, which writes the session and
                // sends it on through the pipeline, as it does a NAT flow's.
                meta.to_cpu = 1;
                meta.cpu_reason = CPU_REASON_SESSION_COLLISION;
            } else {
                meta.send_session_request = 1;
            }
#elif defined(OG_FLOW_SLOTS)
            // Tofino: a flow without NAT that has a free way claims it in a second pass.
            bool nat = meta.snat_required == 1 || meta.dnat_required == 1;
            meter_color_t color = METER_GREEN;
            if (meta.flow_claim == 0) {
                OG_METER_EXECUTE(new_flow_meter, hdr.ipv4.src_addr[11:0], color);
            }
            bool way0_free = FLOW_WAY_FREE(meta.flow_way0_found);
            bool way1_free = FLOW_WAY_FREE(meta.flow_way1_found);
            if (OG_METER_IS_RED(color)) {
                meta.drop_setup = DROP_NEW_FLOW_RATE;
            } else if (nat) {
                meta.to_cpu = 1;
                meta.cpu_reason = CPU_REASON_SESSION_NAT;
            } else if (meta.flow_claim == 0 && (way0_free || way1_free)
                    && meta.drop_session == 0 && meta.drop_fwd == 0) {
                meta.flow_resubmit = 1;
                if (way0_free) {
                    meta.flow_claim_way = 0;
                } else {
                    meta.flow_claim_way = 1;
                }
            } else if (meta.drop_session == 0 && meta.drop_fwd == 0
                    && ((meta.flow_claim == 0 && meta.flow_looked_up == 1 && !way0_free
                            && !way1_free)
                        || (meta.flow_claim == 1 && meta.flow_claim_mine == 0))) {
                // Both ways held by other flows, or the way taken between the passes: it
                // waits at the CPM, as on v1model (forwarded with a digest, its reply would
                // come back before the CPM's entries and be dropped).
                meta.flow_collision = 1;
                meta.to_cpu = 1;
                meta.cpu_reason = CPU_REASON_SESSION_COLLISION;
            } else {
                meta.send_session_request = 1;
            }
#else
            // The test itself, not a variable: an assignment before it would cost Tofino 1 a
            // stage.
            if (meta.snat_required == 1 || meta.dnat_required == 1) {
                meta.to_cpu = 1;
                meta.cpu_reason = CPU_REASON_SESSION_NAT;
            } else {
                meta.send_session_request = 1;
            }
#endif
        }
    }
}

#endif
