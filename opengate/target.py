"""The one place that decides which data-plane target runs the P4 program.

`TARGET=soft` is the built-in software switch, `TARGET=bmv2` is BMv2's `simple_switch_grpc`.
Unset (or empty), BMv2 is used when `simple_switch_grpc` is on PATH, else the software switch.
Every test, benchmark and tool calls `select_target()`; nothing else reads TARGET.
"""

from __future__ import annotations

import enum
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

BMV2_BINARY = "simple_switch_grpc"


class Target(enum.Enum):
    SOFT = "soft"
    BMV2 = "bmv2"


class TargetError(ValueError):
    """TARGET names no known target, or names one whose binary is missing."""


@dataclass(frozen=True, slots=True)
class TargetChoice:
    target: Target
    command: tuple[str, ...]  # argv prefix that starts the switch; ports and options are appended
    reason: str


def _soft_command() -> tuple[str, ...]:
    return (sys.executable, "-m", "softswitch")


def select_target(env: dict[str, str] | None = None) -> TargetChoice:
    env = dict(os.environ) if env is None else env
    value = env.get("TARGET", "").strip().lower()
    bmv2 = shutil.which(BMV2_BINARY, path=env.get("PATH"))
    if value == "":
        if bmv2:
            return TargetChoice(
                Target.BMV2, (bmv2,), f"TARGET unset and {BMV2_BINARY} found at {bmv2}"
            )
        return TargetChoice(
            Target.SOFT, _soft_command(), f"TARGET unset and {BMV2_BINARY} not on PATH"
        )
    try:
        target = Target(value)
    except ValueError:
        known = ", ".join(t.value for t in Target)
        raise TargetError(
            f"TARGET={value!r} is not a data-plane target; use one of: {known}"
        ) from None
    if target is Target.BMV2:
        if not bmv2:
            raise TargetError(
                f"TARGET=bmv2 but {BMV2_BINARY} is not on PATH; install BMv2 (see "
                "docs/howto/bmv2.md) or use TARGET=soft"
            )
        return TargetChoice(Target.BMV2, (bmv2,), "TARGET=bmv2")
    return TargetChoice(Target.SOFT, _soft_command(), "TARGET=soft")


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def p4_build_dir() -> Path:
    return repo_root() / "p4src" / "build"


# The committed v1model builds a gateway can run, by name (`make run BUILD=compact`): the same
# program, tables and ids; compact gives the HSM chains' tables 65,536 entries instead of
# 1,048,576 (p4src/include/sizes.p4), for BMv2 on a laptop. (naive_acl is for the benches.)
P4_BUILDS = {"default": "", "compact": "compact"}


def p4_program_dir(build: str) -> Path:
    """The folder of a gateway build's BMv2 JSON and P4Info; ValueError names the builds."""
    if build not in P4_BUILDS:
        raise ValueError(f"unknown P4 build {build!r}: one of {', '.join(P4_BUILDS)}")
    return p4_build_dir() / P4_BUILDS[build]


def shared_data_dir() -> Path:
    """../shared/data relative to the project root (reference data; may be absent)."""
    return repo_root().parent / "shared" / "data"


def main() -> int:
    """`python -m opengate.target`: print the choice, or why TARGET is wrong (exit 2)."""
    try:
        choice = select_target()
    except TargetError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"data-plane target: {choice.target.value} ({choice.reason})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
