"""Step 8: NAT rewrites with checksums checked byte for byte against freshly computed ones."""

from __future__ import annotations

from ptf import testutils
from scapy.layers.inet import ICMP, IP, TCP, UDP

from opengate import p4constants as pc

from opengate_test import (
    GW_OUT_IP,
    HOST_IN,
    HOST_IN_MAC,
    HOST_OUT,
    HOST_OUT_MAC,
    INSIDE,
    OUTSIDE,
    OpenGateTest,
    icmp_echo,
    refresh,
    routed,
    tcp_packet,
    udp_packet,
)


class SnatRewritesTcpSourceAndChecksums(OpenGateTest):
    """Source NAT of a TCP segment with payload: address and port rewritten, IPv4 and TCP
    checksums equal to a full recomputation."""

    def runTest(self) -> None:
        self.add_masqueraded_session()
        packet = refresh(
            tcp_packet(flags="PA", payload=b"GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n")
        )
        testutils.send_packet(self, INSIDE, bytes(packet))
        expected = packet.copy()
        expected[IP].src = GW_OUT_IP
        expected[TCP].sport = 61001
        testutils.verify_packet(self, routed(expected, OUTSIDE, HOST_OUT_MAC), OUTSIDE)
        testutils.verify_no_other_packets(self)


class SnatReplyRewritesDestination(OpenGateTest):
    """The reply to a masqueraded flow is rewritten back to the inside host."""

    def runTest(self) -> None:
        self.add_masqueraded_session(reply=True)
        reply = refresh(
            tcp_packet(
                src=HOST_OUT,
                dst=GW_OUT_IP,
                sport=80,
                dport=61001,
                flags="SA",
                eth_src=HOST_OUT_MAC,
                eth_dst="02:00:00:00:00:02",
                payload=b"x" * 7,
            )
        )
        testutils.send_packet(self, OUTSIDE, bytes(reply))
        expected = reply.copy()
        expected[IP].dst = HOST_IN
        expected[TCP].dport = 40000
        testutils.verify_packet(self, routed(expected, INSIDE, HOST_IN_MAC), INSIDE)
        testutils.verify_no_other_packets(self)


class DnatPortForwardRewritesDestination(OpenGateTest):
    """A port forward: outside client to the gateway's port 8080 reaches the inside server's 80."""

    def runTest(self) -> None:
        self.add_session(
            HOST_OUT,
            GW_OUT_IP,
            6,
            50000,
            8080,
            nat_kind=pc.NAT_REWRITE_DST,
            nat_addr=HOST_IN,
            nat_port=80,
        )
        packet = refresh(
            tcp_packet(
                src=HOST_OUT,
                dst=GW_OUT_IP,
                sport=50000,
                dport=8080,
                flags="A",
                eth_src=HOST_OUT_MAC,
                eth_dst="02:00:00:00:00:02",
            )
        )
        testutils.send_packet(self, OUTSIDE, bytes(packet))
        expected = packet.copy()
        expected[IP].dst = HOST_IN
        expected[TCP].dport = 80
        testutils.verify_packet(self, routed(expected, INSIDE, HOST_IN_MAC), INSIDE)
        testutils.verify_no_other_packets(self)


class SnatUdpChecksum(OpenGateTest):
    """UDP with a checksum: rewritten and the checksum still right."""

    def runTest(self) -> None:
        self.add_session(
            HOST_IN,
            HOST_OUT,
            17,
            5353,
            53,
            nat_kind=pc.NAT_REWRITE_SRC,
            nat_addr=GW_OUT_IP,
            nat_port=62000,
        )
        packet = refresh(udp_packet())
        testutils.send_packet(self, INSIDE, bytes(packet))
        expected = packet.copy()
        expected[IP].src = GW_OUT_IP
        expected[UDP].sport = 62000
        testutils.verify_packet(self, routed(expected, OUTSIDE, HOST_OUT_MAC), OUTSIDE)


class SnatUdpZeroChecksumStaysZero(OpenGateTest):
    """A UDP datagram sent without a checksum (0) keeps 0 after NAT."""

    def runTest(self) -> None:
        self.add_session(
            HOST_IN,
            HOST_OUT,
            17,
            5353,
            53,
            nat_kind=pc.NAT_REWRITE_SRC,
            nat_addr=GW_OUT_IP,
            nat_port=62000,
        )
        packet = refresh(udp_packet())
        packet[UDP].chksum = 0
        testutils.send_packet(self, INSIDE, bytes(packet))
        expected = packet.copy()
        expected[IP].src = GW_OUT_IP
        expected[UDP].sport = 62000
        expected = routed(expected, OUTSIDE, HOST_OUT_MAC)
        expected[UDP].chksum = 0
        testutils.verify_packet(self, expected, OUTSIDE)


class SnatIcmpEchoIdentifier(OpenGateTest):
    """ICMP echo: the identifier plays the port; it and the ICMP checksum are rewritten."""

    def runTest(self) -> None:
        self.add_session(
            HOST_IN,
            HOST_OUT,
            1,
            0x1234,
            0,
            nat_kind=pc.NAT_REWRITE_SRC,
            nat_addr=GW_OUT_IP,
            nat_port=0x5678,
        )
        ping = refresh(icmp_echo())
        testutils.send_packet(self, INSIDE, bytes(ping))
        expected = ping.copy()
        expected[IP].src = GW_OUT_IP
        expected[ICMP].id = 0x5678
        testutils.verify_packet(self, routed(expected, OUTSIDE, HOST_OUT_MAC), OUTSIDE)


class NatNeededGoesToController(OpenGateTest):
    """A permitted SYN from a masqueraded network out of the outside port has no NAT binding yet:
    it goes to the controller (reason SESSION_NAT) instead of out."""

    def runTest(self) -> None:
        self.classify_everything()
        self.masquerade_inside()
        syn = refresh(tcp_packet())
        testutils.send_packet(self, INSIDE, bytes(syn))
        testutils.verify_no_other_packets(self)
        packet_in = self.client.get_packet_in(timeout=5)
        self.assertIsNotNone(packet_in, "no packet-in")
        assert packet_in is not None
        metadata = self.schema.decode_packet_metadata("packet_in", packet_in.metadata)
        self.assertEqual(
            (metadata["reason"], metadata["ingress_port"]), (pc.CPU_REASON_SESSION_NAT, INSIDE)
        )
        self.assertEqual(packet_in.payload, bytes(syn))
