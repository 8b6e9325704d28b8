// Packet headers, the pipeline's local metadata, and the digest records sent to the controller.
#ifndef OPENGATE_HEADERS_P4
#define OPENGATE_HEADERS_P4

#include "defines.p4"

@controller_header("packet_in")
header packet_in_h {
    port_id_t    ingress_port;
    bit<7>       _pad0;       // fields on byte boundaries, acl_rule on a 32-bit one (Tofino PHV)
    cpu_reason_t reason;
    class_id_t   ids_class;   // what classification found, so the controller need not redo it
    rule_id_t    acl_rule;
    port_id_t    spm_port;    // the SPM the selector chose (0: none)
    bit<7>       _pad;
}

@controller_header("packet_out")
header packet_out_h {
    port_id_t egress_port;
    bit<1>    submit_to_ingress;  // 1: run the packet through the pipeline as if it arrived
#if defined(OG_DP_SESSIONS) || defined(OG_FLOW_SLOTS)
    bit<1>    end_flow;           // 1 (with submit_to_ingress): free the slot of the packet's flow
    bit<5>    _pad;
#else
    bit<6>    _pad;
#endif
}

header ethernet_h {
    mac_addr_t dst_addr;
    mac_addr_t src_addr;
    bit<16>    ether_type;
}

header vlan_h {
    bit<3>  pcp;
    bit<1>  dei;
    bit<12> vid;
    bit<16> ether_type;
}

header arp_h {
    bit<16>     htype;
    bit<16>     ptype;
    bit<8>      hlen;
    bit<8>      plen;
    bit<16>     oper;
    mac_addr_t  sha;
    ipv4_addr_t spa;
    mac_addr_t  tha;
    ipv4_addr_t tpa;
}

header ipv4_h {
    bit<4>      version;
    bit<4>      ihl;
    bit<8>      dscp_ecn;
    bit<16>     total_len;
    bit<16>     identification;
    bit<3>      flags;
    bit<13>     frag_offset;
    bit<8>      ttl;
    bit<8>      protocol;
    bit<16>     hdr_checksum;
    ipv4_addr_t src_addr;
    ipv4_addr_t dst_addr;
}

header ipv4_options_h {
    varbit<320> options;
}

header tcp_h {
    l4_port_t sport;
    l4_port_t dport;
    bit<32>   seq_no;
    bit<32>   ack_no;
    bit<4>    data_offset;
    bit<4>    res;
    bit<8>    flags;
    bit<16>   window;
    bit<16>   checksum;
    bit<16>   urgent_ptr;
}

header udp_h {
    l4_port_t sport;
    l4_port_t dport;
    bit<16>   len;
    bit<16>   checksum;
}

header icmp_h {
    bit<8>  icmp_type;
    bit<8>  code;
    bit<16> checksum;
    bit<16> identifier;   // echo request/reply; other types: first half of the rest of header
    bit<16> seq_no;
}

// The first 8 bytes of the transport header an ICMP error quotes: TCP or UDP ports, then for
// UDP its length and checksum (TCP's checksum lies beyond them); an ICMP echo request's type and
// code, checksum, identifier and sequence number.
header quoted_l4_h {
    l4_port_t sport;      // echo: type, code
    l4_port_t dport;      // echo: checksum
    bit<16>   word2;      // UDP: length; echo: identifier
    bit<16>   word3;      // UDP: checksum; echo: sequence number
}

#ifdef OG_IPV6
// IPv6 (RFC 8200), addresses in halves (ipv6_half_t).
header ipv6_h {
    bit<4>      version;
    bit<8>      traffic_class;
    bit<20>     flow_label;
    bit<16>     payload_len;
    bit<8>      next_hdr;
    bit<8>      hop_limit;
    ipv6_half_t src_hi;
    ipv6_half_t src_lo;
    ipv6_half_t dst_hi;
    ipv6_half_t dst_lo;
}

// An options or routing extension header's first 8 bytes (hop-by-hop, routing, destination
// options: next header, length in 8-byte units after the first 8)...
header ipv6_ext_h {
    bit<8>  next_hdr;
    bit<8>  hdr_ext_len;
    bit<48> data;
}

// ...and the rest, when hdr_ext_len > 0 (the parser walks headers up to 256 bytes: 31 units).
header ipv6_ext_rest_h {
    varbit<1984> data;
}

