// Table and extern sizes for Tofino (TNA shell, Tofino 1 and 2). docs/explanation/tofino.md says
// what they hold and why: on Tofino 1 the session table must be complete by stage 4 (a chain of
// seven dependent steps follows it), which holds 65,536 entries next to the classification
// tables; Tofino 2 has 20 stages. The naive profile's ternary tables take 10 TCAM blocks per 512
// entries. The HSM cross products fit small policies and the community IDS headers, not
// ClassBench ACLs (acl1_1k alone needs 241,472 verdict entries).
#ifndef OPENGATE_TNA_SIZES_P4
#define OPENGATE_TNA_SIZES_P4

#define PORT_TABLE_SIZE           512
#define TAG_TABLE_SIZE            1024
#if __TARGET_TOFINO__ == 2 && defined(OG_TNA_DP_SESSIONS)
// With the data-plane slots (two ways of FLOW_WAY_SLOTS) the ways need SRAM in the session
// table's stages: 131,072 entries, a two-way session for each of the 65,536 slots.
#define SESSION_TABLE_SIZE        131072
#elif __TARGET_TOFINO__ == 2
#define SESSION_TABLE_SIZE        262144
#else
#define SESSION_TABLE_SIZE        65536
#endif
#define ACL_NAIVE_TABLE_SIZE      2048
#define IDS_NAIVE_TABLE_SIZE      3072
#define SA_SEGMENT_TABLE_SIZE     2048
#define DA_SEGMENT_TABLE_SIZE     2048
#define SP_SEGMENT_TABLE_SIZE     1024
#define DP_SEGMENT_TABLE_SIZE     1024
#define PROTO_SEGMENT_TABLE_SIZE  256
#define ACL_ADDR_PAIR_TABLE_SIZE  32768
#define ACL_PORT_PAIR_TABLE_SIZE  4096
#define ACL_VERDICT_TABLE_SIZE    32768
#define IDS_ADDR_PAIR_TABLE_SIZE  4096
#define IDS_PORT_PAIR_TABLE_SIZE  4096
#if __TARGET_TOFINO__ == 2
// The hybrid (OG_HSM_SPILL): 256 spilled ACL rules per bank; the community IDS headers without a
// spill table need 15,504 class entries per bank.
#define IDS_CLASS_TABLE_SIZE      32768
#define ACL_SPILL_TABLE_SIZE      512
#else
#define IDS_CLASS_TABLE_SIZE      4096
#endif
#define CLASS_TABLE_SIZE          256
#define SPM_POOL_SIZE             1024
#define SPM_MAX_GROUP_SIZE        120
#define SPM_POOL_GROUPS           64
#define ROUTE_TABLE_SIZE          4096
#define NAT_TABLE_SIZE            1024
#define ARP_TABLE_SIZE            256
#define PORT_COUNTER_SIZE         512
#define FLOW_SLOTS                65536
// Data-plane sessions (arch/tna_flow_slots.p4): two ways of FLOW_WAY_SLOTS slots each.
// 65,536 per way on Tofino 2 could not be placed beside its session table (no stage had the
// SRAM for a way's register and its table), 32,768 could.
#define FLOW_WAY_BITS             15
#define FLOW_WAY_SLOTS            (1 << FLOW_WAY_BITS)
#define FLOW_SLOT_BITS            (FLOW_WAY_BITS + 1)  // a slot of either way: the way ++ its slot
#define NEW_FLOW_METERS           4096
#define FLOW_AGEING_TABLE_SIZE    256
#define CPU_SOURCE_METERS         4096

#endif
