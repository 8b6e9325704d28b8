"""Step 1: parse and validate. Broken packets are dropped and counted by reason."""

from __future__ import annotations

from ptf import testutils
from scapy.layers.inet import IP, IPOption_NOP, IPOption_RR

from opengate import p4constants as pc

from opengate_test import (
    GW_MAC,
    HOST_IN,
    HOST_OUT,
    HOST_OUT_MAC,
    INSIDE,
    OUTSIDE,
    OpenGateTest,
    refresh,
    routed,
    tcp_packet,
    udp_packet,
)


class BadChecksumDropped(OpenGateTest):
    """An IPv4 header with a wrong checksum is dropped and counted as BAD_CHECKSUM."""

    def runTest(self) -> None:
        self.classify_everything()
        packet = refresh(tcp_packet())
        packet[IP].chksum ^= 0x00FF
        self.assert_dropped(INSIDE, bytes(packet), pc.DROP_BAD_CHECKSUM)


class BadIhlDropped(OpenGateTest):
    """IHL below 5 is a malformed IPv4 header: dropped as BAD_IPV4_HEADER."""

    def runTest(self) -> None:
        self.classify_everything()
        raw = bytearray(bytes(refresh(tcp_packet())))
        raw[14] = 0x44  # version 4, IHL 4
        self.assert_dropped(INSIDE, bytes(raw), pc.DROP_BAD_IPV4_HEADER)


class WrongVersionDropped(OpenGateTest):
    """An IPv4 ethertype with IP version 6 in the header is dropped as BAD_IPV4_HEADER."""

    def runTest(self) -> None:
        self.classify_everything()
        packet = tcp_packet()
        packet[IP].version = 6
        self.assert_dropped(INSIDE, bytes(refresh(packet)), pc.DROP_BAD_IPV4_HEADER)


class TotalLengthShorterThanHeaderDropped(OpenGateTest):
    """An IPv4 total length shorter than the header itself (IHL * 4) is BAD_IPV4_HEADER, with
    and without options."""

    def runTest(self) -> None:
        self.classify_everything()
        plain = tcp_packet()
        plain[IP].len = 19
        self.assert_dropped(INSIDE, bytes(refresh(plain)), pc.DROP_BAD_IPV4_HEADER)
        with_options = tcp_packet()
        with_options[IP].options = [IPOption_RR(routers=["0.0.0.0"] * 2), IPOption_NOP()]
        built = refresh(with_options)
        self.assertEqual(built[IP].ihl, 8)
        built[IP].len = 31
        self.assert_dropped(INSIDE, bytes(refresh(built)), pc.DROP_BAD_IPV4_HEADER)


class TotalLengthBeyondFrameDropped(OpenGateTest):
    """An IPv4 total length longer than the frame is a truncated packet."""

    def runTest(self) -> None:
        self.classify_everything()
        packet = tcp_packet(payload=b"x" * 20)
        packet[IP].len = 20 + 20 + 200
        self.assert_dropped(INSIDE, bytes(refresh(packet)), pc.DROP_TRUNCATED)


class TruncatedHeaderDropped(OpenGateTest):
    """A frame that ends inside the TCP header is dropped as TRUNCATED."""

    def runTest(self) -> None:
        self.classify_everything()
        raw = bytes(refresh(tcp_packet()))
        self.assert_dropped(INSIDE, raw[: 14 + 20 + 8], pc.DROP_TRUNCATED)


class TtlOneFromOutsideDropped(OpenGateTest):
    """A packet from outside that would be routed with TTL 1 is dropped as TTL_EXPIRED, not
    forwarded, and not sent to the CPM (the gateway answers inside hosts only)."""

    def runTest(self) -> None:
        self.classify_everything()
        packet = udp_packet(
            src=HOST_OUT, dst=HOST_IN, eth_src=HOST_OUT_MAC, eth_dst=GW_MAC[OUTSIDE]
        )
        packet[IP].ttl = 1
        self.assert_dropped(OUTSIDE, bytes(refresh(packet)), pc.DROP_TTL_EXPIRED)
        self.assertIsNone(self.client.get_packet_in(timeout=0.2), "a packet-in")


class TtlOneFromInsideGoesToTheCpm(OpenGateTest):
    """A unicast packet from an inside host whose TTL runs out here goes to the CPM as it
    arrived (reason TTL_EXPIRED), before NAT and whatever the ACL says: here its flow has a
    masqueraded session and the ACL denies. It is not forwarded, and nothing is dropped."""

    def runTest(self) -> None:
        self.classify_everything(acl_action=pc.A_ACL_DENY, rule_id=3)
        self.add_masqueraded_session()
        drops = self.total_drops()
        for packet in (tcp_packet(flags="A", ttl=1), tcp_packet(flags="S", ttl=0)):
            self.expect_packet_in(INSIDE, bytes(refresh(packet)), pc.CPU_REASON_TTL_EXPIRED)
        testutils.verify_no_other_packets(self)
        self.assertEqual(self.total_drops(), drops)


class TtlOneMulticastFromInsideDropped(OpenGateTest):
    """Multicast with TTL 1 from inside (SSDP, IGMP do that) is never answered: no packet-in."""

    def runTest(self) -> None:
        self.classify_everything()
        packet = udp_packet(dst="239.255.255.250", dport=1900, eth_dst="01:00:5e:7f:ff:fa")
        packet[IP].ttl = 1
        testutils.send_packet(self, INSIDE, bytes(refresh(packet)))
        testutils.verify_no_other_packets(self)
        self.assertIsNone(self.client.get_packet_in(timeout=0.2), "a packet-in")


class Ipv4OptionsForwarded(OpenGateTest):
    """A valid header with options (IHL 8) is checksum-verified with its options and routed."""

    def runTest(self) -> None:
        self.classify_everything()
        packet = tcp_packet()
        packet[IP].options = [IPOption_RR(routers=["0.0.0.0"]), IPOption_NOP(), IPOption_NOP()]
        packet = refresh(packet)
        self.assertGreater(packet[IP].ihl, 5)
        testutils.send_packet(self, INSIDE, bytes(packet))
        testutils.verify_packet(self, routed(packet, OUTSIDE, HOST_OUT_MAC), OUTSIDE)
        testutils.verify_no_other_packets(self)


class NonIpDropped(OpenGateTest):
    """Frames that are neither IP nor ARP (here LLDP and MPLS) are dropped as UNSUPPORTED."""

    def runTest(self) -> None:
        for ether_type in ("88cc", "8847"):
            raw = bytes.fromhex("020000000001000000000110" + ether_type) + bytes(46)
            self.assert_dropped(INSIDE, raw, pc.DROP_UNSUPPORTED)
