"""IPv6 (p4src/include/control/ipv6.p4): neighbour discovery for the gateway's addresses, the
extension header walk, validation, sessions set up by the CPM, routing with the hop limit, and
what goes to the CPM. Exact bytes throughout."""

from __future__ import annotations

import ipaddress

from ptf import testutils
from scapy.layers.inet import TCP, UDP
from scapy.layers.inet6 import (
    ICMPv6DestUnreach,
    ICMPv6EchoReply,
    ICMPv6EchoRequest,
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    ICMPv6NDOptDstLLAddr,
    ICMPv6NDOptSrcLLAddr,
    ICMPv6PacketTooBig,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
    PadN,
)
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw

from opengate import nptv6
from opengate import p4constants as pc
from opengate.testbed import (
    GW6_IN,
    GW6_OUT,
    HOST6_IN,
    HOST6_OUT,
    halves,
    ipv6_acl_entry,
    nd_entry,
    nptv6_entries,
    route_v6_entry,
    session_v6_entry,
)

from opengate_test import (
    GW_MAC,
    HOST_IN_MAC,
    HOST_OUT_MAC,
    INSIDE,
    OUTSIDE,
    SPM_A,
    SPM_MAC,
    TAG_BASE,
    OpenGateTest,
    tag_mac,
)

SOLICITED_GW6_IN = "ff02::1:ff00:1"  # the solicited-node group of 2001:db8:1::1
SOLICITED_MAC = "33:33:ff:00:00:01"
LINK_LOCAL_IN = "fe80::200:ff:fe00:110"  # the inside host's link-local address (EUI-64)


def tcp6(
    src: str = HOST6_IN,
    dst: str = HOST6_OUT,
    sport: int = 40000,
    dport: int = 80,
    flags: str = "S",
    hlim: int = 64,
    eth_src: str = HOST_IN_MAC,
    eth_dst: str = GW_MAC[INSIDE],
    ext: Packet | None = None,
    payload: bytes = b"",
) -> Packet:
    ip6 = IPv6(src=src, dst=dst, hlim=hlim, fl=0x12345, tc=0x28)
    if ext is not None:
        ip6 = ip6 / ext
    return Ether(
        bytes(
            Ether(src=eth_src, dst=eth_dst)
            / ip6
            / TCP(sport=sport, dport=dport, flags=flags, seq=1000, window=8192)
            / payload
        )
    )


def reply6(flags: str = "SA", **kwargs: object) -> Packet:
    """The outside server's answer to tcp6()'s flow."""
    return tcp6(  # type: ignore[arg-type]
        src=HOST6_OUT,
        dst=HOST6_IN,
        sport=80,
        dport=40000,
        flags=flags,
        eth_src=HOST_OUT_MAC,
        eth_dst=GW_MAC[OUTSIDE],
        **kwargs,
    )


def routed6(packet: Packet, port: int, next_hop_mac: str) -> bytes:
    """What the gateway sends for `packet` when it routes it out of `port`: MACs rewritten,
    hop limit one less, nothing else (no checksum covers the hop limit)."""
    out = Ether(bytes(packet))
    out[Ether].src = GW_MAC[port]
    out[Ether].dst = next_hop_mac
    out[IPv6].hlim -= 1
    return bytes(out)


def solicitation(
    target: str = GW6_IN,
    src: str = HOST6_IN,
    dst: str = SOLICITED_GW6_IN,
    eth_dst: str = SOLICITED_MAC,
    option: bool = True,
    hlim: int = 255,
) -> Packet:
    packet = (
        Ether(src=HOST_IN_MAC, dst=eth_dst)
        / IPv6(src=src, dst=dst, hlim=hlim)
        / ICMPv6ND_NS(tgt=target)
    )
    if option:
        packet = packet / ICMPv6NDOptSrcLLAddr(lladdr=HOST_IN_MAC)
    return Ether(bytes(packet))


