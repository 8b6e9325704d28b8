"""Packets per second through the OpenGate pipeline (p4src/build/opengate.json), as Markdown.

Two paths, both on the same installed state (base configuration, 1,000 sessions, and the HSM
tables that controller/hsm compiles from the ClassBench set acl1_1k, all PERMIT):

* session hit: TCP segments of the 1,000 installed sessions, inside -> outside, routed out;
* HSM miss: TCP SYNs / UDP datagrams without a session, drawn inside the ClassBench rules, so
  every one runs the five segment lookups and the aggregation tables, is permitted, reported with
  a session-request digest and routed out;
* IPv6 session hit: TCP segments of 1,000 installed IPv6 sessions (session_v6), routed out by an
  IPv6 default route, hop limit decremented;
* IPv6 ACL miss (in process only): IPv6 TCP SYNs without a session through ipv6_acl holding the
  same ClassBench rules with their addresses moved into 2001:db8::/32 (a /n becomes a /32+n), so
  every one is classified by the priority table, permitted and sent to the CPM as a packet-in
  (IPv6 sessions are set up by the CPM: docs/explanation/ipv6.md); the IPv4 figure to compare
  it with is the HSM miss.

Measured in process (the software switch's engine alone: `Dataplane.process` in a loop, no
sockets, wall clock) and end to end through veth pairs, for the software switch and for BMv2's
simple_switch_grpc when it is on PATH (`make` adds /opt/p4/bin): a raw AF_PACKET socket on the
inside peer offers a paced load for 2 s, the outside peer's kernel counters count what came out.
The figure is the highest offered rate the switch kept up with: at most 1% lost, and at least 97%
out while the load lasted (so a filling queue does not pass for throughput); found by doubling
from 1,000 packets/s, then four bisections. The notes give the lowest rate it did not keep up
with. The sender shares the machine with the switch, as BMv2 and the switch share it.

    .venv/bin/python -m bench.bench_softswitch [--seconds S] [--no-e2e] [--no-bmv2]

End to end needs root. The whole run takes about two minutes.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import random
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from finsy.proto import p4r
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from bench.csender import c_send
from controller.hsm.compile import compile_hsm
from controller.hsm.rules import AclRule, parse_classbench
from opengate import p4constants as pc
from opengate.entries import Exact, Lpm, MatchValue, TableEntry, Ternary
from opengate.fields import Prefix
from opengate.netutil import require_root, veth_pairs
from opengate.p4info import P4Schema
from opengate.p4rt import P4RuntimeClient, update_of
from opengate.switch import running_switch
from opengate.target import (
    BMV2_BINARY,
    Target,
    TargetChoice,
    TargetError,
    p4_build_dir,
    repo_root,
    select_target,
    shared_data_dir,
)
from opengate.testbed import (
    HOST_IN_MAC,
    INSIDE,
    OUTSIDE,
    TAG_BASE,
    ip,
    ipv6_acl_entry,
    route_v6_entry,
    session_v6_entry,
)
from softswitch.native.dataplane import NativeDataplane
from softswitch.p4runtime_server import P4RuntimeServer
from softswitch.switch import Switch

GW_MAC = {INSIDE: 0x020000000001, OUTSIDE: 0x020000000002}
NEXT_HOP_MAC = 0x000000000220
SESSIONS = 1000
CLASSBENCH = "classbench/acl1_1k"
WRITE_BATCH = 5000
FRAME_SIZES = (64, 1400)
ENGINES = {"python": "Python engine", "native": "native"}
BMV2_NAME = "BMv2 simple_switch_grpc"
PYTHON_ENGINE = f"software switch ({ENGINES['python']})"  # the rows' target names
PAIRS = (("ogb-s1", "ogb-p1"), ("ogb-s2", "ogb-p2"))


# -- the installed state -----------------------------------------------------------------------


def base_entries() -> list[TableEntry]:
    """Ports and roles, router MACs, a default route out of the outside port, the NPM tag."""
    entries = [
        TableEntry.make(
            pc.T_PORT_ROLE,
            {"ingress_port": Exact(port)},
            pc.A_SET_PORT_ROLE,
            {"role": role},
        )
        for port, role in ((INSIDE, pc.ROLE_INSIDE), (OUTSIDE, pc.ROLE_OUTSIDE))
    ]
    entries += [
        TableEntry.make(
            pc.T_ROUTER_MAC, {"egress_port": Exact(port)}, pc.A_SET_SOURCE_MAC, {"mac": mac}
        )
        for port, mac in GW_MAC.items()
    ]
    entries.append(
        TableEntry.make(
            pc.T_ROUTING,
            {"ipv4_dst": Lpm(0, 0)},
            pc.A_ROUTE_TO,
            {"port": OUTSIDE, "next_hop_mac": NEXT_HOP_MAC},
        )
    )
    entries.append(
        TableEntry.make(
            pc.T_NPM_IDENTITY, {}, pc.A_SET_NPM_IDENTITY, {"tag_base": TAG_BASE}, is_default=True
        )
    )
    entries.append(route_v6_entry("::/0", OUTSIDE, "00:00:00:00:02:20", "02:00:00:00:00:02"))
    return entries


def session_flow(i: int) -> tuple[str, str, int, int]:
    return f"10.1.{i // 200}.{i % 200 + 1}", f"198.51.100.{i % 250 + 1}", 20000 + i, 443


def session_entries() -> list[TableEntry]:
    out = []
    for i in range(SESSIONS):
        src, dst, sport, dport = session_flow(i)
        match: dict[str, MatchValue] = {
            "ipv4_src": Exact(ip(src)),
            "ipv4_dst": Exact(ip(dst)),
            "ip_proto": Exact(6),
            "l4_sport": Exact(sport),
            "l4_dport": Exact(dport),
        }
        params = {
            "class_id": 0,
            "spm_port": 0,
            "spm_mac": 0,
            "nat_kind": 0,
            "nat_addr": 0,
            "nat_port": 0,
            "nat_before_spm": 0,
        }
        out.append(TableEntry.make(pc.T_SESSION, match, pc.A_SESSION_FORWARD, params))
    return out


def session_v6_flow(i: int) -> tuple[str, str, int, int]:
    return f"2001:db8:1::{i + 1:x}", f"2001:db8:2::{i % 250 + 1:x}", 20000 + i, 443


def session_v6_entries() -> list[TableEntry]:
    return [
        session_v6_entry(*session_v6_flow(i)[:2], 6, *session_v6_flow(i)[2:])
        for i in range(SESSIONS)
    ]


def _v6_prefix(prefix: Prefix) -> str:
    """An IPv4 prefix moved into 2001:db8::/32: its bits follow the /32."""
    value = (0x20010DB8 << 96) | (prefix.value << 64)
    return f"{ipaddress.IPv6Address(value)}/{32 + prefix.length}"


def _v6_address(rng: random.Random, prefix: Prefix) -> str:
    host = rng.getrandbits(32 - prefix.length) if prefix.length < 32 else 0
    value = (0x20010DB8 << 96) | ((prefix.value | host) << 64) | rng.getrandbits(64)
    return str(ipaddress.IPv6Address(value))


def ipv6_acl_entries(rules: Sequence[AclRule]) -> list[TableEntry]:
    """The ClassBench rules as ipv6_acl entries, first rule first (one entry per rule: these
    rules have one prefix, range and protocol each), all permitting."""
    out = []
    for i, rule in enumerate(rules):
        proto = rule.proto[0]
        entry = ipv6_acl_entry(
            len(rules) - i,
            pc.A_IPV6_ACL_PERMIT,
            i,
            src=_v6_prefix(rule.src[0]),
            dst=_v6_prefix(rule.dst[0]),
            sport=(rule.sport[0].low, rule.sport[0].high),
            dport=(rule.dport[0].low, rule.dport[0].high),
        )
        if proto.mask:
            match = dict(entry.match)
            match["ip_proto"] = Ternary(proto.value, proto.mask)
            entry = TableEntry.make(
                entry.table, match, entry.action, dict(entry.params), priority=entry.priority
            )
        out.append(entry)
    return out


def _frame6(src: str, dst: str, sport: int, dport: int, flags: str = "A", size: int = 64) -> bytes:
    headers = Ether(src=HOST_IN_MAC, dst="02:00:00:00:00:01") / IPv6(src=src, dst=dst, hlim=64)
    headers = headers / TCP(sport=sport, dport=dport, flags=flags)
    return bytes(headers / (b"x" * max(0, size - len(headers))))


def miss_frames_v6(rules: Sequence[AclRule], count: int, seed: int = 7) -> list[bytes]:
    """IPv6 TCP SYNs inside randomly chosen TCP rules (moved into 2001:db8::/32)."""
    rng = random.Random(seed)
    usable = [r for r in rules if any(p.contains(6) for p in r.proto)]
    out = []
    for _ in range(count):
        rule = rng.choice(usable)
        sport, dport = rng.choice(rule.sport), rng.choice(rule.dport)
        out.append(
            _frame6(
                _v6_address(rng, rng.choice(rule.src)),
                _v6_address(rng, rng.choice(rule.dst)),
                rng.randint(sport.low, sport.high),
                rng.randint(dport.low, dport.high),
                flags="S",
            )
        )
    return out


@dataclass(slots=True)
class Workload:
    updates: list[p4r.Update]
    hits: list[bytes]
    misses: list[bytes]
    big_hits: list[bytes]  # the same flows, FRAME_SIZES[1]-byte frames
    big_misses: list[bytes]
    v6_hits: list[bytes]
    v6_big_hits: list[bytes]
    v6_misses: list[bytes]
    hsm_entries: int
    rules: int
    compile_seconds: float


def _frame(
    src: str, dst: str, proto: int, sport: int, dport: int, flags: str = "A", size: int = 64
) -> bytes:
    """A frame of `size` bytes (without the FCS): Ethernet, IPv4, TCP or UDP, padding."""
    l4 = TCP(sport=sport, dport=dport, flags=flags) if proto == 6 else UDP(sport=sport, dport=dport)
    headers = Ether(src=HOST_IN_MAC, dst="02:00:00:00:00:01") / IP(src=src, dst=dst, ttl=64, id=1)
    headers = headers / l4
    return bytes(headers / (b"x" * max(0, size - len(headers))))


def resized(frames: Sequence[bytes], size: int) -> list[bytes]:
    """The same flows in frames of `size` bytes (IPv4 total length and checksums redone)."""
    out = []
    for frame in frames:
        pkt = Ether(frame)
        del pkt[IP].len, pkt[IP].chksum
        l4 = pkt[IP].payload
        l4.remove_payload()
        if TCP in pkt:
            del pkt[TCP].chksum
        else:
            del pkt[UDP].len, pkt[UDP].chksum
        headers = bytes(pkt)
        out.append(bytes(Ether(headers + b"x" * max(0, size - len(headers)))))
    return out


def _address(rng: random.Random, prefix: Prefix) -> str:
    host = rng.getrandbits(32 - prefix.length) if prefix.length < 32 else 0
    return str(ipaddress.IPv4Address(prefix.value | host))


def miss_frames(rules: Sequence[AclRule], count: int, seed: int = 7) -> list[bytes]:
    """Session-opening packets inside randomly chosen rules: a TCP SYN, or a UDP datagram for a
    UDP rule (rules of other protocols are not drawn)."""
    rng = random.Random(seed)
    usable: list[tuple[AclRule, int]] = []
    for rule in rules:
        for proto in (6, 17):
            if any(p.contains(proto) for p in rule.proto):
                usable.append((rule, proto))
                break
    out = []
    for _ in range(count):
        rule, proto = rng.choice(usable)
        sport = rng.choice(rule.sport)
        dport = rng.choice(rule.dport)
        out.append(
            _frame(
                _address(rng, rng.choice(rule.src)),
                _address(rng, rng.choice(rule.dst)),
                proto,
                rng.randint(sport.low, sport.high),
                rng.randint(dport.low, dport.high),
                flags="S",
            )
        )
    return out


def entry_updates(schema: P4Schema, entries: Iterable[TableEntry]) -> list[p4r.Update]:
    """Writes of `entries`: a default action is a MODIFY, any other entry an INSERT."""
    return [
        update_of(
            p4r.Update.MODIFY if entry.is_default else p4r.Update.INSERT,
            schema.encode_entry(entry),
        )
        for entry in entries
    ]


def build_workload(schema: P4Schema) -> Workload:
    rules = parse_classbench(shared_data_dir() / CLASSBENCH)
    started = time.perf_counter()
    compiled = compile_hsm(rules, [], partitioned=True)  # the v1model program: a hybrid
    compile_seconds = time.perf_counter() - started
    entries = base_entries() + session_entries() + list(compiled.entries)
    entries += session_v6_entries() + ipv6_acl_entries(rules)
    updates = entry_updates(schema, entries)
    hits = [_frame(*session_flow(i)[:2], 6, *session_flow(i)[2:]) for i in range(SESSIONS)]
    misses = miss_frames(rules, 1000)
    v6_hits = [_frame6(*session_v6_flow(i)) for i in range(SESSIONS)]
    v6_big = [_frame6(*session_v6_flow(i), size=FRAME_SIZES[1]) for i in range(SESSIONS)]
    return Workload(
        updates,
        hits,
        misses,
        resized(hits, FRAME_SIZES[1]),
        resized(misses, FRAME_SIZES[1]),
        v6_hits,
        v6_big,
        miss_frames_v6(rules, 1000),
        len(compiled.entries),
        len(rules),
        compile_seconds,
    )


def install(client: P4RuntimeClient, schema: P4Schema, work: Workload) -> float:
    """Push the pipeline and every entry; returns the seconds the entries took."""
    build = p4_build_dir()
    client.set_pipeline(schema.p4info, (build / "opengate.json").read_bytes())
    started = time.perf_counter()
    for i in range(0, len(work.updates), WRITE_BATCH):
        client.write(work.updates[i : i + WRITE_BATCH])
    return time.perf_counter() - started


# -- measurements --------------------------------------------------------------------------------


@dataclass(slots=True)
class Row:
    target: str
    how: str
    path: str
    pps: float | None
    note: str = ""


def engine_rate(dp: Any, frames: Sequence[bytes], seconds: float) -> float:
    """Frames per second through `dp.process`, called from a Python loop."""
    process = dp.process
    done = 0
    started = time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        for frame in frames:
            process(INSIDE, frame)
        done += len(frames)
    return done / (time.perf_counter() - started)


def forget_sessions(dp: Any) -> None:
    """Clear every register: the data plane's session slots (and NAT claims) are forgotten, so
    the next pass of session-opening packets is classified again, not admitted by a slot."""
    if dp.native:
        dp.clear_registers()
        return
    for reg in dp.program.registers.values():
        reg.cells[:] = [0] * reg.size


def first_pass_rate(dp: Any, frames: Sequence[bytes], seconds: float, c_loop: bool) -> float:
    """Frames per second of passes over `frames`, each on fresh registers (the clearing is not
    timed): every frame takes the path of a new flow. From Python, or in one C loop."""
    frames = list(frames)
    done, spent = 0, 0.0
    while spent < seconds:
        forget_sessions(dp)
        started = time.perf_counter()
        if c_loop:
            dp.run_batch(INSIDE, frames, 1)
        else:
            for frame in frames:
                dp.process(INSIDE, frame)
        spent += time.perf_counter() - started
        done += len(frames)
    return done / spent


def c_loop_rate(dp: NativeDataplane, frames: Sequence[bytes], seconds: float) -> float:
    """Frames per second through the native pipeline in one C loop (no Python per frame)."""
    frames = list(frames)
    started = time.perf_counter()
    dp.run_batch(INSIDE, frames, 1)
    once = max(time.perf_counter() - started, 1e-6)
    rounds = max(1, int(seconds / once))
    started = time.perf_counter()
    out = dp.run_batch(INSIDE, frames, rounds)
    elapsed = time.perf_counter() - started
    if out != rounds * len(frames):
        raise RuntimeError(f"C loop: {out} of {rounds * len(frames)} frames output")
    return rounds * len(frames) / elapsed


def check_routed(dp: Any, frames: Sequence[bytes], what: str, port: int = OUTSIDE) -> None:
    """Every frame of the workload must leave on the outside port, or go to the CPU for the
    IPv6 ACL miss (else the figure is wrong)."""
    bad = [i for i, f in enumerate(frames) if [p for p, _ in dp.process(INSIDE, f)] != [port]]
    if bad:
        where = "routed out" if port == OUTSIDE else "sent to the CPU"
        raise RuntimeError(f"{what}: {len(bad)} of {len(frames)} frames not {where}")


V6_MISS = "IPv6 ACL miss"


def workloads(work: Workload, e2e: bool = False) -> list[tuple[str, list[bytes]]]:
    """The paths and their frames; through veths, not the IPv6 ACL miss (its packets go to
    the CPM over P4Runtime, not out of a port)."""
    small, big = FRAME_SIZES
    v6_small = len(work.v6_hits[0])
    out = [
        (f"session hit, {small} B", work.hits),
        (f"session hit, {big} B", work.big_hits),
        (f"HSM miss, {small} B", work.misses),
        (f"HSM miss, {big} B", work.big_misses),
        (f"IPv6 session hit, {v6_small} B", work.v6_hits),
        (f"IPv6 session hit, {big} B", work.v6_big_hits),
        (f"{V6_MISS}, {v6_small} B", work.v6_misses),
    ]
    return [w for w in out if not (e2e and w[0].startswith(V6_MISS))]


def in_process(schema: P4Schema, work: Workload, seconds: float) -> tuple[list[Row], float]:
    """Each engine behind its own in-process P4Runtime server, the same entries."""
    rows: list[Row] = []
    install_seconds = 0.0
    for engine, label in ENGINES.items():
        switch = Switch(device_id=1, cpu_port=pc.CPU_PORT)
        server = P4RuntimeServer(switch, "127.0.0.1:0", engine=engine)
        server.start()
        try:
            with P4RuntimeClient(f"127.0.0.1:{server.port}", 1, 10).connect() as client:
                install_seconds = install(client, schema, work)
            dp = switch.dataplane
            assert dp is not None
            if engine == "native" and not dp.native:
                rows.append(
                    Row(f"software switch ({label})", "in process", "-", None, dp.fallback_reason)
                )
                continue
            for path, frames in workloads(work):
                check_routed(dp, frames, path, pc.CPU_PORT if path.startswith(V6_MISS) else OUTSIDE)
                fresh = path.startswith("HSM miss")
                how = "in process, from Python" if dp.native else "in process"
                rate = (
                    first_pass_rate(dp, frames, seconds, False)
                    if fresh
                    else engine_rate(dp, frames, seconds)
                )
                rows.append(Row(f"software switch ({label})", how, path, rate))
                if dp.native:
                    rate = (
                        first_pass_rate(dp, frames, seconds, True)
                        if fresh
                        else c_loop_rate(dp, frames, seconds)
                    )
                    rows.append(Row(f"software switch ({label})", "in process, C loop", path, rate))
        finally:
            switch.set_dataplane(None)
            server.stop()
    return rows, install_seconds


def _rx_packets(ifname: str) -> int:
    return int(Path(f"/sys/class/net/{ifname}/statistics/rx_packets").read_text())


@dataclass(slots=True)
class Trial:
    rate: float  # offered, packets/s
    sent: int
    in_window: int  # came out while we were sending
    received: int  # came out in all (after the drain)

    @property
    def loss(self) -> float:
        return 1 - self.received / self.sent if self.sent else 0.0

    @property
    def kept_up(self) -> bool:
        """No more than 1% lost, and the output kept pace with the input (no growing queue)."""
        return self.loss <= LOSS_OK and self.in_window >= KEEP_UP * self.sent


LOSS_OK = 0.01
KEEP_UP = 0.97
TRIAL_SECONDS = 2.0
BISECTIONS = 4  # the result is within 1/16 of the last doubling step
QUIET_SECONDS = 0.3


def offer(frames: Sequence[bytes], rate: float, seconds: float = TRIAL_SECONDS) -> Trial:
    """Send `frames` round robin at `rate` packets/s for `seconds` from the inside peer (the C
    sender of bench.csender: sendmmsg batches paced by the clock); count what the outside peer's
    kernel receives, during the window and after a drain (output quiet for QUIET_SECONDS)."""
    rx_name = PAIRS[1][1]
    base = _rx_packets(rx_name)
    sent, _ = c_send(PAIRS[0][1], frames, rate, seconds)
    in_window = _rx_packets(rx_name) - base
    received = in_window
    quiet_until = time.perf_counter() + QUIET_SECONDS
    while time.perf_counter() < quiet_until:
        time.sleep(0.01)
        count = _rx_packets(rx_name) - base
        if count != received:
            received = count
            quiet_until = time.perf_counter() + QUIET_SECONDS
    return Trial(rate, sent, in_window, received)


def highest_rate(
    frames: Sequence[bytes], start: float = 1000.0, bisections: int = BISECTIONS
) -> tuple[Trial | None, Trial]:
    """The highest offered rate the switch keeps up with (doubling, then `bisections` halvings
    of the interval), and the lowest rate tried that it did not keep up with."""
    good: Trial | None = None
    rate = start
    while True:
        trial = offer(frames, rate)
        if trial.sent < 0.95 * rate * TRIAL_SECONDS:  # the sender itself cannot go faster
            return good or trial, trial
        if not trial.kept_up:
            bad = trial
            break
        good = trial
        rate *= 2
    low = good.rate if good else 0.0
    for _ in range(bisections):
        mid = (low + bad.rate) / 2
        if mid < 200:
            break
        trial = offer(frames, mid)
        if trial.kept_up:
            good, low = trial, mid
        else:
            bad = trial
    return good, bad


def end_to_end(
    name: str, choice: TargetChoice, schema: P4Schema, work: Workload, log_dir: Path
) -> tuple[list[Row], float]:
    rows = []
    with (
        veth_pairs(PAIRS),
        running_switch(
            {INSIDE: PAIRS[0][0], OUTSIDE: PAIRS[1][0]},
            log_dir / f"bench-{name.replace(' ', '-')}.log",
            choice,
        ) as sw,
        P4RuntimeClient(sw.grpc_address, 1, 10).connect() as client,
    ):
        install_seconds = install(client, schema, work)
        for path, frames in workloads(work, e2e=True):
            good, bad = highest_rate(frames)
            note = (
                f"above: {bad.rate:,.0f} offered, {bad.received / TRIAL_SECONDS:,.0f}/s out, "
                f"loss {bad.loss:.1%}"
            )
            pps = good.received / TRIAL_SECONDS if good is not None else None
            rows.append(Row(name, "veth end to end", path, pps, note))
    return rows, install_seconds


# -- report --------------------------------------------------------------------------------------


def bmv2_build(binary: Path) -> str:
    """How BMv2 was configured, as far as its installed config.h says (logging macros cost
    much per table: `./configure --disable-logging-macros --disable-elogger` removes them)."""
    config = binary.resolve().parent.parent / "include" / "bm" / "config.h"
    try:
        text = config.read_text()
    except OSError:
        return f"BMv2: {binary} (build options unknown: no {config})"
    version = next((ln.split('"')[1] for ln in text.splitlines() if "BM_VERSION " in ln), "?")
    defined = {ln.split()[1] for ln in text.splitlines() if ln.startswith("#define ")}
    flags = [f for f in ("BM_LOG_DEBUG_ON", "BM_LOG_TRACE_ON", "BM_ELOG_ON") if f in defined]
    logging = f"logging macros on ({', '.join(flags)})" if flags else "logging macros off"
    return f"BMv2 {version} at {binary}: {logging}"


def _vs(row: Row, peer: Row | None) -> str:
    if row.pps is None or peer is None or not peer.pps:
        return "-"
    return f"{row.pps / peer.pps:.2f}x"


def table(rows: Sequence[Row]) -> Iterator[str]:
    """The rows, each with its rate against BMv2's on the same path through veths, and against
    the Python engine's on the same path measured the same way (in process or through veths)."""

    def peer(target: str, row: Row) -> Row | None:
        veth = row.how == "veth end to end"
        return next(
            (
                r
                for r in rows
                if r.target == target
                and r.path == row.path
                and (r.how == "veth end to end") == veth
                and (veth or r.how == "in process")
            ),
            None,
        )

    def ipv4(row: Row) -> Row | None:
        """The IPv4 row an IPv6 row compares with: the same target and way, the session hit
        of the same size class, or the HSM miss for the ACL miss."""
        if not row.path.startswith("IPv6 "):
            return None
        kind, _, size = row.path.removeprefix("IPv6 ").partition(", ")
        small = size != f"{FRAME_SIZES[1]} B"
        path = ("HSM miss" if kind == "ACL miss" else kind) + ", "
        path += f"{FRAME_SIZES[0] if small else FRAME_SIZES[1]} B"
        return next(
            (r for r in rows if r.target == row.target and r.how == row.how and r.path == path),
            None,
        )

    yield (
        "| target | how | path | packets/s | vs BMv2 | vs the Python engine | IPv6 vs IPv4 "
        "| notes |"
    )
    yield "|---|---|---|---:|---:|---:|---:|---|"
    for r in rows:
        pps = f"{r.pps:,.0f}" if r.pps is not None else "-"
        bmv2 = _vs(r, peer(BMV2_NAME, r)) if r.how == "veth end to end" else "-"
        python = _vs(r, peer(PYTHON_ENGINE, r))
        v4 = _vs(r, ipv4(r))
        yield f"| {r.target} | {r.how} | {r.path} | {pps} | {bmv2} | {python} | {v4} | {r.note} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="each in-process measurement")
    parser.add_argument("--no-e2e", action="store_true", help="in process only")
    parser.add_argument("--no-bmv2", action="store_true", help="skip BMv2 even if installed")
    args = parser.parse_args(argv)
    if not (shared_data_dir() / CLASSBENCH).is_file():
        print(f"bench_softswitch: {shared_data_dir() / CLASSBENCH} is missing", file=sys.stderr)
        return 2
    schema = P4Schema.load(p4_build_dir() / "opengate.p4info.txtpb")
    work = build_workload(schema)
    notes = [
        f"{SESSIONS:,} sessions; HSM tables of {work.rules} ClassBench rules ({CLASSBENCH}): "
        f"{work.hsm_entries:,} entries, compiled in {work.compile_seconds:.1f} s",
    ]
    rows, seconds_in = in_process(schema, work, args.seconds)
    notes.append(f"software switch, in process: {len(work.updates):,} writes in {seconds_in:.1f} s")
    if not args.no_e2e:
        reason = require_root("end to end through veths")
        if reason:
            rows.append(Row("all", "veth end to end", "-", None, f"skipped: {reason}"))
        else:
            log_dir = repo_root() / "run" / "bench"
            soft = select_target({**os.environ, "TARGET": "soft"})
            choices = [
                (
                    "software switch (native)",
                    replace(soft, command=(*soft.command, "--engine", "native")),
                ),
                (
                    "software switch (Python engine)",
                    replace(soft, command=(*soft.command, "--engine", "python")),
                ),
            ]
            if not args.no_bmv2:
                try:
                    bmv2 = select_target({**os.environ, "TARGET": "bmv2"})
                    choices.append((BMV2_NAME, bmv2))
                except TargetError:
                    rows.append(
                        Row("BMv2", "veth end to end", "-", None, f"{BMV2_BINARY} not on PATH")
                    )
            for name, choice in choices:
                more, seconds_w = end_to_end(name, choice, schema, work, log_dir)
                rows += more
                notes.append(f"{name}: {len(work.updates):,} writes in {seconds_w:.1f} s")
                if choice.target is Target.BMV2:
                    notes.append(bmv2_build(Path(choice.command[0])))
    print("Packets per second through the OpenGate pipeline, per target, path and frame size\n")
    print("\n".join(table(rows)))
    print()
    for note in notes:
        print(f"- {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
