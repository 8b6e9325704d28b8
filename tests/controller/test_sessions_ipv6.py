"""IPv6 sessions against the switch double (the built-in switch's P4Runtime server with no
ports): an opening packet-in (CPU_REASON_SESSION_V6) installs both directions in session_v6 and
goes back through the pipeline; duplicates install once; FIN/RST digests (session_close_v6_t) and
idle timeouts end them; blocking rewrites them; the database, the API's view and a restart agree;
a policy that now denies the flow blocks it."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from finsy.proto import p4r
from scapy.layers.inet import TCP, UDP
from scapy.layers.inet6 import ICMPv6EchoRequest, IPv6
from scapy.layers.l2 import Ether

from controller import events as ev
from controller.api import session_view
from controller.runtime import Controller
from controller.session_encoding import FlowKey
from controller.session_model import parse_flow
from opengate import p4constants as pc
from opengate.entries import Exact, TableEntry
from tests.controller.conftest import ControllerFactory, wait_until
from tests.controller.flows import GW_IN_MAC, packet_in_meta
from tests.controller.test_runtime import apply
from tests.controller.test_sessions import db_sessions, normalized
from tests.switch_double import SwitchDouble

H1_6, H2_6, OUT1_6 = "2001:db8:1::10", "2001:db8:1::11", "2001:db8:2::20"
H1_MAC = "00:00:00:00:01:10"
HALF = (1 << 64) - 1


def ip6(text: str) -> int:
    return int(ipaddress.IPv6Address(text))


def key6(src: str, dst: str, proto: int, sport: int, dport: int) -> FlowKey:
    return (ip6(src), ip6(dst), proto, sport, dport)


def reverse(flow: FlowKey) -> FlowKey:
    src, dst, proto, sport, dport = flow
    return (dst, src, proto, dport, sport)


def syn6(src: str, dst: str, sport: int, dport: int, flags: str = "S") -> bytes:
    return bytes(
        Ether(src=H1_MAC, dst=GW_IN_MAC)
        / IPv6(src=src, dst=dst)
        / TCP(sport=sport, dport=dport, flags=flags)
    )


def v6_meta(rule: int = 1) -> dict[str, int]:
    return packet_in_meta(pc.CPU_REASON_SESSION_V6, acl_rule=rule)


def expected6(
    controller: Controller, flow: FlowKey, timeout_s: float = 30.0, block: bool = False
) -> p4r.TableEntry:
    src, dst, proto, sport, dport = flow
    values = (src >> 64, src & HALF, dst >> 64, dst & HALF, proto, sport, dport)
    match = dict(zip(pc.MATCH_FIELDS[pc.T_SESSION_V6], (Exact(v) for v in values), strict=True))
    if block:
        entry = TableEntry.make(pc.T_SESSION_V6, dict(match), pc.A_SESSION_V6_BLOCK)
    else:
        # ssh, ICMPv6 echo, NTP: no IDS rule of the lab classifies them (class 0, no SPM;
        # tests/controller/test_inspection_ipv6.py has the classified ones)
        params = dict.fromkeys(pc.ACTION_PARAMS[pc.A_SESSION_V6_FORWARD], 0)
        entry = TableEntry.make(pc.T_SESSION_V6, dict(match), pc.A_SESSION_V6_FORWARD, params)
    message = controller.npms["npm1"].schema.encode_entry(entry)
    message.idle_timeout_ns = int(timeout_s * 1e9)
    return normalized(message)


def v6_entries(switch: SwitchDouble) -> list[p4r.TableEntry]:
    return sorted(
        (normalized(e) for e in switch.table_entries(pc.T_SESSION_V6)),
        key=lambda e: e.SerializeToString(),
    )


def pair(controller: Controller, flow: FlowKey, block: bool = False) -> list[p4r.TableEntry]:
    entries = [
        expected6(controller, flow, block=block),
        expected6(controller, reverse(flow), block=block),
    ]
    return sorted(entries, key=lambda e: e.SerializeToString())


def open_session(switch: SwitchDouble, frame: bytes) -> tuple[bytes, dict[str, int]]:
    before = len(switch.table_entries(pc.T_SESSION_V6))
    switch.inject_packet_in(frame, v6_meta())
    sent: tuple[bytes, dict[str, int]] = wait_until(
        "the packet-out", lambda: switch.packet_out(0.05)
    )
    wait_until("two entries", lambda: len(switch.table_entries(pc.T_SESSION_V6)) == before + 2)
    return sent


def test_an_opening_packet_installs_both_directions_and_goes_back_through_the_pipeline(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    controller = make_controller(switch)
    frame = syn6(H1_6, OUT1_6, 40000, 22)
    payload, meta = open_session(switch, frame)
    assert payload == frame
    assert meta == {"egress_port": 0, "submit_to_ingress": 1, "end_flow": 0, "_pad": 0}
    flow = key6(H1_6, OUT1_6, pc.IP_PROTO_TCP, 40000, 22)
    assert v6_entries(switch) == pair(controller, flow)
    assert switch.table_entries(pc.T_SESSION) == [], "nothing in the IPv4 table"
    (row,) = db_sessions(controller)
    assert (row["src6"], row["dst6"], row["sport"], row["dport"], row["acl_rule"]) == (
        H1_6,
        OUT1_6,
        40000,
        22,
        1,
    )
    view = session_view(row)
    assert (view["family"], view["src"], view["dst"], view["r_src"], view["r_dst"]) == (
        6,
        H1_6,
        OUT1_6,
        OUT1_6,
        H1_6,
    )
    assert (view["class_id"], view["nat"], view["spm_mac"]) == (0, "NONE", None)
    latency = controller.metrics.registry.get_sample_value(
        "opengate_packet_ins_total", {"npm": "npm1", "reason": "SESSION_V6"}
    )
    assert latency == 1


def test_an_echo_request_opens_a_session_keyed_by_its_identifier(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    """(s, d, 58, id, 0) and its reply (d, s, 58, 0, id), with the policy's ICMP timeout; a UDP
    flow with UDP's."""
    controller = make_controller(switch)
    ping = bytes(
        Ether(src=H1_MAC, dst=GW_IN_MAC)
        / IPv6(src=H1_6, dst=OUT1_6)
        / ICMPv6EchoRequest(id=0x4242, seq=1)
    )
    open_session(switch, ping)
    flow = key6(H1_6, OUT1_6, pc.IP_PROTO_ICMPV6, 0x4242, 0)
    assert parse_flow(ping) == flow
    assert v6_entries(switch) == pair(controller, flow)
    udp = bytes(Ether(dst=GW_IN_MAC) / IPv6(src=H2_6, dst=OUT1_6) / UDP(sport=5353, dport=123))
    open_session(switch, udp)
    both = pair(controller, flow) + pair(controller, key6(H2_6, OUT1_6, pc.IP_PROTO_UDP, 5353, 123))
    assert v6_entries(switch) == sorted(both, key=lambda e: e.SerializeToString())


