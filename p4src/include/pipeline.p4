// The OpenGate pipeline as a list of stages (DESIGN.md "Packet walk"). Architecture shells wrap
// OgIngress/OgEgress with their intrinsic metadata, checksum units and digest emission.
#ifndef OPENGATE_PIPELINE_P4
#define OPENGATE_PIPELINE_P4

#include "headers.p4"
#include "control/packet_io.p4"
#include "control/validation.p4"
#include "control/port_role.p4"
#include "control/arp.p4"
#include "control/session.p4"
#include "control/nat.p4"
#include "control/routing.p4"
#include "control/classify.p4"
#ifdef OG_FLOW_SLOTS
#include "arch/tna_flow_slots.p4"
#endif
#include "control/session_setup.p4"
#ifdef OG_IPV6
#include "control/nat64.p4"
#include "control/ipv6.p4"
#endif
#include "control/steering.p4"
#include "control/metering.p4"
#include "control/accounting.p4"

control OgIngress(inout headers_t hdr, inout local_metadata_t meta) {
    PacketOut() packet_out_handler;
    Validation() validation;
    PortRole() port_role;
    ArpResponder() arp;
    Session() session;
    NatReverse() nat_reverse;
    Nat() nat;
#ifdef OG_DP_SESSIONS
    Nat() late_nat;
#endif
    Routing() routing;
    PortForward() port_forward;
    NatPolicy() nat_policy;
    Classify() classify;
    SessionSetup() session_setup;
#ifdef OG_FLOW_SLOTS
    FlowSlotWays() flow_slot_ways;
    FlowSlotVerdict() flow_slot_verdict;
#endif
    Steering() steering;
    Forwarding() forwarding;
    Metering() metering;
    DropDecision() drop_decision;
    IngressAccounting() accounting;
#ifdef OG_IPV6
    Ipv6Pipeline() ipv6;
    Nat64Inbound() nat64_inbound;
#endif

    // Each step records why it would drop the packet in its own field; DropDecision makes the
    // verdict at the end. The lookups keyed on the packet as it arrived (classification, SPM
    // choice) run for every IPv4 packet alongside the session lookup, and a miss uses them: on
    // Tofino they share MAU stages with the session table instead of following it.
    apply {
        if (packet_out_fixed_port(hdr)) {
            packet_out_handler.apply(hdr, meta);
        } else {
            validation.apply(hdr, meta);
            port_role.apply(hdr, meta);
            if (hdr.arp.isValid()) {
                arp.apply(hdr, meta);
            } else if (hdr.ipv4.isValid()) {
                meta.key_src = hdr.ipv4.src_addr;
                meta.key_dst = hdr.ipv4.dst_addr;
                meta.key_sport = meta.l4_sport;
                meta.key_dport = meta.l4_dport;
                // A unicast packet from an inside host whose TTL runs out here goes to the CPM
                // as it arrived (no session, no NAT, whatever the ACL says, as a router checks
                // the TTL before its filters), metered like every packet-in; the CPM answers
                // with a time exceeded from the port's address (traceroute). Tested before the
                // classifier, each step below testing the flag itself, and the session lookup
                // its parts (port_role's result and the headers' last_hop): on Tofino 1 the
                // steps nested in one else branch waited for the classifier, and a lookup
                // that waited for the flag started a stage late (14 and 13 stages of 12).
                if (og_last_hop(hdr)) {
                    meta.last_hop = 1;
                }
                if (og_expires_here(meta)) {
                    meta.expires_here = 1;
                    meta.to_cpu = 1;
                    meta.cpu_reason = CPU_REASON_TTL_EXPIRED;
                }
                // Back from an SPM with NAT already done: the 5-tuple is post-NAT; just route.
                // (Tofino classifies first, in stages beside the session lookup; a software
                // target looks the session up first and classifies only a miss:
                // og_classifier_needed.)
#ifdef OG_CLASSIFY_ON_MISS
                if (og_session_lookup(meta)) {
                    session.apply(hdr, meta);
                }
                if (og_classifier_needed(meta)) {
                    classify.apply(hdr, meta);
                }
                steering.apply(hdr, meta);
#else
                classify.apply(hdr, meta);
                steering.apply(hdr, meta);
                if (og_session_lookup(meta)) {
                    session.apply(hdr, meta);
                }
#endif
#ifdef OG_IPV6
                // The reply direction of a NAT64 session becomes IPv6 (control/nat64.p4):
                // nothing below applies to it.
                if (meta.nat64_in == 1) {
                    nat64_inbound.apply(hdr, meta);
                } else {
#endif
#ifdef OG_ICMP_RELATED
                // An ICMP error its flow's session admits goes straight to the flow's end,
                // translated now if the flow is (RFC 5508), never to an SPM.
                if (meta.icmp_error == 1 && meta.expires_here == 0) {
                    meta.spm_port = 0;
                }
#endif
                // Without an exact entry, a reply to a flow the data plane masqueraded is found
                // by its port and translated back before routing (like nat_before_spm).
                if (meta.expires_here == 0) {
                    nat_reverse.apply(hdr, meta);
                }
#ifdef OG_FLOW_SLOTS
                // Tofino's slots: looked up (or claimed, or ended) beside the session table.
                if (meta.expires_here == 0) {
                    flow_slot_ways.apply(hdr, meta);
                }
#endif
                if (meta.session_hit == 0 && meta.returned_nat_done == 0
                        && meta.expires_here == 0) {
                    port_forward.apply(hdr, meta);
                }
                // NAT now unless it waits for the SPM (original direction of an inspected
                // flow). An expiring packet has no session and no data-plane rewrite.
                if ((meta.session_hit == 1
                        && (meta.spm_port == 0 || meta.nat_before_spm == 1
                            || meta.returned == 1))
                        || meta.dp_nat_reverse == 1 || meta.dp_dnat_now == 1) {
                    nat.apply(hdr, meta);
                }
                // An expiring packet's route goes unused: Forwarding sends it to the CPU.
                routing.apply(hdr, meta);
                // Does a new flow leave masqueraded? Asked as soon as the route is known, before
                // the SPM choice is merged below (SessionSetup then follows the merge in the
                // same Tofino stage).
                if (meta.session_hit == 0 && meta.returned_nat_done == 0
                        && meta.expires_here == 0) {
                    nat_policy.apply(hdr, meta);
                }
                if (meta.expires_here == 1) {
                    // To the CPM as it arrived (above).
                } else if (og_unroutable_here(hdr, meta)) {
                    // A permitted unicast packet from an inside host that no route takes:
                    // to the CPM, which answers with a destination unreachable (no session
                    // is set up for it), or a ping of the gateway with its echo reply.
                    meta.to_cpu = 1;
                    meta.cpu_reason = CPU_REASON_NO_ROUTE;
                } else if (meta.session_hit == 1 && (meta.spm_port == 0 || meta.returned == 1)) {
                    // A session's packet that leaves by its route: the route's verdict holds.
                    meta.meter_class = meta.session_class;
                    meta.drop_fwd = meta.route_drop;
                } else if (meta.session_hit == 1) {
                    // To the session's SPM.
                    meta.meter_class = meta.session_class;
                } else if (meta.returned == 0 && meta.needs_inspection == 1
                        && meta.sel_spm_port == 0 && meta.spm_fail_open == 0) {
                    // A new flow whose class needs an SPM when none is up, failing closed.
                    meta.meter_class = meta.ids_class;
                    meta.spm_port = 0;
                    meta.spm_mac = meta.sel_spm_mac;
                    meta.drop_session = DROP_NO_SPM;
                    meta.drop_fwd = meta.route_drop;
                } else if (meta.returned == 1 || meta.sel_spm_port == 0) {
                    // Back from its SPM, or a new flow without inspection (or failing open):
                    // leaves by its route.
                    meta.meter_class = meta.ids_class;
                    meta.spm_port = 0;
                    meta.spm_mac = meta.sel_spm_mac;
                    meta.drop_fwd = meta.route_drop;
                } else {
                    // A new flow goes to the SPM the selector chose.
                    meta.meter_class = meta.ids_class;
                    meta.spm_port = meta.sel_spm_port;
                    meta.spm_mac = meta.sel_spm_mac;
                }
                // Neither expiring nor unroutable (the only steps so far that send a packet to
                // the CPU): set up a session. A test of its own, not nested after the merge
                // above: on Tofino 1 a step that follows others in a block waits for them.
                if (meta.to_cpu == 0 && meta.returned_nat_done == 0) {
                    session_setup.apply(hdr, meta);
#ifdef OG_FLOW_SLOTS
                    flow_slot_verdict.apply(hdr, meta);
#endif
#ifdef OG_DP_SESSIONS
                    // A rewrite that does not change the route, last: a masquerade or a
                    // forward's reply the data plane carries, or a forward undone for the CPU.
                    if (meta.dp_late_nat == 1) {
                        late_nat.apply(hdr, meta);
                    }
#endif
                }
                forwarding.apply(hdr, meta);
#ifdef OG_IPV6
                }
#endif
            }
#ifdef OG_IPV6
            else if (hdr.ipv6.isValid()) {
                ipv6.apply(hdr, meta);
            }
#endif
            metering.apply(hdr, meta);
            drop_decision.apply(hdr, meta);
        }
        hdr.packet_out.setInvalid();
        accounting.apply(hdr, meta);
    }
}

control OgEgress(inout headers_t hdr, inout local_metadata_t meta) {
    PacketIn() packet_in_handler;
    EgressAccounting() accounting;

    apply {
        packet_in_handler.apply(hdr, meta);
        accounting.apply(hdr, meta);
    }
}

#endif
