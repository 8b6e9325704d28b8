"""The one place that picks the data-plane target."""

from __future__ import annotations

from pathlib import Path

import pytest

from opengate.errors import ConfigError
from opengate.target import (
    P4_BUILDS,
    Target,
    TargetError,
    p4_build_dir,
    p4_program_dir,
    repo_root,
    select_target,
)
from topo.model import load_topology
from topo.net import GatewayNetwork


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


def test_each_gateway_build_has_its_committed_program() -> None:
    """`make run BUILD=compact`: a build name gives the folder of its BMv2 JSON and P4Info; an
    unknown name is refused with the names there are, and the topology says so as a ConfigError."""
    for build in P4_BUILDS:
        folder = p4_program_dir(build)
        assert (folder / "opengate.json").is_file() and (folder / "opengate.p4info.txtpb").is_file()
    assert p4_program_dir("default") == p4_build_dir()
    assert p4_program_dir("compact") == p4_build_dir() / "compact"
    with pytest.raises(ValueError, match="unknown P4 build 'small': one of default, compact"):
        p4_program_dir("small")
    spec = load_topology(repo_root() / "topo" / "gateway.yaml")
    with pytest.raises(ConfigError, match="unknown P4 build 'small': one of default, compact"):
        GatewayNetwork(spec, Path("/tmp"), p4_build="small")
    network = GatewayNetwork(spec, Path("/tmp"), p4_build="compact")
    assert network.program_dir == p4_build_dir() / "compact"