def test_a_retransmitted_opening_packet_installs_once_and_is_sent_again(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    controller = make_controller(switch)
    frame = syn6(H1_6, OUT1_6, 40001, 22)
    open_session(switch, frame)
    switch.inject_packet_in(frame, v6_meta())
    again, meta = wait_until("the second packet-out", lambda: switch.packet_out(0.05))
    assert (again, meta["submit_to_ingress"]) == (frame, 1)
    assert len(switch.table_entries(pc.T_SESSION_V6)) == 2
    assert controller.sessions is not None and controller.sessions.stats.duplicates == 1


def test_fin_both_ways_and_rst_end_ipv6_sessions(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    controller = make_controller(switch)
    a = key6(H1_6, OUT1_6, pc.IP_PROTO_TCP, 40002, 22)
    b = key6(H2_6, OUT1_6, pc.IP_PROTO_TCP, 40003, 22)
    open_session(switch, syn6(H1_6, OUT1_6, 40002, 22))
    open_session(switch, syn6(H2_6, OUT1_6, 40003, 22))

    def close6(flow: FlowKey, flags: int) -> dict[str, int]:
        src, dst, proto, sport, dport = flow
        return {
            "ipv6_src_hi": src >> 64,
            "ipv6_src_lo": src & HALF,
            "ipv6_dst_hi": dst >> 64,
            "ipv6_dst_lo": dst & HALF,
            "ip_proto": proto,
            "l4_sport": sport,
            "l4_dport": dport,
            "tcp_flags": flags,
        }

    assert switch.inject_digest(pc.D_SESSION_CLOSE_V6_T, [close6(b, pc.TCP_FLAG_RST)])
    wait_until("the RST session removed", lambda: v6_entries(switch) == pair(controller, a))
    switch.inject_digest(pc.D_SESSION_CLOSE_V6_T, [close6(a, pc.TCP_FLAG_FIN | pc.TCP_FLAG_ACK)])
    controller.bus.call(lambda: None)
    assert len(switch.table_entries(pc.T_SESSION_V6)) == 2, "one FIN is a half-close"
    switch.inject_digest(
        pc.D_SESSION_CLOSE_V6_T, [close6(reverse(a), pc.TCP_FLAG_FIN | pc.TCP_FLAG_ACK)]
    )
    wait_until("the FIN session removed", lambda: not switch.table_entries(pc.T_SESSION_V6))
    wait_until("the rows deleted", lambda: db_sessions(controller) == [])


def test_an_idle_ipv6_session_is_removed(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    """The switch's idle notification of both entries (TCP idle timeout 1 s here: the opening
    packet sent back through the pipeline hit the entries, which the double's clock knows)."""
    text = lab.read_text()
    lab.write_text(text.replace("idle_timeout: {tcp: 30,", "idle_timeout: {tcp: 1,"))
    controller = make_controller(switch)
    open_session(switch, syn6(H1_6, OUT1_6, 40004, 22))
    original = switch.table_entries(pc.T_SESSION_V6)[0]
    assert original.idle_timeout_ns == 1_000_000_000
    wait_until("the session removed", lambda: not switch.table_entries(pc.T_SESSION_V6), timeout=10)
    wait_until("the row deleted", lambda: db_sessions(controller) == [])
    removed = controller.metrics.registry.get_sample_value(
        "opengate_sessions_removed_total", {"npm": "npm1", "reason": "idle"}
    )
    assert removed == 1


def test_blocking_rewrites_both_entries_and_a_restart_adopts_them(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    controller = make_controller(switch)
    open_session(switch, syn6(H1_6, OUT1_6, 40005, 22))
    flow = key6(H1_6, OUT1_6, pc.IP_PROTO_TCP, 40005, 22)
    (row,) = db_sessions(controller)
    session_id = row["id"]
    assert isinstance(session_id, int)
    controller.bus.publish(ev.SessionBlockRequested(session_id, "test")).result(10)
    assert v6_entries(switch) == pair(controller, flow, block=True)
    controller.stop()
    again = make_controller(switch)
    assert again.states["npm1"].last_sync["sessions"]["adopted"] == 1
    assert again.sessions is not None
    (session,) = again.sessions.sessions.values()
    assert (session.key, session.reply, session.state) == (flow, reverse(flow), "blocked")


def test_entries_left_on_the_switch_are_paired_into_a_session(
    switch: SwitchDouble, make_controller: ControllerFactory, tmp_path: Path
) -> None:
    """A new controller (another database) finds both directions of an IPv6 flow in session_v6:
    one session, adopted from the switch."""
    first = make_controller(switch)
    open_session(switch, syn6(H1_6, OUT1_6, 40006, 22))
    first.stop()
    second = make_controller(switch, db_url=f"sqlite:///{tmp_path / 'other.db'}")
    assert second.states["npm1"].last_sync["sessions"]["adopted_from_switch"] == 1
    (row,) = db_sessions(second)
    assert {row["src6"], row["dst6"]} == {H1_6, OUT1_6}


def test_a_policy_that_now_denies_the_flow_blocks_it(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    controller = make_controller(switch)
    open_session(switch, syn6(H1_6, OUT1_6, 40007, 25))
    open_session(switch, syn6(H1_6, OUT1_6, 40008, 22))
    text = lab.read_text().replace(
        "    - {name: lan-out, src: inside, action: permit}",
        '    - {name: no-smtp6, src: "2001:db8:1::/64", proto: tcp, dport: 25, action: deny}\n'
        "    - {name: lan-out, src: inside, action: permit}",
    )
    lab.write_text(text)
    rematched = apply(controller, lab)["rematched"]
    assert isinstance(rematched, dict)
    assert rematched == {**dict.fromkeys(rematched, 0), "denied": 1}
    smtp = key6(H1_6, OUT1_6, pc.IP_PROTO_TCP, 40007, 25)
    web = key6(H1_6, OUT1_6, pc.IP_PROTO_TCP, 40008, 22)
    wanted = pair(controller, smtp, block=True) + pair(controller, web)
    assert v6_entries(switch) == sorted(wanted, key=lambda e: e.SerializeToString())


def test_packet_ins_the_cpm_makes_no_ipv6_session_of(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    """An ACL to-CPU packet (acl_to_cpu: drop), and an IPv4-compatible address (::/96, whose key
    an IPv4 flow's could be): no session."""
    controller = make_controller(switch)
    switch.inject_packet_in(
        syn6(H1_6, OUT1_6, 40009, 23), packet_in_meta(pc.CPU_REASON_ACL, acl_rule=0)
    )
    switch.inject_packet_in(syn6("::10.0.1.10", "::198.51.100.20", 40010, 22), v6_meta())
    wait_until(
        "both packet-ins counted",
        lambda: (
            controller.metrics.registry.get_sample_value(
                "opengate_packet_ins_total", {"npm": "npm1", "reason": "SESSION_V6"}
            )
            == 1
            and controller.sessions is not None
            and controller.sessions.stats.acl_to_cpu == 1
        ),
    )
    assert switch.packet_out(0.2) is None
    assert switch.table_entries(pc.T_SESSION_V6) == []
    assert controller.sessions is not None and controller.sessions.count() == 0
