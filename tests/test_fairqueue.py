"""opengate.fairqueue against a brute-force model: nothing held is lost or duplicated, a flow
keeps its order, a full source is refused, and a backlog leaves in rounds (each busy source one
packet per round, in the order the sources came; a source's turns go round its flows)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opengate.fairqueue import FairQueue

# ("put", source, flow) or ("take",)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 3), st.integers(0, 3)),
        st.tuples(st.just("take")),
    ),
    max_size=200,
)


@settings(max_examples=400, deadline=None)
@given(ops=OPS, per_source=st.integers(1, 6))
def test_the_queue_matches_a_brute_force_model(ops: list[tuple[Any, ...]], per_source: int) -> None:
    q: FairQueue[tuple[int, int, int]] = FairQueue(per_source)
    held: list[tuple[int, int, int]] = []  # the model: (source, flow, serial), in arrival order
    taken: list[tuple[int, int, int]] = []
    serial = 0
    for op in ops:
        if op[0] == "put":
            _, source, flow = op
            item = (source, flow, serial)
            serial += 1
            full = sum(1 for s, _f, _n in held if s == source) >= per_source
            assert q.put(source, flow, item) is (not full)
            if not full:
                held.append(item)
        else:
            got = q.take()
            if not held:
                assert got is None
                continue
            assert got is not None and got in held
            # a flow's oldest packet leaves first
            assert got == next(h for h in held if h[:2] == got[:2])
            held.remove(got)
            taken.append(got)
        assert len(q) == len(held)
        assert q.sources() == len({s for s, _f, _n in held})
        for source in range(4):
            assert q.held_by(source) == sum(1 for s, _f, _n in held if s == source)
    rest = list(q.drain())
    assert sorted(rest) == sorted(held) and len(q) == 0 and q.take() is None
    # the flows' orders, over everything that left
    for key in {(s, f) for s, f, _n in taken + rest}:
        serials = [n for s, f, n in taken + rest if (s, f) == key]
        assert serials == sorted(serials)


def test_a_busy_source_does_not_hold_up_a_new_one() -> None:
    """100 packets of source A's flows, then one of B: B's leaves second, and A's flows are
    served in turn."""
    q: FairQueue[str] = FairQueue(1000)
    for n in range(100):
        q.put("A", n % 10, f"a{n}")
    q.put("B", 0, "b0")
    out = list(q.drain())
    assert out[:3] == ["a0", "b0", "a1"]
    assert out[2:12] == [f"a{n}" for n in range(1, 11)]  # flows 1..9, then flow 0 again


def _rounds(queues: list[list[Any]]) -> list[Any]:
    """Round-robin by brute force: in each round, one item of each non-empty list, in order."""
    lists = [list(q) for q in queues]
    out = []
    while any(lists):
        for q in lists:
            if q:
                out.append(q.pop(0))
    return out


@settings(max_examples=300, deadline=None)
@given(backlog=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=1, max_size=150))
def test_a_backlog_leaves_in_rounds_of_sources_and_of_each_sources_flows(
    backlog: list[tuple[int, int]],
) -> None:
    """Sources take turns in the order they came, one packet each per round; a source's turns
    go to its flows the same way."""
    q: FairQueue[tuple[int, int, int]] = FairQueue(1000)
    sources: dict[int, dict[int, list[tuple[int, int, int]]]] = {}
    for n, (source, flow) in enumerate(backlog):
        q.put(source, flow, (source, flow, n))
        sources.setdefault(source, {}).setdefault(flow, []).append((source, flow, n))
    expected = _rounds([_rounds(list(flows.values())) for flows in sources.values()])
    assert list(q.drain()) == expected


def test_per_source_must_be_positive() -> None:
    with pytest.raises(ValueError, match="per_source"):
        FairQueue(0)