header ipv6_frag_h {
    bit<8>  next_hdr;
    bit<8>  reserved;
    bit<13> frag_offset;
    bit<2>  res;
    bit<1>  more;
    bit<32> identification;
}

// What follows an ICMPv6 neighbour solicitation's first 8 bytes (in icmp): the target...
header nd_target_h {
    ipv6_half_t target_hi;
    ipv6_half_t target_lo;
}

// ...and a link-layer address option (RFC 4861 section 4.6.1).
header nd_lla_option_h {
    bit<8>     opt_type;
    bit<8>     opt_len;
    mac_addr_t mac;
}
#endif

struct headers_t {
    packet_out_h   packet_out;
    packet_in_h    packet_in;
    ethernet_h     ethernet;
    vlan_h         vlan;
    arp_h          arp;
    ipv4_h         ipv4;
    ipv4_options_h ipv4_options;
#ifdef OG_IPV6
    ipv6_h          ipv6;
    ipv6_ext_h      ipv6_hop_by_hop;
    ipv6_ext_rest_h ipv6_hop_by_hop_rest;
    ipv6_ext_h      ipv6_dest_opts;     // before a routing header
    ipv6_ext_rest_h ipv6_dest_opts_rest;
    ipv6_ext_h      ipv6_routing;
    ipv6_ext_rest_h ipv6_routing_rest;
    ipv6_frag_h     ipv6_fragment;
    ipv6_ext_h      ipv6_dest_opts2;    // for the final destination
    ipv6_ext_rest_h ipv6_dest_opts2_rest;
#endif
    tcp_h          tcp;
    udp_h          udp;
    icmp_h         icmp;
#ifdef OG_IPV6
    nd_target_h     nd_target;
    nd_lla_option_h nd_option;
#endif
#ifdef OG_ICMP_RELATED
    ipv4_h         quoted_ipv4;   // what an ICMP error quotes (RFC 792: header + 8 bytes)
    quoted_l4_h    quoted_l4;
#endif
}

// Reported to the controller when a permitted session-opening packet misses the session table.
struct session_request_t {
    ipv4_addr_t ipv4_src;
    ipv4_addr_t ipv4_dst;
    bit<8>      ip_proto;
    l4_port_t   l4_sport;
    l4_port_t   l4_dport;
    port_id_t   ingress_port;
    rule_id_t   acl_rule;
    class_id_t  ids_class;
    port_id_t   spm_port;
    mac_addr_t  spm_mac;
#ifdef OG_DP_SESSIONS
    // (Not on Tofino, whose slots carry no NAT flow and whose learning digest holds 48 bytes.)
    ipv4_addr_t nat_addr;            // the data plane's NAT binding of the flow: masqueraded
    l4_port_t   nat_port;            // as nat_addr:nat_port, or forwarded to it (0: no NAT)
    nat_kind_t  nat_kind;            // NAT_REWRITE_SRC or NAT_REWRITE_DST, of the first packet
#endif
#if defined(OG_DP_SESSIONS) || defined(OG_FLOW_SLOTS)
    bit<1>      dp_session;          // 1: a data-plane slot carries the flow (both directions
                                     // pass without exact entries); 0: it waits for them
#endif
}

// Reported when a TCP FIN or RST hits a session, so that the controller can retire it.
struct session_close_t {
    ipv4_addr_t ipv4_src;
    ipv4_addr_t ipv4_dst;
    bit<8>      ip_proto;
    l4_port_t   l4_sport;
    l4_port_t   l4_dport;
    bit<8>      tcp_flags;
}

// The flow key the session lookups use (see local_metadata_t's flow_*): without related ICMP
// errors, the packet's own headers.
#ifdef OG_IPV6
// An IPv6 session's FIN or RST (the CPM ends the session), as session_close_t.
struct session_close_v6_t {
    ipv6_half_t ipv6_src_hi;
    ipv6_half_t ipv6_src_lo;
    ipv6_half_t ipv6_dst_hi;
    ipv6_half_t ipv6_dst_lo;
    bit<8>      ip_proto;
    l4_port_t   l4_sport;
    l4_port_t   l4_dport;
    bit<8>      tcp_flags;
}
#endif

