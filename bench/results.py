"""Benchmark results: one JSON file per benchmark, `bench/results/<name>.json`, and the Markdown
of a bench's output parsed into its tables and notes.

A result holds the benchmark's name, the command that produced it (and how to run it through
make), the machine (CPU, cores, memory, kernel, Python; the data-plane target where the bench
selects one), the date (UTC), the commit (git HEAD, "+dirty" when tracked files had changes),
the exit status, the wall time, the module's summary, its tables and the text lines outside
them. `python -m bench` writes these files (see `store` for when a run replaces one) and
`python -m bench.render` renders docs/benchmarks.md from them.
"""

from __future__ import annotations

import ast
import datetime as dt
import json
import os
import platform
import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from opengate.target import TargetError, repo_root, select_target

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
# Files the runner itself writes: their changes do not make a run's commit "+dirty".
WRITTEN_BY_RUNS = ("bench/results", "docs/benchmarks.md")


class ResultError(ValueError):
    """A result file that is not a benchmark result; the message names the file and field."""


# -- Markdown tables -------------------------------------------------------------------------

_DELIMITER_CELL = re.compile(r":?-+:?")
_UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")


@dataclass(frozen=True, slots=True)
class Table:
    title: str  # the nearest text line or heading before the table ("" if none)
    columns: tuple[str, ...]
    align: tuple[str, ...]  # per column: "left", "right", "center" or "" (none given)
    rows: tuple[tuple[str, ...], ...]  # each as long as `columns`


def split_row(line: str) -> list[str]:
    """The cells of a table row: split on the pipes that are not escaped (`\\|`, also inside
    backticks, as GitHub's tables do), the outer pipes dropped, each cell stripped and its
    escaped pipes made plain."""
    text = line.strip()
    if text.startswith("|"):
        text = text[1:]
    if text.endswith("|") and not text.endswith("\\|"):
        text = text[:-1]
    return [cell.strip().replace("\\|", "|") for cell in _UNESCAPED_PIPE.split(text)]


def alignment(line: str) -> tuple[str, ...] | None:
    """The alignments of a delimiter row (`|---|:--:|---:|`), or None if `line` is not one."""
    if "|" not in line:
        return None
    cells = split_row(line)
    if not all(_DELIMITER_CELL.fullmatch(cell) for cell in cells):
        return None
    return tuple(_align(cell) for cell in cells)


def _align(cell: str) -> str:
    left, right = cell.startswith(":"), cell.endswith(":")
    if left and right:
        return "center"
    return "left" if left else "right" if right else ""


def _is_row(line: str) -> bool:
    return line.strip().startswith("|")


def _text_of(line: str) -> str:
    """A text line without its Markdown heading or list marker."""
    text = line.strip()
    heading = re.fullmatch(r"#{1,6}\s+(.*?)\s*#*", text)
    if heading:
        return heading.group(1)
    return re.sub(r"^[-*]\s+", "", text)


def parse_markdown(text: str) -> tuple[list[Table], list[str]]:
    """The tables in `text` and its other non-blank lines (the notes), in order.

    A table is a row (a line starting with `|`) followed by a delimiter row of as many cells;
    its body is the rows after them, up to the first line that does not start with `|`. A body
    row with fewer cells is padded with empty ones, one with more loses the extra ones. Its
    title is the nearest text line before it that no other table took as its title (a heading
    without its `#`s, a line without a trailing colon), and that line is then not a note."""
    lines = text.splitlines()
    tables: list[Table] = []
    notes: list[str] = []
    title_at: int | None = None  # the index in `notes` of the line a next table would take
    i = 0
    while i < len(lines):
        line = lines[i]
        align = alignment(lines[i + 1]) if i + 1 < len(lines) and _is_row(line) else None
        if align is not None and len(align) == len(split_row(line)):
            columns = tuple(split_row(line))
            rows = []
            i += 2
            while i < len(lines) and _is_row(lines[i]):
                cells = split_row(lines[i])[: len(columns)]
                rows.append(tuple(cells + [""] * (len(columns) - len(cells))))
                i += 1
            title = notes.pop(title_at).rstrip(":").rstrip() if title_at is not None else ""
            tables.append(Table(title, columns, align, tuple(rows)))
            title_at = None
            continue
        if line.strip():
            notes.append(_text_of(line))
            title_at = len(notes) - 1
        i += 1
    return tables, notes


