"""Idle-timeout deadlines of table entries, in a heap.

A scan of every entry at each tick costs time in proportion to the entries held (80,000 session
entries took most of a core, and the scan held the locks that Writes wait for). Here each entry
with an idle timeout is armed once when it is written; a tick looks only at the entries whose
deadline has passed. Such an entry is synced with the data plane's last hit (`sync`): hit since,
it is re-armed at its new deadline; not hit, it is reported once (`notified`, as P4Runtime asks)
and looked at again one timeout later, so that an entry hit after its notification is reported
again when it next goes idle. An entry deleted or replaced since (a MODIFY makes a new entry) is
dropped from the heap when its deadline comes up.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator
from typing import Any

from softswitch import tables as tb


class IdleTimers:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, tb.Table, tb.Entry, Any]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def arm(self, table: tb.Table, entry: tb.Entry, info: Any) -> None:
        """Watch `entry` (just written to `table`; `info` is handed back with it)."""
        if entry.timeout_ns > 0:
            deadline = entry.last_hit + entry.timeout_ns
            heapq.heappush(self._heap, (deadline, next(self._seq), table, entry, info))

    def expired(self, now: int, sync: Callable[[tb.Entry], None]) -> Iterator[tuple[Any, tb.Entry]]:
        """(info, entry) for each entry idle for its timeout at `now` and not reported yet;
        the caller reports them."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, table, entry, info = heapq.heappop(heap)
            if entry.timeout_ns <= 0 or not _held(table, entry):
                continue
            sync(entry)
            deadline = entry.last_hit + entry.timeout_ns
            if deadline > now:
                heapq.heappush(heap, (deadline, next(self._seq), table, entry, info))
                continue
            if not entry.notified:
                entry.notified = True
                yield info, entry
            heapq.heappush(heap, (now + entry.timeout_ns, next(self._seq), table, entry, info))


def _held(table: tb.Table, entry: tb.Entry) -> bool:
    return table.entries.get(table.canonical(entry.key, entry.priority)) is entry
