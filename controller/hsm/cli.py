"""`opengate hsm ...`: compile rule files into classification tables, classify packets.

    opengate hsm compile RULES [--ids SNORT_RULES] [--stats] [--output FILE]
    opengate hsm classify RULES [--ids SNORT_RULES] [--engine hsm|linear]

RULES is a ClassBench filter set (first match wins). `classify` reads packets from stdin, one
per line, `SRC_IP DST_IP SPORT DPORT PROTO`, and prints `ACL_INDEX IDS_CLASS` per packet
(-1: no ACL rule matched; IDS class 0: no inspection), walking the compiled tables as the P4
pipeline does (`--engine hsm`) or searching the rules in order (`--engine linear`).
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Never, TextIO

from google.protobuf import text_format
from google.protobuf.message import DecodeError
from tqdm import tqdm

from controller.hsm import schema
from controller.hsm.compile import CompiledTables, Profile, Progress, TableOverflow
from controller.hsm.linear import LinearClassifier
from controller.hsm.lookup import TableState, Walker
from controller.hsm.rules import AclRule, IdsRule, parse_classbench
from controller.hsm.snort_header import ClassMap, HeaderNote, load_class_map, load_ids_file
from controller.hsm.tables import compile_tables
from opengate.entries import Exact, Lpm, MatchValue, Range, TableEntry, Ternary
from opengate.errors import ConfigError
from opengate.fields import Packet
from opengate.p4info import P4Schema
from opengate.snort.header import SnortVariables, parse_assignment

LOG = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "hsm", help="compile ACL + IDS rules into the HSM classification tables"
    )
    sub = parser.add_subparsers(dest="hsm_command", required=True, metavar="ACTION")

    compile_parser = sub.add_parser("compile", help="compile rule files into table entries")
    _common(compile_parser)
    compile_parser.add_argument(
        "--stats", action="store_true", help="print entries and bytes per table, lookups, time"
    )
    compile_parser.add_argument(
        "--output", metavar="FILE", help="write the entries as JSON lines ('-': stdout)"
    )
    compile_parser.add_argument(
        "--p4info",
        metavar="FILE",
        help="the table sizes of this build's P4Info instead of the v1model build's (e.g. "
        "p4src/build/tofino/tofino2-default.p4info.txtpb); a spill table it lacks takes no rules",
    )
    compile_parser.set_defaults(handler=run_compile)

    classify_parser = sub.add_parser(
        "classify", help="classify packets read from stdin ('SRC DST SPORT DPORT PROTO')"
    )
    _common(classify_parser)
    classify_parser.add_argument(
        "--engine",
        choices=("hsm", "linear"),
        default="hsm",
        help="hsm: walk the compiled tables as the P4 pipeline does; linear: search the rules in "
        "order",
    )
    classify_parser.add_argument(
        "--verbose",
        action="store_true",
        help="also print the ACL action and the IDS rule index",
    )
    classify_parser.set_defaults(handler=run_classify)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rules", metavar="RULES", help="ACL rules, ClassBench format")
    parser.add_argument("--ids", metavar="SNORT_RULES", help="Snort 3 rules file (IDS headers)")
    parser.add_argument(
        "--include-commented",
        action="store_true",
        help="also compile rules commented out with '#'",
    )
    parser.add_argument(
        "--var",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a Snort variable, e.g. HOME_NET=[10.0.0.0/8] (repeatable)",
    )
    parser.add_argument("--vars", metavar="FILE", help="Snort variables file (NAME = value)")
    parser.add_argument("--class-map", metavar="FILE", help="YAML: rule -> IDS class")
    parser.add_argument(
        "--keep-going",
        action="store_true",
        help="skip (and report) IDS rules that do not parse instead of stopping",
    )
    parser.add_argument(
        "--no-fallback",
        action="store_true",
        help="fail instead of falling back to the naive profile when HSM does not fit",
    )
    parser.add_argument("--acl-limit", type=int, metavar="N", help="use only the first N ACL rules")


@dataclass(frozen=True, slots=True)
class _Inputs:
    acl: list[AclRule]
    ids: list[IdsRule]
    ids_total: int
    notes: tuple[HeaderNote, ...]
    errors: tuple[ConfigError, ...]


def _load(args: argparse.Namespace) -> _Inputs:
    acl = parse_classbench(args.rules, limit=args.acl_limit)
    if not args.ids:
        return _Inputs(acl, [], 0, (), ())
    variables = SnortVariables()
    if args.vars:
        variables = SnortVariables.load(args.vars, variables)
    if args.var:
        variables = variables.with_values(
            dict(parse_assignment(a) for a in args.var), origin="--var"
        )
    class_map = load_class_map(args.class_map) if args.class_map else ClassMap()
    headers, errors = load_ids_file(
        args.ids,
        variables=variables,
        class_map=class_map,
        include_commented=args.include_commented,
        strict=not args.keep_going,
    )
    return _Inputs(acl, list(headers.rules), headers.total, headers.notes, errors)


class _Bars:
    """A tqdm bar per long phase, on stderr (hidden when stderr is not a terminal)."""

    def __init__(self) -> None:
        self.bars: dict[str, tqdm[Never]] = {}

    def __call__(self, phase: str, done: int, total: int) -> None:
        if total < 2048 and phase not in self.bars:
            return
        bar = self.bars.get(phase)
        if bar is None:
            bar = tqdm(
                total=total, desc=phase, unit="class", leave=False, disable=None, file=sys.stderr
            )
            self.bars[phase] = bar
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()


@contextmanager
def _progress() -> Iterator[Progress]:
    bars = _Bars()
    try:
        yield bars
    finally:
        bars.close()


def _compile(args: argparse.Namespace, inputs: _Inputs) -> CompiledTables:
    limits, hybrid = None, True
    if getattr(args, "p4info", None):
        limits = limits_from_p4info(Path(args.p4info))
        hybrid = any(limits[t] for t in schema.SPILL_TABLES.values())
    with _progress() as progress:
        try:
            return compile_tables(
                inputs.acl,
                inputs.ids,
                fallback=not args.no_fallback,
                limits=limits,
                hybrid=hybrid,
                progress=progress,
            )
        except TableOverflow as overflow:
            raise ConfigError(f"the rule sets do not fit the tables: {overflow}") from None


def limits_from_p4info(path: Path) -> dict[str, int]:
    """Entries per bank (half the size) of the classification tables a P4Info declares; bf-p4c
    names its tables `pipe.<name>`. A hybrid table the program lacks holds nothing (0)."""
    try:
        info = P4Schema.load(path).p4info
    except (OSError, UnicodeDecodeError, text_format.ParseError, DecodeError) as exc:
        raise ConfigError(f"--p4info {path}: {exc}") from None
    limits = schema.program_limits({t.preamble.name: t.size for t in info.tables})
    missing = [t for t in schema.HSM_TABLES if t not in limits]
    if missing and not (schema.ACL_NAIVE in limits and schema.IDS_NAIVE in limits):
        raise ConfigError(f"--p4info {path}: no HSM tables ({', '.join(missing)}) nor naive ones")
    return limits


def run_compile(args: argparse.Namespace) -> int:
    inputs = _load(args)
    compiled = _compile(args, inputs)
    if args.output:
        if args.output == "-":
            _write_entries(compiled.entries, sys.stdout)
        else:
            with open(args.output, "w", encoding="utf-8") as handle:
                _write_entries(compiled.entries, handle)
    if args.stats:
        _print_stats(args, inputs, compiled)
    elif not args.output:
        stats = compiled.stats
        print(
            f"{stats.profile}: {stats.total_entries} entries, {stats.total_bytes} bytes, "
            f"{stats.compile_seconds:.2f}s"
        )
    return 0


def _write_entries(entries: Sequence[TableEntry], out: TextIO) -> None:
    for entry in entries:
        record: dict[str, object] = {
            "table": entry.table,
            "match": {name: _json_value(value) for name, value in entry.match},
            "action": entry.action,
            "params": dict(entry.params),
        }
        if entry.priority:
            record["priority"] = entry.priority
        out.write(json.dumps(record, separators=(",", ":")) + "\n")


def _json_value(value: MatchValue) -> object:
    if isinstance(value, Exact):
        return value.value
    if isinstance(value, Lpm):
        return [value.value, value.prefix_len]
    if isinstance(value, Ternary):
        return {"value": value.value, "mask": value.mask}
    if isinstance(value, Range):
        return {"low": value.low, "high": value.high}
    return value.value


def _print_stats(args: argparse.Namespace, inputs: _Inputs, compiled: CompiledTables) -> None:
    stats = compiled.stats
    print(f"ACL rules: {len(inputs.acl)} ({args.rules})")
    if args.ids:
        skipped = [n for n in inputs.notes if n.kind != "ports-ignored"]
        ignored = [n for n in inputs.notes if n.kind == "ports-ignored"]
        print(
            f"IDS rules: {inputs.ids_total} parsed ({args.ids}), {len(inputs.ids)} headers "
            f"compiled, {len(skipped)} cannot be expressed, {len(ignored)} with ports ignored, "
            f"{len(inputs.errors)} rejected"
        )
        for note in skipped[:20]:
            print(f"  {note}")
        for error in inputs.errors[:20]:
            print(f"  rejected: {error}")
    print(
        f"match terms: ACL {stats.acl_terms}, IDS {stats.ids_terms} (one per rule and direction; "
        "rules that can never be a first match are dropped)"
    )
    print(f"profile: {stats.profile}")
    if any(stats.partition_terms):
        sides = zip(schema.PARTITION_SIDES, stats.partition_terms, strict=False)
        held = ", ".join(f"{n} in {side}_*" for side, n in sides if n)
        print(f"  hybrid: ACL terms in the other partitions: {held}")
    if stats.spilled:
        print(
            f"  hybrid: {stats.acl_spilled} ACL and {stats.ids_spilled} IDS rules spilled into "
            "acl_spill / ids_spill (HSM alone does not fit the tables)"
        )
    if stats.fallback_reason:
        print(f"  ({stats.fallback_reason}; the NPM needs the -DWITH_NAIVE_ACL build)")
    print()
    print(f"{'table':<22}{'entries':>12}{'bytes':>14}")
    for table in stats.tables:
        print(f"{table.table:<22}{table.entries:>12}{table.bytes:>14}")
    print(f"{'total':<22}{stats.total_entries:>12}{stats.total_bytes:>14}")
    print()
    if compiled.profile is Profile.HSM:
        print(
            f"lookups per packet: {stats.lookups_per_packet} (two separate HSMs: "
            f"{stats.separate_lookups_per_packet})"
        )
        print(
            f"memory accesses per packet (binary-search segments): {stats.memory_accesses()} "
            f"(separate: {stats.separate_memory_accesses()})"
        )
        print(
            f"segment tables: {stats.segment_bytes()} bytes (separate: "
            f"{stats.separate_segment_bytes()})"
        )
        classes = ", ".join(f"{k} {v}" for k, v in stats.classes.items())
        print(f"classes: {classes}")
    else:
        print(f"lookups per packet: {stats.lookups_per_packet} (ternary)")
    phases = ", ".join(f"{name} {seconds:.2f}s" for name, seconds in stats.phases)
    print(f"compile time: {stats.compile_seconds:.2f}s" + (f" ({phases})" if phases else ""))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory of this process: {peak:.0f} MiB")


def run_classify(args: argparse.Namespace) -> int:
    inputs = _load(args)
    if args.engine == "linear":
        classify = LinearClassifier(inputs.acl, inputs.ids).classify
    else:
        compiled = _compile(args, inputs)
        classify = Walker(TableState(compiled.entries)).classify
    for number, line in enumerate(sys.stdin, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            packet = Packet.parse(text)
        except ValueError as exc:
            raise ConfigError(str(exc), path="<stdin>", line=number) from None
        result = classify(packet)
        if args.verbose:
            action = result.acl_action or "-"
            print(f"{result.acl_rule} {result.ids_class} {action} {result.ids_rule}")
        else:
            print(f"{result.acl_rule} {result.ids_class}")
    return 0


__all__ = ["register", "run_classify", "run_compile", "schema"]
