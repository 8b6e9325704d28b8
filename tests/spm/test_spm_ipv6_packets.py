"""IPv6 on the SPM's per-packet path: decoding (extension headers, fragments, truncated chains,
ICMPv6; exact bytes built with scapy), Community ID against the specification's vectors, the
dispatcher, flows and TCP reassembly keyed on IPv6 addresses."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest
from scapy.layers.inet import TCP, UDP
from scapy.layers.inet6 import (
    ICMPv6EchoReply,
    ICMPv6EchoRequest,
    ICMPv6ND_NS,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
)
from scapy.layers.ipsec import AH
from scapy.packet import Packet, Raw

from opengate.snort.rules import parse_rule
from spm.community_id import community_id_str
from spm.config import SpmConfig
from spm.dispatch import FlowDispatcher
from spm.ips.engine import BuiltinEngine, RuleSet
from spm.packet import ACK, PSH, SYN, decode, flow_id
from spm.verdict import Alert, Verdict
from spm.worker import Worker
from tests.spm.spm_packets import TcpConversation, udp

A, B = "2001:db8:1::10", "2001:db8:2::80"


def _packed(text: str) -> bytes:
    return ipaddress.IPv6Address(text).packed


# --- decoding -----------------------------------------------------------------------------------


def test_hop_by_hop_routing_and_destination_options_are_walked_to_tcp() -> None:
    payload = b"GET / HTTP/1.1\r\n\r\n"
    wire = bytes(
        IPv6(src=A, dst=B, hlim=17)
        / IPv6ExtHdrHopByHop()
        / IPv6ExtHdrRouting(addresses=[B], segleft=0)
        / IPv6ExtHdrDestOpt()
        / TCP(sport=40000, dport=80, flags="PA", seq=1234, ack=99, window=512)
        / Raw(payload)
    )
    pkt = decode(wire)
    assert pkt.error is None
    assert (pkt.version, pkt.src, pkt.dst, pkt.ttl) == (6, _packed(A), _packed(B), 17)
    assert (pkt.proto, pkt.sport, pkt.dport, pkt.seq, pkt.ack) == (6, 40000, 80, 1234, 99)
    assert (pkt.tcp_flags, pkt.window, pkt.fragment) == (PSH | ACK, 512, False)
    assert pkt.payload == payload
    assert pkt.raw == wire


def test_authentication_header_esp_and_no_next_header() -> None:
    ah = decode(
        bytes(
            IPv6(src=A, dst=B) / AH(nh=17, payloadlen=1, spi=7) / UDP(sport=5, dport=53) / Raw(b"q")
        )
    )
    assert (ah.error, ah.proto, ah.sport, ah.dport, ah.payload) == (None, 17, 5, 53, b"q")
    esp_body = bytes(range(40))
    esp = decode(bytes(IPv6(src=A, dst=B, nh=50) / Raw(esp_body)))
    assert (esp.error, esp.proto, esp.has_ports, esp.payload) == (None, 50, False, esp_body)
    none = decode(bytes(IPv6(src=A, dst=B) / IPv6ExtHdrDestOpt(nh=59)))
    assert (none.error, none.proto, none.payload) == (None, 59, b"")


def test_first_fragment_decodes_its_l4_header_though_the_datagram_goes_on() -> None:
    datagram = UDP(sport=5353, dport=53) / Raw(b"a" * 3000)
    whole = bytes(datagram)  # UDP length 3008: the fragment holds only its start
    wire = bytes(
        IPv6(src=A, dst=B) / IPv6ExtHdrFragment(nh=17, offset=0, m=1, id=0xABCDEF) / whole[:1232]
    )
    pkt = decode(wire)
    assert pkt.error is None
    assert (pkt.fragment, pkt.first_fragment, pkt.ip_id) == (True, True, 0xABCDEF)
    assert (pkt.proto, pkt.sport, pkt.dport, pkt.payload) == (17, 5353, 53, whole[8:1232])


def test_a_later_fragment_has_no_l4_header_and_is_accepted_uninspected() -> None:
    wire = bytes(
        IPv6(src=A, dst=B)
        / IPv6ExtHdrFragment(nh=6, offset=154, m=0, id=77)
        / Raw(b"\x00\x50\x9c\x40" + b"x" * 60)  # bytes that would look like ports
    )
    pkt = decode(wire)
    assert pkt.error is None
    assert (pkt.fragment, pkt.first_fragment, pkt.ip_id, pkt.proto) == (True, False, 77, 6)
    assert (pkt.has_ports, pkt.sport, pkt.dport, pkt.payload) == (False, 0, 0, b"")
    w = Worker(SpmConfig(name="t", interface="eth0", tags=(1,)))
    assert w.process(wire) is Verdict.ACCEPT
    assert w.counters.fragments_uninspected == 1 and len(w.flows) == 0


def test_an_atomic_fragment_is_the_whole_datagram() -> None:
    wire = bytes(
        IPv6(src=A, dst=B)
        / IPv6ExtHdrFragment(nh=6, offset=0, m=0, id=5)
        / TCP(sport=1, dport=2, flags="S")
    )
    pkt = decode(wire)
    assert (pkt.error, pkt.fragment, pkt.ip_id, pkt.sport, pkt.dport) == (None, False, 5, 1, 2)
    assert pkt.tcp_flags == SYN


@pytest.mark.parametrize(
    ("cut", "error"),
    [
        (39, "ipv6_truncated"),  # not even the fixed header
        (44, "ipv6_ext_truncated"),  # inside the hop-by-hop header
        (60, "ipv6_ext_truncated"),  # inside the routing header, which says it is 24 bytes
        (80, "tcp_truncated"),  # the chain is whole, the TCP header is cut
    ],
)
def test_truncated_chains_are_errors_not_exceptions(cut: int, error: str) -> None:
    wire = bytes(
        IPv6(src=A, dst=B)
        / IPv6ExtHdrHopByHop()
        / IPv6ExtHdrRouting(addresses=[B], segleft=0)
        / TCP(sport=1, dport=2)
    )
    assert len(wire) == 40 + 8 + 24 + 20
    head = bytearray(wire[:cut])
    if cut >= 40:  # a payload length that fits what is left: truncated inside, not snapped
        head[4:6] = (cut - 40).to_bytes(2, "big")
    pkt = decode(bytes(head))
    assert pkt.error == error


def test_a_snapped_packet_is_decoded_as_far_as_it_goes_and_said_truncated() -> None:
    wire = bytes(IPv6(src=A, dst=B) / TCP(sport=1, dport=2) / Raw(b"x" * 100))
    pkt = decode(wire[:70])  # the payload length says 120 bytes follow the header
    assert (pkt.error, pkt.sport, pkt.dport, pkt.payload) == ("ipv6_truncated", 1, 2, b"x" * 10)


def test_a_chain_longer_than_eight_headers_and_a_zero_payload_length_are_refused() -> None:
    chain = IPv6(src=A, dst=B)
    for _ in range(9):
        chain = chain / IPv6ExtHdrDestOpt()
    assert decode(bytes(chain / UDP())).error == "ipv6_too_many_ext"
    jumbo = bytearray(bytes(IPv6(src=A, dst=B) / UDP()))
    jumbo[4:6] = b"\0\0"
    assert decode(bytes(jumbo)).error == "ipv6_bad_length"


def test_icmpv6_echo_and_neighbour_solicitation() -> None:
    request = bytes(IPv6(src=A, dst=B) / ICMPv6EchoRequest(id=0x1234, seq=7, data=b"ping"))
    reply = bytes(IPv6(src=B, dst=A) / ICMPv6EchoReply(id=0x1234, seq=7, data=b"ping"))
    pkt = decode(request)
    assert (pkt.error, pkt.proto, pkt.icmp_type, pkt.icmp_code) == (None, 58, 128, 0)
    assert (pkt.icmp_id, pkt.icmp_seq, pkt.payload, pkt.has_ports) == (0x1234, 7, b"ping", False)
    assert pkt.community_id() == decode(reply).community_id()
    assert pkt.community_id() == community_id_str(58, A, B, 128, 0)
    ns = decode(bytes(IPv6(src=A, dst="ff02::1:ff00:80") / ICMPv6ND_NS(tgt=B)))
    assert (ns.icmp_type, ns.icmp_code, ns.payload[:16]) == (135, 0, _packed(B))


# --- Community ID -------------------------------------------------------------------------------


def _vectors(shared_data: Path) -> list[dict[str, object]]:
    """The spec's IPv6 vectors (../shared/data/community-id/baseline_deflt.json)."""
    records = json.loads((shared_data / "community-id" / "baseline_deflt.json").read_text())
    v6 = [r for r in records if ":" in str(r["saddr"])]
    assert {r["proto"] for r in v6} == {6, 58}  # TCP and ICMPv6 flows
    return v6


