// Table and extern sizes. Tofino sizes live in the TNA shell; these are for v1model targets.
#ifndef OPENGATE_SIZES_P4
#define OPENGATE_SIZES_P4

#define PORT_TABLE_SIZE        512
#define TAG_TABLE_SIZE         1024
#define SESSION_TABLE_SIZE     262144
#define SEGMENT_TABLE_SIZE     65536
#define PAIR_TABLE_SIZE        1048576
#define VERDICT_TABLE_SIZE     1048576
#define NAIVE_ACL_TABLE_SIZE   16384
#define CLASS_TABLE_SIZE       256
#define SPM_POOL_SIZE          1024
#define SPM_SELECTOR_WIDTH     16
#define ROUTE_TABLE_SIZE       4096
#define NAT_TABLE_SIZE         1024
#define ARP_TABLE_SIZE         256
#define PORT_COUNTER_SIZE      512

#endif
