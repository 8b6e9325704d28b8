// Sessions made by the data plane on Tofino (TNA / T2NA, where tna_externs.p4 defines
// OG_FLOW_SLOTS): the flows that need no NAT. The v1model slots (control/session_setup.p4) read a
// slot's registers and write them later in the same pass, which a Tofino RegisterAction (one
// read-modify-write of one register per packet) cannot do, and the claim of a free slot depends on
// the ACL verdict and the SPM choice, known only at the end of the classification chain. So here:
//
// - Each flow has a slot in each of two ways (FLOW_WAY_SLOTS each), from two hashes of its
//   direction-agnostic key, the same for both directions: the XORs of its addresses and of its
//   ports and its lower end's address and port (Steering), which is its two ends in order, as on
//   v1model, and never the same for two flows. (The XORs and sums, the key before, gave (a, b)
//   and (a ^ m, b ^ m) one key for bits m that a and b do not share: one slot, one fingerprint,
//   one verdict for two flows.) A way's slot holds a 32-bit fingerprint of the key (a
//   third hash) and when a packet last found it: not the whole 5-tuple, which would take three more
//   registers in later stages. Two live flows with one slot and one fingerprint (one lookup in
//   2^32 of a full slot, for flows that meet by chance; the hashes are CRCs, linear, so not
//   for flows made to meet by one who knows the polynomials) share a verdict until the CPM
//   installs their exact entries, which are looked up first and win.
// - Pass 1, every packet (FlowSlotWays, beside the session table): the slot of the packet's flow
//   in each way is looked up by one RegisterAction, which refreshes its time when the
//   fingerprint matches and the slot is alive, and says mine, taken (another live flow) or free.
//   A hit that no exact entry carries reads the flow's class and SPM (FlowSlotVerdict, late in
//   the pipeline, where the classification is known) and is admitted like a session hit.
// - A permitted opening packet that found no slot of its own is resubmitted (TNA's resubmit, a
//   second pass through ingress with the way to claim in its metadata) instead of forwarded. In
//   pass 2 the way's RegisterAction claims the slot if it is still free, and FlowSlotVerdict
//   writes the class and SPM the packet got in this pass. The packet is then forwarded with its
//   digest (dp_session 1). Opening packets cost two passes, nothing else does. Both ways taken
//   (no resubmit), or the way taken between the passes: a collision, counted, which waits at
//   the CPM (packet-in, CPU_REASON_SESSION_COLLISION) as on v1model.
// - Time: meta.now counts ticks of 2^16 ns (the 48-bit global timestamp's bits 47:16, so it wraps
//   with the timestamp, every 78 hours). A slot is alive while a packet found it FLOW_SLOT_LEASE
//   ticks ago or less (30 s; an unsigned difference, right across a wrap of the timestamp; a
//   slot that no packet found for a whole wrap, 78 hours, looks alive again for 30 s: another
//   flow that hashes to it takes the CPM path (a collision), and its own flow, back within
//   those 30 s, would get its old class and SPM without being classified again), one
//   lifetime for every flow: a stateful ALU reads two PHV words, here the time and the
//   fingerprint, so no per-protocol lifetime from flow_ageing. The flow's exact entries, which
//   the CPM installs for every flow here, carry it with the policy's timeouts.
// - Ending: the CPM's end_flow frame (packet_out.end_flow) dates the flow's slot in either way,
//   if it is the flow's, one lease back (FLOW_SLOT_LEASE + 1 ticks): free at once. The CPM sends
//   one for every session without NAT it removes: these slots do not notice that their flow's
//   exact entries are gone (the v1model slots are retired by the flow's next packet).
// - State is per pipe: both directions of a flow must enter the same pipe.
#ifndef OPENGATE_ARCH_TNA_FLOW_SLOTS_P4
#define OPENGATE_ARCH_TNA_FLOW_SLOTS_P4

struct flow_way_t {
    bit<32> fingerprint;  // the flow's (0 before any flow: such a slot is free by its time)
    bit<32> seen;         // when a packet of the flow last found it
}

// What a way's RegisterAction found (flow_way*_found: its predicate, see FlowSlotWays), for a
// flow FlowSlotWays looked up: mine (in pass 1 alive with the flow's fingerprint; in pass 2
// claimed; for an end_flow frame ended), or free (pass 1: not alive).
const bit<8> FLOW_PRED_FIRST = 2;  // the first comparison alone held
const bit<8> FLOW_PRED_BOTH  = 8;  // both held
#define FLOW_WAY_MINE(found) (meta.flow_looked_up == 1                                              \
    && (((found) == FLOW_PRED_BOTH && meta.flow_claim == 0 && !FLOW_END_FRAME)                      \
        || ((found) == FLOW_PRED_FIRST && (meta.flow_claim == 1 || FLOW_END_FRAME))))
