"""Steps 3 and 5: session lookup, session creation from a miss, and session retirement hints."""

from __future__ import annotations

from ptf import testutils
from scapy.packet import Packet

from opengate import p4constants as pc

from opengate_test import (
    HOST_IN,
    HOST_IN_MAC,
    HOST_OUT,
    HOST_OUT_MAC,
    INSIDE,
    OUTSIDE,
    OpenGateTest,
    icmp_echo,
    ip,
    refresh,
    routed,
    tcp_packet,
    udp_packet,
)


def opens_a_session(test: OpenGateTest, packet: Packet, key: tuple[int, int, int]) -> None:
    """With everything permitted, `packet` from the inside is routed out at once and reported
    with a session request whose (protocol, source port, destination port) is `key`."""
    test.classify_everything()
    test.enable_digest(pc.D_SESSION_REQUEST_T)
    testutils.send_packet(test, INSIDE, bytes(packet))
    testutils.verify_packet(test, routed(packet, OUTSIDE, HOST_OUT_MAC), OUTSIDE)
    record = test.next_digest(pc.D_SESSION_REQUEST_T)
    test.assertEqual((record["ip_proto"], record["l4_sport"], record["l4_dport"]), key)


class SessionHitForwardsBothWaysAndCounts(OpenGateTest):
    """With both directions installed, traffic passes each way and each entry counts its packets."""

    def runTest(self) -> None:
        forward = self.add_session(HOST_IN, HOST_OUT, 6, 40000, 80)
        reverse = self.add_session(HOST_OUT, HOST_IN, 6, 80, 40000)
        out = refresh(tcp_packet(flags="A"))
        back = refresh(
            tcp_packet(
                src=HOST_OUT,
                dst=HOST_IN,
                sport=80,
                dport=40000,
                flags="A",
                eth_src=HOST_OUT_MAC,
                eth_dst="02:00:00:00:00:02",
            )
        )
        for _ in range(3):
            testutils.send_packet(self, INSIDE, bytes(out))
            testutils.verify_packet(self, routed(out, OUTSIDE, HOST_OUT_MAC), OUTSIDE)
        testutils.send_packet(self, OUTSIDE, bytes(back))
        testutils.verify_packet(self, routed(back, INSIDE, HOST_IN_MAC), INSIDE)
        testutils.verify_no_other_packets(self)
        self.wait_for(
            "3 packets on the forward entry", lambda: self.direct_counter(forward)[0] == 3
        )
        self.assertEqual(self.direct_counter(reverse)[0], 1)


class SynWithoutSessionForwardedAndReported(OpenGateTest):
    """A permitted TCP SYN without a session is forwarded at once and reported by a digest
    carrying its 5-tuple, ingress port, ACL rule and IDS class."""

    def runTest(self) -> None:
        self.classify_everything(rule_id=42)
        self.enable_digest(pc.D_SESSION_REQUEST_T)
        syn = refresh(tcp_packet(flags="S"))
        testutils.send_packet(self, INSIDE, bytes(syn))
        testutils.verify_packet(self, routed(syn, OUTSIDE, HOST_OUT_MAC), OUTSIDE)
        testutils.verify_no_other_packets(self)
        record = self.next_digest(pc.D_SESSION_REQUEST_T)
        self.assertEqual(
            record,
            {
                "ipv4_src": ip(HOST_IN),
                "ipv4_dst": ip(HOST_OUT),
                "ip_proto": 6,
                "l4_sport": 40000,
                "l4_dport": 80,
                "ingress_port": INSIDE,
                "acl_rule": 42,
                "ids_class": 0,
                "spm_port": 0,
                "spm_mac": 0,
                # Not masqueraded (the v1model build's digest names the data plane's binding),
                # and a data-plane slot carries it (the v1model build makes the session).
                **(
                    {"nat_addr": 0, "nat_port": 0, "nat_kind": 0, "dp_session": 1}
                    if "nat_port" in record
                    else {}
                ),
            },
        )


