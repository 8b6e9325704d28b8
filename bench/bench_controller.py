"""Controller benchmark: sessions installed per second (both directions, batched Writes) and the
time from the first packet or the digest to both directions installed.

    python -m bench.bench_controller            # every target this machine can run
    python -m bench.bench_controller --quick    # smaller runs

Targets: the built-in switch's P4Runtime server with no ports, its digests injected (the
controller against a real switch's Write path, without a data plane's packet rate), the built-in
software switch, and BMv2 when `simple_switch_grpc` is installed. On a real switch, the install
rate is measured with session requests fed straight to the controller's event bus (the data
plane cannot generate digests faster than it forwards), and the latency with real opening
packets sent on a veth at a steady rate (needs root). Prints Markdown.
"""

from __future__ import annotations

import argparse
import logging
import math
import multiprocessing
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controller import events as ev
from controller.npm import NpmAddress
from controller.runtime import Controller, ControllerOptions
from opengate import p4constants as pc
from opengate.netutil import require_root, veth_pairs
from opengate.switch import running_switch
from opengate.target import Target, TargetChoice, TargetError, repo_root, select_target
from tests.switch_double import SwitchDouble

POLICY = repo_root() / "controller" / "examples" / "gateway.yaml"
H1, H2, OUT1 = 0x0A00010A, 0x0A00010B, 0xC6336414
GW_IN_MAC = "02:00:00:00:00:01"
SOFT = "software switch"  # the target name in the report


@dataclass(slots=True)
class Result:
    target: str
    sessions: int
    seconds: float
    writes: int
    latencies: list[float]  # steady rate: digest off the stream -> both directions installed
    first_packet: list[float]  # steady rate: packet sent -> installed (real targets)
    first_packet_nat: list[float]  # the same for NAT sessions (packet-in, re-injection)
    note: str = ""

    @property
    def rate(self) -> float:
        return self.sessions / self.seconds if self.seconds else 0.0


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def _request(flow: int) -> dict[str, int]:
    return {
        "ipv4_src": 0x0A000000 | (flow >> 12),
        "ipv4_dst": OUT1,
        "ip_proto": pc.IP_PROTO_UDP,
        "l4_sport": 1024 + (flow & 0xFFF),
        "l4_dport": 53,
        "ingress_port": 1,
        "acl_rule": 0,
        "ids_class": 0,
        "spm_port": 0,
        "spm_mac": 0,
    }


@contextmanager
def _controller(address: str, folder: Path) -> Iterator[Controller]:
    options = ControllerOptions(
        npms=(NpmAddress("npm1", address, 1),),
        policy_path=POLICY,
        db_url=f"sqlite:///{folder / 'bench.db'}",
        state_dir=folder,
    )
    controller = Controller(options)
    controller.start()
    try:
        if not controller.wait_synced(60):
            raise RuntimeError("the controller did not take over the switch")
        yield controller
    finally:
        controller.stop()


def _wait_count(controller: Controller, count: int, timeout: float) -> float:
    sessions = controller.sessions
    assert sessions is not None
    deadline = time.monotonic() + timeout
    while sessions.stats.installed + sessions.stats.failed < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {sessions.stats.installed} of {count} sessions installed")
        time.sleep(0.005)
    return time.perf_counter()


def _burst(controller: Controller, count: int, inject: Callable[[int, int], None]) -> float:
    """Seconds to install `count` sessions requested all at once (lists of 256 records)."""
    sessions = controller.sessions
    assert sessions is not None
    base = sessions.stats.installed + sessions.stats.failed
    started = time.perf_counter()
    for start in range(0, count, 256):
        inject(start, min(count, start + 256))
    return _wait_count(controller, base + count, 300) - started


