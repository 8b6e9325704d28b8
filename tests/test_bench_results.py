"""Benchmark results (bench/results.py, bench/render.py, bench/__main__.py): the Markdown-table
parser on exact input, a result written and read back, when a run replaces a stored result, and
docs/benchmarks.md against the committed bench/results/."""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from bench import render
from bench.__main__ import Captured, parse_arguments, result_of, run_captured
from bench.results import (
    RESULTS_DIR,
    Machine,
    Result,
    ResultError,
    Table,
    bench_names,
    from_json,
    load_all,
    parse_markdown,
    read,
    result_path,
    split_row,
    store,
    table_markdown,
    to_json,
    write,
)

MACHINE = Machine("AMD EPYC", 2, 23.5, "6.1.0-13-amd64", "3.11.2", "soft (TARGET=soft)")
TABLE = Table("Throughput", ("engine", "Mbps"), ("", "right"), (("built-in", "10.5"),))


def a_result(name: str = "encoding", **changes: object) -> Result:
    result = Result(
        name=name,
        command=f"python -m bench.bench_{name}",
        make=f"make bench BENCH={name}",
        summary="What it measures.",
        machine=MACHINE,
        date="2026-01-02T03:04:05Z",
        commit="0123456789abcdef0123456789abcdef01234567",
        exit_status=0,
        wall_seconds=1.5,
        tables=(TABLE,),
        notes=("a note",),
    )
    return replace(result, **changes)  # type: ignore[arg-type]


# -- the parser --------------------------------------------------------------------------------


def test_a_table_takes_the_heading_before_it_as_title_and_its_alignments() -> None:
    text = (
        "Capture: 20 flows\n"
        "\n"
        "### Throughput, one core each\n"
        "\n"
        "| engine | Mbps | vs Snort |\n"
        "|:---|---:|:-:|\n"
        "| built-in | 10.5 | 0.50x |\n"
        "| Snort 3 | 21.0 | 1.00x |\n"
        "\n"
        "skipped: needs Snort 3\n"
    )
    tables, notes = parse_markdown(text)
    assert tables == [
        Table(
            "Throughput, one core each",
            ("engine", "Mbps", "vs Snort"),
            ("left", "right", "center"),
            (("built-in", "10.5", "0.50x"), ("Snort 3", "21.0", "1.00x")),
        )
    ]
    assert notes == ["Capture: 20 flows", "skipped: needs Snort 3"]


def test_escaped_pipes_are_cell_text_and_backticks_are_kept() -> None:
    text = (
        "Options:\n"
        "| option | meaning |\n"
        "|---|---|\n"
        "| `--rates 10000` | flows/s, `a \\| b` |\n"
        "| \\|x\\| | `code` and \\| |\n"
    )
    (table,), notes = parse_markdown(text)
    assert table.title == "Options"
    assert table.align == ("", "")
    assert table.rows == (("`--rates 10000`", "flows/s, `a | b`"), ("|x|", "`code` and |"))
    assert notes == []
    assert split_row("| a \\| b | `c` |") == ["a | b", "`c`"]


def test_short_rows_are_padded_long_ones_cut_and_a_table_ends_at_a_line_without_a_pipe() -> None:
    text = "| a | b | c |\n|---|---|---|\n| 1 |\n| 1 | 2 | 3 | 4 |\nafter the table\n| 9 | 9 |\n"
    (table,), notes = parse_markdown(text)
    assert table.title == ""
    assert table.rows == (("1", "", ""), ("1", "2", "3"))
    assert notes == ["after the table", "| 9 | 9 |"]


def test_a_delimiter_row_of_another_width_makes_no_table() -> None:
    tables, notes = parse_markdown("| a | b |\n|---|\n| 1 | 2 |\n")
    assert tables == []
    assert notes == ["| a | b |", "|---|", "| 1 | 2 |"]


def test_each_title_is_taken_once_and_list_markers_leave_the_notes() -> None:
    text = (
        "First title:\n\n| x |\n|---|\n| 1 |\n\n| y |\n|---|\n| 2 |\n\n"
        "- a listed note\n* another\n## A heading, no table after it\n"
    )
    first, second = parse_markdown(text)[0]
    assert (first.title, second.title) == ("First title", "")
    assert parse_markdown(text)[1] == ["a listed note", "another", "A heading, no table after it"]


