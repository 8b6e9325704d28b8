"""The C table index (softswitch/native/og_table.c and og_table_index.c) against a brute-force
reference.

The C files are compiled into a shared object and driven through ctypes. Entries and keys are random
with fixed seeds; keys are mostly built to fall on an entry (its cared-for bits, a point of its
ranges) so that overlaps, priorities and ties are exercised. The reference matches an entry iff
every field has (key & mask) == (bits & mask) and every range field lo <= key <= hi; the winner is
the largest priority, ties going to the entry added first.
"""

from __future__ import annotations

import ctypes
import random
import shutil
import subprocess
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

NATIVE = Path(__file__).resolve().parents[2] / "softswitch" / "native"
SOURCES = [NATIVE / "og_table.c", NATIVE / "og_table_index.c"]
EXACT, LPM, TERNARY, RANGE, OPTIONAL = range(5)
MAX_FIELDS = 16
U64 = ctypes.c_uint64
P64 = ctypes.POINTER(U64)


def full(width: int) -> int:
    return (1 << width) - 1


def prefix(width: int, plen: int) -> int:
    return full(width) ^ full(width - plen)


@dataclass(slots=True, frozen=True)
class Spec:
    """One entry's match: per field its bits (not masked), mask, and range bounds."""

    bits: tuple[int, ...]
    mask: tuple[int, ...]
    lo: tuple[int, ...]
    hi: tuple[int, ...]
    prio: int


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler: `cc` is not on PATH")
    out = tmp_path_factory.mktemp("og_table") / "og_table.so"
    cmd = [cc, "-std=c99", "-O2", "-Wall", "-Wextra", "-shared", "-fPIC", "-o", str(out)]
    subprocess.run([*cmd, *map(str, SOURCES)], check=True, capture_output=True, text=True)
    so = ctypes.CDLL(str(out))
    so.og_table_new.argtypes = [ctypes.c_uint32, ctypes.c_char_p, ctypes.c_char_p]
    so.og_table_new.restype = ctypes.c_void_p
    so.og_table_free.argtypes = [ctypes.c_void_p]
    so.og_table_free.restype = None
    for name in ("og_table_add", "og_table_remove"):
        fn = getattr(so, name)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, P64, P64, P64, P64, ctypes.c_int64]
        fn.restype = ctypes.c_int
    so.og_table_clear.argtypes = [ctypes.c_void_p]
    so.og_table_clear.restype = None
    so.og_table_size.argtypes = [ctypes.c_void_p]
    so.og_table_size.restype = ctypes.c_uint64
    so.og_table_lookup.argtypes = [ctypes.c_void_p, P64]
    so.og_table_lookup.restype = ctypes.c_void_p
    return so


class Native:
    """An og_table; values are small non-zero integers passed as pointers."""

    def __init__(self, so: ctypes.CDLL, kinds: Sequence[int], widths: Sequence[int]) -> None:
        self.so = so
        self.n = len(kinds)
        self.ptr = so.og_table_new(self.n, bytes(kinds), bytes(widths))
        assert self.ptr
        self.bufs = [(U64 * MAX_FIELDS)() for _ in range(5)]

    def _call(self, fn: str, value: int, spec: Spec) -> int:
        bits, mask, lo, hi, _ = self.bufs
        bits[: self.n] = list(spec.bits)
        mask[: self.n] = list(spec.mask)
        lo[: self.n] = list(spec.lo)
        hi[: self.n] = list(spec.hi)
        return int(getattr(self.so, fn)(self.ptr, value, bits, mask, lo, hi, spec.prio))

    def add(self, value: int, spec: Spec) -> int:
        return self._call("og_table_add", value, spec)

    def remove(self, value: int, spec: Spec) -> int:
        return self._call("og_table_remove", value, spec)

    def lookup(self, key: Sequence[int]) -> int | None:
        buf = self.bufs[4]
        buf[: self.n] = list(key)
        return self.so.og_table_lookup(self.ptr, buf)  # type: ignore[no-any-return]

    def size(self) -> int:
        return int(self.so.og_table_size(self.ptr))

    def clear(self) -> None:
        self.so.og_table_clear(self.ptr)

    def close(self) -> None:
        self.so.og_table_free(self.ptr)
        self.ptr = None


