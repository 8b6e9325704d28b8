"""HSM with integrated segmentation (IPP): ACL + IDS header rules -> classification table entries.

Hierarchical Space Mapping (Xu, Jiang, Li, AINA 2005) classifies in two stages. Each field's space
is cut into segments; every segment maps to the equivalence class of "the rules whose field
matches this segment", numbered 1, 2, ... Aggregation tables then map pairs of class numbers to
the class of the intersection (source x destination address, source x destination port), and a
final table maps (address class, port class, protocol class) to the first rule of the
intersection. IPP (Qi et al.) segments each field once for both rule sets: a segment entry
carries the ACL class and the IDS class, and each rule set has its own aggregation tables.

How the tables stay exactly equivalent to first-match linear search:

* Addresses (LPM). The set of rule prefixes containing an address is fixed by the longest of them
  that contains it, so the distinct prefixes of both rule sets are the segment entries, each
  labelled with the classes of the rules covering it. An entry whose labels equal those of its
  nearest shorter entry is left out (LPM falls through to that entry anyway).
* Ports (range): elementary intervals between rule range end points, adjacent intervals with
  equal labels merged. Protocol (ternary): the label of each of the 256 values; the most common
  label is one wildcard entry, the others are exact entries with a higher priority.
* Index 0 is what a miss gives at every level. It stands for the class of the terms that are
  wildcards in every field looked at so far (often empty: "no rule of this set can match"), so a
  pair whose intersection is that class needs no entry either.
* Truncation (`bits.truncate`): in a class, terms after the first term that is a wildcard in all
  fields not yet looked at can never be the first match; they are dropped. The first match of
  the final intersection is unchanged (that term is in the final intersection), and classes merge.
* Shadowed terms (same fields as an earlier term, or after a term that matches everything) are
  dropped before compiling; IDS rule sets have hundreds of rules per header.

The aggregation tables are cross products: rule sets with many rules that are wildcards in one
field of a pair and specific in the other (ClassBench fw and ipc sets, every 10k set) need more
entries than a bank holds. `compile_hsm` then stops early with `TableOverflow` (it never builds
the oversized table), `measure_hsm` says how many entries the tables would need, and
`controller.hsm.tables.compile_tables` falls back to the ternary baseline.

Bitsets are Python ints, bit i being the i-th match term of a rule set in match order. A term is
a rule (ACL) or one direction of an IDS header rule (`<>` gives two terms with the same rule id).
"""

from __future__ import annotations

import enum
import functools
import logging
import math
import time
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field

from controller.hsm import schema
from controller.hsm.bits import iter_bits, lowest_bit, truncate
from controller.hsm.rules import AclRule, IdsRule
from controller.hsm.stats import CompileStats, table_stats
from opengate.entries import Exact, Lpm, MatchValue, Range, TableEntry, Ternary
from opengate.fields import (
    PORT_MAX,
    PROTO_MAX,
    PortRange,
    Prefix,
    ProtoMatch,
    is_any_addr,
    is_any_port,
    is_any_proto,
    normalize_ranges,
    prefix_mask,
)

LOG = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]
"""progress(phase, done, total): called now and then during long phases."""

FieldValues = tuple[
    tuple[Prefix, ...],
    tuple[Prefix, ...],
    tuple[PortRange, ...],
    tuple[PortRange, ...],
    tuple[ProtoMatch, ...],
]


class Profile(enum.Enum):
    HSM = "hsm"
    NAIVE = "naive"


@dataclass(frozen=True, slots=True)
class MatchTerm:
    """One conjunction of field unions with its result: a rule, or one direction of one."""

    fields: FieldValues
    action: str
    params: tuple[tuple[str, int], ...]
    rule_id: int

    def content(self) -> tuple[object, ...]:
        """What the term is, regardless of where it sits in its file (for stable numbering)."""
        return (self.fields, self.action, tuple(p for p in self.params if p[0] != "rule_id"))

    @property
    def rows(self) -> int:
        """Entries the term takes in a ternary table: one per combination of its field values."""
        return math.prod(len(values) for values in self.fields)


def acl_terms(rules: Sequence[AclRule], skip: Container[int] = ()) -> list[MatchTerm]:
    """The rules that can be a first match, in order (see `_Shadow`); `skip`: positions of rules
    left out (a hybrid's spilled rules), the others keeping their positions as rule ids."""
    terms: list[MatchTerm] = []
    shadow = _Shadow()
    for index, rule in enumerate(rules):
        if index in skip:
            continue
        fields = _normalized((rule.src, rule.dst, rule.sport, rule.dport, rule.proto))
        if fields is None or shadow.hides(fields):
            continue
        terms.append(MatchTerm(fields, rule.action.p4_action, (("rule_id", index),), index))
        if shadow.done:
            break
    return terms