#ifdef OG_ICMP_RELATED
#define FLOW_SRC   meta.flow_src
#define FLOW_DST   meta.flow_dst
#define FLOW_PROTO meta.flow_proto
#define FLOW_SPORT meta.flow_sport
#define FLOW_DPORT meta.flow_dport
#define FLOW_ICMP_ERROR (meta.icmp_error == 1)
#else
#define FLOW_SRC   hdr.ipv4.src_addr
#define FLOW_DST   hdr.ipv4.dst_addr
#define FLOW_PROTO hdr.ipv4.protocol
#define FLOW_SPORT meta.l4_sport
#define FLOW_DPORT meta.l4_dport
#define FLOW_ICMP_ERROR false
#endif

// Nothing so far stops the packet: a sound IPv4/ARP header, a port with a role, a tag (if any)
// that this NPM issued, arriving on an SPM port. The session lookup and the meters test it;
// DropDecision tells the reasons apart.
#define og_admitted(meta) \
    ((meta).drop_valid == 0 && (meta).drop_tag == 0 && (meta).port_role != ROLE_UNKNOWN \
     && ((meta).tagged == 0 || (meta).port_role == ROLE_SPM))

// Whether the session table is looked up: og_admitted, not back from an SPM with NAT done, and
// not expiring here (og_expires_here). Written out by role, so that a Tofino gateway tests it in
// four rows, beside port_role's result rather than a stage after a flag derived from it.
#define og_session_lookup(meta) \
    ((meta).drop_valid == 0 && (meta).drop_tag == 0 && (meta).returned_nat_done == 0 \
     && ((meta).port_role == ROLE_SPM \
         || ((meta).tagged == 0 \
             && ((meta).port_role == ROLE_OUTSIDE || (meta).port_role == ROLE_CPU \
                 || ((meta).port_role == ROLE_INSIDE && (meta).last_hop == 0)))))

// Whether the classifier (Classify, and Steering's tables, which read its class) is applied:
// where the shell defines OG_CLASSIFY_ON_MISS, only for a packet that no session carries (its
// session was looked up first); elsewhere always, before the session lookup.
#ifdef OG_CLASSIFY_ON_MISS
#define og_classifier_needed(meta) ((meta).session_hit == 0)
#else
#define og_classifier_needed(meta) true
#endif

// A packet whose TTL runs out at the gateway, sent to it (a unicast frame) for a unicast address
// (meta.last_hop, from its headers alone). Multicast and broadcast (TTL 1 is common there: SSDP,
// IGMP) are never answered, and are dropped as before. Written as bit tests (TTL 0 or 1; not
// 224.0.0.0/3, i.e. below 0xe0 in the first byte), which a Tofino gateway matches exactly: as
// ranges, bf-p4c failed on them in the slots build ("bad gateway field layout for range match").
#define og_last_hop(hdr) \
    ((hdr).ipv4.ttl[7:1] == 0 && (hdr).ethernet.dst_addr[40:40] == 0 && (hdr).ipv4.dst_addr[31:29] != 7)

// Such a packet from an inside host: the CPM answers it with a time exceeded.
#define og_expires_here(meta) \
    (og_admitted(meta) && (meta).port_role == ROLE_INSIDE && (meta).last_hop == 1)

// A packet from an inside host, to the gateway as above, that no route takes, and that its
// session or the ACL lets through (denied traffic learns nothing; an ACL's to-CPU verdict comes
// first): the CPM answers it with a destination unreachable (or, to one of the gateway's own
// addresses, a ping with its echo reply). Back from an SPM a packet has its route already.
#define og_unroutable_here(hdr, meta) \
    (og_admitted(meta) && (meta).port_role == ROLE_INSIDE && (meta).routed == 0 \
     && (meta).drop_session == 0 \
     && ((meta).session_hit == 1 || (meta).acl_verdict == ACL_PERMIT) \
     && (hdr).ethernet.dst_addr[40:40] == 0 && (hdr).ipv4.dst_addr[31:29] != 7)

struct local_metadata_t {
    // Architecture-neutral view of the intrinsic metadata (filled and consumed by the shell).
    port_id_t     ingress_port;
    port_id_t     egress_port;
    bit<32>       packet_length;
    bit<1>        parser_truncated;
    bit<1>        checksum_error;
    drop_reason_t drop_reason;       // the verdict (DropDecision): DROP_NONE lets the packet go
    bit<1>        to_cpu;
    cpu_reason_t  cpu_reason;
    bit<1>        send_session_request;
    bit<1>        send_session_close;

