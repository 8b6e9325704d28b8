// Step 9: L3 next hop by longest prefix on the destination (after NAT), then the final rewrite:
// towards an SPM (tag MACs) or to the next hop (MACs, TTL).
#ifndef OPENGATE_CONTROL_ROUTING_P4
#define OPENGATE_CONTROL_ROUTING_P4

control Routing(inout headers_t hdr, inout local_metadata_t meta) {
    @name(".route_to")
    action route_to(port_id_t port, mac_addr_t next_hop_mac) {
        meta.egress_port = port;
        meta.next_hop_mac = next_hop_mac;
        meta.routed = 1;
    }

    @name(".no_route")
    action no_route() {
        meta.routed = 0;
        meta.route_drop = DROP_NO_ROUTE;
    }

    @name(".routing")
    table routing {
        key = {
            hdr.ipv4.dst_addr : lpm @name("ipv4_dst");
        }
        actions = { route_to; @defaultonly no_route; }
        const default_action = no_route();
        size = ROUTE_TABLE_SIZE;
    }

    // Whether the route would drop the packet (route_drop): for want of TTL, set before the
    // lookup, and for want of a route, by the lookup's miss, which comes first, so that the
    // verdict is known with the route and not a stage after it. Whether the packet leaves by its
    // route (not to an SPM, not to the CPU) is known later: OgIngress and SessionSetup turn
    // route_drop into drop_fwd then.
    apply {
        if (hdr.ipv4.ttl[7:1] == 0) {  // TTL 0 or 1 (a bit test: og_last_hop, headers.p4)
            meta.route_drop = DROP_TTL_EXPIRED;
        }
        routing.apply();
    }
}

// The gateway's own MAC on the route's port is looked up as soon as the route is known, so that
// only the rewrite waits for SessionSetup's decision (to the CPU or not).
control Forwarding(inout headers_t hdr, inout local_metadata_t meta) {
    @name(".set_source_mac")
    action set_source_mac(mac_addr_t mac) {
        meta.router_mac = mac;
        meta.router_mac_known = 1;
    }

    // The gateway's own MAC on each port.
    @name(".router_mac")
    table router_mac {
        key = {
            meta.egress_port : exact @name("egress_port");
        }
        actions = { set_source_mac; @defaultonly NoAction; }
        const default_action = NoAction();
        size = PORT_TABLE_SIZE;
    }

    apply {
        if (meta.routed == 1) {
            router_mac.apply();
        }

        // The outgoing tag in its own variable: Tofino cannot OR into part of a MAC's container.
        tag_t out_tag = meta.tag_base | (tag_t)meta.nat_applied;
        if (meta.to_cpu == 1) {
            meta.egress_port = CPU_PORT;
        } else if (meta.returned == 0 && meta.spm_port != 0) {
            // Towards the SPM: the tag rides in the source MAC; bit 0 says NAT is already done.
            meta.egress_port = meta.spm_port;
            hdr.ethernet.dst_addr = meta.spm_mac;
            hdr.ethernet.src_addr = TAG_MAC_PREFIX ++ out_tag;
        } else if (meta.routed == 1 && hdr.ipv4.ttl[7:1] != 0) {
            hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
            hdr.ethernet.dst_addr = meta.next_hop_mac;
            if (meta.router_mac_known == 1) {
                hdr.ethernet.src_addr = meta.router_mac;
            }
        }
    }
}

#endif