def advertisement(
    target: str = GW6_IN, dst: str = HOST6_IN, eth_dst: str = HOST_IN_MAC, solicited: int = 1
) -> bytes:
    """The neighbour advertisement RFC 4861 section 7.2.4 asks for, checksum by scapy."""
    return bytes(
        Ether(src=GW_MAC[INSIDE], dst=eth_dst)
        / IPv6(src=target, dst=dst, hlim=255)
        / ICMPv6ND_NA(R=1, S=solicited, O=1, tgt=target)
        / ICMPv6NDOptDstLLAddr(lladdr=GW_MAC[INSIDE])
    )


class Ipv6Test(OpenGateTest):
    """The IPv6 side of the test bed: the gateway's addresses, the two LANs' routes."""

    def setup_gateway(self) -> None:
        super().setup_gateway()
        self.insert(nd_entry(GW6_IN, GW_MAC[INSIDE]))
        self.insert(nd_entry(GW6_OUT, GW_MAC[OUTSIDE]))
        self.insert(route_v6_entry("2001:db8:1::/64", INSIDE, HOST_IN_MAC, GW_MAC[INSIDE]))
        self.insert(route_v6_entry("2001:db8:2::/64", OUTSIDE, HOST_OUT_MAC, GW_MAC[OUTSIDE]))

    def permit_inside(self, rule: int = 7) -> None:
        """The ACL permits what comes from the inside LAN (RFC 6092: outbound)."""
        self.insert(ipv6_acl_entry(10, pc.A_IPV6_ACL_PERMIT, rule, src="2001:db8:1::/64"))

    def add_flow(self) -> None:
        """tcp6()'s flow, both directions, as the CPM installs it."""
        self.insert(session_v6_entry(HOST6_IN, HOST6_OUT, 6, 40000, 80))
        self.insert(session_v6_entry(HOST6_OUT, HOST6_IN, 6, 80, 40000))


# -- neighbour discovery ---------------------------------------------------------------------


class NeighbourSolicitationAnswered(Ipv6Test):
    """A solicitation for the gateway's address, to its solicited-node group, with the
    sender's link-layer address: answered on the same port with a solicited, overriding router
    advertisement carrying the gateway's MAC, checksum right."""

    def runTest(self) -> None:
        testutils.send_packet(self, INSIDE, bytes(solicitation()))
        testutils.verify_packet(self, advertisement(), INSIDE)
        testutils.verify_no_other_packets(self)


class UnicastSolicitationWithoutOptionAnswered(Ipv6Test):
    """Neighbour unreachability detection: a unicast solicitation without an option (24
    bytes) is answered too, the option added."""

    def runTest(self) -> None:
        packet = solicitation(dst=GW6_IN, eth_dst=GW_MAC[INSIDE], option=False)
        self.assertEqual(packet[IPv6].plen, 24)
        testutils.send_packet(self, INSIDE, bytes(packet))
        testutils.verify_packet(self, advertisement(), INSIDE)
        testutils.verify_no_other_packets(self)


class DuplicateAddressDetectionDefended(Ipv6Test):
    """A solicitation from the unspecified address (another node wants the gateway's address)
    is answered to all nodes, not solicited (RFC 4861 section 7.2.4)."""

    def runTest(self) -> None:
        packet = solicitation(src="::", option=False)
        testutils.send_packet(self, INSIDE, bytes(packet))
        expected = advertisement(dst="ff02::1", eth_dst="33:33:00:00:00:01", solicited=0)
        testutils.verify_packet(self, expected, INSIDE)
        testutils.verify_no_other_packets(self)


class InvalidSolicitationsNotAnswered(Ipv6Test):
    """RFC 4861 section 7.1.1's checks: a hop limit below 255 (sent from off the link), a
    target that is not the gateway's, a group that is not the target's, and duplicate address
    detection with a link-layer option are not answered (UNSUPPORTED); a bad checksum is
    BAD_CHECKSUM."""

    def runTest(self) -> None:
        for packet in (
            solicitation(hlim=254),
            solicitation(target="2001:db8:1::99", dst="ff02::1:ff00:99"),
            solicitation(dst="ff02::1:ff00:2"),
            solicitation(src="::", option=True),
        ):
            self.assert_dropped(INSIDE, bytes(packet), pc.DROP_UNSUPPORTED)
        broken = bytearray(bytes(solicitation()))
        broken[14 + 40 + 2] ^= 0x01  # the ICMPv6 checksum
        self.assert_dropped(INSIDE, bytes(broken), pc.DROP_BAD_CHECKSUM)


