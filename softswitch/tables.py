"""Match-action tables, their lookup structures, and action profiles / selectors.

Lookup structures are chosen per table at load time: a dict for exact tables, one dict per prefix
length for LPM, tuple-space search (one dict per distinct mask, pruned on one field) for
ternary/optional/mixed keys with range checks inside a bucket, and an elementary-interval index
for single-field range tables. Priorities are P4Runtime's: a larger number wins.
"""

from __future__ import annotations

import bisect
import heapq
import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from softswitch.externs import Meter

ActionFn = Callable[[Any, list[int], tuple[int, ...]], None]
NodeFn = Callable[[Any, list[int]], Any]

# One field of a match key, internally: exact -> value; lpm -> (value, prefix_len);
# ternary -> (value, mask); range -> (low, high); optional -> value or None (wildcard).
MatchSpec = Any


@dataclass(slots=True)
class ActionSpec:
    name: str
    id: int
    params: list[tuple[str, int]]  # (name, bitwidth)
    fn: ActionFn


@dataclass(slots=True, eq=False)
class Member:
    id: int
    action: ActionSpec
    data: tuple[int, ...]
    proto: Any = None
    # BMv2 member handles of this member: [0] is the member itself, the others are the copies
    # that PI creates for weights above 1 (a group uses handles[:weight]).
    handles: list[int] = field(default_factory=list)
    # PI's weight_counts: weight -> number of groups using the member with that weight, plus
    # one at weight 1 for the member itself. Copies above the largest counted weight are freed.
    weight_counts: dict[int, int] = field(default_factory=dict)


@dataclass(slots=True, eq=False)
class Group:
    id: int
    max_size: int
    members: dict[int, int] = field(default_factory=dict)  # member id -> weight
    expanded: tuple[Member, ...] = ()  # by increasing BMv2 member handle
    proto: Any = None


class HandleAllocator:
    """BMv2's HandleMgr: the lowest handle not in use."""

    __slots__ = ("_free", "_next")

    def __init__(self) -> None:
        self._free: list[int] = []  # a heap of released handles, all below _next
        self._next = 0

    def get(self) -> int:
        if self._free:
            return heapq.heappop(self._free)
        self._next += 1
        return self._next - 1

    def release(self, handle: int) -> None:
        heapq.heappush(self._free, handle)

    def clear(self) -> None:
        self._free.clear()
        self._next = 0