    // Parsed view.
    l4_port_t   l4_sport;            // TCP/UDP port; ICMP echo request: identifier
    l4_port_t   l4_dport;            // TCP/UDP port; ICMP echo reply: identifier
    // The flow key as the packet arrived, before any NAT: what the digests report (the
    // controller indexes a session by each direction's key as it arrives).
    ipv4_addr_t key_src;
    ipv4_addr_t key_dst;
    l4_port_t   key_sport;
    l4_port_t   key_dport;
    bit<8>      tcp_flags;
#ifdef OG_ICMP_RELATED
    // The key of the flow the packet belongs to, for the session lookups: the packet's own
    // (kept equal to its headers, NAT included), or, for an ICMP error that quotes a TCP or UDP
    // packet or an echo request, the quoted packet's reversed (the error travels back towards
    // its sender; an echo request reversed is keyed as its reply: identifier as l4_dport).
    bit<1>      icmp_error;
    ipv4_addr_t flow_src;
    ipv4_addr_t flow_dst;
    bit<8>      flow_proto;
    l4_port_t   flow_sport;
    l4_port_t   flow_dport;
    ipv4_addr_t quoted_old_addr;     // Nat: the quoted packet's address, port and checksums
    l4_port_t   quoted_old_port;     // before it rewrote them
    bit<16>     quoted_old_ip_csum;
    bit<16>     quoted_old_l4_csum;
    bit<16>     quoted_new_l4_csum;
    bit<1>      quoted_echo;         // the error quotes an ICMP echo request
#endif

    // Why each step would drop the packet (0: it would not). A step writes only its own field and
    // reads no other step's, so that a target can run independent steps side by side (Tofino:
    // in the same MAU stage); DropDecision keeps the first non-zero one in pipeline order.
    drop_reason_t drop_valid;        // Validation
    drop_reason_t drop_tag;          // PortRole's tag table: a tag this NPM did not issue
    drop_reason_t drop_arp;          // ArpResponder
    drop_reason_t drop_session;      // Session: blocked; on a miss, Steering: no SPM up
    drop_reason_t drop_setup;        // SessionSetup (no session)
    drop_reason_t route_drop;        // Routing: why the route would drop the packet (no route,
                                     // TTL); drop_fwd where it leaves by its route (OgIngress,
                                     // SessionSetup for a packet a data-plane session admits)
    drop_reason_t drop_fwd;          // route_drop for a packet that leaves by its route

    // Port role and next-hop tag.
    port_role_t port_role;
    bit<1>      tagged;              // the destination MAC is a tag MAC (set by the parser)...
    tag_t       tag;                 // ...and these are its low 16 bits
    bit<1>      returned;            // came back from an SPM with a tag we issued
    bit<1>      returned_nat_done;   // ...and NAT was applied before it went out
    bit<1>      last_hop;            // og_last_hop: read from the headers, beside port_role
    bit<1>      expires_here;        // og_expires_here, tested once before the classifier
    tag_t       tag_base;            // this NPM's tag block; bit 0 says "NAT already done"

    // Session.
    bit<1>      session_hit;
    class_id_t  session_class;
    port_id_t   spm_port;            // 0: no inspection
    mac_addr_t  spm_mac;
    nat_kind_t  nat_kind;
    ipv4_addr_t nat_addr;
    l4_port_t   nat_port;
    bit<1>      nat_before_spm;
    bit<1>      nat_applied;

