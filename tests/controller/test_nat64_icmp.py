"""ICMPv4 errors about NAT64 flows, translated to ICMPv6 (RFC 7915 section 4.2; controller/
nat64_icmp.py). The reference is built by scapy from scratch: the inside host's own IPv6 packet
(every checksum computed afresh) is what the translated error must quote, byte for byte, so the
quoted transport checksum, the restored port or identifier and the inner header are all checked.
Then the same on the switch double (the packet-in becomes a packet-out of the session's inside
port, counted) and on a real data plane (a router's fragmentation needed for h1's SYN reaches h1
as a packet too big)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import (
    ICMPv6DestUnreach,
    ICMPv6EchoRequest,
    ICMPv6PacketTooBig,
    ICMPv6TimeExceeded,
    IPv6,
)
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Packet

from controller.gateway_icmp6 import MIN_MTU
from controller.nat64_icmp import icmpv6_kind, plateau_mtu, translate
from controller.session_model import Nat64Routes, Session, reply_key
from opengate import p4constants as pc
from tests.controller.conftest import ControllerFactory, wait_until
from tests.controller.flows import GW_IN_MAC, GW_OUT_MAC, packet_in_meta
from tests.controller.real_switch import H1_MAC, OUT1_MAC, Lab
from tests.controller.test_nat64 import NAT64_LINE, OUT1, OUT1_64, PUBLIC, open_nat64, with_nat64
from tests.switch_double import SwitchDouble

H1_6 = "2001:db8:1::10"
ROUTER = "203.0.113.9"
ROUTER_64 = "64:ff9b::cb00:7109"  # RFC 6052: 203.0.113.9 in the well-known prefix
PUBLIC_PORT = 20000
ROUTES = Nat64Routes(2, 0x000000000220, 0x020000000002, 1, 0x000000000110, 0x020000000001)


def ip6(text: str) -> int:
    return int(ipaddress.IPv6Address(text))


def session(proto6: int, sport: int, dport: int) -> Session:
    key = (ip6(H1_6), ip6(OUT1_64), proto6, sport, dport)
    address = int(ipaddress.IPv4Address(PUBLIC))
    return Session(
        id=1,
        npm="npm1",
        key=key,
        reply=reply_key(key, pc.NAT_64, address, PUBLIC_PORT),
        class_id=0,
        spm_port=0,
        spm_mac=0,
        nat_kind=pc.NAT_64,
        nat_addr=address,
        nat_port=PUBLIC_PORT,
        acl_rule=1,
        ingress_port=1,
        idle_timeout=30.0,
        created_at=dt.datetime.now(dt.UTC),
        nat64=ROUTES,
    )


def inside_packet(l4: Packet, hlim: int, tc: int = 0x28) -> bytes:
    """What h1 sent, as scapy builds it (hop limit as the quote will carry it)."""
    return bytes(IPv6(src=H1_6, dst=OUT1_64, hlim=hlim, tc=tc) / l4)


def outside_packet(l4: Packet, ttl: int, tos: int = 0x28) -> bytes:
    """What the same packet left the gateway as (RFC 7915 section 5.1), checksums afresh."""
    return bytes(IP(src=PUBLIC, dst=OUT1, ttl=ttl, tos=tos, id=0, flags="DF") / l4)


def error_frame(icmp: Packet, quoted: bytes, ttl: int = 60, vlan: int | None = None) -> bytes:
    frame: Packet = Ether(src=OUT1_MAC, dst=GW_OUT_MAC)
    if vlan is not None:
        frame = frame / Dot1Q(vlan=vlan)
    return bytes(frame / IP(src=ROUTER, dst=PUBLIC, ttl=ttl, tos=0xC0) / icmp / quoted)


def expected(icmp6: Packet, quoted: bytes, hlim: int = 59, vlan: int | None = None) -> bytes:
    frame: Packet = Ether(src=GW_IN_MAC, dst=H1_MAC)
    if vlan is not None:
        frame = frame / Dot1Q(vlan=vlan)
    return bytes(frame / IPv6(src=ROUTER_64, dst=H1_6, hlim=hlim, tc=0xC0) / icmp6 / quoted)


TCP_SEGMENT = TCP(sport=40000, dport=80, flags="S", seq=1000, window=8192)
TCP_OUT = TCP(sport=PUBLIC_PORT, dport=80, flags="S", seq=1000, window=8192)


def test_a_fragmentation_needed_becomes_a_packet_too_big_quoting_what_the_host_sent() -> None:
    """MTU 1400 becomes 1420; the quote is h1's SYN exactly (port, checksum, header), with the
    TTL it had at the router as its hop limit."""
    payload = b"x" * 300
    quoted = outside_packet(TCP_OUT / payload, ttl=61)
    frame = error_frame(ICMP(type=3, code=4, nexthopmtu=1400), quoted)
    reply, result = translate(frame, session(pc.IP_PROTO_TCP, 40000, 80))
    assert result == "translated"
    want = expected(ICMPv6PacketTooBig(mtu=1420), inside_packet(TCP_SEGMENT / payload, 61))
    assert reply == want


@pytest.mark.parametrize("quote_length", [8, 12, 20])
def test_a_short_quote_is_translated_as_far_as_it_goes(quote_length: int) -> None:
    """RFC 792's 8 bytes of the transport (no TCP checksum in them) up to 20: the quote's bytes
    are h1's as far as the quote goes, the port restored; where the quote holds the checksum, it
    is h1's."""
    quoted = outside_packet(TCP_OUT / b"data", ttl=50)[: 20 + quote_length]
    frame = error_frame(ICMP(type=11, code=0), quoted)
    reply, _ = translate(frame, session(pc.IP_PROTO_TCP, 40000, 80))
    inner = inside_packet(TCP_SEGMENT / b"data", 50)[: 40 + quote_length]
    assert reply == expected(ICMPv6TimeExceeded(code=0), inner)


