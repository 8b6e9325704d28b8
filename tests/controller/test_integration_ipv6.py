"""The controller running IPv6 on a real data plane (the target TARGET selects, over veths, as
tests/controller/test_integration.py drives it, on the lab policy, which is dual-stack): an
opening packet from inside goes to the CPM, which installs both directions in session_v6 and
sends it back through the pipeline: it leaves the outside port routed; the reply comes back
through its session; inbound traffic that no session admits is dropped; FIN ends the session; the
gateway answers a ping of its address and a hop limit that runs out with ICMPv6 (exact bytes,
checksums verified by scapy); the neighbour advertisements the CPM wrote answer for the gateway."""

from __future__ import annotations

import select
from collections.abc import Callable

import pytest
from finsy.proto import p4r
from scapy.layers.inet import TCP
from scapy.layers.inet6 import (
    ICMPv6EchoReply,
    ICMPv6EchoRequest,
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    ICMPv6NDOptDstLLAddr,
    ICMPv6NDOptSrcLLAddr,
    ICMPv6TimeExceeded,
    IPv6,
)
from scapy.layers.l2 import Ether
from scapy.packet import Packet

from controller import events as ev
from opengate import p4constants as pc
from tests.controller.conftest import wait_until
from tests.controller.flows import GW_IN_MAC, GW_OUT_MAC
from tests.controller.real_switch import H1_MAC, OUT1_MAC, Lab, Wire

pytestmark = [pytest.mark.needs_root, pytest.mark.slow]

H1_6, OUT1_6 = "2001:db8:1::10", "2001:db8:2::20"
GW_IN6 = "2001:db8:1::1"
# An inbound rule that lets an ACK through the ACL, so that what drops it is the missing
# session (without it the default verdict drops inbound traffic first, as ACL_DENY).
INBOUND_ACKS = (
    (
        "    - {name: lan-out, src: inside, action: permit}",
        "    - {name: lan-out, src: inside, action: permit}\n"
        "    - {name: acks-in, src: outside, dst: inside, proto: tcp, dport: 40100, "
        "action: permit}",
    ),
)


def _tcp(src: str, dst: str, sport: int, dport: int, flags: str, *, inside: bool) -> bytes:
    macs = (H1_MAC, GW_IN_MAC) if inside else (OUT1_MAC, GW_OUT_MAC)
    return bytes(
        Ether(src=macs[0], dst=macs[1])
        / IPv6(src=src, dst=dst, hlim=64)
        / TCP(sport=sport, dport=dport, flags=flags, seq=1000)
    )


def _is_tcp6(frame: Ether, dport: int) -> bool:
    return bool(frame.haslayer(IPv6) and frame.haslayer(TCP) and frame[TCP].dport == dport)


def _sessions(lab: Lab) -> int:
    sessions = lab.controller.sessions
    assert sessions is not None
    count: int = lab.controller.bus.call(sessions.count)
    return count


def _drops(lab: Lab, reason: str) -> int:
    counters = lab.controller.bus.call(lab.controller.npm_counters)
    cell = counters["npm1"].drops.get(reason)
    return int(cell.packets) if cell is not None else 0


def _v6_entries(lab: Lab) -> int:
    npm = lab.controller.npms["npm1"]
    table = npm.schema.tables.get(pc.T_SESSION_V6)
    return len(npm.read([p4r.Entity(table_entry=p4r.TableEntry(table_id=table.id))]))


def _nothing_arrives(wire: Wire) -> bool:
    """No frame is waiting on the wire (checked after a counter showed the packet dropped)."""
    ready, _, _ = select.select([wire.sock], [], [], 0)
    return not ready


def _checksum_verified(frame: Packet, layer: type[Packet]) -> None:
    """scapy computes the ICMPv6 checksum over the pseudo-header again: the same."""
    carried = frame[layer].cksum
    copy = Ether(bytes(frame))
    del copy[layer].cksum
    assert Ether(bytes(copy))[layer].cksum == carried


