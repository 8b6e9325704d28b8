"""Messages from the SPM to the CPM: JSON over HTTP POST with a bearer token.

    POST {cpm_url}/api/v1/spm/{name}/load    every second
    POST {cpm_url}/api/v1/spm/{name}/alerts  one per alert
    POST {cpm_url}/api/v1/spm/{name}/bypass  one per flow to offload

A sender thread does the HTTP so that inspection never waits for the CPM. While the CPM is down,
alerts and bypass requests wait in a bounded queue (the oldest are dropped, and counted, when it
is full) and are retried with a growing delay; load reports are simply dropped (a stale load is
worthless). One warning is logged when the CPM goes away and one when it is back.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx

LOG = logging.getLogger(__name__)


@dataclass(slots=True)
class CpmCounters:
    sent: int = 0
    failed_attempts: int = 0
    loads_dropped: int = 0
    queued_dropped: int = 0


class CpmClient:
    def __init__(
        self,
        url: str,
        token: str,
        spm_name: str,
        max_queue: int = 10000,
        timeout: float = 2.0,
        max_backoff: float = 30.0,
    ) -> None:
        transport: httpx.HTTPTransport | None = None
        if url.startswith("unix:"):
            transport = httpx.HTTPTransport(uds=url.removeprefix("unix:"))
            url = "http://cpm"
        self.base = f"{url.rstrip('/')}/api/v1/spm/{spm_name}"
        httpx_log = logging.getLogger("httpx")  # one INFO line per request is too much here
        httpx_log.setLevel(max(httpx_log.getEffectiveLevel(), logging.WARNING))
        self.spm_name = spm_name
        self._client = httpx.Client(
            timeout=timeout, headers={"Authorization": f"Bearer {token}"}, transport=transport
        )
        self._queue: collections.deque[tuple[str, dict[str, Any]]] = collections.deque(
            maxlen=max_queue
        )
        self._load: dict[str, Any] | None = None
        self._cond = threading.Condition()
        self._stop = False
        self._down = False
        self._drain_until = 0.0
        self._max_backoff = max_backoff
        self.counters = CpmCounters()
        self._thread = threading.Thread(target=self._run, name="cpm-sender", daemon=True)

    # --- producer side (any thread) -------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def report_load(self, load: dict[str, Any]) -> None:
        with self._cond:
            if self._load is not None:
                self.counters.loads_dropped += 1
            self._load = load
            self._cond.notify()

    def send_alert(self, alert: dict[str, Any]) -> None:
        self._enqueue("alerts", alert)

    def request_bypass(self, request: dict[str, Any]) -> None:
        self._enqueue("bypass", request)

    def _enqueue(self, kind: str, body: dict[str, Any]) -> None:
        with self._cond:
            if len(self._queue) == self._queue.maxlen:
                self.counters.queued_dropped += 1
            self._queue.append((kind, body))
            self._cond.notify()

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._queue)

    def stop(self, drain_timeout: float = 2.0) -> None:
        """Stop the sender; give queued messages up to `drain_timeout` seconds to go out."""
        with self._cond:
            self._stop = True
            self._drain_until = time.monotonic() + drain_timeout
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(drain_timeout + 1.0)
        self._client.close()

    # --- sender thread --------------------------------------------------------------------------

    def _post(self, kind: str, body: dict[str, Any]) -> bool:
        try:
            resp = self._client.post(f"{self.base}/{kind}", json=body)
        except httpx.HTTPError as exc:
            self._failed(f"{type(exc).__name__}: {exc}")
            return False
        if resp.status_code >= 500 or resp.status_code in (408, 429):
            self._failed(f"HTTP {resp.status_code}")
            return False
        if resp.status_code >= 400:  # the CPM refuses it: retrying will not help
            LOG.warning(
                "spm %s: CPM refused %s (HTTP %d): %s",
                self.spm_name,
                kind,
                resp.status_code,
                resp.text[:200],
            )
        self.counters.sent += 1
        if self._down:
            LOG.warning("spm %s: CPM at %s is reachable again", self.spm_name, self.base)
            self._down = False
        return True

    def _failed(self, why: str) -> None:
        self.counters.failed_attempts += 1
        if not self._down:
            LOG.warning(
                "spm %s: CPM at %s unreachable (%s); keeping alerts (%d queued) and retrying",
                self.spm_name,
                self.base,
                why,
                len(self._queue),
            )
            self._down = True

    def _run(self) -> None:
        delay = 0.0
        while True:
            with self._cond:
                deadline = time.monotonic() + delay
                while not self._stop:
                    has_work = bool(self._queue) or self._load is not None
                    remaining = deadline - time.monotonic()
                    if has_work and remaining <= 0:
                        break
                    self._cond.wait(remaining if has_work else None)
                if self._stop and (
                    self._down or not self._queue or time.monotonic() > self._drain_until
                ):
                    return
                load, self._load = self._load, None
                item = self._queue[0] if self._queue else None
            ok = True
            if load is not None:
                ok = self._post("load", load)
                if not ok:
                    with self._cond:
                        self.counters.loads_dropped += 1
            if ok and item is not None:
                ok = self._post(*item)
                if ok:
                    with self._cond:
                        if self._queue and self._queue[0] is item:
                            self._queue.popleft()
            delay = 0.0 if ok else min(self._max_backoff, max(0.5, delay * 2))
