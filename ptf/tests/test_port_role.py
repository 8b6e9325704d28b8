"""Step 2: port roles and next-hop tags. A tag is believed only on an SPM port."""

from __future__ import annotations

from ptf import testutils

from opengate import p4constants as pc

from opengate_test import (
    HOST_IN,
    HOST_OUT,
    HOST_OUT_MAC,
    INSIDE,
    OUTSIDE,
    SPM_A,
    TAG_BASE,
    OpenGateTest,
    refresh,
    routed,
    tag_mac,
    tcp_packet,
)


class TaggedPacketFromInsideDropped(OpenGateTest):
    """A packet whose destination MAC is one of our tags, arriving on an inside port, is spoofing:
    dropped and counted as TAG_SPOOF."""

    def runTest(self) -> None:
        self.classify_everything()
        packet = refresh(tcp_packet(eth_dst=tag_mac(TAG_BASE)))
        self.assert_dropped(INSIDE, bytes(packet), pc.DROP_TAG_SPOOF)


class TaggedPacketFromOutsideDropped(OpenGateTest):
    """The same from the outside port, for an established session: still dropped."""

    def runTest(self) -> None:
        self.classify_everything()
        self.add_session(HOST_OUT, HOST_IN, 6, 80, 40000)
        packet = refresh(
            tcp_packet(
                src=HOST_OUT,
                dst=HOST_IN,
                sport=80,
                dport=40000,
                flags="A",
                eth_dst=tag_mac(TAG_BASE | 1),
            )
        )
        testutils.send_packet(self, OUTSIDE, bytes(packet))
        testutils.verify_no_other_packets(self)


class UnknownTagOnSpmPortDropped(OpenGateTest):
    """A tag this NPM never issued, arriving from an SPM, is dropped as UNKNOWN_TAG."""

    def runTest(self) -> None:
        self.classify_everything()
        packet = refresh(tcp_packet(eth_dst=tag_mac(0x7777)))
        self.assert_dropped(SPM_A, bytes(packet), pc.DROP_UNKNOWN_TAG)


class PortWithoutRoleDropped(OpenGateTest):
    """A port the controller gave no role (port 5 here) accepts nothing."""

    def runTest(self) -> None:
        self.classify_everything()
        self.assert_dropped(5, bytes(refresh(tcp_packet())), pc.DROP_UNKNOWN_PORT)


class ReturnWithNatDoneIsRouted(OpenGateTest):
    """A packet back from an SPM with the NAT-done tag is routed without a session lookup."""

    def runTest(self) -> None:
        packet = refresh(
            tcp_packet(
                src=HOST_OUT,
                dst=HOST_IN,
                sport=80,
                dport=40000,
                flags="A",
                eth_src="00:00:00:00:03:33",
                eth_dst=tag_mac(TAG_BASE | 1),
            )
        )
        testutils.send_packet(self, SPM_A, bytes(packet))
        testutils.verify_packet(self, routed(packet, INSIDE, "00:00:00:00:01:10"), INSIDE)
        testutils.verify_no_other_packets(self)


class ReturnedFirstPacketWithoutSessionIsRouted(OpenGateTest):
    """The first packet of a non-NAT flow comes back from its SPM before its session exists:
    it is routed as it is (the ACL already permitted it)."""

    def runTest(self) -> None:
        packet = refresh(tcp_packet(eth_src="00:00:00:00:03:33", eth_dst=tag_mac(TAG_BASE)))
        testutils.send_packet(self, SPM_A, bytes(packet))
        testutils.verify_packet(self, routed(packet, OUTSIDE, HOST_OUT_MAC), OUTSIDE)
        testutils.verify_no_other_packets(self)
