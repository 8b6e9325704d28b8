"""The controller process against the switch double: first start, restart without wiping,
hitless policy updates that write only the difference, refused policies, standby take-over."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from finsy.proto import p4r

from controller import events as ev
from controller.classifier import CLASSIFICATION_TABLES
from controller.errors import RequestError
from controller.policy import load_policy
from controller.runtime import Controller
from opengate import p4constants as pc
from opengate.entries import Exact, TableEntry
from tests.controller.conftest import ControllerFactory, wait_until
from tests.controller.flows import H1, H2, OUT1, key, request
from tests.switch_double import SwitchDouble


def decoded(controller: Controller, entries: list[p4r.TableEntry]) -> set[TableEntry]:
    schema = controller.npms["npm1"].schema
    return {schema.decode_entry(e) for e in entries}


def default_of(controller: Controller, switch: SwitchDouble, table: str) -> TableEntry:
    entry = switch.default_entry(table)
    assert entry is not None, f"{table} has no default set"
    return controller.npms["npm1"].schema.decode_entry(entry)


def apply(controller: Controller, path: Path) -> dict[str, object]:
    event = ev.PolicyApplyRequested(load_policy(path), "test")
    (result,) = controller.bus.publish(event).result(timeout=30)
    assert isinstance(result, dict)
    return result


def install_flows(switch: SwitchDouble, *flows: tuple[int, int, int, int, int]) -> None:
    before = len(switch.table_entries(pc.T_SESSION))
    switch.inject_digest(pc.D_SESSION_REQUEST_T, [request(f) for f in flows])
    wait_until(
        "the sessions", lambda: len(switch.table_entries(pc.T_SESSION)) == before + 2 * len(flows)
    )


def test_first_start_pushes_the_pipeline_and_the_base_configuration(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    controller = make_controller(switch)
    assert switch.pipeline is not None
    assert switch.pipeline.cookie == controller.npms["npm1"].cookie
    roles = decoded(controller, switch.table_entries(pc.T_PORT_ROLE))
    assert {(e.match_dict["ingress_port"], e.params_dict["role"]) for e in roles} == {
        (Exact(1), pc.ROLE_INSIDE),
        (Exact(2), pc.ROLE_OUTSIDE),
        (Exact(3), pc.ROLE_SPM),
        (Exact(4), pc.ROLE_SPM),
    }
    assert default_of(controller, switch, pc.T_NPM_IDENTITY).params_dict == {"tag_base": 0x0100}
    assert default_of(controller, switch, pc.T_CLASSIFIER_VERSION).params_dict == {"version": 1}
    verdict = default_of(controller, switch, pc.T_ACL_VERDICT)
    assert (verdict.action, verdict.params_dict) == (pc.A_ACL_DENY, {"rule_id": pc.RULE_NONE})
    tags = {e.match_dict["tag"] for e in decoded(controller, switch.table_entries(pc.T_SPM_RETURN))}
    assert tags == {Exact(0x0100), Exact(0x0101)}
    groups = [e.action_profile_group for e in switch.entities("action_profile_group")]
    assert [(g.group_id, sorted(m.weight for m in g.members)) for g in groups] == [
        (1, [8, 8]),
        (2, [8]),
    ]
    # session_request_t, session_close_t and IPv6's session_close_v6_t
    assert len(switch.entities("digest_entry")) == 3
    meters = [e.meter_entry for e in switch.entities("meter_entry")]
    configured = {(m.meter_id, m.index.index) for m in meters if m.HasField("config")}
    assert len(configured) == 2, configured  # class 1 (web) and the NAT CPU reason


def test_restart_writes_nothing_when_switch_and_db_agree(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    first = make_controller(switch)
    install_flows(switch, key(H1, OUT1, pc.IP_PROTO_TCP, 40000, 80))
    first.stop()
    writes = len(switch.writes)
    second = make_controller(switch)
    assert second.npms["npm1"].pipeline_pushed is False
    assert len(switch.writes) == writes, "a restart that finds everything in place writes nothing"
    assert second.bus.call(lambda: second.sessions and second.sessions.count()) == 1
    assert second.states["npm1"].last_sync["sessions"]["adopted"] == 1


def test_restart_reconciles_switch_and_db(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    first = make_controller(switch)
    kept = key(H1, OUT1, pc.IP_PROTO_TCP, 40000, 80)
    aged = key(H2, OUT1, pc.IP_PROTO_TCP, 40001, 80)
    install_flows(switch, kept, aged)
    first.stop()
    encoder = first.sessions.encoder("npm1") if first.sessions else None
    assert encoder is not None
    # While no controller listened: one session aged out, a route was lost, a stray entry and
    # an unknown but complete session appeared.
    for flow in (aged, (aged[1], aged[0], 6, aged[4], aged[3])):
        assert switch.remove(encoder.match(flow))
    route = switch.table_entries(pc.T_ROUTING)[0]
    assert switch.remove(route)
    stray = encoder.entry(key(H2, OUT1, pc.IP_PROTO_UDP, 1, 2), None, 0)
    unknown = key(H2, OUT1, pc.IP_PROTO_UDP, 7000, 53)
    params = {n: 0 for n in pc.ACTION_PARAMS[pc.A_SESSION_FORWARD]}
    switch.plant(stray)
    switch.plant(encoder.entry(unknown, params, 30 * 10**9))
    switch.plant(encoder.entry((unknown[1], unknown[0], 17, 53, 7000), params, 30 * 10**9))
    second = make_controller(switch)
    report = second.states["npm1"].last_sync["sessions"]
    assert report == {
        "adopted": 1,
        "adopted_from_switch": 1,
        "reinstalled": 0,
        "dropped_from_db": 1,
        "deleted_orphans": 1,
    }
    assert switch.find_entry(pc.T_ROUTING, route) is not None, "the lost route is back"
    assert switch.find_entry(pc.T_SESSION, stray) is None, "the stray entry is gone"
    rows = {(r["src"], r["sport"]) for r in second.db.sessions()}
    assert rows == {(kept[0], kept[3]), (unknown[0], unknown[3])}


def _classifier_updates(
    controller: Controller, requests: list[p4r.WriteRequest]
) -> list[tuple[int, str, int | None]]:
    """(request number, table, bank) of every classification update, in order."""
    schema = controller.npms["npm1"].schema
    out = []
    names = {schema.tables.get(t).id: t for t in (*CLASSIFICATION_TABLES, pc.T_CLASSIFIER_VERSION)}
    for number, request_ in enumerate(requests):
        for update in request_.updates:
            entry = update.entity.table_entry
            table = names.get(entry.table_id)
            if table is None:
                continue
            bank = None
            if table != pc.T_CLASSIFIER_VERSION:
                version_id = schema.tables.get(table).field("version").id
                (match,) = [m for m in entry.match if m.field_id == version_id]
                bank = int.from_bytes(match.exact.value, "big")
            out.append((number, table, bank))
    return out


def test_policy_update_writes_the_idle_bank_then_flips(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    controller = make_controller(switch)
    active = controller.states["npm1"].classifier.active
    switch.keep_requests()
    text = lab.read_text()
    lab.write_text(
        text.replace(
            "    - {name: lan-out, src: inside, action: permit}",
            "    - {name: no-smtp, src: inside, proto: tcp, dport: 25, action: deny}\n"
            "    - {name: lan-out, src: inside, action: permit}",
        )
    )
    result = apply(controller, lab)
    updates = _classifier_updates(controller, switch.requests)
    assert updates, "the ACL changed, so the classifier must change"
    flips = [u for u in updates if u[1] == pc.T_CLASSIFIER_VERSION]
    assert len(flips) == 1 and updates[-1] == flips[0], "the flip is the last classifier write"
    assert {bank for _, _, bank in updates[:-1]} == {1 - active}, "only the idle bank is written"
    assert controller.states["npm1"].classifier.active == 1 - active
    assert default_of(controller, switch, pc.T_CLASSIFIER_VERSION).params_dict == {
        "version": 1 - active
    }
    # Only the difference: the base configuration did not change.
    base_tables = {pc.T_PORT_ROLE, pc.T_ROUTING, pc.T_ARP_RESPONDER, pc.T_SNAT_RULE}
    schema = controller.npms["npm1"].schema
    touched = {
        schema.tables.get_id(u.entity.table_entry.table_id).name
        for r in switch.requests
        for u in r.updates
        if u.entity.HasField("table_entry") and u.entity.table_entry.table_id
    }
    assert not touched & base_tables
    assert result["version"] == 2
    # A NAT-only change writes no classification entry at all.
    switch.requests.clear()
    lab.write_text(
        lab.read_text().replace("port: 8080, to: 10.0.1.10", "port: 8081, to: 10.0.1.10")
    )
    apply(controller, lab)
    assert _classifier_updates(controller, switch.requests) == []
    # The new dnat_rule entry is inserted, the old one deleted; nothing else is written.
    assert [
        (u.type, u.entity.table_entry.table_id) for r in switch.requests for u in r.updates
    ] == [
        (p4r.Update.INSERT, schema.tables.get(pc.T_DNAT_RULE).id),
        (p4r.Update.DELETE, schema.tables.get(pc.T_DNAT_RULE).id),
    ]


def test_a_refused_policy_never_replaces_the_running_one(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    controller = make_controller(switch)
    running = controller.policy
    routes_before = decoded(controller, switch.table_entries(pc.T_ROUTING))
    lab.write_text(
        lab.read_text().replace(
            "  - {prefix: 203.0.113.0/24, via: 198.51.100.20}",
            "  - {prefix: 203.0.113.0/24, via: 198.51.100.20}\n"
            "  - {prefix: 192.0.2.0/24, via: 198.51.100.20}",
        )
    )
    switch.fail_next_writes((grpc.StatusCode.RESOURCE_EXHAUSTED, "table is full"))
    with pytest.raises(RequestError) as caught:
        apply(controller, lab)
    assert caught.value.status == 409
    assert controller.policy is running
    assert decoded(controller, switch.table_entries(pc.T_ROUTING)) == routes_before
    versions = controller.db.policy_versions()
    assert [(v.version, v.status) for v in versions] == [(2, "failed"), (1, "applied")]
    # The same policy applies once the switch accepts it.
    assert apply(controller, lab)["version"] == 3


def test_invalid_policy_file_at_start_keeps_the_stored_version(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    first = make_controller(switch)
    first.stop()
    lab.write_text(lab.read_text().replace("role: outside", "role: nowhere"))
    second = make_controller(switch)
    assert second.policy_version == 1
    assert second.policy is not None and second.policy.name == "lab"


def test_standby_takes_over_when_the_primary_dies(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    primary = make_controller(switch, election_id=20)
    standby = make_controller(switch, election_id=10)
    assert standby.states["npm1"].role == "standby"
    install_flows(switch, key(H1, OUT1, pc.IP_PROTO_TCP, 40000, 80))
    writes = len(switch.writes)
    primary.stop()
    wait_until(
        "the standby to become primary",
        lambda: standby.states["npm1"].role == "primary" and standby.states["npm1"].synced.is_set(),
        timeout=10,
    )
    assert standby.npms["npm1"].pipeline_pushed is False
    assert len(switch.writes) == writes, "the take-over found everything in place"
    assert standby.states["npm1"].last_sync["sessions"]["adopted"] == 1
    install_flows(switch, key(H2, OUT1, pc.IP_PROTO_TCP, 40001, 80))
    assert standby.bus.call(lambda: standby.sessions and standby.sessions.count()) == 2


def test_restart_after_policy_updates_trusts_the_classifier_it_recorded(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    """After updates, class numbers depend on the history; a restart must not recompile and
    rewrite the tables because a fresh compile would number them differently."""
    first = make_controller(switch)
    text = lab.read_text()
    for port in (25, 26):
        lab.write_text(
            text.replace(
                "    - {name: lan-out, src: inside, action: permit}",
                f"    - {{name: no-smtp, src: inside, proto: tcp, dport: {port}, action: deny}}\n"
                "    - {name: lan-out, src: inside, action: permit}",
            )
        )
        apply(first, lab)
    first.stop()
    writes = len(switch.writes)
    second = make_controller(switch)
    assert len(switch.writes) == writes
    assert second.states["npm1"].last_sync["writes"]["classifier"] == "unchanged"


def test_a_restarted_switch_gets_its_pipeline_base_and_sessions_back(
    make_controller: ControllerFactory,
) -> None:
    with SwitchDouble() as first:
        controller = make_controller(first)
        install_flows(first, key(H1, OUT1, pc.IP_PROTO_TCP, 40000, 80))
        port = first.port
    # The switch restarts empty on the same address; the controller reconnects on its own.
    with SwitchDouble(port=port) as second:
        wait_until(
            "the sessions back on the new switch",
            lambda: len(second.table_entries(pc.T_SESSION)) == 2 if second.pipeline else False,
            timeout=15,
        )
        state = controller.states["npm1"]
        wait_until("the take-over finished", lambda: state.last_sync["sessions"]["reinstalled"])
        assert state.last_sync["pipeline_pushed"] is True
        assert len(second.table_entries(pc.T_PORT_ROLE)) == 4
