"""Running the fuzz targets: each for a time or a number of runs, from its seed corpus
(fuzz/corpus/<target>/, read only) and its working corpus (run/fuzz/corpus/<target>/, where
libFuzzer keeps what it finds new), findings written under run/fuzz/findings/<target>/."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from fuzz.native.build import build
from fuzz.py import TARGETS as PY_TARGETS
from opengate.target import repo_root

NATIVE_TARGETS = ("native-frames", "native-writes")
TARGETS = NATIVE_TARGETS + PY_TARGETS
CORPUS = repo_root() / "fuzz" / "corpus"
RUN = repo_root() / "run" / "fuzz"
INPUT_TIMEOUT = 10  # seconds: a slower input is a finding (a hang)
MAX_LEN = {"native-frames": 8192, "native-writes": 8192, "policy": 16384, "snort_rules": 8192}
SANITIZER_ENV = {
    "ASAN_OPTIONS": "detect_leaks=1:allocator_may_return_null=1:symbolize=1",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
}


@dataclass(frozen=True, slots=True)
class Outcome:
    target: str
    returncode: int
    output: str
    findings: tuple[Path, ...]

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.findings


def command(target: str, binaries: dict[str, Path] | None = None) -> list[str]:
    """The fuzzer's command line without libFuzzer flags (binaries: fuzz.native.build's)."""
    if target in NATIVE_TARGETS:
        if binaries is None:
            binaries = build()
        return [str(binaries[target])]
    if target in PY_TARGETS:
        return [sys.executable, "-m", "fuzz.py.run", target]
    raise KeyError(f"no fuzz target {target!r} (targets: {', '.join(TARGETS)})")


def run_target(
    target: str,
    *,
    seconds: int | None = None,
    runs: int | None = None,
    seed: int = 1,
    work: Path | None = None,
    findings: Path | None = None,
    binaries: dict[str, Path] | None = None,
) -> Outcome:
    """One fuzzing run; `seconds` and `runs` bound it (libFuzzer's -max_total_time, -runs)."""
    work = work or RUN / "corpus" / target
    findings = findings or RUN / "findings" / target
    work.mkdir(parents=True, exist_ok=True)
    findings.mkdir(parents=True, exist_ok=True)
    before = set(findings.iterdir())
    flags = [
        f"-seed={seed}",
        f"-timeout={INPUT_TIMEOUT}",
        f"-max_len={MAX_LEN.get(target, 4096)}",
        # No RSS limit: libFuzzer reads the peak RSS, which Linux carries over exec from the
        # process that started it (a test run of a few GB), so it would report an OOM at once.
        # A single allocation past 2 GB still is one.
        "-rss_limit_mb=0",
        "-malloc_limit_mb=2048",
        f"-artifact_prefix={findings}/",
        "-print_final_stats=1",
    ]
    if seconds is not None:
        flags.append(f"-max_total_time={seconds}")
    if runs is not None:
        flags.append(f"-runs={runs}")
    cmd = [*command(target, binaries), *flags, str(work), str(CORPUS / target)]
    env = {**os.environ, **SANITIZER_ENV, "PYTHONPATH": str(repo_root())}
    limit = (seconds or 600) * 3 + 120
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=env, cwd=repo_root(), timeout=limit, check=False
    )
    new = tuple(sorted(set(findings.iterdir()) - before))
    return Outcome(target, proc.returncode, proc.stdout + proc.stderr, new)


def replay(target: str, files: list[Path], binaries: dict[str, Path] | None = None) -> Outcome:
    """Run the given inputs once each (a finding, the corpus): how a finding is reproduced."""
    cmd = [*command(target, binaries), f"-timeout={INPUT_TIMEOUT}", *map(str, files)]
    env = {**os.environ, **SANITIZER_ENV, "PYTHONPATH": str(repo_root())}
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=env, cwd=repo_root(), timeout=600, check=False
    )
    return Outcome(target, proc.returncode, proc.stdout + proc.stderr, ())
