"""Frames per second through the native packet I/O loop (softswitch/native/og_io.c), as Markdown.

og_io runs on two veth pairs with a trivial C callback (port 1 -> port 2, no parsing): the rate
measures the I/O alone (TPACKET_V3 receive ring, sendmmsg batches, one polling thread). The C
sender of bench.csender (sendmmsg, batches of 32) offers 64-byte frames on the far end of port 1
at each rate, paced, for `--seconds`, then as fast as it can; nobody reads the far end of port 2
(its kernel drops the frames). Per rate: what was offered, what og_io took in and sent on, what
the receive ring dropped, the forwarding rate (frames out over the time from the first frame
offered to the last one out), and the polling thread's CPU time per frame (from /proc; the
kernel's send path, and the receiving peer's up to where its stack drops the frame, run on that
thread, so 1 s over this is about the ceiling of one polling thread). The sender shares the
machine with the switch, and the kernel's receive path for port 1 runs on the sender's CPU.
Then the latency at a low rate: `--pings` frames, one at a time, each sent on the far end of
port 1 and timed until it is read on the far end of port 2 (raw sockets in this process, so the
figure includes two kernel crossings of the bench's own).

`--baseline REV` measures og_io.c as it was at git revision REV the same way in the same run,
first, for a side-by-side figure (e.g. 58065c1, the last TPACKET_V3 receive ring).

    .venv/bin/python -m bench.bench_native_io [--rates 250000,500000,1000000] [--seconds 2]
        [--pings 2000] [--baseline REV]

Needs root and a C compiler.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.csender import c_send

NATIVE = Path(__file__).resolve().parents[1] / "softswitch" / "native"

CALLBACK = r"""
#include "og_io.h"
__attribute__((visibility("default")))
uint32_t bench_forward(void *ctx, uint32_t in_port, const uint8_t *f, uint32_t len, og_frame *out,
                       uint32_t max_out) {
    (void)ctx;
    if (!max_out) return 0;
    out[0].port = in_port == 1 ? 2 : 1;
    out[0].len = len;
    out[0].data = f;
    return 1;
}
"""

# 64 distinct 64-byte frames (local experimental EtherType 0x88b5, a counter after it), sent
# round robin by bench.csender.
FRAMES = [
    bytes.fromhex("020000000002020000000001") + b"\x88\xb5" + i.to_bytes(8, "little") + bytes(42)
    for i in range(64)
]


class Stats(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in ("rx_frames", "tx_frames", "tx_errors", "upcalls", "upcall_drops", "drops")
    ]


@dataclass(frozen=True, slots=True)
class Row:
    rate: str
    offered: int
    offered_rate: float
    received: int
    forwarded: int
    ring_drops: int
    forward_rate: float
    cpu_ns: float  # CPU time of the polling thread per frame sent on


def sources(workdir: Path, revision: str | None) -> Path:
    """The folder holding og_io.c and og_io.h: the working tree's, or those of git `revision`."""
    if revision is None:
        return NATIVE
    folder = workdir / f"og_io-{revision}"
    folder.mkdir()
    for name in ("og_io.c", "og_io.h"):
        spec = f"{revision}:softswitch/native/{name}"
        text = subprocess.run(
            ["git", "-C", str(NATIVE), "show", spec], check=True, capture_output=True
        ).stdout
        (folder / name).write_bytes(text)
    return folder


def build(workdir: Path, source: Path) -> ctypes.CDLL:
    (workdir / "callback.c").write_text(CALLBACK)
    so = workdir / f"og_io_bench_{source.name}.so"
    cc = ["cc", "-O2", "-Wall", "-pthread"]
    files = [str(source / "og_io.c"), str(workdir / "callback.c")]
    subprocess.run([*cc, "-shared", "-fPIC", f"-I{source}", *files, "-o", str(so)], check=True)
    lib = ctypes.CDLL(str(so))
    lib.og_io_new.restype = ctypes.c_void_p
    lib.og_io_new.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p]
    lib.og_io_new.argtypes += [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint32]
    lib.og_io_start.argtypes = [ctypes.c_void_p]
    lib.og_io_free.argtypes = [ctypes.c_void_p]
    lib.og_io_free.restype = None
    lib.og_io_get_stats.argtypes = [ctypes.c_void_p, ctypes.POINTER(Stats)]
    lib.og_io_get_stats.restype = None
    return lib