def test_an_outbound_syn_gets_its_session_and_leaves_routed(real_lab: Lab) -> None:
    """The SYN (ssh: no IDS rule classifies it, so no SPM) goes to the CPM, which installs both
    directions and sends it back through the pipeline: it leaves port 2 with the hop limit one
    less and the MACs rewritten; the SYN-ACK comes back to h1 through the reply entry."""
    syn = _tcp(H1_6, OUT1_6, 40000, 22, "S", inside=True)
    real_lab.wires[1].send(syn)
    seen = real_lab.wires[2].expect(lambda f: _is_tcp6(f, 22))
    assert (seen[Ether].src, seen[Ether].dst) == (GW_OUT_MAC, OUT1_MAC)
    assert (seen[IPv6].src, seen[IPv6].dst, seen[IPv6].hlim) == (H1_6, OUT1_6, 63)
    assert (seen[TCP].sport, seen[TCP].flags) == (40000, "S")
    assert _sessions(real_lab) == 1 and _v6_entries(real_lab) == 2
    sessions = real_lab.controller.sessions
    assert sessions is not None
    assert sessions.stats.packet_outs == 1, "sent back through the pipeline once"
    reply = _tcp(OUT1_6, H1_6, 22, 40000, "SA", inside=False)
    real_lab.wires[2].send(reply)
    back = real_lab.wires[1].expect(lambda f: _is_tcp6(f, 40000))
    assert (back[Ether].src, back[Ether].dst, back[IPv6].hlim) == (GW_IN_MAC, H1_MAC, 63)
    assert back[TCP].flags == "SA"
    real_lab.controller.db_writer.flush()
    (row,) = real_lab.controller.db.sessions()
    assert (row["src6"], row["dst6"], row["sport"], row["dport"]) == (H1_6, OUT1_6, 40000, 22)


@pytest.mark.parametrize("real_lab", [INBOUND_ACKS], indirect=True)
def test_inbound_traffic_no_session_admits_is_dropped(real_lab: Lab) -> None:
    """An unsolicited inbound SYN: the default verdict drops it (ACL_DENY, RFC 6092); an
    inbound ACK that a rule lets through the ACL: no session admits it (NO_SESSION). Neither
    reaches h1, and no session is made."""
    denied, no_session = _drops(real_lab, "ACL_DENY"), _drops(real_lab, "NO_SESSION")
    real_lab.wires[2].send(_tcp(OUT1_6, H1_6, 5555, 22, "S", inside=False))
    wait_until("the SYN dropped", lambda: _drops(real_lab, "ACL_DENY") == denied + 1)
    real_lab.wires[2].send(_tcp(OUT1_6, H1_6, 5555, 40100, "A", inside=False))
    wait_until("the ACK dropped", lambda: _drops(real_lab, "NO_SESSION") == no_session + 1)
    assert _nothing_arrives(real_lab.wires[1])
    assert _sessions(real_lab) == 0 and _v6_entries(real_lab) == 0


def test_fin_both_ways_ends_the_session(real_lab: Lab) -> None:
    real_lab.wires[1].send(_tcp(H1_6, OUT1_6, 40001, 22, "S", inside=True))
    real_lab.wires[2].expect(lambda f: _is_tcp6(f, 22))
    wait_until("the session", lambda: _sessions(real_lab) == 1)
    real_lab.wires[1].send(_tcp(H1_6, OUT1_6, 40001, 22, "FA", inside=True))
    real_lab.wires[2].expect(lambda f: _is_tcp6(f, 22) and "F" in f[TCP].flags)
    real_lab.wires[2].send(_tcp(OUT1_6, H1_6, 22, 40001, "FA", inside=False))
    real_lab.wires[1].expect(lambda f: _is_tcp6(f, 40001) and "F" in f[TCP].flags)
    wait_until("the session ended", lambda: _sessions(real_lab) == 0)
    wait_until("its entries deleted", lambda: _v6_entries(real_lab) == 0)


def test_the_gateway_answers_a_ping_of_its_address(real_lab: Lab) -> None:
    request = (
        Ether(src=H1_MAC, dst=GW_IN_MAC)
        / IPv6(src=H1_6, dst=GW_IN6, hlim=64)
        / ICMPv6EchoRequest(id=0x77, seq=3, data=b"ping the gateway")
    )
    real_lab.wires[1].send(bytes(request))
    reply = real_lab.wires[1].expect(lambda f: f.haslayer(ICMPv6EchoReply))
    wanted = (
        Ether(src=GW_IN_MAC, dst=H1_MAC)
        / IPv6(src=GW_IN6, dst=H1_6, hlim=64)
        / ICMPv6EchoReply(id=0x77, seq=3, data=b"ping the gateway")
    )
    assert bytes(reply) == bytes(wanted)
    _checksum_verified(reply, ICMPv6EchoReply)
    assert _sessions(real_lab) == 0, "an answer of the gateway, no session"


