"""The controller driving a real data plane (BMv2 or the built-in switch, as TARGET selects) over
veths: NAT sessions set up through packet-in and re-injection, sessions from digests, idle
timeouts and TCP RST from the switch itself."""

from __future__ import annotations

from ipaddress import IPv4Address

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether

from controller.classifier import acl_rules, ids_rules
from controller.hsm.update import flip_entry
from opengate import p4constants as pc
from opengate.target import shared_data_dir
from tests.controller.conftest import wait_until
from tests.controller.flows import GW_IN_MAC, GW_OUT, GW_OUT_MAC, H1, H2, OUT1
from tests.controller.real_switch import H1_MAC, H2_MAC, OUT1_MAC, Lab
from tests.hsm.test_equivalence import _packets, assert_same_as_linear

pytestmark = [pytest.mark.needs_root, pytest.mark.slow]


def _udp_out() -> Ether:
    """h1:5000 -> out1:7777, as h1 sends it to the gateway."""
    return (
        Ether(src=H1_MAC, dst=GW_IN_MAC)
        / IP(src=H1, dst=OUT1, ttl=64)
        / UDP(sport=5000, dport=7777)
        / b"hello"
    )


def _answer_reaches_h1(lab: Lab, nat_port: int) -> None:
    """out1 answers the masqueraded flow on `nat_port`; h1 gets it un-NATed."""
    back = (
        Ether(src=OUT1_MAC, dst=GW_OUT_MAC)
        / IP(src=OUT1, dst=GW_OUT)
        / UDP(sport=7777, dport=nat_port)
        / b"world"
    )
    lab.wires[2].send(bytes(back))
    reply = lab.wires[1].expect(lambda f: f.haslayer(UDP) and f[UDP].sport == 7777)
    assert (reply[IP].dst, reply[UDP].dport, reply[Ether].dst) == (H1, 5000, H1_MAC)


def _count(lab: Lab) -> int:
    sessions = lab.controller.sessions
    assert sessions is not None
    result: int = lab.controller.bus.call(sessions.count)
    return result


def test_masquerade_session_through_packet_in_and_reinjection(real_lab: Lab) -> None:
    """The opening packet goes to the CPM, which allocates the binding, installs both
    directions and re-injects it: it leaves masqueraded, and the reply comes back un-NATed."""
    out = _udp_out()
    real_lab.wires[1].send(bytes(out))
    seen = real_lab.wires[2].expect(lambda f: f.haslayer(UDP) and f[UDP].dport == 7777)
    assert (seen[Ether].src, seen[Ether].dst) == (GW_OUT_MAC, OUT1_MAC)
    assert (seen[IP].src, seen[IP].dst, seen[IP].ttl) == (GW_OUT, OUT1, 63)
    nat_port = seen[UDP].sport
    assert 20000 <= nat_port <= 20009
    assert bytes(seen[UDP].payload)[:5] == b"hello"
    _answer_reaches_h1(real_lab, nat_port)
    assert _count(real_lab) == 1


DP_BASE = 30000


@pytest.mark.parametrize(
    "real_lab", [(("data_plane_ports: off", f"data_plane_ports: {DP_BASE}"),)], indirect=True
)
def test_masquerade_by_the_data_plane_then_installed(real_lab: Lab) -> None:
    """With data-plane masquerading the opening packet leaves at once, on a port of the NPM's
    block (no packet-in); the reply comes back un-NATed; the CPM learns the binding from the
    digest, installs the entries with it and records it in the database; later packets keep
    the port."""
    out = _udp_out()
    real_lab.wires[1].send(bytes(out))
    seen = real_lab.wires[2].expect(lambda f: f.haslayer(UDP) and f[UDP].dport == 7777)
    assert (seen[IP].src, seen[IP].dst, seen[IP].ttl) == (GW_OUT, OUT1, 63)
    nat_port = seen[UDP].sport
    assert DP_BASE <= nat_port < DP_BASE + 16384
    _answer_reaches_h1(real_lab, nat_port)
    sessions = real_lab.controller.sessions
    assert sessions is not None
    wait_until("the session installed", lambda: _count(real_lab) == 1, timeout=5)
    key = (int(IPv4Address(H1)), int(IPv4Address(OUT1)), 17, 5000, 7777)
    session = real_lab.controller.bus.call(lambda: sessions.find(None, key))
    assert session is not None
    assert (session.nat_kind, IPv4Address(session.nat_addr), session.nat_port) == (
        pc.NAT_REWRITE_SRC,
        IPv4Address(GW_OUT),
        nat_port,
    )
    assert sessions.stats.packet_outs == 0, "the CPM path (packet-in, re-injection) was taken"
    real_lab.wires[1].send(bytes(out))
    again = real_lab.wires[2].expect(lambda f: f.haslayer(UDP) and f[UDP].dport == 7777)
    assert again[UDP].sport == nat_port
    real_lab.controller.db_writer.flush()
    (row,) = real_lab.controller.db.sessions()
    assert (row["nat_kind"], row["nat_port"]) == (pc.NAT_REWRITE_SRC, nat_port)


