"""What the CPM answers for the gateway (controller.gateway_icmp): the time exceeded for a packet
whose TTL ran out, the destination unreachable for one no route takes, the echo reply to a ping
of the gateway: bytes against scapy's, the cases RFC 1812 forbids an answer for, the rate limit,
and the packet-in -> packet-out path through the switch double."""

from __future__ import annotations

from typing import Any

from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Packet, Raw

from controller.gateway_icmp import (
    BURST,
    MAX_ERROR,
    GatewayIcmp,
    TokenBucket,
    echo_reply,
    icmp_error,
    time_exceeded,
)
from controller.policy import load_policy
from opengate import p4constants as pc
from tests.controller.conftest import DATA, ControllerFactory, wait_until
from tests.controller.flows import GW_IN_MAC, H1, OUT1, packet_in_meta
from tests.switch_double import SwitchDouble

GW_IN = "10.0.1.1"
H1_MAC = "00:00:00:00:01:10"
MAC = int(GW_IN_MAC.replace(":", ""), 16)
ADDRESS = int.from_bytes(bytes(int(b) for b in GW_IN.split(".")), "big")


def probe(ttl: int = 1, payload: bytes = b"traceroute probe", **ip: object) -> Packet:
    fields: dict[str, Any] = {"src": H1, "dst": OUT1, "ttl": ttl, "id": 99, **ip}
    return Ether(src=H1_MAC, dst=GW_IN_MAC) / IP(**fields) / UDP(sport=40000, dport=33434) / payload


def expected(packet: Packet, quoted: bytes, ident: int, kind: int = 11, code: int = 0) -> bytes:
    vlan = [Dot1Q(vlan=packet[Dot1Q].vlan)] if Dot1Q in packet else []
    out: Packet = Ether(src=GW_IN_MAC, dst=H1_MAC)
    for layer in vlan:
        out = out / layer
    return bytes(
        out
        / IP(src=GW_IN, dst=packet[IP].src, ttl=64, id=ident, tos=0xC0)
        / ICMP(type=kind, code=code)
        / Raw(quoted)
    )


def test_time_exceeded_quotes_the_datagram_as_it_arrived() -> None:
    packet = probe()
    frame = bytes(packet) + b"\0" * 6  # Ethernet padding is not the datagram's
    reply = time_exceeded(frame, MAC, ADDRESS, 7)
    assert reply == expected(packet, bytes(packet[IP]), 7)
    parsed = Ether(reply)
    assert parsed[ICMP].type == 11 and parsed[IP].dst == H1


def test_a_vlan_tag_is_kept_and_a_long_datagram_is_cut_to_576_bytes() -> None:
    packet = (
        Ether(src=H1_MAC, dst=GW_IN_MAC)
        / Dot1Q(vlan=10)
        / IP(src=H1, dst=OUT1, ttl=1)
        / TCP(sport=40000, dport=80, flags="PA")
        / (b"x" * 1400)
    )
    reply = time_exceeded(bytes(packet), MAC, ADDRESS, 8)
    assert reply is not None
    assert reply == expected(packet, bytes(packet[IP])[: MAX_ERROR - 28], 8)
    assert len(reply) == 18 + MAX_ERROR


def test_no_answer_where_rfc_1812_forbids_one() -> None:
    error = (
        Ether(src=H1_MAC, dst=GW_IN_MAC)
        / IP(src=H1, dst=OUT1, ttl=1)
        / ICMP(type=3, code=3)
        / bytes(IP(src=OUT1, dst=H1) / UDP())
    )
    echo = Ether(src=H1_MAC, dst=GW_IN_MAC) / IP(src=H1, dst=OUT1, ttl=1) / ICMP(type=8)
    cases = {
        "an ICMP error": bytes(error),
        "a later fragment": bytes(probe(frag=10)),
        "from 0.0.0.0": bytes(probe(src="0.0.0.0")),
        "from a broadcast address": bytes(probe(src="255.255.255.255")),
        "from a multicast address": bytes(probe(src="224.0.0.5")),
        "not IPv4": bytes(Ether(src=H1_MAC, dst=GW_IN_MAC, type=0x86DD) / Raw(b"\0" * 40)),
        "cut short": bytes(probe())[:30],
    }
    for what, frame in cases.items():
        assert time_exceeded(frame, MAC, ADDRESS, 1) is None, what
    assert time_exceeded(bytes(echo), MAC, ADDRESS, 1) is not None, "an echo request is answered"


