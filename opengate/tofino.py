"""`make tofino`: compile the TNA shell with bf-p4c and write the resource summaries.

For each Tofino generation and profile, bf-p4c compiles p4src/opengate_tna.p4 into a scratch
directory (build-tofino/, not committed); this module then writes, under p4src/build/tofino/:

- `<target>-<profile>.txt`: stages per table, SRAM / TCAM / map RAM blocks per table and per
  stage, and PHV use, read from the compiler's resources.json, followed by the compiler's own
  text reports (table summary, PHV allocation summary), so that a reader needs no tool;
- `<target>-<profile>.p4info.txtpb`: the P4Info bf-p4c made, which a test compares with the
  v1model P4Info (same tables, keys, actions and parameters);
- `SOURCES.sha256`: the digest of what bf-p4c read for those builds (the TNA shell after the C
  preprocessor, for each build's target and defines), which a test compares with today's: a
  change that only the v1model builds see (sizes.p4, code under `#ifdef OG_DP_SESSIONS` of the
  same length) leaves the summaries fresh.

Nothing bf-p4c builds for the device (tofino.bin, context.json) is kept.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opengate.target import repo_root

BF_P4C = "bf-p4c"
DEFAULT_PREFIX = Path("/opt/bf")


@dataclass(frozen=True, slots=True)
class Build:
    target: str  # tofino | tofino2
    arch: str  # tna | t2na
    profile: str  # default | naive_acl | dp_sessions
    defines: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.target}-{self.profile}"


# Tofino 1 (tna) and Tofino 2 (t2na), each with both profiles, and Tofino 2 with the data-plane
# session slots (dp_sessions: flows without NAT, arch/tna_flow_slots.p4). bf-p4c defines
# __TARGET_TOFINO__ (1 or 2), which picks the architecture include and the CPU port in
# include/arch/tna_externs.p4.
BUILDS: tuple[Build, ...] = (
    Build("tofino", "tna", "default", ()),
    Build("tofino", "tna", "naive_acl", ("-DWITH_NAIVE_ACL",)),
    Build("tofino2", "t2na", "default", ()),
    Build("tofino2", "t2na", "naive_acl", ("-DWITH_NAIVE_ACL",)),
    Build("tofino2", "t2na", "dp_sessions", ("-DOG_TNA_DP_SESSIONS",)),
)

# The compiler's own text reports copied into the summary, if it wrote them.
TEXT_REPORTS = ("table_summary.log", "mau.resources.log")
# Lines of those reports that change on every run (left out, so that a summary changes only when
# the compiled program does).
RUN_STAMPS = ("Created on:", "Run ID:")


class BfP4cMissingError(RuntimeError):
    """bf-p4c is not installed."""


def find_bf_p4c(env: dict[str, str] | None = None) -> str:
    env = dict(os.environ if env is None else env)
    explicit = env.get("BF_P4C")
    if explicit:
        if shutil.which(explicit) is None:
            raise BfP4cMissingError(f"BF_P4C={explicit} is not an executable")
        return explicit
    prefix = Path(env.get("BF_PREFIX", str(DEFAULT_PREFIX)))
    path = env.get("PATH", "") + os.pathsep + str(prefix / "bin")
    found = shutil.which(BF_P4C, path=path)
    if found is None:
        raise BfP4cMissingError(
            "bf-p4c (the Tofino backend of p4c) is not installed: it is not on PATH nor in "
            f"{prefix}/bin. It is built from p4c's source (docs/howto/toolchain.md); "
            "without it `make tofino` cannot compile, and p4src/build/tofino/ keeps the "
            "committed summaries."
        )
    return found


def p4_sources(root: Path) -> list[Path]:
    return sorted(
        p for p in (root / "p4src").rglob("*.p4") if "build" not in p.relative_to(root).parts
    )


TNA_SHELL = "p4src/opengate_tna.p4"
# `#include <...>`: the architecture's own files (core.p4, tna.p4, t2na.p4), which come with the
# compiler, not from p4src/.
SYSTEM_INCLUDE = re.compile(r"^\s*#\s*include\s*<([^>]+)>", re.MULTILINE)


class PreprocessorMissingError(RuntimeError):
    """No C preprocessor (`cpp`, from build-essential) to say what bf-p4c reads."""


@contextlib.contextmanager
def _architecture_stubs(root: Path) -> Iterator[str]:
    """A folder with an empty file for each architecture file the sources include."""
    names = {n for path in p4_sources(root) for n in SYSTEM_INCLUDE.findall(path.read_text())}
    with tempfile.TemporaryDirectory(prefix="og-tna-arch-") as stubs:
        for name in names:
            (Path(stubs) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(stubs) / name).write_text("")
        yield stubs


def preprocessed(build: Build, root: Path, stubs: str) -> str:
    """The TNA shell as bf-p4c's preprocessor gives it to the compiler for `build` (its
    __TARGET_TOFINO__ and defines), line markers included (bf-p4c names the tables it makes
    after source lines), with the architecture's own files left empty (`stubs`)."""
    cpp = shutil.which("cpp")
    if cpp is None:
        raise PreprocessorMissingError(
            "cpp (the C preprocessor, Debian's build-essential, which `make setup` installs) "
            "is not installed: without it the Tofino summaries' freshness cannot be checked"
        )
    generation = "2" if build.target == "tofino2" else "1"
    argv = [cpp, "-undef", "-nostdinc", "-w", "-I", "p4src", "-I", stubs]
    argv += [f"-D__TARGET_TOFINO__={generation}", *build.defines, TNA_SHELL]
    done = subprocess.run(argv, cwd=root, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"cpp failed on {TNA_SHELL} for {build.name}: {done.stderr}")
    return done.stdout.replace(stubs, "<arch>")


