"""What a compile produced: entries and bytes per table, lookups and memory accesses per packet.

Memory model (the same for every profile, so that they compare): an entry costs its key bits
(exact: the field width; LPM: width + 8 bits of prefix length; ternary: value + mask; range:
low + high), its action data bits (parameters, plus 8 bits of action id where a table has more
than one action) and, in ternary/range tables, a 32-bit priority; rounded up to whole bytes.

Lookups per packet count table applications on the classification path, without the keyless
`classifier_version` read (IPP: 5 segment + 2 x 3 aggregation = 11; two separate HSMs: 2 x 8 = 16).
Memory accesses follow the HSM paper's model: a segment table is a binary search over its
elementary intervals (ceil(log2(n + 1)) accesses), every other table is one access (hashed exact
match or, for the protocol, a 256-entry direct table).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from controller.hsm import schema
from opengate.entries import Lpm, Range, TableEntry, Ternary

_PARAM_BITS = {
    "acl_index": schema.SEG_INDEX_BITS,
    "ids_index": schema.SEG_INDEX_BITS,
    "index": schema.AGG_INDEX_BITS,
    "rule_id": schema.RULE_ID_BITS,
    "class_id": schema.CLASS_ID_BITS,
}
_MULTI_ACTION_TABLES = {schema.ACL_CHAIN.final, schema.ACL_NAIVE}


def entry_bits(entry: TableEntry) -> int:
    """Bits of one entry: its key (a mask per ternary or range field, a prefix length per LPM
    field), its action's parameters, an action id where a table has several, a priority for
    ternary and range keys. The same for every entry of one shape, so counted once per shape."""
    shape = (
        entry.table,
        tuple((name, value.__class__) for name, value in entry.match),
        tuple(name for name, _ in entry.params),
    )
    bits = _SHAPE_BITS.get(shape)
    if bits is None:
        bits = _SHAPE_BITS[shape] = _shape_bits(*shape)
    return bits


_SHAPE_BITS: dict[tuple[str, tuple[tuple[str, type], ...], tuple[str, ...]], int] = {}


def _shape_bits(table: str, match: tuple[tuple[str, type], ...], params: tuple[str, ...]) -> int:
    bits = 0
    ranged = False
    for name, kind in match:
        width = _key_width(table, name)
        if kind is Lpm:
            bits += width + 8
        elif kind is Ternary or kind is Range:
            bits += 2 * width
            ranged = True
        else:
            bits += width
    bits += sum(_PARAM_BITS.get(name, 32) for name in params)
    if table in _MULTI_ACTION_TABLES:
        bits += 8
    if ranged:
        bits += 32
    return bits


def entry_bytes(entry: TableEntry) -> int:
    return (entry_bits(entry) + 7) // 8


def _key_width(table: str, name: str) -> int:
    if name == schema.VERSION_KEY:
        return 1
    if name in ("ipv4_src", "ipv4_dst"):
        return 32
    if name in ("l4_sport", "l4_dport"):
        return 16
    if name == "ip_proto":
        return 8
    if name.endswith("_addr_index") or name.endswith("_port_index"):
        return schema.AGG_INDEX_BITS
    return schema.SEG_INDEX_BITS


@dataclass(frozen=True, slots=True)
class TableStats:
    table: str
    entries: int
    bytes: int


def table_stats(entries: Iterable[TableEntry]) -> tuple[TableStats, ...]:
    counts: dict[str, list[int]] = {}
    for entry in entries:
        slot = counts.setdefault(entry.table, [0, 0])
        slot[0] += 1
        slot[1] += entry_bytes(entry)
    return tuple(TableStats(name, n, b) for name, (n, b) in sorted(counts.items()))


def segment_accesses(entries: int, kind: str) -> int:
    """Binary-search accesses for a segment table of `entries` prefixes or ranges."""
    if kind == "ternary":
        return 1
    intervals = 2 * entries + 1  # prefixes or ranges cut the field into at most 2n+1 pieces
    return max(1, math.ceil(math.log2(intervals + 1)))


@dataclass(frozen=True, slots=True)
class CompileStats:
    profile: str
    acl_rules: int
    ids_rules: int
    acl_terms: int
    ids_terms: int
    tables: tuple[TableStats, ...]
    classes: Mapping[str, int] = field(default_factory=dict)
    segment_entries_alone: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    compile_seconds: float = 0.0
    phases: tuple[tuple[str, float], ...] = ()
    fallback_reason: str | None = None
    acl_spilled: int = 0  # hybrid: ACL rules in acl_spill
    ids_spilled: int = 0  # hybrid: IDS rules in ids_spill
    # hybrid: ACL terms in each other ACL partition (acl2_* to acl6_* tables), in that order
    partition_terms: tuple[int, ...] = ()

    def entries(self, table: str) -> int:
        return sum(t.entries for t in self.tables if t.table == table)

    @property
    def total_entries(self) -> int:
        return sum(t.entries for t in self.tables)

    @property
    def total_bytes(self) -> int:
        return sum(t.bytes for t in self.tables)

    @property
    def spilled(self) -> bool:
        return bool(self.acl_spilled or self.ids_spilled)

    @property
    def lookups_per_packet(self) -> int:
        if self.profile == "naive":
            return 2
        return len(schema.SEGMENT_TABLES) + 2 * 3 + self._hybrid_lookups()

    def _hybrid_lookups(self) -> int:
        """The extra ACL partitions' chains and the spill tables, where they hold rules."""
        chains = sum(1 for terms in self.partition_terms if terms)
        return 3 * chains + (2 if self.spilled else 0)

    @property
    def separate_lookups_per_packet(self) -> int:
        return 2 * (len(schema.SEGMENT_TABLES) + 3)

    def memory_accesses(self) -> int:
        """Per packet, IPP: one binary search per field, then 2 x 3 aggregation accesses."""
        if self.profile == "naive":
            return 2
        seg = sum(segment_accesses(self.entries(t.name), t.kind) for t in schema.SEGMENT_TABLES)
        return seg + 6 + self._hybrid_lookups()  # a spill table: one TCAM access

    def separate_memory_accesses(self) -> int:
        """The same for two separate HSMs (each rule set segments every field on its own)."""
        total = 0
        for side in schema.SIDES:
            alone = self.segment_entries_alone.get(side, {})
            total += sum(
                segment_accesses(alone.get(t.name, 0), t.kind) for t in schema.SEGMENT_TABLES
            )
            total += 3
        return total

    def separate_segment_bytes(self) -> int:
        """Segment-table bytes of two separate HSMs (one index per entry instead of two)."""
        total = 0
        for side in schema.SIDES:
            for seg in schema.SEGMENT_TABLES:
                n = self.segment_entries_alone.get(side, {}).get(seg.name, 0)
                key = seg.width + 8 if seg.kind == "lpm" else 2 * seg.width
                prio = 32 if seg.kind != "lpm" else 0
                total += n * ((1 + key + schema.SEG_INDEX_BITS + prio + 7) // 8)
        return total

    def segment_bytes(self) -> int:
        return sum(t.bytes for t in self.tables if t.table.endswith("_segment"))

    def summary_rows(self) -> Sequence[tuple[str, int, int]]:
        return [(t.table, t.entries, t.bytes) for t in self.tables]
