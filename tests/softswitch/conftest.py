"""Shared fixtures: the compiled test programs (committed artifacts; p4c is not needed)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from softswitch.engine import Dataplane
from softswitch.native.build import compiler
from softswitch.native.cgen_expr import UnsupportedError
from softswitch.native.dataplane import load_native
from softswitch.program import Program, load_program

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_program(name: str) -> Program:
    return load_program(json.loads((FIXTURES / f"{name}.json").read_text()))


@pytest.fixture(params=["python", "native"])
def make_dataplane(request: pytest.FixtureRequest) -> Iterator[Callable[..., Dataplane]]:
    """A data plane for a fixture program, on each engine: the Python one, and the program
    compiled to C (skipped when there is no C compiler or the program uses what the native path
    leaves to the Python engine: the skip names it)."""
    made: list[Any] = []

    def make(name: str, **kwargs: Any) -> Dataplane:
        program = fixture_program(name)
        if request.param == "python":
            return Dataplane(program, **kwargs)
        if compiler() is None:
            pytest.skip("native engine: no C compiler (cc)")
        try:
            dp = load_native(program, **kwargs)
        except UnsupportedError as exc:
            pytest.skip(f"native engine: {exc} (runs on the Python engine)")
        made.append(dp)
        return dp  # type: ignore[return-value]

    yield make
    for dp in made:
        dp.close()