class Reference:
    """The live entries in insertion order; a lookup tries them all."""

    def __init__(self, kinds: Sequence[int]) -> None:
        self.ranges = [i for i, k in enumerate(kinds) if k == RANGE]
        self.masked = [i for i, k in enumerate(kinds) if k != RANGE]
        self.live: dict[int, Spec] = {}  # value -> spec, in insertion order

    def add(self, value: int, spec: Spec) -> None:
        self.live[value] = spec

    def remove(self, value: int) -> None:
        del self.live[value]

    def clear(self) -> None:
        self.live.clear()

    def matches(self, spec: Spec, key: Sequence[int]) -> bool:
        for i in self.masked:
            if (key[i] ^ spec.bits[i]) & spec.mask[i]:
                return False
        return all(spec.lo[i] <= key[i] <= spec.hi[i] for i in self.ranges)

    def lookup(self, key: Sequence[int]) -> int | None:
        best: int | None = None
        best_prio = 0
        for value, spec in self.live.items():  # earliest first: a tie keeps the earlier one
            if (best is None or spec.prio > best_prio) and self.matches(spec, key):
                best, best_prio = value, spec.prio
        return best


MakeNative = Callable[[Sequence[int], Sequence[int]], Native]


@pytest.fixture
def make_native(lib: ctypes.CDLL) -> Iterator[MakeNative]:
    """Tables of given kinds and widths, freed after the test."""
    made: list[Native] = []

    def make(kinds: Sequence[int], widths: Sequence[int]) -> Native:
        made.append(Native(lib, kinds, widths))
        return made[-1]

    yield make
    for t in made:
        if t.ptr:
            t.close()


