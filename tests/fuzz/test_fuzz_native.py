"""The native data plane's fuzz targets (fuzz/native/og_fuzz.c, built with clang and libFuzzer
under AddressSanitizer and UndefinedBehaviorSanitizer): native-frames (the example policy's
state, as the controller writes it, then frames) and native-writes (table writes built from the
input, then frames). Every input of each seed corpus replays without a sanitizer report, signal
or broken invariant, and a short coverage-guided run with a fixed seed finds nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from fuzz.native.build import FuzzBuildError, build, clang
from fuzz.run import CORPUS, NATIVE_TARGETS, replay, run_target

SHORT_SECONDS = 8


@pytest.fixture(scope="module")
def binaries() -> dict[str, Path]:
    if clang() is None:
        pytest.skip(
            "clang is not installed (scripts/setup.sh installs clang and libclang-rt-14-dev)"
        )
    try:
        return build()
    except FuzzBuildError as exc:
        if "libclang_rt" in str(exc):
            pytest.skip(f"clang has no libFuzzer/sanitizer runtime (libclang-rt-14-dev): {exc}")
        raise


@pytest.mark.parametrize("name", NATIVE_TARGETS)
def test_corpus_replays_without_a_sanitizer_report(name: str, binaries: dict[str, Path]) -> None:
    files = sorted((CORPUS / name).iterdir())
    assert files, f"fuzz/corpus/{name}/ has no seeds"
    outcome = replay(name, files, binaries)
    assert outcome.returncode == 0, outcome.output[-6000:]
    assert "ERROR:" not in outcome.output and "runtime error" not in outcome.output


@pytest.mark.parametrize("name", NATIVE_TARGETS)
def test_short_coverage_guided_run_finds_nothing(
    name: str, binaries: dict[str, Path], tmp_path: Path
) -> None:
    outcome = run_target(
        name,
        seconds=SHORT_SECONDS,
        seed=1,
        work=tmp_path / "corpus",
        findings=tmp_path / "findings",
        binaries=binaries,
    )
    assert outcome.ok, f"{name}: {[p.name for p in outcome.findings]}\n{outcome.output[-6000:]}"
    assert "DONE" in outcome.output, outcome.output[-2000:]
