// The drop verdict, per-port packet counts and the drop counter indexed by reason.
#ifndef OPENGATE_CONTROL_ACCOUNTING_P4
#define OPENGATE_CONTROL_ACCOUNTING_P4

// The first reason in pipeline order counts: the parser's, then each step's field (and the port
// checks, from the port's role) in the order the steps come in the packet walk (DESIGN.md), then
// the meters. A forwarding reason (no route, TTL) does not apply to a packet that goes to the CPU
// instead. The packet is dropped if drop_reason is not DROP_NONE.
control DropDecision(inout headers_t hdr, inout local_metadata_t meta) {
    apply {
        if (meta.parser_truncated == 1) {
            meta.drop_reason = DROP_TRUNCATED;
        } else if (meta.drop_valid != 0) {
            meta.drop_reason = meta.drop_valid;
        } else if (meta.port_role == ROLE_UNKNOWN) {
            meta.drop_reason = DROP_UNKNOWN_PORT;
        } else if (meta.tagged == 1 && meta.port_role != ROLE_SPM) {
            meta.drop_reason = DROP_TAG_SPOOF;
        } else if (meta.drop_tag != 0) {
            meta.drop_reason = meta.drop_tag;
        } else if (meta.drop_arp != 0) {
            meta.drop_reason = meta.drop_arp;
        } else if (meta.drop_session != 0) {
            meta.drop_reason = meta.drop_session;
        } else if (meta.drop_setup != 0) {
            meta.drop_reason = meta.drop_setup;
        } else if (meta.drop_fwd != 0 && meta.to_cpu == 0) {
            meta.drop_reason = meta.drop_fwd;
        } else if (OG_METER_IS_RED(meta.class_color)) {
            meta.drop_reason = DROP_CLASS_METER;
        } else if (OG_METER_IS_RED(meta.cpu_color)) {
            meta.drop_reason = DROP_CPU_METER;
        } else if (OG_METER_IS_RED(meta.cpu_source_color)) {
            meta.drop_reason = DROP_CPU_SOURCE_METER;
        }
    }
}

control IngressAccounting(inout headers_t hdr, inout local_metadata_t meta) {
    @name(".port_rx_counter")
    OG_COUNTER(port_rx_counter, PORT_COUNTER_SIZE);
    @name(".drop_counter")
    OG_COUNTER(drop_counter, DROP_REASON_COUNT);

    apply {
        OG_COUNT(port_rx_counter, meta.ingress_port);
        if (meta.drop_reason != DROP_NONE) {
            OG_COUNT(drop_counter, meta.drop_reason);
        }
    }
}

control EgressAccounting(inout headers_t hdr, inout local_metadata_t meta) {
    @name(".port_tx_counter")
    OG_COUNTER(port_tx_counter, PORT_COUNTER_SIZE);

    apply {
        OG_COUNT(port_tx_counter, meta.egress_port);
    }
}

#endif
