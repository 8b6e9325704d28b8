"""Classification cost against rule-set size: the hybrid (HSM plus spill tables) against the naive
ternary profile, on the software switch, in process (issue #17).

For the first 100, 1,000 and all 9,774 rules of ClassBench acl1_10k (all PERMIT), the same
base configuration is installed on the switch twice: with the default build
(p4src/build/opengate.json) and the tables `compile_tables` makes (HSM alone, or the hybrid when
HSM alone does not fit), and with the `-DWITH_NAIVE_ACL` build (p4src/build/naive_acl/) and the
naive profile's ternary entries. Then the HSM-miss path of `bench_softswitch` is timed: 1,000
session-opening packets drawn inside the rules (each classified, permitted, reported by a digest
and routed out), `Dataplane.process` in a loop. Every packet is checked to leave on the outside
port first.

    .venv/bin/python -m bench.bench_hybrid [--seconds S] [--sizes 100,1000,0]

(0: the whole set.) About two minutes on two cores, most of it compiling and installing the
10k set. BMv2 is not measured here (its naive profile is a linear scan as well).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from finsy.proto import p4r

from bench.bench_softswitch import (
    WRITE_BATCH,
    base_entries,
    check_routed,
    engine_rate,
    machine,
    miss_frames,
)
from controller.hsm.naive import compile_naive
from controller.hsm.rules import AclRule, parse_classbench
from controller.hsm.tables import compile_tables
from opengate import p4constants as pc
from opengate.entries import TableEntry
from opengate.p4info import P4Schema
from opengate.p4rt import P4RuntimeClient
from opengate.target import p4_build_dir, shared_data_dir
from softswitch.p4runtime_server import P4RuntimeServer
from softswitch.switch import Switch

CLASSBENCH = "classbench/acl1_10k"


def rate(build: Path, entries: list[TableEntry], frames: list[bytes], seconds: float) -> float:
    """Install `build` and `entries` on a fresh software switch; packets/s of `frames`."""
    schema = P4Schema.load(build / "opengate.p4info.txtpb")
    updates = []
    for entry in [*base_entries(), *entries]:
        kind = p4r.Update.MODIFY if entry.is_default else p4r.Update.INSERT
        updates.append(
            p4r.Update(type=kind, entity=p4r.Entity(table_entry=schema.encode_entry(entry)))
        )
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
        return engine_rate(dp, frames, seconds)
    finally:
        server.stop()


def measure(rules: list[AclRule], seconds: float) -> tuple[str, float, float, float]:
    frames = miss_frames(rules, 1000)
    started = time.perf_counter()
    hybrid = compile_tables(rules, [], fallback=False)
    compile_seconds = time.perf_counter() - started
    how = f"hybrid, {hybrid.stats.acl_spilled} spilled" if hybrid.stats.acl_spilled else "HSM alone"
    main_build = p4_build_dir()
    hybrid_pps = rate(main_build, list(hybrid.entries), frames, seconds)
    naive = compile_naive(rules, [])
    naive_pps = rate(main_build / "naive_acl", list(naive.entries), frames, seconds)
    return how, compile_seconds, hybrid_pps, naive_pps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="each measurement")
    parser.add_argument("--sizes", default="100,1000,0", help="rule counts (0: all)")
    args = parser.parse_args(argv)
    path = shared_data_dir() / CLASSBENCH
    if not path.is_file():
        print(f"bench_hybrid: skipped, {path} is missing\n")
        return 0
    everything = parse_classbench(path)
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        rules = everything[:size] if size else everything
        rows.append((len(rules), *measure(rules, args.seconds)))
    print(f"Machine: {machine()}  ")
    command = " ".join([".venv/bin/python -m bench.bench_hybrid", *(argv or sys.argv[1:])])
    print(f"Command: `{command}`; software switch in process, HSM-miss path, {CLASSBENCH}\n")
    print("| rules | default build | compile | packets/s | naive profile packets/s | ratio |")
    print("|---:|---|---:|---:|---:|---:|")
    for count, how, seconds, hybrid_pps, naive_pps in rows:
        print(
            f"| {count:,} | {how} | {seconds:.1f} s | {hybrid_pps:,.0f} | {naive_pps:,.0f} | "
            f"{hybrid_pps / naive_pps:.2f}x |"
        )
    first, last = rows[0][3], rows[-1][3]
    print(
        f"\nDefault build at {rows[-1][0]:,} rules: {last / first:.2f}x its rate at {rows[0][0]:,}."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
