"""The native fast path's C builds warning-free, with warnings as errors, on gcc and clang.

What is compiled: the static run-time sources (softswitch/native/og_*.c, each as its own
translation unit) and the C that softswitch/native/cgen.py generates (it includes og_dp.c) for the
OpenGate program of each build under p4src/build/ and for the test fixture programs, with
`softswitch.native.build.WARNING_FLAGS` and -Werror at -O2 (some warnings, e.g.
-Wmaybe-uninitialized, need the optimiser's flow analysis). A function used before its
declaration is an error in C99 and later: clang refuses it ("conflicting types"), GCC 14 too. The
switch's own build keeps `-w` (a newer compiler's new warning must not turn the native path off
for users), and a compile error it meets is logged as one, not as an ordinary fallback.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

import pytest

from opengate.target import p4_build_dir
from softswitch.native import build as native_build
from softswitch.native import make_dataplane
from softswitch.native.cgen import CProgram, generate, parens
from softswitch.native.cgen_expr import UnsupportedError
from softswitch.program import load_json_bytes

NATIVE = Path(native_build.__file__).resolve().parent
FIXTURES = Path(__file__).parent / "fixtures"
PROGRAMS = sorted(p4_build_dir().glob("**/opengate.json")) + sorted(FIXTURES.glob("*.json"))
COMPILERS = ("gcc", "clang")
STRICT = ("-O2", "-c", "-pthread", "-Werror", *native_build.WARNING_FLAGS)


def _compiler(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (scripts/setup.sh installs it)")
    return path


def _compile_strict(cc: str, source: Path, out: Path) -> None:
    proc = subprocess.run(
        [cc, *STRICT, f"-I{NATIVE}", "-o", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"{cc} {source.name}:\n{proc.stderr[-4000:]}"
    assert proc.stderr == "", f"{cc} {source.name} warned:\n{proc.stderr[-4000:]}"


def _label(path: Path) -> str:
    return str(path.relative_to(path.parents[1]))


@pytest.mark.parametrize("cc_name", COMPILERS)
@pytest.mark.parametrize("source", native_build.SOURCES)
def test_runtime_source_builds_with_warnings_as_errors(
    cc_name: str, source: str, tmp_path: Path
) -> None:
    cc = _compiler(cc_name)
    _compile_strict(cc, NATIVE / source, tmp_path / "out.o")


@pytest.mark.parametrize("cc_name", COMPILERS)
@pytest.mark.parametrize("program", PROGRAMS, ids=_label)
def test_generated_program_builds_with_warnings_as_errors(
    cc_name: str, program: Path, tmp_path: Path
) -> None:
    cc = _compiler(cc_name)
    try:
        source = generate(load_json_bytes(program.read_bytes())).source
    except UnsupportedError as exc:
        pytest.skip(f"{program.name} runs on the Python engine: {exc}")
    c_file = tmp_path / "program.c"
    c_file.write_text(source)
    _compile_strict(cc, c_file, tmp_path / "program.o")


@pytest.fixture
def native_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The switch's build caching into this test's folder, with the native path not turned off."""
    monkeypatch.setenv("OPENGATE_NATIVE_CACHE", str(tmp_path))
    monkeypatch.delenv("OPENGATE_NATIVE", raising=False)
    return tmp_path


@pytest.fixture
def cc(native_cache: Path) -> Path:
    """As native_cache, where the system has a C compiler."""
    if native_build.compiler() is None:
        pytest.skip("no C compiler (cc)")
    return native_cache


@pytest.mark.usefixtures("native_cache")
def test_switch_build_links_the_opengate_program_with_clang(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The switch's own build (its flags, linked into a shared object) with clang, which refused
    a function used before its declaration even with warnings off."""
    _compiler("clang")
    monkeypatch.setenv("CC", "clang")
    source = generate(load_json_bytes((p4_build_dir() / "opengate.json").read_bytes())).source
    assert native_build.build(source).is_file()


@pytest.mark.usefixtures("cc")
def test_switch_build_is_not_failed_by_a_warning() -> None:
    """Users' builds keep warnings off: code that warns under -Wall still builds."""
    warns = "static int unused_helper(int x) { int y; return x; }\nint og_probe(void);\n"
    assert native_build.build(warns).is_file()


@pytest.mark.usefixtures("cc")
def test_compile_error_raises_compile_error_with_the_compilers_error_line() -> None:
    with pytest.raises(native_build.CompileError) as info:
        native_build.build("int og_probe(void) { return og_undeclared_name; }\n")
    assert "error:" in str(info.value)
    assert "og_undeclared_name" in str(info.value)


@pytest.mark.usefixtures("cc")
def test_compile_error_in_auto_mode_is_logged_as_an_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """`auto` still runs the program on the Python engine, but says that the native path's C
    did not compile (a bug), at ERROR, with the compiler's message."""
    broken = CProgram(source="int og_probe(void) { return og_undeclared_name; }\n")
    monkeypatch.setattr("softswitch.native.dataplane.generate", lambda _program: broken)
    program = load_json_bytes((FIXTURES / "l3.json").read_bytes())
    with caplog.at_level(logging.WARNING, logger="softswitch.native"):
        dp = make_dataplane(program, engine="auto")
    assert not getattr(dp, "native", False)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, caplog.text
    assert "compile error" in errors[0].getMessage()
    assert "og_undeclared_name" in errors[0].getMessage()


@pytest.mark.parametrize(
    ("code", "wrapped"),
    [
        ("(a == b)", "(a == b)"),
        ("a", "(a)"),
        ("(a) && (b)", "((a) && (b))"),
        ("((a) == (b))", "((a) == (b))"),
    ],
)
def test_condition_gets_one_pair_of_parentheses(code: str, wrapped: str) -> None:
    assert parens(code) == wrapped