@dataclass(slots=True, eq=False)
class ActionProfile:
    """Members and groups, with member selection exactly as simple_switch_grpc makes it.

    P4Runtime weights go through PI's frontend (proto/frontend/src/action_prof_mgr.cpp), which
    has no weights on BMv2: a member of weight w is added to the group as w BMv2 members, the
    member itself and w-1 copies created on demand (in increasing P4Runtime member id order, each
    taking the lowest free BMv2 handle) and freed once no group needs them. BMv2 then picks
    `members_sorted_by_handle[hash % count]` (bm_sim/action_profile.cpp, PI/src/group_selection.cpp
    in behavioral-model), the hash being the selector's algorithm over its fields, at the
    algorithm's own width. `add_member`, `set_group_members` and `delete_group` replay PI's
    handle bookkeeping, so that the same Writes give the same handles and the same choices.
    """

    name: str
    id: int
    max_size: int
    selector_algo: str | None
    selector_hash: Callable[[Any, list[int]], int] | None
    members: dict[int, Member] = field(default_factory=dict)
    groups: dict[int, Group] = field(default_factory=dict)
    refcount: dict[tuple[str, int], int] = field(default_factory=dict)  # ("m"|"g", id) -> uses
    handles: HandleAllocator = field(default_factory=HandleAllocator)
    # told of every change of what entries choose from (profile_changed), e.g. a native mirror
    observer: Any = None

    def add_member(self, member: Member) -> None:
        """A new member (P4Runtime INSERT): one BMv2 handle."""
        member.handles = [self.handles.get()]
        member.weight_counts = {1: 1}
        self.members[member.id] = member

    def delete_member(self, member_id: int) -> None:
        member = self.members.pop(member_id)
        for h in member.handles:
            self.handles.release(h)
        member.handles = []

    def set_group_members(self, group: Group, weights: dict[int, int]) -> None:
        """Give `group` these members (id -> weight > 0), as PI's group_update_members does."""
        old = group.members
        ids = sorted(set(old) | set(weights))
        for mid in ids:  # PI walks the union of old and new members by member id
            member = self.members[mid]
            current, new = old.get(mid, 0), weights.get(mid, 0)
            while len(member.handles) < new:
                member.handles.append(self.handles.get())
            counts = member.weight_counts
            if current > 0:
                counts[current] = counts.get(current, 0) - 1
            if new > 0:
                counts[new] = counts.get(new, 0) + 1
        group.members = dict(weights)
        self.groups[group.id] = group
        for mid in ids:
            self._purge_copies(self.members[mid])
        self.expand(group)
        self._changed()

    def delete_group(self, group_id: int) -> None:
        group = self.groups.pop(group_id)
        for mid, weight in group.members.items():
            member = self.members[mid]
            member.weight_counts[weight] = member.weight_counts.get(weight, 0) - 1
            self._purge_copies(member)
        group.members = {}
        group.expanded = ()

    def _purge_copies(self, member: Member) -> None:
        counts = member.weight_counts
        used = [w for w, n in counts.items() if n > 0]
        top = max(used) if used else 1
        for w in [w for w in counts if w > top]:
            del counts[w]
        while len(member.handles) > top:
            self.handles.release(member.handles.pop())

    def expand(self, group: Group) -> None:
        """Recompute the member sequence that selection indexes into: BMv2's member handles of
        the group in increasing order (the member itself and its weight copies)."""
        by_handle: list[tuple[int, Member]] = []
        for mid, weight in group.members.items():
            member = self.members.get(mid)
            if member is not None:
                by_handle.extend((h, member) for h in member.handles[:weight])
        by_handle.sort(key=lambda hm: hm[0])
        group.expanded = tuple(m for _, m in by_handle)

    def refresh_groups_of(self, member_id: int) -> None:
        for group in self.groups.values():
            if member_id in group.members:
                self.expand(group)
        self._changed()

    def _changed(self) -> None:
        """Tell the observer that what entries choose from changed (once per write)."""
        if self.observer is not None:
            self.observer.profile_changed(self)

    def clear(self) -> None:
        self.members.clear()
        self.groups.clear()
        self.refcount.clear()
        self.handles.clear()


@dataclass(slots=True, eq=False)
class Entry:
    key: tuple[MatchSpec, ...]
    priority: int
    action: ActionSpec | None
    data: tuple[int, ...]
    fn: ActionFn | None
    nxt: NodeFn | None = None
    member: Member | None = None
    group: Group | None = None
    ctr: list[int] | None = None
    meter: Meter | None = None
    timeout_ns: int = 0
    last_hit: int = 0
    notified: bool = False
    controller_metadata: int = 0
    metadata: bytes = b""
    is_const: bool = False
    ranges: tuple[tuple[int, int, int], ...] = ()  # (position, low, high) checked in buckets


class Index:
    """A lookup structure: maps a packet's key to the winning entry."""

    def lookup(self, key: Any) -> Entry | None:
        raise NotImplementedError

    def add(self, entry: Entry) -> None:
        raise NotImplementedError

    def remove(self, entry: Entry) -> None:
        raise NotImplementedError

    def clear(self) -> None:
        raise NotImplementedError


class KeylessIndex(Index):
    def lookup(self, key: Any) -> Entry | None:
        return None

    def add(self, entry: Entry) -> None:
        raise ValueError("a keyless table holds no entries")

    def remove(self, entry: Entry) -> None:
        pass

    def clear(self) -> None:
        pass


