"""TCP reassembly: order, overlaps, wrap-around and the memory bounds."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from spm.reassembly import SEGMENT_OVERHEAD, Seg, StreamBudget, TcpStream


def _stream(max_bytes: int = 1 << 20, segments: int = 4096, total: int = 1 << 24) -> TcpStream:
    return TcpStream(StreamBudget(total), max_bytes, segments)


def _feed(stream: TcpStream, isn: int, pieces: list[tuple[int, bytes]]) -> bytes:
    out = b""
    for off, data in pieces:
        _status, got = stream.add((isn + off) % (1 << 32), data)
        out += got
    return out


@settings(max_examples=150, deadline=None)
@given(
    data=st.binary(min_size=1, max_size=3000),
    isn=st.integers(0, (1 << 32) - 1),
    cuts=st.lists(st.integers(1, 2999), max_size=40),
    seed=st.integers(0, 1 << 30),
    dups=st.integers(0, 10),
)
def test_any_arrival_order_with_duplicates_yields_the_stream_once(
    data: bytes, isn: int, cuts: list[int], seed: int, dups: int
) -> None:
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    pieces = [(a, data[a:b]) for a, b in itertools.pairwise(bounds)]
    rng = random.Random(seed)
    # overlapping re-sends of random spans, with the right bytes
    for _ in range(dups):
        a = rng.randrange(len(data))
        b = rng.randrange(a, len(data)) + 1
        pieces.append((a, data[a:b]))
    first = pieces[0]
    rest = pieces[1:]
    rng.shuffle(rest)
    stream = _stream()
    stream.start(isn)
    out = _feed(stream, isn, [*rest, first])
    assert out == data
    assert stream.buffered_bytes == 0


def test_sequence_numbers_wrap_around_2_to_the_32() -> None:
    stream = _stream()
    isn = (1 << 32) - 5
    stream.start(isn)
    assert _feed(stream, isn, [(10, b"KLMNO"), (0, b"ABCDE"), (5, b"FGHIJ")]) == b"ABCDEFGHIJKLMNO"


def test_gap_filling_segment_wins_over_buffered_bytes_as_on_linux() -> None:
    stream = _stream()
    stream.start(1000)
    assert stream.add(1004, b"EVIL")[0] is Seg.BUFFERED
    status, got = stream.add(1000, b"GOODgood")
    assert status is Seg.IN_ORDER
    assert got == b"GOODgood"


def test_among_buffered_segments_the_first_to_arrive_wins() -> None:
    stream = _stream()
    stream.start(0)
    stream.add(4, b"AAAA")
    stream.add(2, b"bbbbbbbb")  # covers 2..10: only 2..4 and 8..10 are new
    assert stream.add(0, b"cc") == (Seg.IN_ORDER, b"ccbbAAAAbb")
    assert stream.counters.overlap_bytes == 4


def test_retransmission_of_delivered_data_is_old_and_not_delivered_again() -> None:
    stream = _stream()
    stream.start(1)
    assert stream.add(1, b"hello") == (Seg.IN_ORDER, b"hello")
    assert stream.add(1, b"HELLO") == (Seg.OLD, b"")
    assert stream.add(3, b"LLO world") == (Seg.IN_ORDER, b" world")


def test_absurd_sequence_number_is_refused_without_buffering() -> None:
    stream = _stream(max_bytes=65536)
    stream.start(0)
    assert stream.add(0x7FFF0000, b"x" * 100)[0] is Seg.REFUSED
    assert stream.add(0xFFFF0000, b"x" * 100)[0] is Seg.OLD  # "behind" the head: ignored
    assert stream.buffered_bytes == 0
    assert stream.add(0, b"ok") == (Seg.IN_ORDER, b"ok")


def test_flood_of_tiny_out_of_order_segments_stays_within_the_per_flow_limit() -> None:
    limit = 16 * 1024
    stream = _stream(max_bytes=limit, segments=100_000)
    stream.start(0)
    refused = 0
    for i in range(1, 20_000, 2):  # every other byte, never filling a gap
        status, _ = stream.add(i, b"x")
        refused += status is Seg.REFUSED
    assert stream.buffered_bytes <= limit
    assert refused > 0
    assert stream.buffered_bytes // (1 + SEGMENT_OVERHEAD) <= limit // (1 + SEGMENT_OVERHEAD)


def test_segment_count_limit_refuses_further_segments() -> None:
    stream = _stream(segments=10)
    stream.start(0)
    statuses = [stream.add(i * 2 + 1, b"x")[0] for i in range(20)]
    assert statuses.count(Seg.BUFFERED) == 10
    assert statuses.count(Seg.REFUSED) == 10


def test_worker_budget_is_shared_by_streams_and_given_back() -> None:
    budget = StreamBudget(limit=3 * (100 + SEGMENT_OVERHEAD))
    streams = [TcpStream(budget, 1 << 20, 100) for _ in range(5)]
    outcomes = []
    for s in streams:
        s.start(0)
        outcomes.append(s.add(50, b"y" * 100)[0])
    assert outcomes.count(Seg.BUFFERED) == 3
    assert budget.refusals == 2
    for s in streams:
        s.release()
    assert budget.used == 0


def test_fin_marks_the_stream_finished_once_all_bytes_arrived() -> None:
    stream = _stream()
    stream.start(0)
    stream.add(5, b"world", fin=True)
    assert not stream.finished
    stream.add(0, b"hello")
    assert stream.finished
