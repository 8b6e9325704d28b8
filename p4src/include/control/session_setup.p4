// Step 5: what to do with a packet that has no session, once classified. A permitted opening
// packet (TCP SYN without ACK, UDP, ICMP echo request, other IP protocols) is forwarded at once
// and reported with a digest; one that needs NAT goes to the controller, which allocates the NAT
// binding, installs both directions and re-injects it. Anything else that needs a session is
// dropped. A packet back from its SPM whose session is gone is dropped if it needed NAT.
// Every condition is on a header or a lookup result, so that a target evaluates the whole chain at
// once (no intermediate variables).
#ifndef OPENGATE_CONTROL_SESSION_SETUP_P4
#define OPENGATE_CONTROL_SESSION_SETUP_P4

control SessionSetup(inout headers_t hdr, inout local_metadata_t meta) {
    apply {
        if (meta.returned == 1) {
            if (meta.snat_required == 1 || meta.dnat_required == 1) {
                meta.drop_setup = DROP_NAT_NO_SESSION;
            }
        } else if (meta.acl_verdict == ACL_DENY) {
            meta.drop_setup = DROP_ACL_DENY;
        } else if (meta.acl_verdict == ACL_TO_CPU) {
            meta.to_cpu = 1;
            meta.cpu_reason = CPU_REASON_ACL;
        } else if (hdr.tcp.isValid()
                && (hdr.tcp.flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) != TCP_FLAG_SYN) {
            meta.drop_setup = DROP_NO_SESSION;
        } else if (hdr.icmp.isValid() && hdr.icmp.icmp_type == ICMP_ECHO_REPLY) {
            meta.drop_setup = DROP_NO_SESSION;
        } else if (hdr.icmp.isValid() && hdr.icmp.icmp_type != ICMP_ECHO_REQUEST) {
            // Errors, unreachables...: permitted by the ACL alone, no session.
        } else if (meta.port_role == ROLE_CPU) {
            // Re-injected by the controller but still without a session: never loop.
            meta.drop_setup = DROP_CPU_LOOP;
        } else if (meta.snat_required == 1 || meta.dnat_required == 1) {
            meta.to_cpu = 1;
            meta.cpu_reason = CPU_REASON_SESSION_NAT;
        } else {
            meta.send_session_request = 1;
        }
    }
}

#endif
