"""Which rules to spill, by what each one costs the cross products of the rules kept.

A rule blows the HSM tables up when it splits classes: an address class A that holds rule r is a
class of its own only because of r when A minus r is also a class (or is empty); then spilling r
merges A into it, and A's row of the next table (its verdict entries, for an address class)
disappears. Rules alike in a level's fields (same source prefixes, say) are in the same classes
of that level, so none of them alone merges anything: the row is shared among such twins. An
entry whose intersection is a few rules also goes when they all leave: each gets its share.

The census below builds one rule set's classes without emitting entries, counts every pair and
final table, and credits each rule with those rows and entries: source and destination classes
with their rows of the address-pair table, port classes with theirs of the port-pair table,
address and port classes with their rows of the final table. A table too big to build is
sampled (one left class in so many, each entry counting for that many), and then the census
says it estimated. Rows of tables over or near their budget weigh the most.

`choose_spill` spills the costliest rules in batches of at most 1 % of the rules, taking a new
census after each batch (credits change as rules leave: of two rules that split the same
classes, only one may be worth spilling), until the census says the tables fit; then it looks
for the shortest part of the last batch that is enough and tries, for a few seconds, to put
spilled rules back. The census guides only: `controller.hsm.hybrid` compiles the choice for real,
and the hybrid classifies exactly whatever is spilled.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from controller.hsm.bits import iter_bits, truncate
from controller.hsm.compile import (
    MatchTerm,
    _addr_segments,
    _Classes,
    _containment,
    _port_segments,
    _proto_segments,
    _Side,
)

LOG = logging.getLogger(__name__)

# Intersections a census may compute for one table before it estimates the table instead.
WORK_LIMIT = 1_500_000
# Intersections a census computes to estimate a table over WORK_LIMIT.
SAMPLE_WORK = 300_000
# Rules spilled per census at most, as a share of the rules (smaller: better choices, slower).
BATCH_SHARE = 0.01
# Seconds the putting back may take at most.
PUT_BACK_SECONDS = 3.0
# A sampled table still this many times over its budget at the rate it shrinks: give up.
HOPELESS = 2.0
# Rows a census looks at first to guess a pair table's size.
PROBE_ROWS = 64
# A census counts a table that holds at least this share of its budget as under pressure.
PRESSURE_FROM = 0.5
# Entries whose intersection is at most this many terms credit them (see `_credit_few`).
FEW = 4
# An estimated table counts as fitting only below this share of its budget.
ESTIMATE_MARGIN = 0.9


@dataclass(frozen=True, slots=True)
class TableBudgets:
    """One rule set's three cross-product tables and their entries per bank."""

    addr_pair: int
    port_pair: int
    final: int

    def sizes(self) -> tuple[int, int, int]:
        return (self.addr_pair, self.port_pair, self.final)


@dataclass(frozen=True, slots=True)
class Census:
    """Entries each table needs (`exact` False: an upper bound) and each term's credit per table:
    the entries estimated to disappear when the term leaves."""

    needed: tuple[int, int, int]
    exact: tuple[bool, bool, bool]
    credit: tuple[list[int], list[int], list[int]]
    share: list[int]  # per term: entries of the classes holding it (a tie-break)

    def fits(self, budgets: TableBudgets) -> bool:
        """Every table fits its budget, exactly counted or estimated well under it."""
        return all(
            n <= (b if exact else b * ESTIMATE_MARGIN)
            for n, b, exact in zip(self.needed, budgets.sizes(), self.exact, strict=True)
        )

    def scores(self, budgets: TableBudgets) -> list[float]:
        """Per term: its credits, each as a share of its table's budget, weighted by how full
        that table is (squared: an overflowing table counts much more than one that fits)."""
        count = len(self.credit[0])
        out = [0.0] * count
        for needed, budget, credit in zip(self.needed, budgets.sizes(), self.credit, strict=True):
            load = needed / budget
            if load < PRESSURE_FROM:
                continue
            weight = load * load / budget
            for t in range(count):
                out[t] += credit[t] * weight
        # where no rule alone merges classes, the rules in the most entries go first
        total = sum(self.share) or 1
        for t in range(count):
            out[t] += 1e-6 * self.share[t] / total
        return out


