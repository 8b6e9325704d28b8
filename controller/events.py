"""The CPM's message handlers, as in the paper: events, and handlers registered per kind of event.

An event is a frozen dataclass deriving from `Event`. `EventBus.subscribe(Kind, handler)` adds a
handler; `publish(event)` queues it and returns a Future that completes when every handler has
run. One dispatcher thread runs all handlers, so handlers need no locks between them and the
switch sees writes in the order events arrived. Dispatch looks handlers up by the event's class
and its base classes: a new kind of event is a new dataclass and a `subscribe`, nothing else.

Handlers subscribed with `batch=True` receive every queued event of their kind that arrived
back to back in one call: that is how one Write installs the sessions of many digests. A batch
holds at most `max_batch` records (an event's `weight`: a digest list of 128 sessions weighs 128),
so that no handler call runs for long and a look at the state (`call_now`) waits for one batch
of bounded size, not for a backlog of tens of thousands of sessions.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from controller.errors import RequestError
from controller.metrics import Metrics

LOG = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Event:
    """Base of every event."""

    @property
    def weight(self) -> int:
        """How much work the event is, in the units of `EventBus.max_batch` (records)."""
        return 1


E = TypeVar("E", bound=Event)

# -- the kinds of event ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PolicyApplyRequested(Event):
    """Apply this (validated) policy: recompile, write the difference, record a version."""

    policy: Any  # controller.policy.Policy (kept Any to avoid an import cycle)
    source: str = "cli"


@dataclass(frozen=True, slots=True)
class PolicyApplied(Event):
    version: int
    sha256: str
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SessionRequested(Event):
    """Permitted opening packets that need no NAT were forwarded (one session_request_t
    DigestList: a record per packet)."""

    npm: str
    records: tuple[dict[str, int], ...]
    received_at: float  # time.perf_counter() when the digest came off the stream

    @property
    def weight(self) -> int:
        return max(1, len(self.records))


@dataclass(frozen=True, slots=True)
class PacketIn(Event):
    """A packet sent to the CPU: an opening packet that needs NAT, or an ACL to-CPU rule."""

    npm: str
    payload: bytes
    metadata: dict[str, int]
    received_at: float
    # the payload's flow (parse_flow); None: neither an IPv4 nor an IPv6 flow
    key: tuple[int, int, int, int, int] | None


@dataclass(frozen=True, slots=True)
class SessionsInstalled(Event):
    """Sessions whose both directions the switch accepted (for whoever wants to know)."""

    npm: str
    keys: tuple[tuple[int, int, int, int, int], ...]  # original directions
    at: float  # time.perf_counter()


@dataclass(frozen=True, slots=True)
class SessionsRemoved(Event):
    npm: str
    keys: tuple[tuple[int, int, int, int, int], ...]
    reason: str


@dataclass(frozen=True, slots=True)
class PacketInsWaiting(Event):
    """Packet-ins wait in the CPM's fair queue (controller.packet_in_queue): take a batch."""


@dataclass(frozen=True, slots=True)
class SessionCloseSeen(Event):
    """TCP FIN or RST segments hit sessions (one session_close_t DigestList)."""

    npm: str
    records: tuple[dict[str, int], ...]

    @property
    def weight(self) -> int:
        return max(1, len(self.records))


@dataclass(frozen=True, slots=True)
class IdleTimeout(Event):
    """Session entries that the switch reports idle."""

    npm: str
    keys: tuple[tuple[int, int, int, int, int], ...]

    @property
    def weight(self) -> int:
        return max(1, len(self.keys))


@dataclass(frozen=True, slots=True)
class SpmLoadReport(Event):
    spm: str
    report: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SpmDown(Event):
    spm: str
    reason: str


@dataclass(frozen=True, slots=True)
class SpmUp(Event):
    spm: str


@dataclass(frozen=True, slots=True)
class AlertReceived(Event):
    spm: str
    alert: dict[str, Any]


@dataclass(frozen=True, slots=True)
class BypassRequested(Event):
    spm: str
    flow: dict[str, Any]
    community_id: str | None = None
    clean_bytes: int = 0


@dataclass(frozen=True, slots=True)
class SessionDeleteRequested(Event):
    session_id: int
    reason: str = "api"


@dataclass(frozen=True, slots=True)
class SessionBlockRequested(Event):
    """Block a session: both directions stay installed with the block action, so the flow
    stops (a deleted session would be made again by the flow's next packet)."""

    session_id: int
    reason: str = "api"


@dataclass(frozen=True, slots=True)
class SpmDrainRequested(Event):
    """Drain an SPM (weight 0: new flows go elsewhere, its flows stay) or restore it."""

    spm: str
    drained: bool


@dataclass(frozen=True, slots=True)
class NpmRoleChanged(Event):
    """This controller became (or stopped being) the primary of an NPM, or lost it."""

    npm: str
    primary: bool


@dataclass(frozen=True, slots=True)
class Tick(Event):
    """Time passes: liveness checks, closing sessions, reconnects."""

    now: float  # time.monotonic()


@dataclass(frozen=True, slots=True)
class Call(Event):
    """Run a function on the dispatcher thread (a consistent view of the controller's state)."""

    function: Callable[[], Any]


# -- the bus ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Handler:
    function: Callable[..., Any]
    batch: bool


@dataclass(slots=True)
class _Item:
    event: Event
    future: Future[tuple[Any, ...]]


