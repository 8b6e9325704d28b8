"""Worker processes: forked from the dispatcher after the rules and signatures are loaded, so
all of them share that memory copy-on-write (`gc.freeze()` first, so that the garbage collector
does not write to every object and unshare the pages).

The worker side loops: receive a batch of packets, run `Worker.process` on each, answer with a
batch of verdicts, then report events (alerts, bypass requests, ended flows) and, every second,
its statistics. It exits on a quit message or when the dispatcher's end of the socket closes
(the dispatcher died).
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from spm import ipc
from spm.verdict import Alert, BypassRequest
from spm.worker import Worker

LOG = logging.getLogger(__name__)

STATS_INTERVAL = 1.0
# Verdicts go back in chunks of this many packets, not once per batch: the dispatcher hands out
# more (its window per worker) while the worker goes on with the rest of the batch.
VERDICT_CHUNK = 16


def event_dict(event: Alert | BypassRequest | str) -> dict[str, Any]:
    if isinstance(event, Alert):
        out = event.to_cpm()
        out.update(type="alert", source=event.source, priority=event.priority)
        return out
    if isinstance(event, BypassRequest):
        out = event.to_cpm()
        out.update(type="bypass", flow_class=event.flow_class)
        return out
    return {"type": "flow_end", "community_id": event}


def worker_loop(sock: socket.socket, worker: Worker) -> None:
    """The body of a worker process."""
    sock.settimeout(STATS_INTERVAL)
    receiver = ipc.Receiver(sock)
    next_stats = time.monotonic() + STATS_INTERVAL
    while True:
        try:
            msg = receiver.recv()
        except TimeoutError:
            msg = None
        except OSError:
            return
        if msg is not None:
            if not msg or msg[0] == ipc.MSG_QUIT:
                return
            if msg[0] == ipc.MSG_PACKETS:
                now = time.time()
                verdicts: list[tuple[int, int]] = []
                for pid, cid, raw in ipc.unpack_packets(msg):
                    verdicts.append((pid, int(worker.process(raw, cid, now))))
                    if len(verdicts) == VERDICT_CHUNK:
                        sock.sendall(ipc.pack_verdicts(verdicts))
                        verdicts.clear()
                if verdicts:
                    sock.sendall(ipc.pack_verdicts(verdicts))
        events: list[dict[str, Any]] = []
        if worker.events:
            events = [event_dict(e) for e in worker.events]
            worker.events.clear()
        mono = time.monotonic()
        if mono >= next_stats:
            next_stats = mono + STATS_INTERVAL
            worker.expire()
            events += [event_dict(e) for e in worker.events]
            worker.events.clear()
            events.append({"type": "stats", **worker.stats()})
        if events:
            sock.sendall(ipc.pack_events(events))


@dataclass(slots=True)
class WorkerHandle:
    index: int
    pid: int
    sock: socket.socket
    receiver: ipc.Receiver
    out: list[bytes] = field(default_factory=list)  # packed packets not yet sent
    out_bytes: int = 0
    stats: dict[str, Any] = field(default_factory=dict)


class WorkerPool:
    """Forks `n` workers made by `make_worker(index)` (called in the child, after the fork, so
    whatever it builds on top of the shared rules is private to the worker)."""

    def __init__(self, n: int, make_worker: Callable[[int], Worker]) -> None:
        self.make_worker = make_worker
        self.handles: list[WorkerHandle] = []
        # Batches for a worker that had died (its socket's peer gone) before the dispatcher
        # read its end close: dropped, since their packets are still held and its restart
        # answers them (fail-open or drop).
        self.dead_sends = 0
        gc.collect()
        gc.freeze()
        for i in range(n):
            self.handles.append(self._fork(i))

    def _fork(self, index: int) -> WorkerHandle:
        parent, child = ipc.socket_pair()
        pid = os.fork()
        if pid == 0:  # the worker
            code = 0
            try:
                parent.close()
                for h in self.handles:
                    h.sock.close()
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                worker_loop(child, self.make_worker(index))
            except BaseException:
                LOG.exception("worker %d failed", index)
                code = 1
            finally:
                os._exit(code)
        child.close()
        parent.setblocking(False)
        LOG.info("worker %d started (pid %d)", index, pid)
        return WorkerHandle(index, pid, parent, ipc.Receiver(parent))

    def restart(self, index: int) -> WorkerHandle:
        old = self.handles[index]
        self._reap(old)
        self.handles[index] = self._fork(index)
        return self.handles[index]

    def queue(self, index: int, packet_id: int, cid: str, raw: bytes) -> None:
        h = self.handles[index]
        frame = ipc.pack_packet(packet_id, cid, raw)
        if h.out_bytes + len(frame) > ipc.MAX_MESSAGE:
            self.flush_one(h)
        h.out.append(frame)
        h.out_bytes += len(frame)

    def flush_one(self, h: WorkerHandle) -> bool:
        """Send the batch; False if the socket is full (try again later)."""
        if not h.out:
            return True
        msg = bytes([ipc.MSG_PACKETS]) + b"".join(h.out)
        try:
            h.sock.send(msg)
        except BlockingIOError:
            return False
        except OSError:  # the worker is gone: the dispatcher sees its socket close next
            self.dead_sends += 1
        h.out.clear()
        h.out_bytes = 0
        return True

    def flush(self) -> bool:
        """Send every batch; False if some must wait (a worker's socket is full)."""
        done = True
        for h in self.handles:
            done &= self.flush_one(h)
        return done

    def stop(self, timeout: float = 5.0) -> None:
        for h in self.handles:
            try:
                h.sock.setblocking(True)
                h.sock.settimeout(1.0)
                h.sock.send(bytes([ipc.MSG_QUIT]))
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        for h in self.handles:
            self._reap(h, max(0.0, deadline - time.monotonic()))
        self.handles = []

    def _reap(self, h: WorkerHandle, timeout: float = 2.0) -> None:
        h.sock.close()
        deadline = time.monotonic() + timeout
        while True:
            try:
                pid, _status = os.waitpid(h.pid, os.WNOHANG)
            except ChildProcessError:
                return
            if pid:
                return
            if time.monotonic() > deadline:
                LOG.warning("worker %d (pid %d) did not stop; killing it", h.index, h.pid)
                os.kill(h.pid, signal.SIGKILL)
                os.waitpid(h.pid, 0)
                return
            time.sleep(0.01)
