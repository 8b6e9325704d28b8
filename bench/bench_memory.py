"""What each gateway build of the P4 program costs a switch in memory, and what it classifies.

    python -m bench.bench_memory [--pushes 1]

Memory: for each target at hand (the built-in switch; BMv2 if simple_switch_grpc is installed)
and each gateway build (opengate.target.P4_BUILDS: default, compact), a switch is started empty,
the build is pushed over P4Runtime (PUSHES times, as a controller that reconnects does) and the
switch's resident memory (VmRSS) is read after each push.

Rule sets: the example policy, then with the Snort 3 community rules as its IDS rules and
ClassBench's sets (../shared/data; left out if absent) added to its ACL, compiled as the controller
compiles them for each build (HSM, its other ACL partitions and spill tables; the limits from the
build's P4Info): whether it fits, the fullest table of a bank, lookups per packet. Prints Markdown.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench.bench_rematch import EXAMPLE, example_with
from controller.classifier import acl_rules, ids_rules
from controller.hsm.cli import limits_from_p4info
from controller.hsm.compile import TableOverflow
from controller.hsm.tables import compile_tables
from controller.policy import load_policy
from opengate.p4info import P4Schema
from opengate.p4rt import P4RuntimeClient
from opengate.switch import running_switch
from opengate.target import (
    P4_BUILDS,
    Target,
    TargetChoice,
    TargetError,
    p4_program_dir,
    select_target,
    shared_data_dir,
)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def targets() -> list[TargetChoice]:
    out = [select_target({**os.environ, "TARGET": Target.SOFT.value})]
    try:
        out.append(select_target({**os.environ, "TARGET": Target.BMV2.value}))
    except TargetError as missing:
        print(f"(BMv2 left out: {missing})", file=sys.stderr)
    return out


def memory(pushes: int, folder: Path) -> list[tuple[str, str, float, list[float]]]:
    """(target, build, MiB empty, MiB after each push)."""
    rows = []
    for choice in targets():
        for build in P4_BUILDS:
            program = p4_program_dir(build)
            schema = P4Schema.load(program / "opengate.p4info.txtpb")
            config = (program / "opengate.json").read_bytes()
            log = folder / f"{choice.target.value}-{build}.log"
            with running_switch({}, log, choice) as switch:
                empty = rss_mib(switch.process.pid)
                after = []
                with P4RuntimeClient(switch.grpc_address).connect() as client:
                    for push in range(pushes):
                        client.set_pipeline(schema.p4info, config, cookie=push + 1)
                        after.append(rss_mib(switch.process.pid))
            rows.append((choice.target.value, build, empty, after))
    return rows


def rule_sets() -> Iterator[tuple[str, str]]:
    """(name, policy text) of the rule sets compiled."""
    yield "example policy", example_with()
    data = shared_data_dir()
    community = data / "snort" / "snort3-community.rules"
    if not community.exists():
        print(f"(no {community}: the example policy alone)", file=sys.stderr)
        return
    yield "example + community rules", example_with(community)
    for name in ("acl1_1k", "fw1_1k", "ipc1_1k", "acl1_10k", "fw1_10k", "ipc1_10k"):
        acl = data / "classbench" / name
        if acl.exists():
            yield f"example + {name} + community rules", example_with(community, acl)


def fits() -> list[tuple[str, str, str]]:
    """(rule set, build, what the compile gave)."""
    rows = []
    for name, text in rule_sets():
        policy = load_policy(EXAMPLE, text)  # beside the example, for its relative paths
        acl, ids = acl_rules(policy), ids_rules(policy)
        for build in P4_BUILDS:
            limits = limits_from_p4info(p4_program_dir(build) / "opengate.p4info.txtpb")
            started = time.perf_counter()
            try:
                compiled = compile_tables(acl, ids, limits=limits, fallback=False)
            except TableOverflow as overflow:
                rows.append((name, build, f"does not fit ({overflow})"))
                continue
            seconds = time.perf_counter() - started
            stats = compiled.stats
            fullest = max(
                (t for t in stats.tables if limits.get(t.table, 0) > 0),
                key=lambda t: t.entries / limits[t.table],
            )
            spilled = stats.acl_spilled + stats.ids_spilled
            limit = limits[fullest.table]
            partitions = sum(1 for terms in stats.partition_terms if terms)
            rows.append(
                (
                    name,
                    build,
                    f"fits: fullest {fullest.table} {fullest.entries:,} of {limit:,}"
                    f", {stats.lookups_per_packet} lookups a packet, {spilled} rules spilled, "
                    f"{partitions} other ACL partitions used ({seconds:.1f} s)",
                )
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pushes", type=int, default=1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="og-bench-memory-") as folder:
        rows = memory(args.pushes, Path(folder))
    print(f"A switch's resident memory (VmRSS), empty and after each of {args.pushes} pushes\n")
    print("| target | build | empty MiB | after each push MiB | last push vs the built-in switch |")
    print("|---|---|---:|---|---:|")
    soft = {b: after[-1] for t, b, _, after in rows if t == Target.SOFT.value and after}
    for target, build, empty, after in rows:
        ratio = f"{after[-1] / soft[build]:.2f}x" if after and soft.get(build) else "-"
        pushed = ", ".join(f"{m:,.0f}" for m in after)
        print(f"| {target} | {build} | {empty:,.0f} | {pushed} | {ratio} |")
    print()
    print("What each build's classifier holds, compiled as the controller compiles it\n")
    print("| rule set | build | classifier |")
    print("|---|---|---|")
    for name, build, what in fits():
        print(f"| {name} | {build} | {what} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
