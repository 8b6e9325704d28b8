"""Lookup structures against a brute-force reference (highest priority wins)."""

from __future__ import annotations

import random

from softswitch.tables import PRUNE_GROUPS, Entry, MatchSpec, RangeIndex, TernaryIndex


def brute(entries: list[Entry], kinds: list[str], key: tuple[int, ...]) -> Entry | None:
    best = None
    for e in entries:
        ok = True
        for kind, spec, k in zip(kinds, e.key, key, strict=True):
            if kind == "exact":
                ok = ok and k == spec
            elif kind == "ternary":
                ok = ok and (k & spec[1]) == spec[0]
            elif kind == "range":
                ok = ok and spec[0] <= k <= spec[1]
        if ok and (best is None or e.priority > best.priority):
            best = e
    return best


def make_entry(key: tuple[MatchSpec, ...], prio: int, kinds: list[str]) -> Entry:
    ranges = tuple(
        (i, s[0], s[1]) for i, (k, s) in enumerate(zip(kinds, key, strict=True)) if k == "range"
    )
    return Entry(key, prio, None, (), None, ranges=ranges)


def test_exact_plus_range_table_matches_brute_force_with_interval_buckets() -> None:
    rng = random.Random(3)
    kinds = ["exact", "range"]
    index = TernaryIndex(kinds, [8, 16])
    entries = []
    for prio in range(1, 300):
        lo = rng.randrange(0, 60000)
        e = make_entry((rng.randrange(3), (lo, lo + rng.randrange(0, 5000))), prio, kinds)
        entries.append(e)
        index.add(e)
    for victim in entries[::7]:
        index.remove(victim)
    live = [e for i, e in enumerate(entries) if i % 7]
    for _ in range(2000):
        key = (rng.randrange(3), rng.randrange(0, 65536))
        assert index.lookup(key) is brute(live, kinds, key)


def test_ternary_plus_range_matches_brute_force() -> None:
    rng = random.Random(4)
    kinds = ["ternary", "range"]
    index = TernaryIndex(kinds, [8, 8])
    entries = []
    for prio in range(1, 200):
        mask = rng.choice((0, 0xF0, 0xFF))
        lo = rng.randrange(256)
        e = make_entry(
            ((rng.randrange(256) & mask, mask), (lo, rng.randrange(lo, 256))), prio, kinds
        )
        entries.append(e)
        index.add(e)
    for _ in range(2000):
        key = (rng.randrange(256), rng.randrange(256))
        assert index.lookup(key) is brute(entries, kinds, key)


def test_single_range_index_matches_brute_force() -> None:
    rng = random.Random(5)
    index = RangeIndex()
    entries = []
    for prio in range(1, 300):
        lo = rng.randrange(1000)
        e = make_entry(((lo, rng.randrange(lo, 1000)),), prio, ["range"])
        entries.append(e)
        index.add(e)
    for k in range(1001):
        assert index.lookup((k,)) is brute(entries, ["range"], (k,))


def test_many_mask_groups_pruned_on_one_field_match_brute_force() -> None:
    """Enough groups for tuple pruning (on the first ternary field); entries removed and added
    again in between; keys near the entries' values and random ones."""
    rng = random.Random(6)
    kinds = ["exact", "ternary", "ternary", "range"]
    index = TernaryIndex(kinds, [1, 16, 16, 16])
    masks = [0, 0xFF00, 0xFFF0, 0xFFFF, 0xF000]
    entries = []
    for prio in range(1, 400):
        m1, m2 = rng.choice(masks), rng.choice(masks)
        lo = rng.randrange(65536)
        key: tuple[MatchSpec, ...] = (
            rng.randrange(2),
            (rng.randrange(65536) & m1, m1),
            (rng.randrange(65536) & m2, m2),
            (lo, min(65535, lo + rng.randrange(20000))),
        )
        entries.append(make_entry(key, prio, kinds))
    for e in entries:
        index.add(e)
    assert len(index.groups) >= PRUNE_GROUPS
    for victim in entries[::5]:
        index.remove(victim)
    for again in entries[::10]:
        index.add(again)
    live = [e for i, e in enumerate(entries) if i % 5 or i % 10 == 0]
    for _ in range(3000):
        near = rng.choice(entries).key
        key = (
            rng.randrange(2),
            near[1][0] | rng.randrange(16) if rng.random() < 0.7 else rng.randrange(65536),
            near[2][0] | rng.randrange(16) if rng.random() < 0.7 else rng.randrange(65536),
            rng.randrange(65536),
        )
        assert index.lookup(key) is brute(live, kinds, key)