class ExactIndex(Index):
    """Keys: the field value for a one-field key, else the tuple of values."""

    def __init__(self, nfields: int) -> None:
        self.single = nfields == 1
        self.entries: dict[Any, Entry] = {}
        self.lookup = self.entries.get  # type: ignore[method-assign,assignment]

    def _key(self, entry: Entry) -> Any:
        return entry.key[0] if self.single else tuple(entry.key)

    def add(self, entry: Entry) -> None:
        self.entries[self._key(entry)] = entry

    def remove(self, entry: Entry) -> None:
        self.entries.pop(self._key(entry), None)

    def clear(self) -> None:
        self.entries.clear()


class LpmIndex(Index):
    """One dict per prefix length, longest first; the other key fields are exact."""

    def __init__(self, kinds: list[str], widths: list[int]) -> None:
        self.pos = kinds.index("lpm")
        self.width = widths[self.pos]
        self.single = len(kinds) == 1
        self.levels: list[tuple[int, int, dict[Any, Entry]]] = []  # (plen, mask, dict)
        self.by_len: dict[int, dict[Any, Entry]] = {}

    def _mask(self, plen: int) -> int:
        return ((1 << plen) - 1) << (self.width - plen)

    def _key_of(self, key: tuple[Any, ...], mask: int) -> Any:
        if self.single:
            return key[0] & mask
        items = list(key)
        items[self.pos] = items[self.pos] & mask
        return tuple(items)

    def _rebuild_levels(self) -> None:
        self.levels = [
            (plen, self._mask(plen), self.by_len[plen])
            for plen in sorted(self.by_len, reverse=True)
        ]

    def _entry_key(self, entry: Entry) -> tuple[int, Any]:
        value, plen = entry.key[self.pos]
        items = list(entry.key)
        items[self.pos] = value
        return plen, self._key_of(tuple(items), self._mask(plen))

    def add(self, entry: Entry) -> None:
        plen, k = self._entry_key(entry)
        level = self.by_len.get(plen)
        if level is None:
            level = self.by_len[plen] = {}
            self._rebuild_levels()
        level[k] = entry

    def remove(self, entry: Entry) -> None:
        plen, k = self._entry_key(entry)
        level = self.by_len.get(plen)
        if level is not None:
            level.pop(k, None)
            if not level:
                del self.by_len[plen]
                self._rebuild_levels()

    def clear(self) -> None:
        self.by_len.clear()
        self.levels = []

    def lookup(self, key: Any) -> Entry | None:
        if self.single:
            for _, mask, level in self.levels:
                e = level.get(key & mask)
                if e is not None:
                    return e
            return None
        pos = self.pos
        items = list(key)
        value = items[pos]
        for _, mask, level in self.levels:
            items[pos] = value & mask
            e = level.get(tuple(items))
            if e is not None:
                return e
        return None


def _full(width: int) -> int:
    return (1 << width) - 1


class _Bucketed:
    __slots__ = ("buckets", "masks", "maxprio", "pruned")

    def __init__(self, masks: tuple[int, ...]) -> None:
        self.masks = masks
        self.buckets: dict[tuple[int, ...], _Bucket] = {}
        self.maxprio = -1
        self.pruned: dict[int, int] = {}  # pruning field's masked value -> buckets with it


# Tuple pruning (Srinivasan et al.): with this many groups or more, a lookup first asks which
# groups hold the key's value in one ternary/LPM field, and probes only those. A miss then costs
# one probe per distinct mask of that field, not one per group.
PRUNE_GROUPS = 8


