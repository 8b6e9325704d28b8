// Step 5: sessions made by the data plane, and what to do with a packet that has no session.
//
// Data-plane sessions (where the shell defines OG_DP_SESSIONS): a table of FLOW_SLOTS slots in
// registers. Two hashes (crc32, crc16) of the direction-agnostic flow key (the XORs Steering
// computes) give each flow two candidate slots, the same for both directions; a flow lives in
// either, and a new flow takes the first one no live flow holds. A slot holds the flow's full 5-tuple as its
// first packet arrived (never a fingerprint: a slot admits only its own flow, in either
// direction), its state word (protocol, flags, IDS class), its SPM and the time it was last seen.
// - A permitted opening packet that needs no NAT claims its slot if the slot is free or its flow
//   has aged out, and is forwarded with a digest: the reply and every later packet of both
//   directions are admitted by the slot at once, steered to the same SPM, while the controller
//   installs the exact-match entries (counters, idle timeout, block, bypass) off the critical path.
// - Both candidates held by other live flows is a collision: the packet takes the controller path, as
//   before data-plane sessions (digest, and the reply waits for the exact entries). Counted.
// - Once the flow's exact entries are hit, the slot is marked installed and only refreshed; if a
//   packet later finds the slot but no exact entry, the controller has removed the session (idle,
//   close, block expiry, API): the slot is freed and the packet is handled as a miss.
// - Ageing: a slot older than its protocol's idle time (flow_ageing, set by the controller from
//   the policy's timeouts), or than the closing linger after a FIN or RST, is free to reclaim.
// - NAT sessions are not made here yet: the controller allocates them (packet-in), as before.
//
// The rest (no slot hit) is the verdict on a packet without a session. A permitted opening packet
// (TCP SYN without ACK, UDP, ICMP echo request, other IP protocols) is forwarded and reported with
// a digest; one that needs NAT goes to the controller, which allocates the NAT binding, installs
// both directions and re-injects it. Anything else that needs a session is dropped. A packet back
// from its SPM whose session is gone is dropped if it needed NAT.
#ifndef OPENGATE_CONTROL_SESSION_SETUP_P4
#define OPENGATE_CONTROL_SESSION_SETUP_P4

