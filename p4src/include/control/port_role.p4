// Step 2: the role of the ingress port, and the next-hop tag of packets returning from an SPM.
#ifndef OPENGATE_CONTROL_PORT_ROLE_P4
#define OPENGATE_CONTROL_PORT_ROLE_P4

control PortRole(inout headers_t hdr, inout local_metadata_t meta) {
    @name(".set_port_role")
    action set_port_role(port_role_t role) {
        meta.port_role = role;
    }

    @name(".port_role")
    table port_role {
        key = {
            meta.ingress_port : exact @name("ingress_port");
        }
        actions = { set_port_role; }
        const default_action = set_port_role(ROLE_UNKNOWN);
        size = PORT_TABLE_SIZE;
    }

    // This NPM's block of tags: bit 0 of a tag says whether NAT was applied before the SPM.
    @name(".set_npm_identity")
    action set_npm_identity(tag_t tag_base) {
        meta.tag_base = tag_base;
    }

    @name(".npm_identity")
    table npm_identity {
        key = { }
        actions = { set_npm_identity; }
        default_action = set_npm_identity(0);
        size = 1;
    }

    @name(".resume_after_spm")
    action resume_after_spm(bit<1> nat_done) {
        meta.returned = 1;
        meta.returned_nat_done = nat_done;
    }

    @name(".reject_unknown_tag")
    action reject_unknown_tag() {
        meta.drop_tag = DROP_UNKNOWN_TAG;
    }

    @name(".spm_return")
    table spm_return {
        key = {
            meta.tag : exact @name("tag");
        }
        actions = { resume_after_spm; reject_unknown_tag; }
        const default_action = reject_unknown_tag();
        size = TAG_TABLE_SIZE;
    }

    // The role and the tag are looked up side by side. What they imply (unknown port, a tag on a
    // port that is not an SPM port) is read from port_role and tagged where it matters: the
    // session lookup's condition, the meters' and DropDecision.
    apply {
        // The CPU port's role is set by the parser (packet-out header).
        if (meta.ingress_port != CPU_PORT) {
            port_role.apply();
        }
        npm_identity.apply();
        if (meta.tagged == 1) {
            spm_return.apply();
        }
    }
}

#endif
