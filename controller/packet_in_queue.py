"""Packet-ins wait here, one queue per source, and are served in turn: one host's flood of
opening packets that need the CPM cannot make other hosts' packets wait behind it.

The NPM's meters bound what each source may send to the CPU (`cpu_meters`, `per_source`), but
not how long the CPM takes over it: when packet-ins come faster than the CPM sets up their
sessions, a single first-in first-out queue made every packet wait for the whole backlog: one
inside host's flood of NAT flows held everyone's set-up for up to a second (bench_flood, `cpm`).

Here each source (the IPv4 or IPv6 source address of the packet as it arrived, else its ingress
port)
has a queue of its own, at most `per_source` packets long: a packet that finds its source's queue
full is dropped and counted (its sender retransmits, as after any loss). The dispatcher takes
packets in rounds, one from each source with packets waiting, so a packet waits for at most one
batch of other sources' packets, and a source's own packets keep their order.

Producers are the NPM stream threads; the consumer is the CPM's dispatcher. The queue asks for
the consumer (`wake`) when a packet arrives and no call is pending, and again after a take that
left packets waiting, so that other events on the bus are handled between two takes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

from controller.session_encoding import FlowKey
from controller.session_model import key_is_v6
from opengate.fairqueue import FairQueue

PER_SOURCE = 256  # packets a source may have waiting


def source_of(npm: str, key: FlowKey | None, ingress_port: int) -> Hashable:
    """Who sent a packet: its IPv4 or IPv6 source address (`key`, the packet's flow), else the
    port it arrived on."""
    if key is not None:
        return (npm, "ipv6" if key_is_v6(key) else "ipv4", key[0])
    return (npm, "port", ingress_port)


def _nothing() -> None:
    pass


class PacketInQueue:
    """Fair queue of packet-ins by source; `put` from any thread, `take` from the consumer."""

    def __init__(
        self,
        per_source: int = PER_SOURCE,
        on_drop: Callable[[str], None] | None = None,
        wake: Callable[[], object] = _nothing,
    ) -> None:
        self.on_drop = on_drop
        self.wake = wake
        self.dropped = 0
        self._lock = threading.Lock()
        self._queue: FairQueue[Any] = FairQueue(per_source)  # one flow per source
        self._woken = False  # a wake is pending: the consumer will take

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def per_source(self) -> int:
        return self._queue.per_source

    @per_source.setter
    def per_source(self, value: int) -> None:
        self._queue.per_source = value

    def put(self, source: Hashable, npm: str, item: Any) -> bool:
        """Queue `item` from `source`; False (and counted) when the source's queue is full.
        A source that had nothing waiting joins the end of the round."""
        with self._lock:
            full = not self._queue.put(source, source, item)
            if full:
                self.dropped += 1
            wake = not full and not self._woken
            self._woken = self._woken or wake
        if full and self.on_drop is not None:
            self.on_drop(npm)
        if wake:
            self.wake()
        return not full

    def take(self, limit: int) -> list[Any]:
        """Up to `limit` items, in rounds: the oldest of each waiting source in turn. A source
        served and still waiting goes to the end of the order, so the next take goes on where
        this one stopped; if any are left, the consumer is woken again."""
        with self._lock:
            out = [self._queue.take() for _ in range(min(limit, len(self._queue)))]
            self._woken = len(self._queue) > 0
            wake = self._woken
        if wake:
            self.wake()
        return out
