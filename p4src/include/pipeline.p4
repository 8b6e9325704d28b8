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
#include "control/session_setup.p4"
#include "control/steering.p4"
#include "control/metering.p4"
#include "control/accounting.p4"

control OgIngress(inout headers_t hdr, inout local_metadata_t meta) {
    PacketOut() packet_out_handler;
    Validation() validation;
    PortRole() port_role;
    ArpResponder() arp;
    Session() session;
    Nat() nat;
    Routing() routing;
    NatPolicy() nat_policy;
    Classify() classify;
    SessionSetup() session_setup;
    Steering() steering;
    Forwarding() forwarding;
    Metering() metering;
    IngressAccounting() accounting;

    apply {
        packet_out_handler.apply(hdr, meta);
        if (meta.skip_pipeline == 0) {
            validation.apply(hdr, meta);
            port_role.apply(hdr, meta);
            if (meta.drop == 0 && hdr.arp.isValid()) {
                arp.apply(hdr, meta);
            } else if (meta.drop == 0 && hdr.ipv4.isValid()) {
                // Back from an SPM with NAT already done: the 5-tuple is post-NAT; just route.
                if (meta.returned_nat_done == 0) {
                    session.apply(hdr, meta);
                }
                // NAT now unless it waits for the SPM (original direction of an inspected flow).
                if (meta.session_hit == 1 && meta.drop == 0
                        && (meta.spm_port == 0 || meta.nat_before_spm == 1 || meta.returned == 1)) {
                    nat.apply(hdr, meta);
                }
                routing.apply(hdr, meta);
                if (meta.session_hit == 0 && meta.returned_nat_done == 0) {
                    nat_policy.apply(hdr, meta);
                    if (meta.returned == 1) {
                        // First packet back from its SPM; its session needed NAT but is gone.
                        if (meta.snat_required == 1 || meta.dnat_required == 1) {
                            mark_dropped(meta, DROP_NAT_NO_SESSION);
                        }
                    } else {
                        classify.apply(hdr, meta);
                        session_setup.apply(hdr, meta);
                        if (meta.drop == 0) {
                            steering.apply(hdr, meta);
                        }
                    }
                }
                if (meta.drop == 0 && meta.to_cpu == 0 && meta.returned == 0
                        && meta.spm_port != 0) {
                    meta.steer = 1;
                }
                if (meta.drop == 0) {
                    forwarding.apply(hdr, meta);
                }
            }
            metering.apply(hdr, meta);
        }
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
