"""bench_flood's reading of the CPM's set-up latency histogram: the bucket within which a share of
the set-ups between two readings was done, against the observations themselves."""

from __future__ import annotations

import bisect
import math

from hypothesis import given
from hypothesis import strategies as st

from bench.bench_flood import setup_quantiles

BOUNDS = (0.001, 0.01, 0.1, 1.0, math.inf)


def cumulative(observations: list[float]) -> dict[float, float]:
    return {b: float(sum(1 for x in observations if x <= b)) for b in BOUNDS}


def bound_of(x: float) -> float:
    return BOUNDS[bisect.bisect_left(BOUNDS, x)]


@given(
    st.lists(st.floats(0.0, 5.0), max_size=30),
    st.lists(st.floats(0.0, 5.0), min_size=1, max_size=200),
)
def test_quantile_buckets_against_the_observations(old: list[float], new: list[float]) -> None:
    before = {"packet_in": cumulative(old)}
    after = {"packet_in": cumulative(old + new), "digest": cumulative([])}
    result = setup_quantiles(before, after)
    assert set(result) == {"packet_in"}, "a source with nothing between the readings is left out"
    n, p50, p99 = result["packet_in"]
    ranked = sorted(new)
    assert n == len(new)
    # the smallest bound that holds at least half (99 %) of the new observations
    assert p50 == bound_of(ranked[math.ceil(0.5 * len(new)) - 1])
    assert p99 == bound_of(ranked[math.ceil(0.99 * len(new)) - 1])