def sources_digest(root: Path) -> str:
    """One SHA-256 over what bf-p4c reads for each of BUILDS (`preprocessed`), in their order."""
    digest = hashlib.sha256()
    with _architecture_stubs(root) as stubs:
        for build in BUILDS:
            text = preprocessed(build, root, stubs)
            digest.update(build.name.encode() + b"\0" + text.encode() + b"\0")
    return digest.hexdigest()


SOURCES_LINE = "  p4src/opengate_tna.p4 as preprocessed for each build\n"


def compile_one(bf_p4c: str, build: Build, root: Path, work: Path) -> tuple[Path, float, int]:
    out = work / build.name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    argv = [
        bf_p4c,
        "--target",
        build.target,
        "--arch",
        build.arch,
        "--std",
        "p4-16",
        "-g",  # the logs: resources.json, table summary, PHV allocation
        "-I",
        str(root / "p4src"),
        *build.defines,
        "-o",
        str(out),
        "--p4runtime-files",
        str(out / "p4info.txtpb"),
        # Counters, meters, digests and the selector as standard P4Runtime entities (not BF-RT
        # externs), the form a P4Runtime agent on Tofino (Stratum) and our controller use.
        "--p4runtime-force-std-externs",
        str(root / "p4src" / "opengate_tna.p4"),
    ]
    started = time.monotonic()
    result = subprocess.run(argv, check=False, capture_output=True, text=True, cwd=root)
    elapsed = time.monotonic() - started
    (out / "compiler-output.txt").write_text(result.stdout + result.stderr)
    return out, elapsed, result.returncode


def _find(out: Path, name: str) -> Path | None:
    hits = sorted(out.rglob(name))
    return hits[0] if hits else None


def _as_int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) else 0


def _users(units: Iterable[dict[str, Any]]) -> list[str]:
    return [str(u.get("used_by", "?")) for unit in units for u in unit.get("usages", [])]


def summarise_resources(resources: dict[str, Any]) -> list[str]:
    """Tables per stage and memory blocks (SRAM, TCAM, map RAM) per table and per stage, from
    bf-p4c's resources.json (schema 1.x: resources.mau.mau_stages)."""
    mau = resources.get("resources", resources).get("mau", {})
    stages = sorted(mau.get("mau_stages", []), key=lambda st: _as_int(st.get("stage_number")))
    tables: dict[str, dict[str, Any]] = {}
    per_stage: list[tuple[int, int, int, int, int]] = []
    for stage in stages:
        number = _as_int(stage.get("stage_number"))
        names = [str(t.get("table_name")) for t in stage.get("logical_tables", {}).get("ids", [])]
        srams = _users(stage.get("rams", {}).get("srams", []))
        tcams = _users(stage.get("tcams", {}).get("tcams", []))
        maps = _users(stage.get("map_rams", {}).get("maprams", []))
        for name in names:
            entry = tables.setdefault(name, {"stages": set(), "sram": 0, "tcam": 0, "map": 0})
            entry["stages"].add(number)
        for kind, users in (("sram", srams), ("tcam", tcams), ("map", maps)):
            for name in users:
                entry = tables.setdefault(name, {"stages": set(), "sram": 0, "tcam": 0, "map": 0})
                entry["stages"].add(number)
                entry[kind] += 1
        per_stage.append((number, len(names), len(srams), len(tcams), len(maps)))
    lines = [f"MAU stages used: {len(per_stage)} (device: {mau.get('nStages', '?')})", ""]
    lines.append(f"{'stage':>5} {'tables':>6} {'SRAM':>5} {'TCAM':>5} {'mapRAM':>6}")
    for number, ntables, nsram, ntcam, nmap in per_stage:
        lines.append(f"{number:>5} {ntables:>6} {nsram:>5} {ntcam:>5} {nmap:>6}")
    lines.append("")
    lines.append(f"{'table':<44} {'stages':<16} {'SRAM':>5} {'TCAM':>5} {'mapRAM':>6}")
    for name, entry in sorted(tables.items(), key=lambda kv: (min(kv[1]["stages"]), kv[0])):
        where = sorted(entry["stages"])
        span = f"{where[0]}" if len(where) == 1 else f"{where[0]}-{where[-1]}"
        lines.append(
            f"{name:<44} {span:<16} {entry['sram']:>5} {entry['tcam']:>5} {entry['map']:>6}"
        )
    lines.append("")
    return lines


