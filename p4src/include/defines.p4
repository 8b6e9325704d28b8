// Types, constants and enumerations shared by every control. No table sizes here (sizes.p4).
#ifndef OPENGATE_DEFINES_P4
#define OPENGATE_DEFINES_P4

typedef bit<48> mac_addr_t;
typedef bit<32> ipv4_addr_t;
// An IPv6 address as two 64-bit halves (hi: bits 127..64): the built-in switch's native path holds
// a field in 64 bits, Tofino's PHV in 32-bit containers; tables match both halves.
typedef bit<64> ipv6_half_t;
typedef bit<16> l4_port_t;
typedef bit<9>  port_id_t;          // v1model and Tofino both use 9-bit port numbers
typedef bit<16> seg_index_t;        // HSM segment index (one per field, per rule set)
typedef bit<32> agg_index_t;        // HSM aggregation (cross-product) index
typedef bit<32> rule_id_t;          // position of a rule in its rule file
typedef bit<8>  class_id_t;         // IDS class = inspection profile; 0 = no inspection
typedef bit<16> tag_t;              // next-hop identifier carried in a MAC address
typedef bit<8>  drop_reason_t;
typedef bit<8>  cpu_reason_t;
typedef bit<3>  port_role_t;
typedef bit<2>  nat_kind_t;
typedef bit<2>  acl_verdict_t;
typedef bit<2>  meter_color_t;
typedef bit<32> flow_slot_t;        // index of a data-plane session slot
typedef bit<32> flow_ticks_t;       // data-plane time in ticks of FLOW_TICK_US microseconds

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<16> ETHERTYPE_ARP  = 0x0806;
const bit<16> ETHERTYPE_VLAN = 0x8100;
const bit<16> ETHERTYPE_IPV6 = 0x86dd;

const bit<8> IP_PROTO_ICMP = 1;
const bit<8> IP_PROTO_TCP  = 6;
const bit<8> IP_PROTO_UDP  = 17;
const bit<8> IP_PROTO_ICMPV6 = 58;

// IPv6 extension headers the parser walks (RFC 8200 section 4.1 order), and "no next header".
const bit<8> IPV6_EXT_HOP_BY_HOP = 0;
const bit<8> IPV6_EXT_ROUTING    = 43;
const bit<8> IPV6_EXT_FRAGMENT   = 44;
const bit<8> IPV6_EXT_DEST_OPTS  = 60;
const bit<8> IPV6_NO_NEXT_HEADER = 59;

// ICMPv6 (RFC 4443, RFC 4861).
const bit<8> ICMPV6_ECHO_REQUEST = 128;
const bit<8> ICMPV6_ECHO_REPLY   = 129;
const bit<8> ICMPV6_NEIGHBOR_SOLICIT = 135;
const bit<8> ICMPV6_NEIGHBOR_ADVERT  = 136;
const bit<8> ND_OPT_SOURCE_LL_ADDR = 1;
const bit<8> ND_OPT_TARGET_LL_ADDR = 2;

const bit<8> ICMP_ECHO_REPLY   = 0;
const bit<8> ICMP_ECHO_REQUEST = 8;
// The errors that quote the packet they are about (its IPv4 header and first 8 bytes).
const bit<8> ICMP_DEST_UNREACHABLE = 3;
const bit<8> ICMP_TIME_EXCEEDED    = 11;
const bit<8> ICMP_PARAM_PROBLEM    = 12;

const bit<16> ARP_OPER_REQUEST = 1;
const bit<16> ARP_OPER_REPLY   = 2;

// TCP flag bits as they sit in tcp.flags (CWR ECE URG ACK PSH RST SYN FIN).
const bit<8> TCP_FLAG_FIN = 0x01;
const bit<8> TCP_FLAG_SYN = 0x02;
const bit<8> TCP_FLAG_RST = 0x04;
const bit<8> TCP_FLAG_ACK = 0x10;

// The CPU port, as given to the switch with --cpu-port.
const port_id_t CPU_PORT = 255;

// Next-hop tags live in locally administered MACs 02:4f:47:00:TT:TT ("OG").
const bit<32> TAG_MAC_PREFIX = 0x024f4700;

