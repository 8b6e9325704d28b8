"""ICMP errors related to a session (RFC 5508): an error that quotes a packet of a flow the gateway
carries is admitted as that flow's packet, whatever the ACL says, by the flow's exact entries or
by its data-plane slot, and never goes to an SPM; the quoted packet is translated with the flow
(checksums exact); an error about no known flow meets the ACL as before; an error quoting fewer
than 8 bytes of the packet is dropped as truncated.

Only the v1model build relates errors to sessions (they need the data-plane session slots); both
v1model targets run these tests.
"""

from __future__ import annotations

from ptf import testutils
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw
from test_dp_nat import DataPlaneNatTest, masqueraded
from test_dp_session import DataPlaneSessionTest

from opengate import p4constants as pc
from opengate.entries import Exact, TableEntry

from opengate_test import (
    GW_MAC,
    GW_OUT_IP,
    HOST_IN,
    HOST_IN_MAC,
    HOST_OUT,
    HOST_OUT_MAC,
    INSIDE,
    OUTSIDE,
    SPM_A,
    icmp_echo,
    refresh,
    routed,
    tcp_packet,
    udp_packet,
)

PORT_UNREACHABLE = (3, 3)
FRAG_NEEDED = (3, 4)
TIME_EXCEEDED = (11, 0)


def icmp_error(
    quoted: Packet | bytes,
    src: str,
    dst: str,
    arrives_on: int,
    kind: tuple[int, int] = PORT_UNREACHABLE,
    mtu: int = 0,
) -> Packet:
    """An ICMP error from `src` to `dst` quoting `quoted` (an IP packet, or raw bytes), as it
    arrives at the gateway on `arrives_on` from the host on that side."""
    host_mac = HOST_OUT_MAC if arrives_on == OUTSIDE else HOST_IN_MAC
    body = bytes(quoted[IP]) if isinstance(quoted, Packet) else quoted
    return refresh(
        Ether(src=host_mac, dst=GW_MAC[arrives_on])
        / IP(src=src, dst=dst, id=7)
        / ICMP(type=kind[0], code=kind[1], nexthopmtu=mtu)
        / Raw(body)
    )


def quoted_as(quoted: Packet, addr: str, port: int, source: bool, l4_checksum: bool) -> bytes:
    """`quoted` (an IP packet) with its source (or destination) address and port (an echo
    request: its identifier) replaced and its IPv4 checksum computed afresh; its transport
    checksum too if `l4_checksum` (UDP; an echo's always), else kept as it was (TCP: beyond the
    8 bytes the gateway reads)."""
    out = IP(bytes(quoted[IP]))
    setattr(out, "src" if source else "dst", addr)
    del out.chksum
    if ICMP in out:  # an echo request: its identifier is the port
        out[ICMP].id = port
        del out[ICMP].chksum
        return bytes(out)
    layer = out[TCP] if TCP in out else out[UDP]
    setattr(layer, "sport" if source else "dport", port)
    if l4_checksum:
        del layer.chksum
    return bytes(out)


def translated(error: Packet, outer_dst: str, quoted: bytes, port: int, next_hop: str) -> Packet:
    """`error` as the gateway sends it out of `port`: outer destination `outer_dst`, quoting
    `quoted`, ICMP checksum computed afresh."""
    out = error.copy()
    out[IP].dst = outer_dst
    out[ICMP].remove_payload()
    out[ICMP].add_payload(Raw(quoted))
    return routed(refresh(out), port, next_hop)


def set_acl_verdict(test: DataPlaneSessionTest, action: str, rule_id: int) -> None:
    """Change the one-rule ACL of classify_everything to `action` (deleted at tear-down as the
    entry classify_everything inserted)."""
    verdict = TableEntry.make(
        pc.T_ACL_VERDICT,
        {
            "version": Exact(0),
            "acl_addr_index": Exact(1),
            "acl_port_index": Exact(1),
            "acl_proto_index": Exact(1),
        },
        action,
        {"rule_id": rule_id},
    )
    test.client.modify([test.schema.encode_entry(verdict)])


