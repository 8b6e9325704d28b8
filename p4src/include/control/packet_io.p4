// Packet-out from the controller (fixed egress port, or back through the pipeline) and packet-in
// to it (with the reason and what the pipeline decided, so the slow path need not redo it).
#ifndef OPENGATE_CONTROL_PACKET_IO_P4
#define OPENGATE_CONTROL_PACKET_IO_P4

// A packet-out with a fixed egress port skips the pipeline. OgIngress tests the header itself
// (not a flag set here), so that the pipeline's first steps need not wait for this one, and
// removes the header at the end of ingress.
#define packet_out_fixed_port(hdr) \
    ((hdr).packet_out.isValid() && (hdr).packet_out.submit_to_ingress == 0)

control PacketOut(inout headers_t hdr, inout local_metadata_t meta) {
    apply {
        meta.egress_port = hdr.packet_out.egress_port;
    }
}

control PacketIn(inout headers_t hdr, inout local_metadata_t meta) {
    apply {
        if (meta.egress_port == CPU_PORT) {
            hdr.packet_in.setValid();
            hdr.packet_in.ingress_port = meta.ingress_port;
            hdr.packet_in._pad0 = 0;
            hdr.packet_in.reason = meta.cpu_reason;
            hdr.packet_in.ids_class = meta.ids_class;
            hdr.packet_in.acl_rule = meta.acl_rule;
            hdr.packet_in.spm_port = meta.spm_port;
            hdr.packet_in._pad = 0;
        }
    }
}

#endif