class LinkLocalAndMulticastStayOnTheLink(Ipv6Test):
    """Link-local sources or destinations and multicast other than solicitations are neither
    forwarded nor answered (UNSUPPORTED): an MLD report, a router solicitation, a link-local
    ping, even with a route and an ACL that would permit them."""

    def runTest(self) -> None:
        self.permit_inside()
        mld = (
            Ether(src=HOST_IN_MAC, dst="33:33:00:00:00:16")
            / IPv6(src=HOST6_IN, dst="ff02::16", hlim=1)
            / Raw(b"\x8f\x00\x00\x00\x00\x00\x00\x00")
        )
        rs = (
            Ether(src=HOST_IN_MAC, dst="33:33:00:00:00:02")
            / IPv6(src=LINK_LOCAL_IN, dst="ff02::2", hlim=255)
            / Raw(b"\x85\x00\x00\x00\x00\x00\x00\x00")
        )
        ping = (
            Ether(src=HOST_IN_MAC, dst=GW_MAC[INSIDE])
            / IPv6(src=LINK_LOCAL_IN, dst=HOST6_OUT)
            / ICMPv6EchoRequest(id=1, seq=1)
        )
        for packet in (mld, rs, ping):
            self.assert_dropped(INSIDE, bytes(packet), pc.DROP_UNSUPPORTED)


# -- validation and the extension header walk ------------------------------------------------


class BadIpv6HeadersDropped(Ipv6Test):
    """Version 4 under the IPv6 ethertype, or a multicast source, is BAD_IPV6_HEADER; a
    payload length beyond the frame is TRUNCATED; an IPv6 header cut short is TRUNCATED."""

    def runTest(self) -> None:
        self.add_flow()
        raw = bytearray(bytes(tcp6(flags="A")))
        raw[14] = (raw[14] & 0x0F) | 0x40
        self.assert_dropped(INSIDE, bytes(raw), pc.DROP_BAD_IPV6_HEADER)
        self.assert_dropped(INSIDE, bytes(tcp6(src="ff0e::1", flags="A")), pc.DROP_BAD_IPV6_HEADER)
        longer = tcp6(flags="A", payload=b"x" * 10)
        longer[IPv6].plen = 20 + 10 + 100
        self.assert_dropped(INSIDE, bytes(longer), pc.DROP_TRUNCATED)
        self.assert_dropped(INSIDE, bytes(tcp6(flags="A"))[: 14 + 30], pc.DROP_TRUNCATED)


class ExtensionHeadersWalkedToTheTransport(Ipv6Test):
    """Hop-by-hop, destination options, routing (segments left 0), a first fragment and
    destination options again, in RFC 8200's order: the walk reaches TCP, the session hits
    and the packet leaves with every header as it came (hop limit one less)."""

    def runTest(self) -> None:
        self.add_flow()
        chain = (
            IPv6ExtHdrHopByHop(options=[PadN(optdata=b"\x00" * 4)])
            / IPv6ExtHdrDestOpt(options=[PadN(optdata=b"\x00" * 12)])
            / IPv6ExtHdrRouting(type=4, segleft=0, addresses=[])
            / IPv6ExtHdrFragment(offset=0, m=1, id=0x01020304)
            / IPv6ExtHdrDestOpt(options=[PadN(optdata=b"\x00" * 4)])
        )
        packet = tcp6(flags="A", ext=chain, payload=b"through")
        testutils.send_packet(self, INSIDE, bytes(packet))
        testutils.verify_packet(self, routed6(packet, OUTSIDE, HOST_OUT_MAC), OUTSIDE)
        testutils.verify_no_other_packets(self)


