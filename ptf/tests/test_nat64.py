"""NAT64 (p4src/include/control/nat64.p4; RFC 6146 with RFC 7915's header translation): a
session's packets translated both ways on exact bytes, the expected packets built by scapy
from scratch (every checksum computed afresh), the opening packet to the CPM, and what is not
translated dropped and counted."""

from __future__ import annotations

from ptf import testutils
from scapy.layers.inet import ICMP, IP, TCP, UDP, ICMPerror, IPerror, TCPerror, UDPerror
from scapy.layers.inet6 import ICMPv6EchoReply, ICMPv6EchoRequest, IPv6, IPv6ExtHdrDestOpt
from scapy.layers.l2 import Ether
from scapy.packet import Packet
from test_ipv6 import Ipv6Test

from opengate import p4constants as pc
from opengate.testbed import (
    GW_OUT_IP,
    HOST6_IN,
    HOST_OUT,
    ipv6_acl_entry,
    nat64_address,
    nat64_entries,
    nat64_route_entry,
)

from opengate_test import GW_MAC, HOST_IN_MAC, HOST_OUT_MAC, INSIDE, OUTSIDE

SERVER6 = nat64_address(HOST_OUT)  # 64:ff9b::c633:6414
PUBLIC_PORT = 20001  # the port the CPM gave the flow on GW_OUT_IP


def from_inside(l4: Packet, hlim: int = 64, ext: Packet | None = None) -> Packet:
    ip6 = IPv6(src=HOST6_IN, dst=SERVER6, hlim=hlim, tc=0x28, fl=0x12345)
    if ext is not None:
        ip6 = ip6 / ext
    return Ether(bytes(Ether(src=HOST_IN_MAC, dst=GW_MAC[INSIDE]) / ip6 / l4))


def from_outside(l4: Packet, ttl: int = 64, **ip: object) -> Packet:
    return Ether(
        bytes(
            Ether(src=HOST_OUT_MAC, dst=GW_MAC[OUTSIDE])
            / IP(src=HOST_OUT, dst=GW_OUT_IP, ttl=ttl, tos=0x28, id=777, **ip)  # type: ignore[arg-type]
            / l4
        )
    )


def as_ipv4(l4: Packet, hlim: int = 64) -> bytes:
    """RFC 7915 section 5.1: what an IPv6 packet from inside becomes, leaving by OUTSIDE."""
    return bytes(
        Ether(src=GW_MAC[OUTSIDE], dst=HOST_OUT_MAC)
        / IP(src=GW_OUT_IP, dst=HOST_OUT, ttl=hlim - 1, tos=0x28, id=0, flags="DF")
        / l4
    )


def as_ipv6(l4: Packet, ttl: int = 64) -> bytes:
    """RFC 7915 section 4.1: what an IPv4 reply becomes, leaving by INSIDE."""
    return bytes(
        Ether(src=GW_MAC[INSIDE], dst=HOST_IN_MAC)
        / IPv6(src=SERVER6, dst=HOST6_IN, hlim=ttl - 1, tc=0x28, fl=0)
        / l4
    )


class Nat64Test(Ipv6Test):
    def add_nat64(self, proto: int, sport: int, dport: int) -> None:
        for entry in nat64_entries(HOST6_IN, HOST_OUT, proto, sport, dport, GW_OUT_IP, PUBLIC_PORT):
            self.insert(entry)


class Nat64TcpBothWays(Nat64Test):
    """A TCP flow: the SYN and a data segment leave as IPv4 from the public address and port,
    DF set, TTL one less than the hop limit, the traffic class kept; the SYN-ACK and data come
    back as IPv6 from the synthesized address to the inside host's port. Checksums right."""

    def runTest(self) -> None:
        self.add_nat64(pc.IP_PROTO_TCP, 40000, 80)
        for flags, payload in (("S", b""), ("PA", b"GET / HTTP/1.1\r\n\r\n")):
            tcp = TCP(sport=40000, dport=80, flags=flags, seq=1000, ack=5, window=8192)
            testutils.send_packet(self, INSIDE, bytes(from_inside(tcp / payload)))
            out = TCP(sport=PUBLIC_PORT, dport=80, flags=flags, seq=1000, ack=5, window=8192)
            testutils.verify_packet(self, as_ipv4(out / payload), OUTSIDE)
        for flags, payload in (("SA", b""), ("PA", b"HTTP/1.1 200 OK\r\n\r\n")):
            tcp = TCP(sport=80, dport=PUBLIC_PORT, flags=flags, seq=9, ack=1001, window=4096)
            testutils.send_packet(self, OUTSIDE, bytes(from_outside(tcp / payload)))
            back = TCP(sport=80, dport=40000, flags=flags, seq=9, ack=1001, window=4096)
            testutils.verify_packet(self, as_ipv6(back / payload), INSIDE)
        testutils.verify_no_other_packets(self)