class Shape:
    """Random entries and keys for one key layout."""

    def __init__(
        self,
        rng: random.Random,
        kinds: Sequence[int],
        widths: Sequence[int],
        pool: int = 6,
        spans: Sequence[int] = (0, 1, 10, 300, 5000),
        ternary_masks: Sequence[Sequence[int]] | None = None,
        lpm_lens: Sequence[int] | None = None,
    ) -> None:
        self.rng = rng
        self.kinds = list(kinds)
        self.widths = list(widths)
        self.spans = spans
        # a few values per field, so that entries overlap and share buckets
        self.pools = [[rng.getrandbits(w) for _ in range(pool)] for w in widths]
        self.tmasks = [
            list(ternary_masks[i])
            if ternary_masks
            else [full(w), 0, prefix(w, w // 2), full(w) ^ 0xF, prefix(w, 1)]
            for i, w in enumerate(widths)
        ]
        self.lpm_lens = lpm_lens

    def spec(self, prio: int | None = None, prio_range: int = 8) -> Spec:
        rng = self.rng
        bits, mask, lo, hi = [], [], [], []
        plen_total = 0
        for i, (kind, w) in enumerate(zip(self.kinds, self.widths, strict=True)):
            b = rng.choice(self.pools[i]) if rng.random() < 0.8 else rng.getrandbits(w)
            low = high = 0
            if kind == EXACT:
                m = full(w)
            elif kind == LPM:
                plen = rng.choice(self.lpm_lens) if self.lpm_lens else rng.randint(0, w)
                plen_total += plen
                m = prefix(w, plen)
            elif kind == TERNARY:
                m = rng.choice(self.tmasks[i])
            elif kind == OPTIONAL:
                m = rng.choice((0, full(w)))
            else:
                m = 0
                low = rng.getrandbits(w) if rng.random() < 0.9 else full(w) - rng.randrange(3)
                high = min(full(w), low + rng.choice(self.spans))
                if rng.random() < 0.05:
                    low, high = 0, full(w)
                elif rng.random() < 0.02 and low < high:
                    low, high = high, low  # an empty range: never matches
                b = rng.getrandbits(w)  # not read for a range field
            bits.append(b)
            mask.append(m)
            lo.append(low)
            hi.append(high)
        if prio is None:
            prio = plen_total if LPM in self.kinds and self.lpm_lens is None else 0
            if any(k in (TERNARY, RANGE, OPTIONAL) for k in self.kinds):
                prio = rng.randrange(prio_range)
        return Spec(tuple(bits), tuple(mask), tuple(lo), tuple(hi), prio)

    def key(self, near: Spec | None) -> list[int]:
        """A key on entry `near` (its bits where it cares, a point or an edge of its ranges),
        with now and then a field drawn at random."""
        rng = self.rng
        key = []
        for i, (kind, w) in enumerate(zip(self.kinds, self.widths, strict=True)):
            if near is None or rng.random() < 0.1:
                key.append(rng.getrandbits(w) if rng.random() < 0.5 else rng.choice(self.pools[i]))
            elif kind == RANGE:
                lo, hi = near.lo[i], near.hi[i]
                k = rng.choice((lo, hi, lo - 1, hi + 1, rng.randint(lo, max(lo, hi))))
                key.append(min(max(k, 0), full(w)))
            else:
                free = ~near.mask[i] & full(w)
                key.append((near.bits[i] & near.mask[i]) | (rng.getrandbits(w) & free))
        return key


def check(shape: Shape, native: Native, ref: Reference, lookups: int) -> int:
    """Compare `lookups` lookups; returns how many hit, so that a case can insist on hits."""
    specs = list(ref.live.values())
    hits = 0
    for _ in range(lookups):
        near = shape.rng.choice(specs) if specs and shape.rng.random() < 0.9 else None
        key = shape.key(near)
        want = ref.lookup(key)
        assert native.lookup(key) == want, (key, want)
        hits += want is not None
    assert native.size() == len(ref.live)
    return hits


def exercise(
    make_native: MakeNative, shape: Shape, count: int, lookups: int = 3000
) -> tuple[Native, Reference]:
    """Add `count` entries, compare; remove a third, compare; add some back and new ones,
    compare. Returns the table and the reference as they are left."""
    native = make_native(shape.kinds, shape.widths)
    ref = Reference(shape.kinds)
    specs = {v: shape.spec() for v in range(1, count + 1)}
    for v, s in specs.items():
        assert native.add(v, s) == 0
        ref.add(v, s)
    assert check(shape, native, ref, lookups) > lookups // 2
    gone = shape.rng.sample(sorted(specs), count // 3)
    for v in gone:
        assert native.remove(v, specs[v]) == 0
        ref.remove(v)
    check(shape, native, ref, lookups // 2)
    for v in gone[: len(gone) // 2]:
        assert native.add(v, specs[v]) == 0
        ref.add(v, specs[v])
    for v in range(count + 1, count + 1 + count // 4):
        specs[v] = shape.spec()
        assert native.add(v, specs[v]) == 0
        ref.add(v, specs[v])
    check(shape, native, ref, lookups)
    return native, ref


@pytest.mark.parametrize("seed", [1, 2])
def test_exact_one_field_matches_reference(make_native: MakeNative, seed: int) -> None:
    exercise(make_native, Shape(random.Random(seed), [EXACT], [32], pool=400), 500)


@pytest.mark.parametrize("seed", [3, 4])
def test_exact_three_fields_with_duplicate_keys_first_added_wins(
    make_native: MakeNative, seed: int
) -> None:
    exercise(make_native, Shape(random.Random(seed), [EXACT] * 3, [8, 16, 48], pool=5), 400)


def test_exact_million_entries_spot_checks(make_native: MakeNative) -> None:
    """1M entries on one 48-bit field: present keys hit their entry, absent ones miss, also
    after removing some."""
    n = 1_000_000
    table = make_native([EXACT], [48])
    step = 0x9E3779B97F4B  # odd: i * step is distinct for i < 2**48
    bits = (U64 * 1)()
    mask = (U64 * 1)(full(48))
    add = table.so.og_table_add
    for i in range(n):
        bits[0] = (i * step) & full(48)
        assert add(table.ptr, i + 1, bits, mask, None, None, 0) == 0
    assert table.size() == n
    rng = random.Random(7)
    for i in rng.sample(range(n), 3000):
        assert table.lookup([(i * step) & full(48)]) == i + 1
    for i in rng.sample(range(n, 2**40), 3000):
        assert table.lookup([(i * step) & full(48)]) is None
    gone = rng.sample(range(n), 1000)
    for i in gone:
        spec = Spec(((i * step) & full(48),), (full(48),), (0,), (0,), 0)
        assert table.remove(i + 1, spec) == 0
    assert table.size() == n - len(gone)
    gone_set = set(gone)
    for i in gone:
        assert table.lookup([(i * step) & full(48)]) is None
    for i in rng.sample(range(n), 3000):
        assert table.lookup([(i * step) & full(48)]) == (None if i in gone_set else i + 1)


@pytest.mark.parametrize("seed", [5, 6])
def test_lpm_longest_prefix_wins(make_native: MakeNative, seed: int) -> None:
    """Priority = prefix length (as the caller gives it): all 33 lengths, a default route."""
    native, ref = exercise(make_native, Shape(random.Random(seed), [LPM], [32], pool=4), 400)
    default = Spec((0,), (0,), (0,), (0,), 0)
    assert native.add(10_000, default) == 0
    ref.add(10_000, default)
    check(Shape(random.Random(seed), [LPM], [32]), native, ref, 1000)


@pytest.mark.parametrize("seed", [31, 32])
def test_lpm_filters_through_removes_and_re_adds(make_native: MakeNative, seed: int) -> None:
    """Each prefix length's group skips keys its filter rules out: many lengths of many
    prefixes, then most of each length removed in rounds (the filters keep stale bits, then are
    built again) and some added back, with lookups of kept, removed and re-added prefixes
    compared after every round."""
    rng = random.Random(seed)
    shape = Shape(rng, [LPM], [32], pool=300, lpm_lens=list(range(8, 33)))

    def route() -> Spec:  # priority: the prefix length
        spec = shape.spec()
        return Spec(spec.bits, spec.mask, spec.lo, spec.hi, spec.mask[0].bit_count())

    native = make_native([LPM], [32])
    ref = Reference([LPM])
    every = {v: route() for v in range(1, 2001)}
    for v, spec in every.items():
        assert native.add(v, spec) == 0
        ref.add(v, spec)
    assert check(shape, native, ref, 2000) > 1000
    for _ in range(6):
        live = sorted(ref.live)
        for v in rng.sample(live, len(live) // 3):
            assert native.remove(v, every[v]) == 0
            ref.remove(v)
        for v in range(len(every) + 1, len(every) + 41):
            every[v] = route()
            assert native.add(v, every[v]) == 0
            ref.add(v, every[v])
        check(shape, native, ref, 1000)
        for spec in rng.sample(list(every.values()), 300):  # the removed ones' own keys too
            key = shape.key(spec)
            assert native.lookup(key) == ref.lookup(key), key


@pytest.mark.parametrize("seed", [7, 8])
def test_lpm_with_exact_vrf(make_native: MakeNative, seed: int) -> None:
    exercise(make_native, Shape(random.Random(seed), [EXACT, LPM], [8, 32], pool=3), 400)


@pytest.mark.parametrize("seed", [9, 10])
def test_ternary_overlapping_masks_and_tied_priorities(make_native: MakeNative, seed: int) -> None:
    """Few priorities, so ties (first added wins) across and within mask groups."""
    shape = Shape(random.Random(seed), [TERNARY, TERNARY], [8, 16], pool=4)
    native = make_native(shape.kinds, shape.widths)
    ref = Reference(shape.kinds)
    for v in range(1, 301):
        s = shape.spec(prio_range=3)
        assert native.add(v, s) == 0
        ref.add(v, s)
    check(shape, native, ref, 3000)


def test_ternary_ties_across_groups_go_to_the_first_added(make_native: MakeNative) -> None:
    native = make_native([TERNARY], [8])
    wide, narrow, exact = (0x00, 0x00), (0x10, 0xF0), (0x12, 0xFF)
    for value, (bits, mask) in zip((1, 2, 3), (narrow, wide, exact), strict=True):
        assert native.add(value, Spec((bits,), (mask,), (0,), (0,), 5)) == 0
    assert native.lookup([0x12]) == 1
    assert native.lookup([0x22]) == 2
    assert native.remove(1, Spec((0x10,), (0xF0,), (0,), (0,), 5)) == 0
    assert native.lookup([0x12]) == 2
    assert native.add(4, Spec((0x12,), (0xFF,), (0,), (0,), 6)) == 0
    assert native.lookup([0x12]) == 4


@pytest.mark.parametrize("seed", [11, 12])
def test_single_range_field_with_interval_index(make_native: MakeNative, seed: int) -> None:
    """Hundreds of overlapping ranges in one bucket: the interval index, kept up to date on
    adds and rebuilt on removes; then drained below its threshold and grown past it again."""
    shape = Shape(random.Random(seed), [RANGE], [16], spans=(0, 3, 40, 2000, 30000))
    native, ref = exercise(make_native, shape, 300)
    for v in list(ref.live)[:-5]:
        assert native.remove(v, ref.live[v]) == 0
        ref.remove(v)
        if len(ref.live) in (20, 9, 8):
            check(shape, native, ref, 500)
    check(shape, native, ref, 500)
    for v in range(1000, 1020):
        s = shape.spec()
        assert native.add(v, s) == 0
        ref.add(v, s)
        check(shape, native, ref, 100)


@pytest.mark.parametrize("top_first", [True, False])
def test_range_on_a_64_bit_field_reaches_the_top(make_native: MakeNative, top_first: bool) -> None:
    """Ranges up to 2**64 - 1, added before the interval index exists (built from scratch) or
    after (painted in); then removed and the index rebuilt."""
    top = full(64)
    native = make_native([RANGE], [64])
    tops = [(0, top, 0), (top - 1, top, 2), (5, 9, 1), (7, 7, 3)]
    small = [(100 * i, 100 * i + 50, 1) for i in range(1, 12)]  # enough for an interval index
    values = {}
    for v, (lo, hi, prio) in enumerate(tops + small if top_first else small + tops, start=1):
        assert native.add(v, Spec((0,), (0,), (lo,), (hi,), prio)) == 0
        values[lo, hi] = v
    assert native.lookup([top]) == values[top - 1, top]
    assert native.lookup([top - 2]) == values[0, top]
    assert native.lookup([0]) == values[0, top]
    assert native.lookup([7]) == values[7, 7]
    assert native.lookup([8]) == values[5, 9]
    assert native.lookup([150]) == values[100, 150]
    assert native.lookup([151]) == values[0, top]
    assert native.lookup([1150]) == values[1100, 1150]
    assert native.remove(values[top - 1, top], Spec((0,), (0,), (top - 1,), (top,), 2)) == 0
    assert native.lookup([top]) == values[0, top]
    assert native.remove(values[0, top], Spec((0,), (0,), (0,), (top,), 0)) == 0
    assert native.lookup([top]) is None
    assert native.lookup([1150]) == values[1100, 1150]


@pytest.mark.parametrize("seed", [13, 14])
def test_exact_version_and_disjoint_port_segments(make_native: MakeNative, seed: int) -> None:
    """HSM's segment table shape: thousands of disjoint ranges under one exact version."""
    rng = random.Random(seed)
    shape = Shape(rng, [EXACT, RANGE], [8, 16], pool=2)
    native = make_native(shape.kinds, shape.widths)
    ref = Reference(shape.kinds)
    value = 0
    for version in shape.pools[0]:
        cuts = sorted(rng.sample(range(1, 65536), 1200))
        for lo, nxt in zip([0, *cuts], [*cuts, 65536], strict=True):
            value += 1
            s = Spec((version, rng.getrandbits(16)), (full(8), 0), (0, lo), (0, nxt - 1), 0)
            assert native.add(value, s) == 0
            ref.add(value, s)
    hits = check(shape, native, ref, 1500)
    assert hits > 1200
    for v in rng.sample(sorted(ref.live), 200):
        assert native.remove(v, ref.live[v]) == 0
        ref.remove(v)
    check(shape, native, ref, 1500)


@pytest.mark.parametrize("seed", [15, 16])
def test_acl_mix_of_exact_ternary_and_ranges(make_native: MakeNative, seed: int) -> None:
    """Exact version, ternary src and dst (prefix-like masks), range sport and dport, ternary
    proto; mask words of range fields are garbage (they are not read)."""
    rng = random.Random(seed)
    shape = Shape(
        rng,
        [EXACT, TERNARY, TERNARY, RANGE, RANGE, TERNARY],
        [8, 32, 32, 16, 16, 8],
        pool=3,
        spans=(0, 0, 1023, 64511, 65535),
        ternary_masks=[
            [],
            [prefix(32, n) for n in (0, 8, 16, 24, 32)],
            [0, full(32)],
            [],
            [],
            [0, 0xFF],
        ],
    )
    native = make_native(shape.kinds, shape.widths)
    ref = Reference(shape.kinds)
    for v in range(1, 401):
        s = shape.spec(prio_range=50)
        garbage = tuple(
            rng.getrandbits(16) if k == RANGE else m
            for k, m in zip(shape.kinds, s.mask, strict=True)
        )
        assert native.add(v, Spec(s.bits, garbage, s.lo, s.hi, s.prio)) == 0
        ref.add(
            v,
            Spec(
                s.bits,
                tuple(0 if k == RANGE else m for k, m in zip(shape.kinds, s.mask, strict=True)),
                s.lo,
                s.hi,
                s.prio,
            ),
        )
    check(shape, native, ref, 3000)
    for v in rng.sample(sorted(ref.live), 150):
        assert native.remove(v, ref.live[v]) == 0
        ref.remove(v)
    check(shape, native, ref, 2000)


@pytest.mark.parametrize("seed", [31, 32, 33])
def test_tuple_pruning_with_many_groups_and_removes(make_native: MakeNative, seed: int) -> None:
    """Many mask groups (3 source masks x 12 destination masks x 2 protocol masks) and few
    masks of the pruning field (the first ternary one): lookups ask the pruning index which
    groups can match; removes until groups and index entries empty out, then adds again."""
    rng = random.Random(seed)
    shape = Shape(
        rng,
        [EXACT, TERNARY, TERNARY, RANGE, TERNARY],
        [4, 32, 32, 16, 8],
        pool=5,
        spans=(0, 3, 200, 65535),
        ternary_masks=[
            [],
            [prefix(32, n) for n in (8, 16, 24)],
            [prefix(32, n) for n in range(0, 33, 3)],
            [],
            [0, 0xFF],
        ],
    )
    native = make_native(shape.kinds, shape.widths)
    ref = Reference(shape.kinds)
    specs: dict[int, Spec] = {}
    for v in range(1, 601):
        specs[v] = s = shape.spec(prio_range=40)
        assert native.add(v, s) == 0
        ref.add(v, s)
    check(shape, native, ref, 3000)
    for round_ in range(3):
        for v in rng.sample(sorted(ref.live), len(ref.live) * 2 // 3):
            assert native.remove(v, specs[v]) == 0
            ref.remove(v)
        check(shape, native, ref, 1500)
        for v in range(1000 * (round_ + 1), 1000 * (round_ + 1) + 300):
            specs[v] = s = shape.spec(prio_range=40)
            assert native.add(v, s) == 0
            ref.add(v, s)
        check(shape, native, ref, 1500)


@pytest.mark.parametrize("seed", [17, 18])
def test_optional_fields(make_native: MakeNative, seed: int) -> None:
    exercise(
        make_native,
        Shape(random.Random(seed), [EXACT, OPTIONAL, OPTIONAL], [4, 12, 9], pool=3),
        300,
    )


@pytest.mark.parametrize(
    ("seed", "kinds", "widths"),
    [
        (19, [EXACT, TERNARY, RANGE], [2, 8, 10]),
        (20, [TERNARY, RANGE, RANGE], [8, 8, 8]),
        (21, [LPM, EXACT], [16, 3]),
        (22, [EXACT], [5]),
    ],
)
def test_interleaved_add_remove_clear(
    make_native: MakeNative, seed: int, kinds: list[int], widths: list[int]
) -> None:
    """Random adds (some re-adding identical matches), removes (some of absent entries) and
    clears, with lookups compared after every few operations."""
    rng = random.Random(seed)
    shape = Shape(rng, kinds, widths, pool=4, spans=(0, 5, 60, 400))
    native = make_native(kinds, widths)
    ref = Reference(kinds)
    specs: dict[int, Spec] = {}
    next_value = 1
    for step in range(1500):
        op = rng.random()
        if op < 0.55 or not ref.live:
            s = rng.choice(list(specs.values())) if specs and rng.random() < 0.2 else shape.spec()
            specs[next_value] = s
            assert native.add(next_value, s) == 0
            ref.add(next_value, s)
            next_value += 1
        elif op < 0.97:
            v = rng.choice(list(ref.live))
            assert native.remove(v, specs[v]) == 0
            ref.remove(v)
            assert native.remove(v, specs[v]) == -1
        elif op < 0.985:
            native.clear()
            ref.clear()
        if step % 5 == 0:
            check(shape, native, ref, 20)


def test_keyless_table_holds_no_entries(make_native: MakeNative) -> None:
    native = make_native([], [])
    empty = Spec((), (), (), (), 0)
    assert native.add(1, empty) == -1
    assert native.remove(1, empty) == -1
    assert native.size() == 0
    assert native.lookup([]) is None


def test_removing_an_absent_entry_fails_and_changes_nothing(make_native: MakeNative) -> None:
    native = make_native([EXACT, RANGE], [8, 8])
    s = Spec((1, 0), (0xFF, 0), (0, 10), (0, 20), 3)
    assert native.add(7, s) == 0
    for wrong_value, wrong in [
        (8, s),
        (7, Spec((2, 0), (0xFF, 0), (0, 10), (0, 20), 3)),
        (7, Spec((1, 0), (0xFE, 0), (0, 10), (0, 20), 3)),
        (7, Spec((1, 0), (0xFF, 0), (0, 11), (0, 20), 3)),
        (7, Spec((1, 0), (0xFF, 0), (0, 10), (0, 21), 3)),
        (7, Spec((1, 0), (0xFF, 0), (0, 10), (0, 20), 4)),
    ]:
        assert native.remove(wrong_value, wrong) == -1
    assert native.size() == 1
    assert native.lookup([1, 15]) == 7
    assert native.remove(7, s) == 0
    assert native.lookup([1, 15]) is None
    assert native.size() == 0


def test_null_value_and_missing_bounds_are_refused(make_native: MakeNative) -> None:
    native = make_native([RANGE], [8])
    lo = (U64 * 1)(0)
    assert native.so.og_table_add(native.ptr, None, lo, lo, lo, lo, 0) == -1
    assert native.so.og_table_add(native.ptr, 1, lo, lo, None, None, 0) == -1
    assert native.size() == 0


@pytest.mark.parametrize(
    ("kinds", "widths"),
    [([EXACT] * 17, [8] * 17), ([5], [8]), ([EXACT], [0]), ([EXACT], [65])],
)
def test_invalid_shapes_are_refused(lib: ctypes.CDLL, kinds: list[int], widths: list[int]) -> None:
    assert lib.og_table_new(len(kinds), bytes(kinds), bytes(widths)) is None
