// Step 10: meters per IDS class, and on the path to the CPU so that the slow path survives a
// flood of session-opening packets. Red is dropped (DropDecision); unconfigured meters are always
// green. A meter sees only packets that no earlier step drops: the condition below spells out the
// steps' reasons instead of reading the verdict, which is made after the meters. The two meters
// run side by side: a packet for the CPU is metered there even when its class meter is red.
#ifndef OPENGATE_CONTROL_METERING_P4
#define OPENGATE_CONTROL_METERING_P4

control Metering(inout headers_t hdr, inout local_metadata_t meta) {
    @name(".class_meter")
    OG_METER(class_meter, CLASS_TABLE_SIZE);
    @name(".cpu_meter")
    OG_METER(cpu_meter, CPU_REASON_COUNT);
    // Per source (the low bits of its IPv4 address): one host's flood of packets for the CPU
    // cannot take the other hosts' share of the slow path.
    @name(".cpu_source_meter")
    OG_METER(cpu_source_meter, CPU_SOURCE_METERS);

    apply {
        // Two conditions, each within what one Tofino gateway can read. (ARP packets have neither
        // a class nor the CPU as destination: drop_arp is not needed.)
        if (og_admitted(meta)) {
            if (meta.parser_truncated == 0 && meta.drop_session == 0 && meta.drop_setup == 0
                    && (meta.drop_fwd == 0 || meta.to_cpu == 1)) {
                if (meta.returned == 0 && meta.meter_class != 0) {
                    OG_METER_EXECUTE(class_meter, meta.meter_class, meta.class_color);
                }
                if (meta.to_cpu == 1) {
                    OG_METER_EXECUTE(cpu_meter, meta.cpu_reason, meta.cpu_color);
#ifdef OG_IPV6
                    // IPv6: the low bits of the interface identifier.
                    bit<12> source = 0;
                    if (hdr.ipv6.isValid()) {
                        source = hdr.ipv6.src_lo[11:0];
                    } else if (hdr.ipv4.isValid()) {
                        source = hdr.ipv4.src_addr[11:0];
                    }
                    OG_METER_EXECUTE(cpu_source_meter, source, meta.cpu_source_color);
#else
                    OG_METER_EXECUTE(cpu_source_meter, hdr.ipv4.src_addr[11:0],
                                     meta.cpu_source_color);
#endif
                }
            }
        }
    }
}

#endif