class Nat64UdpBothWays(Nat64Test):
    """UDP: the checksum over the new pseudo-header both ways."""

    def runTest(self) -> None:
        self.add_nat64(pc.IP_PROTO_UDP, 5353, 53)
        testutils.send_packet(
            self, INSIDE, bytes(from_inside(UDP(sport=5353, dport=53) / b"query"))
        )
        testutils.verify_packet(self, as_ipv4(UDP(sport=PUBLIC_PORT, dport=53) / b"query"), OUTSIDE)
        testutils.send_packet(
            self, OUTSIDE, bytes(from_outside(UDP(sport=53, dport=PUBLIC_PORT) / b"answer"))
        )
        testutils.verify_packet(self, as_ipv6(UDP(sport=53, dport=5353) / b"answer"), INSIDE)
        testutils.verify_no_other_packets(self)


class Nat64EchoBothWays(Nat64Test):
    """Ping: an ICMPv6 echo request becomes an ICMP one with the session's identifier (its
    checksum loses the pseudo-header), the ICMP echo reply an ICMPv6 one with the inside
    host's identifier (its checksum gains it) (RFC 7915 sections 4.2 and 5.2)."""

    def runTest(self) -> None:
        self.add_nat64(pc.IP_PROTO_ICMPV6, 0x1234, 0)
        request = ICMPv6EchoRequest(id=0x1234, seq=7) / b"ping-data"
        testutils.send_packet(self, INSIDE, bytes(from_inside(request)))
        out = ICMP(type=8, code=0, id=PUBLIC_PORT, seq=7) / b"ping-data"
        testutils.verify_packet(self, as_ipv4(out), OUTSIDE)
        reply = ICMP(type=0, code=0, id=PUBLIC_PORT, seq=7) / b"ping-data"
        testutils.send_packet(self, OUTSIDE, bytes(from_outside(reply)))
        back = ICMPv6EchoReply(id=0x1234, seq=7) / b"ping-data"
        testutils.verify_packet(self, as_ipv6(back), INSIDE)
        testutils.verify_no_other_packets(self)


class Nat64OpensAtTheCpm(Nat64Test):
    """A NAT64 prefix's route (route_v6_nat64): a permitted SYN of no session goes to the CPM
    (SESSION_V6), which makes the session; a segment of no session is dropped (NO_SESSION);
    nothing is ever sent there untranslated."""

    def runTest(self) -> None:
        self.insert(nat64_route_entry())
        self.permit_inside()
        syn = from_inside(TCP(sport=40000, dport=80, flags="S"))
        self.expect_packet_in(INSIDE, bytes(syn), pc.CPU_REASON_SESSION_V6)
        ack = from_inside(TCP(sport=40000, dport=80, flags="A"))
        self.assert_dropped(INSIDE, bytes(ack), pc.DROP_NO_SESSION)
        testutils.verify_no_other_packets(self)