def _injecting_switch_process(port: int, commands: Connection) -> None:
    """The switch double (the built-in switch's P4Runtime server, no ports) in a process of its
    own (so that it does not share the controller's interpreter), injecting digests when told:
    ("burst", start, end), ("steady", count, rate)."""
    logging.basicConfig(level=logging.ERROR)
    with SwitchDouble(port=port) as switch:
        commands.send(("ready", switch.port))
        while True:
            command = commands.recv()
            if command[0] == "stop":
                commands.send(("writes", len(switch.writes)))
                return
            if command[0] == "burst":
                _, start, end = command
                for first in range(start, end, 256):
                    records = [_request(i) for i in range(first, min(end, first + 256))]
                    switch.inject_digest(pc.D_SESSION_REQUEST_T, records)
            elif command[0] == "steady":
                _, count, rate = command
                next_send = time.perf_counter()
                for flow in range(count):
                    while time.perf_counter() < next_send:
                        time.sleep(0.0005)
                    switch.inject_digest(pc.D_SESSION_REQUEST_T, [_request(1_000_000 + flow)])
                    next_send += 1.0 / rate
            commands.send(("done",))


def bench_injected(count: int, folder: Path, steady: int) -> Result:
    """Digests over a real gRPC stream from a switch with no ports: the controller's rate when
    digests arrive faster than any data plane here makes them."""
    ours, theirs = multiprocessing.Pipe()
    process = multiprocessing.get_context("spawn").Process(
        target=_injecting_switch_process, args=(0, theirs), daemon=True
    )
    process.start()
    try:
        _, port = ours.recv()
        with _controller(f"127.0.0.1:{port}", folder) as controller:
            sessions = controller.sessions
            assert sessions is not None

            def write_count() -> int:
                value = controller.metrics.registry.get_sample_value(
                    "opengate_p4rt_writes_total", {"npm": "npm1"}
                )
                return int(value or 0)

            writes_before = write_count()
            started = time.perf_counter()
            ours.send(("burst", 0, count))
            ours.recv()
            seconds = _wait_count(controller, count, 300) - started
            writes = write_count() - writes_before
            controller.db_writer.flush()  # the burst's rows are stored before the steady part
            sessions.stats.latencies.clear()
            ours.send(("steady", steady, 200))
            ours.recv()
            _wait_count(controller, count + steady, 60)
            latencies = list(sessions.stats.latencies)
        ours.send(("stop",))
        ours.recv()
    finally:
        process.join(timeout=10)
        if process.is_alive():
            process.kill()
    target = "built-in switch, no ports (digests injected)"
    return Result(target, count, seconds, writes, latencies, [], [])