#define FLOW_WAY_FREE(found) (meta.flow_looked_up == 1 && (found)[1:1] == 0 && (found)[3:3] == 0)
#define FLOW_END_FRAME (hdr.packet_out.isValid() && hdr.packet_out.end_flow == 1)

// How long a slot lives without a packet: one lifetime for every flow (the stateful ALU has no
// room for a per-protocol one). The CPM installs exact entries for every flow here, which carry it
// with its policy's idle timeout once they exist; the slot carries it until then, and its
// packets keep the slot alive.
const bit<32> FLOW_SLOT_LEASE = 457764;  // 30 s in ticks of 65.536 us

// The resubmitted opening packet's metadata: 64 bits (Tofino 1's limit, and the size of its port
// metadata, which it replaces; the parser skips the rest of Tofino 2's 192).
header flow_resubmit_h {
    bit<8>    claim;          // 1: this pass claims a slot
    bit<7>    _pad0;
    bit<1>    way;            // ...in this way
    bit<7>    _pad1;
    port_id_t ingress_port;   // the pipeline's view of it (Tofino's parser copies a field of the
                              // state's own header, not one extracted states before)
    bit<32>   _pad2;
}

// Pass 1 lookup, pass 2 claim, or the CPM's end of a flow, in both ways, beside the session table.
control FlowSlotWays(inout headers_t hdr, inout local_metadata_t meta) {
    Hash<bit<FLOW_WAY_BITS>>(HashAlgorithm_t.CRC32) way0_hash;
    Hash<bit<FLOW_WAY_BITS>>(HashAlgorithm_t.CRC32) way1_hash;
    Hash<bit<32>>(HashAlgorithm_t.CRC32) fingerprint_hash;

    @name(".flow_way0")
    Register<flow_way_t, bit<FLOW_WAY_BITS>>(FLOW_WAY_SLOTS) flow_way0;
    @name(".flow_way1")
    Register<flow_way_t, bit<FLOW_WAY_BITS>>(FLOW_WAY_SLOTS) flow_way1;

    // Each RegisterAction answers with its stateful ALU's predicate: one bit set, for which of
    // the combinations of its two comparisons held (bit 0: neither, 1: the first alone, 2: the
    // second alone, 3: both), so that every answer is one operand, as Tofino's output needs. A
    // stateful ALU reads two PHV words at most: the time and the fingerprint.
    // - lookup (the slot is alive; its fingerprint is the flow's): both, mine (refreshed); the
    //   first alone, taken; otherwise free;
    // - claim (pass 2; the slot is free): the first, claimed;
    // - end (the fingerprint is the flow's): the first, ended (its time is set a lease back, so
    //   the slot is free at once).
    // One table per way's register, so that its RegisterActions share the register's stage:
    // the CPM's end of a flow, pass 2's claim in the way to claim (W; OTHER is the other way),
    // or pass 1's lookup.
#define FLOW_WAY(W, OTHER)                                                                          \
    RegisterAction<flow_way_t, bit<FLOW_WAY_BITS>, bit<8>>(flow_way##W) way##W##_lookup = {         \
        void apply(inout flow_way_t slot, out bit<8> found) {                                       \
            found = this.predicate(meta.now - slot.seen <= FLOW_SLOT_LEASE,                         \
                                   slot.fingerprint == meta.flow_fingerprint);                      \
            if (meta.now - slot.seen <= FLOW_SLOT_LEASE                                             \
                    && slot.fingerprint == meta.flow_fingerprint) {                                 \
                slot.seen = meta.now;                                                               \
            }                                                                                       \
        }                                                                                           \
    };                                                                                              \
    RegisterAction<flow_way_t, bit<FLOW_WAY_BITS>, bit<8>>(flow_way##W) way##W##_claim = {          \
        void apply(inout flow_way_t slot, out bit<8> found) {                                       \
            found = this.predicate(meta.now - slot.seen > FLOW_SLOT_LEASE);                         \
            if (meta.now - slot.seen > FLOW_SLOT_LEASE) {                                           \
                slot.fingerprint = meta.flow_fingerprint;                                           \
                slot.seen = meta.now;                                                               \
            }                                                                                       \
        }                                                                                           \
    };                                                                                              \
    RegisterAction<flow_way_t, bit<FLOW_WAY_BITS>, bit<8>>(flow_way##W) way##W##_end = {            \
        void apply(inout flow_way_t slot, out bit<8> found) {                                       \
            found = this.predicate(slot.fingerprint == meta.flow_fingerprint);                      \
            if (slot.fingerprint == meta.flow_fingerprint) {                                        \
                slot.seen = meta.now - (FLOW_SLOT_LEASE + 1);                                       \
            }                                                                                       \
        }                                                                                           \
    };                                                                                              \
    action way##W##_do_lookup() {                                                                   \
        meta.flow_way##W##_found = way##W##_lookup.execute(meta.flow_way##W);                       \
    }                                                                                               \
    action way##W##_do_claim() {                                                                    \
        meta.flow_way##W##_found = way##W##_claim.execute(meta.flow_way##W);                        \
    }                                                                                               \
    action way##W##_do_end() {                                                                      \
        meta.flow_way##W##_found = way##W##_end.execute(meta.flow_way##W);                          \
    }                                                                                               \
    table way##W##_op {                                                                             \
        key = {                                                                                     \
            hdr.packet_out.isValid() : ternary;                                                     \
            hdr.packet_out.end_flow  : ternary;                                                     \
            meta.flow_claim          : ternary;                                                     \
            meta.flow_claim_way      : ternary;                                                     \
        }                                                                                           \
        actions = { way##W##_do_lookup; way##W##_do_claim; way##W##_do_end; NoAction; }             \
        const entries = {                                                                           \
            (true, 1, _, _) : way##W##_do_end();                                                    \
            (_, _, 1, W) : way##W##_do_claim();                                                     \
            (_, _, 1, OTHER) : NoAction();                                                          \
            (_, _, 0, _) : way##W##_do_lookup();                                                    \
        }                                                                                           \
        const default_action = NoAction();                                                          \
        size = 4;                                                                                   \
    }
    FLOW_WAY(0, 1)
    FLOW_WAY(1, 0)

    apply {
        // The flow's slots and fingerprint, before the tests below, from the key Steering
        // computed (its mixes and lower end), each hash straight into its field: no cast.
        // Computed after the tests, from sums of their own, with a cast and the fingerprint's
        // low bit set, bf-p4c chained them over seven stages ahead of the ways.
        meta.flow_way0 = way0_hash.get({ meta.flow_addr_mix, meta.flow_lo_addr,
                                         hdr.ipv4.protocol, meta.flow_port_mix,
                                         meta.flow_lo_port });
        meta.flow_way1 = way1_hash.get({ meta.flow_lo_port, meta.flow_port_mix,
                                         hdr.ipv4.protocol, meta.flow_lo_addr,
                                         meta.flow_addr_mix });
        meta.flow_fingerprint = fingerprint_hash.get({ hdr.ipv4.protocol, meta.flow_lo_port,
                                                       meta.flow_lo_addr, meta.flow_port_mix,
                                                       meta.flow_addr_mix });
        meta.flow_way0_found = 0;
        meta.flow_way1_found = 0;
        bool end_flow = FLOW_END_FRAME;
        bool l4 = hdr.tcp.isValid() || hdr.udp.isValid()
            || (hdr.icmp.isValid() && (hdr.icmp.icmp_type == ICMP_ECHO_REQUEST
                                       || hdr.icmp.icmp_type == ICMP_ECHO_REPLY));
        // Every admitted TCP, UDP and ICMP echo packet of a first pass looks up its flow's
        // slots as it arrived (a NAT flow never holds one: SessionSetup sends it to the CPM);
        // the CPM's packets only to end a flow.
        if (!l4 || meta.returned == 1 || !og_admitted(meta)
                || (meta.port_role == ROLE_CPU && !end_flow)) {
            return;
        }
        meta.flow_looked_up = 1;
        way0_op.apply();
        way1_op.apply();
    }
}