@contextmanager
def veth_pairs(tag: str) -> Iterator[tuple[str, str, str, str]]:
    """Two veth pairs, up, without IPv6: (switch 1, host 1, switch 2, host 2)."""
    names = (f"{tag}a0", f"{tag}a1", f"{tag}b0", f"{tag}b1")
    try:
        for inside, outside in (names[:2], names[2:]):
            cmd = ["ip", "link", "add", inside, "type", "veth", "peer", "name", outside]
            subprocess.run(cmd, check=True)
            for name in (inside, outside):
                sysctl = f"net.ipv6.conf.{name}.disable_ipv6=1"
                subprocess.run(["sysctl", "-qw", sysctl], check=True)
                subprocess.run(["ip", "link", "set", name, "up"], check=True)
        yield names
    finally:
        for name in (names[0], names[2]):
            subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)


def stats(lib: ctypes.CDLL, io: int) -> Stats:
    out = Stats()
    lib.og_io_get_stats(io, ctypes.byref(out))
    return out


def thread_cpu_seconds(name: str) -> float:
    """User plus system CPU time of this process's thread called `name` (0 if none)."""
    for task in Path("/proc/self/task").iterdir():
        if (task / "comm").read_text().strip() == name:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


def measure(lib: ctypes.CDLL, io: int, ifname: str, rate: int, seconds: float) -> Row:
    before, cpu_before = stats(lib, io), thread_cpu_seconds("og-io")
    start = time.monotonic()
    sent, took = c_send(ifname, FRAMES, rate, seconds)
    # Done when every frame is accounted for, or nothing has moved for 0.2 s.
    last, last_change = stats(lib, io), time.monotonic()
    while True:
        now = stats(lib, io)
        seen = now.rx_frames + now.drops - before.rx_frames - before.drops
        if seen >= sent:
            last, last_change = now, time.monotonic()
            break
        if (now.tx_frames, now.drops) != (last.tx_frames, last.drops):
            last, last_change = now, time.monotonic()
        elif time.monotonic() - last_change > 0.2:
            break
        time.sleep(0.001)
    forwarded = last.tx_frames - before.tx_frames
    cpu = thread_cpu_seconds("og-io") - cpu_before
    return Row(
        rate=f"{rate:,}" if rate else "as fast as possible",
        offered=sent,
        offered_rate=sent / took,
        received=last.rx_frames - before.rx_frames,
        forwarded=forwarded,
        ring_drops=last.drops - before.drops,
        forward_rate=forwarded / max(1e-9, last_change - start),
        cpu_ns=cpu * 1e9 / max(1, forwarded),
    )


