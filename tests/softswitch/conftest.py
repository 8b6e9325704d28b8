"""Shared fixtures: the compiled test programs (committed artifacts; p4c is not needed)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from softswitch.engine import Dataplane
from softswitch.program import Program, load_program

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_program(name: str) -> Program:
    return load_program(json.loads((FIXTURES / f"{name}.json").read_text()))


@pytest.fixture
def make_dataplane() -> Callable[..., Dataplane]:
    def make(name: str, **kwargs: object) -> Dataplane:
        return Dataplane(fixture_program(name), **kwargs)  # type: ignore[arg-type]

    return make