class TernaryIndex(Index):
    """Tuple-space search: entries grouped by their per-field masks (range fields: mask 0,
    checked inside the bucket). Groups are visited by decreasing best priority."""

    def __init__(self, kinds: list[str], widths: list[int]) -> None:
        self.kinds = kinds
        self.widths = widths
        self.groups: dict[tuple[int, ...], _Bucketed] = {}
        self.order: list[_Bucketed] = []
        # the pruning field: the first ternary or LPM one (-1: none); its mask -> value -> groups
        self.prune_at = next((i for i, k in enumerate(kinds) if k in ("ternary", "lpm")), -1)
        self.pruning: dict[int, dict[int, list[_Bucketed]]] = {}

    def _masks_and_value(self, entry: Entry) -> tuple[tuple[int, ...], tuple[int, ...]]:
        masks: list[int] = []
        values: list[int] = []
        for kind, width, spec in zip(self.kinds, self.widths, entry.key, strict=True):
            if kind in ("exact", "valid"):
                masks.append(_full(width))
                values.append(spec)
            elif kind == "ternary":
                masks.append(spec[1])
                values.append(spec[0] & spec[1])
            elif kind == "lpm":
                m = _full(width) ^ _full(width - spec[1])
                masks.append(m)
                values.append(spec[0] & m)
            elif kind == "optional":
                if spec is None:
                    masks.append(0)
                    values.append(0)
                else:
                    masks.append(_full(width))
                    values.append(spec)
            else:  # range
                masks.append(0)
                values.append(0)
        return tuple(masks), tuple(values)

    def _reorder(self) -> None:
        self.order = sorted(self.groups.values(), key=lambda g: -g.maxprio)

    def add(self, entry: Entry) -> None:
        masks, values = self._masks_and_value(entry)
        group = self.groups.get(masks)
        if group is None:
            group = self.groups[masks] = _Bucketed(masks)
        bucket = group.buckets.get(values)
        if bucket is None:
            bucket = group.buckets[values] = _Bucket()
            self._prune_add(group, values)
        bucket.append(entry)
        bucket.sort(key=lambda e: -e.priority)
        bucket.iv = None
        group.maxprio = max(group.maxprio, entry.priority)
        self._reorder()

    def remove(self, entry: Entry) -> None:
        masks, values = self._masks_and_value(entry)
        group = self.groups.get(masks)
        if group is None:
            return
        bucket = group.buckets.get(values)
        if bucket is None:
            return
        bucket[:] = [e for e in bucket if e is not entry]
        bucket.iv = None
        if not bucket:
            del group.buckets[values]
            self._prune_remove(group, values)
        if not group.buckets:
            del self.groups[masks]
        else:
            group.maxprio = max(b[0].priority for b in group.buckets.values())
        self._reorder()

    def clear(self) -> None:
        self.groups.clear()
        self.order = []
        self.pruning = {}

    def _prune_add(self, group: _Bucketed, values: tuple[int, ...]) -> None:
        at = self.prune_at
        if at < 0:
            return
        value = values[at]
        count = group.pruned.get(value, 0)
        group.pruned[value] = count + 1
        if count == 0:
            self.pruning.setdefault(group.masks[at], {}).setdefault(value, []).append(group)

    def _prune_remove(self, group: _Bucketed, values: tuple[int, ...]) -> None:
        at = self.prune_at
        if at < 0:
            return
        value = values[at]
        count = group.pruned[value] - 1
        if count:
            group.pruned[value] = count
            return
        del group.pruned[value]
        by_value = self.pruning[group.masks[at]]
        holders = [g for g in by_value[value] if g is not group]
        if holders:
            by_value[value] = holders
        else:
            del by_value[value]
            if not by_value:
                del self.pruning[group.masks[at]]

    def _candidates(self, key: Any) -> list[_Bucketed]:
        """The groups that can match `key` in the pruning field, by decreasing best priority."""
        k = key[self.prune_at]
        out: list[_Bucketed] = []
        for mask, by_value in self.pruning.items():
            holders = by_value.get(k & mask)
            if holders:
                out.extend(holders)
        if len(out) > 1:
            out.sort(key=_best_first)
        return out

    @staticmethod
    def _interval_index(bucket: _Bucket) -> Any:
        positions = {tuple(r[0] for r in e.ranges) for e in bucket}
        if len(positions) != 1:
            return False
        (pos_tuple,) = positions
        if len(pos_tuple) != 1:
            return False
        starts, winners = paint_intervals(list(bucket), pos_tuple[0])
        return pos_tuple[0], starts, winners

    def lookup(self, key: Any) -> Entry | None:
        best: Entry | None = None
        best_prio = -(1 << 62)
        and_ = operator.and_
        order = self.order
        if len(order) >= PRUNE_GROUPS and self.prune_at >= 0:
            order = self._candidates(key)
        for group in order:
            if group.maxprio <= best_prio:
                break
            bucket = group.buckets.get(tuple(map(and_, key, group.masks)))
            if bucket is None:
                continue
            if len(bucket) > 8:
                iv = bucket.iv
                if iv is None:
                    iv = bucket.iv = self._interval_index(bucket)
                if iv is not False:
                    pos, starts, winners = iv
                    i = bisect.bisect_right(starts, key[pos]) - 1
                    e = winners[i] if i >= 0 else None
                    if e is not None and e.priority > best_prio:
                        best = e
                        best_prio = e.priority
                    continue
            for e in bucket:
                if e.priority <= best_prio:
                    break
                for pos, low, high in e.ranges:
                    if not low <= key[pos] <= high:
                        break
                else:
                    best = e
                    best_prio = e.priority
                    break
        return best


