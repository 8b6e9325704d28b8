"""The throttled warning: one line per interval and subject, with the count left out."""

from __future__ import annotations

import logging

import pytest

from opengate.throttled import ThrottledWarning


def test_one_line_per_interval_and_subject_with_what_was_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    log = logging.getLogger("og.test.throttled")
    warn = ThrottledWarning(log, "no free port", interval=1.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger=log.name):
        logged = [warn.warning("npm1", f"flow {i}") for i in range(5)]
        logged.append(warn.warning("npm2", "flow x"))  # another subject has its own clock
        now[0] += 0.99
        logged.append(warn.warning("npm1", "flow 5"))
        now[0] += 0.02
        logged.append(warn.warning("npm1", "flow 6"))
        logged.append(warn.warning("npm1", "flow 7"))
    assert logged == [True, False, False, False, False, True, False, True, False]
    assert [r.getMessage() for r in caplog.records] == [
        "npm1: no free port for flow 0",
        "npm2: no free port for flow x",
        "npm1: no free port for flow 6 (and 5 more since the last message)",
    ]