class ChainsTheParserDoesNotWalkDropped(Ipv6Test):
    """A hop-by-hop header after another header, two routing headers, or an options header
    longer than 256 bytes: dropped and counted as IPV6_EXT_HEADERS (RFC 9098)."""

    def runTest(self) -> None:
        self.add_flow()
        for chain in (
            IPv6ExtHdrDestOpt() / IPv6ExtHdrHopByHop(),
            IPv6ExtHdrRouting(type=4, segleft=0) / IPv6ExtHdrRouting(type=4, segleft=0),
            IPv6ExtHdrHopByHop(options=[PadN(optdata=b"\x00" * 130)] * 2),
        ):
            packet = tcp6(flags="A", ext=chain)
            self.assert_dropped(INSIDE, bytes(packet), pc.DROP_IPV6_EXT_HEADERS)


class LaterFragmentDropped(Ipv6Test):
    """A fragment after the first carries no ports: no session can match it (UNSUPPORTED),
    as for IPv4; the first fragment of the same datagram passes."""

    def runTest(self) -> None:
        self.add_flow()
        later = Ether(
            bytes(
                Ether(src=HOST_IN_MAC, dst=GW_MAC[INSIDE])
                / IPv6(src=HOST6_IN, dst=HOST6_OUT, nh=44)
                / IPv6ExtHdrFragment(nh=6, offset=2, m=0, id=7)
                / Raw(b"y" * 16)
            )
        )
        self.assert_dropped(INSIDE, bytes(later), pc.DROP_UNSUPPORTED)
        first = tcp6(flags="A", ext=IPv6ExtHdrFragment(offset=0, m=1, id=7))
        testutils.send_packet(self, INSIDE, bytes(first))
        testutils.verify_packet(self, routed6(first, OUTSIDE, HOST_OUT_MAC), OUTSIDE)
        testutils.verify_no_other_packets(self)


# -- sessions, the ACL, the CPM ------------------------------------------------------------------


class OpeningPacketGoesToTheCpm(Ipv6Test):
    """A SYN the ACL permits, a UDP datagram and an echo request open flows: each reaches the
    CPM as it arrived (SESSION_V6), with the rule that permitted it."""

    def runTest(self) -> None:
        self.permit_inside(rule=7)
        udp = Ether(
            bytes(
                Ether(src=HOST_IN_MAC, dst=GW_MAC[INSIDE])
                / IPv6(src=HOST6_IN, dst=HOST6_OUT)
                / UDP(sport=5353, dport=53)
                / b"query"
            )
        )
        echo = Ether(
            bytes(
                Ether(src=HOST_IN_MAC, dst=GW_MAC[INSIDE])
                / IPv6(src=HOST6_IN, dst=HOST6_OUT)
                / ICMPv6EchoRequest(id=0x4242, seq=1, data=b"ping")
            )
        )
        for packet in (tcp6(), udp, echo):
            self.expect_packet_in(INSIDE, bytes(packet), pc.CPU_REASON_SESSION_V6)
        testutils.verify_no_other_packets(self)


class SessionCarriesBothDirections(Ipv6Test):
    """With the session's two entries (as the CPM writes them after the opening packet), the
    SYN re-injected by the CPM leaves the outside port routed, and the answer comes back in;
    each entry counts its packet."""

    def runTest(self) -> None:
        self.permit_inside()
        self.add_flow()
        syn = tcp6()
        self.client.packet_out(
            bytes(syn), self.schema.encode_packet_metadata("packet_out", {"submit_to_ingress": 1})
        )
        testutils.verify_packet(self, routed6(syn, OUTSIDE, HOST_OUT_MAC), OUTSIDE)
        answer = reply6()
        testutils.send_packet(self, OUTSIDE, bytes(answer))
        testutils.verify_packet(self, routed6(answer, INSIDE, HOST_IN_MAC), INSIDE)
        testutils.verify_no_other_packets(self)
        for entry in (
            session_v6_entry(HOST6_IN, HOST6_OUT, 6, 40000, 80),
            session_v6_entry(HOST6_OUT, HOST6_IN, 6, 80, 40000),
        ):
            self.wait_for("the entry's counter", lambda e=entry: self.direct_counter(e)[0] == 1)