def _escape(cell: str) -> str:
    return cell.replace("|", "\\|")


def table_markdown(table: Table) -> list[str]:
    """The table as Markdown lines (without its title); `parse_markdown` reads them back."""
    marks = {"": "---", "left": ":---", "right": "---:", "center": ":---:"}
    lines = ["| " + " | ".join(_escape(c) for c in table.columns) + " |"]
    lines.append("|" + "|".join(marks[a] for a in table.align) + "|")
    lines += ["| " + " | ".join(_escape(c) for c in row) + " |" for row in table.rows]
    return lines


# -- the result --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Machine:
    cpu: str
    cores: int
    memory_gib: float
    kernel: str  # release, as `uname -r`
    python: str
    target: str | None = None  # the data-plane target the bench ran on, if it selects one

    def describe(self) -> str:
        return (
            f"{self.cpu}, {self.cores} cores, {self.memory_gib:g} GiB, Linux {self.kernel}, "
            f"Python {self.python}"
        )


@dataclass(frozen=True, slots=True)
class Result:
    name: str  # the module without `bench_`
    command: str  # `python -m bench.bench_NAME ARGS...`
    make: str  # the same through make
    summary: str  # the first paragraph of the module's docstring
    machine: Machine
    date: str  # UTC, ISO 8601, when the run started
    commit: str  # git HEAD, "+dirty" if tracked files had changes
    exit_status: int
    wall_seconds: float
    tables: tuple[Table, ...]
    notes: tuple[str, ...]

    @property
    def failed(self) -> bool:
        return self.exit_status != 0


def to_json(result: Result) -> str:
    return json.dumps(asdict(result), indent=2, ensure_ascii=False) + "\n"


