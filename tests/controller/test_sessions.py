"""Sessions from digests and packet-ins, against the switch double (the built-in switch's
P4Runtime server with no ports): both directions, NAT bindings, duplicates, idle timeout, FIN/RST,
and the DB kept in step with the table."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import grpc
import pytest
from finsy.proto import p4r

from controller import events as ev
from controller.npm import NpmConnection
from controller.runtime import Controller
from controller.sessions import GONE
from opengate import p4constants as pc
from opengate.entries import Exact, TableEntry
from tests.controller.conftest import ControllerFactory, wait_until
from tests.controller.flows import (
    GW_OUT,
    H1,
    H2,
    OUT1,
    SPM1_MAC,
    close,
    ip,
    key,
    packet_in_meta,
    ping,
    request,
    syn,
)
from tests.switch_double import SwitchDouble

FORWARD_PARAMS = pc.ACTION_PARAMS[pc.A_SESSION_FORWARD]


def expected_entry(
    controller: Controller,
    flow: tuple[int, int, int, int, int],
    timeout_s: float = 30.0,
    block: bool = False,
    /,
    **values: int,
) -> p4r.TableEntry:
    schema = controller.npms["npm1"].schema
    match = dict(zip(pc.MATCH_FIELDS[pc.T_SESSION], (Exact(v) for v in flow), strict=True))
    if block:
        entry = TableEntry.make(pc.T_SESSION, dict(match), pc.A_SESSION_BLOCK)
    else:
        full = {name: 0 for name in FORWARD_PARAMS}
        full.update(values)
        entry = TableEntry.make(pc.T_SESSION, dict(match), pc.A_SESSION_FORWARD, full)
    message = schema.encode_entry(entry)
    message.idle_timeout_ns = int(timeout_s * 1e9)
    return normalized(message)


def nat_pair(
    controller: Controller,
    original: tuple[int, int, int, int, int],
    kind: int,
    rewritten: tuple[str, int],
    reply: tuple[int, int, int, int, int],
    restored: tuple[str, int],
    **values: int,
) -> list[p4r.TableEntry]:
    """The two entries of a NAT session: the original direction rewritten (`kind`) to
    `rewritten` (address, port), the reply the other way to `restored`, before its SPM."""
    other = pc.NAT_REWRITE_DST if kind == pc.NAT_REWRITE_SRC else pc.NAT_REWRITE_SRC
    return [
        expected_entry(
            controller,
            original,
            **values,
            nat_kind=kind,
            nat_addr=ip(rewritten[0]),
            nat_port=rewritten[1],
        ),
        expected_entry(
            controller,
            reply,
            **values,
            nat_kind=other,
            nat_addr=ip(restored[0]),
            nat_port=restored[1],
            nat_before_spm=1,
        ),
    ]


def normalized(entry: p4r.TableEntry) -> p4r.TableEntry:
    out = p4r.TableEntry()
    out.CopyFrom(entry)
    params = sorted(out.action.action.params, key=lambda p: p.param_id)
    del out.action.action.params[:]
    out.action.action.params.extend(params)
    matches = sorted(out.match, key=lambda m: m.field_id)
    del out.match[:]
    out.match.extend(matches)
    return out


def session_entries(switch: SwitchDouble) -> list[p4r.TableEntry]:
    return [normalized(e) for e in switch.table_entries(pc.T_SESSION)]


def db_sessions(controller: Controller) -> list[dict[str, object]]:
    controller.db_writer.flush()
    return controller.db.sessions()


def test_digest_installs_both_directions_in_one_write(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    controller = make_controller(switch)
    writes_before = len(switch.writes)
    flow = key(H1, OUT1, pc.IP_PROTO_TCP, 40000, 80)
    assert switch.inject_digest(
        pc.D_SESSION_REQUEST_T, [request(flow, ids_class=1, spm_port=3, spm_mac=SPM1_MAC)]
    )
    entries = wait_until("two session entries", lambda: len(session_entries(switch)) == 2)
    assert entries
    forward = {"class_id": 1, "spm_port": 3, "spm_mac": SPM1_MAC}
    assert session_entries(switch) == [
        expected_entry(controller, flow, **forward),
        expected_entry(controller, key(OUT1, H1, pc.IP_PROTO_TCP, 80, 40000), **forward),
    ]
    session_writes = switch.writes[writes_before:]
    assert [w.updates for w in session_writes] == [2]
    (row,) = wait_until("the session in the DB", lambda: db_sessions(controller))
    assert (row["src"], row["dst"], row["sport"], row["dport"]) == (ip(H1), ip(OUT1), 40000, 80)
    assert (row["r_src"], row["r_dst"], row["class_id"], row["spm_port"]) == (
        ip(OUT1),
        ip(H1),
        1,
        3,
    )
    assert switch.digest_acks >= 1


def test_duplicate_digests_install_once(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    controller = make_controller(switch)
    flow = key(H1, OUT1, pc.IP_PROTO_UDP, 5353, 53)
    reverse = key(OUT1, H1, pc.IP_PROTO_UDP, 53, 5353)
    switch.inject_digest(pc.D_SESSION_REQUEST_T, [request(flow)] * 3)
    switch.inject_digest(pc.D_SESSION_REQUEST_T, [request(flow), request(reverse, ingress_port=2)])
    # The duplicate count, the entries and the database row are written at different moments
    # (the row by the DB writer after the switch): wait for all three before asserting.
    wait_until(
        "4 duplicates, both entries and the database row",
        lambda: (
            controller.sessions
            and controller.sessions.stats.duplicates == 4
            and len(session_entries(switch)) == 2
            and len(db_sessions(controller)) == 1
        ),
    )
    assert len(session_entries(switch)) == 2
    assert len(db_sessions(controller)) == 1
    assert controller.bus.call(lambda: controller.sessions and controller.sessions.count()) == 1


def test_masquerade_packet_in_allocates_installs_and_reinjects(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    controller = make_controller(switch)
    frame = syn(H1, OUT1, 40000, 80)
    switch.inject_packet_in(frame, packet_in_meta(ids_class=1, spm_port=3))
    payload, meta = wait_until("the packet-out", lambda: switch.packet_out(0.05))
    assert payload == frame
    assert meta == {"egress_port": 0, "submit_to_ingress": 1, "end_flow": 0, "_pad": 0}
    forward = {"class_id": 1, "spm_port": 3, "spm_mac": SPM1_MAC}
    # 40000 is outside the policy's NAT range (20000-20009): the first free port is taken.
    assert session_entries(switch) == nat_pair(
        controller,
        key(H1, OUT1, pc.IP_PROTO_TCP, 40000, 80),
        pc.NAT_REWRITE_SRC,
        (GW_OUT, 20000),
        key(OUT1, GW_OUT, pc.IP_PROTO_TCP, 80, 20000),
        (H1, 40000),
        **forward,
    )


@pytest.mark.parametrize("slots", ["v1model", "tofino"])
def test_a_collision_waits_at_the_controller_for_its_routed_session(
    switch: SwitchDouble,
    make_controller: ControllerFactory,
    monkeypatch: pytest.MonkeyPatch,
    slots: str,
) -> None:
    """An opening packet whose two data-plane slots were held (CPU_REASON_SESSION_COLLISION), of
    a flow that needs no NAT (out1 -> h1: no masquerade that way): both directions installed as
    the data plane classified it, no binding, then the packet sent on through the pipeline. The
    same against Tofino's slots (which do not retire themselves; their collisions come as
    packet-ins too); one packet-out, nothing else."""
    if slots == "tofino":
        monkeypatch.setattr(NpmConnection, "slots_retire_themselves", property(lambda _self: False))
    controller = make_controller(switch)
    frame = syn(OUT1, H1, 50000, 22)
    meta = packet_in_meta(pc.CPU_REASON_SESSION_COLLISION, ingress_port=2, ids_class=1, spm_port=3)
    switch.inject_packet_in(frame, meta)
    payload, out = wait_until("the packet-out", lambda: switch.packet_out(0.05))
    assert payload == frame
    assert out == {"egress_port": 0, "submit_to_ingress": 1, "end_flow": 0, "_pad": 0}
    forward = {"class_id": 1, "spm_port": 3, "spm_mac": SPM1_MAC}
    assert session_entries(switch) == [
        expected_entry(controller, key(OUT1, H1, pc.IP_PROTO_TCP, 50000, 22), **forward),
        expected_entry(controller, key(H1, OUT1, pc.IP_PROTO_TCP, 22, 50000), **forward),
    ]
    (row,) = wait_until("the session in the DB", lambda: db_sessions(controller))
    assert (row["src"], row["dst"], row["nat_kind"]) == (ip(OUT1), ip(H1), pc.NAT_NONE)
    assert switch.packet_out(0.05) is None, "one packet-out"


def test_masquerade_keeps_the_source_port_when_free(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    make_controller(switch)
    switch.inject_packet_in(syn(H1, OUT1, 20005, 80), packet_in_meta())
    switch.inject_packet_in(syn(H2, OUT1, 20005, 80), packet_in_meta())
    wait_until("two packet-outs", lambda: switch.packet_outs.qsize() == 2)
    replies = {
        (e.match[4].exact.value, e.match[1].exact.value)
        for e in session_entries(switch)
        if int.from_bytes(e.match[0].exact.value, "big") == ip(OUT1)
    }
    ports = sorted(int.from_bytes(port, "big") for port, _ in replies)
    assert ports == [20000, 20005]


def test_nat_ports_run_out_per_destination_and_failures_are_clean(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    controller = make_controller(switch)
    for sport in range(30000, 30011):  # 11 flows to one server:port, 10 NAT ports
        switch.inject_packet_in(syn(H1, OUT1, sport, 80), packet_in_meta())
    wait_until("10 packet-outs", lambda: switch.packet_outs.qsize() == 10)
    wait_until("one failure", lambda: controller.sessions and controller.sessions.stats.failed == 1)
    # Another destination can reuse the ports (the binding is per remote endpoint).
    switch.inject_packet_in(syn(H1, "203.0.113.7", 30000, 80), packet_in_meta())
    wait_until("11 packet-outs", lambda: switch.packet_outs.qsize() == 11)
    assert len(session_entries(switch)) == 22
    assert len(db_sessions(controller)) == 11


def test_a_full_nat_range_fails_at_once_until_a_port_is_freed(
    switch: SwitchDouble, make_controller: ControllerFactory, caplog: Any
) -> None:
    """Once every port towards a server:port is taken, further flows there fail without a scan
    of the range, with one log line for the burst; a session that goes frees its port."""
    controller = make_controller(switch)
    for sport in range(30000, 30010):  # the 10 NAT ports of the test policy
        switch.inject_packet_in(syn(H1, OUT1, sport, 80), packet_in_meta())
    wait_until("10 packet-outs", lambda: switch.packet_outs.qsize() == 10)
    manager = controller.sessions
    assert manager is not None
    with caplog.at_level(logging.WARNING, logger="controller.sessions"):
        for sport in range(31000, 31005):
            switch.inject_packet_in(syn(H1, OUT1, sport, 80), packet_in_meta())
        wait_until("five failures", lambda: manager.stats.failed == 5)
    assert len(manager._nat_full) == 1  # the first failure scanned and remembered the group
    lines = [r.getMessage() for r in caplog.records if "no free NAT port" in r.getMessage()]
    assert len(lines) == 1, lines  # the other four are left to the counters
    victim = next(s for s in manager.sessions.values() if s.key[3] == 30003)
    controller.bus.publish(ev.SessionDeleteRequested(victim.id))
    wait_until("the session gone", lambda: victim.id not in manager.sessions)
    assert manager._nat_full == {}
    switch.inject_packet_in(syn(H1, OUT1, 31005, 80), packet_in_meta())
    wait_until("11 packet-outs", lambda: switch.packet_outs.qsize() == 11)
    added = next(s for s in manager.sessions.values() if s.key[3] == 31005)
    assert added.nat_port == victim.nat_port and manager.stats.failed == 5


def test_port_forward_rewrites_the_destination(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    controller = make_controller(switch)
    switch.inject_packet_in(syn(OUT1, GW_OUT, 5555, 8080), packet_in_meta(ingress_port=2))
    wait_until("the packet-out", lambda: switch.packet_out(0.05))
    assert session_entries(switch) == nat_pair(
        controller,
        key(OUT1, GW_OUT, pc.IP_PROTO_TCP, 5555, 8080),
        pc.NAT_REWRITE_DST,
        (H1, 80),
        key(H1, OUT1, pc.IP_PROTO_TCP, 80, 5555),
        (GW_OUT, 8080),
    )


def test_port_forward_the_data_plane_carried_is_installed_with_its_binding(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    """The NPM forwarded the flow itself: its digest names the target; the CPM installs the
    exact entries with that binding (the reply from the target found by the reply key)."""
    controller = make_controller(switch)
    flow = key(OUT1, GW_OUT, pc.IP_PROTO_TCP, 5555, 8080)
    record = request(flow, ingress_port=2) | {
        "nat_kind": pc.NAT_REWRITE_DST,
        "nat_addr": ip(H1),
        "nat_port": 80,
    }
    assert switch.inject_digest(pc.D_SESSION_REQUEST_T, [record])
    wait_until("both entries", lambda: len(switch.table_entries(pc.T_SESSION)) == 2)
    assert session_entries(switch) == nat_pair(
        controller,
        flow,
        pc.NAT_REWRITE_DST,
        (H1, 80),
        key(H1, OUT1, pc.IP_PROTO_TCP, 80, 5555),
        (GW_OUT, 8080),
    )
    (row,) = wait_until("the DB row", lambda: db_sessions(controller))
    assert (row["nat_kind"], row["nat_addr"], row["nat_port"]) == (pc.NAT_REWRITE_DST, ip(H1), 80)


def test_icmp_echo_is_masqueraded_by_identifier(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    controller = make_controller(switch)
    switch.inject_packet_in(ping(H1, OUT1, 0x1234), packet_in_meta())
    wait_until("the packet-out", lambda: switch.packet_out(0.05))
    assert session_entries(switch) == nat_pair(
        controller,
        key(H1, OUT1, pc.IP_PROTO_ICMP, 0x1234, 0),
        pc.NAT_REWRITE_SRC,
        (GW_OUT, 20000),
        key(OUT1, GW_OUT, pc.IP_PROTO_ICMP, 0, 20000),
        (H1, 0x1234),
    )


def test_acl_to_cpu_packets_are_dropped_by_default(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    controller = make_controller(switch)
    switch.inject_packet_in(syn(H1, OUT1, 40000, 23), packet_in_meta(pc.CPU_REASON_ACL, acl_rule=0))
    wait_until(
        "the packet-in counted",
        lambda: controller.sessions and controller.sessions.stats.acl_to_cpu == 1,
    )
    assert switch.packet_out(0.2) is None
    assert session_entries(switch) == []


def session_from_digest(
    switch: SwitchDouble, flow: tuple[int, int, int, int, int]
) -> tuple[p4r.TableEntry, p4r.TableEntry]:
    """Play the data plane's digest for `flow`; its two session entries, once installed."""
    switch.inject_digest(pc.D_SESSION_REQUEST_T, [request(flow)])
    original, reply = wait_until(
        "two entries",
        lambda: (
            switch.table_entries(pc.T_SESSION)
            if len(switch.table_entries(pc.T_SESSION)) == 2
            else None
        ),
    )
    return original, reply