def bench_target(choice: TargetChoice, count: int, folder: Path, packets: int) -> Result:
    root_reason = require_root("the first-packet latency (veths)")
    tag = f"{os.getpid() % 100000}"
    pairs = [(f"ob{tag}s{n}", f"ob{tag}h{n}") for n in (1, 2)] if not root_reason else []
    ports = {n: pairs[n - 1][0] for n in (1, 2)} if pairs else {}
    with (
        veth_pairs(pairs),
        running_switch(ports, folder / f"switch-{choice.target.value}.log", choice) as switch,
        _controller(switch.grpc_address, folder) as controller,
    ):
        sessions = controller.sessions
        assert sessions is not None

        def write_count() -> float:
            value = controller.metrics.registry.get_sample_value(
                "opengate_p4rt_writes_total", {"npm": "npm1"}
            )
            return value or 0.0

        def inject(start: int, end: int) -> None:
            records = tuple(_request(flow) for flow in range(start, end))
            controller.bus.publish(ev.SessionRequested("npm1", records, time.perf_counter()))

        writes_before = write_count()
        seconds = _burst(controller, count, inject)
        writes = int(write_count() - writes_before)
        first: list[float] = []
        first_nat: list[float] = []
        latencies: list[float] = []
        if pairs:
            controller.db_writer.flush()  # the burst's rows are stored before the steady part
            sessions.stats.latencies.clear()
            first = _first_packet(controller, pairs[0][1], packets, nat=False)
            latencies = list(sessions.stats.latencies)
            first_nat = _first_packet(controller, pairs[0][1], packets // 5, nat=True)
        name = "BMv2" if choice.target is Target.BMV2 else SOFT
        return Result(name, count, seconds, writes, latencies, first, first_nat, root_reason or "")


def _first_packet(controller: Controller, iface: str, count: int, nat: bool) -> list[float]:
    """Send `count` opening UDP packets at 100/s; time from sending each to its session."""
    installed: dict[tuple[int, int, int, int, int], float] = {}
    done = threading.Event()
    wanted: set[tuple[int, int, int, int, int]] = set()

    def on_installed(event: ev.SessionsInstalled) -> None:
        for key in event.keys:
            if key in wanted:
                installed[key] = event.at
        if len(installed) >= len(wanted):
            done.set()

    controller.bus.subscribe(ev.SessionsInstalled, on_installed)
    sent: dict[tuple[int, int, int, int, int], float] = {}
    base_port = 30000 if nat else 10000
    dst, dst_text = (OUT1, "198.51.100.20") if nat else (H2, "10.0.1.11")
    frames = []
    for i in range(count):
        key = (H1, dst, pc.IP_PROTO_UDP, base_port + i, 9999)
        wanted.add(key)
        packet = (
            Ether(src="00:00:00:00:01:10", dst=GW_IN_MAC)
            / IP(src="10.0.1.10", dst=dst_text)
            / UDP(sport=base_port + i, dport=9999)
        )
        frames.append((key, bytes(packet)))
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as sock:
        sock.bind((iface, 0))
        next_send = time.perf_counter()
        for key, frame in frames:
            while time.perf_counter() < next_send:
                time.sleep(0.0005)
            sent[key] = time.perf_counter()
            sock.send(frame)
            next_send += 0.01
    done.wait(timeout=30)
    return [installed[k] - sent[k] for k in sent if k in installed]


def _ms(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value * 1000:.1f}"


def _pair(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"{_ms(percentile(values, 50))} / {_ms(percentile(values, 99))}"


def report(results: list[Result]) -> None:
    print("Sessions installed by the controller, per target\n")
    print(
        "| target | sessions (burst) | sessions/s, both directions | sessions/s vs the software "
        "switch | entries/s | Write RPCs | digest -> installed p50 / p99 (ms) | first packet -> "
        "installed p50 / p99 (ms) | NAT first packet -> installed p50 / p99 (ms) |"
    )
    print("|---|---:|---:|---:|---:|---:|---|---|---|")
    soft = next((r.rate for r in results if r.target == SOFT), 0.0)
    for r in results:
        ratio = f"{r.rate / soft:.2f}x" if soft else "-"
        print(
            f"| {r.target} | {r.sessions:,} | {r.rate:,.0f} | {ratio} | {2 * r.rate:,.0f} | "
            f"{r.writes} | {_pair(r.latencies)} | {_pair(r.first_packet)} | "
            f"{_pair(r.first_packet_nat)} |"
        )
    print()
    print(
        "Burst: that many session requests at once, installed in batched Writes (up to 4,096 "
        "updates each) and stored in SQLite; from the switch with no ports (a separate process) "
        "they arrive as digest lists of 256 records on the P4Runtime stream, on the real switches "
        "they are fed to the event bus (a data plane cannot generate digests that fast). "
        "Latencies at a steady 100-200 requests/s: from the "
        "digest leaving the switch's stream (or the packet leaving the veth) to both directions "
        "acknowledged by the switch; NAT sessions go through packet-in, port allocation and "
        "re-injection. Anchors: a Stratum switch took 17,303 ACL inserts/s; classic "
        "controllers set up 30,000-60,000 flows/s per core."
    )
    for r in results:
        if r.note:
            print(f"\nNote ({r.target}): {r.note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    scale = 0.2 if args.quick else 1.0
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="og-bench-") as tmp:
        folder = Path(tmp)
        (folder / "switch").mkdir()
        results.append(bench_injected(int(20000 * scale), folder / "switch", int(500 * scale)))
        choices: list[TargetChoice] = []
        for name in ("soft", "bmv2"):
            try:
                choices.append(select_target({"TARGET": name, "PATH": os.environ.get("PATH", "")}))
            except TargetError as error:
                print(f"({name}: {error})\n")
        for choice in choices:
            sub = folder / choice.target.value
            sub.mkdir()
            count = int((5000 if choice.target is Target.SOFT else 10000) * scale)
            results.append(bench_target(choice, count, sub, packets=int(500 * scale)))
    report(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
