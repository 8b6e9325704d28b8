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
#ifdef OG_IPV6
        } else if (hdr.ipv6.isValid()) {
            // RFC 8200 and RFC 4291 section 2.7: a multicast source is never valid. Ethernet
            // pads short frames, so the payload length may fall short of the frame, not beyond.
            if (hdr.ipv6.version != 6 || hdr.ipv6.src_hi[63:56] == 0xff) {
                meta.drop_valid = DROP_BAD_IPV6_HEADER;
            } else if (((bit<32>)hdr.ipv6.payload_len) + 40 + l2_len > meta.packet_length) {
                meta.drop_valid = DROP_TRUNCATED;
            } else if (meta.ipv6_chain_bad == 1) {
                meta.drop_valid = DROP_IPV6_EXT_HEADERS;
            } else if (meta.ipv6_later_fragment == 1) {
                // As IPv4's: no ports, so no session can match it (the gateway does not reassemble).
                meta.drop_valid = DROP_UNSUPPORTED;
            }
#endif
        } else if (!hdr.arp.isValid()) {
            meta.drop_valid = DROP_UNSUPPORTED;
        }
    }
}

#endif