def ids_terms(rules: Sequence[IdsRule], skip: Container[int] = ()) -> list[MatchTerm]:
    """One term per rule and direction that can be a first match, in matching order; `skip`:
    rule ids of rules left out (a hybrid's spilled rules)."""
    terms: list[MatchTerm] = []
    shadow = _Shadow()
    for rule in rules:
        if rule.rule_id in skip:
            continue
        fields = _normalized((rule.src, rule.dst, rule.sport, rule.dport, rule.proto))
        if fields is None:
            continue
        params = (("class_id", rule.class_id), ("rule_id", rule.rule_id))
        directions = [fields]
        if rule.bidirectional:
            directions.append((fields[1], fields[0], fields[3], fields[2], fields[4]))
        for one_way in directions:
            if not shadow.hides(one_way):
                terms.append(MatchTerm(one_way, schema.SET_IDS_CLASS, params, rule.rule_id))
        if shadow.done:
            break
    return terms


class _Shadow:
    """Terms that can never be a first match: one with the same fields as an earlier term, and
    every term after one that matches everything. Dropping them is exact, and it matters for
    IDS rule sets, where hundreds of rules share a header (`$EXTERNAL_NET any -> $HOME_NET
    $HTTP_PORTS`) and only the first of them can decide the class."""

    __slots__ = ("done", "seen")

    def __init__(self) -> None:
        self.seen: set[FieldValues] = set()
        self.done = False

    def hides(self, fields: FieldValues) -> bool:
        if self.done or fields in self.seen:
            return True
        self.seen.add(fields)
        self.done = _all_wild(fields)
        return False


def _prefixes(term: MatchTerm, f: int) -> tuple[Prefix, ...]:
    return term.fields[0] if f == 0 else term.fields[1]


def _ranges(term: MatchTerm, f: int) -> tuple[PortRange, ...]:
    return term.fields[2] if f == 2 else term.fields[3]


def _normalized(fields: FieldValues) -> FieldValues | None:
    src, dst, sport, dport, proto = fields
    if not (src and dst and sport and dport and proto):
        return None
    return (
        tuple(sorted(set(src))),
        tuple(sorted(set(dst))),
        normalize_ranges(sport),
        normalize_ranges(dport),
        tuple(sorted(set(proto))),
    )


@functools.lru_cache(maxsize=1 << 16)  # the hybrid compiles the same terms many times
def _wild_flags(fields: FieldValues) -> tuple[bool, bool, bool, bool, bool]:
    return (
        is_any_addr(fields[0]),
        is_any_addr(fields[1]),
        is_any_port(fields[2]),
        is_any_port(fields[3]),
        is_any_proto(fields[4]),
    )


def _all_wild(fields: FieldValues) -> bool:
    return all(_wild_flags(fields))


# -- limits and errors -------------------------------------------------------------------------


class TableOverflow(Exception):  # noqa: N818 (it is an outcome the caller handles, not a bug)
    """A table of one bank would exceed its budget (the cross products blew up)."""

    def __init__(self, table: str, needed: int, limit: int, note: str = "") -> None:
        self.table = table
        self.needed = needed
        self.limit = limit
        message = f"{table} needs at least {needed} entries, budget is {limit} per bank"
        super().__init__(f"{message}; {note}" if note else message)


def default_limits() -> dict[str, int]:
    """Half of each table's size: both banks must fit during an update (the second ACL
    partition's tables too; the spill tables are `hybrid.spill_limits`)."""
    return {
        name: schema.table_capacity(name) // 2
        for name in (*schema.HSM_TABLES, *schema.PARTITION_TABLES)
    }


# -- equivalence classes -----------------------------------------------------------------------


class _Classes:
    """Distinct rule sets of one level, numbered in discovery order; 0 is the miss class."""

    __slots__ = ("ids", "sets")

    def __init__(self, zero: int) -> None:
        self.sets: list[int] = [zero]
        self.ids: dict[int, int] = {zero: 0}

    def add(self, bits: int) -> int:
        index = self.ids.get(bits)
        if index is None:
            index = len(self.sets)
            self.ids[bits] = index
            self.sets.append(bits)
        return index

    def __len__(self) -> int:
        return len(self.sets)


