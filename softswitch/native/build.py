"""Compiling a generated program with the system C compiler, cached by content hash.

The shared object's name is the SHA-256 of the generated C, the run-time sources and the compiler
command, under `$OPENGATE_NATIVE_CACHE` (default `~/.cache/opengate/native`), so a program that
was loaded once loads again without compiling. `OPENGATE_NATIVE=0` turns the native path off;
`CC` picks the compiler (default `cc`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNTIME = (
    "og_rt.h",
    "og_table.h",
    "og_table_impl.h",
    "og_table.c",
    "og_table_index.c",
    "og_io.h",
    "og_io.c",
    "og_dp.h",
    "og_dp.c",
)
SOURCES = ("og_table.c", "og_table_index.c", "og_io.c")
# The switch's own build: no warning can fail it (a newer compiler's new warning must not turn
# the native path off for users). tests/softswitch/test_native_build.py builds the same sources
# with WARNING_FLAGS and -Werror on gcc and clang, so that the code stays warning-free.
FLAGS = ("-O2", "-shared", "-fPIC", "-pthread", "-w")
WARNING_FLAGS = (
    "-Wall",
    "-Wextra",
    "-Wimplicit-function-declaration",
    "-Wstrict-prototypes",
    "-Wmissing-prototypes",
    "-Wold-style-definition",
    "-Wshadow",
    "-Wundef",
    "-Wvla",
    "-Wpointer-arith",
    "-Wwrite-strings",
    "-Wcast-qual",
)
COMPILE_TIMEOUT = 300
MAX_ERROR_LINES = 20


class BuildError(RuntimeError):
    """The C compiler is missing, turned off, or refused the generated code."""


class CompileError(BuildError):
    """The C compiler ran and refused the code: a bug of the native path (the generated C or the
    run-time sources), never a property of the user's program, which cgen refuses before C."""

    def __init__(self, cc: str, returncode: int, stderr: str) -> None:
        self.cc = cc
        self.returncode = returncode
        self.stderr = stderr
        super().__init__(f"{cc} refused the native path's C (exit {returncode}): {errors(stderr)}")


def errors(stderr: str) -> str:
    """The compiler's error lines (`file:line:col: error: ...`, the linker's `undefined
    reference`), else its last lines: what the log must show of a failed build."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    found = [ln for ln in lines if "error:" in ln or "undefined reference" in ln]
    return "; ".join((found or lines)[:MAX_ERROR_LINES]) or "no output"


def compiler() -> str | None:
    """The C compiler to use, or None when there is none or the native path is turned off."""
    if os.environ.get("OPENGATE_NATIVE", "1").strip().lower() in ("0", "off", "no", "false"):
        return None
    return shutil.which(os.environ.get("CC", "cc"))


def cache_dir() -> Path:
    env = os.environ.get("OPENGATE_NATIVE_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "opengate" / "native"


def build(source: str) -> Path:
    """The shared object of `source` (compiled now unless cached); raises BuildError."""
    cc = compiler()
    if cc is None:
        raise BuildError("no C compiler (cc) found, or OPENGATE_NATIVE=0")
    digest = hashlib.sha256()
    digest.update(source.encode())
    for name in RUNTIME:
        digest.update((HERE / name).read_bytes())
    digest.update(" ".join((cc, *FLAGS)).encode())
    out_dir = cache_dir()
    target = out_dir / f"{digest.hexdigest()[:32]}.so"
    if target.exists():
        return target
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        c_file = Path(tmp) / "program.c"
        c_file.write_text(source)
        so_tmp = Path(tmp) / "program.so"
        cmd = [cc, *FLAGS, f"-I{HERE}", "-o", str(so_tmp), str(c_file)]
        cmd += [str(HERE / s) for s in SOURCES]
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BuildError(f"{cc}: {exc}") from None
        if proc.returncode != 0:
            raise CompileError(cc, proc.returncode, proc.stderr)
        os.replace(so_tmp, target)  # atomic: concurrent builders agree on the same file
    return target
