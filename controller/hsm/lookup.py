"""Walk classification tables the way the P4 pipeline does (step 4 of DESIGN.md).

`TableState` models what a switch holds: entries keyed as P4Runtime addresses them, plus modified
default actions, with P4Runtime's INSERT/MODIFY/DELETE rules (inserting an existing key or
touching a missing one is an error). `Walker` classifies packets against a state: it reads the
bank from `classifier_version` once, at the start, then applies the segment tables, the pair
tables and the final tables in pipeline order, with the P4 program's default actions on a miss
(LPM: longest prefix; range/ternary: highest priority), and the hybrid's spill tables beside the
final tables (the earlier rule wins). With the naive profile's tables it applies `acl_naive` and
`ids_naive` instead.
"""

from __future__ import annotations

import bisect
import enum
import logging
from collections.abc import Iterable, Mapping, Sequence

from controller.hsm import schema
from controller.hsm.linear import Classification
from opengate.entries import Exact, Lpm, MatchValue, Range, TableEntry, Ternary
from opengate.fields import PORT_MAX, PROTO_MAX, Packet

LOG = logging.getLogger(__name__)


class Op(enum.Enum):
    INSERT = "insert"
    MODIFY = "modify"
    DELETE = "delete"


class StateError(Exception):
    """A write that a P4Runtime server would refuse (duplicate insert, missing entry)."""


class TableState:
    """A switch's classification tables, as far as the walker needs them."""

    def __init__(self, entries: Iterable[TableEntry] = ()) -> None:
        self.tables: dict[str, dict[tuple[object, ...], TableEntry]] = {}
        self.defaults: dict[str, TableEntry] = {}
        self.generation: dict[str, int] = {}
        for entry in entries:
            self.apply(Op.MODIFY if entry.is_default else Op.INSERT, entry)

    def apply(self, op: Op, entry: TableEntry) -> None:
        self.generation[entry.table] = self.generation.get(entry.table, 0) + 1
        if entry.is_default:
            if op is not Op.MODIFY:
                raise StateError(f"{entry.table}: a default action can only be modified")
            self.defaults[entry.table] = entry
            return
        table = self.tables.setdefault(entry.table, {})
        key = entry.key()
        present = key in table
        if op is Op.INSERT:
            if present:
                raise StateError(f"{entry.table}: insert of an existing entry {entry.match}")
            table[key] = entry
        elif op is Op.MODIFY:
            if not present:
                raise StateError(f"{entry.table}: modify of a missing entry {entry.match}")
            table[key] = entry
        else:
            if not present:
                raise StateError(f"{entry.table}: delete of a missing entry {entry.match}")
            del table[key]

    def entries(self) -> frozenset[TableEntry]:
        out: set[TableEntry] = set(self.defaults.values())
        for table in self.tables.values():
            out.update(table.values())
        return frozenset(out)

    def active_version(self) -> int:
        default = self.defaults.get(schema.CLASSIFIER_VERSION)
        return default.params_dict.get("version", 0) if default is not None else 0


# -- per-table indexes -------------------------------------------------------------------------


class _Index:
    def lookup(self, fields: Mapping[str, int]) -> TableEntry | None:
        raise NotImplementedError


def _exact_names(entry: TableEntry) -> tuple[str, ...]:
    return tuple(name for name, value in entry.match if isinstance(value, Exact))


class _ExactIndex(_Index):
    def __init__(self, entries: Sequence[TableEntry]) -> None:
        self.names = _exact_names(entries[0])
        self.map: dict[tuple[int, ...], TableEntry] = {}
        for entry in entries:
            values = dict(entry.match)
            self.map[tuple(_exact_value(values[n]) for n in self.names)] = entry

    def lookup(self, fields: Mapping[str, int]) -> TableEntry | None:
        return self.map.get(tuple(fields[n] for n in self.names))


def _exact_value(value: MatchValue) -> int:
    assert isinstance(value, Exact)
    return value.value


class _LpmIndex(_Index):
    """Exact fields plus one LPM field."""

    def __init__(self, entries: Sequence[TableEntry], lpm: str) -> None:
        self.names = _exact_names(entries[0])
        self.lpm = lpm
        self.map: dict[tuple[tuple[int, ...], int], dict[int, TableEntry]] = {}
        lengths: set[int] = set()
        for entry in entries:
            values = dict(entry.match)
            prefix = values[lpm]
            assert isinstance(prefix, Lpm)
            exact = tuple(_exact_value(values[n]) for n in self.names)
            mask = _mask(32, prefix.prefix_len)
            self.map.setdefault((exact, prefix.prefix_len), {})[prefix.value & mask] = entry
            lengths.add(prefix.prefix_len)
        self.lengths = sorted(lengths, reverse=True)

    def lookup(self, fields: Mapping[str, int]) -> TableEntry | None:
        exact = tuple(fields[n] for n in self.names)
        addr = fields[self.lpm]
        for length in self.lengths:
            bucket = self.map.get((exact, length))
            if bucket is not None:
                hit = bucket.get(addr & _mask(32, length))
                if hit is not None:
                    return hit
        return None


