"""Where a new connection's time goes through the gateway: `bench_flood --trace` captures h1's
connections to out1:80 on every port of h1's NPM (tcpdump, each direction apart) and the
controller's P4Runtime connection to it (loopback), and follows each connection's SYN and
SYN-ACK from port to port.

A SYN is known by its sequence number (NAT keeps it), a SYN-ACK by its acknowledgement; on the
P4Runtime connection the SYN's packet-in (from the switch) and packet-out (to the switch) are
the segments whose bytes hold that sequence number. Each stage is the time from the packet's
first sighting at one point to its first at the next; a stage a connection does not pass (no
SPM, no packet-in) is left out.
"""

from __future__ import annotations

import math
import signal
import statistics
import struct
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scapy.layers.inet import TCP
from scapy.utils import PcapReader

from topo.model import TopologySpec

PCAP_HEADER = 24  # bytes tcpdump writes once it captures

# The stages, in the order a connection passes them: (name, from point, to point).
STAGES = (
    ("switch: SYN in, packet-in out", "syn_inside", "packet_in"),
    ("CPM: packet-in to packet-out", "packet_in", "packet_out"),
    ("switch: packet-out in, SYN to the SPM", "packet_out", "syn_to_spm"),
    ("switch: SYN in, to the SPM (no CPM)", "syn_inside", "syn_to_spm"),
    ("SPM: SYN", "syn_to_spm", "syn_from_spm"),
    ("switch: SYN back, out", "syn_from_spm", "syn_outside"),
    ("out1 answers", "syn_outside", "synack_outside"),
    ("switch: SYN-ACK in, to the SPM", "synack_outside", "synack_to_spm"),
    ("SPM: SYN-ACK", "synack_to_spm", "synack_from_spm"),
    ("switch: SYN-ACK back, to h1", "synack_from_spm", "synack_inside"),
)


