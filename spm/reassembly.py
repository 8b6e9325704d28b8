"""TCP stream reassembly, one direction of one flow.

Segments are placed by sequence number (32-bit wrap-around handled) and handed on in order, each
byte once. Overlaps are resolved as Linux does: bytes already handed on are never replaced, a
segment that fills the gap at the head wins over buffered out-of-order bytes it covers, and among
buffered segments the first to arrive wins. Out-of-order segments wait in a bounded, sorted list
until the gap closes.

Memory is bounded per direction (bytes and segment count, each segment also charged a fixed
overhead so that a flood of 1-byte segments hits the limit early) and per worker (a shared
`StreamBudget`). A segment that cannot be buffered, or that starts absurdly far ahead of the
stream, is refused: the worker drops that packet (not the flow) and the sender retransmits it.

Not supported: the other target-based overlap policies of Snort (BSD, Windows, ...): Linux's
only; urgent data; data on SYN packets is delivered like any other data (TCP Fast Open is handled,
but its cookie is not checked).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from enum import Enum

SEGMENT_OVERHEAD = 64  # bytes charged per buffered segment on top of its payload
_MOD = 1 << 32
_HALF = 1 << 31


class Seg(Enum):
    """What happened to a segment."""

    IN_ORDER = "in_order"  # new data handed on (maybe together with buffered data)
    BUFFERED = "buffered"  # ahead of a gap; kept until the gap closes
    OLD = "old"  # nothing new (a retransmission or a pure ACK)
    REFUSED = "refused"  # over a limit or too far ahead; the packet should be dropped


@dataclass(slots=True)
class StreamBudget:
    """Bytes of out-of-order data all streams of a worker may hold."""

    limit: int
    used: int = 0
    refusals: int = 0

    def reserve(self, n: int) -> bool:
        if self.used + n > self.limit:
            self.refusals += 1
            return False
        self.used += n
        return True

    def release(self, n: int) -> None:
        self.used -= n


@dataclass(slots=True)
class StreamCounters:
    in_order: int = 0
    buffered: int = 0
    old: int = 0
    refused: int = 0
    overlap_bytes: int = 0  # bytes of segments that were already known (trimmed)


class TcpStream:
    """One direction's byte stream. Offsets are absolute (Python ints, no wrap)."""

    __slots__ = (
        "_budget",
        "_charged",
        "_ends",
        "_max_bytes",
        "_max_segments",
        "_pending",
        "_starts",
        "base",
        "counters",
        "fin_offset",
        "next_offset",
        "started",
    )

    def __init__(self, budget: StreamBudget, max_bytes: int, max_segments: int) -> None:
        self._budget = budget
        self._max_bytes = max_bytes
        self._max_segments = max_segments
        self.base = 0  # sequence number of offset 0
        self.next_offset = 0  # offset of the next byte expected in order
        self.started = False
        self.fin_offset: int | None = None
        # Out-of-order segments: parallel sorted lists of start offsets, end offsets and data.
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._pending: list[bytes] = []
        self._charged = 0
        self.counters = StreamCounters()

    @property
    def buffered_bytes(self) -> int:
        return self._charged

    @property
    def finished(self) -> bool:
        return self.fin_offset is not None and self.next_offset >= self.fin_offset

    def start(self, seq: int) -> None:
        """Set the sequence number of the first data byte (ISN + 1 after a SYN)."""
        self.base = seq % _MOD
        self.next_offset = 0
        self.started = True

    def offset_of(self, seq: int) -> int:
        """Absolute offset of a sequence number, taking the one nearest the stream's head."""
        rel = (seq - self.base) % _MOD
        head = self.next_offset % _MOD
        delta = (rel - head + _HALF) % _MOD - _HALF
        return self.next_offset + delta

    def add(self, seq: int, data: bytes, fin: bool = False) -> tuple[Seg, bytes]:
        """Place a segment; returns what happened and the bytes now available in order."""
        if not self.started:
            self.start(seq)
        start = self.offset_of(seq)
        end = start + len(data)
        if fin and self.fin_offset is None and start >= 0:
            self.fin_offset = end
        c = self.counters
        if not data or end <= self.next_offset:
            c.old += 1
            if data:
                c.overlap_bytes += len(data)
            return Seg.OLD, b""
        if start > self.next_offset:
            if start - self.next_offset > self._max_bytes:
                c.refused += 1
                return Seg.REFUSED, b""
            if not self._store(start, data):
                c.refused += 1
                return Seg.REFUSED, b""
            c.buffered += 1
            return Seg.BUFFERED, b""
        if start < self.next_offset:
            cut = self.next_offset - start
            c.overlap_bytes += cut
            data = data[cut:]
        self.next_offset += len(data)
        if self._starts and self._starts[0] <= self.next_offset:
            data = data + self._drain()
        c.in_order += 1
        return Seg.IN_ORDER, data

    def _store(self, start: int, data: bytes) -> bool:
        """Keep the parts of [start, start+len) no buffered segment covers yet."""
        end = start + len(data)
        pieces: list[tuple[int, int]] = []
        i = bisect.bisect_right(self._ends, start)
        pos = start
        while pos < end:
            if i < len(self._starts) and self._starts[i] <= pos:
                pos = max(pos, self._ends[i])
                i += 1
                continue
            stop = min(end, self._starts[i]) if i < len(self._starts) else end
            pieces.append((pos, stop))
            pos = stop
        if not pieces:
            self.counters.overlap_bytes += len(data)
            return True
        cost = sum(b - a for a, b in pieces) + SEGMENT_OVERHEAD * len(pieces)
        if (
            len(self._starts) + len(pieces) > self._max_segments
            or self._charged + cost > self._max_bytes
            or not self._budget.reserve(cost)
        ):
            return False
        self._charged += cost
        self.counters.overlap_bytes += len(data) - sum(b - a for a, b in pieces)
        for a, b in pieces:
            j = bisect.bisect_left(self._starts, a)
            self._starts.insert(j, a)
            self._ends.insert(j, b)
            self._pending.insert(j, data[a - start : b - start])
        return True

    def _drain(self) -> bytes:
        out: list[bytes] = []
        released = 0
        while self._starts and self._starts[0] <= self.next_offset:
            a, b, chunk = self._starts.pop(0), self._ends.pop(0), self._pending.pop(0)
            released += (b - a) + SEGMENT_OVERHEAD
            if b > self.next_offset:
                out.append(chunk[self.next_offset - a :])
                self.next_offset = b
        self._charged -= released
        self._budget.release(released)
        return b"".join(out)

    def release(self) -> None:
        """Give all buffered memory back (the flow ends)."""
        self._budget.release(self._charged)
        self._charged = 0
        self._starts.clear()
        self._ends.clear()
        self._pending.clear()
