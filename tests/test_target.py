"""The one place that picks the data-plane target."""

from __future__ import annotations

from pathlib import Path

import pytest

from opengate.target import Target, TargetError, select_target


def _path_with_fake_bmv2(tmp_path: Path) -> str:
    fake = tmp_path / "simple_switch_grpc"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    return str(tmp_path)


def test_unset_target_prefers_bmv2_when_installed(tmp_path: Path) -> None:
    choice = select_target({"PATH": _path_with_fake_bmv2(tmp_path)})
    assert choice.target is Target.BMV2
    assert choice.command == (str(tmp_path / "simple_switch_grpc"),)


def test_unset_target_falls_back_to_soft_switch(tmp_path: Path) -> None:
    choice = select_target({"PATH": str(tmp_path)})
    assert choice.target is Target.SOFT
    assert choice.command[1:] == ("-m", "softswitch")


def test_soft_target_is_chosen_even_with_bmv2_installed(tmp_path: Path) -> None:
    choice = select_target({"PATH": _path_with_fake_bmv2(tmp_path), "TARGET": "soft"})
    assert choice.target is Target.SOFT


def test_unknown_target_fails_naming_the_value_and_the_choices() -> None:
    with pytest.raises(
        TargetError, match=r"TARGET='tofino' is not a data-plane target; use one of: soft, bmv2"
    ):
        select_target({"PATH": "/nonexistent", "TARGET": "tofino"})


def test_bmv2_target_without_bmv2_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(TargetError, match="simple_switch_grpc is not on PATH"):
        select_target({"PATH": str(tmp_path), "TARGET": "bmv2"})


def test_make_with_unknown_target_stops_with_the_message() -> None:
    import subprocess

    from opengate.target import repo_root

    result = subprocess.run(
        ["make", "-s", "setup", "TARGET=tofino"],
        cwd=repo_root(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert "TARGET='tofino' is not a data-plane target" in result.stderr
