"""Step 9 and the slow path: routing, packet-out, packet-in, ARP, and the meters of step 10."""

from __future__ import annotations

from ptf import testutils
from scapy.layers.l2 import ARP, Ether

from opengate import p4constants as pc
from opengate.entries import Exact, TableEntry

from opengate_test import (
    GW_IN_IP,
    GW_MAC,
    HOST_IN,
    HOST_IN_MAC,
    HOST_OUT,
    HOST_OUT_MAC,
    INSIDE,
    OUTSIDE,
    OpenGateTest,
    icmp_echo,
    ip,
    mac,
    refresh,
    routed,
    tcp_packet,
    udp_packet,
)


class RouteRewritesMacsAndTtl(OpenGateTest):
    """A routed packet leaves with the gateway's MAC as source, the next hop's as destination,
    TTL one less and the IPv4 checksum updated; nothing else changes."""

    def runTest(self) -> None:
        self.add_session(HOST_IN, HOST_OUT, 6, 40000, 80)
        packet = refresh(tcp_packet(flags="A", ttl=17, payload=b"abc"))
        testutils.send_packet(self, INSIDE, bytes(packet))
        testutils.verify_packet(self, routed(packet, OUTSIDE, HOST_OUT_MAC), OUTSIDE)
        testutils.verify_no_other_packets(self)


class NoRouteDropped(OpenGateTest):
    """A destination no route covers is dropped as NO_ROUTE."""

    def runTest(self) -> None:
        self.add_session(HOST_OUT, "10.9.9.9", 6, 80, 40000)
        packet = refresh(
            tcp_packet(
                src=HOST_OUT,
                dst="10.9.9.9",
                sport=80,
                dport=40000,
                flags="A",
                eth_src=HOST_OUT_MAC,
                eth_dst=GW_MAC[OUTSIDE],
            )
        )
        self.assert_dropped(OUTSIDE, bytes(packet), pc.DROP_NO_ROUTE)


class NoRouteFromInsideGoesToTheCpm(OpenGateTest):
    """A permitted packet from an inside host that no route takes goes to the CPM as it
    arrived (reason NO_ROUTE), with no session made for it (no digest), and is not counted as
    dropped (the CPM answers: a destination unreachable, or to a ping of the gateway's own
    address, which the controller never routes, an echo reply). Denied, it is dropped by the
    ACL as before (test_drop_verdict)."""

    def runTest(self) -> None:
        self.classify_everything()
        self.enable_digest(pc.D_SESSION_REQUEST_T)
        drops = self.total_drops()
        for packet in (udp_packet(dst="203.0.113.9"), icmp_echo(dst="203.0.113.9")):
            self.expect_packet_in(INSIDE, bytes(refresh(packet)), pc.CPU_REASON_NO_ROUTE)
        testutils.verify_no_other_packets(self)
        self.assertEqual(self.drain_digests(), 0, "a session was reported")
        self.assertEqual(self.total_drops(), drops)


class PacketOutToPort(OpenGateTest):
    """A packet-out with submit_to_ingress=0 leaves on the given port unchanged."""

    def runTest(self) -> None:
        payload = bytes(refresh(tcp_packet(flags="R")))
        self.client.packet_out(
            payload, self.schema.encode_packet_metadata("packet_out", {"egress_port": OUTSIDE})
        )
        testutils.verify_packet(self, payload, OUTSIDE)
        testutils.verify_no_other_packets(self)


class PacketOutThroughPipelineHitsSession(OpenGateTest):
    """A packet-out with submit_to_ingress=1 goes through the pipeline: here it hits the session
    the controller just installed and is NATed and routed."""

    def runTest(self) -> None:
        self.add_session(
            HOST_IN,
            HOST_OUT,
            6,
            40000,
            80,
            nat_kind=pc.NAT_REWRITE_SRC,
            nat_addr="203.0.113.1",
            nat_port=61002,
        )
        syn = refresh(tcp_packet())
        self.client.packet_out(
            bytes(syn), self.schema.encode_packet_metadata("packet_out", {"submit_to_ingress": 1})
        )
        expected = syn.copy()
        expected["IP"].src = "203.0.113.1"
        expected["TCP"].sport = 61002
        testutils.verify_packet(self, routed(expected, OUTSIDE, HOST_OUT_MAC), OUTSIDE)
        testutils.verify_no_other_packets(self)