class UnsolicitedInboundDropped(Ipv6Test):
    """RFC 6092: from outside, a SYN no rule permits is dropped by the ACL's default, and a
    TCP segment of no session is dropped even where a rule permits it (NO_SESSION); so is an
    echo reply no request opened."""

    def runTest(self) -> None:
        self.permit_inside()
        self.assert_dropped(OUTSIDE, bytes(reply6(flags="S")), pc.DROP_ACL_DENY)
        self.insert(ipv6_acl_entry(5, pc.A_IPV6_ACL_PERMIT, 9, dst="2001:db8:1::/64"))
        self.assert_dropped(OUTSIDE, bytes(reply6(flags="A")), pc.DROP_NO_SESSION)
        echo_reply = Ether(
            bytes(
                Ether(src=HOST_OUT_MAC, dst=GW_MAC[OUTSIDE])
                / IPv6(src=HOST6_OUT, dst=HOST6_IN)
                / ICMPv6EchoReply(id=5, seq=1)
            )
        )
        self.assert_dropped(OUTSIDE, bytes(echo_reply), pc.DROP_NO_SESSION)


class IcmpErrorsForwardedByTheirRule(Ipv6Test):
    """An ICMPv6 error the ACL permits by type (RFC 4890: packet too big) is forwarded without
    a session; another type is denied by default."""

    def runTest(self) -> None:
        self.insert(ipv6_acl_entry(20, pc.A_IPV6_ACL_PERMIT, 3, proto=58, icmpv6_type=2))
        inner = bytes(IPv6(src=HOST6_IN, dst=HOST6_OUT) / TCP(sport=40000, dport=80))
        too_big = Ether(
            bytes(
                Ether(src=HOST_OUT_MAC, dst=GW_MAC[OUTSIDE])
                / IPv6(src=HOST6_OUT, dst=HOST6_IN)
                / ICMPv6PacketTooBig(mtu=1400)
                / inner
            )
        )
        testutils.send_packet(self, OUTSIDE, bytes(too_big))
        testutils.verify_packet(self, routed6(too_big, INSIDE, HOST_IN_MAC), INSIDE)
        unreachable = Ether(
            bytes(
                Ether(src=HOST_OUT_MAC, dst=GW_MAC[OUTSIDE])
                / IPv6(src=HOST6_OUT, dst=HOST6_IN)
                / ICMPv6DestUnreach(code=1)
                / inner
            )
        )
        self.assert_dropped(OUTSIDE, bytes(unreachable), pc.DROP_ACL_DENY)


class BlockedSessionDropped(Ipv6Test):
    """A session the CPM blocked drops its packets as SESSION_BLOCKED."""

    def runTest(self) -> None:
        self.insert(session_v6_entry(HOST6_IN, HOST6_OUT, 6, 40000, 80, block=True))
        self.assert_dropped(INSIDE, bytes(tcp6(flags="A")), pc.DROP_SESSION_BLOCKED)


class FinReportsTheSessionClose(Ipv6Test):
    """A FIN on a session passes and sends session_close_v6_t with the flow's key."""

    def runTest(self) -> None:
        self.add_flow()
        self.enable_digest(pc.D_SESSION_CLOSE_V6_T)
        fin = tcp6(flags="FA")
        testutils.send_packet(self, INSIDE, bytes(fin))
        testutils.verify_packet(self, routed6(fin, OUTSIDE, HOST_OUT_MAC), OUTSIDE)
        record = self.next_digest(pc.D_SESSION_CLOSE_V6_T)
        src_hi, src_lo = halves(HOST6_IN)
        dst_hi, dst_lo = halves(HOST6_OUT)
        self.assertEqual(
            record,
            {
                "ipv6_src_hi": src_hi,
                "ipv6_src_lo": src_lo,
                "ipv6_dst_hi": dst_hi,
                "ipv6_dst_lo": dst_lo,
                "ip_proto": 6,
                "l4_sport": 40000,
                "l4_dport": 80,
                "tcp_flags": 0x11,
            },
        )


