"""Building the native fuzzers: fuzz/native/og_fuzz.c with the OpenGate program's C and the
example policy's state (fuzz/native/state.py), by clang with libFuzzer, AddressSanitizer and
UndefinedBehaviorSanitizer, under run/fuzz/native/. A build is reused while its inputs (the
generated C and header, the harness, softswitch/native's sources, the compiler and its flags)
are the same."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from fuzz.native.state import write_inputs
from opengate.target import repo_root

HERE = Path(__file__).resolve().parent
NATIVE = repo_root() / "softswitch" / "native"
OUT = repo_root() / "run" / "fuzz" / "native"
HARNESS = HERE / "og_fuzz.c"
SOURCES = ("og_table.c", "og_table_index.c", "og_io.c")
MODES = {"native-frames": 1, "native-writes": 2}
SANITIZE = "-fsanitize=fuzzer,address,undefined"
FLAGS = (
    "-g",
    "-O1",
    SANITIZE,
    "-fno-sanitize-recover=all",  # a UBSan report ends the run as a crash, as ASan's do
    "-fno-omit-frame-pointer",
    "-pthread",
    "-Wall",
    "-Wextra",
)
COMPILE_TIMEOUT = 600


class FuzzBuildError(RuntimeError):
    """clang is missing, cannot link libFuzzer, or refused the harness."""


def clang() -> str | None:
    return shutil.which(os.environ.get("FUZZ_CC", "clang"))


def _digest(cc: str, *files: Path) -> str:
    h = hashlib.sha256(" ".join((cc, *FLAGS)).encode())
    for path in files:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    for name in sorted(os.listdir(NATIVE)):
        if name.endswith((".c", ".h")):
            h.update((NATIVE / name).read_bytes())
    return h.hexdigest()[:24]


def build(out_dir: Path = OUT) -> dict[str, Path]:
    """The fuzz targets' binaries by name (MODES); raises FuzzBuildError."""
    cc = clang()
    if cc is None:
        raise FuzzBuildError("clang is not installed (scripts/setup.sh installs it)")
    program_c, meta = write_inputs(out_dir)
    digest = _digest(cc, program_c, meta, HARNESS)
    out: dict[str, Path] = {}
    for name, mode in MODES.items():
        target = out_dir / f"{name}-{digest}"
        if not target.exists():
            tmp = target.with_suffix(".tmp")
            cmd = [
                cc,
                *FLAGS,
                f"-DOG_FUZZ_MODE={mode}",
                f'-DOG_FUZZ_PROGRAM="{program_c}"',
                f'-DOG_FUZZ_META="{meta}"',
                f"-I{NATIVE}",
                "-o",
                str(tmp),
                str(HARNESS),
                *(str(NATIVE / s) for s in SOURCES),
            ]
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT, check=False
            )
            if proc.returncode != 0:
                raise FuzzBuildError(f"{name}: {cc} failed:\n{proc.stderr[-4000:]}")
            os.replace(tmp, target)
        out[name] = target
    return out
