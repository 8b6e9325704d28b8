// How the shared controls and the shared parser name the Tofino (TNA / T2NA) externs and
// architecture hooks; the v1model twin is include/arch/v1model_externs.p4. Each macro keeps the
// meaning its v1model version has, with the Tofino way of getting it (docs/explanation/tofino.md).
#ifndef OPENGATE_ARCH_TNA_EXTERNS_P4
#define OPENGATE_ARCH_TNA_EXTERNS_P4

#if __TARGET_TOFINO__ == 2
#include <t2na.p4>
#else
#include <tna.p4>
#endif

// The PCIe CPU port: 320 on a 4-pipe Tofino (pipe 2, port 64), 0 on Tofino 2. Override with
// -DOG_TOFINO_CPU_PORT=... (e.g. 192 on a 2-pipe part). The pipeline keeps using its logical
// CPU_PORT (255, not a front-panel port on Tofino); the shell translates at the edges.
#ifndef OG_TOFINO_CPU_PORT
#if __TARGET_TOFINO__ == 2
#define OG_TOFINO_CPU_PORT 0
#else
#define OG_TOFINO_CPU_PORT 320
#endif
#endif

// bit<32>: two entries per RAM word, each a 28-bit packet and a 36-bit byte count, which the
// driver folds into 64-bit counts by syncing them periodically (half the SRAM of 64-bit pairs).
#define OG_DIRECT_COUNTER(name) DirectCounter<bit<32>>(CounterType_t.PACKETS_AND_BYTES) name
#define OG_DIRECT_COUNT(name) name.count()
#define OG_COUNTER(name, size) Counter<bit<64>, bit<32>>((bit<32>)(size), CounterType_t.PACKETS_AND_BYTES) name
#define OG_COUNT(name, index) name.count((bit<32>)(index))
#define OG_METER(name, size) Meter<bit<32>>((bit<32>)(size), MeterType_t.BYTES) name
#define OG_PACKET_METER(name, size) Meter<bit<32>>((bit<32>)(size), MeterType_t.PACKETS) name
#define OG_METER_EXECUTE(name, index, color) color = (meter_color_t)name.execute((bit<32>)(index))
// TNA colours: green 0, yellow 1, red 3.
#define OG_METER_IS_RED(color) ((color) == 3)
// The selector: CRC16 over the selector keys, fair (weighted by member replication) groups. The
// member profile is declared first, so that the @name before the macro names it: P4Runtime sees
// the profile (with_selector) under the v1model selector's name.
#define OG_SPM_SELECTOR(name) \
    ActionProfile(SPM_POOL_SIZE) name##_members; \
    ActionSelector(name##_members, Hash<bit<16>>(HashAlgorithm_t.CRC16), \
                   SelectorMode_t.FAIR, SPM_MAX_GROUP_SIZE, SPM_POOL_GROUPS) name
// Session ageing by the table's idle timeout (the driver reports idle entries to the control
// plane, which P4Runtime exposes as IdleTimeoutNotification, like v1model's support_timeout).
#define OG_SESSION_IDLE_TIMEOUT idle_timeout = true

// Data-plane sessions: the v1model slots (SessionSetup) read a slot's registers and write them
// later in the same pass, each register more than once; Tofino's RegisterActions make one
// read-modify-write per register per packet. Tofino has its own (OG_FLOW_SLOTS,
// arch/tna_flow_slots.p4: fingerprints in two ways, the claim in a resubmitted pass), for flows
// without NAT, built with -DOG_TNA_DP_SESSIONS (the tofino2-dp_sessions build, which takes all 20
// stages); the default builds keep the CPM path for every session (docs/explanation/tofino.md).
#undef OG_DP_SESSIONS
#ifdef OG_TNA_DP_SESSIONS
#define OG_FLOW_SLOTS
#else
#undef OG_FLOW_SLOTS
#endif
#define OG_REGISTER(type, name, size) Register<type, bit<32>>((bit<32>)(size)) name
// ICMP errors related to a session need the slots above; on Tofino they meet the ACL alone.
#undef OG_ICMP_RELATED

