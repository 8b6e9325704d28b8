"""When the HSM cross products do not fit a bank: stop early, fall back to the ternary baseline."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from controller.hsm import schema
from controller.hsm.compile import Profile, Size, TableOverflow, compile_hsm, ids_terms, measure_hsm
from controller.hsm.linear import LinearClassifier
from controller.hsm.lookup import TableState, Walker
from controller.hsm.rules import IdsRule, parse_classbench
from controller.hsm.tables import compile_tables
from opengate.fields import PortRange, ProtoMatch

from .conftest import rule_packets


def test_oversized_cross_product_falls_back_to_the_naive_profile(classbench_dir: Path) -> None:
    acl = parse_classbench(classbench_dir / "fw1_1k", limit=300)
    # A program without the spill tables (the TNA build): no hybrid.
    compiled = compile_tables(acl, [], limits={"acl_verdict": 1000}, hybrid=False)
    assert compiled.profile is Profile.NAIVE
    assert compiled.stats.fallback_reason is not None
    assert "acl_verdict needs at least" in compiled.stats.fallback_reason
    assert {e.table for e in compiled.entries} == {schema.ACL_NAIVE}
    walker, linear = Walker(TableState(compiled.entries)), LinearClassifier(acl, [])
    for packet in rule_packets(acl, 300):
        assert walker.classify(packet) == linear.classify(packet)


def test_without_fallback_an_oversized_table_is_an_error(classbench_dir: Path) -> None:
    acl = parse_classbench(classbench_dir / "fw1_1k", limit=300)
    with pytest.raises(TableOverflow) as info:
        compile_tables(acl, [], limits={"acl_addr_pair": 100}, fallback=False, hybrid=False)
    assert info.value.table == "acl_addr_pair" and info.value.needed > 100


def test_when_neither_profile_fits_the_error_says_both(classbench_dir: Path) -> None:
    acl = parse_classbench(classbench_dir / "fw1_1k", limit=300)
    with pytest.raises(TableOverflow, match="the naive fallback does not fit either"):
        compile_tables(acl, [], limits={"acl_verdict": 1000, "acl_naive": 100}, hybrid=False)


def test_default_budget_is_half_of_each_table(classbench_dir: Path) -> None:
    """Both banks must fit at once during an update."""
    acl = parse_classbench(classbench_dir / "acl1_1k")
    stats = compile_hsm(acl, []).stats
    for table in stats.tables:
        assert table.entries <= schema.table_capacity(table.table) // 2


def test_measured_sizes_are_the_sizes_the_compile_builds(classbench_dir: Path) -> None:
    acl = parse_classbench(classbench_dir / "ipc1_1k", limit=120)
    ids = [IdsRule(dport=(PortRange(80, 80),), proto=(ProtoMatch(6),), rule_id=0)]
    sizes = measure_hsm(acl, ids)
    built = compile_hsm(acl, ids).stats
    for table in schema.HSM_TABLES:
        assert sizes[table] == Size(built.entries(table)), table


def test_measured_sizes_are_estimates_above_the_work_limit(classbench_dir: Path) -> None:
    acl = parse_classbench(classbench_dir / "fw1_1k")
    sizes = measure_hsm(acl, [], work_limit=10_000)
    assert sizes["acl_addr_pair"].exact is False and sizes["acl_addr_pair"].entries
    assert str(sizes["acl_verdict"]) == "n/a"


def test_rules_that_can_never_match_first_are_not_compiled() -> None:
    web = IdsRule(dport=(PortRange(80, 80),), proto=(ProtoMatch(6),))
    rules = [
        replace(web, rule_id=0),
        replace(web, rule_id=1, class_id=2),  # same header: shadowed
        IdsRule(rule_id=2),  # matches everything
        replace(web, rule_id=3, dport=(PortRange(81, 81),)),  # after a match-all rule
    ]
    assert [t.rule_id for t in ids_terms(rules)] == [0, 2]
    compiled = compile_hsm([], rules)
    assert {
        e.params_dict["rule_id"] for e in compiled.entries if e.table == "ids_classification"
    } == {0, 2}