def take_census(
    terms: Sequence[MatchTerm],
    work_limit: int = WORK_LIMIT,
    *,
    credits: bool = True,
    give_up: int | None = None,
) -> Census:
    """The classes of one rule set (the terms HSM would compile), and what each term costs
    (`credits` False: the tables' sizes only, about twice as fast; the credits are zeros).
    `give_up`: a pair table is counted no further than that many entries (then its count is a
    lower bound, not exact, and the final table's the worst case)."""
    side = _Side("census", terms)
    count = len(terms)
    seg: list[_Classes] = []
    for f, segments in enumerate(
        (_addr_segments, _addr_segments, _port_segments, _port_segments, _proto_segments)
    ):
        stop = side.stoppers([f])
        classes = _Classes(truncate(side.wild[f], stop))
        segments(f, [side], [classes], [stop])
        seg.append(classes)
    credit = ([0] * count, [0] * count, [0] * count)
    share = [0] * count
    needed: list[int] = []
    exact: list[bool] = []
    levels: list[_Classes | None] = []
    groups = [
        _twins(terms, fields) if credits else []
        for fields in ((0,), (1,), (2,), (3,), (0, 1), (2, 3))
    ]
    for left, right, done in ((seg[0], seg[1], [0, 1]), (seg[2], seg[3], [2, 3])):
        pair = _pair(left, right, side.stoppers(done), work_limit, credits=credits, give_up=give_up)
        needed.append(pair.needed)
        exact.append(pair.exact)
        levels.append(pair.out)
        if not credits:
            continue
        table_credit = credit[len(needed) - 1]
        _credit_merges(left, pair.rows, table_credit, groups[done[0]], share)
        _credit_merges(right, pair.cols, table_credit, groups[done[1]], share)
        for t, cells in pair.alone.items():
            table_credit[t] += cells
    addr, port = levels
    if addr is None or port is None:
        # the final table cannot be measured before its inputs are: the worst case
        needed.append(_final_bound(seg, addr, port))
        exact.append(False)
    else:
        final = _pair(addr, port, 0, work_limit, proto=seg[4], credits=credits)
        needed.append(final.needed)
        exact.append(final.exact)
        if credits:
            _credit_merges(addr, final.rows, credit[2], groups[4], share)
            _credit_merges(port, final.cols, credit[2], groups[5], share)
            for t, cells in final.alone.items():
                credit[2][t] += cells
    return Census((needed[0], needed[1], needed[2]), (exact[0], exact[1], exact[2]), credit, share)


@dataclass(slots=True)
class _Pair:
    needed: int
    exact: bool
    rows: list[int]  # entries per left class
    cols: list[int]  # entries per right class
    out: _Classes | None  # the classes of the pairs (None: estimated, or a final table)
    uses: list[int]  # entries per out class
    alone: dict[int, int]  # final table: term -> cells where it is the only rule


