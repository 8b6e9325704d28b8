"""What the console's live charts draw: one sample a second of the controller's counts (through
the event bus, as the API reads them) and of the NPMs' packet and drop counters (read over
P4Runtime on this thread, never on the dispatcher), kept for `KEEP_SECONDS`.

A sample holds totals; rates (new sessions, packets and drops per second, alerts per minute) are
differences with the sample before, so a missed second costs a point, not a wrong rate.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from controller.counters import NpmCounters
from controller.runtime import Controller

LOG = logging.getLogger(__name__)

KEEP_SECONDS = 900
PERIOD_SECONDS = 1.0


class History:
    """Samples the controller once a second on a thread of its own."""

    def __init__(
        self,
        controller: Controller,
        call: Callable[[Callable[[], Any]], Any],
        period: float = PERIOD_SECONDS,
    ) -> None:
        self.controller = controller
        self.call = call
        self.period = period
        self.samples: deque[dict[str, Any]] = deque(maxlen=int(KEEP_SECONDS / period) + 1)
        self.latest_counters: dict[str, NpmCounters] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="console-history", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self.sample()
            except Exception:
                LOG.exception("console: sampling failed")
            self._stop.wait(max(0.05, self.period - (time.monotonic() - began)))

    def _live(self) -> dict[str, Any]:
        """On the dispatcher: the counts a sample needs, nothing more."""
        controller = self.controller
        assert controller.sessions is not None and controller.spms is not None
        return {
            "sessions": controller.sessions.count(),
            "installed": controller.sessions.stats.installed,
            "spms": {
                name: {"weight": s.weight, "load": round(s.load, 3), "status": s.status}
                for name, s in controller.spms.states.items()
            },
        }

    def sample(self) -> dict[str, Any]:
        controller = self.controller
        live: dict[str, Any] = self.call(self._live)
        policy = controller.policy
        ports = [p.number for p in policy.ports] if policy is not None else []
        counters: dict[str, NpmCounters] = controller.npm_counters(ports)
        now = time.time()
        sample: dict[str, Any] = {
            "t": round(now, 3),
            "sessions": live["sessions"],
            "installed": live["installed"],
            "alerts": controller.db.max_alert_id(),
            "spms": live["spms"],
            "rx": sum(cell.packets for c in counters.values() for cell in c.rx.values()),
            "drops": _sum_reasons(counters.values()),
            "counters_read": bool(counters),
        }
        with self._lock:
            previous = self.samples[-1] if self.samples else None
            sample.update(_rates(previous, sample, list(self.samples)))
            self.samples.append(sample)
            self.latest_counters = counters
        return sample

    def since(self, seconds: float) -> list[dict[str, Any]]:
        with self._lock:
            if not self.samples:
                return []
            start = self.samples[-1]["t"] - seconds
            return [s for s in self.samples if s["t"] >= start]

    def counters(self) -> dict[str, NpmCounters]:
        with self._lock:
            return dict(self.latest_counters)


def _sum_reasons(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for counters in items:
        for reason, cell in counters.drops.items():
            out[reason] = out.get(reason, 0) + cell.packets
    return out


def _rates(
    previous: dict[str, Any] | None, sample: dict[str, Any], window: list[dict[str, Any]]
) -> dict[str, Any]:
    if previous is None:
        return {"new_per_s": 0.0, "rx_per_s": 0.0, "drops_per_s": {}, "alerts_per_min": 0}
    elapsed = max(1e-3, sample["t"] - previous["t"])
    drops = {
        reason: round(max(0, count - previous["drops"].get(reason, 0)) / elapsed, 2)
        for reason, count in sample["drops"].items()
    }
    # alerts per minute: those of the last minute (of what history there is)
    first = next((s for s in window if s["t"] >= sample["t"] - 60), previous)
    both_read = previous["counters_read"] and sample["counters_read"]
    return {
        "new_per_s": round(max(0, sample["installed"] - previous["installed"]) / elapsed, 2),
        "rx_per_s": round(max(0, sample["rx"] - previous["rx"]) / elapsed, 1) if both_read else 0,
        "drops_per_s": drops if both_read else {},
        "alerts_per_min": max(0, sample["alerts"] - first["alerts"]),
    }