// Port roles, set per port by the controller.
const port_role_t ROLE_UNKNOWN = 0;
const port_role_t ROLE_INSIDE  = 1;
const port_role_t ROLE_OUTSIDE = 2;
const port_role_t ROLE_SPM     = 3;
const port_role_t ROLE_CPU     = 4;

// Why a packet was dropped: index of drop_counter. Keep in step with the controller's names,
// which are generated from this list by `make constants`.
const drop_reason_t DROP_NONE            = 0;
const drop_reason_t DROP_TRUNCATED       = 1;   // parser ran out of packet, or IPv4 total length > frame
const drop_reason_t DROP_BAD_CHECKSUM    = 2;   // IPv4 header checksum
const drop_reason_t DROP_BAD_IPV4_HEADER = 3;   // version != 4, IHL < 5, total length < IHL*4
const drop_reason_t DROP_TTL_EXPIRED     = 4;
const drop_reason_t DROP_TAG_SPOOF       = 5;   // next-hop tag on a non-SPM port
const drop_reason_t DROP_UNKNOWN_TAG     = 6;   // tag on an SPM port that this NPM did not issue
const drop_reason_t DROP_NO_SESSION      = 7;   // needs a session (e.g. TCP without SYN) and has none
const drop_reason_t DROP_ACL_DENY        = 8;
const drop_reason_t DROP_NO_ROUTE        = 9;
const drop_reason_t DROP_SESSION_BLOCKED = 10;  // the session was blocked (e.g. by an SPM verdict)
const drop_reason_t DROP_CLASS_METER     = 11;
const drop_reason_t DROP_CPU_METER       = 12;
const drop_reason_t DROP_UNKNOWN_PORT    = 13;  // port has no role
const drop_reason_t DROP_UNSUPPORTED     = 14;  // not IPv4 or ARP
const drop_reason_t DROP_NAT_NO_SESSION  = 15;  // returned from an SPM, needs NAT, session gone
const drop_reason_t DROP_CPU_LOOP        = 16;  // injected by the CPU and would go back to it
const drop_reason_t DROP_NO_SPM          = 17;  // the class needs inspection, no SPM is up, fail-closed
const drop_reason_t DROP_CPU_SOURCE_METER = 18; // this source's share of the path to the CPU is used up
const drop_reason_t DROP_NEW_FLOW_RATE   = 19;  // this source opens new flows faster than the policy allows
const drop_reason_t DROP_CPU_CONTROL     = 20;  // a control packet of the CPM, used up here (a flow ended)
const drop_reason_t DROP_BAD_IPV6_HEADER = 21;  // version != 6, multicast source
const drop_reason_t DROP_IPV6_EXT_HEADERS = 22; // an extension header chain the parser does not walk
const drop_reason_t DROP_NAT64_UNTRANSLATABLE = 23; // a NAT64 flow's packet RFC 7915 cannot map here
const bit<32> DROP_REASON_COUNT = 24;

// Why a packet goes to the controller (packet_in.reason).
const cpu_reason_t CPU_REASON_SESSION_NAT = 1;  // opening packet of a session that needs NAT
const cpu_reason_t CPU_REASON_ACL         = 2;  // an ACL rule says to-CPU
const cpu_reason_t CPU_REASON_TTL_EXPIRED = 3;  // from an inside host, its TTL runs out here
const cpu_reason_t CPU_REASON_NO_ROUTE    = 4;  // from an inside host, no route takes it
const cpu_reason_t CPU_REASON_SESSION_COLLISION = 5;  // opening packet, no NAT, both slots held
const cpu_reason_t CPU_REASON_SESSION_V6  = 6;  // opening packet of a permitted IPv6 flow
const cpu_reason_t CPU_REASON_NAT64_ICMP_ERROR = 7;  // an ICMP error about a NAT64 flow (translated by the CPM)
const bit<32> CPU_REASON_COUNT = 8;