def test_a_hop_limit_that_runs_out_is_answered_with_time_exceeded(real_lab: Lab) -> None:
    probe = (
        Ether(src=H1_MAC, dst=GW_IN_MAC)
        / IPv6(src=H1_6, dst=OUT1_6, hlim=1)
        / TCP(sport=40002, dport=33434, flags="S")
    )
    real_lab.wires[1].send(bytes(probe))
    answer = real_lab.wires[1].expect(lambda f: f.haslayer(ICMPv6TimeExceeded))
    wanted = (
        Ether(src=GW_IN_MAC, dst=H1_MAC)
        / IPv6(src=GW_IN6, dst=H1_6, hlim=64, tc=0xC0)
        / ICMPv6TimeExceeded(code=0)
        / bytes(probe[IPv6])
    )
    assert bytes(answer) == bytes(wanted)
    _checksum_verified(answer, ICMPv6TimeExceeded)
    assert _sessions(real_lab) == 0


def test_the_gateway_advertises_its_addresses(real_lab: Lab) -> None:
    """A neighbour solicitation for the gateway's inside address and one for its link-local
    address (fe80::ff:fe00:1, from its MAC), answered by the data plane from the entries the CPM
    wrote, with the port's MAC."""
    for target in (GW_IN6, "fe80::ff:fe00:1"):
        solicit = (
            Ether(src=H1_MAC, dst="33:33:ff:00:00:01")
            / IPv6(src=H1_6, dst="ff02::1:ff00:1", hlim=255)
            / ICMPv6ND_NS(tgt=target)
            / ICMPv6NDOptSrcLLAddr(lladdr=H1_MAC)
        )
        real_lab.wires[1].send(bytes(solicit))
        advert = real_lab.wires[1].expect(_advertisement_of(target))
        assert advert[Ether].src == GW_IN_MAC and advert[IPv6].src == target
        assert advert[ICMPv6NDOptDstLLAddr].lladdr == GW_IN_MAC


def _advertisement_of(target: str) -> Callable[[Ether], bool]:
    def match(frame: Ether) -> bool:
        return bool(frame.haslayer(ICMPv6ND_NA) and frame[ICMPv6ND_NA].tgt == target)

    return match


def _via_spm(lab: Lab, frame: bytes, dport: int) -> tuple[int, Ether]:
    """Send `frame` in on port 1 and return (the SPM port it reached, what arrived there)."""
    lab.wires[1].send(frame)
    found: dict[int, Ether] = {}

    def arrived() -> bool:
        for port in (3, 4):
            ready, _, _ = select.select([lab.wires[port].sock], [], [], 0)
            if ready:
                found[port] = lab.wires[port].expect(lambda f: _is_tcp6(f, dport), timeout=1)
                return True
        return False

    wait_until("the packet at an SPM port", arrived)
    ((port, seen),) = found.items()
    return port, seen


