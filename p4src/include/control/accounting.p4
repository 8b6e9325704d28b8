// Per-port packet counts and the drop counter indexed by reason.
#ifndef OPENGATE_CONTROL_ACCOUNTING_P4
#define OPENGATE_CONTROL_ACCOUNTING_P4

control IngressAccounting(inout headers_t hdr, inout local_metadata_t meta) {
    @name(".port_rx_counter")
    OG_COUNTER(port_rx_counter, PORT_COUNTER_SIZE);
    @name(".drop_counter")
    OG_COUNTER(drop_counter, DROP_REASON_COUNT);

    apply {
        OG_COUNT(port_rx_counter, meta.ingress_port);
        if (meta.drop == 1) {
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