def _mask(width: int, length: int) -> int:
    full = (1 << width) - 1
    return full ^ ((1 << (width - length)) - 1)


class _RangeIndex(_Index):
    """Exact fields plus one range field: elementary intervals painted by priority."""

    def __init__(self, entries: Sequence[TableEntry], name: str) -> None:
        self.names = _exact_names(entries[0])
        self.name = name
        groups: dict[tuple[int, ...], list[TableEntry]] = {}
        for entry in entries:
            values = dict(entry.match)
            groups.setdefault(tuple(_exact_value(values[n]) for n in self.names), []).append(entry)
        self.groups: dict[tuple[int, ...], tuple[list[int], list[TableEntry | None]]] = {}
        for exact, members in groups.items():
            ranges = []
            for entry in members:
                rng = dict(entry.match)[name]
                assert isinstance(rng, Range)
                ranges.append((rng.low, rng.high, entry))
            points = sorted({0} | {lo for lo, _, _ in ranges} | {hi + 1 for _, hi, _ in ranges})
            points = [p for p in points if p <= PORT_MAX]
            best: list[TableEntry | None] = [None] * len(points)
            for lo, hi, entry in sorted(ranges, key=lambda r: r[2].priority):
                start = bisect.bisect_left(points, lo)
                stop = bisect.bisect_right(points, hi)
                for i in range(start, stop):
                    best[i] = entry  # ascending priority: the highest is painted last
            self.groups[exact] = (points, best)

    def lookup(self, fields: Mapping[str, int]) -> TableEntry | None:
        group = self.groups.get(tuple(fields[n] for n in self.names))
        if group is None:
            return None
        points, best = group
        return best[bisect.bisect_right(points, fields[self.name]) - 1]


class _TernaryByteIndex(_Index):
    """Exact fields plus one 8-bit ternary field: a 256-slot table per group."""

    def __init__(self, entries: Sequence[TableEntry], name: str) -> None:
        self.names = _exact_names(entries[0])
        self.name = name
        self.groups: dict[tuple[int, ...], list[TableEntry | None]] = {}
        by_priority = sorted(entries, key=lambda e: e.priority)
        for entry in by_priority:
            values = dict(entry.match)
            exact = tuple(_exact_value(values[n]) for n in self.names)
            slots = self.groups.setdefault(exact, [None] * (PROTO_MAX + 1))
            tern = values[name]
            assert isinstance(tern, Ternary)
            for value in range(PROTO_MAX + 1):
                if value & tern.mask == tern.value & tern.mask:
                    slots[value] = entry

    def lookup(self, fields: Mapping[str, int]) -> TableEntry | None:
        slots = self.groups.get(tuple(fields[n] for n in self.names))
        return None if slots is None else slots[fields[self.name]]


class _ScanIndex(_Index):
    """Anything else (the naive tables): highest priority first, linear scan."""

    def __init__(self, entries: Sequence[TableEntry]) -> None:
        self.entries = sorted(entries, key=lambda e: -e.priority)

    def lookup(self, fields: Mapping[str, int]) -> TableEntry | None:
        for entry in self.entries:
            if all(_matches(value, fields[name]) for name, value in entry.match):
                return entry
        return None


def _matches(value: MatchValue, field: int) -> bool:
    if isinstance(value, Exact):
        return field == value.value
    if isinstance(value, Lpm):
        mask = _mask(32, value.prefix_len)
        return field & mask == value.value & mask
    if isinstance(value, Ternary):
        return field & value.mask == value.value & value.mask
    if isinstance(value, Range):
        return value.low <= field <= value.high
    return value.value is None or field == value.value


def _build_index(entries: Sequence[TableEntry]) -> _Index:
    kinds = {name: type(value) for name, value in entries[0].match}
    others = [name for name, kind in kinds.items() if kind is not Exact]
    if not others:
        return _ExactIndex(entries)
    if len(others) == 1:
        name = others[0]
        if kinds[name] is Lpm:
            return _LpmIndex(entries, name)
        if kinds[name] is Range:
            return _RangeIndex(entries, name)
        if kinds[name] is Ternary and name == "ip_proto":
            return _TernaryByteIndex(entries, name)
    return _ScanIndex(entries)