def test_a_port_unreachable_for_udp() -> None:
    udp_out = UDP(sport=PUBLIC_PORT, dport=53) / b"query"
    frame = error_frame(ICMP(type=3, code=3), outside_packet(udp_out, ttl=63))
    reply, _ = translate(frame, session(pc.IP_PROTO_UDP, 5353, 53))
    inner = inside_packet(UDP(sport=5353, dport=53) / b"query", 63)
    assert reply == expected(ICMPv6DestUnreach(code=4), inner)


def test_an_echo_request_gets_back_its_identifier_and_icmpv6_checksum() -> None:
    """ICMP's checksum has no pseudo-header, ICMPv6's has: the quoted echo's is h1's."""
    echo_out = ICMP(type=8, id=PUBLIC_PORT, seq=7) / b"ping"
    frame = error_frame(ICMP(type=11, code=0), outside_packet(echo_out, ttl=1))
    reply, _ = translate(frame, session(pc.IP_PROTO_ICMPV6, 0x1234, 0))
    inner = inside_packet(ICMPv6EchoRequest(id=0x1234, seq=7, data=b"ping"), 1)
    assert reply == expected(ICMPv6TimeExceeded(code=0), inner)


def test_a_vlan_tag_is_kept_as_the_flow_s_translated_packets_keep_it() -> None:
    frame = error_frame(ICMP(type=3, code=1), outside_packet(TCP_OUT, ttl=60), vlan=7)
    reply, _ = translate(frame, session(pc.IP_PROTO_TCP, 40000, 80))
    assert reply == expected(ICMPv6DestUnreach(code=0), inside_packet(TCP_SEGMENT, 60), vlan=7)


def test_the_error_is_at_most_the_minimum_mtu() -> None:
    quoted = outside_packet(TCP_OUT / (b"y" * 1400), ttl=60)
    frame = error_frame(ICMP(type=3, code=4, nexthopmtu=1300), quoted)
    reply, _ = translate(frame, session(pc.IP_PROTO_TCP, 40000, 80))
    assert reply is not None
    packet = Ether(reply)[IPv6]
    assert len(bytes(packet)) == MIN_MTU
    whole = inside_packet(TCP_SEGMENT / (b"y" * 1400), 60)
    assert reply == expected(ICMPv6PacketTooBig(mtu=1320), whole[: MIN_MTU - 48])