def test_idle_session_is_removed_only_when_both_directions_are_idle(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    controller = make_controller(switch)
    flow = key(H1, OUT1, pc.IP_PROTO_UDP, 5353, 53)
    original, reply = session_from_digest(switch, flow)
    handled: list[ev.IdleTimeout] = []
    controller.bus.subscribe(ev.IdleTimeout, handled.append)  # after the controller's handler
    switch.idle_for(original, 31)
    wait_until("the switch's idle notification handled", lambda: handled)
    assert len(switch.table_entries(pc.T_SESSION)) == 2, "the reply direction is still active"
    assert db_sessions(controller), "the session is still in the database"
    switch.idle_for(reply, 31)
    wait_until("the session removed", lambda: not switch.table_entries(pc.T_SESSION))
    wait_until("the DB row removed", lambda: not db_sessions(controller))


def test_both_directions_reported_idle_at_once_are_removed_without_a_read(
    switch: SwitchDouble, make_controller: ControllerFactory, monkeypatch: Any
) -> None:
    """A flow whose two entries the switch reports idle in one notification (a one-datagram
    flow, a flood's flows) is removed at once: no read of their ages, which halves the work of
    ending a session when new flows come fastest."""
    controller = make_controller(switch)
    flow = key(H1, OUT1, pc.IP_PROTO_UDP, 5353, 53)
    original, reply = session_from_digest(switch, flow)
    npm = controller.npms["npm1"]
    reads: list[Any] = []
    real_read = npm.read

    def counting_read(
        entities: Iterable[p4r.Entity], timeout: float | None = None
    ) -> list[p4r.Entity]:
        reads.append(1)
        return real_read(entities, timeout)

    monkeypatch.setattr(npm, "read", counting_read)
    switch.idle_for(original, 31, reply)
    wait_until("the session removed", lambda: not switch.table_entries(pc.T_SESSION))
    wait_until("the DB row removed", lambda: not db_sessions(controller))
    assert reads == []


def test_fin_both_ways_and_rst_remove_after_linger(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    controller = make_controller(switch)
    a = key(H1, OUT1, pc.IP_PROTO_TCP, 40000, 80)
    b = key(H2, OUT1, pc.IP_PROTO_TCP, 40001, 80)
    switch.inject_digest(pc.D_SESSION_REQUEST_T, [request(a), request(b)])
    wait_until("four entries", lambda: len(switch.table_entries(pc.T_SESSION)) == 4)
    switch.inject_digest(pc.D_SESSION_CLOSE_T, [close(b, pc.TCP_FLAG_RST | pc.TCP_FLAG_ACK)])

    def removed_rst() -> float | None:
        return controller.metrics.registry.get_sample_value(
            "opengate_sessions_removed_total", {"npm": "npm1", "reason": "rst"}
        )

    # The entries go first, then the count (the controller's order): wait for both.
    wait_until(
        "the RST session removed and counted",
        lambda: len(switch.table_entries(pc.T_SESSION)) == 2 and removed_rst() is not None,
    )
    assert removed_rst() == 1
    switch.inject_digest(pc.D_SESSION_CLOSE_T, [close(a, pc.TCP_FLAG_FIN | pc.TCP_FLAG_ACK)])
    controller.bus.call(lambda: None)
    assert len(switch.table_entries(pc.T_SESSION)) == 2, "one FIN is a half-close"
    reverse = key(OUT1, H1, pc.IP_PROTO_TCP, 80, 40000)
    switch.inject_digest(pc.D_SESSION_CLOSE_T, [close(reverse, pc.TCP_FLAG_FIN | pc.TCP_FLAG_ACK)])
    wait_until(
        "the FIN session removed after the linger", lambda: not switch.table_entries(pc.T_SESSION)
    )

    def removed_fin() -> float | None:
        return controller.metrics.registry.get_sample_value(
            "opengate_sessions_removed_total", {"npm": "npm1", "reason": "fin"}
        )

    # The entries go first, then the database row and the count (the controller's order; the
    # row by another thread): wait for all of them.
    wait_until(
        "the session's row deleted and counted",
        lambda: db_sessions(controller) == [] and removed_fin() is not None,
    )
    assert removed_fin() == 1


def test_rst_keeps_the_session_for_the_linger(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    """After an RST the session stays for `closing_linger` (here 30 s, so that no machine is
    slow enough to see it end before the checks), as a conntrack firewall keeps a reset
    connection: the segments in flight, and the peer's RST for each, still pass. The RSTs that
    follow do not push the end back; at the end the removal is counted as "rst"."""
    lab.write_text(lab.read_text().replace("closing_linger: 0.2", "closing_linger: 30"))
    controller = make_controller(switch, policy=lab)
    flow = key(H1, OUT1, pc.IP_PROTO_TCP, 40000, 80)
    reverse = key(OUT1, H1, pc.IP_PROTO_TCP, 80, 40000)
    switch.inject_digest(pc.D_SESSION_REQUEST_T, [request(flow)])
    wait_until("both entries", lambda: len(switch.table_entries(pc.T_SESSION)) == 2)
    manager = controller.sessions
    assert manager is not None
    session = controller.bus.call(lambda: manager.index[("npm1", flow)])
    handled: list[ev.SessionCloseSeen] = []
    controller.bus.subscribe(ev.SessionCloseSeen, handled.append)  # after the controller's
    switch.inject_digest(pc.D_SESSION_CLOSE_T, [close(flow, pc.TCP_FLAG_RST)])
    wait_until("the RST handled", lambda: len(handled) == 1)
    first = controller.bus.call(lambda: (session.state, session.close_at))
    assert first[0] == "closing" and first[1] is not None
    switch.inject_digest(pc.D_SESSION_CLOSE_T, [close(reverse, pc.TCP_FLAG_RST)] * 3)
    wait_until("the later RSTs handled", lambda: sum(len(e.records) for e in handled) == 4)
    assert controller.bus.call(lambda: session.close_at) == first[1], "the first RST counts"
    assert len(switch.table_entries(pc.T_SESSION)) == 2, "still there during the linger"
    controller.bus.call(lambda: manager.on_tick(first[1]))
    wait_until("the session removed", lambda: not switch.table_entries(pc.T_SESSION))
    wait_until("the session's row deleted", lambda: db_sessions(controller) == [])
    removed = controller.metrics.registry.get_sample_value(
        "opengate_sessions_removed_total", {"npm": "npm1", "reason": "rst"}
    )
    assert removed == 1


def test_close_reported_before_the_request_still_ends_the_session(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    """A short flow the data plane set up and closed (FIN both ways) before the controller
    handled its request digest: the session is installed, then removed after the linger, as if
    the FINs had come after it; nothing stays until the idle timeout."""
    controller = make_controller(switch)
    flow = key(H1, OUT1, pc.IP_PROTO_TCP, 40002, 80)
    reverse = key(OUT1, H1, pc.IP_PROTO_TCP, 80, 40002)
    switch.inject_digest(
        pc.D_SESSION_CLOSE_T,
        [close(flow, pc.TCP_FLAG_FIN | pc.TCP_FLAG_ACK), close(reverse, pc.TCP_FLAG_FIN)],
    )
    controller.bus.call(lambda: None)
    switch.inject_digest(pc.D_SESSION_REQUEST_T, [request(flow)])
    wait_until(
        "both early FINs replayed",
        lambda: controller.sessions and controller.sessions.stats.early_closes == 2,
    )
    wait_until(
        "the session removed after the linger, entries and row",
        lambda: not switch.table_entries(pc.T_SESSION) and db_sessions(controller) == [],
    )
    assert controller.sessions is not None
    assert controller.sessions.stats.installed == 1


def test_refused_session_leaves_nothing_behind(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    controller = make_controller(switch)
    flow = key(H1, OUT1, pc.IP_PROTO_TCP, 40000, 80)
    switch.fail_next_writes(None, (grpc.StatusCode.RESOURCE_EXHAUSTED, "table is full"))
    switch.inject_digest(pc.D_SESSION_REQUEST_T, [request(flow)])
    wait_until(
        "the failure counted", lambda: controller.sessions and controller.sessions.stats.failed == 1
    )
    controller.bus.call(lambda: None)
    assert switch.table_entries(pc.T_SESSION) == []
    assert db_sessions(controller) == []


def test_spm_names_of_a_flow_find_its_session(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    """An SPM sees a masqueraded flow with the inside address both ways, and ICMP flows by
    type/code: both find the session."""
    controller = make_controller(switch)
    switch.inject_packet_in(syn(H1, OUT1, 40000, 80), packet_in_meta())
    switch.inject_packet_in(ping(H2, OUT1, 0x4242), packet_in_meta())
    wait_until("two packet-outs", lambda: switch.packet_outs.qsize() == 2)
    sessions = controller.sessions
    assert sessions is not None

    def found(flow: tuple[int, int, int, int, int]) -> tuple[int, ...] | None:
        session = controller.bus.call(lambda: sessions.find_flow(flow))
        return session.key if session is not None else None

    tcp = key(H1, OUT1, pc.IP_PROTO_TCP, 40000, 80)
    assert found(tcp) == tcp
    assert found(key(OUT1, H1, pc.IP_PROTO_TCP, 80, 40000)) == tcp
    echo = key(H2, OUT1, pc.IP_PROTO_ICMP, 0x4242, 0)
    assert found(key(OUT1, H2, pc.IP_PROTO_ICMP, 0, 0)) == echo  # an echo reply: type 0 code 0
    assert found(key(H1, H2, pc.IP_PROTO_TCP, 1, 2)) is None


def test_a_write_whose_every_update_fails_reports_each_failure(
    switch: SwitchDouble, make_controller: ControllerFactory, caplog: Any
) -> None:
    """A batch whose thousands of updates all fail (a full table under a flood) comes back as
    one error per update, as P4Runtime says, never as a failed call: the error details of 4,096
    updates are far over gRPC's default 16 KiB of metadata, which had the whole batch and every
    later one fail with RESOURCE_EXHAUSTED ("received metadata size exceeds hard limit")."""
    controller = make_controller(switch)
    npm = controller.npms["npm1"]
    count = 4096
    updates = [
        p4r.Update(
            type=p4r.Update.INSERT,
            entity=p4r.Entity(table_entry=expected_entry(controller, key(H1, OUT1, 17, p, 53))),
        )
        for p in range(1024, 1024 + count)
    ]
    assert npm.write(updates, "first").failed == []
    again = npm.write(updates, "again")
    assert len(again.failed) == count
    assert {e.code for e in again.failed} == {grpc.StatusCode.ALREADY_EXISTS.value[0]}
    assert [e.index for e in again.failed] == list(range(count))
    # Batch after batch failing is one warning line a second, with the count left out.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="controller.npm"):
        for _ in range(3):
            assert len(npm.write(updates[:64], "more").failed) == 64
    lines = [r.getMessage() for r in caplog.records if "updates failed" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "64 of 64" in lines[0] and "already" in lines[0].lower(), lines[0]
    # A failure the caller expects (NOT_FOUND for a delete that may race) is returned, not warned.
    deletes = [p4r.Update(type=p4r.Update.DELETE, entity=u.entity) for u in updates[:8]]
    assert npm.write(deletes, "delete").failed == []
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="controller.npm"):
        gone = npm.write_filled(8, lambda r, a, b: r.updates.extend(deletes[a:b]), "gone", GONE)
    assert {e.code for e in gone.failed} == {grpc.StatusCode.NOT_FOUND.value[0]}
    assert len(gone.failed) == 8
    assert not [r for r in caplog.records if "updates failed" in r.getMessage()]


def test_an_idle_entry_of_no_session_is_deleted(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    """A session entry the CPM has no session for (a Write that failed part-way left it) is
    deleted when the switch reports it idle, and counted; a session's own entries are not."""
    controller = make_controller(switch)
    flow = key(H1, OUT1, pc.IP_PROTO_UDP, 5353, 53)
    session_from_digest(switch, flow)
    orphan = expected_entry(controller, key(H2, OUT1, pc.IP_PROTO_UDP, 6000, 53))
    assert switch.plant(orphan)
    own = switch.table_entries(pc.T_SESSION)
    assert len(own) == 3
    switch.idle_for(orphan, 31)
    wait_until(
        "the orphan deleted",
        lambda: controller.sessions and controller.sessions.stats.orphans_deleted == 1,
    )
    assert switch.find_entry(pc.T_SESSION, orphan) is None
    assert len(switch.table_entries(pc.T_SESSION)) == 2
    assert controller.status()["sessions"]["orphans_deleted"] == 1
    assert len(db_sessions(controller)) == 1