@dataclass
class Capture:
    """tcpdump processes writing into `directory`: per NPM port and direction, and loopback."""

    directory: Path
    roles: dict[str, str]  # interface -> inside | outside | spm
    grpc_port: int
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def stop(self) -> None:
        for p in self.processes:
            p.send_signal(signal.SIGINT)
        for p in self.processes:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def start(spec: TopologySpec, npm_name: str, grpc_port: int, directory: Path) -> Capture:
    """Capture h1's connections to port 80 on `npm_name`'s ports and its P4Runtime connection;
    returns once every tcpdump has written its file's header (it captures from then on)."""
    npm = next(n for n in spec.npms if n.name == npm_name)
    inside_lan = spec.host("h1").lan
    outside_lan = spec.host("out1").lan
    spms = {h.name for h in spec.hosts_with_role("spm")} | {
        h.lan for h in spec.hosts_with_role("spm") if h.lan
    }
    roles: dict[str, str] = {}
    for port, peer in npm.ports.items():
        role = (
            "inside"
            if peer == inside_lan
            else "outside"
            if peer == outside_lan
            else "spm"
            if peer in spms
            else ""
        )
        if role:
            roles[f"{npm.name}-eth{port}"] = role
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("*.pcap"):
        old.unlink()
    capture = Capture(directory, roles, grpc_port)
    jobs = [(intf, d, "tcp port 80") for intf in roles for d in ("in", "out")]
    jobs.append(("lo", "inout", f"tcp port {grpc_port}"))
    for intf, direction, expression in jobs:
        path = directory / f"{intf}-{direction}.pcap"
        argv = ["tcpdump", "-i", intf, "-Q", direction, "-s", "0", "-B", "65536", "-U"]
        capture.processes.append(
            subprocess.Popen(
                [*argv, "-w", str(path), expression],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    files = [directory / f"{intf}-{direction}.pcap" for intf, direction, _e in jobs]
    deadline = time.monotonic() + 30
    while not all(f.exists() and f.stat().st_size >= PCAP_HEADER for f in files):
        if time.monotonic() > deadline or any(p.poll() is not None for p in capture.processes):
            capture.stop()
            raise RuntimeError(f"tcpdump did not start capturing into {directory}")
        time.sleep(0.05)
    return capture


def _first_times(path: Path, key: Callable[[Any], int | None]) -> dict[int, float]:
    out: dict[int, float] = {}
    if not path.exists() or path.stat().st_size == 0:
        return out
    with PcapReader(str(path)) as reader:
        for p in reader:
            if TCP not in p:
                continue
            k = key(p[TCP])
            if k is not None and k not in out:
                out[k] = float(p.time)
    return out


def _syn(tcp: Any) -> int | None:
    return int(tcp.seq) if tcp.flags & 0x12 == 0x02 else None


def _synack(tcp: Any) -> int | None:
    return (int(tcp.ack) - 1) & 0xFFFFFFFF if tcp.flags & 0x12 == 0x12 else None


def _merge(maps: list[dict[int, float]]) -> dict[int, float]:
    out: dict[int, float] = {}
    for m in maps:
        for k, t in m.items():
            out[k] = min(t, out.get(k, math.inf))
    return out


def analyse(capture: Capture) -> dict[str, Any]:
    """Per stage, the connections that passed it and the median and largest time, in ms."""
    d = capture.directory

    def files(role: str, direction: str) -> list[Path]:
        return [d / f"{i}-{direction}.pcap" for i, r in capture.roles.items() if r == role]

    points: dict[str, dict[int, float]] = {
        "syn_inside": _merge([_first_times(p, _syn) for p in files("inside", "in")]),
        "syn_to_spm": _merge([_first_times(p, _syn) for p in files("spm", "out")]),
        "syn_from_spm": _merge([_first_times(p, _syn) for p in files("spm", "in")]),
        "syn_outside": _merge([_first_times(p, _syn) for p in files("outside", "out")]),
        "synack_outside": _merge([_first_times(p, _synack) for p in files("outside", "in")]),
        "synack_to_spm": _merge([_first_times(p, _synack) for p in files("spm", "out")]),
        "synack_from_spm": _merge([_first_times(p, _synack) for p in files("spm", "in")]),
        "synack_inside": _merge([_first_times(p, _synack) for p in files("inside", "out")]),
    }
    isns = sorted(points["syn_inside"])
    needles = {struct.pack("!I", isn): isn for isn in isns}
    packet_in: dict[int, float] = {}
    packet_out: dict[int, float] = {}
    lo = d / "lo-inout.pcap"
    if lo.exists() and lo.stat().st_size:
        with PcapReader(str(lo)) as reader:
            for p in reader:
                if TCP not in p or not len(p[TCP].payload):
                    continue
                payload = bytes(p[TCP].payload)
                for needle, isn in needles.items():
                    if needle in payload:
                        side = packet_in if p[TCP].sport == capture.grpc_port else packet_out
                        side.setdefault(isn, float(p.time))
    points["packet_in"] = packet_in
    points["packet_out"] = packet_out
    stages: dict[str, tuple[int, float, float]] = {}
    for name, a, b in STAGES:
        # straight from the inside port to an SPM: only the connections with no packet-in
        skip = packet_in if (a, b) == ("syn_inside", "syn_to_spm") else {}
        times = [
            (points[b][isn] - points[a][isn]) * 1000
            for isn in isns
            if isn in points[a] and isn in points[b] and isn not in skip
        ]
        if times:
            stages[name] = (len(times), statistics.median(times), max(times))
    totals = [
        (points["synack_inside"][isn] - points["syn_inside"][isn]) * 1000
        for isn in isns
        if isn in points["synack_inside"]
    ]
    return {"connections": len(isns), "stages": stages, "totals": totals}


def table(rows: list[tuple[str, dict[str, Any]]]) -> None:
    """The stages of each traced flood, as Markdown."""
    print("\nWhere h1's connections spent their time during each flood (`--trace`)\n")
    print("| policy | stage | connections | median ms | largest ms |")
    print("|---|---|---:|---:|---:|")
    for name, trace in rows:
        for stage, (n, median, largest) in trace["stages"].items():
            print(f"| {name} | {stage} | {n} | {median:.1f} | {largest:.1f} |")
        totals = trace["totals"]
        if totals:
            print(
                f"| {name} | SYN in to SYN-ACK out, in all | {len(totals)} | "
                f"{statistics.median(totals):.1f} | {max(totals):.1f} |"
            )
    print(
        "\nThe trace: tcpdump on the NPM's ports and its P4Runtime connection; per stage, the "
        "connections that passed it, median / largest ms."
    )
