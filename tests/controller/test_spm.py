"""SPM load reports -> selector weights; a silent SPM is out within 3 s and its flows follow
the pool's fail policy; an SPM that reports again rejoins for new flows."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from finsy.proto import p4r

from controller import baseconfig, runtime
from controller import events as ev
from controller.runtime import Controller
from opengate import p4constants as pc
from tests.controller.conftest import ControllerFactory, wait_until
from tests.controller.flows import H1, H2, OUT1, SPM1_MAC, key, request
from tests.switch_double import SwitchDouble


def weights(controller: Controller, switch: SwitchDouble, group_id: int) -> dict[str, int]:
    assert controller.policy is not None
    names = {s.member_id: s.name for s in controller.policy.spms}
    for group in (e.action_profile_group for e in switch.entities("action_profile_group")):
        if group.group_id == group_id:
            return {names[m.member_id]: m.weight for m in group.members}
    return {}


def report(controller: Controller, spm: str, cpu: float = 0.0, queue_depth: int = 0) -> None:
    load = {
        "ts": time.time(),
        "cpu": cpu,
        "queue_depth": queue_depth,
        "pps": 0,
        "bps": 0,
        "mem_bytes": 0,
        "workers": 1,
        "flows": 0,
    }
    controller.bus.publish(ev.SpmLoadReport(spm, load)).result(timeout=5)


def session_action(
    switch: SwitchDouble, controller: Controller, flow: tuple[int, ...]
) -> tuple[str, int]:
    assert controller.sessions is not None
    encoder = controller.sessions.encoder("npm1")
    entry = switch.find_entry(pc.T_SESSION, encoder.match(flow))  # type: ignore[arg-type]
    assert entry is not None
    params = encoder.decode_params(entry)
    if params is None:
        return ("block", 0)
    return ("forward", params["spm_port"])


def test_load_reports_move_weights_and_steady_load_writes_nothing(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    controller = make_controller(switch)
    assert weights(controller, switch, 1) == {"spm1": 8, "spm2": 8}
    report(controller, "spm1", cpu=50)
    report(controller, "spm2", cpu=0, queue_depth=250)  # a quarter of the queue limit
    assert weights(controller, switch, 1) == {"spm1": 4, "spm2": 6}
    assert weights(controller, switch, 2) == {"spm1": 4}
    writes = len(switch.writes)
    report(controller, "spm1", cpu=50)
    assert len(switch.writes) == writes, "the same load again changes no weight"
    report(controller, "spm1", cpu=0)  # smoothed: load 0.25 -> weight 6
    assert weights(controller, switch, 1) == {"spm1": 6, "spm2": 6}
    assert controller.db.spms()[0]["status"] == "up"


def test_weights_that_move_rewrite_the_selector_alone(
    switch: SwitchDouble, make_controller: ControllerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the SPMs' load moves their weights, the CPM makes and writes the selector's groups
    alone: the rest of the base config (every cell of the per-source meters among it) is made
    once per policy and NPM. Making it at each change took a sixth of the CPM's interpreter
    during a flood of new flows."""
    made: list[int] = []
    real = baseconfig.static_base

    def counting(policy: Any, tag_base: int, *rest: Any) -> Any:
        made.append(tag_base)
        return real(policy, tag_base, *rest)

    monkeypatch.setattr(runtime, "static_base", counting)
    controller = make_controller(switch)
    assert len(made) == 1  # the take-over
    writes = len(switch.writes)
    report(controller, "spm1", cpu=50)
    report(controller, "spm2", cpu=0, queue_depth=250)
    assert weights(controller, switch, 1) == {"spm1": 4, "spm2": 6}
    assert len(made) == 1
    kinds = [k for w in switch.writes[writes:] for k in w.kinds]
    assert kinds and set(kinds) == {"action_profile_group"}, kinds


def test_silent_spm_is_out_within_3_seconds_and_its_flows_follow_the_fail_policy(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    # The policy's default liveness (down_after 2.5 s), with the production tick (0.25 s).
    lab.write_text(lab.read_text().replace("  down_after: 0 ", "  # down_after default "))
    controller = make_controller(switch, tick=0.25)
    inspected = key(H1, OUT1, pc.IP_PROTO_TCP, 40000, 80)  # class 1: pool main, re-steer
    strict = key(H2, OUT1, pc.IP_PROTO_UDP, 5353, 53)  # class 3: pool strict, fail-closed
    switch.inject_digest(
        pc.D_SESSION_REQUEST_T,
        [
            request(inspected, ids_class=1, spm_port=3, spm_mac=SPM1_MAC),
            request(strict, ids_class=3, spm_port=3, spm_mac=SPM1_MAC),
        ],
    )
    wait_until("four entries", lambda: len(switch.table_entries(pc.T_SESSION)) == 4)
    stop = threading.Event()

    def spm2_daemon() -> None:
        while not stop.is_set():
            report(controller, "spm2")
            stop.wait(0.5)

    daemon = threading.Thread(target=spm2_daemon, daemon=True)
    report(controller, "spm1")
    last_report = time.monotonic()
    daemon.start()
    try:
        wait_until(
            "spm1 out of the selector",
            lambda: "spm1" not in weights(controller, switch, 1),
            timeout=5,
        )
        taken_out_after = time.monotonic() - last_report
        assert taken_out_after < 3.0
        controller.bus.call(lambda: None)  # the handler that took it out has finished
        assert weights(controller, switch, 1) == {"spm2": 8}
        # The strict pool has no SPM left: its selector entry is gone (a miss = no SPM).
        assert [
            e
            for e in switch.table_entries(pc.T_SPM_SELECT)
            if e.action.action_profile_group_id == 2
        ] == []
        assert session_action(switch, controller, inspected) == ("forward", 4)
        assert session_action(switch, controller, (inspected[1], inspected[0], 6, 80, 40000)) == (
            "forward",
            4,
        )
        assert session_action(switch, controller, strict) == ("block", 0)
        statuses = {row["name"]: row["status"] for row in controller.db.spms()}
        assert statuses == {"spm1": "down", "spm2": "up"}
        # spm1 comes back: it rejoins for new flows; the moved flow stays on spm2.
        report(controller, "spm1", cpu=0)
        assert weights(controller, switch, 1) == {"spm1": 8, "spm2": 8}
        assert session_action(switch, controller, inspected) == ("forward", 4)
    finally:
        stop.set()
        daemon.join()


def test_member_and_group_messages_are_exact(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    controller = make_controller(switch)
    conn = controller.npms["npm1"]
    assert controller.policy is not None
    spm1 = controller.policy.spm_by_name("spm1")
    assert spm1 is not None
    expected = p4r.ActionProfileMember(action_profile_id=conn.profile_id, member_id=spm1.member_id)
    expected.action.CopyFrom(
        conn.schema.encode_action(conn.steer_action, {"port": 3, "spm_mac": SPM1_MAC})
    )
    (member,) = [
        e.action_profile_member
        for e in switch.entities("action_profile_member")
        if e.action_profile_member.member_id == spm1.member_id
    ]
    assert member == expected
