"""SPM inspection benchmarks: one worker's throughput, one against two workers, dispatch schemes,
the memory of forked workers, and a worker's time per packet.

1. Throughput of one worker (`Worker.process` in a loop, in process, no NFQUEUE), Mbps of IP
   bytes and packets per second, with no rules, the community rules enabled in the file, and all
   community rules the engine supports (the commented-out ones too), on HTTP-heavy traffic and on
   mixed traffic (HTTP, TLS, SSH, other TCP, DNS, ICMP); with the AV (a real clamd) when clamd is
   installed.
2. Scaling from 1 to 2 worker processes: this process dispatches (Community ID, hash5) to forked
   workers over the same socket pairs as the daemon, as fast as they answer. Reported as measured
   and normalized by the CPU time the workers got (the machine may be shared).
3. Dispatch schemes on a skewed flow mix (a few hosts, Pareto flow sizes, some elephants): JSQ
   versus 2-tuple and 5-tuple hashing, with 2 real workers (drain time; the busiest worker's CPU
   time, i.e. the drain time with a core per worker) and simulated for 4 and 8 workers (queueing
   delay and drops at 80 % load; each packet's service time is what one worker measured for it).
4. Memory of N workers forked after the rules are loaded (they share them copy-on-write) versus
   N separate processes that each load the rules: total PSS, after the workers have inspected
   traffic.
5. A worker's time per packet for a flood's new flows (one UDP datagram each) against the
   segments of one established bulk TCP flow.

    .venv/bin/python -m bench.bench_spm [--quick]

Takes about a minute (`--quick`: 15 s) on 2 cores.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import logging
import math
import os
import random
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from opengate.netutil import stop_process
from opengate.target import repo_root, shared_data_dir
from spm import ipc
from spm.av.inspector import AvInspector
from spm.config import AvConfig, SpmConfig
from spm.daemon import cpu_ticks
from spm.dispatch import FlowDispatcher
from spm.ips.engine import BuiltinEngine, RuleSet
from spm.ips.loader import load_ruleset
from spm.packet import flow_id
from spm.pool import WorkerPool
from spm.worker import Worker

RULES = shared_data_dir() / "snort" / "snort3-community.rules"


# --- traffic ------------------------------------------------------------------------------------


def _csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return int(~s & 0xFFFF)


def ipv4(src: bytes, dst: bytes, proto: int, l4: bytes, ident: int = 0) -> bytes:
    hdr = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), ident & 0xFFFF, 0, 64, proto, 0, src, dst
    )
    return hdr[:10] + struct.pack("!H", _csum(hdr)) + hdr[12:] + l4


@dataclass
class Tcp:
    """One TCP connection's packets, with consistent sequence numbers (checksums left 0: the
    SPM does not verify them)."""

    client: bytes
    server: bytes
    cport: int
    sport: int
    cseq: int = 1000
    sseq: int = 50000

    def seg(self, to_server: bool, flags: int, data: bytes = b"") -> bytes:
        if to_server:
            tcp = struct.pack(
                "!HHIIBBHHH", self.cport, self.sport, self.cseq, self.sseq, 0x50, flags, 65535, 0, 0
            )
            self.cseq += len(data) + (1 if flags & 0x03 else 0)
            return ipv4(self.client, self.server, 6, tcp + data)
        tcp = struct.pack(
            "!HHIIBBHHH", self.sport, self.cport, self.sseq, self.cseq, 0x50, flags, 65535, 0, 0
        )
        self.sseq += len(data) + (1 if flags & 0x03 else 0)
        return ipv4(self.server, self.client, 6, tcp + data)

    def open(self) -> list[bytes]:
        return [self.seg(True, 0x02), self.seg(False, 0x12), self.seg(True, 0x10)]

    def send(self, to_server: bool, data: bytes, mss: int = 1448) -> list[bytes]:
        return [self.seg(to_server, 0x18, data[i : i + mss]) for i in range(0, len(data), mss)]

    def close(self) -> list[bytes]:
        return [self.seg(True, 0x11), self.seg(False, 0x11), self.seg(True, 0x10)]


_WORDS = (
    b"index news login api v2 static img js css search product cart user account admin "
    b"download update data feed blog page about help contact media video docs"
).split()
_AGENTS = (
    b"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/120.0",
    b"Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0",
    b"curl/8.5.0",
    b"python-requests/2.31.0",
)


def _text(rng: random.Random, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        out += rng.choice(_WORDS) + b" "
        if rng.random() < 0.1:
            out += b"<p>\n"
    return bytes(out[:n])


def _addr(rng: random.Random, net: int) -> bytes:
    return bytes((10, net, rng.randrange(256), rng.randrange(1, 255)))


def http_flow(
    rng: random.Random, client: bytes, server: bytes, cport: int, body_range: tuple[int, int]
) -> list[bytes]:
    t = Tcp(client, server, cport, rng.choice((80, 80, 80, 8080)))
    path = b"/" + b"/".join(rng.choice(_WORDS) for _ in range(rng.randrange(1, 4)))
    query = b"?id=%d&q=%s" % (rng.randrange(10**6), rng.choice(_WORDS))
    post = rng.random() < 0.1
    req_body = _text(rng, rng.randrange(200, 4000)) if post else b""
    req = (
        b"%s %s%s HTTP/1.1\r\nHost: www.%s.example\r\nUser-Agent: %s\r\nAccept: */*\r\n"
        b"Accept-Encoding: identity\r\nCookie: session=%x\r\n"
        % (
            b"POST" if post else b"GET",
            path,
            query,
            rng.choice(_WORDS),
            rng.choice(_AGENTS),
            rng.getrandbits(64),
        )
    )
    if post:
        req += b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n" % len(
            req_body
        )
    req += b"\r\n" + req_body
    lo, hi = body_range
    size = int(math.exp(rng.uniform(math.log(lo), math.log(hi))))
    body = _text(rng, size)
    if rng.random() < 0.3:
        chunks = b"".join(
            b"%x\r\n%s\r\n" % (len(body[i : i + 8192]), body[i : i + 8192])
            for i in range(0, len(body), 8192)
        )
        resp = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n"
            b"Server: nginx\r\n\r\n" + chunks + b"0\r\n\r\n"
        )
    else:
        resp = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n"
            b"Server: nginx\r\n\r\n" % len(body) + body
        )
    return t.open() + t.send(True, req) + t.send(False, resp) + t.close()


def binary_flow(
    rng: random.Random, client: bytes, server: bytes, cport: int, kind: str, size: int
) -> list[bytes]:
    sport = {"tls": 443, "ssh": 22, "tcp": rng.randrange(1024, 60000)}[kind]
    t = Tcp(client, server, cport, sport)
    if kind == "tls":
        hello = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + rng.randbytes(500)
        data = b"\x17\x03\x03" + struct.pack("!H", 16384) + rng.randbytes(size)
        return t.open() + t.send(True, hello) + t.send(False, data) + t.close()
    if kind == "ssh":
        return (
            t.open()
            + t.send(False, b"SSH-2.0-OpenSSH_9.6\r\n")
            + t.send(True, b"SSH-2.0-OpenSSH_9.2\r\n")
            + t.send(True, rng.randbytes(size // 4))
            + t.send(False, rng.randbytes(size))
            + t.close()
        )
    return (
        t.open()
        + t.send(True, rng.randbytes(size // 3))
        + t.send(False, rng.randbytes(size))
        + t.close()
    )


def dns_flow(rng: random.Random, client: bytes, server: bytes, cport: int) -> list[bytes]:
    name = b"".join(bytes([len(w)]) + w for w in (rng.choice(_WORDS), b"example", b"com")) + b"\0"
    q = struct.pack("!HHHHHH", rng.getrandbits(16), 0x0100, 1, 0, 0, 0) + name + b"\0\x01\0\x01"
    a = (
        q[:2]
        + b"\x81\x80\0\x01\0\x01\0\0\0\0"
        + q[12:]
        + b"\xc0\x0c\0\x01\0\x01\0\0\x0e\x10\0\x04"
        + rng.randbytes(4)
    )
    udp_q = struct.pack("!HHHH", cport, 53, 8 + len(q), 0) + q
    udp_a = struct.pack("!HHHH", 53, cport, 8 + len(a), 0) + a
    return [ipv4(client, server, 17, udp_q), ipv4(server, client, 17, udp_a)]


def icmp_flow(rng: random.Random, client: bytes, server: bytes) -> list[bytes]:
    ident = rng.getrandbits(16)
    out = []
    for seq in range(4):
        payload = rng.randbytes(56)
        out.append(ipv4(client, server, 1, struct.pack("!BBHHH", 8, 0, 0, ident, seq) + payload))
        out.append(ipv4(server, client, 1, struct.pack("!BBHHH", 0, 0, 0, ident, seq) + payload))
    return out


def interleave(rng: random.Random, flows: list[list[bytes]], concurrent: int = 64) -> list[bytes]:
    """Merge flows into one trace, `concurrent` of them active at a time, each flow in order."""
    pending = list(flows)
    rng.shuffle(pending)
    active: list[Iterator[bytes]] = []
    out: list[bytes] = []
    while pending or active:
        while pending and len(active) < concurrent:
            active.append(iter(pending.pop()))
        i = rng.randrange(len(active))
        pkt = next(active[i], None)
        if pkt is None:
            active.pop(i)
        else:
            out.append(pkt)
    return out


def http_heavy(rng: random.Random, flows: int) -> list[bytes]:
    return interleave(
        rng,
        [
            http_flow(rng, _addr(rng, 1), _addr(rng, 2), 20000 + i, (500, 200_000))
            for i in range(flows)
        ],
    )


def mixed(rng: random.Random, flows: int) -> list[bytes]:
    out: list[list[bytes]] = []
    for i in range(flows):
        c, s, port = _addr(rng, 1), _addr(rng, 2), 20000 + i
        r = rng.random()
        if r < 0.4:
            out.append(http_flow(rng, c, s, port, (300, 50_000)))
        elif r < 0.6:
            out.append(binary_flow(rng, c, s, port, "tls", rng.randrange(2000, 100_000)))
        elif r < 0.7:
            out.append(binary_flow(rng, c, s, port, "ssh", rng.randrange(1000, 20_000)))
        elif r < 0.8:
            out.append(binary_flow(rng, c, s, port, "tcp", rng.randrange(1000, 50_000)))
        elif r < 0.95:
            out.append(dns_flow(rng, c, s, port))
        else:
            out.append(icmp_flow(rng, c, s))
    return interleave(rng, out)


def skewed(rng: random.Random, flows: int) -> list[bytes]:
    """Few hosts (so 2-tuple hashing has few keys), Zipf-like flow sizes with some elephants."""
    clients = [_addr(rng, 1) for _ in range(6)]
    servers = [_addr(rng, 2) for _ in range(3)]
    out: list[list[bytes]] = []
    for i in range(flows):
        size = int(3000 * (1 / (1 - rng.random())) ** 1.2)  # Pareto tail
        size = min(size, 2_000_000)
        c, s = rng.choice(clients), rng.choice(servers)
        if rng.random() < 0.5:
            out.append(http_flow(rng, c, s, 20000 + i, (size // 2 + 1, size + 2)))
        else:
            out.append(binary_flow(rng, c, s, 20000 + i, "tcp", size))
    return interleave(rng, out, concurrent=32)


# --- measurements -------------------------------------------------------------------------------


def cfg(workers: int = 1, av: AvConfig | None = None, scheme: str = "hash5") -> SpmConfig:
    return SpmConfig(
        name="bench",
        interface="lo",
        tags=(1,),
        workers=workers,
        dispatch=scheme,
        av=av or AvConfig(),
    )


def run_worker(worker: Worker, packets: Sequence[bytes]) -> float:
    gc.collect()
    start = time.perf_counter()
    process = worker.process
    for raw in packets:
        process(raw)
    return time.perf_counter() - start


def rate(packets: Sequence[bytes], seconds: float) -> tuple[float, float]:
    nbytes = sum(len(p) for p in packets)
    return nbytes * 8 / seconds / 1e6, len(packets) / seconds


def start_clamd(base: Path) -> tuple[subprocess.Popen[bytes], str] | None:
    binary = shutil.which("clamd") or (
        "/usr/sbin/clamd" if Path("/usr/sbin/clamd").exists() else None
    )
    if binary is None:
        return None
    db = base / "db"
    shutil.copytree(repo_root() / "spm" / "signatures", db)
    sock = base / "clamd.sock"
    conf = base / "clamd.conf"
    conf.write_text(
        f"LocalSocket {sock}\nDatabaseDirectory {db}\nForeground yes\n"
        f"LogFile {base}/clamd.log\nBytecode no\nMaxThreads 4\n"
    )
    proc = subprocess.Popen(
        [binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 30
    while not sock.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_process(proc)
            return None
        time.sleep(0.05)
    return proc, str(sock)


def table(
    title: str, header: Sequence[str], rows: Sequence[Sequence[object]], note: str = ""
) -> None:
    """A Markdown table under its title, and a note on how it was measured after it."""
    print(f"### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(str(x) for x in row) + " |")
    print(flush=True)
    if note:
        print(f"{note}\n", flush=True)


def bench_throughput(
    traffic: dict[str, list[bytes]], rulesets: dict[str, RuleSet | None], clamd: str | None
) -> None:
    rows = []
    sizes = []
    for tname, packets in traffic.items():
        nbytes = sum(map(len, packets))
        bare = 0.0  # packets/s with no rules, the first rule set
        for rname, rs in rulesets.items():
            engine = BuiltinEngine(rs) if rs is not None else None
            secs = run_worker(Worker(cfg(), engine), packets)
            mbps, pps = rate(packets, secs)
            bare = bare or pps
            rows.append(
                (
                    tname,
                    rname,
                    "off",
                    f"{mbps:.1f}",
                    f"{pps:,.0f}",
                    f"{secs * 1e6 / len(packets):.1f}",
                    f"{pps / bare:.2f}x",
                )
            )
        if clamd is not None and "HTTP" in tname:
            rs = list(rulesets.values())[-1]
            avc = AvConfig(enabled=True, clamd_socket=clamd)
            w = Worker(cfg(av=avc), BuiltinEngine(rs) if rs else None, AvInspector(avc))
            secs = run_worker(w, packets)
            mbps, pps = rate(packets, secs)
            rows.append(
                (
                    tname,
                    list(rulesets)[-1],
                    f"clamd ({w.av.counters.scans if w.av else 0} scans)",
                    f"{mbps:.1f}",
                    f"{pps:,.0f}",
                    f"{secs * 1e6 / len(packets):.1f}",
                    f"{pps / bare:.2f}x" if bare else "-",
                )
            )
        sizes.append(f"{tname}: {len(packets)} packets, {nbytes / 1e6:.1f} MB")
    table(
        "One worker, in process (Worker.process in a loop)",
        ("traffic", "IPS rules", "AV", "Mbps", "packets/s", "µs/packet", "vs no rules"),
        rows,
        f"One worker's traffic: {'; '.join(sizes)}.",
    )


@dataclass
class PoolRun:
    seconds: float
    per_worker: list[int]
    max_queue: int
    worker_cpu: float  # CPU seconds used by the workers together
    dispatcher_cpu: float
    busiest_cpu: float  # CPU seconds of the busiest worker: the drain time with a core each


def run_pool(
    packets: Sequence[bytes], workers: int, scheme: str, rs: RuleSet | None, window: int = 256
) -> PoolRun:
    """Dispatch `packets` to forked workers and wait for every verdict (`window` packets may be
    outstanding per worker, like the daemon's queue)."""
    c = cfg(workers, scheme=scheme)
    engine = BuiltinEngine(rs) if rs is not None else None
    pool = WorkerPool(workers, lambda i: Worker(c, engine, None, i))
    disp = FlowDispatcher(workers, scheme)
    ids = [flow_id(p) for p in packets]
    per_worker = [0] * workers
    answered = 0
    max_queue = 0
    try:
        start = time.perf_counter()
        cpu0 = time.process_time()
        ticks0 = [cpu_ticks(h.pid) for h in pool.handles]
        i = 0
        n = len(packets)
        while answered < n:
            for h in pool.handles:  # the verdicts first: they make room for this turn's packets
                while True:
                    try:
                        msg = h.receiver.recv()
                    except BlockingIOError:
                        break
                    if msg and msg[0] == ipc.MSG_VERDICTS:
                        got = sum(1 for _ in ipc.unpack_verdicts(msg))
                        disp.queue[h.index] -= got
                        answered += got
                    elif msg and msg[0] == ipc.MSG_EVENTS:
                        for ev in ipc.unpack_events(msg):
                            if ev.get("type") == "flow_end":
                                disp.forget(str(ev["community_id"]))
            sent_any = False
            while i < n:
                cid, src, dst = ids[i]
                w = disp.pick(cid, src, dst, 0.0)
                if disp.queue[w] >= window:
                    break  # head-of-line: the daemon stops reading the queue the same way
                disp.queue[w] += 1
                per_worker[w] += 1
                pool.queue(w, i, cid, packets[i])
                i += 1
                sent_any = True
                if i % 64 == 0:
                    break
            if sent_any:
                pool.flush()
            max_queue = max(max_queue, *disp.queue)
            if not sent_any and answered < n:
                select.select([h.sock for h in pool.handles], [], [], 0.01)
        seconds = time.perf_counter() - start
        ticks = [cpu_ticks(h.pid) - t0 for h, t0 in zip(pool.handles, ticks0, strict=True)]
        clk = os.sysconf("SC_CLK_TCK")
        return PoolRun(
            seconds,
            per_worker,
            max_queue,
            sum(ticks) / clk,
            time.process_time() - cpu0,
            max(ticks) / clk,
        )
    finally:
        pool.stop()


def bench_scaling(packets: list[bytes], rs: RuleSet | None, rname: str) -> None:
    """Measured throughput, and the same normalized by the CPU time the workers got (on a busy
    shared machine the wall-clock speed-up says more about the neighbours than about the SPM)."""
    rows = []
    base = base_cpu = 0.0
    for n in (1, 2):
        runs = sorted(
            (run_pool(packets, n, "hash5", rs) for _ in range(3)), key=lambda r: r.seconds
        )
        run = runs[1]  # median of three
        mbps, pps = rate(packets, run.seconds)
        per_cpu = len(packets) / max(run.worker_cpu, 1e-6)  # packets per worker-CPU-second
        base = base or pps
        base_cpu = base_cpu or per_cpu
        rows.append(
            (
                n,
                f"{mbps:.1f}",
                f"{pps:,.0f}",
                f"{pps / base:.2f}x",
                f"{run.worker_cpu:.2f} / {run.dispatcher_cpu:.2f} / {run.seconds:.2f}",
                f"{per_cpu:,.0f}",
                f"{n * per_cpu / base_cpu:.2f}x",
            )
        )
    load = os.getloadavg()[0]
    table(
        "One worker process against two, mixed traffic",
        (
            "workers",
            "Mbps",
            "packets/s",
            "speed-up (wall)",
            "CPU s: workers / dispatcher / wall",
            "packets per worker-CPU-s",
            "speed-up with a free core per worker",
        ),
        rows,
        f"Scaling: {rname} rules, hash5 dispatch, the median of 3 runs; {os.cpu_count()} cores "
        f"shared with the dispatcher and other jobs (load average {load:.1f}).",
    )


def service_times(packets: Sequence[bytes], rs: RuleSet | None) -> list[float]:
    """Each packet's processing time in one worker: the least of three passes, so that the
    preemptions of a shared machine do not pass for inspection work."""
    best: list[float] = []
    clock = time.perf_counter
    for _ in range(3):
        w = Worker(cfg(), BuiltinEngine(rs) if rs is not None else None)
        out = []
        for raw in packets:
            t = clock()
            w.process(raw)
            out.append(clock() - t)
        best = out if not best else [min(a, b) for a, b in zip(best, out, strict=True)]
    return best


def simulate(
    packets: Sequence[bytes],
    times: Sequence[float],
    workers: int,
    scheme: str,
    load: float,
    capacity: int,
    seed: int = 7,
) -> tuple[float, float, float, float]:
    """Discrete-event simulation of the dispatcher and `workers` FIFO workers. Poisson arrivals
    at `load` x the workers' total capacity. Returns (mean delay µs, p99 delay µs, drop %,
    busiest worker's share of the work)."""
    rng = random.Random(seed)
    mean = sum(times) / len(times)
    lam = load * workers / mean
    disp = FlowDispatcher(workers, scheme)
    free_at = [0.0] * workers
    inflight: list[list[float]] = [[] for _ in range(workers)]  # completion times (heaps)
    delays: list[float] = []
    work = [0.0] * workers
    drops = 0
    now = 0.0
    for raw, svc in zip(packets, times, strict=True):
        now += rng.expovariate(lam)
        for w in range(workers):
            q = inflight[w]
            while q and q[0] <= now:
                heapq.heappop(q)
            disp.queue[w] = len(q)
        cid, src, dst = flow_id(raw)
        w = disp.pick(cid, src, dst, now)
        if len(inflight[w]) >= capacity:
            drops += 1
            continue
        start = max(now, free_at[w])
        free_at[w] = start + svc
        heapq.heappush(inflight[w], free_at[w])
        delays.append(free_at[w] - now)
        work[w] += svc
    delays.sort()
    p99 = delays[int(len(delays) * 0.99)] if delays else 0.0
    return (
        sum(delays) / len(delays) * 1e6,
        p99 * 1e6,
        100 * drops / len(packets),
        max(work) / sum(work),
    )


def bench_dispatch(packets: list[bytes], flows: int, rs: RuleSet | None, rname: str) -> None:
    rows = []
    measured = {}
    for scheme in ("hash2", "hash5", "jsq"):
        runs = sorted((run_pool(packets, 2, scheme, rs) for _ in range(3)), key=lambda r: r.seconds)
        measured[scheme] = runs[1]  # the median of three: the machine is shared
    cored = {k: len(packets) / max(run.busiest_cpu, 1e-6) for k, run in measured.items()}
    for scheme, run in measured.items():
        _mbps, pps = rate(packets, run.seconds)
        share = max(run.per_worker) / sum(run.per_worker)
        rows.append(
            (
                scheme,
                f"{run.seconds:.2f}",
                f"{pps:,.0f}",
                f"{run.busiest_cpu:.2f} / {run.worker_cpu:.2f}",
                f"{cored[scheme]:,.0f}",
                f"{cored[scheme] / cored['hash5']:.2f}x",
                f"{100 * share:.0f} %",
            )
        )
    table(
        "Dispatch schemes on a skewed flow mix, 2 worker processes",
        (
            "scheme",
            "seconds to drain",
            "packets/s",
            "CPU s: busiest worker / both",
            "packets/s with a core per worker",
            "the same vs hash5",
            "busiest worker's packets",
        ),
        rows,
        f"Dispatch: {len(packets):,} packets, the median of 3 runs, {rname} rules.",
    )
    traces = [(packets, service_times(packets, rs))]
    for seed in (11, 12):
        more = skewed(random.Random(seed), flows)
        traces.append((more, service_times(more, rs)))
    rows2: list[tuple[object, ...]] = []
    for workers in (4, 8):
        simulated = {}
        for scheme in ("hash2", "hash5", "jsq"):
            results = [
                simulate(pk, times, workers, scheme, 0.8, 1024, seed)
                for pk, times in traces
                for seed in (1, 2, 3)
            ]
            simulated[scheme] = [sum(r[k] for r in results) / len(results) for k in range(4)]
        for scheme, (mean, p99, drop, share) in simulated.items():
            base = simulated["hash5"][0]
            rows2.append(
                (
                    workers,
                    scheme,
                    f"{mean:,.0f}",
                    f"{mean / base:.2f}x" if base else "-",
                    f"{p99:,.0f}",
                    f"{drop:.2f} %",
                    f"{100 * share:.0f} % (ideal {100 / workers:.0f} %)",
                )
            )
    table(
        "Dispatch schemes on the skewed mix, simulated for 4 and 8 workers",
        (
            "workers",
            "scheme",
            "mean delay µs",
            "mean delay vs hash5",
            "p99 delay µs",
            "dropped",
            "busiest worker's work",
        ),
        rows2,
        "Simulated dispatch: 80 % load, a 1,024-packet queue per worker, each packet's service "
        "time as one worker measured it (the least of 3 passes); the mean of 3 traces x 3 "
        "arrival seeds.",
    )


_MEMORY_CHILD = r"""
import gc, json, os, sys, time
sys.path.insert(0, {repo!r})
from spm.ips.loader import load_ruleset
from spm.ips.engine import BuiltinEngine
from spm.worker import Worker
from spm.pool import WorkerPool
from spm.config import SpmConfig
from bench.bench_spm import mixed, pss
import logging, random
logging.basicConfig(level=logging.ERROR)
n, mode = int(sys.argv[1]), sys.argv[2]
rs = load_ruleset([{rules!r}], {{}}, include_disabled=True)
engine = BuiltinEngine(rs)
packets = mixed(random.Random(3), 60)
cfg = SpmConfig(name="m", interface="lo", tags=(1,), workers=n)
if mode == "single":
    w = Worker(cfg, engine)
    for p in packets:
        w.process(p)
    print(json.dumps({{"pss": pss(os.getpid()), "pids": [os.getpid()]}}))
    sys.stdout.flush()
    sys.stdin.readline()
    sys.exit(0)
from spm import ipc
from spm.packet import flow_id
pool = WorkerPool(n, lambda i: Worker(cfg, engine, None, i))
for h in pool.handles:
    for k, p in enumerate(packets):
        pool.queue(h.index, k, flow_id(p)[0], p)
    pool.flush()
import select
left = {{h.index: len(packets) for h in pool.handles}}
while any(left.values()):
    select.select([h.sock for h in pool.handles], [], [], 0.5)
    for h in pool.handles:
        try:
            msg = h.receiver.recv()
        except BlockingIOError:
            continue
        if msg[0] == ipc.MSG_VERDICTS:
            left[h.index] -= sum(1 for _ in ipc.unpack_verdicts(msg))
pids = [os.getpid()] + [h.pid for h in pool.handles]
print(json.dumps({{"pss": sum(pss(p) for p in pids), "pids": pids}}))
sys.stdout.flush()
sys.stdin.readline()
pool.stop()
"""


def bench_flow_costs(rs: RuleSet | None, rname: str, n: int) -> None:
    """A worker's time per packet for what a flood of new flows brings (one 18-byte UDP
    datagram per flow, as bench_flood's flooder sends) against the segments of one established
    bulk TCP flow (1,448 bytes each, as iperf3's): the least of three passes, each on a fresh
    worker."""
    rng = random.Random(7)
    h2, out1, h1 = bytes([10, 0, 1, 11]), bytes([198, 51, 100, 20]), bytes([10, 0, 1, 10])
    datagrams = [
        ipv4(h2, out1, 17, struct.pack("!HHHH", 1024 + i, 20000, 18, 0) + b"x" * 10)
        for i in range(n)
    ]
    bulk = Tcp(h1, out1, 40000, 5201)
    segments = bulk.open() + bulk.send(True, rng.randbytes(1448 * n))
    per_packet = []
    for what, packets in (
        ("new UDP flows, one 18-byte datagram each", datagrams),
        ("one TCP flow's 1,448-byte segments", segments),
    ):
        best = min(
            run_worker(Worker(cfg(), BuiltinEngine(rs) if rs else None, None), packets)
            for _ in range(3)
        )
        per_packet.append((what, len(packets), best / len(packets)))
    segment = per_packet[-1][2]
    rows = [(w, n, f"{t * 1e6:.1f}", f"{t / segment:.2f}x") for w, n, t in per_packet]
    table(
        "A worker's time per packet: a flood's new flows against a bulk TCP flow",
        ("packets", "n", "us per packet", "vs a TCP segment"),
        rows,
        f"Time per packet: {rname} rules, the least of 3 passes, in process.",
    )


def pss(pid: int) -> int:
    """Proportional set size in bytes (shared pages divided among their users)."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _measure_child(n: int, mode: str) -> int:
    code = _MEMORY_CHILD.format(repo=str(repo_root()), rules=str(RULES))
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(n), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=repo_root(),
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        line = proc.stdout.readline()
        result = json.loads(line)
        total = int(result["pss"]) if mode != "single" else rss(int(result["pids"][0]))
        proc.stdin.write(b"\n")
        proc.stdin.flush()
        proc.wait(60)
        return total
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def bench_memory(counts: Sequence[int]) -> None:
    one = _measure_child(1, "single")
    rows = []
    for n in counts:
        forked = _measure_child(n, "fork")
        separate = n * one
        rows.append(
            (n, f"{forked / 2**20:.0f}", f"{separate / 2**20:.0f}", f"{separate / forked:.1f}x")
        )
    table(
        "Memory of N workers with the rules loaded: forked against separate processes",
        (
            "workers",
            "forked after loading: total PSS MiB (dispatcher + workers)",
            "separate processes: N x RSS MiB",
            "saving",
        ),
        rows,
        f"Memory: all {RULES.name} rules loaded; one process that loaded them has an RSS of "
        f"{one / 2**20:.0f} MiB.",
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller traces")
    args = parser.parse_args(argv)
    if not RULES.exists():
        print(f"skipped: {RULES} is missing (the shared reference data)")
        return 0
    logging.basicConfig(level=logging.ERROR)
    scale = 1 if args.quick else 5
    rng = random.Random(1)
    enabled = load_ruleset([str(RULES)], {})
    everything = load_ruleset([str(RULES)], {}, include_disabled=True)
    rulesets: dict[str, RuleSet | None] = {
        "none": None,
        f"community, enabled ({enabled.report.loaded})": enabled,
        f"community, all supported ({everything.report.loaded})": everything,
    }
    traffic = {"HTTP-heavy": http_heavy(rng, 60 * scale), "mixed": mixed(rng, 150 * scale)}
    with tempfile.TemporaryDirectory() as tmp:
        clamd = start_clamd(Path(tmp))
        try:
            bench_throughput(traffic, rulesets, clamd[1] if clamd else None)
        finally:
            if clamd is not None:
                stop_process(clamd[0])
    all_name = list(rulesets)[-1]
    bench_flow_costs(everything, all_name, 1000 * scale)
    bench_scaling(traffic["mixed"], everything, all_name)
    bench_dispatch(skewed(rng, 100 * scale), 100 * scale, everything, all_name)
    bench_memory((1, 2, 4) if args.quick else (1, 2, 4, 7))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
