"""Classification cost against rule-set size: the hybrid (HSM in up to six ACL partitions plus spill
tables) against the naive ternary profile, on the software switch and BMv2.

For the first 100, 1,000 and all 9,774 rules of ClassBench acl1_10k (all PERMIT), the same
base configuration is installed on the switch twice: with the default build
(p4src/build/opengate.json) and the tables `compile_tables` makes (HSM alone, or the hybrid when
HSM alone does not fit), and with the `-DWITH_NAIVE_ACL` build (p4src/build/naive_acl/) and the
naive profile's ternary entries. Then the HSM-miss path of `bench_softswitch` is timed: 1,000
session-opening packets drawn inside the rules (each classified, permitted, reported by a digest
and routed out), in passes each on fresh registers (so that every packet is classified, not
admitted by the session slot of its previous pass): `process` in a loop on the Python engine, one
C loop on the native path. Every packet is checked to leave on the outside port first.

    .venv/bin/python -m bench.bench_hybrid [--seconds S] [--sizes 100,1000,0] [--no-e2e]
        [--targets soft,bmv2] [--repeat N] [--bisections B]

(0: the whole set.) As root, also through veths on the software switch and on BMv2 (when
simple_switch_grpc is on PATH; `--targets` picks), `bench_softswitch`'s method: a paced load
from the inside peer, the highest rate the switch keeps up with (doubling, then `--bisections`
halvings). The search through veths varies by about a quarter from run to run, so `--repeat N`
makes N searches on the same switch and tables, one after the other, and reports their median
(and the range). About two minutes in process, fifteen with veths and one search each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from finsy.proto import p4r

from bench.bench_softswitch import (
    BISECTIONS,
    PAIRS,
    TRIAL_SECONDS,
    WRITE_BATCH,
    base_entries,
    check_routed,
    entry_updates,
    first_pass_rate,
    highest_rate,
    miss_frames,
)
from controller.hsm.naive import compile_naive
from controller.hsm.rules import AclRule, parse_classbench
from controller.hsm.tables import compile_tables
from opengate import p4constants as pc
from opengate.entries import TableEntry
from opengate.netutil import require_root, veth_pairs
from opengate.p4info import P4Schema
from opengate.p4rt import P4RuntimeClient
from opengate.switch import running_switch
from opengate.target import (
    BMV2_BINARY,
    TargetChoice,
    TargetError,
    p4_build_dir,
    repo_root,
    select_target,
    shared_data_dir,
)
from opengate.testbed import INSIDE, OUTSIDE
from softswitch.p4runtime_server import P4RuntimeServer
from softswitch.switch import Switch

CLASSBENCH = "classbench/acl1_10k"


def _updates(build: Path, entries: list[TableEntry]) -> tuple[P4Schema, list[p4r.Update]]:
    schema = P4Schema.load(build / "opengate.p4info.txtpb")
    return schema, entry_updates(schema, [*base_entries(), *entries])


def rate(build: Path, entries: list[TableEntry], frames: list[bytes], seconds: float) -> float:
    """Install `build` and `entries` on a fresh software switch; packets/s of `frames`."""
    schema, updates = _updates(build, entries)
    switch = Switch(device_id=1, cpu_port=pc.CPU_PORT)
    server = P4RuntimeServer(switch, "127.0.0.1:0")
    server.start()
    try:
        with P4RuntimeClient(f"127.0.0.1:{server.port}", 1, 10).connect() as client:
            client.set_pipeline(schema.p4info, (build / "opengate.json").read_bytes())
            for i in range(0, len(updates), WRITE_BATCH):
                client.write(updates[i : i + WRITE_BATCH])
        dp = switch.dataplane
        assert dp is not None
        check_routed(dp, frames, f"{build.name}: HSM miss")
        # every pass on fresh registers, so that each frame is classified (not admitted by the
        # session slot its previous pass made); natively, the pipeline alone in one C loop
        return first_pass_rate(dp, frames, seconds, c_loop=dp.native)
    finally:
        switch.set_dataplane(None)
        server.stop()


@dataclass(frozen=True)
class Rates:
    """One or more measurements of a rate (packets/s; None: a search found no rate kept up
    with), reported as their median and, when repeated, their range."""

    rates: tuple[float | None, ...]

    @property
    def median(self) -> float | None:
        found = sorted(r for r in self.rates if r is not None)
        return statistics.median(found) if found else None

    def __str__(self) -> str:
        found = [r for r in self.rates if r is not None]
        median = self.median
        if median is None:
            return "-"
        if len(self.rates) < 2:
            return f"{median:,.0f}"
        return f"{median:,.0f} ({min(found):,.0f}-{max(found):,.0f})"


def veth_rate(
    choice: TargetChoice,
    build: Path,
    entries: list[TableEntry],
    frames: list[bytes],
    repeat: int = 1,
    bisections: int = BISECTIONS,
) -> Rates:
    """Through veths (bench_softswitch's method): the highest rate the switch keeps up with,
    searched `repeat` times on one switch."""
    schema, updates = _updates(build, entries)
    log = repo_root() / "run" / "bench" / f"hybrid-{choice.target.value}.log"
    with (
        veth_pairs(PAIRS),
        running_switch({INSIDE: PAIRS[0][0], OUTSIDE: PAIRS[1][0]}, log, choice) as sw,
        P4RuntimeClient(sw.grpc_address, 1, 10).connect() as client,
    ):
        client.set_pipeline(schema.p4info, (build / "opengate.json").read_bytes())
        for i in range(0, len(updates), WRITE_BATCH):
            client.write(updates[i : i + WRITE_BATCH])
        found = []
        for _ in range(repeat):
            good, _bad = highest_rate(frames, bisections=bisections)
            found.append(good.received / TRIAL_SECONDS if good is not None else None)
        return Rates(tuple(found))


@dataclass
class Measured:
    rules: int
    how: str
    compile_seconds: float
    pps: dict[str, tuple[Rates, Rates]]  # where -> (default build, naive profile)


def measure(
    rules: list[AclRule],
    seconds: float,
    targets: list[TargetChoice],
    in_process: bool = True,
    repeat: int = 1,
    bisections: int = BISECTIONS,
) -> Measured:
    frames = miss_frames(rules, 1000)
    started = time.perf_counter()
    hybrid = compile_tables(rules, [], fallback=False)
    compile_seconds = time.perf_counter() - started
    stats = hybrid.stats
    how = "HSM alone"
    if any(stats.partition_terms) or stats.acl_spilled:
        parts = 1 + sum(1 for n in stats.partition_terms if n)
        how = f"hybrid: {parts} partition{'s' * (parts > 1)}, {stats.acl_spilled} spilled"
    default_build, naive_build = p4_build_dir(), p4_build_dir() / "naive_acl"
    hybrid_entries = list(hybrid.entries)
    naive_entries = list(compile_naive(rules, []).entries)
    builds = ((default_build, hybrid_entries), (naive_build, naive_entries))
    pps: dict[str, tuple[Rates, Rates]] = {}
    if in_process:
        hybrid_rate, naive_rate = (
            Rates((rate(build, entries, frames, seconds),)) for build, entries in builds
        )
        pps["software switch, in process"] = (hybrid_rate, naive_rate)
    for choice in targets:
        hybrid_rate, naive_rate = (
            veth_rate(choice, build, entries, frames, repeat, bisections)
            for build, entries in builds
        )
        pps[f"{choice.target.value}, through veths"] = (hybrid_rate, naive_rate)
    return Measured(len(rules), how, compile_seconds, pps)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="each measurement")
    parser.add_argument("--sizes", default="100,1000,0", help="rule counts (0: all)")
    parser.add_argument("--no-e2e", action="store_true", help="in process only")
    parser.add_argument(
        "--targets", default="soft,bmv2", help="through veths on these (soft, bmv2)"
    )
    parser.add_argument("--no-in-process", action="store_true", help="through veths only")
    parser.add_argument("--repeat", type=int, default=1, help="rate searches through veths")
    parser.add_argument("--bisections", type=int, default=BISECTIONS, help="of each search")
    args = parser.parse_args(argv)
    wanted = {t.strip() for t in args.targets.split(",") if t.strip()}
    if not wanted <= {"soft", "bmv2"}:
        parser.error(f"--targets: unknown {', '.join(sorted(wanted - {'soft', 'bmv2'}))}")
    if args.repeat < 1 or args.bisections < 0:
        parser.error("--repeat must be at least 1 and --bisections at least 0")
    path = shared_data_dir() / CLASSBENCH
    if not path.is_file():
        print(f"bench_hybrid: skipped, {path} is missing\n")
        return 0
    targets: list[TargetChoice] = []
    notes = []
    if not args.no_e2e:
        reason = require_root("through veths")
        if reason:
            notes.append(f"through veths: skipped ({reason})")
        else:
            if "soft" in wanted:
                targets.append(select_target({**os.environ, "TARGET": "soft"}))
            if "bmv2" in wanted:
                try:
                    targets.append(select_target({**os.environ, "TARGET": "bmv2"}))
                except TargetError:
                    notes.append(f"BMv2: skipped ({BMV2_BINARY} not on PATH)")
    everything = parse_classbench(path)
    rows = [
        measure(
            everything[:size] if size else everything,
            args.seconds,
            targets,
            not args.no_in_process,
            args.repeat,
            args.bisections,
        )
        for size in (int(s) for s in args.sizes.split(","))
    ]
    if not rows[0].pps:
        print("bench_hybrid: nothing to measure (no target through veths, in process off)")
        return 1
    print(f"HSM-miss path, {CLASSBENCH}, packets/s: the default build against the naive profile\n")
    print(
        "| where | rules | default build's tables | compile | default build | naive profile "
        "| default / naive |"
    )
    print("|---|---:|---|---:|---:|---:|---:|")
    for where in rows[0].pps:
        for m in rows:
            hybrid_rates, naive_rates = m.pps[where]
            hybrid_pps, naive_pps = hybrid_rates.median, naive_rates.median
            ratio = f"{hybrid_pps / naive_pps:.2f}x" if hybrid_pps and naive_pps else "-"
            print(
                f"| {where} | {m.rules:,} | {m.how} | {m.compile_seconds:.1f} s | "
                f"{hybrid_rates} | {naive_rates} | {ratio} |"
            )
        first, last = rows[0].pps[where][0].median, rows[-1].pps[where][0].median
        if first and last:
            notes.append(
                f"{where}: the default build at {rows[-1].rules:,} rules keeps "
                f"{last / first:.2f}x its rate at {rows[0].rules:,}"
            )
    print()
    for note in notes:
        print(f"- {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