class ErrorAdmittedByTheSlotWhileTheAclDenies(DataPlaneSessionTest):
    """A UDP flow the data plane made; then the ACL denies everything. A port unreachable and a
    fragmentation-needed about the flow's datagram still reach the inside host, unchanged but
    for routing, with no digest; the same error about another port is dropped by the ACL."""

    def runTest(self) -> None:
        self.classify_everything(rule_id=5)
        self.enable_digest(pc.D_SESSION_REQUEST_T)
        datagram = refresh(udp_packet())
        self.forwarded(INSIDE, datagram, OUTSIDE, HOST_OUT_MAC)
        self.next_digest(pc.D_SESSION_REQUEST_T)
        set_acl_verdict(self, pc.A_ACL_DENY, 9)
        as_received = routed(datagram, OUTSIDE, HOST_OUT_MAC)
        for kind, mtu in ((PORT_UNREACHABLE, 0), (FRAG_NEEDED, 1400)):
            error = icmp_error(as_received, HOST_OUT, HOST_IN, OUTSIDE, kind, mtu)
            self.forwarded(OUTSIDE, error, INSIDE, HOST_IN_MAC)
        self.wait_events(pc.FLOW_EVENT_RELATED, 2)
        self.assertEqual(self.events(pc.FLOW_EVENT_HIT), 0, "an error is not the flow's traffic")
        other = as_received.copy()
        other[UDP].sport = 5354
        self.assert_dropped(
            OUTSIDE, bytes(icmp_error(refresh(other), HOST_OUT, HOST_IN, OUTSIDE)), pc.DROP_ACL_DENY
        )
        self.assertEqual(self.drain_digests(), 0, "an error reports nothing")


class ErrorFromARouterOnThePath(DataPlaneSessionTest):
    """A time-exceeded from a router between the gateway and the flow's far end (its own source
    address, as traceroute sees) is the flow's too: the key is the quoted packet's."""

    def runTest(self) -> None:
        self.classify_everything()
        probe = refresh(udp_packet(sport=33434, dport=33435))
        self.forwarded(INSIDE, probe, OUTSIDE, HOST_OUT_MAC)
        set_acl_verdict(self, pc.A_ACL_DENY, 9)
        error = icmp_error(
            routed(probe, OUTSIDE, HOST_OUT_MAC), "198.51.100.1", HOST_IN, OUTSIDE, TIME_EXCEEDED
        )
        self.forwarded(OUTSIDE, error, INSIDE, HOST_IN_MAC)
        self.wait_events(pc.FLOW_EVENT_RELATED, 1)


class ErrorAdmittedByTheExactEntryNotTheSpm(DataPlaneSessionTest):
    """With the controller's entries (the flow inspected by SPM_A) and an ACL that denies, an
    error about the flow's reply is admitted by the original direction's entry, counted by it,
    and goes to the inside host, not to the SPM."""

    def runTest(self) -> None:
        self.classify_everything(pc.A_ACL_DENY, rule_id=9)
        original = self.add_session(HOST_IN, HOST_OUT, 6, 40000, 80, spm_port=SPM_A, class_id=3)
        self.add_session(HOST_OUT, HOST_IN, 6, 80, 40000, spm_port=SPM_A, class_id=3)
        # The host inside answers a segment of the flow's reply with an error (quoting it as it
        # arrived inside): the error travels as the flow's original direction.
        segment = refresh(
            tcp_packet(
                src=HOST_OUT,
                dst=HOST_IN,
                sport=80,
                dport=40000,
                flags="A",
                eth_src=HOST_OUT_MAC,
                eth_dst=GW_MAC[OUTSIDE],
            )
        )
        error = icmp_error(
            routed(segment, INSIDE, HOST_IN_MAC), HOST_IN, HOST_OUT, INSIDE, FRAG_NEEDED, 1280
        )
        self.forwarded(INSIDE, error, OUTSIDE, HOST_OUT_MAC)
        testutils.verify_no_other_packets(self)
        self.wait_for("the entry to count the error", lambda: self.direct_counter(original)[0] == 1)