class _Side:
    """One rule set (ACL or IDS) as the compiler sees it."""

    def __init__(self, name: str, terms: Sequence[MatchTerm]) -> None:
        self.name = name
        self.terms = list(terms)
        self.wild = [0] * len(schema.FIELDS)
        for t, term in enumerate(self.terms):
            for f, flag in enumerate(_wild_flags(term.fields)):
                if flag:
                    self.wild[f] |= 1 << t

    def stoppers(self, looked_at: Sequence[int]) -> int:
        """Terms that are wildcards in every field not in `looked_at`."""
        mask = (1 << len(self.terms)) - 1
        for f in range(len(schema.FIELDS)):
            if f not in looked_at:
                mask &= self.wild[f]
        return mask

    def uids(self) -> list[int]:
        """A position-independent identity per term (content plus occurrence number)."""
        seen: dict[tuple[object, ...], int] = {}
        out: list[int] = []
        for term in self.terms:
            content = term.content()
            seen[content] = seen.get(content, 0) + 1
            out.append(hash((content, seen[content])))
        return out


# -- segmentation ------------------------------------------------------------------------------

Labels = tuple[int, ...]


def _addr_segments(
    f: int, sides: Sequence[_Side], classes: Sequence[_Classes], stop: Sequence[int]
) -> list[tuple[int, int, Labels]]:
    own: dict[tuple[int, int], list[int]] = {}
    for s, side in enumerate(sides):
        for t, term in enumerate(side.terms):
            bit = 1 << t
            for prefix in _prefixes(term, f):
                key = (prefix.value, prefix.length)
                if key not in own:
                    own[key] = [0] * len(sides)
                own[key][s] |= bit
    lengths = sorted({length for _, length in own}, reverse=True)
    full: dict[tuple[int, int], list[int]] = {}
    labels: dict[tuple[int, int], Labels] = {}
    zero: Labels = (0,) * len(sides)
    out: list[tuple[int, int, Labels]] = []
    for key in sorted(own, key=lambda k: (k[1], k[0])):
        value, length = key
        parent: tuple[int, int] | None = None
        for shorter in lengths:
            if shorter >= length:
                continue
            candidate = (value & prefix_mask(shorter), shorter)
            if candidate in full:
                parent = candidate
                break
        base = full[parent] if parent is not None else [0] * len(sides)
        sets = [base[s] | own[key][s] for s in range(len(sides))]
        full[key] = sets
        label = tuple(classes[s].add(truncate(sets[s], stop[s])) for s in range(len(sides)))
        labels[key] = label
        if label != (labels[parent] if parent is not None else zero):
            out.append((value, length, label))
    return out


def _port_segments(
    f: int, sides: Sequence[_Side], classes: Sequence[_Classes], stop: Sequence[int]
) -> list[tuple[int, int, Labels]]:
    starts: list[dict[int, int]] = [{} for _ in sides]
    ends: list[dict[int, int]] = [{} for _ in sides]
    bounds = {0}
    for s, side in enumerate(sides):
        for t, term in enumerate(side.terms):
            bit = 1 << t
            for rng in _ranges(term, f):  # normalised: disjoint, not adjacent
                starts[s][rng.low] = starts[s].get(rng.low, 0) | bit
                bounds.add(rng.low)
                if rng.high < PORT_MAX:
                    ends[s][rng.high + 1] = ends[s].get(rng.high + 1, 0) | bit
                    bounds.add(rng.high + 1)
    points = sorted(bounds)
    current = [0] * len(sides)
    zero: Labels = (0,) * len(sides)
    merged: list[tuple[int, int, Labels]] = []
    for i, low in enumerate(points):
        for s in range(len(sides)):
            current[s] = (current[s] & ~ends[s].get(low, 0)) | starts[s].get(low, 0)
        high = points[i + 1] - 1 if i + 1 < len(points) else PORT_MAX
        label = tuple(classes[s].add(truncate(current[s], stop[s])) for s in range(len(sides)))
        if merged and merged[-1][2] == label:
            merged[-1] = (merged[-1][0], high, label)
        else:
            merged.append((low, high, label))
    return [seg for seg in merged if seg[2] != zero]