// IPv6 (control/ipv6.p4): v1model only until bf-p4c places it on Tofino (docs/limitations.md).
#undef OG_IPV6
// The hybrid's ACL spill table (Classify), on Tofino 2: HSM's rules plus up to 256 spilled ones per
// bank. On Tofino 1 it and its merge need a thirteenth stage (docs/explanation/tofino.md,
// "Table sizes"). The IDS spill table and the second and third ACL partitions are v1model's alone (the
// IDS headers fit Tofino 2's larger class table instead).
#if __TARGET_TOFINO__ == 2
#define OG_HSM_SPILL
#else
#undef OG_HSM_SPILL
#endif
#undef OG_HSM_IDS_SPILL
#undef OG_HSM_PARTITIONS
// A gateway compares a field with a constant only: HSM's final ACL action takes the saturating
// difference of its rule and the spilled one (non-zero when the spilled rule comes first), and the
// merge tests that.
#define OG_SPILL_GAP(gap, rule, spill_rule) gap = (rule) |-| (spill_rule);
#define OG_SPILL_FIRST(gap, spill_rule, rule) ((gap) != 0)

#define OG_WIRE_CPU_PORT OG_TOFINO_CPU_PORT

// Tables on the longest dependency chain (segments -> IDS class -> SPM choice) are placed before
// others that could take their stage, chiefly the session table, which spreads over stages.
#define OG_PLACE_EARLY @placement_priority(1)

// The classifier is applied to every packet, in the stages beside the session lookup (a session
// hit costs no time here, and a test of the hit would put the classifier stages after it).
#undef OG_CLASSIFY_ON_MISS

// Parser hooks. ipv4_checksum verifies the IPv4 header (options included). l4_checksum and
// icmp_checksum leave in meta.l4_residual the checksum of everything NAT does not change, so that
// the deparser recomputes the L4 checksum from the residual and the (possibly rewritten) fields.
#define OG_PARSER_DECLS \
    Checksum() ipv4_checksum; \
    Checksum() l4_checksum; \
    Checksum() icmp_checksum;
#define OG_PARSER_IPV4(hdr, meta) \
    ipv4_checksum.add(hdr.ipv4); \
    l4_checksum.subtract({hdr.ipv4.src_addr, hdr.ipv4.dst_addr})
#define OG_PARSER_IPV4_OPTIONS(hdr, meta) ipv4_checksum.add(hdr.ipv4_options)
#define OG_PARSER_IPV4_END(hdr, meta) meta.ipv4_checksum_ok = ipv4_checksum.verify()
#define OG_PARSER_TCP(hdr, meta) \
    l4_checksum.subtract({hdr.tcp.checksum}); \
    l4_checksum.subtract({hdr.tcp.sport, hdr.tcp.dport}); \
    l4_checksum.subtract_all_and_deposit(meta.l4_residual)
#define OG_PARSER_UDP(hdr, meta) \
    l4_checksum.subtract({hdr.udp.checksum}); \
    l4_checksum.subtract({hdr.udp.sport, hdr.udp.dport}); \
    l4_checksum.subtract_all_and_deposit(meta.l4_residual)
#define OG_PARSER_ICMP_ECHO(hdr, meta) \
    icmp_checksum.subtract({hdr.icmp.checksum}); \
    icmp_checksum.subtract({hdr.icmp.identifier}); \
    icmp_checksum.subtract_all_and_deposit(meta.l4_residual)

// Tofino's ingress has no frame length (only egress has pkt_length): the check is not made in
// ingress. The parser still flags headers cut short (PARSER_ERROR_NO_SPACE -> DROP_TRUNCATED).
#define OG_IPV4_LONGER_THAN_FRAME(hdr, meta, l2_len) false

// total_len < IHL * 4 compares two fields, which a Tofino gateway cannot, and bf-p4c folds the
// arithmetic that would turn it into a comparison with a constant back into one multi-stage
// action: not checked on Tofino (the parser still needs IHL >= 5 to go on).
#define OG_IPV4_SHORTER_THAN_HEADER(hdr, meta) false

// The IPv4 header checksum failed: the parser's Checksum.verify(), read in stage 0.
#define OG_IPV4_CHECKSUM_BAD(meta) (!(meta).ipv4_checksum_ok)

// L4 checksum after NAT: the deparser's Checksum extern recomputes it (see OG_PARSER_TCP).
#define OG_L4_CSUM_REPLACE(meta, csum, old_v, new_v, old_p, new_p) meta.l4_checksum_update = 1
// The deparser's UDP update sends a checksum of 0 as 0xffff itself; a test of the field here
// would see its old value and cost the NAT rewrite a second stage.
#define OG_UDP_CSUM_REPLACE(meta, csum, old_v, new_v, old_p, new_p) meta.l4_checksum_update = 1

#endif
