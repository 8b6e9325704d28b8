"""The dispatcher's choice of worker for a packet (the paper's thread-isolator): every packet of
a flow goes to the same worker, whatever its direction.

Schemes:
* `hash2`: a hash of the two addresses (order-independent): all flows between two hosts share a
  worker (what a 2-tuple RSS hash does);
* `hash5`: a hash of the Community ID (the direction-agnostic 5-tuple);
* `jsq`: join-the-shortest-queue: a new flow goes to the worker with the fewest packets waiting
  for a verdict (ties: round-robin), and a flow table (Community ID -> worker) keeps it there;
  entries end when the worker says the flow ended, after `timeout` idle seconds, or when the
  table is full (oldest first).
"""

from __future__ import annotations

import zlib
from collections import OrderedDict
from dataclasses import dataclass


@dataclass(slots=True)
class DispatchCounters:
    flows_assigned: int = 0
    flows_forgotten: int = 0
    flows_evicted: int = 0


class FlowDispatcher:
    def __init__(
        self, workers: int, scheme: str, max_flows: int = 1 << 20, timeout: float = 120.0
    ) -> None:
        if scheme not in ("hash2", "hash5", "jsq"):
            raise ValueError(f"unknown dispatch scheme {scheme!r}")
        self.workers = workers
        self.scheme = scheme
        self.max_flows = max_flows
        self.timeout = timeout
        self.queue = [0] * workers  # packets sent and not yet answered, per worker
        self.alive = [True] * workers
        self.table: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self._rr = -1
        self.counters = DispatchCounters()

    def pick(self, cid: str, src: bytes, dst: bytes, now: float) -> int:
        if self.scheme == "hash5":
            return self._alive(zlib.crc32(cid.encode()) % self.workers)
        if self.scheme == "hash2":
            a, b = (src, dst) if src <= dst else (dst, src)
            return self._alive(zlib.crc32(a + b) % self.workers)
        entry = self.table.get(cid)
        if entry is not None and self.alive[entry[0]]:
            self.table[cid] = (entry[0], now)
            self.table.move_to_end(cid)
            return entry[0]
        worker = self.shortest()
        if len(self.table) >= self.max_flows:
            self.table.popitem(last=False)
            self.counters.flows_evicted += 1
        self.table[cid] = (worker, now)
        self.counters.flows_assigned += 1
        return worker

    def shortest(self) -> int:
        """The live worker with the fewest packets waiting; ties go round-robin (otherwise a
        lightly loaded SPM would put every new flow on worker 0)."""
        best = -1
        n = self.workers
        self._rr = (self._rr + 1) % n
        for k in range(n):
            i = (self._rr + k) % n
            if self.alive[i] and (best < 0 or self.queue[i] < self.queue[best]):
                best = i
        if best < 0:
            raise RuntimeError("no worker is alive")
        return best

    def _alive(self, index: int) -> int:
        if self.alive[index]:
            return index
        for step in range(1, self.workers):  # the next live worker, deterministically
            j = (index + step) % self.workers
            if self.alive[j]:
                return j
        raise RuntimeError("no worker is alive")

    def forget(self, cid: str) -> None:
        """The worker said the flow ended."""
        if self.table.pop(cid, None) is not None:
            self.counters.flows_forgotten += 1

    def expire(self, now: float) -> int:
        n = 0
        while self.table:
            cid, (_w, seen) = next(iter(self.table.items()))
            if now - seen < self.timeout:
                break
            del self.table[cid]
            n += 1
        return n

    def worker_died(self, index: int) -> None:
        self.alive[index] = False
        self.queue[index] = 0
        for cid in [c for c, (w, _t) in self.table.items() if w == index]:
            del self.table[cid]

    def worker_back(self, index: int) -> None:
        self.alive[index] = True
        self.queue[index] = 0
