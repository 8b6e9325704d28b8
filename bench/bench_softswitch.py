"""Packets per second of the software switch, printed as a Markdown table.

1. In process (the packet-processing engine alone, no sockets): the session hit path (exact
   5-tuple hit, direct counter, register) and the classification miss path (1,000
   ClassBench-style ACL rules: prefixes, protocol, port ranges, in a ternary+range table, plus a
   range segment table and an LPM route), on the committed test program
   tests/softswitch/fixtures/l3.json.
2. End to end through veth pairs (needs root): `python -m softswitch` (and BMv2's
   simple_switch_grpc when installed) forwarding frames between two veths.

Usage: python bench/bench_softswitch.py [--packets N] [--no-e2e]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scapy.layers.inet import IP, TCP  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402
from scapy.packet import raw  # noqa: E402

from softswitch.engine import Dataplane  # noqa: E402
from softswitch.program import load_program  # noqa: E402

FIXTURE = ROOT / "tests" / "softswitch" / "fixtures" / "l3"


def _frame(src: str, dst: str, sport: int, dport: int) -> bytes:
    return raw(
        Ether(dst="00:00:00:00:00:02", src="00:00:00:00:00:01")
        / IP(src=src, dst=dst)
        / TCP(sport=sport, dport=dport)
        / (b"x" * 18)
    )


def _ip(text: str) -> int:
    return int.from_bytes(socket.inet_aton(text), "big")


def classbench_rules(n: int, rng: random.Random) -> list[tuple[int, int, int, int, int, int]]:
    """(src, src_mask, proto, proto_mask, port_lo, port_hi): ClassBench-like prefix/port mixes."""
    rules = []
    for _ in range(n):
        plen = rng.choice((8, 16, 16, 24, 24, 24, 32))
        src = rng.getrandbits(32) & (((1 << plen) - 1) << (32 - plen))
        proto, pmask = rng.choice(((6, 0xFF), (17, 0xFF), (0, 0)))
        lo = rng.choice((0, 1024, rng.randrange(0, 65535)))
        hi = rng.choice((65535, lo, min(65535, lo + rng.randrange(1, 2000))))
        rules.append((src, ((1 << plen) - 1) << (32 - plen), proto, pmask, lo, max(lo, hi)))
    return rules


def build_engine(miss_rules: int) -> tuple[Dataplane, list[bytes], list[bytes]]:
    dp = Dataplane(load_program(json.loads(FIXTURE.with_suffix(".json").read_text())))
    tables = dp.program.tables
    route = tables["MyIngress.routes"]
    nh = route.actions_by_name("MyIngress.set_nexthop")
    route.insert(route.new_entry(((0, 1),), 0, nh, (2, 2)))
    route.insert(route.new_entry(((1 << 31, 1),), 0, nh, (2, 2)))
    session = tables["MyIngress.session"]
    hit = session.actions_by_name("MyIngress.session_hit")
    rng = random.Random(1)
    hits = []
    for i in range(1000):
        src, dst, sp, dpt = f"10.1.{i // 250}.{i % 250}", "10.2.0.1", 1024 + i, 80
        session.insert(session.new_entry((_ip(src), _ip(dst), 6, sp, dpt), 0, hit, (2,)))
        hits.append(_frame(src, dst, sp, dpt))
    acl = tables["MyIngress.acl"]
    drop = acl.actions_by_name("MyIngress.drop")
    for prio, (src, smask, proto, pmask, lo, hi) in enumerate(classbench_rules(miss_rules, rng), 1):
        if lo == 0 and hi == 65535 and smask == 0:
            continue
        key = ((src, smask), (proto, pmask), (lo, hi))
        entry = acl.new_entry(key, prio, drop, ())
        if acl.canonical(key, prio) not in acl.entries:
            acl.insert(entry)
    seg = tables["MyIngress.port_class"]
    noop = seg.actions_by_name("NoAction")
    for i in range(200):
        seg.insert(seg.new_entry(((i * 300, i * 300 + 150),), i + 1, noop, ()))
    # Miss-path packets: no session; most miss the ACL too, then get routed.
    misses = [
        _frame(
            f"192.168.{rng.randrange(256)}.{rng.randrange(256)}",
            "10.3.0.1",
            rng.randrange(1024, 65535),
            rng.randrange(1, 65535),
        )
        for _ in range(1000)
    ]
    return dp, hits, misses


def engine_pps(dp: Dataplane, frames: list[bytes], seconds: float) -> float:
    process = dp.process
    n = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for f in frames:
            process(1, f)
        n += len(frames)
    return n / (time.perf_counter() - start)


# ---------------------------------------------------------------------------- end to end
PAIRS = (("sswb-a0", "sswb-a1"), ("sswb-b0", "sswb-b1"))


def _run(*args: str) -> None:
    subprocess.run(list(args), check=True, capture_output=True)


def _veths_up() -> None:
    for inside, outside in PAIRS:
        subprocess.run(["ip", "link", "del", inside], capture_output=True, check=False)
        _run("ip", "link", "add", inside, "type", "veth", "peer", "name", outside)
        for name in (inside, outside):
            subprocess.run(
                ["sysctl", "-qw", f"net.ipv6.conf.{name}.disable_ipv6=1"],
                capture_output=True,
                check=False,
            )
            _run("ip", "link", "set", name, "up")


def _veths_down() -> None:
    for inside, _ in PAIRS:
        subprocess.run(["ip", "link", "del", inside], capture_output=True, check=False)


def e2e_pps(command: list[str], packets: int) -> tuple[float, float]:
    """(received pps, loss ratio) forwarding `packets` frames between two veths."""
    import grpc  # noqa: PLC0415
    from finsy.proto import p4r, p4r_grpc  # noqa: PLC0415

    sys.path.insert(0, str(ROOT / "tests" / "softswitch"))
    from test_p4runtime import Client, ids, insert, route_entry, set_pipeline  # noqa: PLC0415

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _veths_up()
    proc = subprocess.Popen(
        [
            *command,
            "-i",
            f"1@{PAIRS[0][0]}",
            "-i",
            f"2@{PAIRS[1][0]}",
            "--no-p4",
            "--",
            "--grpc-server-addr",
            f"127.0.0.1:{port}",
            "--device-id",
            "1",
            "--cpu-port",
            "255",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=60)
        client = Client(p4r_grpc.P4RuntimeStub(channel), election=1)
        client.open()
        i = ids(set_pipeline(client))
        client.write(insert(p4r.Entity(table_entry=route_entry(i, b"\x0a\x00\x00\x00", 8, 2))))
        tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
        tx.bind((PAIRS[0][1], 0))
        rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
        rx.bind((PAIRS[1][1], 0))
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        rx.settimeout(1.0)
        frame = _frame("10.0.0.1", "10.0.0.9", 5, 6)
        times: list[float] = []

        def receive() -> None:
            while len(times) < packets:
                try:
                    rx.recv(2048)
                except TimeoutError:
                    return
                times.append(time.perf_counter())

        thread = threading.Thread(target=receive)
        thread.start()
        for _ in range(packets):
            tx.send(frame)
        thread.join(timeout=120)
        tx.close()
        rx.close()
        client.close()
        channel.close()
        if len(times) < 2:
            return 0.0, 1.0
        return (len(times) - 1) / (times[-1] - times[0]), 1 - len(times) / packets
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        _veths_down()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="duration of each in-process run")
    ap.add_argument("--packets", type=int, default=20000, help="frames sent end to end")
    ap.add_argument("--no-e2e", action="store_true", help="skip the veth measurements")
    args = ap.parse_args(argv)
    rows: list[tuple[str, str, str, str]] = []
    dp, hits, misses = build_engine(1000)
    acl_entries = len(dp.program.tables["MyIngress.acl"].entries)
    rows.append(
        (
            "softswitch",
            "in process",
            "session hit (exact 5-tuple, 1,000 sessions)",
            f"{engine_pps(dp, hits, args.seconds):,.0f}",
        )
    )
    rows.append(
        (
            "softswitch",
            "in process",
            f"miss: {acl_entries} ClassBench-style ACL rules + ranges + LPM",
            f"{engine_pps(dp, misses, args.seconds):,.0f}",
        )
    )
    if not args.no_e2e:
        if os.geteuid() != 0:
            rows.append(("softswitch", "veth end to end", "skipped: needs root", "-"))
        else:
            pps, loss = e2e_pps([sys.executable, "-m", "softswitch"], args.packets)
            rows.append(
                (
                    "softswitch",
                    "veth end to end",
                    f"LPM route, {args.packets} frames, loss {loss:.1%}",
                    f"{pps:,.0f}",
                )
            )
            bmv2 = shutil.which("simple_switch_grpc")
            if bmv2:
                pps, loss = e2e_pps([bmv2], args.packets)
                rows.append(
                    (
                        "BMv2 simple_switch_grpc",
                        "veth end to end",
                        f"LPM route, {args.packets} frames, loss {loss:.1%}",
                        f"{pps:,.0f}",
                    )
                )
            else:
                rows.append(("BMv2 simple_switch_grpc", "veth end to end", "not installed", "-"))
    print("| target | how | path | packets/s |")
    print("|---|---|---|---:|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
