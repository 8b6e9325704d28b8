"""A warning that a flood could repeat thousands of times a second, logged at most once per
interval per subject, with how many were left out since the last line (the counters that go
with it are the caller's)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class ThrottledWarning:
    def __init__(
        self,
        log: logging.Logger,
        what: str,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log = log
        self.what = what
        self.interval = interval
        self.clock = clock
        # subject -> (time of the last line, occurrences not logged since)
        self._state: dict[str, tuple[float, int]] = {}

    def warning(self, subject: str, detail: str) -> bool:
        """Log `subject: what for detail` unless one was logged less than `interval` ago;
        returns whether this one was logged."""
        now = self.clock()
        last, skipped = self._state.get(subject, (float("-inf"), 0))
        if now - last < self.interval:
            self._state[subject] = (last, skipped + 1)
            return False
        more = f" (and {skipped} more since the last message)" if skipped else ""
        self.log.warning("%s: %s for %s%s", subject, self.what, detail, more)
        self._state[subject] = (now, 0)
        return True