class ReinjectedWithoutSessionIsACpuLoop(Ipv6Test):
    """An opening packet the CPM sends back before any session exists would come back to it:
    dropped as CPU_LOOP instead."""

    def runTest(self) -> None:
        self.permit_inside()
        before = self.counter(pc.C_DROP_COUNTER, pc.DROP_CPU_LOOP)[0]
        self.client.packet_out(
            bytes(tcp6()),
            self.schema.encode_packet_metadata("packet_out", {"submit_to_ingress": 1}),
        )
        testutils.verify_no_other_packets(self)
        self.wait_for(
            "CPU_LOOP to count the packet",
            lambda: self.counter(pc.C_DROP_COUNTER, pc.DROP_CPU_LOOP)[0] == before + 1,
        )


# -- routing and the hop limit ---------------------------------------------------------------------


class LongestPrefixWins(Ipv6Test):
    """Routes are ternary entries with priority = length + 1: a /128 inside the outside /64
    sends its packets to another next hop, a /48 covering both is not used for them."""

    def runTest(self) -> None:
        other = "00:00:00:00:02:99"
        self.insert(route_v6_entry("2001:db8::/32", OUTSIDE, "00:00:00:00:02:32", GW_MAC[OUTSIDE]))
        self.insert(route_v6_entry(HOST6_OUT + "/128", OUTSIDE, other, GW_MAC[OUTSIDE]))
        self.add_flow()
        packet = tcp6(flags="A")
        testutils.send_packet(self, INSIDE, bytes(packet))
        testutils.verify_packet(self, routed6(packet, OUTSIDE, other), OUTSIDE)
        self.insert(session_v6_entry(HOST6_IN, "2001:db8:9::9", 6, 40000, 80))
        wide = tcp6(dst="2001:db8:9::9", flags="A")
        testutils.send_packet(self, INSIDE, bytes(wide))
        testutils.verify_packet(self, routed6(wide, OUTSIDE, "00:00:00:00:02:32"), OUTSIDE)
        testutils.verify_no_other_packets(self)


class HopLimitRunsOutHere(Ipv6Test):
    """From an inside host, hop limit 1: to the CPM as it arrived (TTL_EXPIRED), before the
    session and the ACL; from outside, dropped as TTL_EXPIRED."""

    def runTest(self) -> None:
        self.add_flow()
        self.expect_packet_in(INSIDE, bytes(tcp6(flags="A", hlim=1)), pc.CPU_REASON_TTL_EXPIRED)
        testutils.verify_no_other_packets(self)
        self.assert_dropped(OUTSIDE, bytes(reply6(flags="A", hlim=1)), pc.DROP_TTL_EXPIRED)


class NoRouteFromInsideGoesToTheCpm(Ipv6Test):
    """Permitted, from inside, and no route: to the CPM (NO_ROUTE), which answers with a
    destination unreachable, or, for the gateway's own address (which the CPM never routes),
    an echo reply."""

    def runTest(self) -> None:
        self.permit_inside()
        for dst in ("2001:db8:77::1", "2001:db8:77::2"):
            echo = Ether(
                bytes(
                    Ether(src=HOST_IN_MAC, dst=GW_MAC[INSIDE])
                    / IPv6(src=HOST6_IN, dst=dst)
                    / ICMPv6EchoRequest(id=1, seq=1)
                )
            )
            self.expect_packet_in(INSIDE, bytes(echo), pc.CPU_REASON_NO_ROUTE)
        testutils.verify_no_other_packets(self)


# -- inspection --------------------------------------------------------------------------------


