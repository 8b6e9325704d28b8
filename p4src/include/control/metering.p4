// Step 10: meters per IDS class, and on the path to the CPU so that the slow path survives a
// flood of session-opening packets. Red is dropped; unconfigured meters are always green.
#ifndef OPENGATE_CONTROL_METERING_P4
#define OPENGATE_CONTROL_METERING_P4

control Metering(inout headers_t hdr, inout local_metadata_t meta) {
    @name(".class_meter")
    OG_METER(class_meter, CLASS_TABLE_SIZE);
    @name(".cpu_meter")
    OG_METER(cpu_meter, CPU_REASON_COUNT);

    apply {
        if (meta.drop == 0 && meta.returned == 0) {
            class_id_t class_id = meta.ids_class;
            if (meta.session_hit == 1) {
                class_id = meta.session_class;
            }
            if (class_id != 0) {
                OG_METER_EXECUTE(class_meter, class_id, meta.class_color);
                if (OG_METER_IS_RED(meta.class_color)) {
                    mark_dropped(meta, DROP_CLASS_METER);
                }
            }
        }
        if (meta.drop == 0 && meta.to_cpu == 1) {
            OG_METER_EXECUTE(cpu_meter, meta.cpu_reason, meta.cpu_color);
            if (OG_METER_IS_RED(meta.cpu_color)) {
                mark_dropped(meta, DROP_CPU_METER);
            }
        }
    }
}

#endif
