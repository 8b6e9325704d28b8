// Table and extern sizes for Tofino (TNA shell). README "Running on Tofino" explains the choice:
// 256k sessions in both profiles; the naive-ACL profile holds acl1_10k and the community IDS
// headers in TCAM; the HSM profile's cross-product tables are sized for acl1_1k-class rule sets,
// because acl1_10k's need millions of entries (README "The HSM / IPP rule compiler").
#ifndef OPENGATE_TNA_SIZES_P4
#define OPENGATE_TNA_SIZES_P4

#define PORT_TABLE_SIZE           512
#define TAG_TABLE_SIZE            1024
#define SESSION_TABLE_SIZE        65536
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
#define IDS_CLASS_TABLE_SIZE      4096
#define CLASS_TABLE_SIZE          256
#define SPM_POOL_SIZE             1024
#define SPM_MAX_GROUP_SIZE        120
#define SPM_POOL_GROUPS           64
#define ROUTE_TABLE_SIZE          4096
#define NAT_TABLE_SIZE            1024
#define ARP_TABLE_SIZE            256
#define PORT_COUNTER_SIZE         512

#endif
