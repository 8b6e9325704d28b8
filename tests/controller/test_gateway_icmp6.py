"""What the CPM answers for the gateway over IPv6 (controller.gateway_icmp6, RFC 4443): the time
exceeded for a packet whose hop limit ran out, the destination unreachable for one no route
takes, the echo reply to a ping of a gateway address: bytes against scapy's, checksums as scapy
computes them over the pseudo-header, the 1280-byte bound, the cases RFC 4443 2.4 (e) forbids an
answer for, and the packet-in -> packet-out path through the switch double."""

from __future__ import annotations

import ipaddress
from typing import Any

from scapy.layers.inet import TCP, UDP
from scapy.layers.inet6 import (
    ICMPv6DestUnreach,
    ICMPv6EchoReply,
    ICMPv6EchoRequest,
    ICMPv6PacketTooBig,
    ICMPv6TimeExceeded,
    IPv6,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
)
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Packet

from controller.gateway_icmp import GatewayIcmp
from controller.gateway_icmp6 import (
    MIN_MTU,
    echo6_reply,
    icmpv6_message,
    time_exceeded6,
    unreachable6,
)
from controller.policy import load_policy
from opengate import p4constants as pc
from tests.controller.conftest import DATA, ControllerFactory, wait_until
from tests.controller.flows import GW_IN_MAC, packet_in_meta
from tests.switch_double import SwitchDouble

H1_6, OUT1_6, GW_IN6 = "2001:db8:1::10", "2001:db8:2::20", "2001:db8:1::1"
H1_MAC = "00:00:00:00:01:10"
MAC = int(GW_IN_MAC.replace(":", ""), 16)
ADDRESS = int(ipaddress.IPv6Address(GW_IN6))


def probe6(hlim: int = 1, payload: bytes = b"traceroute probe", **ip: Any) -> Packet:
    fields: dict[str, Any] = {"src": H1_6, "dst": OUT1_6, "hlim": hlim, **ip}
    return (
        Ether(src=H1_MAC, dst=GW_IN_MAC) / IPv6(**fields) / UDP(sport=40000, dport=33434) / payload
    )


def expected_error(packet: Packet, quoted: bytes, layer: Packet) -> bytes:
    """The error scapy builds (its checksum computed by scapy) for `packet`."""
    out: Packet = Ether(src=GW_IN_MAC, dst=H1_MAC)
    if Dot1Q in packet:
        out = out / Dot1Q(vlan=packet[Dot1Q].vlan)
    return bytes(out / IPv6(src=GW_IN6, dst=packet[IPv6].src, hlim=64, tc=0xC0) / layer / quoted)


def test_time_exceeded_quotes_the_packet_with_a_pseudo_header_checksum() -> None:
    packet = probe6()
    frame = bytes(packet) + b"\0" * 6  # Ethernet padding is not the packet's
    reply = time_exceeded6(frame, MAC, ADDRESS)
    assert reply == expected_error(packet, bytes(packet[IPv6]), ICMPv6TimeExceeded(code=0))
    parsed = Ether(reply)
    carried = parsed[ICMPv6TimeExceeded].cksum
    del parsed[ICMPv6TimeExceeded].cksum  # scapy computes it again, over the pseudo-header
    assert Ether(bytes(parsed))[ICMPv6TimeExceeded].cksum == carried
    assert (parsed[IPv6].src, parsed[IPv6].dst, parsed[IPv6].nh) == (GW_IN6, H1_6, 58)


def test_unreachable_is_type_1_code_0() -> None:
    packet = probe6(hlim=64)
    reply = unreachable6(bytes(packet), MAC, ADDRESS)
    assert reply == expected_error(packet, bytes(packet[IPv6]), ICMPv6DestUnreach(code=0))


def test_a_vlan_tag_is_kept_and_a_long_packet_is_cut_to_1280_bytes() -> None:
    packet = (
        Ether(src=H1_MAC, dst=GW_IN_MAC)
        / Dot1Q(vlan=10)
        / IPv6(src=H1_6, dst=OUT1_6, hlim=1)
        / TCP(sport=40000, dport=80, flags="PA")
        / (b"x" * 1400)
    )
    reply = time_exceeded6(bytes(packet), MAC, ADDRESS)
    assert reply is not None
    quoted = bytes(packet[IPv6])[: MIN_MTU - 48]
    assert reply == expected_error(packet, quoted, ICMPv6TimeExceeded(code=0))
    assert len(reply) == 18 + MIN_MTU
    assert len(Ether(reply)[IPv6]) == MIN_MTU


