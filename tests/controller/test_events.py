"""The event bus: handlers per kind of event, a new kind needs no dispatch code, batches."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from controller.events import Event, EventBus


@dataclass(frozen=True, slots=True)
class Ping(Event):
    n: int


@dataclass(frozen=True, slots=True)
class LoudPing(Ping):
    pass


def test_a_new_kind_of_event_needs_only_a_subscription() -> None:
    bus = EventBus()
    seen: list[tuple[str, int]] = []
    bus.subscribe(Ping, lambda e: seen.append(("ping", e.n)))

    def loud(e: LoudPing) -> int:
        seen.append(("loud", e.n))
        return e.n * 10

    bus.subscribe(LoudPing, loud)
    assert bus.dispatch_now(LoudPing(2)) == (20,)
    assert seen == [("loud", 2), ("ping", 2)]  # its own handlers, then its base class's


def test_batch_handlers_get_consecutive_events_of_their_kind_in_one_call() -> None:
    bus = EventBus()
    calls: list[list[int]] = []
    bus.subscribe(Ping, lambda events: calls.append([e.n for e in events]), batch=True)
    futures = [bus.publish(Ping(n)) for n in range(5)]
    bus.start()
    try:
        for future in futures:
            future.result(timeout=5)
        assert calls == [[0, 1, 2, 3, 4]]  # queued before the dispatcher started: one batch
        assert bus.call(lambda: "on the dispatcher") == "on the dispatcher"
    finally:
        bus.stop()


@dataclass(frozen=True, slots=True)
class Records(Event):
    records: tuple[int, ...]

    @property
    def weight(self) -> int:
        return len(self.records)


def test_a_batch_is_bounded_by_the_records_it_carries_not_by_events() -> None:
    """Digest lists carry up to 128 sessions each: 512 of them in one handler call would hold
    the dispatcher (and every API view, which waits for the running batch) for seconds."""
    bus = EventBus(max_batch=100)
    calls: list[list[int]] = []
    bus.subscribe(
        Records, lambda events: calls.append([len(e.records) for e in events]), batch=True
    )
    sizes = [40, 40, 40, 150, 10, 60, 30, 20]
    futures = [bus.publish(Records(tuple(range(n)))) for n in sizes]
    bus.start()
    try:
        for future in futures:
            future.result(timeout=5)
    finally:
        bus.stop()
    # in order, every event once; a batch closes once it holds max_batch records or more
    assert [n for call in calls for n in call] == sizes
    assert calls == [[40, 40, 40], [150], [10, 60, 30], [20]]


def test_a_failing_handler_fails_its_event_and_not_the_others() -> None:
    bus = EventBus()
    ran: list[int] = []

    def fragile(event: Ping) -> None:
        if event.n == 1:
            raise ValueError("one")
        ran.append(event.n)

    bus.subscribe(Ping, fragile)
    bus.subscribe(Ping, lambda e: ran.append(-e.n))
    bus.start()
    try:
        good, bad = bus.publish(Ping(0)), bus.publish(Ping(1))
        assert good.result(timeout=5) == ()
        with pytest.raises(ValueError, match="one"):
            bad.result(timeout=5)
        assert ran == [0, 0, -1]
    finally:
        bus.stop()


def test_call_now_goes_ahead_of_a_backlog_and_call_waits_for_it() -> None:
    """The API's views (call_now) run between batches, before events already queued; a plain
    call runs after everything queued before it (tests use it as a barrier)."""
    import threading

    bus = EventBus(max_batch=1)
    handled: list[int] = []
    gate = threading.Event()

    def slow(event: Ping) -> None:
        if event.n == 0:
            gate.wait(5)  # the dispatcher is busy with the first event
        handled.append(event.n)

    bus.subscribe(Ping, slow)
    bus.start()
    try:
        for n in range(50):
            bus.publish(Ping(n))
        seen_now: list[int] = []
        result: list[object] = []

        def now() -> str:
            seen_now.extend(handled)
            return "now"

        caller = threading.Thread(target=lambda: result.append(bus.call_now(now)))
        caller.start()
        gate.set()
        caller.join(5)
        assert result == ["now"]
        assert len(seen_now) < 50  # ran while most of the backlog was still queued
        assert bus.call(lambda: len(handled)) == 50  # FIFO: after all 50
    finally:
        bus.stop()
