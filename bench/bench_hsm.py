"""HSM with integrated segmentation (IPP) against two separate HSMs and the ternary baseline.

For each ClassBench set (acl1, fw1, ipc1; 1k and 10k rules) with the Snort 3 community rules as
the IDS set (all 3,488, commented ones included; HOME_NET the RFC 1918 networks, EXTERNAL_NET
!$HOME_NET), compile in a fresh process and report:

* IPP: compile time, entries per table, bytes (memory model of controller/hsm/stats.py), table
  lookups and memory accesses per packet (binary-search model for the segment tables), peak RSS
  of the compiling process;
* two separate HSMs (ACL, then IDS): the same rule sets compiled one at a time. Their aggregation
  tables are the same as IPP's; the segment tables and the lookups differ;
* when the HSM tables do not fit a bank (half of each table's size in p4src/include/sizes.p4),
  the entries they would need (measured without building them) and the remedy the compiler
  applies: the hybrid (more ACL partitions, then the fewest rules spilled into the spill
  tables), compiled as the controller does, with its time, spilled rules, fill of each table's
  bank, lookups and memory accesses per packet; or why it does not fit;
* the naive profile (acl_naive + ids_naive) for every set.

    .venv/bin/python -m bench.bench_hsm [--sets acl1_1k,...] [--home-net any]

About three minutes on two cores.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

from controller.hsm.compile import TableOverflow, compile_hsm, measure_hsm
from controller.hsm.naive import compile_naive
from controller.hsm.rules import AclRule, IdsRule, parse_classbench
from controller.hsm.schema import (
    ACL_CHAIN,
    IDS_CHAIN,
    PARTITION_CHAINS,
    SEGMENT_TABLES,
    table_capacity,
)
from controller.hsm.snort_header import load_ids_file
from controller.hsm.tables import compile_tables
from opengate.snort.header import SnortVariables
from opengate.target import shared_data_dir

SETS = ("acl1_1k", "fw1_1k", "ipc1_1k", "acl1_10k", "fw1_10k", "ipc1_10k")
RFC1918 = "[10.0.0.0/8,172.16.0.0/12,192.168.0.0/16]"


@dataclass
class Result:
    name: str
    acl_rules: int = 0
    ids_rules: int = 0
    ids_terms: int = 0
    fits: bool = False
    overflow: str = ""
    ipp_seconds: float = 0.0
    separate_seconds: float = 0.0
    tables: dict[str, int] = field(default_factory=dict)
    table_bytes: dict[str, int] = field(default_factory=dict)
    segment_bytes: int = 0
    separate_segment_bytes: int = 0
    segment_entries_separate: int = 0
    lookups: int = 0
    separate_lookups: int = 0
    accesses: int = 0
    separate_accesses: int = 0
    needed: dict[str, str] = field(default_factory=dict)
    measure_seconds: float = 0.0
    naive_entries: dict[str, int] = field(default_factory=dict)
    naive_bytes: int = 0
    naive_seconds: float = 0.0
    peak_mib: float = 0.0
    hybrid_seconds: float = 0.0
    hybrid_error: str = ""
    partition_terms: tuple[int, ...] = ()
    acl_spilled: int = 0
    ids_spilled: int = 0
    hybrid_tables: dict[str, int] = field(default_factory=dict)
    hybrid_bytes: int = 0
    hybrid_lookups: int = 0
    hybrid_accesses: int = 0


def run_one(name: str, data: str, home_net: str) -> Result:
    """Runs in a fresh process, so that its peak RSS is this compile's."""
    result = Result(name)
    acl = parse_classbench(Path(data) / "classbench" / name)
    values = {"HOME_NET": home_net}
    if home_net != "any":
        values["EXTERNAL_NET"] = "!$HOME_NET"
    headers, _ = load_ids_file(
        Path(data) / "snort" / "snort3-community.rules",
        variables=SnortVariables().with_values(values),
        include_commented=True,
    )
    ids = list(headers.rules)
    result.acl_rules, result.ids_rules = len(acl), len(ids)
    started = time.perf_counter()
    try:
        compiled = compile_hsm(acl, ids)
    except TableOverflow as overflow:
        result.ipp_seconds = time.perf_counter() - started
        result.overflow = str(overflow)
        started = time.perf_counter()
        sizes = measure_hsm(acl, ids)
        result.measure_seconds = time.perf_counter() - started
        result.needed = {table: str(size) for table, size in sizes.items()}
        _hybrid(result, acl, ids)
    else:
        result.ipp_seconds = time.perf_counter() - started
        result.fits = True
        stats = compiled.stats
        result.ids_terms = stats.ids_terms
        result.tables = {t.table: t.entries for t in stats.tables}
        result.table_bytes = {t.table: t.bytes for t in stats.tables}
        result.segment_bytes = stats.segment_bytes()
        result.separate_segment_bytes = stats.separate_segment_bytes()
        result.segment_entries_separate = sum(
            n for side in stats.segment_entries_alone.values() for n in side.values()
        )
        result.lookups, result.separate_lookups = (
            stats.lookups_per_packet,
            stats.separate_lookups_per_packet,
        )
        result.accesses = stats.memory_accesses()
        result.separate_accesses = stats.separate_memory_accesses()
        del compiled
        started = time.perf_counter()
        compile_hsm(acl, [])
        compile_hsm([], ids)
        result.separate_seconds = time.perf_counter() - started
    started = time.perf_counter()
    naive = compile_naive(acl, ids, limits={"acl_naive": 10**7, "ids_naive": 10**7})
    result.naive_seconds = time.perf_counter() - started
    result.naive_entries = {t.table: t.entries for t in naive.stats.tables}
    result.naive_bytes = naive.stats.total_bytes
    result.peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def _hybrid(result: Result, acl: Sequence[AclRule], ids: Sequence[IdsRule]) -> None:
    """What the controller installs when HSM alone does not fit: the hybrid."""
    started = time.perf_counter()
    try:
        compiled = compile_tables(acl, ids, fallback=False)
    except TableOverflow as overflow:
        result.hybrid_error = str(overflow)
    else:
        stats = compiled.stats
        result.partition_terms = stats.partition_terms
        result.acl_spilled, result.ids_spilled = stats.acl_spilled, stats.ids_spilled
        result.hybrid_tables = {t.table: t.entries for t in stats.tables}
        result.hybrid_bytes = stats.total_bytes
        result.hybrid_lookups = stats.lookups_per_packet
        result.hybrid_accesses = stats.memory_accesses()
    result.hybrid_seconds = time.perf_counter() - started