// ACL verdicts.
const acl_verdict_t ACL_DENY   = 0;
const acl_verdict_t ACL_PERMIT = 1;
const acl_verdict_t ACL_TO_CPU = 2;
const rule_id_t RULE_NONE = 0xffffffff;

// NAT kinds: which end of the packet a session entry rewrites.
const nat_kind_t NAT_NONE        = 0;
const nat_kind_t NAT_REWRITE_SRC = 1;
const nat_kind_t NAT_REWRITE_DST = 2;
const nat_kind_t NAT_64          = 3;   // CPM only: a NAT64 session (IPv6 original, IPv4 reply)

// What the data-plane session slots did (index of flow_event_counter; docs/explanation/dp-sessions.md).
const bit<32> FLOW_EVENT_CREATED   = 0;  // an opening packet claimed a free slot
const bit<32> FLOW_EVENT_RECLAIMED = 1;  // ...a slot whose flow had aged out
const bit<32> FLOW_EVENT_HIT       = 2;  // a packet admitted by a slot (no exact entry yet)
const bit<32> FLOW_EVENT_COLLISION = 3;  // the slot holds another live flow: controller path
const bit<32> FLOW_EVENT_RETIRED   = 4;  // the controller removed the flow's entries: slot freed
const bit<32> FLOW_EVENT_CLOSING   = 5;  // FIN or RST seen: the slot ages out after the linger
const bit<32> FLOW_EVENT_NAT_CREATED = 6;  // a masqueraded flow claimed a slot, and with it its port
const bit<32> FLOW_EVENT_NAT_FULL    = 7;  // both of its candidate ports are taken: controller path
const bit<32> FLOW_EVENT_NAT_REVERSE = 8;  // a reply translated back by its flow's slot
const bit<32> FLOW_EVENT_DNAT_CREATED = 9;  // a port-forwarded flow claimed a slot
const bit<32> FLOW_EVENT_DNAT_REPLY   = 10; // a forward's reply admitted by its slot, rewritten
const bit<32> FLOW_EVENT_DNAT_FALLBACK = 11; // a forwarded flow found no slot: to the controller
const bit<32> FLOW_EVENT_REPORTED  = 12; // a routed flow without exact entries, alive after
                                         // its report interval: reported again (digest)
const bit<32> FLOW_EVENT_RELATED  = 13; // an ICMP error about a flow's packet, admitted by its slot
const bit<32> FLOW_EVENT_ENDED    = 14; // the controller ended a flow its slot alone carried
const bit<32> FLOW_EVENT_COUNT     = 15;

// Layout of a slot's state word: protocol, flags, class.
const bit<32> FLOW_STATE_VALID     = 0x100;  // the slot holds a flow
const bit<32> FLOW_STATE_INSTALLED = 0x200;  // its original direction's exact entry has been hit
const bit<32> FLOW_STATE_CLOSING   = 0x400;  // FIN or RST seen
const bit<32> FLOW_STATE_NAT       = 0x800;  // masqueraded: the slot's index is its public port
const bit<32> FLOW_STATE_DNAT      = 0x1000; // port-forwarded: keyed by its public end
const bit<32> FLOW_STATE_INSTALLED_REPLY = 0x2000; // its reply direction's exact entry has been hit

// A tick of data-plane time: the shell's microsecond timestamp >> 10.
const bit<32> FLOW_TICK_US = 1024;
// Slot lifetimes until the controller sets flow_ageing: 30 s idle, 10 s after FIN/RST.
const flow_ticks_t FLOW_DEFAULT_IDLE_TICKS    = 29297;
const flow_ticks_t FLOW_DEFAULT_CLOSING_TICKS = 9766;
// A routed flow the data plane carries without exact entries sends its digest again, from a
// packet of either direction, once this long (1 s until flow_ageing says otherwise) has passed
// since its last report: a controller that keeps no entries for short flows learns which flows
// live on, and one that could not install the entries (a full table, a lost digest) gets the
// flow again.
const flow_ticks_t FLOW_DEFAULT_REPORT_TICKS = 977;

const meter_color_t METER_GREEN  = 0;
const meter_color_t METER_YELLOW = 1;
const meter_color_t METER_RED    = 2;

#endif
