// Step 1: what the IPv4 header says is broken. Headers the parser could not finish are dropped by
// DropDecision (DROP_TRUNCATED before every other reason), from the shell's parser verdict.
#ifndef OPENGATE_CONTROL_VALIDATION_P4
#define OPENGATE_CONTROL_VALIDATION_P4

control Validation(inout headers_t hdr, inout local_metadata_t meta) {
    apply {
        bit<32> l2_len = 14;
        if (hdr.vlan.isValid()) {
            l2_len = 18;
        }
        if (hdr.ipv4.isValid()) {
            if (hdr.ipv4.version != 4 || hdr.ipv4.ihl < 5
                    || OG_IPV4_SHORTER_THAN_HEADER(hdr, meta)) {
                meta.drop_valid = DROP_BAD_IPV4_HEADER;
            } else if (OG_IPV4_CHECKSUM_BAD(meta)) {
                meta.drop_valid = DROP_BAD_CHECKSUM;
            } else if (OG_IPV4_LONGER_THAN_FRAME(hdr, meta, l2_len)) {
                meta.drop_valid = DROP_TRUNCATED;
            } else if (hdr.ipv4.frag_offset != 0) {
                // Non-first fragments carry no ports, so no session can match them.
                meta.drop_valid = DROP_UNSUPPORTED;
            }
        } else if (!hdr.arp.isValid()) {
            meta.drop_valid = DROP_UNSUPPORTED;
        }
    }
}

#endif
