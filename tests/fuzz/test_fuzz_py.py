"""The Python parsers' fuzz targets (fuzz/py/): every input of each seed corpus, findings
included (fuzz/corpus/<target>/finding-*), replays without a crash, and a short coverage-guided
run under atheris (fixed seed, bounded by runs and time) finds nothing. A crash is an exception
other than the target's documented error types (`ERRORS`), or a broken invariant the target
checks (docs/howto/tests.md, "Fuzzing")."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from fuzz.py import TARGETS, run_one, target
from fuzz.run import CORPUS, run_target

SHORT_RUNS = 20000
SHORT_SECONDS = 4


def _corpus(name: str) -> list[Path]:
    files = sorted((CORPUS / name).iterdir())
    assert files, f"fuzz/corpus/{name}/ has no seeds (python -m fuzz.seeds writes them)"
    return files


@pytest.mark.parametrize("name", TARGETS)
def test_corpus_replays_without_a_crash(name: str) -> None:
    module = target(name)
    for path in _corpus(name):
        try:
            run_one(module, path.read_bytes())
        except Exception as exc:
            raise AssertionError(f"fuzz/corpus/{name}/{path.name}: {exc!r}") from exc


@pytest.mark.parametrize("name", TARGETS)
def test_short_coverage_guided_run_finds_nothing(name: str, tmp_path: Path) -> None:
    if importlib.util.find_spec("atheris") is None:
        pytest.skip("atheris is not installed (it is in requirements.lock)")
    outcome = run_target(
        name,
        runs=SHORT_RUNS,
        seconds=SHORT_SECONDS,
        seed=1,
        work=tmp_path / "corpus",
        findings=tmp_path / "findings",
    )
    assert outcome.ok, f"{name}: {[p.name for p in outcome.findings]}\n{outcome.output[-4000:]}"
    assert "DONE" in outcome.output, outcome.output[-2000:]
