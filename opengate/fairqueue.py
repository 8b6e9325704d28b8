"""A fair queue: a queue per flow, the flows grouped by source; sources are served in turn, one
packet each, and within a source its flows in turn. Not thread-safe (callers lock).

Used where one host's flood must not make other hosts' packets wait behind it: the SPM
dispatcher's packets on their way to the workers (source: the packet's IP source; flow: its
Community ID), and the CPM's packet-ins (source: the IPv4 source or ingress port; one flow per
source). A packet waits for one packet of each other busy source, and of each other busy flow
of its own source, instead of for the whole backlog.

Bounds: a source holds at most `per_source` items; `put` refuses the next one (the caller
answers it: the SPM by its fail-open policy, the CPM by a counted drop). A flow's items keep
their order.

Every operation is O(1): the sources with packets are a ring (a deque of keys), and so are a
source's flows.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(slots=True)
class _Source(Generic[T]):
    held: int = 0
    flows: dict[Hashable, deque[T]] = field(default_factory=dict)
    turn: deque[Hashable] = field(default_factory=deque)  # flows with packets, next first


class FairQueue(Generic[T]):
    def __init__(self, per_source: int) -> None:
        if per_source < 1:
            raise ValueError("per_source must be at least 1")
        self.per_source = per_source
        self._sources: dict[Hashable, _Source[T]] = {}
        self._turn: deque[Hashable] = deque()  # sources with packets, next first
        self._held = 0

    def __len__(self) -> int:
        return self._held

    def put(self, source: Hashable, flow: Hashable, item: T) -> bool:
        """Hold `item`; False (not held) if `source` already holds `per_source` packets."""
        s = self._sources.get(source)
        if s is None:
            s = self._sources[source] = _Source()
            self._turn.append(source)
        elif s.held >= self.per_source:
            return False
        q = s.flows.get(flow)
        if q is None:
            q = s.flows[flow] = deque()
            s.turn.append(flow)
        q.append(item)
        s.held += 1
        self._held += 1
        return True

    def take(self) -> T | None:
        """The next packet in turn, or None if none is held."""
        if not self._turn:
            return None
        key = self._turn.popleft()
        s = self._sources[key]
        flow = s.turn.popleft()
        q = s.flows[flow]
        item = q.popleft()
        if q:
            s.turn.append(flow)
        else:
            del s.flows[flow]
        s.held -= 1
        self._held -= 1
        if s.held:
            self._turn.append(key)
        else:
            del self._sources[key]
        return item

    def held_by(self, source: Hashable) -> int:
        s = self._sources.get(source)
        return s.held if s is not None else 0

    def sources(self) -> int:
        return len(self._sources)

    def drain(self) -> Iterator[T]:
        """Every packet still held (in turn), leaving the queue empty."""
        while self._turn:
            item = self.take()
            assert item is not None
            yield item
