"""Shared fixtures: the compiled test programs (committed artifacts; p4c is not needed)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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


@contextmanager
def veth_pairs(pairs: list[tuple[str, str]]) -> Iterator[None]:
    """Each (inside, outside) a veth pair, up, without IPv6 (the kernel's own router
    solicitations would be frames the tests did not send); deleted afterwards, and first if a
    crashed run left one."""

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    try:
        for inside, outside in pairs:
            subprocess.run(["ip", "link", "del", inside], capture_output=True, check=False)
            ip("link", "add", inside, "type", "veth", "peer", "name", outside)
            for name in (inside, outside):
                subprocess.run(
                    ["sysctl", "-qw", f"net.ipv6.conf.{name}.disable_ipv6=1"],
                    capture_output=True,
                    check=False,
                )
                ip("link", "set", name, "up")
        yield
    finally:
        for inside, _ in pairs:
            subprocess.run(["ip", "link", "del", inside], capture_output=True, check=False)