control SessionSetup(inout headers_t hdr, inout local_metadata_t meta) {
#ifdef OG_DP_SESSIONS
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
    @name(".flow_event_counter")
    OG_COUNTER(flow_event_counter, FLOW_EVENT_COUNT);

    flow_ticks_t idle_ticks = 0;
    flow_ticks_t closing_ticks = 0;

    // Read one candidate slot: its state word, whether it holds this packet's flow (in either
    // direction, by the whole 5-tuple) and whether its flow is still alive.
    @hidden
    action probe(in flow_slot_t index, in bit<32> ports, out bit<32> state, out bool mine,
                 out bool live) {
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
        mine = (state & FLOW_STATE_VALID) != 0 && state[7:0] == hdr.ipv4.protocol
            && ((k_src == hdr.ipv4.src_addr && k_dst == hdr.ipv4.dst_addr && k_ports == ports)
                || (k_src == hdr.ipv4.dst_addr && k_dst == hdr.ipv4.src_addr
                    && k_ports == reversed));
        flow_ticks_t limit = (state & FLOW_STATE_CLOSING) != 0 ? closing_ticks : idle_ticks;
        live = (state & FLOW_STATE_VALID) != 0 && meta.now - seen <= limit;
    }

    @name(".set_flow_timeout")
    action set_flow_timeout(flow_ticks_t idle, flow_ticks_t closing) {
        idle_ticks = idle;
        closing_ticks = closing;
    }

    // Per IP protocol: how long a slot lives without packets, and after a FIN or RST.
    @name(".flow_ageing")
    table flow_ageing {
        key = {
            hdr.ipv4.protocol : exact @name("ip_proto");
        }
        actions = { set_flow_timeout; }
        default_action = set_flow_timeout(FLOW_DEFAULT_IDLE_TICKS, FLOW_DEFAULT_CLOSING_TICKS);
        size = FLOW_AGEING_TABLE_SIZE;
    }
#endif

    apply {
#ifdef OG_DP_SESSIONS
        // Only first passes of TCP, UDP and ICMP echo packets that nothing has stopped so far,
        // and not those of NAT sessions: the data plane makes none, and their headers may be
        // rewritten already (the slots would be read for nothing).
        bool eligible = meta.returned == 0 && meta.nat_kind == NAT_NONE && og_admitted(meta)
            && meta.port_role != ROLE_CPU
            && (hdr.tcp.isValid() || hdr.udp.isValid()
                || (hdr.icmp.isValid() && (hdr.icmp.icmp_type == ICMP_ECHO_REQUEST
                                           || hdr.icmp.icmp_type == ICMP_ECHO_REPLY)));
        // Two candidate slots (two hashes of the same key): a flow lives in either, a new flow
        // takes the first free one, so a collision needs both taken by live flows.
        flow_slot_t slot0 = 0;
        flow_slot_t slot1 = 0;
        bit<32> state0 = 0;
        bit<32> state1 = 0;
        bool mine0 = false;
        bool mine1 = false;
        bool live0 = false;
        bool live1 = false;
        bit<32> ports = meta.l4_sport ++ meta.l4_dport;
        bool closing_packet = hdr.tcp.isValid()
            && (hdr.tcp.flags & (TCP_FLAG_FIN | TCP_FLAG_RST)) != 0;
        if (eligible) {
            hash(slot0, HashAlgorithm.crc32, 32w0,
                 { meta.flow_addr_mix, hdr.ipv4.protocol, meta.flow_port_mix },
                 (bit<32>)FLOW_SLOTS);
            hash(slot1, HashAlgorithm.crc16, 32w0,
                 { meta.flow_addr_mix, hdr.ipv4.protocol, meta.flow_port_mix },
                 (bit<32>)FLOW_SLOTS);
            flow_ageing.apply();
            probe(slot0, ports, state0, mine0, live0);
            probe(slot1, ports, state1, mine1, live1);
        }
        // The flow's own live slot, if it has one.
        bool on0 = mine0 && live0;
        flow_slot_t slot = slot1;
        bit<32> state = state1;
        bool mine = mine1;
        bool live = live1;
        if (on0) {
            slot = slot0;
            state = state0;
            mine = mine0;
            live = live0;
        }

        if (eligible && mine && live && meta.session_hit == 1) {
            // The exact entries carry the flow: keep the slot alive and note that they exist.
            if (meta.drop_session == 0) {
                state = state | FLOW_STATE_INSTALLED;
                if (closing_packet && (state & FLOW_STATE_CLOSING) == 0) {
                    state = state | FLOW_STATE_CLOSING;
                    OG_COUNT(flow_event_counter, FLOW_EVENT_CLOSING);
                }
                flow_state.write(slot, state);
                flow_seen.write(slot, meta.now);
            }
        } else if (eligible && mine && live && (state & FLOW_STATE_INSTALLED) != 0) {
            // Its exact entries were there and are gone: the controller ended the session.
            flow_state.write(slot, 0);
            OG_COUNT(flow_event_counter, FLOW_EVENT_RETIRED);
            if (on0) {
                live0 = false;
                state0 = 0;
            } else {
                live1 = false;
                state1 = 0;
            }
        } else if (eligible && mine && live) {
            // A later packet of a flow the data plane made, before its exact entries exist.
            meta.flow_hit = 1;
            bit<64> spm;
            flow_spm.read(spm, slot);
            meta.session_class = (class_id_t)state[23:16];
            meta.meter_class = (class_id_t)state[23:16];
            meta.spm_port = (port_id_t)spm[56:48];
            meta.spm_mac = spm[47:0];
            // Steering's "no SPM up" was about a new flow; this one keeps its SPM, like a session.
            meta.drop_session = DROP_NONE;
            if (spm[56:48] == 0) {
                meta.drop_fwd = og_forwarding_drop(hdr, meta);
            } else {
                meta.drop_fwd = DROP_NONE;
            }
            if (closing_packet) {
                meta.send_session_close = 1;
                if ((state & FLOW_STATE_CLOSING) == 0) {
                    state = state | FLOW_STATE_CLOSING;
                    OG_COUNT(flow_event_counter, FLOW_EVENT_CLOSING);
                    flow_state.write(slot, state);
                }
            }
            flow_seen.write(slot, meta.now);
            OG_COUNT(flow_event_counter, FLOW_EVENT_HIT);
        }
#endif

        if (meta.session_hit == 1 || meta.flow_hit == 1) {
            // A session carries the packet.
        } else if (meta.returned == 1) {
            if (meta.snat_required == 1 || meta.dnat_required == 1) {
                meta.drop_setup = DROP_NAT_NO_SESSION;
            }
        } else if (meta.acl_verdict == ACL_DENY) {
            meta.drop_setup = DROP_ACL_DENY;
        } else if (meta.acl_verdict == ACL_TO_CPU) {
            meta.to_cpu = 1;
            meta.cpu_reason = CPU_REASON_ACL;
        } else if (hdr.tcp.isValid()
                && (hdr.tcp.flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) != TCP_FLAG_SYN) {
            meta.drop_setup = DROP_NO_SESSION;
        } else if (hdr.icmp.isValid() && hdr.icmp.icmp_type == ICMP_ECHO_REPLY) {
            meta.drop_setup = DROP_NO_SESSION;
        } else if (hdr.icmp.isValid() && hdr.icmp.icmp_type != ICMP_ECHO_REQUEST) {
            // Errors, unreachables...: permitted by the ACL alone, no session.
        } else if (meta.port_role == ROLE_CPU) {
            // Re-injected by the controller but still without a session: never loop.
            meta.drop_setup = DROP_CPU_LOOP;
        } else if (meta.snat_required == 1 || meta.dnat_required == 1) {
            meta.to_cpu = 1;
            meta.cpu_reason = CPU_REASON_SESSION_NAT;
        } else {
            meta.send_session_request = 1;
#ifdef OG_DP_SESSIONS
            // Claim the first candidate slot that no live flow holds. (The flow's own live slot
            // cannot reach here: that is a hit above, or a retired slot, now free.)
            if (eligible && meta.drop_session == 0 && meta.drop_fwd == 0) {
                bool free = !live0 || !live1;
                slot = slot1;
                state = state1;
                if (!live0) {
                    slot = slot0;
                    state = state0;
                }
                if (free) {
                    flow_key_src.write(slot, hdr.ipv4.src_addr);
                    flow_key_dst.write(slot, hdr.ipv4.dst_addr);
                    flow_key_ports.write(slot, ports);
                    flow_state.write(slot, FLOW_STATE_VALID | (bit<32>)hdr.ipv4.protocol
                                           | ((bit<32>)meta.ids_class << 16));
                    flow_spm.write(slot, (bit<7>)0 ++ meta.spm_port ++ meta.spm_mac);
                    flow_seen.write(slot, meta.now);
                    if ((state & FLOW_STATE_VALID) != 0) {
                        OG_COUNT(flow_event_counter, FLOW_EVENT_RECLAIMED);
                    }
                    OG_COUNT(flow_event_counter, FLOW_EVENT_CREATED);
                } else {
                    OG_COUNT(flow_event_counter, FLOW_EVENT_COLLISION);
                }
            }
#endif
        }
    }
}

#endif
