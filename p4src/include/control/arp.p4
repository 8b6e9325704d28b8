// ARP for the gateway's own addresses, answered in the data plane.
#ifndef OPENGATE_CONTROL_ARP_P4
#define OPENGATE_CONTROL_ARP_P4

control ArpResponder(inout headers_t hdr, inout local_metadata_t meta) {
    @name(".arp_reply")
    action arp_reply(mac_addr_t mac) {
        ipv4_addr_t requester = hdr.arp.spa;
        hdr.arp.oper = ARP_OPER_REPLY;
        hdr.arp.tha = hdr.arp.sha;
        hdr.arp.sha = mac;
        hdr.arp.spa = hdr.arp.tpa;
        hdr.arp.tpa = requester;
        hdr.ethernet.dst_addr = hdr.ethernet.src_addr;
        hdr.ethernet.src_addr = mac;
        meta.egress_port = meta.ingress_port;
    }

    @name(".arp_ignore")
    action arp_ignore() {
        meta.drop_arp = DROP_UNSUPPORTED;
    }

    @name(".arp_responder")
    table arp_responder {
        key = {
            hdr.arp.tpa : exact @name("target_ip");
        }
        actions = { arp_reply; @defaultonly arp_ignore; }
        const default_action = arp_ignore();
        size = ARP_TABLE_SIZE;
    }

    apply {
        if (hdr.arp.oper == ARP_OPER_REQUEST && hdr.arp.ptype == ETHERTYPE_IPV4) {
            arp_responder.apply();
        } else {
            meta.drop_arp = DROP_UNSUPPORTED;
        }
    }
}

#endif
