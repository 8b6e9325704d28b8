"""`opengate spm run`: the SPM daemon's main process (the dispatcher).

Start-up order: load the rules and compile the IPS (once, here) -> fork the workers (they share
it) -> bind the NFQUEUE -> install the kernel plumbing (which first removes a crashed run's
leftovers) -> loop. Stop (SIGTERM/SIGINT): leave the loop, answer every packet still held (by the
fail-open policy), stop the workers by PID, unbind, remove the plumbing.

The loop reads packets from the queue into a fair queue (`opengate.fairqueue`: a queue per flow,
flows grouped by source, served in turn), hands them from there to the worker that owns their
flow (`FlowDispatcher`), at most `queue.window` packets at each worker at once, and turns the
workers' verdicts into NFQUEUE verdicts: ACCEPT as is, DROP, BLOCK and BYPASS as ACCEPT with a
flag in the mark that the nftables rules copy into the flow's conntrack mark (so the kernel
drops or passes the rest of the flow without asking again). So a host's new flow waits behind a
packet of each other busy source, not behind a flooding host's backlog. A source holding
`queue.per_source` packets has its next ones answered by the fail-open policy (accepted
uninspected, or dropped), counted with the kernel queue's drops. The loop stops reading the
queue while `queue.length` packets are held or at the workers (the kernel queue then fills,
and fail-open decides). A worker that dies is restarted; the packets it held are accepted
(fail-open) or dropped.

Beside Snort (`queue_num` given: the AV after Snort, see `spm.ips.snort`), the daemon reads that
queue, which the Snort adapter's plumbing feeds, and installs no plumbing; the start and stop
records and the load reports are the adapter's; alerts go to the CPM and the EVE log as here.

Every second: a load report to the CPM (`cpu`: percent of the host's CPU capacity used by the
dispatcher and its workers; `queue_depth`: packets not yet answered, as the kernel counts them;
`queue_held`: those of them read by the dispatcher (in its fair queue or at a worker);
`mem_bytes`: their total PSS); alerts and bypass requests go to the CPM as they come,
and to the EVE log.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import selectors
import signal
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opengate.fairqueue import FairQueue
from spm import ipc
from spm.av.inspector import AvInspector
from spm.capture import NF_ACCEPT, NF_DROP, NfQueue, QueuedPacket
from spm.config import SpmConfig
from spm.cpm_client import CpmClient
from spm.dispatch import FlowDispatcher
from spm.eve import EveLog
from spm.ips.base import Detector
from spm.logs import ContextLogger
from spm.nft import FLAG_BLOCK, FLAG_BYPASS, Plan, Plumbing
from spm.packet import flow_id
from spm.pool import WorkerHandle, WorkerPool
from spm.verdict import Verdict
from spm.worker import Worker

LOG = logging.getLogger(__name__)

TICK = 1.0
EVE_STATS_INTERVAL = 10.0
_CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(slots=True)
class DaemonCounters:
    packets: int = 0
    bytes: int = 0
    unparseable: int = 0
    paused: int = 0  # times reading the queue was paused (workers full)
    failed_over: int = 0  # packets answered by policy because their worker died
    overflow: int = 0  # packets over their source's share of the fair queue, answered by policy


def cpu_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])  # utime + stime


def pss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


NFQUEUE_PROC = Path("/proc/net/netfilter/nfnetlink_queue")


@dataclass(frozen=True, slots=True)
class KernelQueue:
    """A queue's line of /proc/net/netfilter/nfnetlink_queue (this network namespace)."""

    depth: int = 0  # packets waiting for a verdict
    queue_dropped: int = 0  # dropped because the queue held its maximum length
    user_dropped: int = 0  # dropped because the listener's socket could not take the message

    @property
    def dropped(self) -> int:
        return self.queue_dropped + self.user_dropped


def kernel_queue(queue_num: int, proc: Path = NFQUEUE_PROC) -> KernelQueue:
    """The kernel's counters of NFQUEUE `queue_num` since it was bound (zeros if it is not).
    Columns: number, listener port id, depth, copy mode, copy range, queue dropped, user
    dropped, last packet id, 1."""
    try:
        for line in proc.read_text().splitlines():
            cols = line.split()
            if cols and int(cols[0]) == queue_num:
                return KernelQueue(int(cols[2]), int(cols[5]), int(cols[6]))
    except (OSError, ValueError, IndexError):
        pass
    return KernelQueue()