def test_digest_session_ages_out_when_idle(real_lab: Lab) -> None:
    """A flow that needs no NAT is forwarded at once and installed from the digest; with no
    traffic it ages out (idle timeout 1 s for UDP in this policy)."""
    frame = Ether(src=H1_MAC, dst=GW_IN_MAC) / IP(src=H1, dst=H2) / UDP(sport=6000, dport=9999)
    real_lab.wires[1].send(bytes(frame))
    seen = real_lab.wires[1].expect(lambda f: f.haslayer(UDP) and f[UDP].dport == 9999)
    assert seen[Ether].dst == H2_MAC
    wait_until("the session installed", lambda: _count(real_lab) == 1, timeout=5)
    wait_until("the session aged out", lambda: _count(real_lab) == 0, timeout=10)
    real_lab.controller.db_writer.flush()
    assert real_lab.controller.db.session_count() == 0


def test_tcp_rst_removes_the_session(real_lab: Lab) -> None:
    syn = (
        Ether(src=H1_MAC, dst=GW_IN_MAC)
        / IP(src=H1, dst=H2)
        / TCP(sport=40000, dport=9000, flags="S", seq=1)
    )
    real_lab.wires[1].send(bytes(syn))
    wait_until("the session installed", lambda: _count(real_lab) == 1, timeout=5)
    rst = (
        Ether(src=H1_MAC, dst=GW_IN_MAC)
        / IP(src=H1, dst=H2)
        / TCP(sport=40000, dport=9000, flags="R", seq=2)
    )
    real_lab.wires[1].send(bytes(rst))
    wait_until("the session removed", lambda: _count(real_lab) == 0, timeout=5)


CLASSBENCH = shared_data_dir() / "classbench"
WEB_FORWARD = (
    "    - {name: web-forward, dst: 198.51.100.1, proto: tcp, dport: 8080, action: permit}\n"
)


def _with_classbench(name: str) -> str:
    return WEB_FORWARD + f"  classbench: {{file: {CLASSBENCH / name}, action: permit}}\n"


def _switch_classifies_like_linear_search(lab: Lab) -> None:
    """The classification tables read back from the switch, walked, against first-match
    linear search over the running policy's rules."""
    policy = lab.controller.policy
    assert policy is not None
    active, entries = lab.controller.npms["npm1"].read_classification()
    assert active == lab.controller.states["npm1"].classifier.active
    acl, ids = acl_rules(policy), ids_rules(policy)
    packets = _packets(acl, ids, 300)[:3000]
    assert assert_same_as_linear([*entries, flip_entry(active)], acl, ids, packets) == len(packets)


@pytest.mark.skipif(not CLASSBENCH.is_dir(), reason=f"ClassBench sets missing: {CLASSBENCH}")
@pytest.mark.parametrize("real_lab", [((WEB_FORWARD, _with_classbench("fw1_1k")),)], indirect=True)
def test_a_hybrid_rule_set_is_installed_and_classifies_exactly(real_lab: Lab) -> None:
    """The lab policy plus ClassBench's fw1_1k, whose cross products do not fit one partition:
    the controller installs it hybrid (two ACL partitions, about 640,000 entries, into the idle
    bank, then the flip) on the real switch, which then holds exactly that classifier. (Updates
    between hybrids: tests/hsm/test_hybrid.py, on the planner's writes.)"""
    classifier = real_lab.controller.states["npm1"].classifier
    compiled = classifier.content[classifier.active]
    assert compiled is not None and compiled.stats.partition_terms[0] > 0
    _switch_classifies_like_linear_search(real_lab)
