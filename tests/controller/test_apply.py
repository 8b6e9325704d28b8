"""A policy apply is all or nothing: whatever step fails (a switch Write partway through the
classifier's idle bank, the base additions, the bank flip or the base removals; the database
record), the database, the controller and the switch agree afterwards on the policy that was
running, and the switch holds exactly what the controller believes it holds. What the database
cannot store is refused before the first write."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import grpc
import pytest
from sqlalchemy.exc import OperationalError

from controller import events as ev
from controller.baseconfig import diff_base
from controller.classifier import entries_digest, rules_digest, split_plan
from controller.errors import RequestError
from controller.policy import Policy, load_policy
from controller.runtime import Controller, NpmState
from tests.controller.conftest import ControllerFactory
from tests.switch_double import SwitchDouble

# The change every apply here makes: a route (base additions and removals) and the ACL rules
# (the classifier's idle bank and its flip).
ROUTE = "  - {prefix: 203.0.113.0/24, via: 198.51.100.20}"
RULE = "    - {name: lan-out, src: inside, action: permit}"


def changed(lab: Path) -> Policy:
    text = (
        lab.read_text()
        .replace(ROUTE, "  - {prefix: 192.0.2.0/24, via: 198.51.100.20}")
        .replace(
            RULE,
            f"    - {{name: no-smtp, src: inside, proto: tcp, dport: 25, action: deny}}\n{RULE}",
        )
    )
    return load_policy(lab, text)


def apply(controller: Controller, policy: Policy) -> Any:
    (result,) = controller.bus.publish(ev.PolicyApplyRequested(policy, "test")).result(30)
    return result


def phases(controller: Controller, state: NpmState, policy: Policy) -> dict[str, int]:
    """The index of the first update of each step of applying `policy`, as sent in order."""
    plan = controller.bus.call(lambda: controller._plan_npm(state, policy))
    assert plan.update is not None, "the rules must change"
    body, flip = split_plan(plan.update, plan.flip_extra)
    assert flip is not None
    diff = plan.base_diff
    idle = sum(len(batch) for batch in body)
    removals = len(diff.delete_entries + diff.delete_groups + diff.delete_members)
    additions = diff.count() - removals
    assert idle > 2 and additions > 0 and diff.delete_entries, "each step must write something"
    return {
        "idle bank": 0,
        "idle bank, midway": idle // 2,
        "base additions": idle,
        "flip": idle + additions,
        "base removals": idle + additions + len(flip),
        "after the removals": idle + additions + len(flip) + removals,
    }


def assert_agree(controller: Controller, running: Policy) -> None:
    """The DB, the controller and the switch hold `running`, and the switch holds what the
    controller believes it does."""
    assert controller.policy is running
    assert controller.db_writer.flush()
    stored = controller.db.active_policy()
    assert stored is not None
    assert (stored.version, stored.sha256) == (controller.policy_version, running.sha256)
    for name, state in controller.states.items():
        conn = state.conn
        on_switch = conn.read_base()
        assert state.base is not None
        assert diff_base(on_switch, state.base).count() == 0, f"{name}: the base it believes in"
        weights = controller.bus.call(lambda: controller._weights_for(running))
        desired = controller.bus.call(partial(controller._desired_base, running, state, weights))
        assert diff_base(on_switch, desired).count() == 0, f"{name}: the running policy's base"
        active, entries = conn.read_classification()
        banks = state.classifier
        assert (banks.active, banks.installed) == (active, frozenset(entries)), name
        # what a restart trusts without compiling: the bank, the rules and its entries
        recorded = controller.db.classifier_state(name)
        assert recorded == (active, rules_digest(running), entries_digest(entries, active)), name


@pytest.mark.parametrize(
    "step", ["idle bank", "idle bank, midway", "base additions", "flip", "base removals"]
)
def test_a_switch_write_failing_at_any_step_leaves_the_running_policy_everywhere(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path, step: str
) -> None:
    controller = make_controller(switch)
    running = controller.policy
    assert running is not None
    new = changed(lab)
    [state] = controller.states.values()
    at = phases(controller, state, new)[step]
    switch.fail_next_writes(*[None] * at, (grpc.StatusCode.RESOURCE_EXHAUSTED, "table is full"))
    with pytest.raises(RequestError) as refused:
        apply(controller, new)
    assert refused.value.status == 409
    assert "version 1 (lab) runs on every NPM, as before" in refused.value.message
    assert_agree(controller, running)
    versions = controller.db.policy_versions()
    assert [(v.version, v.status) for v in versions] == [(2, "failed"), (1, "applied")]
    # nothing is left half-done: the same policy applies once the switch takes it
    assert apply(controller, new)["version"] == 3
    assert_agree(controller, new)


def test_a_database_failure_puts_the_switch_back(
    switch: SwitchDouble,
    make_controller: ControllerFactory,
    lab: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    controller = make_controller(switch)
    running = controller.policy
    assert running is not None
    new = changed(lab)
    real = controller.db.add_policy_version

    def failing(**values: Any) -> int:
        raise OperationalError("INSERT INTO policy_versions", {}, Exception("disk I/O error"))

    monkeypatch.setattr(controller.db, "add_policy_version", failing)
    writes = len(switch.writes)
    with pytest.raises(RequestError) as refused:
        apply(controller, new)
    assert refused.value.status == 503
    assert "the database did not record the new policy" in refused.value.message
    assert "version 1 (lab) runs on every NPM, as before" in refused.value.message
    assert len(switch.writes) > writes  # it was written, then put back
    assert_agree(controller, running)
    monkeypatch.setattr(controller.db, "add_policy_version", real)
    assert apply(controller, new)["version"] == 2
    assert_agree(controller, new)


def test_an_npm_that_cannot_be_put_back_is_reconciled_and_says_so(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    """The flip fails and so does the first write back: the answer says what runs, the NPM's
    status says why, and the ticker reconciles it to the running policy."""
    controller = make_controller(switch)
    running = controller.policy
    assert running is not None
    new = changed(lab)
    [state] = controller.states.values()
    steps = phases(controller, state, new)
    at, after = steps["base removals"], steps["after the removals"]
    full = (grpc.StatusCode.RESOURCE_EXHAUSTED, "table is full")
    # the first removal fails (the others go through), then the first update putting it back
    switch.fail_next_writes(*[None] * at, full, *[None] * (after - at - 1), full)
    with pytest.raises(RequestError) as refused:
        apply(controller, new)
    assert refused.value.status == 409
    assert "could not be written back to npm1" in refused.value.message
    assert controller.policy is running
    assert controller.wait_synced(20)
    assert controller.status()["npms"]["npm1"]["error"] is None
    assert_agree(controller, running)


def test_text_the_database_cannot_store_is_refused_before_any_write(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    """A name of 201 characters fits the policy but not the version history's column."""
    controller = make_controller(switch)
    running = controller.policy
    assert running is not None
    long_name = load_policy(lab, lab.read_text().replace("name: lab", f"name: {'x' * 201}"))
    writes = len(switch.writes)
    with pytest.raises(RequestError) as refused:
        apply(controller, long_name)
    assert refused.value.status == 422
    assert "name is longer than 200 characters" in refused.value.message
    assert len(switch.writes) == writes
    assert_agree(controller, running)
    assert controller.status()["policy"]["name"] == "lab"
