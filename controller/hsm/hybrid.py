"""Hybrid classification: HSM/IPP for most rules (the ACL in up to six partitions where one does
not fit), a small priority ternary table for the rest.

ACL partitions come first: rules wide in the source and rules wide in the destination get chains
of their own (`acl2_*`, `acl3_*` tables over indexes the same segment lookups return), so that
they do not meet each other, nor the narrow rules, in one cross product; where that is far from
enough, rules are grouped by how wide they are in the addresses and in the ports, and the groups
merged into as many chains as the program has (`acl2_*` to `acl6_*`; see `_partitions`). Then,
if the partitions still do not fit, rules are spilled as below, from any partition.

The HSM cross products blow up on rules that are wide in some fields and narrow in others (each
such rule meets many classes of the other field). When a table would not fit its bank, the
compiler spills rules into `acl_spill` / `ids_spill` (priority ternary tables with the naive
profile's keys plus the bank's version) and compiles HSM over the rules left. The data plane
looks both up and keeps the rule that comes first (rule ids are positions in the rule set), so
the result is still first-match linear search over every rule: HSM gives the first match among
the kept rules, the spill table the first among the spilled ones, and the earlier of the two is
the first of all.

Which rules: when a cross-product table overflows, by what each rule costs the tables
(`controller.hsm.spill_cost`): a census of the rules kept credits each rule with the rows of the
classes that merge when it leaves; the costliest are spilled in small batches, a new census after
each, until the census says the tables fit, then a few seconds go to putting back what is not
needed. That choice is compiled for real; if it does not fit (or a segment table overflowed),
the static ranking takes over: each rule is scored by how many cells of the cross products it can
touch, the product over its four address and port fields of the number of elementary segments
its values cover (nested prefixes, port intervals between the rule set's end points), rules wide
in both addresses first. The highest scores are spilled, as few as possible: the count doubles
from a small start until HSM fits (a failing attempt stops at the first table that overflows, so
it is quick), then a binary search between the last failure and the first success finds the
smallest count that fits, within a time budget.
"""

from __future__ import annotations

import bisect
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from controller.hsm import schema
from controller.hsm.compile import (
    CompiledTables,
    MatchTerm,
    Progress,
    TableOverflow,
    _ordered,
    acl_terms,
    compile_hsm,
    default_limits,
    ids_terms,
)
from controller.hsm.naive import naive_entries
from controller.hsm.rules import AclRule, IdsRule
from controller.hsm.spill_cost import TableBudgets, choose_spill, take_census
from controller.hsm.stats import table_stats
from opengate.entries import Exact, TableEntry
from opengate.fields import PortRange, Prefix, prefix_mask

LOG = logging.getLogger(__name__)

# The first spill tried, as a share of a rule set (at least MIN_FIRST_SPILL rules).
FIRST_SPILL_SHARE = 0.01
MIN_FIRST_SPILL = 8
# A prefix this short or shorter is "wide" (ClassBench's W): rules wide in both addresses go first.
WIDE_PREFIX = 8
# Seconds the search for the smallest spill may take once a spill that fits is known.
SHRINK_SECONDS = 20.0
# The grouping by kinds of rules is tried when the split by addresses overflows its tables by more
# than this (the sum over tables of needed / budget - 1): a spill would not do.
KINDS_FROM = 1.0
# Merging groups of rules into chains: a merge whose fullest table is at most this share of its
# budget is taken at once (the lowest bound first); above it, the best merge of all.
GOOD_MERGE = 0.5


@dataclass(frozen=True, slots=True)
class SpillPlan:
    """The rules kept out of HSM (ACL positions and IDS rule ids), and the ACL positions HSM's
    other partitions hold (`parts`: acl2, acl3, ... in that order; the rest of the ACL is in the
    first; the sets of ACL positions are disjoint)."""

    acl: frozenset[int] = frozenset()
    ids: frozenset[int] = frozenset()
    parts: tuple[frozenset[int], ...] = ()

    @property
    def partitioned(self) -> frozenset[int]:
        """The ACL positions in the other partitions."""
        return frozenset().union(*self.parts)