def _best_first(group: _Bucketed) -> int:
    return -group.maxprio


def paint_intervals(entries: list[Entry], pos: int) -> tuple[list[int], list[Entry | None]]:
    """Elementary intervals of the range field at `pos` and the best entry of each (by painting
    intervals in decreasing priority, skipping painted ones with a union-find)."""
    points: set[int] = set()
    for e in entries:
        low, high = e.key[pos]
        points.add(low)
        points.add(high + 1)
    starts = sorted(points)
    winners: list[Entry | None] = [None] * len(starts)
    next_free = list(range(len(starts) + 1))

    def find(i: int) -> int:
        root = i
        while next_free[root] != root:
            root = next_free[root]
        while next_free[i] != root:
            next_free[i], i = root, next_free[i]
        return root

    for e in sorted(entries, key=lambda x: -x.priority):
        low, high = e.key[pos]
        i = find(bisect.bisect_left(starts, low))
        end = bisect.bisect_left(starts, high + 1)
        while i < end:
            winners[i] = e
            next_free[i] = i + 1
            i = find(i + 1)
    return starts, winners


class _Bucket(list[Entry]):
    """Entries sharing one masked key; big buckets whose entries differ by one range field get
    an interval index (built lazily, dropped on change)."""

    iv: Any = None


class RangeIndex(Index):
    """A one-field range table: elementary intervals, each holding its winning entry, searched by
    bisection. Rebuilt lazily after a change (painting intervals by decreasing priority)."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.starts: list[int] = []
        self.winners: list[Entry | None] = []
        self.dirty = False

    def add(self, entry: Entry) -> None:
        self.entries.append(entry)
        self.dirty = True

    def remove(self, entry: Entry) -> None:
        self.entries = [e for e in self.entries if e is not entry]
        self.dirty = True

    def clear(self) -> None:
        self.entries = []
        self.dirty = True

    def _rebuild(self) -> None:
        self.starts, self.winners = paint_intervals(self.entries, 0)
        self.dirty = False

    def lookup(self, key: Any) -> Entry | None:
        if self.dirty:
            self._rebuild()
        i = bisect.bisect_right(self.starts, key[0]) - 1
        return self.winners[i] if i >= 0 else None


@dataclass(slots=True, eq=False)
class Table:
    name: str
    id: int
    kinds: list[str]
    widths: list[int]
    key_names: list[str]
    impl: str  # simple | indirect | indirect_ws
    profile: ActionProfile | None
    actions: dict[int, ActionSpec]
    max_size: int
    with_counters: bool
    support_timeout: bool
    direct_meter: Any  # MeterArray | None
    next_by_action: dict[str, str | None]
    hit_next: str | None
    miss_next: str | None
    has_hit_miss: bool
    base_default_next: str | None
    index: Index = field(default_factory=KeylessIndex)
    entries: dict[Any, Entry] = field(default_factory=dict)
    default: Entry | None = None
    initial_default: tuple[ActionSpec, tuple[int, ...]] | None = None
    default_const: bool = False
    immutable: bool = False
    nodes: dict[str, NodeFn] = field(default_factory=dict)  # node name -> compiled function
    # told of every entry added or removed and every default set (a native mirror)
    observer: Any = None

    # whether entries carry a priority (a ternary, range or optional field): set from `kinds`
    needs_priority: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self.needs_priority = any(k in ("ternary", "range", "optional") for k in self.kinds)

    def actions_by_name(self, name: str) -> ActionSpec | None:
        for spec in self.actions.values():
            if spec.name == name:
                return spec
        return None

    def next_node(self, action_name: str | None, hit: bool) -> NodeFn | None:
        if self.has_hit_miss:
            name = self.hit_next if hit else self.miss_next
        elif action_name is not None and action_name in self.next_by_action:
            name = self.next_by_action[action_name]
        else:
            name = self.base_default_next
        return self.nodes.get(name) if name else None

    def new_entry(
        self,
        key: tuple[MatchSpec, ...],
        priority: int,
        action: ActionSpec | None,
        data: tuple[int, ...],
        member: Member | None = None,
        group: Group | None = None,
    ) -> Entry:
        """An entry ready for insertion: next node, counters and meter attached."""
        ranges = tuple(
            (pos, spec[0], spec[1])
            for pos, (kind, spec) in enumerate(zip(self.kinds, key, strict=True))
            if kind == "range"
        )
        entry = Entry(
            key,
            priority,
            action,
            data,
            action.fn if action is not None else None,
            self.next_node(action.name, hit=True) if action is not None else None,
            member=member,
            group=group,
            ranges=ranges,
        )
        if self.with_counters:
            entry.ctr = [0, 0]
        if self.direct_meter is not None:
            entry.meter = Meter(self.direct_meter.packets)
        return entry

    def set_default(self, action: ActionSpec, data: tuple[int, ...]) -> None:
        self.default = Entry((), 0, action, data, action.fn, self.next_node(action.name, hit=False))
        if self.observer is not None:
            self.observer.default_set(self)

    def canonical(self, key: tuple[MatchSpec, ...], priority: int) -> Any:
        return (key, priority) if self.needs_priority else key

    def iter_entries(self) -> Iterator[Entry]:
        return iter(list(self.entries.values()))

    def insert(self, entry: Entry) -> None:
        self.entries[self.canonical(entry.key, entry.priority)] = entry
        self.index.add(entry)
        if self.observer is not None:
            self.observer.entry_added(self, entry)

    def delete(self, entry: Entry) -> None:
        self.entries.pop(self.canonical(entry.key, entry.priority), None)
        self.index.remove(entry)
        if self.observer is not None:
            self.observer.entry_removed(self, entry)

    def clear(self) -> None:
        gone = list(self.entries.values())
        self.entries.clear()
        self.index.clear()
        if self.observer is not None:
            self.observer.cleared(self, gone)


def make_index(kinds: list[str], widths: list[int]) -> Index:
    if not kinds:
        return KeylessIndex()
    if all(k in ("exact", "valid") for k in kinds):
        return ExactIndex(len(kinds))
    if kinds.count("lpm") == 1 and all(k in ("exact", "valid", "lpm") for k in kinds):
        return LpmIndex(kinds, widths)
    if kinds == ["range"]:
        return RangeIndex()
    return TernaryIndex(kinds, widths)


def index_key_style(kinds: list[str]) -> str:
    """How compiled code must present a packet's key to the table's index."""
    if not kinds:
        return "none"
    if len(kinds) == 1 and kinds[0] in ("exact", "valid", "lpm"):
        return "int"
    return "tuple"