class ReinjectedPacketWithoutSessionDropped(OpenGateTest):
    """A re-injected packet that still has no session is dropped (CPU_LOOP), never sent back."""

    def runTest(self) -> None:
        self.classify_everything()
        before = self.counter(pc.C_DROP_COUNTER, pc.DROP_CPU_LOOP)[0]
        self.client.packet_out(
            bytes(refresh(tcp_packet())),
            self.schema.encode_packet_metadata("packet_out", {"submit_to_ingress": 1}),
        )
        testutils.verify_no_other_packets(self)
        self.wait_for(
            "CPU_LOOP to be counted",
            lambda: self.counter(pc.C_DROP_COUNTER, pc.DROP_CPU_LOOP)[0] == before + 1,
        )
        self.assertIsNone(self.client.get_packet_in(timeout=0.2))


class ArpRequestForGatewayAnswered(OpenGateTest):
    """An ARP request for a gateway address is answered from the data plane."""

    def runTest(self) -> None:
        self.insert(
            TableEntry.make(
                pc.T_ARP_RESPONDER,
                {"target_ip": Exact(ip(GW_IN_IP))},
                pc.A_ARP_REPLY,
                {"mac": mac(GW_MAC[INSIDE])},
            )
        )
        request = Ether(src=HOST_IN_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(
            op=1, hwsrc=HOST_IN_MAC, psrc=HOST_IN, hwdst="00:00:00:00:00:00", pdst=GW_IN_IP
        )
        reply = Ether(src=GW_MAC[INSIDE], dst=HOST_IN_MAC) / ARP(
            op=2, hwsrc=GW_MAC[INSIDE], psrc=GW_IN_IP, hwdst=HOST_IN_MAC, pdst=HOST_IN
        )
        testutils.send_packet(self, INSIDE, bytes(request))
        testutils.verify_packet(self, reply, INSIDE)
        testutils.verify_no_other_packets(self)


class ArpForOtherAddressIgnored(OpenGateTest):
    """ARP for an address that is not the gateway's gets no answer."""

    def runTest(self) -> None:
        request = Ether(src=HOST_IN_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(
            op=1, hwsrc=HOST_IN_MAC, psrc=HOST_IN, pdst="10.0.1.99"
        )
        testutils.send_packet(self, INSIDE, bytes(request))
        testutils.verify_no_other_packets(self)


class ClassMeterRedDrops(OpenGateTest):
    """A class metered at a tiny rate forwards the first packet (burst) and drops the next ones
    as CLASS_METER."""

    def runTest(self) -> None:
        self.add_session(HOST_IN, HOST_OUT, 6, 40000, 80, class_id=9)
        self.write_meter(pc.M_CLASS_METER, 9, cir=1, cburst=200, pir=1, pburst=200)
        packet = refresh(tcp_packet(flags="A", payload=b"y" * 100))
        before = self.counter(pc.C_DROP_COUNTER, pc.DROP_CLASS_METER)[0]
        for _ in range(5):
            testutils.send_packet(self, INSIDE, bytes(packet))
        testutils.verify_packet(self, routed(packet, OUTSIDE, HOST_OUT_MAC), OUTSIDE)
        testutils.verify_no_other_packets(self)
        self.wait_for(
            "4 CLASS_METER drops",
            lambda: self.counter(pc.C_DROP_COUNTER, pc.DROP_CLASS_METER)[0] == before + 4,
        )


class CpuMeterProtectsSlowPath(OpenGateTest):
    """Packets for the controller beyond the CPU meter's burst are dropped as CPU_METER."""

    def runTest(self) -> None:
        self.classify_everything(acl_action=pc.A_ACL_TO_CPU)
        self.write_meter(pc.M_CPU_METER, pc.CPU_REASON_ACL, cir=1, cburst=100, pir=1, pburst=100)
        before = self.counter(pc.C_DROP_COUNTER, pc.DROP_CPU_METER)[0]
        for sport in range(3):
            testutils.send_packet(self, INSIDE, bytes(refresh(tcp_packet(sport=42000 + sport))))
        self.wait_for(
            "2 CPU_METER drops",
            lambda: self.counter(pc.C_DROP_COUNTER, pc.DROP_CPU_METER)[0] == before + 2,
        )
        self.assertIsNotNone(self.client.get_packet_in(timeout=5))
        self.assertIsNone(self.client.get_packet_in(timeout=0.3))
