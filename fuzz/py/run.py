"""`python -m fuzz.py.run TARGET [libFuzzer flags] [corpus dirs]`: one Python target under
atheris (coverage-guided, libFuzzer's engine), its code instrumented. An exception that is not
among the target's ERRORS, or an input slower than -timeout, is a crash: libFuzzer writes the
input to -artifact_prefix and the exit status is non-zero."""

from __future__ import annotations

import logging
import sys
from types import ModuleType

import atheris  # type: ignore[import-untyped]

from fuzz.py import INSTRUMENTED, TARGETS, run_one, target


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in TARGETS:
        print(f"usage: python -m fuzz.py.run TARGET [libFuzzer args]; targets: {TARGETS}")
        return 2
    logging.disable(logging.CRITICAL)  # the parsers log what they refuse: not the fuzzer's output
    with atheris.instrument_imports(include=INSTRUMENTED):
        module: ModuleType = target(argv[1])

    def one(data: bytes) -> None:
        run_one(module, data)

    atheris.Setup([argv[0], *argv[2:]], one)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
