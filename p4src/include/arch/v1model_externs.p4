// How the shared controls and the shared parser name the v1model externs and architecture hooks.
// The TNA shell defines the same macros with Tofino externs (include/arch/tna_externs.p4), so that
// control bodies are written once.
#ifndef OPENGATE_ARCH_V1MODEL_EXTERNS_P4
#define OPENGATE_ARCH_V1MODEL_EXTERNS_P4

#include <v1model.p4>

#define OG_DIRECT_COUNTER(name) direct_counter(CounterType.packets_and_bytes) name
#define OG_DIRECT_COUNT(name) name.count()
#define OG_COUNTER(name, size) counter((bit<32>)(size), CounterType.packets_and_bytes) name
#define OG_COUNT(name, index) name.count((bit<32>)(index))
#define OG_METER(name, size) meter((bit<32>)(size), MeterType.bytes) name
#define OG_PACKET_METER(name, size) meter((bit<32>)(size), MeterType.packets) name
#define OG_METER_EXECUTE(name, index, color) name.execute_meter((bit<32>)(index), color)
#define OG_METER_IS_RED(color) ((color) == METER_RED)
#define OG_SPM_SELECTOR(name) action_selector(HashAlgorithm.crc16, SPM_POOL_SIZE, SPM_SELECTOR_WIDTH) name
#define OG_SESSION_IDLE_TIMEOUT support_timeout = true

// Sessions made by the data plane (SessionSetup): register arrays, read and written in one pass.
#define OG_DP_SESSIONS
#define OG_REGISTER(type, name, size) register<type>((bit<32>)(size)) name
// Tofino's own data-plane sessions (arch/tna_flow_slots.p4): not on v1model, which has the above.
#undef OG_FLOW_SLOTS

// ICMP errors related to a session (RFC 5508): the parser reads the packet an error quotes, the
// session lookups use the key of the flow it belongs to (meta.flow_*), NAT rewrites the quoted
// packet too. Built on the data-plane sessions' slots, so only where they are.
#define OG_ICMP_RELATED

// IPv6 (control/ipv6.p4): parsed, firewalled and routed on v1model; the TNA shell does not
// define it until bf-p4c has placed it (docs/limitations.md).
#define OG_IPV6

// HSM spill tables (Classify): the rules the compiler keeps out of the cross products, in two
// small priority ternary tables looked up beside them; and the second and third ACL partitions.
#define OG_HSM_SPILL
#define OG_HSM_IDS_SPILL
#define OG_HSM_PARTITIONS
// Which of a spilled rule and HSM's comes first: compared where they meet.
#define OG_SPILL_GAP(gap, rule, spill_rule)
#define OG_SPILL_FIRST(gap, spill_rule, rule) ((spill_rule) < (rule))

// The CPU port as the parser sees it (the same number as the pipeline's CPU_PORT on v1model).
#define OG_WIRE_CPU_PORT CPU_PORT

// A placement hint for Tofino's table placement: nothing to do on v1model.
#define OG_PLACE_EARLY

// Look the session up before classifying, and classify (and steer) only a packet that no
// session carries (OgIngress): a software target pays for each table it applies, and the
// classifier is most of the pipeline's tables (nearly 40 in the hybrid), whose results a
// session's packet never reads. Tofino applies them side by side in its stages instead.
#define OG_CLASSIFY_ON_MISS

// Parser hooks: nothing to do, the shell's verify_checksum/update_checksum see whole headers.
#define OG_PARSER_DECLS
#define OG_PARSER_IPV4(hdr, meta)
#define OG_PARSER_IPV4_OPTIONS(hdr, meta)
#define OG_PARSER_IPV4_END(hdr, meta)
#define OG_PARSER_TCP(hdr, meta)
#define OG_PARSER_UDP(hdr, meta)
#define OG_PARSER_ICMP_ECHO(hdr, meta)

// Ingress knows the frame length, so an IPv4 total length longer than the frame is caught.
#define OG_IPV4_LONGER_THAN_FRAME(hdr, meta, l2_len) \
    (((bit<32>)(hdr).ipv4.total_len) + (l2_len) > (meta).packet_length)

// An IPv4 total length shorter than the header (IHL * 4).
#define OG_IPV4_SHORTER_THAN_HEADER(hdr, meta) \
    ((hdr).ipv4.total_len < (((bit<16>)(hdr).ipv4.ihl) << 2))

// The IPv4 header checksum failed (verify_checksum in the shell).
#define OG_IPV4_CHECKSUM_BAD(meta) ((meta).checksum_error == 1)

// L4 checksum after NAT: incremental update in the control (RFC 1624).
#define OG_L4_CSUM_REPLACE(meta, csum, old_v, new_v, old_p, new_p) \
    csum = csum_replace(csum, old_v, new_v, old_p, new_p)

// The same for a UDP checksum, which is sent as 0xffff when it comes out as 0 (0 means none).
#define OG_UDP_CSUM_REPLACE(meta, csum, old_v, new_v, old_p, new_p) \
    csum = csum_replace(csum, old_v, new_v, old_p, new_p); \
    if (csum == 0) { \
        csum = 0xffff; \
    }

#endif
