"""The native fast path of the software switch: the loaded program compiled to C (cgen), built with
the system compiler (build), run behind the Python engine's interface (dataplane), with tables in
og_table.c and packet I/O in og_io.c. `make_dataplane` picks it or the Python engine."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from softswitch.engine import Dataplane, DigestSink
from softswitch.errors import LoadError
from softswitch.native.build import BuildError, CompileError
from softswitch.native.cgen_expr import UnsupportedError
from softswitch.native.dataplane import load_native
from softswitch.program import Program

LOG = logging.getLogger(__name__)
ENGINES = ("auto", "native", "python")


def engine_choice(engine: str | None = None) -> str:
    """The engine asked for: the argument, else $SOFTSWITCH_ENGINE, else auto."""
    choice = (engine or os.environ.get("SOFTSWITCH_ENGINE") or "auto").strip().lower()
    if choice not in ENGINES:
        raise LoadError(f"unknown engine {choice!r} (choose from {', '.join(ENGINES)})")
    return choice


def make_dataplane(
    program: Program, digest_sink: DigestSink | None = None, engine: str | None = None
) -> Any:
    """The program's data plane: native where it can be (auto, native) else the Python engine.
    With `native`, a program the native path cannot run is refused (LoadError) rather than run
    in Python; with `auto` it runs in Python and the log says why."""
    choice = engine_choice(engine)
    if choice != "python":
        start = time.monotonic()
        try:
            dp = load_native(program, digest_sink)
        except (UnsupportedError, BuildError, OSError) as exc:
            if choice == "native":
                raise LoadError(f"the native path cannot run this program: {exc}") from None
            if isinstance(exc, CompileError):
                # not a limit of the native path but its bug: said as an error, with the
                # compiler's own error lines
                LOG.error("native path: C compile error, running on the Python engine: %s", exc)
            else:
                LOG.warning("running the program on the Python engine: %s", exc)
            py = Dataplane(program, digest_sink=digest_sink)
            py.fallback_reason = str(exc)
            return py
        LOG.info("native path: program ready in %.2f s", time.monotonic() - start)
        return dp
    return Dataplane(program, digest_sink=digest_sink)