    // Data-plane sessions (SessionSetup, where the shell defines OG_DP_SESSIONS).
    flow_ticks_t now;                // the packet's arrival time, set by the shell
    bit<1>       flow_hit;           // admitted by a data-plane session slot (no exact entry yet)
    bit<1>       dp_session;         // the digest's dp_session
    flow_ticks_t flow_idle_ticks;    // this protocol's slot lifetime (flow_ageing)
    flow_ticks_t flow_closing_ticks; // ...after a FIN or RST
    flow_ticks_t flow_report_ticks;  // ...and how often it is reported again without entries
    bit<1>       dp_nat;             // the masquerade rule lets the data plane pick the port...
    ipv4_addr_t  dp_nat_addr;        // ...on this address...
    l4_port_t    dp_nat_base;        // ...from the block starting here (NAT_DP_SLOTS ports)
    ipv4_addr_t  dp_public_addr;     // NatReverse: the public address of the packet's flow
    bit<1>       dp_nat_reverse;     // a reply that NatReverse translated by its flow's slot
    flow_slot_t  dp_nat_slot;        // ...that slot
    bit<1>       dp_late_nat;        // SessionSetup set a rewrite to apply last (a masquerade, a
                                     // forward's reply, a forward undone for the CPU)
    bit<1>       dp_dnat;            // a port forward the data plane carries (PortForward)...
    bit<1>       dp_dnat_reply;      // ...or the reply of one (its source is a forward's target)
    ipv4_addr_t  dp_dnat_addr;       // the forward's target (dp_dnat) or public address (reply)
    l4_port_t    dp_dnat_port;       // ...and port
    bit<1>       dp_dnat_now;        // PortForward rewrote the destination before routing
#ifdef OG_FLOW_SLOTS
    // Data-plane sessions on Tofino (arch/tna_flow_slots.p4).
    bit<32>      flow_addr_gap;      // src |-| dst and...
    l4_port_t    flow_port_gap;      // ...sport |-| dport (0: src's is not the larger)
    bit<32>      flow_lo_addr;       // the lower end's address and...
    l4_port_t    flow_lo_port;       // ...port: with the mixes, the key the hashes read
    bit<32>      flow_fingerprint;   // the third hash of the flow's key
    bit<FLOW_WAY_BITS> flow_way0;    // the flow's slot in way 0...
    bit<FLOW_WAY_BITS> flow_way1;    // ...and in way 1
    bit<1>       flow_looked_up;     // FlowSlotWays ran its RegisterActions...
    bit<8>       flow_way0_found;    // ...and what each way's found (FLOW_WAY_* in the file)
    bit<8>       flow_way1_found;
    bit<1>       flow_claim;         // pass 2 of an opening packet: claim...
    bit<1>       flow_claim_way;     // ...in this way
    bit<1>       flow_claim_mine;    // ...and the claim took the slot
    bit<1>       flow_resubmit;      // pass 1 of an opening packet with a free way: resubmit
    bit<1>       flow_collision;     // an opening packet whose ways were both taken
    bit<16>      flow_slot_class;    // what pass 2 writes into the slot
    bit<32>      flow_slot_spm;
#endif

    // Classification (HSM / IPP).
    bit<1>        classifier_version;
    seg_index_t   acl_sa_index;
    seg_index_t   acl_da_index;
    seg_index_t   acl_sp_index;
    seg_index_t   acl_dp_index;
    seg_index_t   acl_proto_index;
    seg_index_t   ids_sa_index;
    seg_index_t   ids_da_index;
    seg_index_t   ids_sp_index;
    seg_index_t   ids_dp_index;
    seg_index_t   ids_proto_index;
    agg_index_t   acl_addr_index;
    agg_index_t   acl_port_index;
    agg_index_t   ids_addr_index;
    agg_index_t   ids_port_index;
#ifdef OG_HSM_SPILL
    // The spill tables' rules, and how far HSM's come after them (Classify's merge).
    rule_id_t     spill_acl_rule;
    rule_id_t     acl_spill_gap;
#endif
#ifdef OG_HSM_IDS_SPILL
    rule_id_t     spill_ids_rule;
    rule_id_t     ids_spill_gap;
#endif
#ifdef OG_HSM_PARTITIONS
    // The hybrid's second to sixth ACL partitions (Classify): their own classes of each field
    // and pair.
    seg_index_t   acl2_sa_index;
    seg_index_t   acl2_da_index;
    seg_index_t   acl2_sp_index;
    seg_index_t   acl2_dp_index;
    seg_index_t   acl2_proto_index;
    agg_index_t   acl2_addr_index;
    agg_index_t   acl2_port_index;
    seg_index_t   acl3_sa_index;
    seg_index_t   acl3_da_index;
    seg_index_t   acl3_sp_index;
    seg_index_t   acl3_dp_index;
    seg_index_t   acl3_proto_index;
    agg_index_t   acl3_addr_index;
    agg_index_t   acl3_port_index;
    seg_index_t   acl4_sa_index;
    seg_index_t   acl4_da_index;
    seg_index_t   acl4_sp_index;
    seg_index_t   acl4_dp_index;
    seg_index_t   acl4_proto_index;
    agg_index_t   acl4_addr_index;
    agg_index_t   acl4_port_index;
    seg_index_t   acl5_sa_index;
    seg_index_t   acl5_da_index;
    seg_index_t   acl5_sp_index;
    seg_index_t   acl5_dp_index;
    seg_index_t   acl5_proto_index;
    agg_index_t   acl5_addr_index;
    agg_index_t   acl5_port_index;
    seg_index_t   acl6_sa_index;
    seg_index_t   acl6_da_index;
    seg_index_t   acl6_sp_index;
    seg_index_t   acl6_dp_index;
    seg_index_t   acl6_proto_index;
    agg_index_t   acl6_addr_index;
    agg_index_t   acl6_port_index;
#endif
    acl_verdict_t acl_verdict;
    rule_id_t     acl_rule;
    class_id_t    ids_class;
    rule_id_t     ids_rule;

