"""Incremental updates: minimal diffs into the idle bank, then one flip; never a mixed result."""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.hsm import schema
from controller.hsm.compile import compile_hsm
from controller.hsm.linear import Classification, LinearClassifier
from controller.hsm.lookup import Op, TableState, Walker
from controller.hsm.rules import AclAction, AclRule, IdsRule, parse_classbench
from controller.hsm.update import ClassifierBanks, UpdatePlan, entry_version, plan_update
from opengate.fields import Packet, PortRange

from .conftest import acl_rules, edge_packets, ids_rule_lists, rule_packets

EXAMPLES = 150 if os.environ.get("HSM_SLOW") else 25


def _apply(state: TableState, plan: UpdatePlan) -> None:
    for op, entry in plan.writes:
        state.apply(op, entry)


def _install(banks: ClassifierBanks, state: TableState, acl: Sequence[AclRule],
             ids: Sequence[IdsRule]) -> UpdatePlan:  # fmt: skip
    new, plan = banks.prepare(acl, ids)
    _apply(state, plan)
    banks.commit(new, plan)
    return plan


def _check_plan_shape(plan: UpdatePlan) -> None:
    """Only the idle bank is written, and the flip comes last, alone."""
    if not plan.batches:
        return
    *body, last = plan.batches
    assert last == ((Op.MODIFY, last[0][1]),) and last[0][1].table == schema.CLASSIFIER_VERSION
    assert last[0][1].params_dict == {"version": plan.to_version}
    for batch in body:
        for _op, entry in batch:
            assert entry_version(entry) == plan.to_version != plan.from_version


def _packets(*rule_sets: Sequence[AclRule | IdsRule], count: int = 48) -> list[Packet]:
    """Packets inside the rules, and a sample of segment edges."""
    rules = [r for rule_set in rule_sets for r in rule_set]
    edges = list(edge_packets(rules))
    return [*rule_packets(rules, count // 2), *random.Random(3).sample(edges, count // 2)]


def _check_hitless(
    state: TableState, plan: UpdatePlan, packets: Sequence[Packet],
    old: Sequence[Classification], new: Sequence[Classification],
) -> None:  # fmt: skip
    walker = Walker(state)
    for op, entry in plan.writes:
        state.apply(op, entry)
        for packet, before, after in zip(packets, old, new, strict=True):
            got = walker.classify(packet)  # reads the bank once, at the start
            assert got in (before, after), (op, entry, packet)
    for packet, after in zip(packets, new, strict=True):
        assert walker.classify(packet) == after


rule_sets = st.tuples(st.lists(acl_rules(), max_size=6), ids_rule_lists(max_size=4))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=rule_sets, second=rule_sets, third=rule_sets)
def test_every_write_of_an_update_leaves_old_or_new_classification(
    first: tuple[list[AclRule], list[IdsRule]],
    second: tuple[list[AclRule], list[IdsRule]],
    third: tuple[list[AclRule], list[IdsRule]],
) -> None:
    banks, state = ClassifierBanks(), TableState()
    packets = _packets(*first, *second, *third)
    previous = [Classification(-1, None, 0, -1)] * len(packets)
    # Three updates: into an empty bank, into the other empty bank, then over the oldest one.
    for acl, ids in (first, second, third):
        new, plan = banks.prepare(acl, ids)
        _check_plan_shape(plan)
        expected = [LinearClassifier(acl, ids).classify(p) for p in packets]
        _check_hitless(state, plan, packets, previous, expected)
        banks.commit(new, plan)
        assert state.entries() == banks.installed | {e for e in state.entries() if e.is_default}
        previous = expected


def test_unchanged_rules_need_no_writes(classbench_dir: Path) -> None:
    acl = parse_classbench(classbench_dir / "acl1_1k", limit=200)
    banks, state = ClassifierBanks(), TableState()
    _install(banks, state, acl, [])
    assert _install(banks, state, acl, []).batches == ()


def _third_plan(
    base: list[AclRule], other: list[AclRule], target: list[AclRule]
) -> tuple[UpdatePlan, int]:
    """Install base (bank 1), other (bank 0), then target over base: the plan of that last
    update, and the size of target's full content."""
    banks, state = ClassifierBanks(), TableState()
    _install(banks, state, base, [])
    _install(banks, state, other, [])
    plan = _install(banks, state, target, [])
    return plan, len(compile_hsm(target, []).entries)


def _with(acl: list[AclRule], index: int, rule: AclRule) -> list[AclRule]:
    return [*acl[:index], rule, *acl[index + 1 :]]


def test_changing_one_rules_action_only_modifies_its_verdicts(classbench_dir: Path) -> None:
    acl = parse_classbench(classbench_dir / "acl1_1k", limit=200)
    other = _with(acl, 30, replace(acl[30], action=AclAction.TO_CPU))
    target = _with(acl, 17, replace(acl[17], action=AclAction.DENY))
    plan, _ = _third_plan(acl, other, target)
    ours = [e for e in compile_hsm(target, []).entries if e.params_dict.get("rule_id") == 17]
    assert plan.count(Op.INSERT) == plan.count(Op.DELETE) == 0
    assert plan.count(Op.MODIFY) == len(ours) > 0
    assert all(e.table == "acl_verdict" and e.action == "acl_deny" for _, e in plan.writes[:-1])


def test_changing_one_rules_port_writes_a_small_diff(classbench_dir: Path) -> None:
    acl = parse_classbench(classbench_dir / "acl1_1k", limit=300)
    other = _with(acl, 30, replace(acl[30], action=AclAction.TO_CPU))
    target = _with(acl, 40, replace(acl[40], dport=(PortRange(4444, 4444),)))
    plan, total = _third_plan(acl, other, target)
    assert 0 < len(plan.writes) < total // 10, (len(plan.writes), total)


def test_plan_from_installed_entries_alone_is_hitless_too(classbench_dir: Path) -> None:
    """plan_update needs only the switch's entries and the active bank (no compile history)."""
    acl = parse_classbench(classbench_dir / "fw1_1k", limit=60)
    other = parse_classbench(classbench_dir / "ipc1_1k", limit=60)
    state = TableState()
    _apply(state, plan_update(state.entries(), 0, compile_hsm(acl, [])))
    assert state.active_version() == 1
    packets = _packets(acl, other)
    old = [LinearClassifier(acl, []).classify(p) for p in packets]
    new = [LinearClassifier(other, []).classify(p) for p in packets]
    plan = plan_update(state.entries(), state.active_version(), compile_hsm(other, []))
    _check_plan_shape(plan)
    _check_hitless(state, plan, packets, old, new)
    assert state.active_version() == 0
