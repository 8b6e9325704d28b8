"""atheris harnesses of the Python parsers: one module per target, each with `one_input(data)`
and `ERRORS`, the exception types its code documents for bad input (anything else is a crash)."""

from __future__ import annotations

import contextlib
import importlib
from types import ModuleType

TARGETS = ("packet", "community_id", "reassembly", "http", "snort_rules", "ips_rules", "policy")
# the packages whose code atheris instruments for coverage
INSTRUMENTED = ["spm", "opengate", "controller"]


def target(name: str) -> ModuleType:
    if name not in TARGETS:
        raise KeyError(f"no Python fuzz target {name!r} (targets: {', '.join(TARGETS)})")
    return importlib.import_module(f"fuzz.py.{name}")


def run_one(module: ModuleType, data: bytes) -> None:
    """One input through a target: its documented errors are answers, anything else raises."""
    with contextlib.suppress(*module.ERRORS):
        module.one_input(data)