def test_an_inspected_flow_visits_its_spm_both_ways_and_a_drop_verdict_blocks_it(
    real_lab: Lab,
) -> None:
    """Outbound web (class web, pool main): the SYN reaches the SPM the CPM pinned, tagged as
    IPv4's are (destination the SPM's MAC, source 02:4f:47:00 and the NPM's tag, hop limit
    untouched); sent back by the SPM (to the tag MAC), it leaves port 2 routed; the SYN-ACK
    visits the same SPM. A drop alert naming the flow in IPv6 text blocks both entries: the
    next segment is dropped as SESSION_BLOCKED."""
    controller = real_lab.controller
    syn = _tcp(H1_6, OUT1_6, 40010, 80, "S", inside=True)
    port, seen = _via_spm(real_lab, syn, 80)
    spm = {3: "00:00:00:00:03:33", 4: "00:00:00:00:04:44"}[port]
    tag = controller.states["npm1"].tag_base
    tag_mac = f"02:4f:47:00:{tag >> 8:02x}:{tag & 0xFF:02x}"
    assert (seen[Ether].dst, seen[Ether].src, seen[IPv6].hlim) == (spm, tag_mac, 64)
    back = Ether(src=spm, dst=tag_mac) / seen[IPv6]
    real_lab.wires[port].send(bytes(back))
    out = real_lab.wires[2].expect(lambda f: _is_tcp6(f, 80))
    assert (out[Ether].src, out[Ether].dst, out[IPv6].hlim) == (GW_OUT_MAC, OUT1_MAC, 63)
    real_lab.controller.db_writer.flush()
    (row,) = controller.db.sessions()
    assert (row["class_id"], row["spm_port"]) == (1, port)
    reply = _tcp(OUT1_6, H1_6, 80, 40010, "SA", inside=False)
    real_lab.wires[2].send(reply)
    again = real_lab.wires[port].expect(lambda f: _is_tcp6(f, 40010))
    assert (again[Ether].dst, again[Ether].src) == (spm, tag_mac)
    name = {3: "spm1", 4: "spm2"}[port]
    alert = {
        "sid": 1000001,
        "msg": "outbound web",
        "action": "drop",
        "flow": {"proto": "tcp", "src": H1_6, "dst": OUT1_6, "sport": 40010, "dport": 80},
    }
    result = controller.bus.publish(ev.AlertReceived(name, alert)).result(timeout=10)
    assert any(isinstance(r, dict) and r.get("blocked") for r in result), result
    blocked = _drops(real_lab, "SESSION_BLOCKED")
    real_lab.wires[1].send(_tcp(H1_6, OUT1_6, 40010, 80, "A", inside=True))
    wait_until("the segment dropped", lambda: _drops(real_lab, "SESSION_BLOCKED") == blocked + 1)
    assert _nothing_arrives(real_lab.wires[port])


def _echo_reply(ident: int) -> Callable[[Ether], bool]:
    def match(frame: Ether) -> bool:
        return bool(frame.haslayer(ICMPv6EchoReply) and frame[ICMPv6EchoReply].id == ident)

    return match


DEFAULT_ROUTE = (
    (
        '  - {prefix: "2001:db8:3::/48", via: "2001:db8:2::20"}',
        '  - {prefix: "2001:db8:3::/48", via: "2001:db8:2::20"}\n'
        '  - {prefix: "::/0", via: "2001:db8:2::20"}',
    ),
)


@pytest.mark.parametrize("real_lab", [DEFAULT_ROUTE], indirect=True)
def test_a_default_route_does_not_take_a_ping_of_the_gateway_out(real_lab: Lab) -> None:
    """With ::/0 via out1, a ping of the gateway's inside address and one of its outside address
    from h1 are answered by the gateway (their /128 no_route_v6 entries above the default
    route), and neither leaves port 2; a ping of an address the default route takes goes out."""
    for number, target in enumerate(("2001:db8:1::1", "2001:db8:2::1")):
        request = (
            Ether(src=H1_MAC, dst=GW_IN_MAC)
            / IPv6(src=H1_6, dst=target, hlim=64)
            / ICMPv6EchoRequest(id=0x80 + number, seq=1, data=b"default route")
        )
        real_lab.wires[1].send(bytes(request))
        reply = real_lab.wires[1].expect(_echo_reply(0x80 + number))
        assert (reply[IPv6].src, reply[IPv6].dst) == (target, H1_6)
        _checksum_verified(reply, ICMPv6EchoReply)
    assert _nothing_arrives(real_lab.wires[2])
    away = (
        Ether(src=H1_MAC, dst=GW_IN_MAC)
        / IPv6(src=H1_6, dst="2001:db8:99::1", hlim=64)
        / ICMPv6EchoRequest(id=0x90, seq=1)
    )
    real_lab.wires[1].send(bytes(away))
    out = real_lab.wires[2].expect(lambda f: f.haslayer(ICMPv6EchoRequest))
    assert (out[IPv6].dst, out[Ether].dst) == ("2001:db8:99::1", OUT1_MAC)