    // Steering: direction-agnostic flow key for the SPM selector.
    ipv4_addr_t flow_addr_mix;       // src ^ dst
    l4_port_t   flow_port_mix;       // sport ^ dport
    bit<16>     spm_pool;
    port_id_t   sel_spm_port;        // the selector's choice, used if the session table misses
    mac_addr_t  sel_spm_mac;
    bit<1>      needs_inspection;    // the class has an SPM pool...
    bit<1>      spm_fail_open;       // ...and lets traffic through when no SPM in it is up
    class_id_t  meter_class;         // the class whose meter this packet goes through

    // Forwarding.
    mac_addr_t    next_hop_mac;
    mac_addr_t    router_mac;        // the gateway's MAC on the route's egress port...
    bit<1>        router_mac_known;  // ...if it has one
    bit<1>        routed;
    bit<1>        snat_required;
    bit<1>        dnat_required;
    meter_color_t class_color;
    meter_color_t cpu_color;
    meter_color_t cpu_source_color;

    // Used by the TNA shell only (empty hooks on v1model): the parser's IPv4 checksum verdict, the
    // L4 checksum residual, and whether NAT changed a field the L4 checksum covers.
    bool          ipv4_checksum_ok;
    bit<16>       l4_residual;
    bit<1>        l4_checksum_update;
#ifdef OG_IPV6
    bit<8>        l4_proto;          // IPv6: the upper-layer protocol after the extension headers
    bit<1>        ipv6_chain_bad;    // the parser stopped at an extension header it does not walk
    bit<1>        ipv6_later_fragment; // a fragment after the first (no upper-layer header)
    bit<1>        ipv6_plain;        // no extension headers
    bit<1>        nd_solicit;        // a neighbour solicitation the responder can answer (shape)
    bit<1>        nd_reply;          // ...answered: the shell recomputes the ICMPv6 checksum
    bit<8>        icmpv6_type;       // the ICMPv6 type (0 for other protocols), an ACL key
    // NAT64 (control/nat64.p4): a session's translation and the route of its other family.
    bit<1>        nat64_prefix;      // the destination is in a NAT64 prefix (routing_v6)
    bit<1>        nat64_out;         // IPv6 to IPv4 (session_v6_nat64)...
    bit<1>        nat64_in;          // ...IPv4 to IPv6 (session_nat64_reply)
    ipv4_addr_t   nat64_v4_src;
    ipv4_addr_t   nat64_v4_dst;
    ipv6_half_t   nat64_src_hi;
    ipv6_half_t   nat64_src_lo;
    ipv6_half_t   nat64_dst_hi;
    ipv6_half_t   nat64_dst_lo;
    l4_port_t     nat64_l4_port;     // out: the source port (identifier); in: the destination's
    port_id_t     nat64_egress;
    mac_addr_t    nat64_next_hop_mac;
    mac_addr_t    nat64_router_mac;
    // An IPv6 session's FIN or RST: the addresses as it arrived (NAT64 translates them).
    bit<1>        close_v6;
    ipv6_half_t   close_src_hi;
    ipv6_half_t   close_src_lo;
    ipv6_half_t   close_dst_hi;
    ipv6_half_t   close_dst_lo;
#endif
}

#endif