def test_community_id_of_ipv6_packets_matches_the_spec_vectors(shared_data: Path) -> None:
    """Each IPv6 vector as a packet, plain (the dispatcher's fast path) and behind a
    destination options header (`decode`): both give the vector's id, in either direction."""
    for rec in _vectors(shared_data):
        src, dst = str(rec["saddr"]), str(rec["daddr"])
        sport, dport = int(str(rec["sport"])), int(str(rec["dport"]))
        l4: Packet
        if rec["proto"] == 6:
            l4 = TCP(sport=sport, dport=dport, flags="S")
        else:  # for ICMPv6 the vector's ports are type and code
            l4 = ICMPv6EchoRequest(type=sport, code=dport)
        for wire in (
            bytes(IPv6(src=src, dst=dst) / l4),
            bytes(IPv6(src=src, dst=dst) / IPv6ExtHdrDestOpt() / l4),
        ):
            cid, s, d = flow_id(wire)
            assert (cid, s, d) == (rec["communityid"], _packed(src), _packed(dst)), rec
            assert decode(wire).community_id() == rec["communityid"]


def test_both_directions_of_an_ipv6_flow_share_the_community_id() -> None:
    conv = TcpConversation(client=A, server=B)
    ids = {flow_id(p)[0] for p in conv.handshake() + conv.send(False, b"x")}
    assert ids == {community_id_str(6, A, B, conv.cport, conv.sport)}


