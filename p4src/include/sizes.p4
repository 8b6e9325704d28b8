// Table and extern sizes for the v1model targets (BMv2, the built-in switch). The TNA shell uses
// include/arch/tna_sizes.p4 instead, sized for Tofino's memories.
#ifndef OPENGATE_SIZES_P4
#define OPENGATE_SIZES_P4

// The HSM chains' exact tables (addr pair, port pair, final; both banks). BMv2 allocates every
// entry's bookkeeping when the program is pushed: 3.8 GB with 1,048,576 entries each. The compact
// build (-DWITH_COMPACT_TABLES, p4src/build/compact/) gives them 65,536 each for a laptop's BMv2
// (0.8 GB); the ClassBench 1k and 10k sets still fit, spread over more of the ACL's partitions
// (more lookups for a flow's first packet), and a larger set fits only the default build.
#ifdef WITH_COMPACT_TABLES
#define HSM_CHAIN_TABLE_SIZE      65536
#else
#define HSM_CHAIN_TABLE_SIZE      1048576
#endif

#define PORT_TABLE_SIZE           512
#define TAG_TABLE_SIZE            1024
#define SESSION_TABLE_SIZE        262144
#define ACL_NAIVE_TABLE_SIZE      16384
#define IDS_NAIVE_TABLE_SIZE      16384
#define SA_SEGMENT_TABLE_SIZE     65536
#define DA_SEGMENT_TABLE_SIZE     65536
#define SP_SEGMENT_TABLE_SIZE     65536
#define DP_SEGMENT_TABLE_SIZE     65536
#define PROTO_SEGMENT_TABLE_SIZE  256
#define ACL_ADDR_PAIR_TABLE_SIZE  HSM_CHAIN_TABLE_SIZE
#define ACL_PORT_PAIR_TABLE_SIZE  HSM_CHAIN_TABLE_SIZE
#define ACL_VERDICT_TABLE_SIZE    HSM_CHAIN_TABLE_SIZE
#define IDS_ADDR_PAIR_TABLE_SIZE  HSM_CHAIN_TABLE_SIZE
#define IDS_PORT_PAIR_TABLE_SIZE  HSM_CHAIN_TABLE_SIZE
#define IDS_CLASS_TABLE_SIZE      HSM_CHAIN_TABLE_SIZE
#define ACL2_ADDR_PAIR_TABLE_SIZE HSM_CHAIN_TABLE_SIZE
#define ACL2_PORT_PAIR_TABLE_SIZE HSM_CHAIN_TABLE_SIZE
#define ACL2_VERDICT_TABLE_SIZE   HSM_CHAIN_TABLE_SIZE
#define ACL3_ADDR_PAIR_TABLE_SIZE HSM_CHAIN_TABLE_SIZE
#define ACL3_PORT_PAIR_TABLE_SIZE HSM_CHAIN_TABLE_SIZE
#define ACL3_VERDICT_TABLE_SIZE   HSM_CHAIN_TABLE_SIZE
#define ACL4_ADDR_PAIR_TABLE_SIZE HSM_CHAIN_TABLE_SIZE
#define ACL4_PORT_PAIR_TABLE_SIZE HSM_CHAIN_TABLE_SIZE
#define ACL4_VERDICT_TABLE_SIZE   HSM_CHAIN_TABLE_SIZE
#define ACL5_ADDR_PAIR_TABLE_SIZE HSM_CHAIN_TABLE_SIZE
#define ACL5_PORT_PAIR_TABLE_SIZE HSM_CHAIN_TABLE_SIZE
#define ACL5_VERDICT_TABLE_SIZE   HSM_CHAIN_TABLE_SIZE
#define ACL6_ADDR_PAIR_TABLE_SIZE HSM_CHAIN_TABLE_SIZE
#define ACL6_PORT_PAIR_TABLE_SIZE HSM_CHAIN_TABLE_SIZE
#define ACL6_VERDICT_TABLE_SIZE   HSM_CHAIN_TABLE_SIZE
#define ACL_SPILL_TABLE_SIZE      2048
#define IDS_SPILL_TABLE_SIZE      2048
#define CLASS_TABLE_SIZE          256
#define SPM_POOL_SIZE             1024
#define SPM_SELECTOR_WIDTH        16
#define ROUTE_TABLE_SIZE          4096
#define NAT_TABLE_SIZE            1024
#define ARP_TABLE_SIZE            256
#define PORT_COUNTER_SIZE         512
#define FLOW_SLOTS                524288
#define FLOW_AGEING_TABLE_SIZE    256
#define CPU_SOURCE_METERS         4096
#define NEW_FLOW_METERS           4096
#define NAT_DP_SLOTS              16384
#define ND_TABLE_SIZE             256
#define SESSION_V6_TABLE_SIZE     65536
#define IPV6_ACL_TABLE_SIZE       4096
#define ROUTE_V6_TABLE_SIZE       4096
#define NPTV6_TABLE_SIZE          64

#endif