class AckWithoutSessionDropped(OpenGateTest):
    """A TCP segment without SYN and without a session (an ACK out of nowhere) is dropped."""

    def runTest(self) -> None:
        self.classify_everything()
        self.assert_dropped(INSIDE, bytes(refresh(tcp_packet(flags="A"))), pc.DROP_NO_SESSION)


class SynAckWithoutSessionDropped(OpenGateTest):
    """SYN+ACK is not an opening packet either."""

    def runTest(self) -> None:
        self.classify_everything()
        testutils.send_packet(
            self,
            OUTSIDE,
            bytes(
                refresh(
                    tcp_packet(
                        src=HOST_OUT,
                        dst=HOST_IN,
                        sport=80,
                        dport=40000,
                        flags="SA",
                        eth_src=HOST_OUT_MAC,
                        eth_dst="02:00:00:00:00:02",
                    )
                )
            ),
        )
        testutils.verify_no_other_packets(self)


class EchoReplyWithoutSessionDropped(OpenGateTest):
    """An ICMP echo reply nobody asked for is dropped; the request would have opened a session."""

    def runTest(self) -> None:
        self.classify_everything()
        testutils.send_packet(
            self,
            OUTSIDE,
            bytes(
                refresh(
                    icmp_echo(
                        src=HOST_OUT,
                        dst=HOST_IN,
                        reply=True,
                        eth_src=HOST_OUT_MAC,
                        eth_dst="02:00:00:00:00:02",
                    )
                )
            ),
        )
        testutils.verify_no_other_packets(self)


class EchoRequestOpensSession(OpenGateTest):
    """An ICMP echo request is an opening packet: forwarded and reported with the identifier as
    its source port."""

    def runTest(self) -> None:
        opens_a_session(self, refresh(icmp_echo(ident=0x4242)), (1, 0x4242, 0))


class UdpOpensSession(OpenGateTest):
    """Any permitted UDP datagram without a session opens one."""

    def runTest(self) -> None:
        opens_a_session(self, refresh(udp_packet()), (17, 5353, 53))


class BlockedSessionDropped(OpenGateTest):
    """A session the controller blocked (e.g. after an SPM verdict) drops the rest of the flow."""

    def runTest(self) -> None:
        self.add_session(HOST_IN, HOST_OUT, 6, 40000, 80, block=True)
        self.assert_dropped(INSIDE, bytes(refresh(tcp_packet(flags="A"))), pc.DROP_SESSION_BLOCKED)


class FinOnSessionReported(OpenGateTest):
    """A FIN that hits a session is forwarded and reported so the controller can retire it."""

    def runTest(self) -> None:
        self.add_session(HOST_IN, HOST_OUT, 6, 40000, 80)
        self.enable_digest(pc.D_SESSION_CLOSE_T)
        fin = refresh(tcp_packet(flags="FA"))
        testutils.send_packet(self, INSIDE, bytes(fin))
        testutils.verify_packet(self, routed(fin, OUTSIDE, HOST_OUT_MAC), OUTSIDE)
        record = self.next_digest(pc.D_SESSION_CLOSE_T)
        self.assertEqual((record["l4_sport"], record["tcp_flags"]), (40000, 0x11))


class IdleSessionReported(OpenGateTest):
    """A session entry with an idle timeout that sees no traffic is reported by the switch."""

    def runTest(self) -> None:
        entry = self.add_session(HOST_IN, HOST_OUT, 17, 5353, 53, idle_timeout_ns=200_000_000)
        wanted = self.schema.encode_entry(entry)
        notification = self.client.get_idle_timeout(timeout=10.0)
        self.assertIsNotNone(notification, "no idle-timeout notification within 10s")
        assert notification is not None

        def key(entry: object) -> dict[int, bytes]:
            return {m.field_id: m.exact.value for m in entry.match}  # type: ignore[attr-defined]

        self.assertIn(key(wanted), [key(e) for e in notification.table_entry])