def _fill(r: Result, *tables: str) -> str:
    """Entries of the fullest of `tables`, as a share of its bank."""
    return f"{max(r.hybrid_tables.get(t, 0) / (table_capacity(t) // 2) for t in tables):.0%}"


def _kb(n: int) -> str:
    return f"{n / 1024:,.1f}"


def _ratio(ours: float, peer: float) -> str:
    return f"{ours / peer:.2f}x" if peer else "n/a"


def report(results: list[Result], home_net: str) -> None:
    print(
        f"IDS set: snort3-community.rules, all rules (commented included), HOME_NET={home_net}"
        + (", EXTERNAL_NET=!$HOME_NET" if home_net != "any" else "")
        + ". Budget per bank: half of each table (segment 32,768, pair and final 524,288).\n"
    )
    fitting = [r for r in results if r.fits]
    if fitting:
        print("### IPP against two separate HSMs (sets whose tables fit)\n")
        print("| set | figure | IPP | two separate HSMs | IPP / separate |")
        print("|---|---|---:|---:|---:|")
        for r in fitting:
            seg = sum(n for t, n in r.tables.items() if t.endswith("_segment"))
            total = sum(r.table_bytes.values())
            separate_total = total - r.segment_bytes + r.separate_segment_bytes
            figures: list[tuple[str, str, str, float, float]] = [
                (
                    "compile (s)",
                    f"{r.ipp_seconds:.1f}",
                    f"{r.separate_seconds:.1f}",
                    r.ipp_seconds,
                    r.separate_seconds,
                ),
                (
                    "segment entries",
                    f"{seg:,}",
                    f"{r.segment_entries_separate:,}",
                    seg,
                    r.segment_entries_separate,
                ),
                (
                    "segment KiB",
                    _kb(r.segment_bytes),
                    _kb(r.separate_segment_bytes),
                    r.segment_bytes,
                    r.separate_segment_bytes,
                ),
                ("total KiB", _kb(total), _kb(separate_total), total, separate_total),
                (
                    "lookups/pkt",
                    f"{r.lookups}",
                    f"{r.separate_lookups}",
                    r.lookups,
                    r.separate_lookups,
                ),
                (
                    "memory accesses/pkt",
                    f"{r.accesses}",
                    f"{r.separate_accesses}",
                    r.accesses,
                    r.separate_accesses,
                ),
            ]
            for figure, ipp, separate, a, b in figures:
                print(f"| {r.name} | {figure} | {ipp} | {separate} | {_ratio(a, b)} |")
        print()
        print("### IPP's rules and tables\n")
        print(
            "| set | ACL rules | IDS rules (terms) | ACL pair + verdict entries | IDS pair + class "
            "entries | peak RSS (MiB) |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        for r in fitting:
            acl = sum(r.tables.get(t, 0) for t in ("acl_addr_pair", "acl_port_pair", "acl_verdict"))
            ids = sum(
                r.tables.get(t, 0) for t in ("ids_addr_pair", "ids_port_pair", "ids_classification")
            )
            print(
                f"| {r.name} | {r.acl_rules:,} | {r.ids_rules:,} ({r.ids_terms}) | {acl:,} | "
                f"{ids:,} | {r.peak_mib:,.0f} |"
            )
        print()
        print("### Entries per table (IPP)\n")
        tables = sorted({t for r in fitting for t in r.tables})
        print("| set | " + " | ".join(tables) + " |")
        print("|" + "---|" * (len(tables) + 1))
        for r in fitting:
            print(f"| {r.name} | " + " | ".join(f"{r.tables.get(t, 0):,}" for t in tables) + " |")
        print()
    over = [r for r in results if not r.fits]
    if over:
        print("### Sets whose HSM tables do not fit (entries the unbounded compile would need)\n")
        print(
            "| set | stopped after (s) | acl_addr_pair | acl_port_pair | acl_verdict | "
            "ids_addr_pair | ids_port_pair | ids_classification | measured in (s) | remedy |"
        )
        print("|" + "---|" * 10)
        for r in over:
            n = r.needed
            print(
                f"| {r.name} | {r.ipp_seconds:.1f} | {n.get('acl_addr_pair', '')} | "
                f"{n.get('acl_port_pair', '')} | {n.get('acl_verdict', '')} | "
                f"{n.get('ids_addr_pair', '')} | {n.get('ids_port_pair', '')} | "
                f"{n.get('ids_classification', '')} | {r.measure_seconds:.1f} | naive profile: "
                f"{sum(r.naive_entries.values()):,} entries |"
            )
        print(
            "\n`~`: estimated (non-empty candidate class pairs, times the protocol classes for the "
            "final table), counting exactly would take too long; n/a: not measured because the "
            "address-pair table before it was already estimated.\n"
        )
        print("### The hybrid the controller installs for them\n")
        print(
            "| set | ACL rules | other partitions (terms) | spilled ACL / IDS (share of "
            "the ACL) | compile (s) | fullest segment table | ACL chains' fullest table | "
            "IDS chain's fullest table | KiB | lookups/pkt | memory accesses/pkt |"
        )
        print("|" + "---|" * 11)
        for r in over:
            if r.hybrid_error:
                print(
                    f"| {r.name} | {r.acl_rules:,} | does not fit: {r.hybrid_error} | | "
                    f"{r.hybrid_seconds:.1f} | | | | | | |"
                )
                continue
            segments = [t.name for t in SEGMENT_TABLES]
            acl_tables = [
                t
                for c in (ACL_CHAIN, *PARTITION_CHAINS)
                for t in (c.addr_pair, c.port_pair, c.final)
            ]
            ids_tables = [IDS_CHAIN.addr_pair, IDS_CHAIN.port_pair, IDS_CHAIN.final]
            held = [n for n in r.partition_terms if n] or [0]
            print(
                f"| {r.name} | {r.acl_rules:,} | {' / '.join(f'{n:,}' for n in held)} | "
                f"{r.acl_spilled} / "
                f"{r.ids_spilled} ({r.acl_spilled / r.acl_rules:.1%}) | {r.hybrid_seconds:.1f} | "
                f"{_fill(r, *segments)} | {_fill(r, *acl_tables)} | {_fill(r, *ids_tables)} | "
                f"{_kb(r.hybrid_bytes)} | {r.hybrid_lookups} | {r.hybrid_accesses} |"
            )
        print()
    print("### The ternary baseline (naive profile, -DWITH_NAIVE_ACL) against what is installed\n")
    print(
        "| set | installed | acl_naive entries | ids_naive entries | naive KiB | installed KiB "
        "| naive / installed KiB | naive compile (s) | installed compile (s) | lookups/pkt naive "
        "/ installed |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in results:
        if r.fits:
            how, size, seconds, lookups = (
                "IPP",
                sum(r.table_bytes.values()),
                r.ipp_seconds,
                r.lookups,
            )
        elif not r.hybrid_error:
            how, size, seconds = "hybrid", r.hybrid_bytes, r.hybrid_seconds
            lookups = r.hybrid_lookups
        else:
            how, size, seconds, lookups = "nothing fits", 0, r.hybrid_seconds, 0
        installed = (_kb(size), _ratio(r.naive_bytes, size)) if size else ("-", "-")
        print(
            f"| {r.name} | {how} | {r.naive_entries.get('acl_naive', 0):,} | "
            f"{r.naive_entries.get('ids_naive', 0):,} | {_kb(r.naive_bytes)} | {installed[0]} | "
            f"{installed[1]} | {r.naive_seconds:.1f} | {seconds:.1f} | "
            f"2 (TCAM) / {lookups or '-'} |"
        )
    print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--home-net", default=RFC1918, help="HOME_NET ('any': Snort's default)")
    args = parser.parse_args(argv)
    data = shared_data_dir()
    if not (data / "classbench").is_dir() or not (data / "snort").is_dir():
        print(f"reference data missing under {data}; nothing to measure", file=sys.stderr)
        return 1
    results = []
    context = get_context("spawn")
    for name in args.sets.split(","):
        with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            results.append(pool.submit(run_one, name, str(data), args.home_net).result())
        print(f"measured {name}", file=sys.stderr, flush=True)
    report(results, args.home_net)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