class MasqueradedErrorTranslatedBySlot(DataPlaneNatTest):
    """A flow the data plane masqueraded: a port unreachable to the public address, quoting the
    datagram as it left, reaches the inside host quoting it as the host sent it (address, port,
    IPv4 and UDP checksums, ICMP checksum exact); one from the inside host about the flow's reply
    leaves from the public address, quoting the reply as the far end sent it. The ACL denies
    both directions by then."""

    def runTest(self) -> None:
        self.classify_everything()
        self.masquerade_in_data_plane()
        datagram = refresh(udp_packet(payload=b"a query"))
        port = self.opened(datagram)
        set_acl_verdict(self, pc.A_ACL_DENY, 9)
        left = routed(masqueraded(datagram, port), OUTSIDE, HOST_OUT_MAC)
        error = icmp_error(left, HOST_OUT, GW_OUT_IP, OUTSIDE)
        testutils.send_packet(self, OUTSIDE, bytes(error))
        quoted = quoted_as(left, HOST_IN, datagram[UDP].sport, source=True, l4_checksum=True)
        testutils.verify_packet(
            self, translated(error, HOST_IN, quoted, INSIDE, HOST_IN_MAC), INSIDE
        )
        # The far end's answer as the inside host received it, and the host's error about it.
        answer = refresh(
            udp_packet(
                src=HOST_OUT,
                dst=HOST_IN,
                sport=53,
                dport=datagram[UDP].sport,
                eth_src=GW_MAC[INSIDE],
                eth_dst=HOST_IN_MAC,
                payload=b"an answer",
            )
        )
        answer[IP].ttl = 63
        answer = refresh(answer)
        error = icmp_error(answer, HOST_IN, HOST_OUT, INSIDE)
        testutils.send_packet(self, INSIDE, bytes(error))
        quoted = quoted_as(answer, GW_OUT_IP, port, source=False, l4_checksum=True)
        expected = translated(error, HOST_OUT, quoted, OUTSIDE, HOST_OUT_MAC)
        expected[IP].src = GW_OUT_IP
        testutils.verify_packet(self, refresh(expected), OUTSIDE)
        testutils.verify_no_other_packets(self)
        self.wait_events(pc.FLOW_EVENT_RELATED, 2)


class MasqueradedPingErrorTranslatedBySlot(DataPlaneNatTest):
    """A ping the data plane masqueraded: a router's time exceeded about the echo request, to
    the public address, reaches the inside host quoting the request as the host sent it (its
    identifier, the quoted ICMP checksum); the ACL denies everything by then."""

    def runTest(self) -> None:
        self.classify_everything()
        self.masquerade_in_data_plane()
        echo = refresh(icmp_echo(ident=0x4321))
        port = self.opened(echo)
        set_acl_verdict(self, pc.A_ACL_DENY, 9)
        left = routed(masqueraded(echo, port), OUTSIDE, HOST_OUT_MAC)
        error = icmp_error(left, "198.51.100.1", GW_OUT_IP, OUTSIDE, TIME_EXCEEDED)
        testutils.send_packet(self, OUTSIDE, bytes(error))
        quoted = quoted_as(left, HOST_IN, 0x4321, source=True, l4_checksum=True)
        testutils.verify_packet(
            self, translated(error, HOST_IN, quoted, INSIDE, HOST_IN_MAC), INSIDE
        )
        testutils.verify_no_other_packets(self)
        self.wait_events(pc.FLOW_EVENT_RELATED, 1)


class MasqueradedErrorTranslatedByExactEntry(DataPlaneSessionTest):
    """The controller's masquerade entries: a fragmentation-needed about a TCP segment, quoting
    it as it left, reaches the inside host quoting it as the host sent it; the quoted TCP
    checksum, beyond the 8 bytes read, is left as it was."""

    def runTest(self) -> None:
        self.add_masqueraded_session(reply=True)
        segment = refresh(tcp_packet(flags="PA", payload=b"x" * 1400))
        left = segment.copy()
        left[IP].src = GW_OUT_IP
        left[TCP].sport = 61001
        left = routed(refresh(left), OUTSIDE, HOST_OUT_MAC)
        error = icmp_error(bytes(left[IP])[:28], HOST_OUT, GW_OUT_IP, OUTSIDE, FRAG_NEEDED, 1280)
        testutils.send_packet(self, OUTSIDE, bytes(error))
        quoted = quoted_as(left, HOST_IN, 40000, source=True, l4_checksum=False)[:28]
        testutils.verify_packet(
            self, translated(error, HOST_IN, quoted, INSIDE, HOST_IN_MAC), INSIDE
        )
        testutils.verify_no_other_packets(self)


class ErrorAboutNoKnownFlowMeetsTheAcl(DataPlaneSessionTest):
    """An error about a flow the gateway does not carry: permitted by the ACL, it passes as it
    is (as before); an error quoting the IPv4 header but not 8 bytes after it is dropped as
    truncated."""

    def runTest(self) -> None:
        self.classify_everything()
        stray = routed(refresh(udp_packet(sport=6000)), OUTSIDE, HOST_OUT_MAC)
        self.forwarded(OUTSIDE, icmp_error(stray, HOST_OUT, HOST_IN, OUTSIDE), INSIDE, HOST_IN_MAC)
        self.assertEqual(self.events(pc.FLOW_EVENT_RELATED), 0)
        short = icmp_error(bytes(stray[IP])[:24], HOST_OUT, HOST_IN, OUTSIDE)
        self.assert_dropped(OUTSIDE, bytes(short), pc.DROP_TRUNCATED)