def latency(host1: str, host2: str, count: int) -> list[float]:
    """Seconds from sending each of `count` frames on `host1` to reading it on `host2`, one
    frame in flight at a time (a frame not back within 1 s is left out)."""
    out: list[float] = []
    with (
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as tx,
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x88B5)) as rx,
    ):
        tx.bind((host1, 0))
        rx.bind((host2, 0x88B5))
        for i in range(count):
            frame = FRAMES[i % len(FRAMES)]
            start = time.perf_counter()
            tx.send(frame)
            deadline = start + 1.0
            while (left := deadline - time.perf_counter()) > 0:
                if not select.select([rx], [], [], left)[0]:
                    break
                if rx.recv(2048) == frame:
                    out.append(time.perf_counter() - start)
                    break
    return out


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def table(results: list[tuple[str, list[Row], list[float]]]) -> list[str]:
    """One table of every build's rows; with a baseline (the first of two builds), each row's
    forwarding rate against the baseline's at the same offered rate."""
    baseline = results[0][1] if len(results) > 1 else None
    lines = [
        "| og_io.c of | Offered rate (frames/s) | Offered | Achieved offer (frames/s) | Taken in "
        "| Sent on | Ring drops | Forwarding rate (frames/s) | Polling thread CPU per frame (ns) "
        "| forwarding vs the baseline |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, rows, _ in results:
        for n, r in enumerate(rows):
            base = baseline[n].forward_rate if baseline else 0.0
            ratio = f"{r.forward_rate / base:.2f}x" if base else "-"
            lines.append(
                f"| {name} | {r.rate} | {r.offered:,} | {r.offered_rate:,.0f} | {r.received:,} "
                f"| {r.forwarded:,} | {r.ring_drops:,} | {r.forward_rate:,.0f} | {r.cpu_ns:,.0f} "
                f"| {ratio} |"
            )
    return lines


def run(
    source: Path, workdir: Path, v: tuple[str, str, str, str], rates: list[int], args: Any
) -> tuple[list[Row], list[float]]:
    """Throughput rows and ping latencies of og_io.c from `source`."""
    lib = build(workdir, source)
    nums = (ctypes.c_uint32 * 2)(1, 2)
    names = (ctypes.c_char_p * 2)(v[0].encode(), v[2].encode())
    err = ctypes.create_string_buffer(256)
    fn = ctypes.cast(lib.bench_forward, ctypes.c_void_p)
    io = lib.og_io_new(2, nums, names, fn, None, err, len(err))
    if not io:
        raise RuntimeError(err.value.decode())
    try:
        if lib.og_io_start(io) != 0:
            raise RuntimeError("cannot start the polling thread")
        rows = [measure(lib, io, v[1], rate, args.seconds) for rate in rates]
        return rows, latency(v[1], v[3], args.pings)
    finally:
        lib.og_io_free(io)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rates", default="250000,500000,1000000")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--pings", type=int, default=2000)
    parser.add_argument("--baseline", metavar="REV", help="also measure og_io.c at git REV")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_native_io: needs root (veth pairs, raw sockets)", file=sys.stderr)
        return 2
    for tool in ("cc", "ip", "sysctl") + (("git",) if args.baseline else ()):
        if shutil.which(tool) is None:
            print(f"bench_native_io: `{tool}` is not installed", file=sys.stderr)
            return 2
    rates = [int(r) for r in args.rates.split(",") if r] + [0]
    builds = ([args.baseline] if args.baseline else []) + [None]
    results: list[tuple[str, list[Row], list[float]]] = []
    with tempfile.TemporaryDirectory() as tmp, veth_pairs(f"ognb{os.getpid() % 100000}") as v:
        for revision in builds:
            try:
                source = sources(Path(tmp), revision)
            except subprocess.CalledProcessError as e:
                print(f"bench_native_io: {revision}: {e.stderr.decode().strip()}", file=sys.stderr)
                return 2
            try:
                rows, pings = run(source, Path(tmp), v, rates, args)
            except RuntimeError as e:
                print(f"bench_native_io: {e}", file=sys.stderr)
                return 1
            results.append((revision or "working tree", rows, pings))
    print("Forwarding through og_io with a trivial callback, 64-byte frames\n")
    print("\n".join(table(results)))
    print("\nLatency at a low rate, one frame in flight\n")
    print("| og_io.c of | frames | lost | latency p50 / p99 / max (us) | p50 vs the baseline |")
    print("|---|---:|---:|---|---:|")
    base = percentile(results[0][2], 50) if len(results) > 1 and results[0][2] else 0.0
    for name, _, pings in results:
        figures = (
            " / ".join(
                f"{x * 1e6:,.0f}"
                for x in (percentile(pings, 50), percentile(pings, 99), max(pings))
            )
            if pings
            else "-"
        )
        ratio = f"{percentile(pings, 50) / base:.2f}x" if base and pings else "-"
        lost = args.pings - len(pings)
        print(f"| {name} | {args.pings:,} | {lost:,} | {figures} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