# RFC 7915 section 4.2, written out from its text (not from the module's tables).
RFC_7915_4_2 = [
    ((3, 0), (1, 0, 0)),
    ((3, 1), (1, 0, 0)),
    ((3, 2), (4, 1, 6)),
    ((3, 3), (1, 4, 0)),
    ((3, 5), (1, 0, 0)),
    ((3, 6), (1, 0, 0)),
    ((3, 7), (1, 0, 0)),
    ((3, 8), (1, 0, 0)),
    ((3, 9), (1, 1, 0)),
    ((3, 10), (1, 1, 0)),
    ((3, 11), (1, 0, 0)),
    ((3, 12), (1, 0, 0)),
    ((3, 13), (1, 1, 0)),
    ((3, 14), None),
    ((3, 15), (1, 1, 0)),
    ((3, 16), None),
    ((11, 0), (3, 0, 0)),
    ((11, 1), (3, 1, 0)),
    ((4, 0), None),  # source quench
    ((5, 0), None),  # redirect
    ((12, 1), None),  # missing a required option
]


@pytest.mark.parametrize(("v4", "v6"), RFC_7915_4_2)
def test_types_and_codes_as_section_4_2_says(
    v4: tuple[int, int], v6: tuple[int, int, int] | None
) -> None:
    assert icmpv6_kind(*v4, bytes(4), 1500) == v6


# Figure 3 of RFC 7915: the IPv4 header's byte -> the IPv6 header's, or not translated.
POINTER_FIGURE_3 = {
    0: 0, 1: 1, 2: 4, 3: 4, 4: None, 5: None, 6: None, 7: None, 8: 7, 9: 6, 10: None,
    11: None, 12: 8, 13: 8, 14: 8, 15: 8, 16: 24, 17: 24, 18: 24, 19: 24, 20: None,
}  # fmt: skip


@pytest.mark.parametrize("code", [0, 2])
@pytest.mark.parametrize(("pointer", "mapped"), sorted(POINTER_FIGURE_3.items()))
def test_a_parameter_problem_s_pointer_is_mapped(
    code: int, pointer: int, mapped: int | None
) -> None:
    want = None if mapped is None else (4, 0, mapped)
    assert icmpv6_kind(12, code, bytes([pointer, 0, 0, 0]), 1500) == want


def test_a_fragmentation_needed_without_an_mtu_takes_a_plateau() -> None:
    """RFC 7915 4.2: the largest RFC 1191 plateau below the quoted total length, 1280 at
    least; plus the headers' 20."""
    assert [plateau_mtu(n) for n in (9000, 2002, 1500, 1400)] == [8166, 1492, 1492, 1280]
    assert icmpv6_kind(3, 4, bytes(4), 1500) == (2, 0, 1512)


@pytest.mark.parametrize(
    ("icmp", "ttl", "why"),
    [
        (ICMP(type=4, code=0), 60, "untranslatable"),
        (ICMP(type=3, code=14), 60, "untranslatable"),
        (ICMP(type=3, code=4, nexthopmtu=1400), 1, "ttl_expired"),
    ],
)
def test_what_section_4_2_drops_or_that_expires_here_is_dropped(
    icmp: Packet, ttl: int, why: str
) -> None:
    frame = error_frame(icmp, outside_packet(TCP_OUT, ttl=60), ttl=ttl)
    assert translate(frame, session(pc.IP_PROTO_TCP, 40000, 80)) == (None, why)


def test_a_quote_shorter_than_its_header_and_8_bytes_is_dropped() -> None:
    frame = error_frame(ICMP(type=3, code=1), outside_packet(TCP_OUT, ttl=60)[:27])
    assert translate(frame, session(pc.IP_PROTO_TCP, 40000, 80)) == (None, "truncated")


# -- the switch double --------------------------------------------------------------------------