def _field(data: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in data:
        raise ResultError(f"{where}: no field {key!r}")
    value = data[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ResultError(f"{where}: field {key!r} is not a {kind.__name__}")
    return value


def from_json(text: str, where: str = "result") -> Result:
    """The result in `text`; ResultError names `where` and the field that is wrong."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ResultError(f"{where}: not JSON ({error})") from None
    if not isinstance(data, dict):
        raise ResultError(f"{where}: not a JSON object")
    m = _field(data, "machine", dict, where)
    target = m.get("target")
    if target is not None and not isinstance(target, str):
        raise ResultError(f"{where}: field 'machine.target' is not a str")
    machine = Machine(
        _field(m, "cpu", str, f"{where}: machine"),
        _field(m, "cores", int, f"{where}: machine"),
        _field(m, "memory_gib", float, f"{where}: machine"),
        _field(m, "kernel", str, f"{where}: machine"),
        _field(m, "python", str, f"{where}: machine"),
        target,
    )
    tables = []
    for n, t in enumerate(_field(data, "tables", list, where)):
        at = f"{where}: tables[{n}]"
        if not isinstance(t, dict):
            raise ResultError(f"{at}: not a JSON object")
        columns = tuple(str(c) for c in _field(t, "columns", list, at))
        align = tuple(str(a) for a in _field(t, "align", list, at))
        rows = tuple(tuple(str(c) for c in row) for row in _field(t, "rows", list, at))
        if len(align) != len(columns) or any(len(r) != len(columns) for r in rows):
            raise ResultError(f"{at}: rows or align not as long as columns")
        tables.append(Table(_field(t, "title", str, at), columns, align, rows))
    return Result(
        name=_field(data, "name", str, where),
        command=_field(data, "command", str, where),
        make=_field(data, "make", str, where),
        summary=_field(data, "summary", str, where),
        machine=machine,
        date=_field(data, "date", str, where),
        commit=_field(data, "commit", str, where),
        exit_status=_field(data, "exit_status", int, where),
        wall_seconds=_field(data, "wall_seconds", float, where),
        tables=tuple(tables),
        notes=tuple(str(n) for n in _field(data, "notes", list, where)),
    )


def result_path(name: str, directory: Path = RESULTS_DIR) -> Path:
    return directory / f"{name}.json"


def read(path: Path) -> Result:
    return from_json(path.read_text(), str(path))


def write(result: Result, directory: Path = RESULTS_DIR) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = result_path(result.name, directory)
    path.write_text(to_json(result))
    return path


def load_all(directory: Path = RESULTS_DIR) -> dict[str, Result]:
    """Every result in `directory`, by name (sorted)."""
    out = {}
    for path in sorted(directory.glob("*.json")):
        result = read(path)
        if result.name != path.stem:
            raise ResultError(f"{path}: field 'name' is {result.name!r}, not {path.stem!r}")
        out[result.name] = result
    return out


def keeps_previous(old: Result | None, new: Result) -> str | None:
    """Why `new` must not replace `old` (None: it replaces it). A failed run replaces no result;
    a run without tables (a bench that only skipped) does not replace one with tables."""
    if old is None:
        return None
    if new.failed:
        return f"the run failed (exit status {new.exit_status})"
    if not new.tables and old.tables:
        return "the run printed no table (skipped?) and the previous result has tables"
    return None


def store(new: Result, directory: Path = RESULTS_DIR) -> tuple[bool, str]:
    """Write `new` unless the result already there must stay (`keeps_previous`); whether it was
    written, and a sentence saying what happened."""
    path = result_path(new.name, directory)
    old = read(path) if path.exists() else None
    reason = keeps_previous(old, new)
    if reason is not None:
        return False, f"{path} not replaced: {reason}; the previous result stays"
    write(new, directory)
    if new.failed:
        return True, f"{path} written, with the failed run (exit status {new.exit_status})"
    return True, f"{path} written"


# -- what a run records --------------------------------------------------------------------------


def bench_names(directory: Path = BENCH_DIR) -> list[str]:
    """The benchmarks in `directory`: its bench_*.py modules without `bench_`, sorted."""
    return sorted(p.stem.removeprefix("bench_") for p in directory.glob("bench_*.py"))


def module_path(name: str, directory: Path = BENCH_DIR) -> Path:
    return directory / f"bench_{name}.py"


def summary_of(path: Path) -> str:
    """The first paragraph of the module's docstring, on one line (read, not imported)."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split())


def selects_target(path: Path) -> bool:
    """Whether the module imports `select_target`: it runs on a data-plane target."""
    return any(
        isinstance(node, ast.ImportFrom)
        and node.module == "opengate.target"
        and any(alias.name == "select_target" for alias in node.names)
        for node in ast.walk(ast.parse(path.read_text()))
    )


def command_of(name: str, args: Sequence[str] = ()) -> str:
    return shlex.join(["python", "-m", f"bench.bench_{name}", *args])


def make_command_of(name: str, args: Sequence[str] = ()) -> str:
    command = f"make bench BENCH={name}"
    if args:
        command += " ARGS=" + shlex.quote(shlex.join(args))
    return command


def target_description(env: Mapping[str, str] | None = None) -> str:
    """The target `select_target` picks in this environment, and why (or why none)."""
    try:
        choice = select_target(None if env is None else dict(env))
    except TargetError as error:
        return f"none: {error}"
    return f"{choice.target.value} ({choice.reason})"


def this_machine(target: str | None = None) -> Machine:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return Machine(
        cpu=cpu,
        cores=os.cpu_count() or 0,
        memory_gib=round(memory, 1),
        kernel=platform.release(),
        python=platform.python_version(),
        target=target,
    )


def git_commit(root: Path | None = None) -> str:
    """git HEAD, with "+dirty" if tracked files (but those the runs write) have changes;
    "unknown" outside a git work tree."""
    root = root or repo_root()

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    try:
        head = git("rev-parse", "HEAD")
        excluded = [f":(exclude){path}" for path in WRITTEN_BY_RUNS]
        changes = git("status", "--porcelain", "--untracked-files=no", "--", ".", *excluded)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if changes else "")


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