class SharedCount:
    """A count that one process writes and another reads: eight bytes of anonymous shared
    memory, made before a fork. The Snort adapter reports, with its own queues' drops, the
    packets its AV's daemon (a forked child) answered by policy because their source was over its
    share of the fair queue."""

    def __init__(self) -> None:
        self._mem = mmap.mmap(-1, 8)

    def set(self, value: int) -> None:
        struct.pack_into("=Q", self._mem, 0, value)

    def get(self) -> int:
        return int(struct.unpack_from("=Q", self._mem, 0)[0])


def bound_queues() -> set[int]:
    """The NFQUEUE numbers a process listens on in this network namespace."""
    out: set[int] = set()
    try:
        for line in NFQUEUE_PROC.read_text().splitlines():
            cols = line.split()
            if cols:
                out.add(int(cols[0]))
    except (OSError, ValueError):
        pass
    return out


class SpmDaemon:
    """The built-in engine's daemon. Alone (`queue_num` None) it owns the plumbing and reads
    `queue.num`; given `queue_num`, it reads that queue, which another daemon plumbs and reports
    for (the Snort adapter, whose AV this then is)."""

    def __init__(
        self,
        cfg: SpmConfig,
        detector: Detector | None = None,
        queue_num: int | None = None,
        overflow_out: SharedCount | None = None,
    ) -> None:
        self.cfg = cfg
        # Embedded, the owner reports the load: it reads this daemon's overflow here.
        self.overflow_out = overflow_out
        self.detector = detector
        self.embedded = queue_num is not None
        self.queue_num = cfg.queue.num if queue_num is None else queue_num
        # Embedded, another daemon owns the plumbing (and removes it).
        self.plumbing = None if self.embedded else Plumbing(Plan.from_config(cfg))
        self.counters = DaemonCounters()
        self.dispatcher = FlowDispatcher(
            cfg.workers,
            cfg.dispatch,
            max_flows=cfg.limits.max_flows * cfg.workers,
            timeout=cfg.limits.flow_timeout,
        )
        self.pending: dict[int, tuple[int, int]] = {}  # packet id -> (worker, mark)
        # read from the kernel, not yet at a worker: (packet, community id, source, destination)
        self.held: FairQueue[tuple[QueuedPacket, str, bytes, bytes]] = FairQueue(
            cfg.queue.per_source
        )
        self.max_outstanding = max(64, cfg.queue.length)
        self.pool: WorkerPool | None = None
        self.nfq: NfQueue | None = None
        self.cpm: CpmClient | None = None
        self.eve: EveLog | None = None
        self._sel = selectors.DefaultSelector()
        self._stop = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._log = ContextLogger(LOG, f"spm {cfg.name}")
        self._last_cpu = 0
        self._last_tick = time.monotonic()
        self._last_packets = 0
        self._last_bytes = 0
        self._last_dropped = 0
        self._next_eve_stats = 0.0

    # --- life cycle -----------------------------------------------------------------------------

    def make_worker(self, index: int) -> Worker:
        av = AvInspector(self.cfg.av) if self.cfg.av.enabled else None
        return Worker(self.cfg, self.detector, av, index)

    def run(self) -> int:
        cfg = self.cfg
        self._install_signals()
        try:
            self.pool = WorkerPool(cfg.workers, self.make_worker)
            self.nfq = NfQueue(self.queue_num, cfg.queue.length, cfg.queue.fail_open)
            backend = self.plumbing.setup() if self.plumbing is not None else ""
            if cfg.eve_log:
                self.eve = EveLog(cfg.eve_log, cfg.name)
                if not self.embedded:
                    self.eve.write(
                        "spm",
                        time.time(),
                        spm_event="start",
                        backend=backend,
                        workers=cfg.workers,
                        dispatch=cfg.dispatch,
                    )
            if cfg.cpm_url and cfg.token:
                self.cpm = CpmClient(cfg.cpm_url, cfg.token, cfg.name)
                self.cpm.start()
            self._sel.register(self.nfq, selectors.EVENT_READ, "nfq")
            self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
            for h in self.pool.handles:
                self._sel.register(h.sock, selectors.EVENT_READ, h)
            self._log.info(
                "inspecting queue %d with %d workers (%s)",
                self.queue_num,
                cfg.workers,
                cfg.dispatch,
            )
            self._loop()
            return 0
        finally:
            self._shutdown()

    def stop(self) -> None:
        self._stop = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _install_signals(self) -> None:
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)

        def handler(signum: int, _frame: Any) -> None:
            self._log.info("signal %d, stopping", signum)
            self.stop()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def _shutdown(self) -> None:
        if self.nfq is not None:
            fail = NF_ACCEPT if self.cfg.queue.fail_open else NF_DROP
            for packet_id in list(self.pending):
                self.nfq.verdict(packet_id, fail)
            self.pending.clear()
            for qp, _cid, _src, _dst in self.held.drain():
                self.nfq.verdict(qp.packet_id, fail)
            self.nfq.close()
        if self.pool is not None:
            self.pool.stop()
        try:
            if self.plumbing is not None:
                self.plumbing.teardown()
        except Exception:  # teardown must not hide the original error
            self._log.exception("removing the plumbing failed")
        if self.cpm is not None:
            self.cpm.stop()
        if self.eve is not None:
            if not self.embedded:
                self.eve.write("spm", time.time(), spm_event="stop")
            self.eve.close()
        self._log.info("stopped")

    # --- the loop -------------------------------------------------------------------------------

    def _loop(self) -> None:
        assert self.nfq is not None and self.pool is not None
        nfq, pool = self.nfq, self.pool
        reading = True
        backlog = False
        while not self._stop:
            timeout = max(0.0, self._last_tick + TICK - time.monotonic())
            if backlog:
                timeout = min(timeout, 0.001)  # a batch waits for room in a worker's socket
            for key, _mask in self._sel.select(timeout):
                if key.data == "nfq":
                    for _ in range(256):
                        pkts = nfq.receive()
                        if not pkts:
                            break
                        for qp in pkts:
                            self._hold(qp)
                        self._hand_out()
                        if len(self.pending) + len(self.held) >= self.max_outstanding:
                            break
                elif key.data == "wake":
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(64)
                else:
                    self._from_worker(key.data)
            self._hand_out()
            backlog = not pool.flush()
            nfq.flush()
            full = len(self.pending) + len(self.held) >= self.max_outstanding
            if full and reading:
                self._sel.unregister(nfq)
                self.counters.paused += 1
                reading = False
            elif not full and not reading:
                self._sel.register(nfq, selectors.EVENT_READ, "nfq")
                reading = True
            if time.monotonic() >= self._last_tick + TICK:
                self._tick()

    def _hold(self, qp: QueuedPacket) -> None:
        assert self.nfq is not None
        c = self.counters
        c.packets += 1
        c.bytes += len(qp.payload)
        cid, src, dst = flow_id(qp.payload)
        if not cid:
            c.unparseable += 1
            self.nfq.verdict(qp.packet_id, NF_DROP)
            return
        if not self.held.put(src, cid, (qp, cid, src, dst)):
            c.overflow += 1
            if self.overflow_out is not None:
                self.overflow_out.set(c.overflow)
            self.nfq.verdict(qp.packet_id, NF_ACCEPT if self.cfg.queue.fail_open else NF_DROP)

    def _hand_out(self) -> None:
        """Held packets to their workers, in turn, while the workers have room."""
        assert self.pool is not None
        room = self.cfg.queue.window * max(1, sum(self.dispatcher.alive)) - len(self.pending)
        now = time.time()
        for _ in range(min(room, len(self.held))):
            item = self.held.take()
            assert item is not None
            qp, cid, src, dst = item
            worker = self.dispatcher.pick(cid, src, dst, now)
            self.dispatcher.queue[worker] += 1
            self.pending[qp.packet_id] = (worker, qp.mark)
            self.pool.queue(worker, qp.packet_id, cid, qp.payload)

    def _apply(self, packet_id: int, verdict: int) -> None:
        assert self.nfq is not None
        entry = self.pending.pop(packet_id, None)
        if entry is None:
            return
        worker, mark = entry
        self.dispatcher.queue[worker] -= 1
        if verdict == Verdict.ACCEPT:
            self.nfq.verdict(packet_id, NF_ACCEPT)
        elif verdict == Verdict.DROP:
            self.nfq.verdict(packet_id, NF_DROP)
        elif verdict == Verdict.BLOCK:
            self.nfq.verdict(packet_id, NF_ACCEPT, mark | FLAG_BLOCK)
        else:
            self.nfq.verdict(packet_id, NF_ACCEPT, mark | FLAG_BYPASS)

    def _from_worker(self, h: WorkerHandle) -> None:
        for _ in range(64):
            try:
                msg = h.receiver.recv()
            except BlockingIOError:
                return
            except OSError:
                msg = b""
            if not msg:
                self._worker_died(h)
                return
            if msg[0] == ipc.MSG_VERDICTS:
                for packet_id, verdict in ipc.unpack_verdicts(msg):
                    self._apply(packet_id, verdict)
            elif msg[0] == ipc.MSG_EVENTS:
                for event in ipc.unpack_events(msg):
                    self._event(h, event)

    def _event(self, h: WorkerHandle, event: dict[str, Any]) -> None:
        kind = event.pop("type", "")
        if kind == "alert":
            if self.eve is not None:
                self.eve.alert(event)
            if self.cpm is not None:
                body = {
                    k: event[k]
                    for k in (
                        "ts",
                        "sid",
                        "gid",
                        "rev",
                        "msg",
                        "classtype",
                        "action",
                        "flow",
                        "community_id",
                    )
                }
                self.cpm.send_alert(body)
        elif kind == "bypass":
            if self.eve is not None:
                self.eve.bypass(event, time.time())
            if self.cpm is not None:
                self.cpm.request_bypass(
                    {k: event[k] for k in ("flow", "community_id", "clean_bytes")}
                )
        elif kind == "flow_end":
            self.dispatcher.forget(str(event.get("community_id", "")))
        elif kind == "stats":
            h.stats = event

    def _worker_died(self, h: WorkerHandle) -> None:
        assert self.pool is not None and self.nfq is not None
        self._log.error(
            "worker %d (pid %d) died; restarting it (batches sent to dead workers so far: %d)",
            h.index,
            h.pid,
            self.pool.dead_sends,
        )
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(h.sock)
        fail = NF_ACCEPT if self.cfg.queue.fail_open else NF_DROP
        for packet_id in [p for p, (w, _m) in self.pending.items() if w == h.index]:
            del self.pending[packet_id]
            self.nfq.verdict(packet_id, fail)
            self.counters.failed_over += 1
        self.dispatcher.worker_died(h.index)
        new = self.pool.restart(h.index)
        self._sel.register(new.sock, selectors.EVENT_READ, new)
        self.dispatcher.worker_back(h.index)

    # --- every second ---------------------------------------------------------------------------

    def load_report(self) -> dict[str, Any]:
        assert self.pool is not None
        now = time.monotonic()
        interval = max(1e-3, now - self._last_tick)
        pids = [os.getpid()] + [h.pid for h in self.pool.handles]
        ticks = sum(cpu_ticks(p) for p in pids)
        cpu = 0.0
        if self._last_cpu:  # percent of the host's CPU capacity (all cores), 0..100
            busy = (ticks - self._last_cpu) / _CLK_TCK / interval
            cpu = min(100.0, 100.0 * busy / (os.cpu_count() or 1))
        self._last_cpu = ticks
        c = self.counters
        kernel = kernel_queue(self.queue_num)
        read = len(self.pending) + len(self.held)
        report = {
            "ts": time.time(),
            "cpu": round(cpu, 1),
            # The kernel counts a packet until its verdict, read or not: what this process
            # holds (`queue_held`: in the fair queue or at a worker) is part of its count.
            "queue_depth": max(kernel.depth, read),
            "queue_held": read,
            "queue_dropped": kernel.dropped + c.overflow,
            "pps": round((c.packets - self._last_packets) / interval, 1),
            "bps": round(8 * (c.bytes - self._last_bytes) / interval, 1),
            "mem_bytes": sum(pss_bytes(p) for p in pids),
            "workers": sum(self.dispatcher.alive),
            "flows": sum(int(h.stats.get("flows", 0)) for h in self.pool.handles),
        }
        self._last_packets, self._last_bytes = c.packets, c.bytes
        return report

    def _tick(self) -> None:
        report = self.load_report()
        self._last_tick = time.monotonic()
        dropped = report["queue_dropped"]
        if dropped > self._last_dropped:
            self._log.warning(
                "queue %d: %d packets not queued in the last second (%d since start; %d over "
                "their source's share of %d, answered by the fail-open policy; the kernel dropped "
                "the rest: the queue was full, %d packets, or this process did not read in time)",
                self.queue_num,
                dropped - self._last_dropped,
                dropped,
                self.counters.overflow,
                self.cfg.queue.per_source,
                self.cfg.queue.length,
            )
        self._last_dropped = dropped
        self.dispatcher.expire(time.time())
        if self.cpm is not None and not self.embedded:  # embedded: the owner reports the load
            self.cpm.report_load(report)
        if self.eve is not None and time.monotonic() >= self._next_eve_stats:
            self._next_eve_stats = time.monotonic() + EVE_STATS_INTERVAL
            assert self.pool is not None
            self.eve.write(
                "stats",
                time.time(),
                stats={
                    "load": report,
                    "dispatcher": {
                        "packets": self.counters.packets,
                        "unparseable": self.counters.unparseable,
                        "paused": self.counters.paused,
                        "failed_over": self.counters.failed_over,
                        "overflow": self.counters.overflow,
                        "flows_assigned": self.dispatcher.counters.flows_assigned,
                    },
                    "workers": [h.stats for h in self.pool.handles],
                },
            )