def test_unreachable_says_host_inside_a_network_of_the_gateway_and_net_elsewhere() -> None:
    policy = load_policy(DATA / "lab.yaml")
    icmp = GatewayIcmp()
    no_route = pc.CPU_REASON_NO_ROUTE
    for dst, code in (("10.0.1.77", 1), ("192.0.2.9", 0)):
        packet = probe(dst=dst)
        reply = icmp.answer(policy, "npm1", 1, no_route, bytes(packet))
        assert reply is not None, dst
        assert reply == expected(packet, bytes(packet[IP]), Ether(reply)[IP].id, 3, code), dst
    assert icmp.sent["unreachable"] == 2


def test_a_ping_of_the_gateway_is_answered_and_nothing_else_to_it() -> None:
    policy = load_policy(DATA / "lab.yaml")
    ping = (
        Ether(src=H1_MAC, dst=GW_IN_MAC)
        / IP(src=H1, dst=GW_IN, id=5)
        / ICMP(type=8, id=0x77, seq=3)
        / b"are you there"
    )
    reply = echo_reply(bytes(ping), MAC, 9)
    want = (
        Ether(src=GW_IN_MAC, dst=H1_MAC)
        / IP(src=GW_IN, dst=H1, ttl=64, id=9)
        / ICMP(type=0, id=0x77, seq=3)
        / b"are you there"
    )
    assert reply == bytes(want)
    icmp = GatewayIcmp()
    answer = icmp.answer(policy, "npm1", 1, pc.CPU_REASON_NO_ROUTE, bytes(ping))
    assert answer is not None
    want[IP].id = Ether(answer)[IP].id
    assert answer == bytes(want)
    to_gateway = probe(dst=GW_IN)  # UDP to the gateway: no answer (it serves nothing)
    assert icmp.answer(policy, "npm1", 1, pc.CPU_REASON_NO_ROUTE, bytes(to_gateway)) is None
    assert icmp.sent["echo_reply"] == 1 and icmp.not_answered == 1
    assert icmp_error(bytes(probe(src=GW_IN)), MAC, ADDRESS, 1, 3) is None, "not to itself"


def test_answers_are_rate_limited_per_npm() -> None:
    policy = load_policy(DATA / "lab.yaml")
    icmp = GatewayIcmp(clock=lambda: 100.0)  # time stands still: no token comes back
    frame = bytes(probe())
    ttl = pc.CPU_REASON_TTL_EXPIRED
    answers = [icmp.answer(policy, "npm1", 1, ttl, frame) for _ in range(int(BURST) + 10)]
    assert sum(a is not None for a in answers) == int(BURST)
    assert (icmp.sent["time_exceeded"], icmp.rate_limited) == (BURST, 10)
    assert icmp.answer(policy, "npm2", 1, ttl, frame) is not None, "each NPM has its own budget"
    assert icmp.answer(policy, "npm1", 99, ttl, frame) is None, "no such port"
    assert icmp.not_answered == 1
    bucket = TokenBucket(rate=10.0, burst=1.0)
    assert bucket.take(now=bucket.stamp) and not bucket.take(now=bucket.stamp + 0.05)
    assert bucket.take(now=bucket.stamp + 0.1)


def test_a_ttl_expired_packet_in_is_answered_out_of_its_port(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    controller = make_controller(switch)
    packet = probe()
    switch.inject_packet_in(bytes(packet), packet_in_meta(pc.CPU_REASON_TTL_EXPIRED))
    payload, meta = wait_until("the packet-out", lambda: switch.packet_out(0.05))
    assert meta == {"egress_port": 1, "submit_to_ingress": 0, "end_flow": 0, "_pad": 0}
    assert Ether(payload)[IP].src == GW_IN
    assert bytes(Ether(payload)[ICMP].payload) == bytes(packet[IP])
    assert payload == expected(packet, bytes(packet[IP]), Ether(payload)[IP].id)
    status = controller.bus.call(controller.status)
    assert status["icmp"] == {
        "time_exceeded": 1,
        "unreachable": 0,
        "echo_reply": 0,
        "not_answered": 0,
        "rate_limited": 0,
    }
    assert controller.sessions is not None and controller.sessions.count() == 0, "no session"