def spill_limits() -> dict[str, int]:
    """Entries per bank of each spill table (half of its size)."""
    return {t: schema.table_capacity(t) // 2 for t in schema.SPILL_TABLES.values()}


def compile_hybrid(
    acl: Sequence[AclRule],
    ids: Sequence[IdsRule],
    *,
    version: int = 0,
    reuse: CompiledTables | None = None,
    limits: Mapping[str, int] | None = None,
    progress: Progress | None = None,
    shrink_seconds: float = SHRINK_SECONDS,
) -> CompiledTables:
    """HSM alone if it fits; else, where the program has them (the limits give the other ACL
    partitions' tables room), HSM with the ACL in partitions; and over the rules left after the
    fewest spilled rules found, plus the spill tables' entries. Raises `TableOverflow` when
    no spill the tables hold makes HSM fit."""
    started = time.perf_counter()
    budget = {**spill_limits(), **(limits or {})}
    hsm_limits = {k: v for k, v in budget.items() if k not in schema.SPILL_TABLES.values()}
    hsm_all = {**default_limits(), **hsm_limits}  # every HSM table's entries per bank
    partitioned = hsm_all.get(schema.PARTITION_CHAINS[0].final, 0) > 0
    try:
        return compile_hsm(
            acl,
            ids,
            version=version,
            reuse=reuse,
            limits=hsm_limits,
            progress=progress,
            partitioned=partitioned,
        )
    except TableOverflow as caught:
        first = caught
    terms = {schema.ACL_SIDE: acl_terms(acl), schema.IDS_SIDE: ids_terms(ids)}
    parts = SpillPlan()
    if partitioned and _side_of(first.table) is not None:
        # the ACL's own cross products overflowed (not only the IDS's): known without a census
        overflowed = _side_of(first.table) == schema.ACL_SIDE
        acl_spill = budget[schema.SPILL_TABLES[schema.ACL_SIDE]]
        parts = _partitions(terms[schema.ACL_SIDE], hsm_all, overflowed, acl_spill)
    in_partitions = parts.partitioned
    if _side_of(first.table) is not None:  # a cross product overflowed, not a segment table
        chosen = _chosen_by_cost(terms, budget, hsm_all, shrink_seconds, parts)
        if chosen is None and in_partitions:
            # The ranking below spills the same rules from all partitions; where the choice by
            # cost, partition by partition, runs out of spill entries it did not fit either
            # (ipc1_10k), and it takes minutes to say so.
            raise TableOverflow(
                first.table,
                first.needed,
                first.limit,
                note=(
                    f"with the ACL in {1 + sum(1 for p in parts.parts if p)} partitions, the "
                    "rules that would have to leave HSM are more than the spill tables hold; "
                    "the static ranking was not tried"
                ),
            )
        if chosen is not None:
            try:
                tables = compile_spilled(
                    acl,
                    ids,
                    chosen,
                    version=version,
                    reuse=reuse,
                    limits=budget,
                    progress=progress,
                    partitioned=partitioned,
                )
            except TableOverflow as caught:
                LOG.info("hybrid: the spill chosen by cost does not fit (%s)", caught)
            else:
                LOG.info(
                    "hybrid: %d ACL and %d IDS rules spilled, chosen by cost (%s first), %.1fs",
                    len(chosen.acl),
                    len(chosen.ids),
                    first.table,
                    time.perf_counter() - started,
                )
                return replace_seconds(tables, time.perf_counter() - started)
    ranked = {side: _ranked(side_terms) for side, side_terms in terms.items()}
    # The most rules of each side (in ranked order) whose entries the spill table holds.
    sizes = {
        side: _most_that_fit(ranked[side], terms[side], budget[schema.SPILL_TABLES[side]])
        for side in ranked
    }
    # the first spill tried: the rules wide in both addresses (ranked first), and at least 1 %
    first_count = {
        side: max(
            MIN_FIRST_SPILL,
            math.ceil(len(ranked[side]) * FIRST_SPILL_SHARE),
            len({t.rule_id for t in side_terms if _wide_both(t)}),
        )
        for side, side_terms in terms.items()
    }
    counts = {side: 0 for side in ranked}
    failed = {side: 0 for side in ranked}  # the largest count known not to fit (with the other)

    def plan() -> SpillPlan:
        return SpillPlan(
            frozenset(ranked[schema.ACL_SIDE][: counts[schema.ACL_SIDE]]),
            frozenset(ranked[schema.IDS_SIDE][: counts[schema.IDS_SIDE]]),
            parts.parts,
        )

    def attempt() -> CompiledTables | TableOverflow:
        try:
            tables = compile_spilled(
                acl,
                ids,
                plan(),
                version=version,
                reuse=reuse,
                limits=budget,
                progress=progress,
                partitioned=partitioned,
            )
        except TableOverflow as caught:
            return caught
        return replace_seconds(tables, time.perf_counter() - started)

    # Grow: the side whose table overflowed spills more, doubling.
    overflow = first
    found: CompiledTables | None = None
    while found is None:
        side = _side_of(overflow.table)
        sides = [side] if side is not None else list(ranked)
        grown = False
        for s in sides:
            if counts[s] < sizes[s]:
                failed[s] = counts[s]
                counts[s] = min(sizes[s], max(first_count[s], 2 * counts[s]))
                grown = True
        if not grown:
            raise TableOverflow(
                overflow.table,
                overflow.needed,
                overflow.limit,
                note=(
                    f"even with {', '.join(f'{counts[s]} {s.upper()}' for s in sides)} rules "
                    "spilled, all the spill tables hold"
                ),
            )
        result = attempt()
        if isinstance(result, TableOverflow):
            if result.table in schema.SPILL_TABLES.values():
                raise TableOverflow(
                    result.table,
                    result.needed,
                    result.limit,
                    note=f"HSM needs that many rules spilled; before, {first}",
                )
            overflow = result
        else:
            found = result
    # Shrink: the smallest count per side that still fits, one side after the other.
    deadline = time.perf_counter() + shrink_seconds
    for s in ranked:
        low, high = failed[s], counts[s]  # low does not fit (or is 0), high fits
        while high - low > max(1, high // 16) and time.perf_counter() < deadline:
            middle = (low + high) // 2
            counts[s] = middle
            result = attempt()
            if isinstance(result, TableOverflow):
                low = middle
            else:
                high, found = middle, result
        counts[s] = high
    LOG.info(
        "hybrid: %d ACL and %d IDS rules spilled (%s first), %.1fs",
        counts[schema.ACL_SIDE],
        counts[schema.IDS_SIDE],
        first.table,
        time.perf_counter() - started,
    )
    return found


def _chosen_by_cost(
    terms: Mapping[str, Sequence[MatchTerm]],
    budget: Mapping[str, int],
    limits: Mapping[str, int],
    seconds: float,
    parts: SpillPlan = SpillPlan(),
) -> SpillPlan | None:
    """Per chain (each ACL partition, the IDS), the spill `choose_spill` finds; the partitions
    of the ACL share its spill table, which holds `parts.acl` first; `parts.parts` are the other
    ACL partitions (None: no spill that fits was found)."""
    chosen: dict[str, set[int]] = {schema.ACL_SIDE: set(parts.acl), schema.IDS_SIDE: set()}
    deadline = time.perf_counter() + seconds
    acl = [t for t in terms[schema.ACL_SIDE] if t.rule_id not in parts.acl]
    elsewhere = parts.partitioned
    chains = [
        (schema.ACL_CHAIN, [t for t in acl if t.rule_id not in elsewhere]),
        (schema.IDS_CHAIN, terms[schema.IDS_SIDE]),
    ]
    chains += [
        (chain, [t for t in acl if t.rule_id in part])
        for chain, part in zip(schema.PARTITION_CHAINS, parts.parts, strict=False)
        if part
    ]
    for chain, chain_terms in chains:
        side = chain.rule_set
        table_budgets = _budgets(chain, limits)
        spent = sum(t.rows for t in terms[side] if t.rule_id in chosen[side])
        choice = choose_spill(
            chain_terms,
            table_budgets,
            budget[schema.SPILL_TABLES[side]] - spent,
            seconds=max(0.0, deadline - time.perf_counter()),
        )
        LOG.debug(
            "%s: %d rules spilled by cost, %d censuses",
            chain.side,
            len(choice.spilled),
            choice.censuses,
        )
        if choice.hopeless is not None:
            level, needed, why = choice.hopeless
            table = (chain.addr_pair, chain.port_pair, chain.final)[level]
            raise TableOverflow(
                table, needed, limits[table], note=f"{why}; the static ranking was not tried"
            )
        if not choice.fits:
            return None
        chosen[side] |= set(choice.spilled)
    return SpillPlan(
        frozenset(chosen[schema.ACL_SIDE]), frozenset(chosen[schema.IDS_SIDE]), parts.parts
    )


def _budgets(chain: schema.Chain, limits: Mapping[str, int]) -> TableBudgets:
    return TableBudgets(limits[chain.addr_pair], limits[chain.port_pair], limits[chain.final])


def _partitions(
    terms: Sequence[MatchTerm], limits: Mapping[str, int], overflowed: bool, spill_budget: int
) -> SpillPlan:
    """The ACL rules for HSM's second and third partitions (`acl2`, `acl3`), and those to spill
    before any choice by cost (`acl`): none when the ACL's cross products fit in one
    (`overflowed` False and a census says so).

    The cross products blow up where rules wide in one address and narrow in the other meet
    rules the other way round: each source class of the first kind pairs with each destination
    class of the second. Apart, neither kind makes many classes on its wide side (ClassBench's
    fw1_1k: 8,712 and 3,927 address pairs apart, over 24,000 together, and its final table 0.5
    and 0.1 million entries apart where together it needs 25 million). Narrow rules (a /28 or
    longer in both addresses) meet the narrow side of either kind the same way (fw1_10k's 1,754
    rules narrow in the source and wide in the destination, with its 716 narrow in both: 1.9
    million address pairs), hence three partitions: the first holds the rules wide in neither
    address, the second those wide in the source, the third those wide in the destination.

    Which rules count as wide: two ways are tried, and the one whose censuses overflow the
    tables least is kept (a census of each partition, without a spill: a few seconds at 10k
    rules).
    - by prefix class: the second partition holds the rules wide (/8 or shorter) in the source
      only, the third those wide in the destination only (fw1_10k: 5 rules spilled where the
      other way spills 183);
    - by order: the second partition holds the rules shorter in the source than in the
      destination, the third those wide in the destination only (ipc1_1k: 8 spilled, the other
      way 42).
    Rules wide in both addresses go to the first partition, unless a census says that it then
    does not fit; then they are spilled first (fw1_10k's 305, whose port classes meet every
    address class), if the spill table holds them."""
    chain = schema.ACL_CHAIN
    if not overflowed and take_census(terms).fits(_budgets(chain, limits)):
        return SpillPlan()

    def wide(term: MatchTerm, f: int) -> bool:
        return _shortest(term, f) <= WIDE_PREFIX

    both = [t for t in terms if wide(t, 0) and wide(t, 1)]
    rest = [t for t in terms if not (wide(t, 0) and wide(t, 1))]
    ways = {
        "by prefix class": [t.rule_id for t in rest if wide(t, 0)],
        "by order": [t.rule_id for t in rest if _shortest(t, 0) < _shortest(t, 1)],
    }
    best: tuple[float, str, list[MatchTerm], frozenset[int], frozenset[int]] | None = None
    for way, second_ids in ways.items():
        second = frozenset(second_ids)
        third = frozenset(t.rule_id for t in rest if wide(t, 1) and t.rule_id not in second)
        first = [t for t in rest if t.rule_id not in second and t.rule_id not in third]
        groups = [
            (schema.ACL_CHAIN, first),
            (schema.PARTITION_CHAINS[0], [t for t in rest if t.rule_id in second]),
            (schema.PARTITION_CHAINS[1], [t for t in rest if t.rule_id in third]),
        ]
        excess = sum(
            _excess(take_census(g, credits=False).needed, _budgets(c, limits))
            for c, g in groups
            if g
        )
        LOG.debug("partitions %s: %d / %d / %d rules, excess %.3f", way, len(first),
                  len(second), len(third), excess)  # fmt: skip
        if best is None or excess < best[0]:
            best = (excess, way, first, second, third)
    assert best is not None
    extra = [c for c in schema.PARTITION_CHAINS if limits.get(c.final, 0) > 0]
    if best[0] > KINDS_FROM and len(extra) > 2:
        # the smallest of the chains' budgets, table by table
        each = [_budgets(c, limits).sizes() for c in (chain, *extra)]
        budgets = TableBudgets(*(min(sizes) for sizes in zip(*each, strict=True)))
        kinds, excess = _by_kinds(terms, 1 + len(extra), budgets)
        LOG.info(
            "hybrid: ACL partitions by kinds of rules: %s rules, excess %.3f (by addresses %s: "
            "%.3f)",
            ", ".join(str(len(k)) for k in kinds),
            excess,
            best[1],
            best[0],
        )
        if excess < best[0]:
            return SpillPlan(parts=tuple(kinds[1:]))
    _, way, first, second, third = best
    spilled: frozenset[int] = frozenset()
    if (
        both
        and sum(t.rows for t in both) <= spill_budget
        and not take_census([*first, *both]).fits(_budgets(chain, limits))
    ):
        spilled = frozenset(t.rule_id for t in both)
    LOG.info(
        "hybrid: ACL partitions %s: %d, %d and %d rules; %d wide in both addresses %s",
        way,
        len({t.rule_id for t in first}),
        len(second),
        len(third),
        len({t.rule_id for t in both}),
        "spilled first" if spilled else "in the first",
    )
    return SpillPlan(acl=spilled, parts=(second, third))


def _by_kinds(
    terms: Sequence[MatchTerm], chains: int, budgets: TableBudgets
) -> tuple[list[frozenset[int]], float]:
    """The ACL rules in at most `chains` partitions (the first the fullest), grouped by kind,
    and how far over the budgets their censuses are (`_excess`, summed).

    A rule's kind: how it is wide in the addresses (in both, in the source only, in the
    destination only, in neither with the source at least as long as the destination, or
    shorter) and which of its ports match anything (both, the source port, the destination
    port, neither). Rules of one kind share their wide fields, so they barely multiply each
    other's classes; what blows a cross product up is kinds meeting (ipc1_10k's rules narrow in
    both addresses: 15 million final entries with their ports, where those that match any port
    and those that match a destination port need 18,000 and 1.1 million apart). The groups are
    merged two at a time, the merge whose fullest table is smallest first (censuses without the
    credits; a merge at most GOOD_MERGE full is taken without looking further), until there are
    as many as chains."""
    kind_of: dict[int, tuple[int, int]] = {}  # rule -> kind (of its first term)
    groups: dict[tuple[int, int], list[int]] = {}  # kind -> positions in `terms`
    for i, term in enumerate(terms):
        kind = kind_of.setdefault(term.rule_id, _kind(term))
        groups.setdefault(kind, []).append(i)
    sizes = budgets.sizes()
    needed: dict[frozenset[tuple[int, int]], tuple[int, int, int]] = {}

    def load(keys: frozenset[tuple[int, int]]) -> float:
        """The fullest table's share of its budget (a pair table is counted up to its budget,
        no further: past it, the merge is out)."""
        if keys not in needed:
            # in rule order: a rule hides the later ones it covers
            kept = [terms[i] for i in sorted(i for k in keys for i in groups[k])]
            needed[keys] = take_census(kept, credits=False, give_up=max(sizes)).needed
        return max(n / b for n, b in zip(needed[keys], sizes, strict=True))

    merged = [frozenset([k]) for k in groups]
    while len(merged) > chains:
        bounds = sorted(
            (max(load(a), load(b)), i, j)
            for i, a in enumerate(merged)
            for j, b in enumerate(merged)
            if i < j
        )
        best: tuple[float, int, int] | None = None
        for bound, i, j in bounds:
            if best is not None and bound >= best[0]:
                break
            value = load(merged[i] | merged[j])
            if best is None or value < best[0]:
                best = (value, i, j)
            if value <= GOOD_MERGE:
                break
        assert best is not None
        _, i, j = best
        merged = [m for k, m in enumerate(merged) if k not in (i, j)] + [merged[i] | merged[j]]
    merged.sort(key=load, reverse=True)
    excess = sum(_excess(needed[m], budgets) for m in merged)
    return [frozenset(terms[i].rule_id for k in m for i in groups[k]) for m in merged], excess


def _kind(term: MatchTerm) -> tuple[int, int]:
    """How a rule is wide in the addresses (0-4) and which of its ports match anything (0-3);
    see `_by_kinds`."""
    src, dst = _shortest(term, 0), _shortest(term, 1)
    if src <= WIDE_PREFIX:
        address = 0 if dst <= WIDE_PREFIX else 1
    else:
        address = 2 if dst <= WIDE_PREFIX else 3 if src >= dst else 4
    sport, dport = (
        all(r.low == 0 and r.high == 0xFFFF for r in term.fields[f])  # type: ignore[union-attr]
        for f in (2, 3)
    )
    port = 0 if sport and dport else 1 if sport else 2 if dport else 3
    return address, port


def _shortest(term: MatchTerm, f: int) -> int:
    """The shortest prefix of address field `f` (0: source, 1: destination) in `term`."""
    return min(p.length for p in term.fields[f])  # type: ignore[union-attr]


def _excess(needed: Sequence[int], budgets: TableBudgets) -> float:
    """How far over its tables' budgets a census's counts are (0: they fit)."""
    return sum(max(0.0, n / b - 1.0) for n, b in zip(needed, budgets.sizes(), strict=True))


def compile_spilled(
    acl: Sequence[AclRule],
    ids: Sequence[IdsRule],
    chosen: SpillPlan,
    *,
    version: int = 0,
    reuse: CompiledTables | None = None,
    limits: Mapping[str, int] | None = None,
    progress: Progress | None = None,
    partitioned: bool = False,
) -> CompiledTables:
    """HSM over the rules `chosen` leaves (in its ACL partitions: `chosen.parts`), plus the spill
    tables holding the chosen ones. `partitioned`: the program has the extra partitions."""
    budget = {**spill_limits(), **(limits or {})}
    hsm_limits = {k: v for k, v in budget.items() if k not in schema.SPILL_TABLES.values()}
    spill = _spill_entries(acl, ids, chosen, version, budget)
    # Rules that can never be the first match (hidden by earlier ones) stay out of HSM too:
    # spilling the rule that hides them must not bring them back into the cross products.
    hidden_acl = frozenset(range(len(acl))) - {t.rule_id for t in acl_terms(acl)}
    hidden_ids = frozenset(r.rule_id for r in ids) - {t.rule_id for t in ids_terms(ids)}
    tables = compile_hsm(
        acl,
        ids,
        version=version,
        reuse=reuse,
        limits=hsm_limits,
        progress=progress,
        skip_acl=chosen.acl | hidden_acl,
        skip_ids=chosen.ids | hidden_ids,
        partitioned=partitioned,
        partitions=chosen.parts,
    )
    entries = (*tables.entries, *spill)
    stats = replace(
        tables.stats,
        # the HSM tables' figures are counted already; the spill tables hold other tables
        tables=tuple(sorted((*tables.stats.tables, *table_stats(spill)), key=lambda t: t.table)),
        acl_spilled=len(chosen.acl),
        ids_spilled=len(chosen.ids),
    )
    return CompiledTables(
        tables.profile, tables.version, entries, stats, tables.classes, tables.term_uids
    )


def replace_seconds(tables: CompiledTables, seconds: float) -> CompiledTables:
    stats = replace(tables.stats, compile_seconds=seconds)
    return CompiledTables(
        tables.profile, tables.version, tables.entries, stats, tables.classes, tables.term_uids
    )


def _most_that_fit(ranked: Sequence[int], terms: Sequence[MatchTerm], budget: int) -> int:
    """How many of the first `ranked` rules a spill table of `budget` entries holds."""
    entries: dict[int, int] = {}
    for term in terms:
        entries[term.rule_id] = entries.get(term.rule_id, 0) + term.rows
    total = 0
    for count, rule in enumerate(ranked):
        total += entries[rule]
        if total > budget:
            return count
    return len(ranked)


def _side_of(table: str) -> str | None:
    """The rule set (ACL or IDS) whose cross product `table` is."""
    for chain in schema.CHAINS.values():
        if table in (chain.addr_pair, chain.port_pair, chain.final):
            return chain.rule_set
    return None  # a segment table: both rule sets make its segments


def _spill_entries(
    acl: Sequence[AclRule],
    ids: Sequence[IdsRule],
    chosen: SpillPlan,
    version: int,
    budget: Mapping[str, int],
) -> list[TableEntry]:
    """The spill tables' entries of bank `version` (the spilled rules' terms, in rule order);
    raises `TableOverflow` when they do not fit."""
    out: list[TableEntry] = []
    everything = range(len(acl))
    acl_keep = frozenset(everything) - chosen.acl
    ids_keep = frozenset(r.rule_id for r in ids) - chosen.ids
    for side, terms in (
        (schema.ACL_SIDE, acl_terms(acl, acl_keep)),
        (schema.IDS_SIDE, ids_terms(ids, ids_keep)),
    ):
        table = schema.SPILL_TABLES[side]
        rows = naive_entries(table, terms)
        if len(rows) > budget[table]:
            raise TableOverflow(table, len(rows), budget[table])
        version_key = (schema.VERSION_KEY, Exact(version))
        out += [
            TableEntry(r.table, _ordered(version_key, *r.match), r.action, r.params, r.priority)
            for r in rows
        ]
    return out


# -- ranking -----------------------------------------------------------------------------------


def _ranked(terms: Sequence[MatchTerm]) -> list[int]:
    """Rule keys (ACL position or IDS rule id) by descending score, ties by rule order."""
    if not terms:
        return []
    covers = [_prefix_covers(terms, 0), _prefix_covers(terms, 1)]
    covers += [_range_covers(terms, 2), _range_covers(terms, 3)]
    score: dict[int, tuple[bool, int]] = {}
    for i, term in enumerate(terms):
        value = 1
        for field_covers in covers:
            value *= field_covers[i]
        key = (_wide_both(term), value)
        score[term.rule_id] = max(score.get(term.rule_id, (False, 0)), key)
    return sorted(score, key=lambda rule: (not score[rule][0], -score[rule][1], rule))


def _wide_both(term: MatchTerm) -> bool:
    """Wide (a /1 to /8) in both addresses: such a rule meets most classes of both sides of the
    address-pair cross product (a rule that is any/any is not: index 0 stands for it)."""

    def wide(f: int) -> bool:
        lengths = [p.length for p in term.fields[f]]  # type: ignore[union-attr]
        return min(lengths) <= WIDE_PREFIX

    def anything(f: int) -> bool:
        return all(p.length == 0 for p in term.fields[f])  # type: ignore[union-attr]

    return wide(0) and wide(1) and not (anything(0) and anything(1))


def _prefix_covers(terms: Sequence[MatchTerm], f: int) -> list[int]:
    """Per term, the distinct prefixes of the rule set inside its prefixes (its own included)."""
    spans = sorted({_span(p) for term in terms for p in term.fields[f]})  # type: ignore[arg-type]
    lows = [low for low, _ in spans]
    out = []
    for term in terms:
        total = 0
        for prefix in term.fields[f]:
            low, high = _span(prefix)  # type: ignore[arg-type]
            total += bisect.bisect_right(lows, high) - bisect.bisect_left(lows, low)
        out.append(max(1, total))
    return out


def _span(prefix: Prefix) -> tuple[int, int]:
    mask = prefix_mask(prefix.length)
    low = prefix.value & mask
    return low, low | (~mask & 0xFFFFFFFF)


def _range_covers(terms: Sequence[MatchTerm], f: int) -> list[int]:
    """Per term, the elementary intervals (between the rule set's end points) its ranges cover."""
    points = sorted(
        {r.low for t in terms for r in t.fields[f]}  # type: ignore[union-attr]
        | {r.high + 1 for t in terms for r in t.fields[f]}  # type: ignore[union-attr]
    )
    out = []
    for term in terms:
        total = 0
        for r in term.fields[f]:
            assert isinstance(r, PortRange)
            total += bisect.bisect_left(points, r.high + 1) - bisect.bisect_left(points, r.low)
        out.append(max(1, total))
    return out