def _proto_segments(
    f: int, sides: Sequence[_Side], classes: Sequence[_Classes], stop: Sequence[int]
) -> list[tuple[int, int, int, Labels]]:
    """(value, mask, priority, labels): exact values over one wildcard entry."""
    per_value: list[Labels] = []
    groups: list[dict[ProtoMatch, int]] = [{} for _ in sides]
    for s, side in enumerate(sides):
        for t, term in enumerate(side.terms):
            for proto in term.fields[4]:
                groups[s][proto] = groups[s].get(proto, 0) | (1 << t)
    for value in range(PROTO_MAX + 1):
        found: list[int] = []
        for s in range(len(sides)):
            bits = 0
            for proto, members in groups[s].items():
                if proto.contains(value):
                    bits |= members
            found.append(classes[s].add(truncate(bits, stop[s])))
        per_value.append(tuple(found))
    counts: dict[Labels, int] = {}
    for labels in per_value:
        counts[labels] = counts.get(labels, 0) + 1
    common = max(counts, key=lambda lab: (counts[lab], lab == (0,) * len(sides)))
    out: list[tuple[int, int, int, Labels]] = []
    if common != (0,) * len(sides):
        out.append((0, 0, 1, common))
    for value, labels in enumerate(per_value):
        if labels != common:
            out.append((value, PROTO_MAX, 2, labels))
    return out


# -- aggregation -------------------------------------------------------------------------------


def _containment(sets: Sequence[int]) -> dict[int, int]:
    """term -> bitset of the class numbers whose set holds the term. Built as bytes: an int grown
    bit by bit is copied at every bit, which costs the square of the classes."""
    members: dict[int, bytearray] = {}
    size = (len(sets) + 7) // 8
    for index, bits in enumerate(sets):
        byte, flag = index >> 3, 1 << (index & 7)
        for term in iter_bits(bits):
            row = members.get(term)
            if row is None:
                row = members[term] = bytearray(size)
            row[byte] |= flag
    return {term: int.from_bytes(row, "little") for term, row in members.items()}


def _aggregate(
    table: str,
    left: _Classes,
    right: _Classes,
    stop: int,
    limit: int,
    progress: Progress | None,
) -> tuple[_Classes, list[tuple[int, int, int]]]:
    out = _Classes(truncate(left.sets[0] & right.sets[0], stop))
    where = _containment(right.sets)
    entries: list[tuple[int, int, int]] = []
    rsets = right.sets
    for i, lbits in enumerate(left.sets):
        candidates = 0
        for term in iter_bits(lbits):
            candidates |= where.get(term, 0)
        for j in iter_bits(candidates):
            k = out.add(truncate(lbits & rsets[j], stop))
            if k:
                entries.append((i, j, k))
        if len(entries) > limit:
            raise TableOverflow(table, len(entries), limit)
        if progress is not None and i % 256 == 0:
            progress(table, i, len(left.sets))
    if progress is not None:
        progress(table, len(left.sets), len(left.sets))
    return out, entries


def _final(
    table: str,
    addr: _Classes,
    port: _Classes,
    proto: _Classes,
    limit: int,
    progress: Progress | None,
) -> list[tuple[int, int, int, int]]:
    """(addr class, port class, proto class, first term) for every non-empty intersection."""
    where = _containment(port.sets)
    psets = port.sets
    xsets = list(enumerate(proto.sets))
    entries: list[tuple[int, int, int, int]] = []
    # A cheap upper bound first: refuse before spending minutes on a table that cannot fit.
    bound = 0
    candidates_of: list[int] = []
    for abits in addr.sets:
        candidates = 0
        for term in iter_bits(abits):
            candidates |= where.get(term, 0)
        candidates_of.append(candidates)
        bound += candidates.bit_count()
    if bound * len(xsets) > limit:
        # Count exactly (still cheaper than building): pairs times the protocol classes hit.
        needed = 0
        for a, abits in enumerate(addr.sets):
            for p in iter_bits(candidates_of[a]):
                both = abits & psets[p]
                needed += sum(1 for _, xbits in xsets if both & xbits)
            if needed > limit:
                raise TableOverflow(table, needed, limit)
    for a, abits in enumerate(addr.sets):
        for p in iter_bits(candidates_of[a]):
            both = abits & psets[p]
            for x, xbits in xsets:
                hit = both & xbits
                if hit:
                    entries.append((a, p, x, lowest_bit(hit)))
        if len(entries) > limit:
            raise TableOverflow(table, len(entries), limit)
        if progress is not None and a % 256 == 0:
            progress(table, a, len(addr.sets))
    if progress is not None:
        progress(table, len(addr.sets), len(addr.sets))
    return entries