def test_a_skip_line_alone_gives_no_table() -> None:
    assert parse_markdown("bench_flood: skipped, Mininet needs root\n") == (
        [],
        ["bench_flood: skipped, Mininet needs root"],
    )


def test_a_rendered_table_parses_back_to_itself() -> None:
    table = Table(
        "t",
        ("a|b", "`c`", "d"),
        ("left", "right", "center"),
        (("1 | 2", "`x|y`", ""), ("3", "4", "5")),
    )
    text = "t\n" + "\n".join(table_markdown(table)) + "\n"
    assert parse_markdown(text) == ([table], [])


# -- results written and read ---------------------------------------------------------------------


def test_a_result_written_reads_back_the_same(tmp_path: Path) -> None:
    result = a_result(machine=replace(MACHINE, target=None), notes=())
    path = write(result, tmp_path)
    assert path == tmp_path / "encoding.json"
    assert read(path) == result
    assert load_all(tmp_path) == {"encoding": result}
    assert json.loads(path.read_text())["machine"]["cores"] == 2


def test_a_result_without_its_commit_is_refused_by_name() -> None:
    data = json.loads(to_json(a_result()))
    del data["commit"]
    with pytest.raises(ResultError, match=r"x\.json: no field 'commit'"):
        from_json(json.dumps(data), "x.json")
    data = json.loads(to_json(a_result()))
    data["tables"][0]["rows"] = [["only one cell"]]
    with pytest.raises(ResultError, match=r"tables\[0\]"):
        from_json(json.dumps(data), "x.json")


def test_a_file_named_for_another_benchmark_is_refused(tmp_path: Path) -> None:
    (tmp_path / "hsm.json").write_text(to_json(a_result("encoding")))
    with pytest.raises(ResultError, match="not 'hsm'"):
        load_all(tmp_path)


# -- when a run replaces a result -----------------------------------------------------------------


def test_a_failed_run_does_not_replace_a_result(tmp_path: Path) -> None:
    good = a_result()
    assert store(good, tmp_path)[0]
    written, message = store(
        a_result(exit_status=1, tables=(), date="2026-02-01T00:00:00Z"), tmp_path
    )
    assert not written
    assert "not replaced" in message and "exit status 1" in message
    assert read(result_path("encoding", tmp_path)) == good


def test_a_skip_does_not_replace_a_result_with_tables(tmp_path: Path) -> None:
    good = a_result()
    store(good, tmp_path)
    skipped = a_result(tables=(), notes=("skipped: needs Snort 3",), date="2026-02-01T00:00:00Z")
    written, message = store(skipped, tmp_path)
    assert not written
    assert "no table" in message
    assert read(result_path("encoding", tmp_path)) == good


def test_a_good_run_replaces_the_result_and_a_first_skip_or_failure_is_kept(tmp_path: Path) -> None:
    skipped = a_result(tables=(), notes=("skipped: needs root",))
    assert store(skipped, tmp_path) == (True, f"{tmp_path / 'encoding.json'} written")
    newer = a_result(date="2026-03-01T00:00:00Z", tables=(replace(TABLE, rows=(("x", "1"),)),))
    assert store(newer, tmp_path)[0]
    assert read(result_path("encoding", tmp_path)) == newer
    failed = a_result("hsm", exit_status=2)
    written, message = store(failed, tmp_path)
    assert written and "failed run" in message
    assert store(a_result("hsm"), tmp_path)[0], "a good run replaces a failed one"


# -- the runner ---------------------------------------------------------------------------------


