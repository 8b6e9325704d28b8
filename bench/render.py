"""Render docs/benchmarks.md from the benchmark results in bench/results/.

    python -m bench.render            # write the page
    python -m bench.render --check    # exit 1 if the page on disk is not what the results give

The page has a short introduction, then one section per benchmark in the order of their names:
its summary, its command, the machine, date, commit and target of its latest run, its tables
and its notes; the benchmarks without a result are listed last. The output depends on the
result files alone.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.results import (
    RESULTS_DIR,
    Result,
    bench_names,
    command_of,
    load_all,
    make_command_of,
    module_path,
    summary_of,
    table_markdown,
)
from opengate.target import repo_root

PAGE = repo_root() / "docs" / "benchmarks.md"
STALE = "run `python -m bench.render` (make docs)"

INTRO = """\
# Benchmarks

This page holds the latest result of each of OpenGate's benchmarks, the modules
`bench/bench_*.py`. `make bench` runs them and writes each result, with the machine, the date
and the commit it ran on, as JSON under `bench/results/`, then renders this page from those
files (`python -m bench.render`; a test fails when the page is out of date). A re-run replaces
a benchmark's figures, and git keeps the old ones; a run that fails, or that only skips, leaves
the previous figures in place.

Run one benchmark with `make bench BENCH=hsm`, and one with arguments with
`make bench BENCH=flood ARGS="--rates 10000"` (that is `python -m bench flood -- --rates 10000`).
Those that bring up Mininet or veth pairs need root; those that need BMv2 or Snort 3 skip what
they cannot run without them and say so.

The figures come from a shared machine with two cores, where other jobs run at the same time:
a single figure is noisy, often by a third from one run to the next. Compare figures within one
table, from one run: where a benchmark measures OpenGate against a peer (BMv2, Snort 3, separate
HSMs, the naive profile, the CPM...), the peer's figure is in the same table, with the ratio the
benchmark computed.
"""


def _commit(commit: str) -> str:
    head, dirty = commit.removesuffix("+dirty"), commit.endswith("+dirty")
    short = head[:10] if len(head) == 40 else head
    return f"`{short}`" + (" with uncommitted changes" if dirty else "")


def _section(result: Result) -> list[str]:
    lines = [f"## {result.name}", ""]
    if result.summary:
        lines += [result.summary, ""]
    lines += [f"Command: `{result.command}` (`{result.make}`)", ""]
    run = [
        f"Machine: {result.machine.describe()}",
        f"date {result.date}",
        f"commit {_commit(result.commit)}",
    ]
    if result.machine.target is not None:
        run.append(f"target {result.machine.target}")
    run.append(f"took {result.wall_seconds:g} s")
    lines += ["; ".join(run) + ".", ""]
    if result.failed:
        lines += [f"That run failed (exit status {result.exit_status}): its output may be cut.", ""]
    for table in result.tables:
        if table.title:
            lines += [f"**{table.title}**", ""]
        lines += [*table_markdown(table), ""]
    if not result.tables:
        lines += ["No table: the benchmark measured nothing on that machine.", ""]
    if result.notes:
        lines += [f"- {note}" for note in result.notes] + [""]
    return lines


def render(results: Mapping[str, Result], names: Sequence[str]) -> str:
    """The page for `results` (by name); `names` are every benchmark, those without a result
    listed at the end."""
    lines = [INTRO]
    for name in sorted(results):
        lines += _section(results[name])
    missing = [name for name in sorted(names) if name not in results]
    if missing:
        lines += ["## Not run yet", "", "These benchmarks have no result yet, on any machine:", ""]
        for name in missing:
            path = module_path(name)
            summary = f" {summary_of(path)}" if path.exists() else ""
            lines.append(
                f"- {name}:{summary} Command: `{command_of(name)}` (`{make_command_of(name)}`)."
            )
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def current(directory: Path = RESULTS_DIR) -> str:
    """The page that the results in `directory` render to."""
    return render(load_all(directory), bench_names())


def write_page(page: Path = PAGE, directory: Path = RESULTS_DIR) -> Path:
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(current(directory))
    return page


def check(page: Path = PAGE, directory: Path = RESULTS_DIR) -> str | None:
    """None if `page` is what the results render to, else what to do about it."""
    on_disk = page.read_text() if page.exists() else ""
    if on_disk == current(directory):
        return None
    return f"{page} is not what {directory} renders to: {STALE}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args(argv)
    if args.check:
        problem = check()
        if problem is not None:
            print(problem, file=sys.stderr)
            return 1
        return 0
    print(f"wrote {write_page()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