# -- measuring what does not fit ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Size:
    """Entries a table needs: exact, or an estimate (`exact` False) when counting would cost
    more than the work limit; None when an earlier table was too big to go on."""

    entries: int | None
    exact: bool = True

    def __str__(self) -> str:
        if self.entries is None:
            return "n/a"
        return f"{self.entries:,}" if self.exact else f"~{self.entries:,}"


def _candidate_pairs(left: _Classes, right: _Classes) -> tuple[list[int], int]:
    where = _containment(right.sets)
    out: list[int] = []
    total = 0
    for lbits in left.sets:
        candidates = 0
        for term in iter_bits(lbits):
            candidates |= where.get(term, 0)
        out.append(candidates)
        total += candidates.bit_count()
    return out, total


def measure_hsm(
    acl: Sequence[AclRule], ids: Sequence[IdsRule], *, work_limit: int = 20_000_000
) -> dict[str, Size]:
    """Entries per table of the unbounded HSM/IPP compile, without building entries: what the
    tables would need when they do not fit. Pair tables count non-empty class pairs (exact:
    the intersections are done) and the final tables the non-empty triples; above `work_limit`
    intersections a table is estimated by its number of non-empty candidate pairs (times the
    protocol classes, for the final tables) and the tables after it are not measured."""
    sides = [_Side(schema.ACL_SIDE, acl_terms(acl)), _Side(schema.IDS_SIDE, ids_terms(ids))]
    sizes: dict[str, Size] = {}
    seg: dict[str, list[_Classes]] = {}
    for f, fname in enumerate(schema.FIELDS):
        stop = [side.stoppers([f]) for side in sides]
        classes = [_Classes(truncate(side.wild[f], stop[s])) for s, side in enumerate(sides)]
        if fname in ("src", "dst"):
            n = len(_addr_segments(f, sides, classes, stop))
        elif fname in ("sport", "dport"):
            n = len(_port_segments(f, sides, classes, stop))
        else:
            n = len(_proto_segments(f, sides, classes, stop))
        sizes[schema.SEGMENT_BY_FIELD[fname].name] = Size(n)
        seg[fname] = classes
    for s, side in enumerate(sides):
        chain = schema.CHAINS[side.name]
        levels: dict[str, _Classes] = {}
        for level, table, left, right, done in (
            ("addr", chain.addr_pair, "src", "dst", [0, 1]),
            ("port", chain.port_pair, "sport", "dport", [2, 3]),
        ):
            lcl, rcl = seg[left][s], seg[right][s]
            candidates, total = _candidate_pairs(lcl, rcl)
            if total > work_limit:
                sizes[table] = Size(total, exact=False)
                continue
            stoppers = side.stoppers(done)
            out = _Classes(truncate(lcl.sets[0] & rcl.sets[0], stoppers))
            count = 0
            for i, lbits in enumerate(lcl.sets):
                for j in iter_bits(candidates[i]):
                    if out.add(truncate(lbits & rcl.sets[j], stoppers)):
                        count += 1
            sizes[table] = Size(count)
            levels[level] = out
        if len(levels) < 2:
            sizes[chain.final] = Size(None, exact=False)
            continue
        addr, port, proto = levels["addr"], levels["port"], seg["proto"][s]
        candidates, total = _candidate_pairs(addr, port)
        if total * len(proto) > work_limit:
            sizes[chain.final] = Size(total * len(proto), exact=False)
            continue
        count = 0
        for a, abits in enumerate(addr.sets):
            for p in iter_bits(candidates[a]):
                both = abits & port.sets[p]
                count += sum(1 for xbits in proto.sets if both & xbits)
        sizes[chain.final] = Size(count)
    return sizes


# -- stable numbering --------------------------------------------------------------------------

LevelKey = tuple[str, str]  # (side, level): level is a field name, "addr" or "port"
IndexHints = dict[LevelKey, dict[frozenset[int], int]]


def _numbering(
    sets: Sequence[int], uids: Sequence[int], hint: Mapping[frozenset[int], int] | None
) -> list[int]:
    """Final index of each local class: the index the same class had before, if any."""
    if not hint:
        return list(range(len(sets)))
    final = [-1] * len(sets)
    final[0] = 0
    taken = {0}
    for local in range(1, len(sets)):
        index = hint.get(frozenset(uids[t] for t in iter_bits(sets[local])))
        if index is not None and index not in taken:
            final[local] = index
            taken.add(index)
    free = 1
    for local in range(1, len(sets)):
        if final[local] < 0:
            while free in taken:
                free += 1
            final[local] = free
            taken.add(free)
    return final