def test_no_error_where_rfc_4443_forbids_one() -> None:
    forbidden = [
        # an error about an error (after an extension header too)
        Ether(src=H1_MAC, dst=GW_IN_MAC)
        / IPv6(src=H1_6, dst=OUT1_6, hlim=1)
        / ICMPv6PacketTooBig(),
        Ether(src=H1_MAC, dst=GW_IN_MAC)
        / IPv6(src=H1_6, dst=OUT1_6, hlim=1)
        / IPv6ExtHdrHopByHop()
        / ICMPv6DestUnreach(),
        # a packet to a multicast group, sent as link-layer multicast
        probe6(dst="ff0e::1"),
        Ether(src=H1_MAC, dst="33:33:00:00:00:01") / IPv6(src=H1_6, dst=OUT1_6, hlim=1) / UDP(),
        # from no one host: unspecified, multicast, loopback, the gateway itself
        probe6(src="::"),
        probe6(src="ff02::1"),
        probe6(src="::1"),
        probe6(src=GW_IN6),
        probe6(src="2001:db8:2::1"),
        # a fragment after the first
        Ether(src=H1_MAC, dst=GW_IN_MAC)
        / IPv6(src=H1_6, dst=OUT1_6, hlim=1)
        / IPv6ExtHdrFragment(offset=100, nh=17)
        / b"later",
    ]
    own = {ADDRESS, int(ipaddress.IPv6Address("2001:db8:2::1"))}
    for packet in forbidden:
        assert time_exceeded6(bytes(packet), MAC, ADDRESS, own) is None, packet.summary()
    # a first fragment and an echo request behind a hop-by-hop header do get an error
    first = (
        Ether(src=H1_MAC, dst=GW_IN_MAC)
        / IPv6(src=H1_6, dst=OUT1_6, hlim=1)
        / IPv6ExtHdrFragment(offset=0, m=1, nh=17)
        / UDP()
    )
    assert time_exceeded6(bytes(first), MAC, ADDRESS, own) is not None
    echo = (
        Ether(src=H1_MAC, dst=GW_IN_MAC)
        / IPv6(src=H1_6, dst=OUT1_6, hlim=1)
        / IPv6ExtHdrHopByHop()
        / ICMPv6EchoRequest()
    )
    assert time_exceeded6(bytes(echo), MAC, ADDRESS, own) is not None


def test_echo_reply_from_the_address_pinged() -> None:
    request = (
        Ether(src=H1_MAC, dst=GW_IN_MAC)
        / IPv6(src=H1_6, dst="2001:db8:2::1", hlim=64)
        / ICMPv6EchoRequest(id=0x1234, seq=7, data=b"ping data")
    )
    reply = echo6_reply(bytes(request), MAC)
    wanted = (
        Ether(src=GW_IN_MAC, dst=H1_MAC)
        / IPv6(src="2001:db8:2::1", dst=H1_6, hlim=64)
        / ICMPv6EchoReply(id=0x1234, seq=7, data=b"ping data")
    )
    assert reply == bytes(wanted)
    assert echo6_reply(bytes(probe6()), MAC) is None, "not an echo request"


def test_the_checksum_covers_the_pseudo_header() -> None:
    """icmpv6_message's checksum is scapy's: the same message between other addresses has
    another checksum."""
    one = icmpv6_message(1 << 100, 2 << 100, 129, 0, b"\x00\x01\x00\x02abc")
    other = icmpv6_message(3 << 100, 2 << 100, 129, 0, b"\x00\x01\x00\x02abc")
    assert one[2:4] != other[2:4]
    built = bytes(
        IPv6(src=str(ipaddress.IPv6Address(1 << 100)), dst=str(ipaddress.IPv6Address(2 << 100)))
        / ICMPv6EchoReply(id=1, seq=2, data=b"abc")
    )
    assert built[40:] == one


def test_the_policy_decides_the_answer_and_its_source() -> None:
    policy = load_policy(DATA / "lab.yaml")
    icmp = GatewayIcmp(clock=lambda: 0.0)
    ttl = icmp.answer(policy, "npm1", 1, pc.CPU_REASON_TTL_EXPIRED, bytes(probe6()))
    assert ttl is not None and Ether(ttl)[IPv6].src == GW_IN6
    # no route: from the ingress port's address; a ping of the outside address: its echo reply
    lost = probe6(hlim=64, dst="2001:db8:9::1")
    unreachable = icmp.answer(policy, "npm1", 1, pc.CPU_REASON_NO_ROUTE, bytes(lost))
    assert unreachable is not None and Ether(unreachable)[ICMPv6DestUnreach].code == 0
    ping = (
        Ether(src=H1_MAC, dst=GW_IN_MAC)
        / IPv6(src=H1_6, dst="2001:db8:2::1")
        / ICMPv6EchoRequest(id=5, seq=1)
    )
    echo = icmp.answer(policy, "npm1", 1, pc.CPU_REASON_NO_ROUTE, bytes(ping))
    assert echo is not None and Ether(echo)[IPv6].src == "2001:db8:2::1"
    assert icmp.sent == {"time_exceeded": 1, "unreachable": 1, "echo_reply": 1}
    # a port without an IPv6 address answers nothing
    assert icmp.answer(policy, "npm1", 3, pc.CPU_REASON_TTL_EXPIRED, bytes(probe6())) is None
    assert icmp.not_answered == 1


def test_a_hop_limit_packet_in_is_answered_out_of_its_port(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    controller = make_controller(switch)
    packet = probe6()
    switch.inject_packet_in(bytes(packet), packet_in_meta(pc.CPU_REASON_TTL_EXPIRED))
    payload, meta = wait_until("the packet-out", lambda: switch.packet_out(0.05))
    assert meta == {"egress_port": 1, "submit_to_ingress": 0, "end_flow": 0, "_pad": 0}
    assert payload == expected_error(packet, bytes(packet[IPv6]), ICMPv6TimeExceeded(code=0))
    status = controller.bus.call(controller.status)
    assert status["icmp"]["time_exceeded"] == 1
    assert controller.sessions is not None and controller.sessions.count() == 0, "no session"