class Nat64DropsWhatItCannotTranslate(Nat64Test):
    """Counted as NAT64_UNTRANSLATABLE: an IPv6 packet of the flow with an extension header, an
    IPv4 fragment, a reply with IPv4 options, a UDP reply without a checksum (IPv6 requires
    one), and an ICMP error about the flow that is itself a fragment. TTL 1 from outside:
    TTL_EXPIRED."""

    def runTest(self) -> None:
        self.add_nat64(pc.IP_PROTO_UDP, 5353, 53)
        self.add_nat64(pc.IP_PROTO_TCP, 40000, 80)
        reason = pc.DROP_NAT64_UNTRANSLATABLE
        with_ext = from_inside(UDP(sport=5353, dport=53) / b"q", ext=IPv6ExtHdrDestOpt())
        self.assert_dropped(INSIDE, bytes(with_ext), reason)
        udp_back = UDP(sport=53, dport=PUBLIC_PORT) / b"answer"
        self.assert_dropped(OUTSIDE, bytes(from_outside(udp_back, flags="MF")), reason)
        self.assert_dropped(OUTSIDE, bytes(from_outside(udp_back, options=b"\x01" * 4)), reason)
        unchecked = from_outside(udp_back)
        unchecked[UDP].chksum = 0
        self.assert_dropped(OUTSIDE, bytes(Ether(bytes(unchecked))), reason)
        quoted = IPerror(src=GW_OUT_IP, dst=HOST_OUT) / TCPerror(sport=PUBLIC_PORT, dport=80)
        error = from_outside(ICMP(type=3, code=4, nexthopmtu=1400) / bytes(quoted)[:28], flags="MF")
        self.assert_dropped(OUTSIDE, bytes(error), reason)
        tcp = TCP(sport=80, dport=PUBLIC_PORT, flags="A")
        self.assert_dropped(OUTSIDE, bytes(from_outside(tcp, ttl=1)), pc.DROP_TTL_EXPIRED)
        testutils.verify_no_other_packets(self)


class Nat64IcmpErrorsToTheCpm(Nat64Test):
    """An ICMPv4 error about a NAT64 flow (its quoted packet the flow's: TCP, UDP, an echo
    request) goes to the CPM as it arrived (CPU_REASON_NAT64_ICMP_ERROR), which translates it
    and its quoted packet (RFC 7915 section 4.2); an error quoting another flow's packet finds
    no session and goes nowhere."""

    def runTest(self) -> None:
        self.add_nat64(pc.IP_PROTO_TCP, 40000, 80)
        self.add_nat64(pc.IP_PROTO_UDP, 5353, 53)
        self.add_nat64(pc.IP_PROTO_ICMPV6, 7, 0)
        reason = pc.CPU_REASON_NAT64_ICMP_ERROR
        quotes = (
            IPerror(src=GW_OUT_IP, dst=HOST_OUT, flags="DF")
            / TCPerror(sport=PUBLIC_PORT, dport=80),
            IPerror(src=GW_OUT_IP, dst=HOST_OUT) / UDPerror(sport=PUBLIC_PORT, dport=53),
            IPerror(src=GW_OUT_IP, dst=HOST_OUT) / ICMPerror(type=8, id=PUBLIC_PORT, seq=1),
        )
        for quoted, (kind, code) in zip(quotes, ((3, 4), (3, 3), (11, 0)), strict=True):
            with self.subTest(quoted=quoted.summary()):
                error = from_outside(ICMP(type=kind, code=code, nexthopmtu=1400) / bytes(quoted))
                self.expect_packet_in(OUTSIDE, bytes(error), reason)
        other = IPerror(src=GW_OUT_IP, dst=HOST_OUT) / TCPerror(sport=PUBLIC_PORT + 1, dport=80)
        testutils.send_packet(
            self, OUTSIDE, bytes(from_outside(ICMP(type=3, code=1) / bytes(other)))
        )
        testutils.verify_no_other_packets(self)


class Nat64OnlyWithItsSession(Nat64Test):
    """An IPv4 packet to the public port of another protocol, or from another server, finds no
    NAT64 session: the IPv4 pipeline handles it as any other (here: no session, dropped), and
    nothing IPv6 leaves."""

    def runTest(self) -> None:
        self.add_nat64(pc.IP_PROTO_TCP, 40000, 80)
        self.insert(ipv6_acl_entry(10, pc.A_IPV6_ACL_PERMIT, 7, src="2001:db8:1::/64"))
        other = Ether(bytes(from_outside(TCP(sport=80, dport=PUBLIC_PORT, flags="A"))))
        other[IP].src = "198.51.100.99"
        del other[IP].chksum
        del other[TCP].chksum
        testutils.send_packet(self, OUTSIDE, bytes(Ether(bytes(other))))
        testutils.verify_no_other_packets(self)
