"""Dispatch of flows to workers (hash2, hash5, jsq) and the forked worker processes."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from spm import ipc
from spm.config import SpmConfig
from spm.dispatch import FlowDispatcher
from spm.packet import flow_id
from spm.pool import WorkerPool
from spm.verdict import Verdict
from spm.worker import Worker
from tests.spm.spm_netns import wait_for
from tests.spm.spm_packets import TcpConversation, udp


def _both_directions(i: int) -> tuple[bytes, bytes]:
    a = udp(f"10.0.{i // 250}.{i % 250 + 1}", "192.0.2.1", 1000 + i, 53, b"q")
    b = udp("192.0.2.1", f"10.0.{i // 250}.{i % 250 + 1}", 53, 1000 + i, b"r")
    return a, b


@pytest.mark.parametrize("scheme", ["hash2", "hash5", "jsq"])
def test_both_directions_of_a_flow_go_to_the_same_worker(scheme: str) -> None:
    d = FlowDispatcher(4, scheme)
    used = set()
    for i in range(200):
        picks = {d.pick(*flow_id(p), now=0.0) for p in _both_directions(i)}
        assert len(picks) == 1
        used |= picks
    assert used == {0, 1, 2, 3}


def test_hash2_keeps_all_flows_between_two_hosts_on_one_worker() -> None:
    d = FlowDispatcher(4, "hash2")
    picks = {d.pick(*flow_id(udp("10.0.0.1", "10.0.0.2", p, 53, b"")), 0.0) for p in range(100)}
    assert len(picks) == 1


def test_jsq_sends_a_new_flow_to_the_shortest_queue_and_keeps_it_there() -> None:
    d = FlowDispatcher(3, "jsq")
    d.queue[:] = [5, 0, 2]
    cid, src, dst = flow_id(udp("10.0.0.1", "10.0.0.2", 1, 2, b""))
    assert d.pick(cid, src, dst, 0.0) == 1
    d.queue[:] = [0, 9, 9]
    assert d.pick(cid, src, dst, 1.0) == 1  # the flow stays
    d.forget(cid)
    assert d.pick(cid, src, dst, 2.0) == 0  # ended: a new flow
    assert d.expire(now=1000.0) == 1 and not d.table


def test_a_dead_workers_flows_move_to_live_ones() -> None:
    for scheme in ("hash5", "jsq"):
        d = FlowDispatcher(2, scheme)
        d.worker_died(0)
        assert {
            d.pick(*flow_id(udp("10.0.0.1", "10.0.0.2", p, 9, b"")), 0.0) for p in range(50)
        } == {1}


def test_forked_workers_answer_every_packet_and_report_events() -> None:
    cfg = SpmConfig(name="t", interface="eth0", tags=(1,), workers=2)
    pool = WorkerPool(2, lambda i: Worker(cfg, index=i))
    try:
        conv = TcpConversation()
        packets = conv.handshake() + conv.send(True, b"x" * 5000)
        for n, raw in enumerate(packets):
            cid, _s, _d = flow_id(raw)
            pool.queue(n % 2, n, cid, raw)
        pool.flush()
        verdicts: dict[int, int] = {}
        stats: list[dict[str, object]] = []

        def drain() -> bool:
            for h in pool.handles:
                while True:
                    try:
                        msg = h.receiver.recv()
                    except BlockingIOError:
                        break
                    if msg[0] == ipc.MSG_VERDICTS:
                        verdicts.update(ipc.unpack_verdicts(msg))
                    else:
                        stats.extend(e for e in ipc.unpack_events(msg) if e["type"] == "stats")
            return len(verdicts) == len(packets) and len(stats) >= 2

        wait_for("all verdicts and a stats report from each worker", drain, 10)
        assert set(verdicts.values()) == {int(Verdict.ACCEPT)}
        pids = [h.pid for h in pool.handles]
    finally:
        pool.stop()
    for pid in pids:  # reaped: no zombies left behind
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


@pytest.fixture
def killed() -> Iterator[WorkerPool]:
    """A pool of one worker, killed (SIGKILL), its end of the socket seen closed."""
    cfg = SpmConfig(name="t", interface="eth0", tags=(1,))
    pool = WorkerPool(1, lambda i: Worker(cfg, index=i))
    try:
        old = pool.handles[0]
        os.kill(old.pid, signal.SIGKILL)
        wait_for("the worker's socket to close", lambda: _closed(old.sock), 5)
        yield pool
    finally:
        pool.stop()


def test_a_killed_worker_is_replaced(killed: WorkerPool) -> None:
    pool = killed
    old = pool.handles[0]
    new = pool.restart(0)
    assert new.pid != old.pid
    raw = udp("10.0.0.1", "10.0.0.2", 1, 2, b"x")
    pool.queue(0, 42, flow_id(raw)[0], raw)
    pool.flush()
    got: list[tuple[int, int]] = []

    def answered() -> bool:
        try:
            msg = new.receiver.recv()
        except BlockingIOError:
            return False
        if msg[0] == ipc.MSG_VERDICTS:
            got.extend(ipc.unpack_verdicts(msg))
        return bool(got)

    wait_for("a verdict from the new worker", answered, 5)
    assert got == [(42, int(Verdict.ACCEPT))]


def _closed(sock: object) -> bool:
    try:
        return sock.recv(1) == b""  # type: ignore[attr-defined,no-any-return]
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_time_is_not_wasted_when_idle() -> None:
    start = time.monotonic()
    pool = WorkerPool(1, lambda i: Worker(SpmConfig(name="t", interface="e", tags=(1,)), index=i))
    pool.stop()
    assert time.monotonic() - start < 5


def test_a_batch_for_a_worker_that_just_died_does_not_stop_the_dispatcher(
    killed: WorkerPool,
) -> None:
    """The dispatcher may give packets to a worker that has died before it reads the worker's
    end of the socket close (both in one turn of its loop, under load). Sending that batch
    fails (the peer is gone): the pool drops it, for the packets are still held and the
    restart answers them, instead of raising out of the dispatcher's loop."""
    pool = killed
    old = pool.handles[0]
    raw = udp("10.0.0.1", "10.0.0.2", 1, 2, b"x")
    pool.queue(0, 7, flow_id(raw)[0], raw)
    assert pool.flush() is True  # sent nowhere, and nothing left to send
    assert old.out == [] and old.out_bytes == 0
    assert pool.dead_sends == 1
