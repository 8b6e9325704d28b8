"""Idle-timeout deadlines in a heap (softswitch.idle) against a scan of every entry at each tick,
the way P4Runtime defines the notification: an entry is reported once when it has not been hit
for its timeout, and again after a later hit once it is idle again."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from softswitch.idle import IdleTimers
from softswitch.tables import Entry


class FakeTable:
    """What IdleTimers asks of a table: its entries by canonical key."""

    def __init__(self) -> None:
        self.entries: dict[Any, Entry] = {}

    def canonical(self, key: tuple[Any, ...], priority: int) -> Any:
        return key


def new_entry(key: int, timeout: int, now: int) -> Entry:
    return Entry((key,), 0, None, (), None, timeout_ns=timeout, last_hit=now)


ops = st.lists(
    st.tuples(
        st.sampled_from(["write", "hit", "delete", "tick"]),
        st.integers(0, 5),  # key
        st.integers(0, 40),  # time step
        st.integers(0, 30),  # timeout (0: none)
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_heap_reports_what_a_full_scan_reports(program: list[tuple[str, int, int, int]]) -> None:
    now = 0
    heap_table, scan_table = FakeTable(), FakeTable()
    timers = IdleTimers()
    scan_notified: dict[int, bool] = {}
    heap_seen: list[tuple[int, int]] = []
    scan_seen: list[tuple[int, int]] = []
    for op, key, step, timeout in program:
        now += step
        if op == "write":
            # INSERT or MODIFY: a new entry object, its hit time now, not reported
            heap_table.entries[(key,)] = e = new_entry(key, timeout, now)
            scan_table.entries[(key,)] = new_entry(key, timeout, now)
            scan_notified[key] = False
            timers.arm(heap_table, e, key)  # type: ignore[arg-type]
        elif op == "hit" and (key,) in heap_table.entries:
            for t in (heap_table, scan_table):
                t.entries[(key,)].last_hit = now
                t.entries[(key,)].notified = False
            scan_notified[key] = False
        elif op == "delete":
            heap_table.entries.pop((key,), None)
            scan_table.entries.pop((key,), None)
        elif op == "tick":
            heap_seen += [(now, k) for k, _ in timers.expired(now, lambda e: None)]
            for (k,), e in sorted(scan_table.entries.items()):
                if e.timeout_ns and not scan_notified[k] and now - e.last_hit >= e.timeout_ns:
                    scan_notified[k] = True
                    scan_seen.append((now, k))
    assert sorted(heap_seen) == sorted(scan_seen)


def test_a_tick_looks_only_at_entries_whose_deadline_passed() -> None:
    table = FakeTable()
    timers = IdleTimers()
    synced: list[int] = []
    for k in range(1000):
        table.entries[(k,)] = e = new_entry(k, 100 + k, 0)
        timers.arm(table, e, k)  # type: ignore[arg-type]
    expired = [k for k, _ in timers.expired(104, lambda e: synced.append(e.key[0]))]
    assert expired == [0, 1, 2, 3, 4]
    assert synced == [0, 1, 2, 3, 4]
    assert len(timers) == 1000  # the reported ones are looked at again one timeout later
