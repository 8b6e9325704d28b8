"""The AV inspector: collects objects (HTTP bodies, raw TCP stream directions) and has clamd scan
each one when it is complete.

Policy (configuration `av`): an infected object blocks its flow; an object larger than
`max_scan_size` (or more than the worker's `max_buffered` in total) has its first
`max_scan_size` bytes scanned and is then accepted or blocked as `on_size_limit` says; when clamd
is down or times out, `on_clamd_down` decides. The packet that completes an object waits for the
scan, so blocking it keeps the receiver from ever completing the object.

Not supported: scanning while an object is still arriving (clamd needs it whole); objects on UDP;
scanning in a separate thread (a scan holds its worker; put clamd on the same host); e-mail and
FTP data channels are scanned as raw stream directions, not as files.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from spm.av.clamd import ClamdClient, ScanResult, ScanStatus
from spm.config import AvConfig

LOG = logging.getLogger(__name__)


@dataclass(slots=True)
class AvCounters:
    objects: int = 0
    scans: int = 0
    clean: int = 0
    infected: int = 0
    too_large: int = 0
    clamd_down: int = 0
    bytes_scanned: int = 0


@dataclass(slots=True)
class AvObject:
    """One object being collected."""

    kind: str  # "http-body" | "stream"
    buf: bytearray = field(default_factory=bytearray)
    size: int = 0  # bytes seen, including those past the limit
    over_limit: bool = False
    done: bool = False


@dataclass(frozen=True, slots=True)
class AvOutcome:
    block: bool
    reason: str  # "infected" | "size_limit" | "clamd_down" | "clean"
    signature: str | None = None
    size: int = 0


class AvInspector:
    def __init__(self, cfg: AvConfig, client: ClamdClient | None = None) -> None:
        self.cfg = cfg
        self.client = client or ClamdClient(cfg.clamd_socket, cfg.timeout)
        self.counters = AvCounters()
        self.buffered = 0
        self._warned_down = False

    def begin(self, kind: str) -> AvObject:
        self.counters.objects += 1
        return AvObject(kind)

    def add(self, obj: AvObject, data: bytes) -> AvOutcome | None:
        """Add bytes; returns an outcome only if the object must be blocked right now (over the
        size limit with policy drop)."""
        if obj.done or not data:
            return None
        obj.size += len(data)
        if obj.over_limit:
            return None
        room = min(self.cfg.max_scan_size - len(obj.buf), self.cfg.max_buffered - self.buffered)
        if len(data) > room:
            obj.over_limit = True
            data = data[: max(room, 0)]
            self.counters.too_large += 1
            if self.cfg.on_size_limit == "drop":
                self.discard(obj)
                return AvOutcome(True, "size_limit", size=obj.size)
        obj.buf += data
        self.buffered += len(data)
        return None

    def discard(self, obj: AvObject) -> None:
        """Forget an object (its flow ended or was blocked) and free its buffer."""
        self.buffered -= len(obj.buf)
        obj.buf = bytearray()
        obj.done = True

    def finish(self, obj: AvObject) -> AvOutcome:
        """The object is complete: scan it and apply the policy."""
        if obj.done:
            return AvOutcome(False, "clean", size=obj.size)
        data = bytes(obj.buf)
        self.discard(obj)
        if not data:
            return AvOutcome(False, "clean", size=obj.size)
        result = self.scan(data)
        c = self.counters
        if result.status is ScanStatus.INFECTED:
            return AvOutcome(True, "infected", result.signature, obj.size)
        if result.status is ScanStatus.TOO_LARGE:
            c.too_large += 1
            return AvOutcome(self.cfg.on_size_limit == "drop", "size_limit", size=obj.size)
        if result.status is ScanStatus.UNAVAILABLE:
            return AvOutcome(self.cfg.on_clamd_down == "drop", "clamd_down", size=obj.size)
        if obj.over_limit:
            return AvOutcome(self.cfg.on_size_limit == "drop", "size_limit", size=obj.size)
        return AvOutcome(False, "clean", size=obj.size)

    def scan(self, data: bytes) -> ScanResult:
        c = self.counters
        c.scans += 1
        c.bytes_scanned += len(data)
        result = self.client.instream(data)
        if result.status is ScanStatus.UNAVAILABLE:
            c.clamd_down += 1
            if not self._warned_down:
                LOG.warning(
                    "clamd at %s is unavailable (%s); policy on_clamd_down=%s",
                    self.cfg.clamd_socket,
                    result.detail,
                    self.cfg.on_clamd_down,
                )
                self._warned_down = True
        else:
            if self._warned_down:
                LOG.warning("clamd at %s is back", self.cfg.clamd_socket)
            self._warned_down = False
        if result.status is ScanStatus.INFECTED:
            c.infected += 1
        elif result.status is ScanStatus.CLEAN:
            c.clean += 1
        return result