# -- the walk ----------------------------------------------------------------------------------

_SEGMENT_DEFAULT: dict[str, int] = {}  # a miss: index 0 for every side
# (table, [(metadata field, action parameter)]) in pipeline order.
_SEGMENT_PLAN = tuple(
    (
        seg.name,
        tuple(
            (chain.seg_key(seg.field), f"{chain.side}_index") for chain in schema.CHAINS.values()
        ),
    )
    for seg in schema.SEGMENT_TABLES
)


class Walker:
    def __init__(self, state: TableState) -> None:
        self.state = state
        self._indexes: dict[str, tuple[int, _Index | None]] = {}

    def _lookup(self, table: str, fields: Mapping[str, int]) -> TableEntry | None:
        generation = self.state.generation.get(table, 0)
        cached = self._indexes.get(table)
        if cached is None or cached[0] != generation:
            entries = list(self.state.tables.get(table, {}).values())
            cached = (generation, _build_index(entries) if entries else None)
            self._indexes[table] = cached
        index = cached[1]
        return index.lookup(fields) if index is not None else None

    def classify(self, packet: Packet) -> Classification:
        if schema.ACL_NAIVE in self.state.tables or schema.IDS_NAIVE in self.state.tables:
            return self._classify_naive(packet)
        meta: dict[str, int] = {
            "ipv4_src": packet.src,
            "ipv4_dst": packet.dst,
            "l4_sport": packet.sport,
            "l4_dport": packet.dport,
            "ip_proto": packet.proto,
            schema.VERSION_KEY: self.state.active_version(),  # read once, before any lookup
        }
        for table, outputs in _SEGMENT_PLAN:
            hit = self._lookup(table, meta)
            params = dict(hit.params) if hit is not None else _SEGMENT_DEFAULT
            for field, param in outputs:
                # a program without the extra ACL partitions: no acl2_index (nor its tables)
                meta[field] = params.get(param, 0)
        results: dict[str, TableEntry | None] = {}
        for chain in schema.CHAINS.values():
            hit = self._lookup(chain.addr_pair, meta)
            meta[chain.addr_key] = hit.params[0][1] if hit is not None else 0
            hit = self._lookup(chain.port_pair, meta)
            meta[chain.port_key] = hit.params[0][1] if hit is not None else 0
            # an extra partition's miss is no verdict (NoAction), the others' their default
            final = self._lookup(chain.final, meta) or self.state.defaults.get(chain.final)
            _keep_earliest(results, chain.rule_set, final)
        # The hybrid's spilled rules: again the earliest rule of a rule set wins.
        for side, table in schema.SPILL_TABLES.items():
            _keep_earliest(results, side, self._lookup(table, meta))
        return _result(results[schema.ACL_SIDE], results[schema.IDS_SIDE])

    def _classify_naive(self, packet: Packet) -> Classification:
        fields = {
            "ipv4_src": packet.src,
            "ipv4_dst": packet.dst,
            "l4_sport": packet.sport,
            "l4_dport": packet.dport,
            "ip_proto": packet.proto,
        }
        acl = self._lookup(schema.ACL_NAIVE, fields) or self.state.defaults.get(schema.ACL_NAIVE)
        ids = self._lookup(schema.IDS_NAIVE, fields) or self.state.defaults.get(schema.IDS_NAIVE)
        return _result(acl, ids)


def _keep_earliest(
    results: dict[str, TableEntry | None], rule_set: str, entry: TableEntry | None
) -> None:
    """Merge one chain's or spill table's result into its rule set's: the earlier rule wins (a
    first result, even a default, is kept as it is)."""
    first = rule_set not in results
    if first or (entry is not None and _rule_of(entry) < _rule_of(results[rule_set])):
        results[rule_set] = entry


def _rule_of(entry: TableEntry | None) -> int:
    """The rule id an entry's action carries (RULE_NONE for none: the default verdict)."""
    if entry is None:
        return schema.RULE_NONE
    return int(entry.params_dict.get("rule_id", schema.RULE_NONE))


def _result(acl: TableEntry | None, ids: TableEntry | None) -> Classification:
    acl_rule, acl_action = -1, None
    if acl is not None:
        rule = acl.params_dict["rule_id"]
        acl_rule = -1 if rule == schema.RULE_NONE else rule
        acl_action = acl.action
    ids_class, ids_rule = 0, -1
    if ids is not None:
        params = ids.params_dict
        ids_class = params["class_id"]
        ids_rule = -1 if params["rule_id"] == schema.RULE_NONE else params["rule_id"]
    return Classification(acl_rule, acl_action, ids_class, ids_rule)