def write_summary(build: Build, out: Path, status: int, dest: Path, version: str) -> Path:
    lines = [
        f"OpenGate on {build.target} ({build.arch}), profile {build.profile}",
        f"compiler: {version}",
        f"command: bf-p4c --target {build.target} --arch {build.arch} -I p4src "
        f"{' '.join(build.defines)} p4src/opengate_tna.p4".replace("  ", " "),
        f"bf-p4c exit status: {status}"
        + ("" if status == 0 else " (FAILED: see the errors below)"),
        "",
    ]
    resources = _find(out, "resources.json")
    if resources is not None:
        lines += summarise_resources(json.loads(resources.read_text()))
    for report in TEXT_REPORTS:
        found = _find(out, report)
        if found is not None:
            lines.append(f"==== {report} (bf-p4c) ====")
            lines += [
                line
                for line in found.read_text().rstrip().splitlines()
                if not any(stamp in line for stamp in RUN_STAMPS)
            ]
            lines.append("")
    output = (out / "compiler-output.txt").read_text().splitlines()
    warnings = [line for line in output if "warning" in line.lower()]
    errors = [line for line in output if "error" in line.lower()]
    lines.append(f"==== compiler errors: {len(errors)} ====")
    lines += errors
    lines.append("")
    lines.append(f"==== compiler warnings: {len(warnings)} ====")
    lines += warnings
    target = dest / f"{build.name}.txt"
    text = "\n".join(lines).rstrip() + "\n"
    text = text.replace(f"{repo_root()}/", "")  # paths relative to the checkout
    target.write_text(text)
    if (out / "p4info.txtpb").exists():
        shutil.copyfile(out / "p4info.txtpb", dest / f"{build.name}.p4info.txtpb")
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m opengate.tofino", description=__doc__)
    parser.add_argument(
        "--only", action="append", default=[], help="build name, e.g. tofino-default (repeatable)"
    )
    parser.add_argument("--work", type=Path, default=None, help="scratch directory")
    args = parser.parse_args(argv)
    root = repo_root()
    try:
        bf_p4c = find_bf_p4c()
    except BfP4cMissingError as exc:
        print(f"make tofino: {exc}", file=sys.stderr)
        return 2
    builds = [b for b in BUILDS if not args.only or b.name in args.only]
    unknown = set(args.only) - {b.name for b in BUILDS}
    if unknown:
        print(f"unknown build(s) {sorted(unknown)}; known: {[b.name for b in BUILDS]}")
        return 2
    work = args.work or root / "build-tofino"
    dest = root / "p4src" / "build" / "tofino"
    dest.mkdir(parents=True, exist_ok=True)
    probe = [bf_p4c, "--version"]
    version = subprocess.run(probe, check=False, capture_output=True, text=True).stdout
    version = " ".join(version.split()) or "unknown"
    failed = 0
    for build in builds:
        print(f"bf-p4c: {build.name} ...", flush=True)
        out, elapsed, status = compile_one(bf_p4c, build, root, work)
        if _find(out, "resources.json") is None and status != 0:
            tail = (out / "compiler-output.txt").read_text().splitlines()[-30:]
            print(f"bf-p4c failed for {build.name} before placing tables:", *tail, sep="\n")
            failed += 1
            continue
        summary = write_summary(build, out, status, dest, version)
        failed += status != 0
        print(f"  {elapsed:.0f} s, exit status {status} -> {summary.relative_to(root)}")
    if not args.only:
        (dest / "SOURCES.sha256").write_text(sources_digest(root) + SOURCES_LINE)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
