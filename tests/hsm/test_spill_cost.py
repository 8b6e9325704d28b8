"""The census that ranks rules for spilling counts the cross-product tables exactly when it says
it does, and a spill it says fits does fit and classifies like first-match linear search; on the
ClassBench sets the spill chosen by cost is smaller than the static ranking's was."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.hsm import schema
from controller.hsm.compile import _containment, acl_terms, compile_hsm
from controller.hsm.hybrid import SpillPlan, compile_spilled
from controller.hsm.rules import AclRule, parse_classbench
from controller.hsm.spill_cost import TableBudgets, _final, choose_spill, take_census
from controller.hsm.tables import compile_tables

from .conftest import acl_rules
from .test_equivalence import EXAMPLES, _packets, assert_same_as_linear

CHAIN = schema.ACL_CHAIN


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(acl=st.lists(acl_rules(), max_size=14))
def test_an_exact_census_counts_the_entries_the_compiler_makes(acl: list[AclRule]) -> None:
    census = take_census(acl_terms(acl))
    assert census.exact == (True, True, True)
    stats = compile_hsm(acl, []).stats
    assert census.needed == (
        stats.entries(CHAIN.addr_pair),
        stats.entries(CHAIN.port_pair),
        stats.entries(CHAIN.final),
    )


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    acl=st.lists(acl_rules(), min_size=2, max_size=12),
    final=st.integers(1, 12),
    addr_pair=st.integers(1, 12),
)
def test_a_spill_the_census_says_fits_fits_and_classifies_like_linear_search(
    acl: list[AclRule], final: int, addr_pair: int
) -> None:
    budgets = TableBudgets(addr_pair, 1 << 19, final)
    choice = choose_spill(acl_terms(acl), budgets, spill_budget=64, seconds=5)
    if not choice.fits:
        return
    limits = {CHAIN.addr_pair: addr_pair, CHAIN.final: final, schema.ACL_SPILL: 64}
    compiled = compile_spilled(acl, [], SpillPlan(frozenset(choice.spilled)), limits=limits)
    assert compiled.stats.acl_spilled == len(choice.spilled)
    assert compiled.stats.entries(CHAIN.final) <= final
    assert compiled.stats.entries(CHAIN.addr_pair) <= addr_pair
    assert_same_as_linear(compiled.entries, acl, [], _packets(acl, [], 40))


# What the static ranking (wide in both addresses, then the product of the segments covered)
# spills: the baseline the choice by cost must beat.
STATIC_RANKING_SPILLED = {"fw1_1k": 190, "ipc1_1k": 400}


@pytest.mark.parametrize("name", sorted(STATIC_RANKING_SPILLED))
def test_the_spill_chosen_by_cost_is_smaller_than_the_static_rankings(
    classbench_dir: Path, name: str
) -> None:
    acl = parse_classbench(classbench_dir / name)
    one_partition = {table: 0 for table in schema.PARTITION_TABLES}  # as the static ranking had
    stats = compile_tables(acl, [], limits=one_partition, fallback=False).stats
    assert not any(stats.partition_terms)
    print(f"{name}: {stats.acl_spilled} of {len(acl)} rules spilled")
    assert 0 < stats.acl_spilled < STATIC_RANKING_SPILLED[name]


def _final_by_cells(
    lsets: list[int], rsets: list[int], xsets: list[int]
) -> tuple[list[int], list[int], dict[int, int]]:
    """The final table's rows, columns and lone-term cells, one cell at a time."""
    rows, cols = [0] * len(lsets), [0] * len(rsets)
    alone: dict[int, int] = {}
    for i, lbits in enumerate(lsets):
        for j, rbits in enumerate(rsets):
            for xbits in xsets:
                hit = lbits & rbits & xbits
                if hit:
                    rows[i] += 1
                    cols[j] += 1
                    if hit.bit_count() == 1:
                        t = hit.bit_length() - 1
                        alone[t] = alone.get(t, 0) + 1
    return rows, cols, alone


bitsets = st.lists(st.integers(0, (1 << 24) - 1), min_size=1, max_size=12)


@settings(max_examples=EXAMPLES, deadline=None)
@given(lsets=bitsets, rsets=bitsets, xsets=bitsets)
def test_the_final_table_counted_by_term_matches_a_count_by_cell(
    lsets: list[int], rsets: list[int], xsets: list[int]
) -> None:
    rows, cols = [0] * len(lsets), [0] * len(rsets)
    alone: dict[int, int] = {}
    needed = _final(lsets, rsets, xsets, _containment(rsets), rows, cols, alone)
    want_rows, want_cols, want_alone = _final_by_cells(lsets, rsets, xsets)
    assert (rows, cols, alone) == (want_rows, want_cols, want_alone)
    assert needed == sum(want_rows) == sum(want_cols)