# -- the result --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class CompiledTables:
    """The entries of one bank (`version`), their statistics, and what a later compile needs to
    number the same classes the same way (so that an update writes only what changed)."""

    profile: Profile
    version: int
    entries: tuple[TableEntry, ...]
    stats: CompileStats
    classes: Mapping[LevelKey, Mapping[int, int]] = field(default_factory=dict)
    term_uids: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def by_table(self) -> dict[str, list[TableEntry]]:
        out: dict[str, list[TableEntry]] = {}
        for entry in self.entries:
            out.setdefault(entry.table, []).append(entry)
        return out

    def index_hints(self) -> IndexHints:
        hints: IndexHints = {}
        for (side, level), sets in self.classes.items():
            uids = self.term_uids.get(side, ())
            hints[(side, level)] = {
                frozenset(uids[t] for t in iter_bits(bits)): index
                for index, bits in sets.items()
                if index
            }
        return hints

    def in_bank(self, version: int) -> CompiledTables:
        """The same content addressed to the other bank."""
        if version == self.version or self.profile is not Profile.HSM:
            return self
        entries = tuple(_rebank(entry, version) for entry in self.entries)
        return CompiledTables(
            self.profile, version, entries, self.stats, self.classes, self.term_uids
        )


def _rebank(entry: TableEntry, version: int) -> TableEntry:
    match = tuple(
        (name, _EXACT[version] if name == schema.VERSION_KEY else value)
        for name, value in entry.match
    )
    return TableEntry(entry.table, match, entry.action, entry.params, entry.priority)


# Shared value objects: a million entries differ only in a few small integers.
_EXACT = [Exact(0), Exact(1)]


class _Interner:
    def __init__(self) -> None:
        self.exact: dict[int, Exact] = {}
        self.pairs: dict[tuple[str, int], tuple[str, MatchValue]] = {}
        self.params: dict[tuple[str, int], tuple[str, int]] = {}

    def key(self, name: str, value: int) -> tuple[str, MatchValue]:
        pair = self.pairs.get((name, value))
        if pair is None:
            exact = self.exact.get(value)
            if exact is None:
                exact = self.exact[value] = Exact(value)
            pair = self.pairs[(name, value)] = (name, exact)
        return pair

    def param(self, name: str, value: int) -> tuple[str, int]:
        pair = self.params.get((name, value))
        if pair is None:
            pair = self.params[(name, value)] = (name, value)
        return pair


# -- the compiler ------------------------------------------------------------------------------