def test_the_packet_in_leaves_the_inside_port_translated_and_is_counted(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    controller = make_controller(switch, policy=with_nat64(lab))
    syn = bytes(Ether(src=H1_MAC, dst=GW_IN_MAC) / IPv6(src=H1_6, dst=OUT1_64) / TCP_SEGMENT)
    open_nat64(switch, syn)
    quoted = outside_packet(TCP_OUT, ttl=62, tos=0)
    frame = error_frame(ICMP(type=3, code=4, nexthopmtu=1400), quoted)
    meta = packet_in_meta(pc.CPU_REASON_NAT64_ICMP_ERROR, ingress_port=2, acl_rule=0)
    switch.inject_packet_in(frame, meta)
    payload, out_meta = wait_until("the packet-out", lambda: switch.packet_out(0.05))
    assert (out_meta["egress_port"], out_meta["submit_to_ingress"]) == (1, 0)
    inner = inside_packet(TCP_SEGMENT, 62, tc=0)
    assert payload == expected(ICMPv6PacketTooBig(mtu=1420), inner)
    # An error about a flow with no session: nothing sent, counted.
    other = outside_packet(TCP(sport=PUBLIC_PORT + 5, dport=80), ttl=62)
    switch.inject_packet_in(error_frame(ICMP(type=3, code=1), other), meta)
    assert controller.sessions is not None
    counts = controller.sessions.nat64_errors.counts
    wait_until("the count", lambda: counts["no_session"] == 1)
    assert (counts["translated"], switch.packet_out(0.2)) == (1, None)
    metric = controller.metrics.nat64_icmp_errors.labels("npm1", "translated")
    assert metric._value.get() == 1


# -- a real data plane ---------------------------------------------------------------------------


@pytest.mark.needs_root
@pytest.mark.parametrize(
    "real_lab",
    [(("nat:\n  ports: 20000-20009\n", "nat:\n  ports: 20000-20009\n" + NAT64_LINE),)],
    indirect=True,
)
def test_a_router_s_fragmentation_needed_reaches_the_host_as_a_packet_too_big(
    real_lab: Lab,
) -> None:
    """h1's SYN leaves port 2 as IPv4; a router behind it answers with a fragmentation needed
    (MTU 1400) quoting it: h1 gets a packet too big (MTU 1420) from the router's synthesized
    address, quoting its own SYN."""
    sent = Ether(src=H1_MAC, dst=GW_IN_MAC) / IPv6(src=H1_6, dst=OUT1_64, tc=0) / TCP_SEGMENT
    real_lab.wires[1].send(bytes(sent))

    def is_syn4(frame: Ether) -> bool:
        return bool(frame.haslayer(IP) and frame.haslayer(TCP) and frame[TCP].dport == 80)

    seen = real_lab.wires[2].expect(is_syn4)
    left = bytes(seen[IP])
    error = bytes(
        Ether(src=OUT1_MAC, dst=GW_OUT_MAC)
        / IP(src=ROUTER, dst=PUBLIC, ttl=64)
        / ICMP(type=3, code=4, nexthopmtu=1400)
        / left
    )
    real_lab.wires[2].send(error)

    def is_too_big(frame: Ether) -> bool:
        return bool(frame.haslayer(ICMPv6PacketTooBig))

    back = real_lab.wires[1].expect(is_too_big)
    assert (back[Ether].src, back[Ether].dst) == (GW_IN_MAC, H1_MAC)
    assert (back[IPv6].src, back[IPv6].dst, back[IPv6].hlim) == (ROUTER_64, H1_6, 63)
    assert back[ICMPv6PacketTooBig].mtu == 1420
    quoted = bytes(back[ICMPv6PacketTooBig].payload)
    assert quoted == inside_packet(TCP_SEGMENT, seen[IP].ttl, tc=0)
    copy = Ether(bytes(back))
    del copy[ICMPv6PacketTooBig].cksum
    assert Ether(bytes(copy))[ICMPv6PacketTooBig].cksum == back[ICMPv6PacketTooBig].cksum
