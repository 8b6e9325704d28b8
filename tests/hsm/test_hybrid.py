"""The hybrid (HSM in three ACL partitions plus spill tables) classifies exactly as first-match
linear search does, for any split of the rules between the partitions and the spill tables (rules
spilled, rules shadowed by spilled rules or by rules of another partition, spilled rules
shadowed by kept ones); the compiler partitions and spills only when HSM alone does not fit, and
the ClassBench sets whose cross products overflow fit with three partitions and a small spill."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.hsm import schema
from controller.hsm.compile import TableOverflow, acl_terms, compile_hsm, default_limits
from controller.hsm.hybrid import (
    SpillPlan,
    _by_kinds,
    _partitions,
    _ranked,
    compile_hybrid,
    compile_spilled,
)
from controller.hsm.lookup import TableState
from controller.hsm.rules import AclAction, AclRule, IdsRule, parse_classbench
from controller.hsm.spill_cost import TableBudgets
from controller.hsm.tables import compile_tables
from controller.hsm.update import entry_version, plan_update
from opengate.fields import PortRange, Prefix

from .conftest import acl_rules, ids_rule_lists
from .test_equivalence import EXAMPLES, _packets, assert_same_as_linear


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    acl=st.lists(acl_rules(), max_size=10),
    ids=ids_rule_lists(),
    data=st.data(),
)
def test_any_split_between_partitions_and_spill_tables_classifies_like_linear_search(
    acl: list[AclRule], ids: list[IdsRule], data: st.DataObject
) -> None:
    positions = st.sets(st.sampled_from(range(len(acl)))) if acl else st.just(set())
    spilled_acl = data.draw(positions)
    # the other partitions (as many as the program has, or fewer) may hold spilled rules too
    # (spilled wins) and overlap (the earlier partition wins)
    count = data.draw(st.integers(0, len(schema.PARTITION_SIDES)))
    parts = [data.draw(positions) for _ in range(count)]
    ids_ids = [r.rule_id for r in ids]
    spilled_ids = data.draw(st.sets(st.sampled_from(ids_ids)) if ids else st.just(set()))
    plan = SpillPlan(
        frozenset(spilled_acl), frozenset(spilled_ids), tuple(frozenset(p) for p in parts)
    )
    compiled = compile_spilled(acl, ids, plan, partitioned=True)
    assert compiled.stats.acl_spilled == len(spilled_acl)
    kept = {t.rule_id for t in acl_terms(acl)} - spilled_acl
    held: list[int] = []
    taken: set[int] = set()
    for part in parts:
        held.append(len(kept & part - taken))
        taken |= part
    held += [0] * (len(schema.PARTITION_SIDES) - count)
    assert compiled.stats.partition_terms == tuple(held)
    assert_same_as_linear(compiled.entries, acl, ids, _packets(acl, ids, 60))


@settings(max_examples=EXAMPLES // 2, deadline=None)
@given(acl=st.lists(acl_rules(), min_size=2, max_size=10), ids=ids_rule_lists(max_size=6))
def test_tables_too_small_for_hsm_alone_make_the_compiler_spill(
    acl: list[AclRule], ids: list[IdsRule]
) -> None:
    limits = {schema.ACL_CHAIN.final: 2, schema.IDS_CHAIN.final: 2}
    compiled = compile_hybrid(acl, ids, limits=limits, shrink_seconds=5)
    for table in (schema.ACL_CHAIN.final, schema.IDS_CHAIN.final):
        assert compiled.stats.entries(table) <= 2
    assert_same_as_linear(compiled.entries, acl, ids, _packets(acl, ids, 40))


def test_no_spill_when_hsm_fits() -> None:
    acl = [AclRule(), AclRule()]
    compiled = compile_hybrid(acl, [])
    assert (compiled.stats.acl_spilled, compiled.stats.ids_spilled) == (0, 0)
    assert not [e for e in compiled.entries if e.table in schema.SPILL_TABLES.values()]


def test_a_spill_the_tables_cannot_hold_is_refused() -> None:
    acl = host_rules(40)
    with pytest.raises(TableOverflow) as caught:
        compile_hybrid(acl, [], limits={schema.ACL_CHAIN.final: 1, schema.ACL_SPILL: 3})
    assert caught.value.table == schema.ACL_CHAIN.final
    assert "even with 3 ACL rules spilled, all the spill tables hold" in str(caught.value)


def host_rules(count: int, first: int = 0) -> list[AclRule]:
    """`count` distinct host-to-host rules (each its own HSM cells)."""
    return [
        AclRule(
            src=(Prefix(0x0A000000 + i, 32),),
            dst=(Prefix(0x0B000000 + i, 32),),
            dport=(PortRange(i, i),),
            action=AclAction.DENY if i % 3 else AclAction.PERMIT,
        )
        for i in range(first, first + count)
    ]


PACKETS_CHECKED = 4000


@pytest.mark.parametrize("name", ["fw1_1k", "ipc1_1k", "acl1_10k", "fw1_10k", "ipc1_10k"])
def test_classbench_sets_that_overflow_fit_with_partitions_and_a_small_spill(
    classbench_dir: Path, name: str
) -> None:
    acl = parse_classbench(classbench_dir / name)
    with pytest.raises(TableOverflow):
        compile_hsm(acl, [])
    started = time.perf_counter()
    compiled = compile_tables(acl, [], fallback=False)
    seconds = time.perf_counter() - started
    stats = compiled.stats
    assert stats.profile == "hsm"
    assert 0 < sum(stats.partition_terms) < stats.acl_terms  # partitioned
    assert stats.entries(schema.ACL_SPILL) <= schema.table_capacity(schema.ACL_SPILL) // 2
    for table in (*schema.HSM_TABLES, *schema.PARTITION_TABLES):
        assert stats.entries(table) <= schema.table_capacity(table) // 2, table
    # Packets inside the rules and at segment edges (fw1_10k has 36,841, which linear search
    # over its 9,379 rules took ten minutes to check on a loaded machine): a seeded sample.
    packets = _packets(acl, [], 400)
    sample = random.Random(name).sample(packets, min(len(packets), PACKETS_CHECKED))
    assert_same_as_linear(compiled.entries, acl, [], sample)
    print(
        f"{name}: {stats.partition_terms} terms in the other partitions, {stats.acl_spilled} of "
        f"{len(acl)} rules spilled in {seconds:.1f}s"
    )
    assert stats.acl_spilled <= 0.05 * len(acl)  # issue #17's goal: at most 5 % spilled


def test_rules_wide_in_both_addresses_are_spilled_first() -> None:
    def rule(src: Prefix, dst: Prefix, dport: int) -> AclRule:
        return AclRule(
            src=(src,),
            dst=(dst,),
            sport=(PortRange(0, 65535),),
            dport=(PortRange(dport, dport),),
        )

    anything = Prefix(0, 0)
    rules = [
        rule(Prefix(0x0A000000, 32), Prefix(0x0B000000, 24), 80),  # narrow, many cells of ports
        rule(anything, anything, 22),  # any/any: index 0 stands for it
        rule(Prefix(0x0A000000, 8), Prefix(0x0C000000, 6), 443),  # wide in both
        rule(Prefix(0x0A000000, 16), anything, 25),
    ]
    ranked = _ranked(acl_terms(rules))
    assert ranked[0] == 2
    assert set(ranked) == {0, 1, 2, 3}


def test_a_hybrid_update_writes_the_idle_bank_then_flips() -> None:
    """From one hybrid rule set to another: every write before the flip is to the idle bank
    (spill entries included) and leaves the running classification as it was; after the flip
    the new rules classify exactly."""
    old, new = host_rules(30), host_rules(30, first=10)
    limits = {schema.ACL_CHAIN.final: 8}
    first = compile_tables(old, [], version=0, limits=limits, fallback=False)
    second = compile_tables(new, [], version=1, limits=limits, fallback=False)
    assert first.stats.acl_spilled and second.stats.acl_spilled
    state = TableState(first.entries)
    packets = _packets([*old, *new], [], 200)
    plan = plan_update(state.entries(), 0, second)
    *before_flip, flip = plan.writes
    assert {entry_version(e) for _, e in before_flip} == {1}
    assert any(e.table == schema.ACL_SPILL for _, e in before_flip)
    for op, entry in before_flip:
        state.apply(op, entry)
    assert_same_as_linear(state.entries(), old, [], packets)
    state.apply(*flip)
    assert_same_as_linear(state.entries(), new, [], packets)
    # and back into bank 0, where the first rule set's spilled rules must not survive
    third = compile_tables(
        host_rules(30, first=20), [], version=0, reuse=first, limits=limits, fallback=False
    )
    for op, entry in plan_update(state.entries(), 1, third).writes:
        state.apply(op, entry)
    assert_same_as_linear(state.entries(), host_rules(30, first=20), [], packets)


def test_partitions_by_wide_side_and_rules_wide_in_both_spilled_first() -> None:
    """Rules wide in the source go to the second partition, wide in the destination to the
    third, the rest to the first; rules wide in both stay in the first while it holds them, and
    are spilled first when they would make it overflow."""

    def rule(src: Prefix, dst: Prefix, dport: PortRange) -> AclRule:
        return AclRule(src=(src,), dst=(dst,), dport=(dport,))

    anywhere = Prefix(0, 0)
    narrow = [rule(Prefix(0x0A000000 + i, 32), Prefix(0x0B000000 + i, 32), PortRange(0, 65535))
              for i in range(20)]  # fmt: skip
    wide_src = [rule(Prefix(0x0C000000, 8), Prefix(0x0B000100 + i, 32), PortRange(80, 80))
                for i in range(3)]  # fmt: skip
    wide_dst = [rule(Prefix(0x0A000100 + i, 32), Prefix(0x0C000000, 6), PortRange(25, 25))
                for i in range(3)]  # fmt: skip
    both = [rule(anywhere, anywhere, PortRange(1000 + i, 1000 + i)) for i in range(5)]
    acl = [*narrow, *wide_src, *wide_dst, *both]
    ids = {"src": frozenset(range(20, 23)), "dst": frozenset(range(23, 26))}
    ids["both"] = frozenset(range(26, 31))
    terms = acl_terms(acl)
    roomy = default_limits()
    parts = _partitions(terms, roomy, overflowed=True, spill_budget=1024)
    assert (parts.parts, parts.acl) == ((ids["src"], ids["dst"]), frozenset())
    # The first partition's final table: 20 address classes alone (any port); with the rules
    # wide in both, each address class meets their 5 ports as well.
    tight = {**roomy, schema.ACL_CHAIN.final: 60}
    parts = _partitions(terms, tight, overflowed=True, spill_budget=1024)
    assert (parts.parts, parts.acl) == ((ids["src"], ids["dst"]), ids["both"])
    # no room in the spill table for them: they stay, and the choice by cost decides
    parts = _partitions(terms, tight, overflowed=True, spill_budget=4)
    assert parts.acl == frozenset()
    compiled = compile_hybrid(acl, [], limits=tight, shrink_seconds=5)
    assert compiled.stats.acl_spilled >= 1
    assert compiled.stats.entries(schema.ACL_CHAIN.final) <= 60
    assert_same_as_linear(compiled.entries, acl, [], _packets(acl, [], 200))


def kinds_rules(count: int) -> tuple[list[AclRule], dict[str, frozenset[int]]]:
    """Host-pair rules of two kinds, `count` each: any port, and each to a port of its own. Apart,
    each kind needs `count` final entries; together every any-port rule meets every port class
    (count x (count + 1) more)."""
    any_port = [
        AclRule(src=(Prefix(0x0A000000 + i, 32),), dst=(Prefix(0x0B000000 + i, 32),))
        for i in range(count)
    ]
    one_port = [
        AclRule(
            src=(Prefix(0x0A100000 + i, 32),),
            dst=(Prefix(0x0B100000 + i, 32),),
            dport=(PortRange(1000 + i, 1000 + i),),
            action=AclAction.DENY,
        )
        for i in range(count)
    ]
    kinds = {"any": frozenset(range(count)), "port": frozenset(range(count, 2 * count))}
    return [*any_port, *one_port], kinds


def test_rules_narrow_in_both_addresses_are_split_by_their_ports() -> None:
    """All narrow in both addresses, so the split by addresses keeps them in one partition,
    whose final table is 20 x 21 + 20 entries; the grouping by kinds puts the any-port rules
    and the one-port rules in partitions of their own, and nothing is spilled."""
    acl, kinds = kinds_rules(20)
    terms = acl_terms(acl)
    tight = {**default_limits(), schema.ACL_CHAIN.final: 100}
    parts = _partitions(terms, tight, overflowed=True, spill_budget=1024)
    assert parts.acl == frozenset()
    first = frozenset(range(len(acl))) - parts.partitioned
    assert {first, *parts.parts} - {frozenset()} == set(kinds.values())
    compiled = compile_hybrid(acl, [], limits=tight, shrink_seconds=5)
    assert compiled.stats.acl_spilled == 0
    for chain in (schema.ACL_CHAIN, *schema.PARTITION_CHAINS):
        assert compiled.stats.entries(chain.final) <= 20
    assert_same_as_linear(compiled.entries, acl, [], _packets(acl, [], 200))


def test_kinds_are_merged_into_as_many_chains_as_there_are_and_the_cheapest_merge_first() -> None:
    """Three kinds for two chains: the five rules wide in the source (any port, sources of their
    own) add 5 final entries beside the any-port kind (one port class) and 5 x 21 beside the
    one-port kind, and the any-port and one-port kinds together need 440: only the first merge
    fits. With one chain, everything is in it, and the census says how far over its budget."""
    acl, kinds = kinds_rules(20)
    wide = [
        AclRule(src=(Prefix(0x0C000000 + (i << 24), 8),), dst=(Prefix(0x0D000000 + i, 32),))
        for i in range(5)
    ]
    acl += wide
    wide_ids = frozenset(range(40, 45))
    budgets = TableBudgets(1000, 1000, 100)
    groups, excess = _by_kinds(acl_terms(acl), 2, budgets)
    assert excess == 0
    assert sorted(groups, key=min) == [kinds["any"] | wide_ids, kinds["port"]]
    groups, excess = _by_kinds(acl_terms(acl), 1, budgets)
    assert groups == [frozenset(range(45))] and excess > 3.0