def _pair(
    left: _Classes,
    right: _Classes,
    stop: int,
    work_limit: int,
    proto: _Classes | None = None,
    *,
    credits: bool = True,
    give_up: int | None = None,
) -> _Pair:
    """Entries of the cross product of `left` and `right` (times the protocol classes, for the
    final table), per left and right class."""
    where = _containment(right.sets)

    def candidates_of(lbits: int) -> int:
        found = 0
        for term in iter_bits(lbits):
            found |= where.get(term, 0)
        return found

    nleft = len(left.sets)
    rows = [0] * nleft
    cols = [0] * len(right.sets)
    rsets = right.sets
    needed = 0
    alone: dict[int, int] = {}

    def sampled(stride: int, candidates_at: Callable[[int], int]) -> _Pair:
        """One left class in `stride` is looked at, its entries counting for `stride` each (and
        crediting the few terms of their intersections)."""
        stride = max(1, stride)
        needed = 0
        for i in range(0, nleft, stride):
            lbits = left.sets[i]
            for j in iter_bits(candidates_at(i)):
                both = truncate(lbits & rsets[j], stop)
                if both:
                    rows[i] += stride
                    cols[j] += stride
                    needed += stride
                    if credits:
                        _credit_few(both, stride, alone)
        return _Pair(needed, False, rows, cols, None, [], alone)

    if proto is not None:
        needed = _final(left.sets, rsets, proto.sets, where, rows, cols, alone if credits else None)
        return _Pair(needed, True, rows, cols, None, [], alone)
    # a first look at a few rows says whether the table is far too big to build its classes
    probe = max(1, nleft // PROBE_ROWS)
    guess = probe * sum(candidates_of(left.sets[i]).bit_count() for i in range(0, nleft, probe))
    if guess > 2 * work_limit:
        return sampled(-(-guess // SAMPLE_WORK), lambda i: candidates_of(left.sets[i]))
    candidates = [candidates_of(lbits) for lbits in left.sets]
    total = sum(c.bit_count() for c in candidates)
    if total > work_limit:
        return sampled(-(-total // SAMPLE_WORK), candidates.__getitem__)
    out = _Classes(truncate(left.sets[0] & rsets[0], stop))
    uses = [0]
    for i, lbits in enumerate(left.sets):
        for j in iter_bits(candidates[i]):
            both = truncate(lbits & rsets[j], stop)
            k = out.add(both)
            if k:
                if credits:
                    _credit_few(both, 1, alone)
                if k == len(uses):
                    uses.append(0)
                uses[k] += 1
                rows[i] += 1
                cols[j] += 1
                needed += 1
        if give_up is not None and needed > give_up:
            return _Pair(needed, False, rows, cols, None, [], alone)
    return _Pair(needed, True, rows, cols, out, uses, alone)


def _final(
    lsets: Sequence[int],
    rsets: Sequence[int],
    xsets: Sequence[int],
    where: dict[int, int],
    rows: list[int],
    cols: list[int],
    alone: dict[int, int] | None,
) -> int:
    """The final table, counted exactly without visiting its cells: an entry per address class,
    port class and protocol class that share a term. Per address class and protocol class, the
    port classes it meets are the union of where its terms are (`where`: term -> port classes),
    and the few thousand distinct intersections are each looked at once; the port classes' side
    is counted the other way round. Fills `rows` and `cols` (entries per address and port class)
    and `alone` (term -> entries where it is the only rule; None: not wanted), and returns the
    entries."""
    times: dict[int, int] = {}  # how many (address class, protocol class) give that set
    for i, v, found in _meeting(lsets, xsets, where):
        times[v] = times.get(v, 0) + 1
        rows[i] += found.bit_count()
    if alone is None:
        return sum(rows)
    for v, count in times.items():
        # the port classes that hold exactly one of v's terms: that term alone makes the entry
        once = twice = 0
        for t in iter_bits(v):
            w = where.get(t, 0)
            twice |= once & w
            once |= w
        single = once & ~twice
        if single:
            for t in iter_bits(v):
                cells = (where.get(t, 0) & single).bit_count()
                if cells:
                    alone[t] = alone.get(t, 0) + count * cells
    for j, _, found in _meeting(rsets, xsets, _containment(lsets)):
        cols[j] += found.bit_count()
    return sum(rows)


def _meeting(
    sets: Sequence[int], xsets: Sequence[int], where: dict[int, int]
) -> Iterator[tuple[int, int, int]]:
    """Per class of `sets` and protocol class sharing a term: the class's index, the shared
    terms, and the classes of the other side holding any of them (`where`: term -> those
    classes; each distinct set of shared terms looked up once)."""
    met: dict[int, int] = {}
    for i, bits in enumerate(sets):
        for xbits in xsets:
            v = bits & xbits
            if not v:
                continue
            found = met.get(v)
            if found is None:
                found = 0
                for t in iter_bits(v):
                    found |= where.get(t, 0)
                met[v] = found
            yield i, v, found


def _credit_few(both: int, entries: int, credit: dict[int, int]) -> None:
    """An entry whose intersection is a few terms goes when they all leave: credit each its
    share."""
    size = both.bit_count()
    if size <= FEW:
        for t in iter_bits(both):
            credit[t] = credit.get(t, 0) + entries // size


def _final_bound(seg: Sequence[_Classes], addr: _Classes | None, port: _Classes | None) -> int:
    naddr = len(addr.sets) if addr is not None else len(seg[0].sets) * len(seg[1].sets)
    nport = len(port.sets) if port is not None else len(seg[2].sets) * len(seg[3].sets)
    return naddr * nport * len(seg[4].sets)


def _twins(terms: Sequence[MatchTerm], fields: Sequence[int]) -> list[int]:
    """Per term, the bitset of the terms with the same values in `fields`: a class of a level
    over those fields holds all of them or (truncated) a first part of them."""
    members: dict[tuple[object, ...], int] = {}
    keys = []
    for t, term in enumerate(terms):
        key = tuple(term.fields[f] for f in fields)
        members[key] = members.get(key, 0) | 1 << t
        keys.append(key)
    return [members[key] for key in keys]


def _credit_merges(
    classes: _Classes,
    rows: Sequence[int],
    credit: list[int],
    twins: Sequence[int],
    share: list[int],
) -> None:
    """Credit the terms whose leaving merges a class into another (or empties it) with the
    class's row, shared among the twins that must leave together (terms alike in the level's
    fields are in the same classes: one of them leaving merges nothing). `share`: every term
    of a class gets its row (a tie-break)."""
    ids = classes.ids
    for k, bits in enumerate(classes.sets):
        row = rows[k]
        if not k or not row:
            continue
        seen: set[int] = set()
        for t in iter_bits(bits):
            share[t] += row
            group = twins[t]
            if group in seen:
                continue
            seen.add(group)
            group &= bits
            rest = bits ^ group
            if not rest or rest in ids:
                size = group.bit_count()
                for member in iter_bits(group):
                    credit[member] += row // size


def _hopeless(
    start: Census, now: Census, budgets: TableBudgets, spilled: int, room: int
) -> tuple[int, int, str] | None:
    """Why spilling `room` more rules would not do, when a table too big to count (sampled)
    would still be over HOPELESS times its budget at the rate it has shrunk per rule so far
    (the costliest rules go first, so the rate slows down); None when it may yet fit."""
    if not spilled:
        return None
    for t, name in enumerate(("address-pair", "port-pair", "final")):
        budget = budgets.sizes()[t]
        if now.exact[t] or now.needed[t] <= HOPELESS * budget:
            continue
        if t == 2 and not (now.exact[0] and now.exact[1]):
            continue  # the final table's worst case, not a sample
        rate = max(0, start.needed[t] - now.needed[t]) / spilled
        left = int(now.needed[t] - rate * room)
        if left > HOPELESS * budget:
            return (
                t,
                left,
                f"estimated: the {name} table needs about {now.needed[t]:,} entries (sampled) "
                f"with {spilled} rules spilled by cost, {rate:,.0f} fewer per rule spilled so "
                f"far; {room} more would leave about {left:,}",
            )
    return None


# -- the choice --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Choice:
    """Rule keys to spill (ACL positions or IDS rule ids), and whether the census says the rest
    fits (False: the spill table's budget ran out first)."""

    spilled: tuple[int, ...]
    fits: bool
    censuses: int
    # not fitting, when spilling more would not help either: (table 0-2 as in TableBudgets,
    # entries it would still need, why; estimated)
    hopeless: tuple[int, int, str] | None = None


def choose_spill(
    terms: Sequence[MatchTerm],
    budgets: TableBudgets,
    spill_budget: int,
    *,
    seconds: float = 20.0,
    batch_share: float = BATCH_SHARE,
) -> Choice:
    """Spill the costliest rules until a census of the rest fits, then put back what is not
    needed. `spill_budget`: entries the spill table holds; `seconds`: for the search for the
    shortest prefix of the last batch and the putting back (the batches take what they take)."""
    deadline = time.perf_counter() + seconds
    rows_of: dict[int, int] = {}
    for term in terms:
        rows_of[term.rule_id] = rows_of.get(term.rule_id, 0) + term.rows
    order: list[int] = []  # the rules spilled, in the order chosen
    spill_rows = 0
    censuses = 0
    credit_at: dict[int, float] = {}
    last_batch = 0

    def fits(out: set[int]) -> bool:
        nonlocal censuses
        censuses += 1
        return take_census([t for t in terms if t.rule_id not in out]).fits(budgets)

    first: Census | None = None
    while True:
        out = set(order)
        kept = [t for t in terms if t.rule_id not in out]
        census = take_census(kept)
        censuses += 1
        LOG.debug("census: %s (%s), %d spilled", census.needed, census.exact, len(order))
        if census.fits(budgets):
            break
        first = first or census
        hopeless = _hopeless(first, census, budgets, len(order), spill_budget - spill_rows)
        if hopeless is not None:
            return Choice(tuple(order), False, censuses, hopeless)
        scores = census.scores(budgets)
        per_rule: dict[int, float] = {}
        for term, score in zip(kept, scores, strict=True):
            per_rule[term.rule_id] = per_rule.get(term.rule_id, 0.0) + score
        ranked = sorted(per_rule, key=lambda r: (-per_rule[r], r))
        # enough rules to cover the excess of the fullest table, as estimated (the credits
        # overlap, so the next census corrects), and not more than a small share of the rules
        sizes = budgets.sizes()
        fullest = max(range(3), key=lambda i: census.needed[i] / sizes[i])
        fits_below = sizes[fullest] * (1.0 if census.exact[fullest] else ESTIMATE_MARGIN)
        excess = census.needed[fullest] - fits_below
        covers: dict[int, int] = {}
        for t, term in enumerate(kept):
            covers[term.rule_id] = covers.get(term.rule_id, 0) + census.credit[fullest][t]
        most = max(1, int(len(per_rule) * batch_share))
        batch: list[int] = []
        covered = 0
        for rule in ranked:
            if per_rule[rule] <= 0 or len(batch) >= most or (batch and covered >= excess):
                break
            if spill_rows + rows_of[rule] > spill_budget:
                continue
            batch.append(rule)
            covered += covers[rule]
            spill_rows += rows_of[rule]
        if not batch:
            return Choice(tuple(order), False, censuses)
        for rule in batch:
            credit_at[rule] = per_rule[rule]
        last_batch = len(order)
        order += batch
    # The last batch may have overshot: the shortest prefix of the order that fits.
    low, high = last_batch, len(order)  # order[:high] fits; order[:low] does not
    while high - low > 1 and time.perf_counter() < deadline:
        middle = (low + high) // 2
        if fits(set(order[:middle])):
            high = middle
        else:
            low = middle
    out = set(order[:high])
    # Put back: the rules that looked cheapest when spilled first, in groups that halve (it
    # seldom finds much: a few seconds at most).
    deadline = min(deadline, time.perf_counter() + PUT_BACK_SECONDS)
    candidates = sorted(out, key=lambda r: (credit_at[r], -r))
    group = max(1, len(candidates) // 8)
    while candidates and time.perf_counter() < deadline:
        remaining: list[int] = []
        for start in range(0, len(candidates), group):
            chunk = candidates[start : start + group]
            if time.perf_counter() < deadline and fits(out - set(chunk)):
                out -= set(chunk)
            else:
                remaining += chunk
        if group == 1:
            break
        candidates = remaining
        group = max(1, group // 2)
    LOG.debug("spill choice: %d of %d rules, %d censuses", len(out), len(order), censuses)
    return Choice(tuple(r for r in order if r in out), True, censuses)