_WAKE = _Item(Event(), Future())  # a queue entry that only wakes the dispatcher


class EventBus:
    # 128: an API look (`call_now`) waits for one batch; under a flood of new flows 512 made
    # GET /api/v1/status's p99 two or three times longer (bench_flood), and with 128 the CPM path
    # still installs its sessions without loss.
    def __init__(self, metrics: Metrics | None = None, max_batch: int = 128) -> None:
        self.metrics = metrics
        self.max_batch = max_batch
        self._handlers: dict[type[Event], list[_Handler]] = {}
        self._queue: queue.Queue[_Item | None] = queue.Queue()
        # calls that go ahead of queued events (call_now); a _WAKE in _queue makes the
        # dispatcher look here even while nothing else is queued
        self._urgent: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.subscribe(Call, lambda event: event.function())

    def subscribe(
        self,
        kind: type[E],
        handler: Callable[[E], Any] | Callable[[list[E]], Any],
        *,
        batch: bool = False,
    ) -> None:
        with self._lock:
            self._handlers.setdefault(kind, []).append(_Handler(handler, batch))

    def handlers_for(self, kind: type[Event]) -> list[_Handler]:
        out: list[_Handler] = []
        for cls in kind.__mro__:
            out.extend(self._handlers.get(cls, ()))
        return out

    def publish(self, event: Event) -> Future[tuple[Any, ...]]:
        future: Future[tuple[Any, ...]] = Future()
        self._queue.put(_Item(event, future))
        return future

    def call(self, function: Callable[[], Any], timeout: float | None = 30.0) -> Any:
        """Run `function` on the dispatcher and return its result (or raise its exception),
        after every event queued before it."""
        results = self.publish(Call(function)).result(timeout=timeout)
        return results[0] if results else None

    def call_now(self, function: Callable[[], Any], timeout: float | None = 30.0) -> Any:
        """Run `function` on the dispatcher ahead of the events still queued (between two
        batches), so that a look at the controller's state (the API's views) does not wait
        behind a backlog of digests; returns its result or raises its exception."""
        future: Future[tuple[Any, ...]] = Future()
        self._urgent.put(_Item(Call(function), future))
        self._queue.put(_WAKE)
        results = future.result(timeout=timeout)
        return results[0] if results else None

    def _run_urgent(self) -> None:
        while True:
            try:
                item = self._urgent.get_nowait()
            except queue.Empty:
                return
            self.dispatch([item])

    # -- dispatching -------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="cpm-dispatcher", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Handle what is queued, then stop."""
        if self._thread is None:
            return
        self._queue.put(None)
        self._thread.join(timeout=timeout)
        self._thread = None

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            self._run_urgent()
            if first is None:
                return
            items = [] if first is _WAKE else [first]
            weight = sum(item.event.weight for item in items)
            stop = False
            while weight < self.max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                if item is not _WAKE:
                    items.append(item)
                    weight += item.event.weight
            if items:
                self.dispatch(items)
            if stop:
                self._run_urgent()
                return

    def dispatch_now(self, event: Event) -> tuple[Any, ...]:
        """Run the handlers of `event` on the calling thread (tests, start-up)."""
        item = _Item(event, Future())
        self.dispatch([item])
        return item.future.result(timeout=0)

    def dispatch(self, items: Sequence[_Item]) -> None:
        start = 0
        while start < len(items):
            kind = type(items[start].event)
            end = start + 1
            while end < len(items) and type(items[end].event) is kind:
                end += 1
            self._dispatch_group(kind, items[start:end])
            start = end

    def _dispatch_group(self, kind: type[Event], group: Sequence[_Item]) -> None:
        name = kind.__name__
        results: list[list[Any]] = [[] for _ in group]
        errors: list[BaseException | None] = [None] * len(group)
        began = time.perf_counter()
        for handler in self.handlers_for(kind):
            if handler.batch:
                try:
                    value = handler.function([item.event for item in group])
                    if value is not None:
                        for slot in results:
                            slot.append(value)
                except Exception as error:
                    self._failed(name, handler.function, error)
                    for i in range(len(group)):
                        errors[i] = errors[i] or error
                continue
            for i, item in enumerate(group):
                try:
                    value = handler.function(item.event)
                    if value is not None:
                        results[i].append(value)
                except Exception as error:
                    self._failed(name, handler.function, error)
                    errors[i] = errors[i] or error
        if self.metrics is not None:
            self.metrics.events.labels(name).inc(len(group))
        elapsed = time.perf_counter() - began
        if elapsed > 1.0:
            LOG.info("%d %s event(s) took %.2fs", len(group), name, elapsed)
        for i, item in enumerate(group):
            failure = errors[i]
            if failure is not None:
                item.future.set_exception(failure)
            else:
                item.future.set_result(tuple(results[i]))

    def _failed(self, name: str, function: Callable[..., Any], error: Exception) -> None:
        """A handler raised. A request it refused (the client's 4xx, in the request's answer)
        is one line at DEBUG; anything else is a failed handler, logged and counted."""
        if isinstance(error, RequestError) and error.is_refusal:
            LOG.debug("%s: refused (%d %s)", name, error.status, error.message)
            return
        LOG.error("%s handler %s failed", name, _name(function), exc_info=error)
        if self.metrics is not None:
            self.metrics.handler_errors.labels(name).inc()


def _name(function: Callable[..., Any]) -> str:
    return getattr(function, "__qualname__", repr(function))
