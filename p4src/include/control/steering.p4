// Step 6: choose an SPM for a new flow whose IDS class needs deep inspection. A weighted action
// selector over the class's SPM pool, hashed on a direction-agnostic flow key (addresses and ports
// XORed), so that both directions of a flow pick the same SPM. The choice is then pinned in the
// session entries. Every packet is steered as it arrives, alongside the session lookup; the
// pipeline uses the choice (sel_spm_port, sel_spm_mac) only when the lookup misses, and drops the
// packet there if its class needs an SPM, none is up and the class fails closed.
#ifndef OPENGATE_CONTROL_STEERING_P4
#define OPENGATE_CONTROL_STEERING_P4

control Steering(inout headers_t hdr, inout local_metadata_t meta) {
    @name(".inspect")
    action inspect(bit<16> pool, bit<1> open_on_failure) {
        meta.spm_pool = pool;
        meta.needs_inspection = 1;
        meta.spm_fail_open = open_on_failure;
    }

    @name(".no_inspection")
    action no_inspection() {
        meta.needs_inspection = 0;
    }

    // IDS class -> SPM pool (the service chain of the class's inspection profile).
    OG_PLACE_EARLY
    @name(".class_policy")
    table class_policy {
        key = {
            meta.ids_class : exact @name("class_id");
        }
        actions = { inspect; no_inspection; }
        default_action = no_inspection();
        size = CLASS_TABLE_SIZE;
    }

    @name(".spm_selector")
    OG_SPM_SELECTOR(spm_selector);

    @name(".steer_to_spm")
    action steer_to_spm(port_id_t port, mac_addr_t spm_mac) {
        meta.sel_spm_port = port;
        meta.sel_spm_mac = spm_mac;
    }

    OG_PLACE_EARLY
    @name(".spm_select")
    table spm_select {
        key = {
            meta.spm_pool       : exact @name("pool");
            meta.flow_addr_mix  : selector;
            hdr.ipv4.protocol   : selector;
            meta.flow_port_mix  : selector;
        }
        actions = { steer_to_spm; }
        implementation = spm_selector;
        size = SPM_POOL_SIZE;
    }

#ifdef OG_FLOW_SLOTS
    // Which end of the flow is the lower (by address; of one address, by port), for Tofino's
    // slot key, from saturating differences (apply, below): a gateway compares a field with a
    // constant, not with another field, and bf-p4c could not fit these tests in gateways
    // ("condition expression too complex"), so a ternary table with constant entries, in
    // order: one address and sport <= dport, one address, src < dst; otherwise src > dst.
    @hidden
    action lower_end_src() {
        meta.flow_lo_addr = hdr.ipv4.src_addr;
        meta.flow_lo_port = meta.l4_sport;
    }
    @hidden
    action lower_end_dst() {
        meta.flow_lo_addr = hdr.ipv4.dst_addr;
        meta.flow_lo_port = meta.l4_dport;
    }
    @hidden
    table flow_lower_end {
        key = {
            meta.flow_addr_gap : ternary;
            meta.flow_addr_mix : ternary;
            meta.flow_port_gap : ternary;
        }
        actions = { lower_end_src; lower_end_dst; }
        const entries = {
            (0, 0, 0) : lower_end_src();
            (0, 0, _) : lower_end_dst();
            (0, _, _) : lower_end_src();
        }
        const default_action = lower_end_dst();
        size = 3;
    }
#endif

    apply {
        // XOR is symmetric: a flow and its reverse give the same key, with no comparison of two
        // fields (which Tofino's gateways cannot do). Computed before the class is known, so that
        // it reads the addresses before NAT may rewrite them.
        meta.flow_addr_mix = hdr.ipv4.src_addr ^ hdr.ipv4.dst_addr;
        meta.flow_port_mix = meta.l4_sport ^ meta.l4_dport;
#ifdef OG_FLOW_SLOTS
        // The rest of the key Tofino's slots hash (arch/tna_flow_slots.p4), as early: the lower
        // end's address and port (of the lower address; of one address, of the lower port).
        // With the mixes that is the flow's two ends in order (the other end is the lower one
        // XOR the mixes), as on v1model: a saturating difference is 0 exactly when the first
        // is not the larger (flow_lower_end).
        meta.flow_addr_gap = hdr.ipv4.src_addr |-| hdr.ipv4.dst_addr;
        meta.flow_port_gap = meta.l4_sport |-| meta.l4_dport;
        flow_lower_end.apply();
#endif
        if (og_classifier_needed(meta)) {
            class_policy.apply();
            if (meta.needs_inspection == 1) {
                spm_select.apply();
            }
        }
    }
}

#endif
