"""Run benchmark modules (bench/bench_*.py), each in its own process, and record their results.

    python -m bench                            # all of them
    python -m bench hsm softswitch             # only bench_hsm.py and bench_softswitch.py
    python -m bench flood -- --rates 10000     # one of them, with arguments for it

Each module's Markdown is echoed as it runs and parsed into bench/results/<name>.json, with the
command, the machine, the date and the commit (bench/results.py). A failed run (non-zero exit)
does not replace a previous result, nor does a run that printed no table (a skip) replace one
with tables; otherwise the new result replaces the old one (git keeps the old ones). Then
docs/benchmarks.md is rendered from the results (bench/render.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import render
from bench.results import (
    BENCH_DIR,
    RESULTS_DIR,
    Result,
    bench_names,
    command_of,
    git_commit,
    make_command_of,
    module_path,
    parse_markdown,
    selects_target,
    store,
    summary_of,
    target_description,
    this_machine,
    utc_now,
)


@dataclass(frozen=True, slots=True)
class Captured:
    exit_status: int
    stdout: str
    wall_seconds: float


def run_captured(argv: Sequence[str], cwd: Path) -> Captured:
    """Run `argv`, echoing its standard output line by line as it comes and keeping it (its
    standard error goes straight to ours)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    started = time.perf_counter()
    kept: list[str] = []
    with subprocess.Popen(
        list(argv), cwd=cwd, env=env, stdout=subprocess.PIPE, text=True, errors="replace"
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            kept.append(line)
    return Captured(process.returncode, "".join(kept), time.perf_counter() - started)


def result_of(
    name: str, args: Sequence[str], captured: Captured, date: str, commit: str, target: str | None
) -> Result:
    tables, notes = parse_markdown(captured.stdout)
    return Result(
        name=name,
        command=command_of(name, args),
        make=make_command_of(name, args),
        summary=summary_of(module_path(name)),
        machine=this_machine(target),
        date=date,
        commit=commit,
        exit_status=captured.exit_status,
        wall_seconds=round(captured.wall_seconds, 1),
        tables=tuple(tables),
        notes=tuple(notes),
    )


def parse_arguments(argv: Sequence[str], known: Sequence[str]) -> tuple[list[str], list[str]]:
    """(benchmark names, arguments for the one named) from `NAME... [-- ARGS...]`; ValueError
    says what is wrong."""
    argv = list(argv)
    split = argv.index("--") if "--" in argv else len(argv)
    names, args = argv[:split], argv[split + 1 :]
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise ValueError(f"no benchmark named {', '.join(unknown)}; have: {', '.join(known)}")
    if "--" in argv and len(names) != 1:
        raise ValueError("arguments after `--` are for one benchmark: name exactly one before it")
    return names or list(known), args


def main(argv: list[str]) -> int:
    known = bench_names()
    try:
        names, args = parse_arguments(argv, known)
    except ValueError as error:
        print(f"python -m bench: {error}", file=sys.stderr)
        return 2
    print(f"# OpenGate benchmarks\n\nMachine: {this_machine().describe()}\n", flush=True)
    commit = git_commit()
    status = 0
    for name in names:
        print(f"## bench_{name}\n", flush=True)
        target = target_description() if selects_target(module_path(name)) else None
        date = utc_now()
        command = [sys.executable, "-m", f"bench.bench_{name}", *args]
        captured = run_captured(command, BENCH_DIR.parent)
        if captured.exit_status != 0:
            print(f"\nbench_{name} failed with exit status {captured.exit_status}", flush=True)
            status = 1
        _, message = store(result_of(name, args, captured, date, commit, target), RESULTS_DIR)
        print(f"\n{message}\n", flush=True)
    page = render.write_page()
    print(f"{page} rendered from {RESULTS_DIR}", flush=True)
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