// Late, where the packet's classification and SPM choice are known: the class and SPM of the
// flow a slot holds, read for a hit that no exact entry carries, written by the pass that claimed
// the slot. Indexed by the way (top bit) and the slot.
control FlowSlotVerdict(inout headers_t hdr, inout local_metadata_t meta) {
    // 1 (admitted) ++ 7 bits ++ the IDS class: admitted 0 marks a slot claimed by a packet
    // that its second pass no longer permitted (a policy applied between the passes).
    @name(".flow_slot_class")
    Register<bit<16>, bit<FLOW_SLOT_BITS>>(2 * FLOW_WAY_SLOTS) flow_slot_class;
    // The SPM's port (9 bits, 0: none) ++ 7 bits ++ its MAC's high 16 bits; and its low 32.
    @name(".flow_slot_spm")
    Register<bit<32>, bit<FLOW_SLOT_BITS>>(2 * FLOW_WAY_SLOTS) flow_slot_spm;
    @name(".flow_slot_spm_mac")
    Register<bit<32>, bit<FLOW_SLOT_BITS>>(2 * FLOW_WAY_SLOTS) flow_slot_spm_mac;
    @name(".flow_event_counter")
    OG_COUNTER(flow_event_counter, FLOW_EVENT_COUNT);

    RegisterAction<bit<16>, bit<FLOW_SLOT_BITS>, bit<16>>(flow_slot_class) read_class = {
        void apply(inout bit<16> value, out bit<16> read) {
            read = value;
        }
    };
    RegisterAction<bit<16>, bit<FLOW_SLOT_BITS>, bit<16>>(flow_slot_class) write_class = {
        void apply(inout bit<16> value) {
            value = meta.flow_slot_class;
        }
    };
    RegisterAction<bit<32>, bit<FLOW_SLOT_BITS>, bit<32>>(flow_slot_spm) read_spm = {
        void apply(inout bit<32> value, out bit<32> read) {
            read = value;
        }
    };
    RegisterAction<bit<32>, bit<FLOW_SLOT_BITS>, bit<32>>(flow_slot_spm) write_spm = {
        void apply(inout bit<32> value) {
            value = meta.flow_slot_spm;
        }
    };
    RegisterAction<bit<32>, bit<FLOW_SLOT_BITS>, bit<32>>(flow_slot_spm_mac) read_spm_mac = {
        void apply(inout bit<32> value, out bit<32> read) {
            read = value;
        }
    };
    RegisterAction<bit<32>, bit<FLOW_SLOT_BITS>, bit<32>>(flow_slot_spm_mac) write_spm_mac = {
        void apply(inout bit<32> value) {
            value = meta.spm_mac[31:0];
        }
    };

    apply {
        if (FLOW_END_FRAME) {
            // (SessionSetup used the frame up.)
            if (FLOW_WAY_MINE(meta.flow_way0_found) || FLOW_WAY_MINE(meta.flow_way1_found)) {
                OG_COUNT(flow_event_counter, FLOW_EVENT_ENDED);
            }
            return;
        }
        bool on0 = FLOW_WAY_MINE(meta.flow_way0_found);
        bit<FLOW_SLOT_BITS> index = 1w0 ++ meta.flow_way0;
        if (!on0) {
            index = 1w1 ++ meta.flow_way1;
        }
        if (meta.flow_claim == 1 && meta.flow_claim_mine == 1) {
            // Pass 2 took the slot: the flow's class and SPM as this pass found them, admitted
            // if this pass still permits the packet (SessionSetup reported it).
            meta.flow_slot_class = (bit<16>)meta.ids_class;
            if (meta.send_session_request == 1) {
                meta.flow_slot_class = 16w0x8000 | (bit<16>)meta.ids_class;
                meta.dp_session = 1;
                OG_COUNT(flow_event_counter, FLOW_EVENT_CREATED);
            }
            meta.flow_slot_spm = (bit<7>)0 ++ meta.spm_port ++ meta.spm_mac[47:32];
            write_class.execute(index);
            write_spm.execute(index);
            write_spm_mac.execute(index);
        } else if (meta.flow_claim == 1 || meta.flow_collision == 1) {
            // The slot was taken between the passes, or both ways were: the CPM path.
            OG_COUNT(flow_event_counter, FLOW_EVENT_COLLISION);
        } else if (meta.flow_hit == 1) {
            // A later packet of a flow the data plane made, which no exact entry carries
            // (SessionSetup let it through as a hit).
            bit<16> class = read_class.execute(index);
            bit<32> spm = read_spm.execute(index);
            bit<32> spm_mac = read_spm_mac.execute(index);
            meta.session_class = (class_id_t)class[7:0];
            meta.meter_class = (class_id_t)class[7:0];
            meta.spm_port = (port_id_t)spm[24:16];
            meta.spm_mac = spm[15:0] ++ spm_mac;
            // Steering's "no SPM up" was about a new flow; this one keeps its SPM.
            meta.drop_session = DROP_NONE;
            if (class[15:15] == 0) {
                // Claimed by a packet that its second pass did not permit: no session.
                meta.drop_setup = DROP_NO_SESSION;
            } else if (meta.spm_port == 0) {
                meta.drop_fwd = meta.route_drop;
            } else {
                meta.drop_fwd = DROP_NONE;
            }
            OG_COUNT(flow_event_counter, FLOW_EVENT_HIT);
        }
    }
}

#endif