def test_the_runner_keeps_what_the_bench_printed_and_its_exit_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = "print('Title'); print('| a |'); print('|---|'); print('| 1 |'); raise SystemExit(3)"
    captured = run_captured([sys.executable, "-c", code], tmp_path)
    assert captured.exit_status == 3
    assert captured.stdout == "Title\n| a |\n|---|\n| 1 |\n"
    assert capsys.readouterr().out == captured.stdout, "echoed as it ran"
    result = result_of(
        "encoding", ["--rounds", "3"], captured, "2026-01-02T03:04:05Z", "abc+dirty", None
    )
    assert result.command == "python -m bench.bench_encoding --rounds 3"
    assert result.make == "make bench BENCH=encoding ARGS='--rounds 3'"
    assert result.tables == (Table("Title", ("a",), ("",), (("1",),)),)
    assert (result.exit_status, result.failed, result.notes) == (3, True, ())
    assert result.summary.startswith("Session entries to a serialised WriteRequest")


def test_arguments_after_the_separator_go_to_the_one_benchmark_named() -> None:
    known = ["flood", "hsm"]
    assert parse_arguments([], known) == (known, [])
    assert parse_arguments(["flood", "--", "--rates", "10000"], known) == (
        ["flood"],
        ["--rates", "10000"],
    )
    with pytest.raises(ValueError, match="exactly one"):
        parse_arguments(["flood", "hsm", "--", "--quick"], known)
    with pytest.raises(ValueError, match="no benchmark named nope"):
        parse_arguments(["nope"], known)


# -- the page ------------------------------------------------------------------------------------


def test_the_page_has_a_section_per_result_and_lists_the_others() -> None:
    page = render.render({"encoding": a_result()}, ["hsm", "encoding"])
    assert page == render.render({"encoding": a_result()}, ["encoding", "hsm"]), "deterministic"
    assert "## encoding\n\nWhat it measures.\n" in page
    assert "Command: `python -m bench.bench_encoding` (`make bench BENCH=encoding`)" in page
    assert "commit `0123456789`; target soft (TARGET=soft); took 1.5 s." in page
    assert "**Throughput**\n\n| engine | Mbps |\n|---|---:|\n| built-in | 10.5 |\n" in page
    assert "- a note\n" in page
    assert page.index("## Not run yet") > page.index("## encoding")
    assert "`python -m bench.bench_hsm` (`make bench BENCH=hsm`)" in page


def test_check_says_when_the_page_is_not_what_the_results_render_to(tmp_path: Path) -> None:
    results, page = tmp_path / "results", tmp_path / "benchmarks.md"
    write(a_result(), results)
    assert render.check(page, results) is not None, "no page yet"
    render.write_page(page, results)
    assert render.check(page, results) is None
    write(a_result(wall_seconds=2.5), results)
    problem = render.check(page, results)
    assert problem is not None and "run `python -m bench.render` (make docs)" in problem


def test_the_committed_page_is_what_the_committed_results_render_to() -> None:
    assert render.check() is None, f"docs/benchmarks.md is stale: {render.STALE}"


def test_dates_and_commits_appear_on_the_page_only_in_the_machine_lines() -> None:
    date = re.compile(r"\b20\d\d-\d\d-\d\d\b")
    for line in render.PAGE.read_text().splitlines():
        if date.search(line) or "commit `" in line:
            assert line.startswith("Machine: "), line


def test_every_committed_result_has_its_machine_date_commit_and_command() -> None:
    paths = sorted(RESULTS_DIR.glob("*.json"))
    assert paths, "no result under bench/results/"
    for path in paths:
        data = json.loads(path.read_text())
        for key in ("machine", "date", "commit", "command"):
            assert data.get(key), f"{path}: no {key}"
        result = read(path)
        assert result.name in bench_names(), f"{path}: no bench/bench_{result.name}.py"
        assert result.machine.cpu and result.machine.cores > 0 and result.machine.kernel
        assert dt.datetime.fromisoformat(result.date).utcoffset() == dt.timedelta(0), path
        assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", result.commit), path
        assert result.command.startswith(f"python -m bench.bench_{result.name}"), path
        assert result.make.startswith(f"make bench BENCH={result.name}"), path


def test_a_captured_result_is_a_valid_file(tmp_path: Path) -> None:
    captured = Captured(0, "skipped: needs root\n", 0.04)
    result = result_of("flood", [], captured, "2026-01-02T03:04:05Z", "abc", "soft (x)")
    assert read(write(result, tmp_path)) == result
    assert result.tables == () and result.notes == ("skipped: needs root",)
