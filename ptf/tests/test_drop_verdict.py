"""The drop verdict: when several steps would drop a packet, the first in pipeline order is the
one counted, and the later ones are not (each step records its reason; DropDecision picks)."""

from __future__ import annotations

from ptf import testutils

from opengate import p4constants as pc

from opengate_test import (
    GW_MAC,
    HOST_IN,
    HOST_OUT,
    HOST_OUT_MAC,
    INSIDE,
    OUTSIDE,
    TAG_BASE,
    OpenGateTest,
    refresh,
    tag_mac,
    tcp_packet,
)

UNROUTED = "203.0.113.9"  # no route in the test bed


def assert_first_reason(test: OpenGateTest, port: int, raw: bytes, first: int, later: int) -> None:
    """`raw` on `port` is dropped for `first`; `later`, which also applies, is not counted."""
    later_before = test.counter(pc.C_DROP_COUNTER, later)[0]
    test.assert_dropped(port, raw, first)
    test.assertEqual(
        test.counter(pc.C_DROP_COUNTER, later)[0],
        later_before,
        f"{pc.DROP_NAMES[later]} counted as well as {pc.DROP_NAMES[first]}",
    )


class BadChecksumBeforeUnknownPort(OpenGateTest):
    """A broken header on a port without a role: validation comes first."""

    def runTest(self) -> None:
        self.classify_everything()
        packet = refresh(tcp_packet())
        packet["IP"].chksum ^= 0x00FF
        assert_first_reason(self, 5, bytes(packet), pc.DROP_BAD_CHECKSUM, pc.DROP_UNKNOWN_PORT)


class TagSpoofBeforeTtl(OpenGateTest):
    """A tagged packet from an inside port with TTL 1: the port check comes before forwarding."""

    def runTest(self) -> None:
        self.classify_everything()
        packet = refresh(tcp_packet(eth_dst=tag_mac(TAG_BASE), ttl=1))
        assert_first_reason(self, INSIDE, bytes(packet), pc.DROP_TAG_SPOOF, pc.DROP_TTL_EXPIRED)


class AclDenyBeforeNoRoute(OpenGateTest):
    """A denied opening packet to an address without a route: the ACL comes before routing."""

    def runTest(self) -> None:
        self.classify_everything(acl_action=pc.A_ACL_DENY, rule_id=3)
        packet = refresh(tcp_packet(dst=UNROUTED))
        assert_first_reason(self, INSIDE, bytes(packet), pc.DROP_ACL_DENY, pc.DROP_NO_ROUTE)


class BlockedSessionBeforeTtl(OpenGateTest):
    """A packet of a blocked session with TTL 1, from outside: the session's verdict comes
    first. (From inside, TTL 1 goes to the CPM before any session: test_validation.)"""

    def runTest(self) -> None:
        self.add_session(HOST_OUT, HOST_IN, 6, 80, 40000, block=True)
        packet = tcp_packet(
            src=HOST_OUT,
            dst=HOST_IN,
            sport=80,
            dport=40000,
            flags="A",
            eth_src=HOST_OUT_MAC,
            eth_dst=GW_MAC[OUTSIDE],
            ttl=1,
        )
        assert_first_reason(
            self, OUTSIDE, bytes(refresh(packet)), pc.DROP_SESSION_BLOCKED, pc.DROP_TTL_EXPIRED
        )


class ToCpuNeedsNoRoute(OpenGateTest):
    """A packet the ACL sends to the CPU goes there even without a route: the forwarding
    verdict does not apply to it."""

    def runTest(self) -> None:
        self.classify_everything(acl_action=pc.A_ACL_TO_CPU, rule_id=5)
        before = self.counter(pc.C_DROP_COUNTER, pc.DROP_NO_ROUTE)[0]
        packet = refresh(tcp_packet(dst=UNROUTED))
        testutils.send_packet(self, INSIDE, bytes(packet))
        testutils.verify_no_other_packets(self)
        packet_in = self.client.get_packet_in(timeout=5)
        self.assertIsNotNone(packet_in, "no packet-in")
        assert packet_in is not None
        self.assertEqual(packet_in.payload, bytes(packet))
        self.assertEqual(self.counter(pc.C_DROP_COUNTER, pc.DROP_NO_ROUTE)[0], before)