# --- dispatch, flows, reassembly ----------------------------------------------------------------


def _v6_pair(i: int) -> tuple[bytes, bytes]:
    host = f"2001:db8:1::{i + 1:x}"
    return udp(host, "2001:db8::53", 1000 + i, 53, b"q"), udp(
        "2001:db8::53", host, 53, 1000 + i, b"r"
    )


@pytest.mark.parametrize("scheme", ["hash2", "hash5", "jsq"])
def test_both_directions_of_ipv6_flows_go_to_the_same_worker(scheme: str) -> None:
    d = FlowDispatcher(4, scheme)
    used = set()
    for i in range(200):
        picks = {d.pick(*flow_id(p), now=0.0) for p in _v6_pair(i)}
        assert len(picks) == 1
        used |= picks
    assert used == {0, 1, 2, 3}


def test_hash2_puts_all_flows_between_two_ipv6_hosts_on_one_worker() -> None:
    d = FlowDispatcher(8, "hash2")
    picks = {d.pick(*flow_id(udp(A, B, port, 53, b"q")), now=0.0) for port in range(1000, 1100)} | {
        d.pick(*flow_id(udp(B, A, 53, port, b"r")), now=0.0) for port in range(1000, 1100)
    }
    assert len(picks) == 1


def test_an_ipv6_tcp_flow_is_one_flow_whose_stream_is_reassembled_out_of_order() -> None:
    """Both directions meet in one flow (client and server the IPv6 hosts); the request comes
    in three segments, the last two swapped, and the rule's content spans them."""
    rule = parse_rule(
        'alert tcp any any -> any 9000 (msg:"split"; flow:to_server,established; '
        'content:"user|3a| evil-scanner"; sid:600001;)'
    )
    rules = RuleSet([rule], {})
    w = Worker(SpmConfig(name="t", interface="eth0", tags=(1,)), BuiltinEngine(rules))
    conv = TcpConversation(client=A, server=B, sport=9000)
    pkts = conv.handshake()
    request = b"HELLO 1\r\nuser: evil-scanner\r\nsession: 42\r\n"
    first, second, third = conv.send(True, request, mss=14)
    verdicts = [w.process(p) for p in [*pkts, first, third, second]]
    assert verdicts == [Verdict.ACCEPT] * 6
    assert len(w.flows) == 1
    [flow] = list(w.flows)
    assert (flow.client, flow.server, flow.client_port) == (_packed(A), _packed(B), conv.cport)
    assert flow.dirs[0].stream is not None and flow.dirs[0].stream.counters.buffered == 1
    [alert] = [e for e in w.events if isinstance(e, Alert)]
    assert alert.sid == 600001 and (alert.flow.src, alert.flow.dst) == (A, B)
    assert alert.community_id == community_id_str(6, A, B, conv.cport, 9000)
    for p in conv.send(False, b"OK 1\r\n"):
        assert w.process(p) is Verdict.ACCEPT
    assert len(w.flows) == 1 and flow.dirs[1].packets == 2  # the SYN-ACK and the answer
