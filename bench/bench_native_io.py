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

    .venv/bin/python -m bench.bench_native_io [--rates 250000,500000,1000000] [--seconds 2]

Needs root and a C compiler.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

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


def build(workdir: Path) -> ctypes.CDLL:
    (workdir / "callback.c").write_text(CALLBACK)
    so = workdir / "og_io_bench.so"
    cc = ["cc", "-O2", "-Wall", "-pthread"]
    sources = [str(NATIVE / "og_io.c"), str(workdir / "callback.c")]
    subprocess.run([*cc, "-shared", "-fPIC", f"-I{NATIVE}", *sources, "-o", str(so)], check=True)
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


def table(rows: list[Row]) -> list[str]:
    lines = [
        "| Offered rate (frames/s) | Offered | Achieved offer (frames/s) | Taken in | Sent on "
        "| Ring drops | Forwarding rate (frames/s) | Polling thread CPU per frame (ns) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.rate} | {r.offered:,} | {r.offered_rate:,.0f} | {r.received:,} "
            f"| {r.forwarded:,} | {r.ring_drops:,} | {r.forward_rate:,.0f} | {r.cpu_ns:,.0f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rates", default="250000,500000,1000000")
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_native_io: needs root (veth pairs, raw sockets)", file=sys.stderr)
        return 2
    for tool in ("cc", "ip", "sysctl"):
        if shutil.which(tool) is None:
            print(f"bench_native_io: `{tool}` is not installed", file=sys.stderr)
            return 2
    rates = [int(r) for r in args.rates.split(",") if r] + [0]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp, veth_pairs(f"ognb{os.getpid() % 100000}") as v:
        lib = build(Path(tmp))
        nums = (ctypes.c_uint32 * 2)(1, 2)
        names = (ctypes.c_char_p * 2)(v[0].encode(), v[2].encode())
        err = ctypes.create_string_buffer(256)
        fn = ctypes.cast(lib.bench_forward, ctypes.c_void_p)
        io = lib.og_io_new(2, nums, names, fn, None, err, len(err))
        if not io:
            print(f"bench_native_io: {err.value.decode()}", file=sys.stderr)
            return 1
        try:
            if lib.og_io_start(io) != 0:
                print("bench_native_io: cannot start the polling thread", file=sys.stderr)
                return 1
            rows = [measure(lib, io, v[1], rate, args.seconds) for rate in rates]
        finally:
            lib.og_io_free(io)
    print(f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Linux {platform.release()}  ")
    print(f"Command: `{' '.join(['python -m bench.bench_native_io', *(argv or sys.argv[1:])])}`")
    print()
    print("\n".join(table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