def compile_hsm(
    acl: Sequence[AclRule],
    ids: Sequence[IdsRule],
    *,
    version: int = 0,
    reuse: CompiledTables | None = None,
    limits: Mapping[str, int] | None = None,
    progress: Progress | None = None,
    skip_acl: Container[int] = (),
    skip_ids: Container[int] = (),
    partitioned: bool = False,
    partitions: Sequence[Container[int]] = (),
) -> CompiledTables:
    """Compile both rule sets into the HSM/IPP tables of bank `version`.

    `reuse`: the compiled content the target bank holds now; classes found there keep their
    numbers, so the update to that bank is small. `limits`: entries per table per bank (default
    half of each table's size); raises `TableOverflow` when a table would not fit. `skip_acl`,
    `skip_ids`: rules left out (positions, IDS rule ids), as `acl_terms` and `ids_terms` say.
    `partitioned`: the program has the other ACL partitions (`schema.PARTITION_CHAINS`: a hybrid
    program; the segment actions then carry their indexes too); `partitions`: the ACL positions
    they hold, in that order (at most one per chain; a position in two is in the first of them).
    """
    started = time.perf_counter()
    budget = default_limits()
    budget.update(limits or {})
    if any(partitions) and not partitioned:
        raise ValueError("ACL partitions need a program that has them (partitioned)")
    if len(partitions) > len(schema.PARTITION_SIDES):
        raise ValueError(f"at most {len(schema.PARTITION_SIDES)} extra ACL partitions")
    acl_all = acl_terms(acl, skip_acl)
    # per ACL term, the first partition that holds its rule (None: the first chain)
    placed = [next((p for p, part in enumerate(partitions) if t.rule_id in part), None)
              for t in acl_all]  # fmt: skip
    sides = [
        _Side(schema.ACL_SIDE, [t for i, t in enumerate(acl_all) if placed[i] is None]),
        _Side(schema.IDS_SIDE, ids_terms(ids, skip_ids)),
    ]
    if partitioned:
        sides += [
            _Side(side, [t for i, t in enumerate(acl_all) if placed[i] == p])
            for p, side in enumerate(schema.PARTITION_SIDES)
        ]
    hints = reuse.index_hints() if reuse is not None and reuse.profile is Profile.HSM else {}
    uids = {side.name: side.uids() for side in sides}
    phases: list[tuple[str, float]] = []
    mark = time.perf_counter()

    def phase(name: str) -> None:
        nonlocal mark
        now = time.perf_counter()
        phases.append((name, now - mark))
        mark = now

    # 1. Segmentation, one pass per field over both rule sets.
    seg_classes: dict[str, list[_Classes]] = {}
    segments: dict[str, list[tuple[int, int, int, Labels]]] = {}
    for f, fname in enumerate(schema.FIELDS):
        stop = [side.stoppers([f]) for side in sides]
        classes = [_Classes(truncate(side.wild[f], stop[s])) for s, side in enumerate(sides)]
        found: list[tuple[int, int, int, Labels]]
        if fname in ("src", "dst"):
            found = [(v, ln, 0, lab) for v, ln, lab in _addr_segments(f, sides, classes, stop)]
        elif fname in ("sport", "dport"):
            found = [(lo, hi, 0, lab) for lo, hi, lab in _port_segments(f, sides, classes, stop)]
        else:
            found = _proto_segments(f, sides, classes, stop)
        for s, side in enumerate(sides):
            if len(classes[s]) >= 1 << schema.SEG_INDEX_BITS:
                raise TableOverflow(
                    schema.SEGMENT_BY_FIELD[fname].name, len(classes[s]), 1 << schema.SEG_INDEX_BITS
                )
            LOG.debug("%s %s: %d classes", side.name, fname, len(classes[s]))
        table = schema.SEGMENT_BY_FIELD[fname].name
        if len(found) > budget[table]:
            raise TableOverflow(table, len(found), budget[table])
        seg_classes[fname] = classes
        segments[fname] = found
        if progress is not None:
            progress(table, 1, 1)
    phase("segment")

    # 2. Aggregation, independently per rule set.
    agg: dict[str, dict[str, tuple[_Classes, list[tuple[int, int, int]]]]] = {}
    finals: dict[str, list[tuple[int, int, int, int]]] = {}
    for s, side in enumerate(sides):
        chain = schema.CHAINS[side.name]
        addr = _aggregate(
            chain.addr_pair,
            seg_classes["src"][s],
            seg_classes["dst"][s],
            side.stoppers([0, 1]),
            budget[chain.addr_pair],
            progress,
        )
        port = _aggregate(
            chain.port_pair,
            seg_classes["sport"][s],
            seg_classes["dport"][s],
            side.stoppers([2, 3]),
            budget[chain.port_pair],
            progress,
        )
        agg[side.name] = {"addr": addr, "port": port}
        finals[side.name] = _final(
            chain.final, addr[0], port[0], seg_classes["proto"][s], budget[chain.final], progress
        )
        LOG.debug(
            "%s: %d address classes, %d port classes, %d final entries",
            side.name,
            len(addr[0]),
            len(port[0]),
            len(finals[side.name]),
        )
    phase("aggregate")

    # 3. Numbering (stable against the bank's previous content) and entries.
    numbers: dict[LevelKey, list[int]] = {}
    class_sets: dict[LevelKey, dict[int, int]] = {}
    for s, side in enumerate(sides):
        levels: list[tuple[str, _Classes]] = [(f, seg_classes[f][s]) for f in schema.FIELDS]
        levels += [(name, agg[side.name][name][0]) for name in ("addr", "port")]
        for level, level_classes in levels:
            key = (side.name, level)
            numbers[key] = _numbering(level_classes.sets, uids[side.name], hints.get(key))
            class_sets[key] = {numbers[key][i]: bits for i, bits in enumerate(level_classes.sets)}
    entries = _emit(version, sides, segments, agg, finals, numbers)
    phase("emit")
    elapsed = time.perf_counter() - started
    stats = CompileStats(
        profile=Profile.HSM.value,
        acl_rules=len(acl),
        ids_rules=len(ids),
        acl_terms=len(acl_all),
        ids_terms=len(sides[1].terms),
        partition_terms=tuple(len(side.terms) for side in sides[2:]),
        tables=table_stats(entries),
        classes={f"{side}.{level}": len(sets) for (side, level), sets in class_sets.items()},
        segment_entries_alone=_segments_alone(sides),
        compile_seconds=elapsed,
        phases=tuple(phases),
    )
    LOG.info("compiled %d ACL + %d IDS rules in %.2fs", len(acl), len(ids), elapsed)
    return CompiledTables(
        Profile.HSM,
        version,
        entries,
        stats,
        class_sets,
        {name: tuple(values) for name, values in uids.items()},
    )