class InspectedSessionVisitsItsSpm(Ipv6Test):
    """A session pinned to SPM A: each direction goes there first, tagged (destination the SPM's
    MAC, source the NPM's tag with the NAT bit clear), unchanged otherwise; back with the tag it
    is routed (hop limit one less). A tagged packet of no session is dropped (NO_SESSION)."""

    def runTest(self) -> None:
        self.insert(session_v6_entry(HOST6_IN, HOST6_OUT, 6, 40000, 80, class_id=3, spm_port=SPM_A))
        self.insert(session_v6_entry(HOST6_OUT, HOST6_IN, 6, 80, 40000, class_id=3, spm_port=SPM_A))
        packet = tcp6(flags="PA", payload=b"GET / HTTP/1.0\r\n\r\n")
        testutils.send_packet(self, INSIDE, bytes(packet))
        to_spm = Ether(bytes(packet))
        to_spm[Ether].dst = SPM_MAC[SPM_A]
        to_spm[Ether].src = tag_mac(TAG_BASE)
        testutils.verify_packet(self, bytes(to_spm), SPM_A)
        back = Ether(bytes(packet))
        back[Ether].src = SPM_MAC[SPM_A]
        back[Ether].dst = tag_mac(TAG_BASE)
        testutils.send_packet(self, SPM_A, bytes(back))
        testutils.verify_packet(self, routed6(back, OUTSIDE, HOST_OUT_MAC), OUTSIDE)
        answer = reply6(flags="A")
        testutils.send_packet(self, OUTSIDE, bytes(answer))
        to_spm = Ether(bytes(answer))
        to_spm[Ether].dst = SPM_MAC[SPM_A]
        to_spm[Ether].src = tag_mac(TAG_BASE)
        testutils.verify_packet(self, bytes(to_spm), SPM_A)
        testutils.verify_no_other_packets(self)
        stray = Ether(bytes(tcp6(sport=41000, flags="A")))
        stray[Ether].src = SPM_MAC[SPM_A]
        stray[Ether].dst = tag_mac(TAG_BASE)
        self.assert_dropped(SPM_A, bytes(stray), pc.DROP_NO_SESSION)


# -- NPTv6 -------------------------------------------------------------------------------------


class Nptv6TranslatesBothWaysChecksumNeutral(Ipv6Test):
    """RFC 6296 on the outside port: h1's source leaves in the outside prefix, translated as the
    reference (opengate.nptv6) says, with the TCP checksum unchanged and still right; the answer
    to that address comes back to h1's own. Sessions and the ACL see the inside address."""

    def runTest(self) -> None:
        inside, outside = "2001:db8:1::/48", "2001:db8:ff01::/48"
        for entry in nptv6_entries(OUTSIDE, inside, outside):
            self.insert(entry)
        self.add_flow()
        public = str(
            nptv6.translate(
                ipaddress.IPv6Address(HOST6_IN),
                ipaddress.IPv6Network(inside),
                ipaddress.IPv6Network(outside),
            )
        )
        self.assertEqual(public, "2001:db8:ff01:ff::10")
        packet = tcp6(flags="PA", payload=b"hello")
        testutils.send_packet(self, INSIDE, bytes(packet))
        expected = Ether(routed6(packet, OUTSIDE, HOST_OUT_MAC))
        expected[IPv6].src = public
        self.assertEqual(bytes(expected)[-25:], bytes(packet)[-25:])  # TCP, checksum included
        rebuilt = Ether(bytes(expected))
        del rebuilt[TCP].chksum
        self.assertEqual(Ether(bytes(rebuilt))[TCP].chksum, packet[TCP].chksum)
        testutils.verify_packet(self, bytes(expected), OUTSIDE)
        answer = reply6(flags="A", payload=b"world")
        to_public = Ether(bytes(answer))
        to_public[IPv6].dst = public
        testutils.send_packet(self, OUTSIDE, bytes(to_public))
        testutils.verify_packet(self, routed6(answer, INSIDE, HOST_IN_MAC), INSIDE)
        testutils.verify_no_other_packets(self)