def _emit(
    version: int,
    sides: Sequence[_Side],
    segments: Mapping[str, list[tuple[int, int, int, Labels]]],
    agg: Mapping[str, Mapping[str, tuple[_Classes, list[tuple[int, int, int]]]]],
    finals: Mapping[str, list[tuple[int, int, int, int]]],
    numbers: Mapping[LevelKey, list[int]],
) -> tuple[TableEntry, ...]:
    intern = _Interner()
    vkey: tuple[str, MatchValue] = (schema.VERSION_KEY, _EXACT[version])
    out: list[TableEntry] = []
    for seg in schema.SEGMENT_TABLES:
        # one index per side; parameters in name order, as TableEntry.make and decoding give them
        nums = sorted(
            (f"{side.name}_index", s, numbers[(side.name, seg.field)])
            for s, side in enumerate(sides)
        )
        for a, b, proto_priority, labels in segments[seg.field]:
            value: MatchValue
            priority = 0
            if seg.kind == "lpm":
                value = Lpm(a, b)
            elif seg.kind == "range":
                value = Range(a, b)
                priority = 1  # elementary intervals do not overlap
            else:
                value = Ternary(a, b)
                priority = proto_priority
            params = tuple(intern.param(name, num[labels[s]]) for name, s, num in nums)
            match = _ordered((seg.key, value), vkey)
            out.append(TableEntry(seg.name, match, seg.action, params, priority))
    for side in sides:
        chain = schema.CHAINS[side.name]
        for level, table, action, left, right in (
            ("addr", chain.addr_pair, chain.addr_action, "src", "dst"),
            ("port", chain.port_pair, chain.port_action, "sport", "dport"),
        ):
            lnum = numbers[(side.name, left)]
            rnum = numbers[(side.name, right)]
            onum = numbers[(side.name, level)]
            lname, rname = chain.seg_key(left), chain.seg_key(right)
            for i, j, k in agg[side.name][level][1]:
                match = _ordered(intern.key(lname, lnum[i]), intern.key(rname, rnum[j]), vkey)
                out.append(TableEntry(table, match, action, (intern.param("index", onum[k]),)))
        anum = numbers[(side.name, "addr")]
        pnum = numbers[(side.name, "port")]
        xnum = numbers[(side.name, "proto")]
        for a, p, x, t in finals[side.name]:
            term = side.terms[t]
            match = _ordered(
                intern.key(chain.addr_key, anum[a]),
                intern.key(chain.port_key, pnum[p]),
                intern.key(chain.seg_key("proto"), xnum[x]),
                vkey,
            )
            term_params = tuple(intern.param(name, value) for name, value in term.params)
            out.append(TableEntry(chain.final, match, term.action, term_params))
    return tuple(out)


def _ordered(*pairs: tuple[str, MatchValue]) -> tuple[tuple[str, MatchValue], ...]:
    """Match fields in name order, as TableEntry.make puts them."""
    return tuple(sorted(pairs, key=lambda pair: pair[0]))


def _segments_alone(sides: Sequence[_Side]) -> dict[str, dict[str, int]]:
    """Segment entries each rule set would need in a separate HSM (for the IPP comparison)."""
    out: dict[str, dict[str, int]] = {}
    for side in sides:
        counts: dict[str, int] = {}
        for f, fname in enumerate(schema.FIELDS):
            stop = [side.stoppers([f])]
            classes = [_Classes(truncate(side.wild[f], stop[0]))]
            if fname in ("src", "dst"):
                n = len(_addr_segments(f, [side], classes, stop))
            elif fname in ("sport", "dport"):
                n = len(_port_segments(f, [side], classes, stop))
            else:
                n = len(_proto_segments(f, [side], classes, stop))
            counts[schema.SEGMENT_BY_FIELD[fname].name] = n
        out[side.name] = counts
    return out
