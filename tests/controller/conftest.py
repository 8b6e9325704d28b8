"""Fixtures for the controller tests: the switch double (the built-in switch's P4Runtime server
with no ports), a lab policy in a temporary folder, and controllers that are always stopped."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.npm import NpmAddress, Pipeline
from controller.runtime import Controller, ControllerOptions
from tests.controller.real_switch import Lab, running_lab
from tests.switch_double import SwitchDouble

DATA = Path(__file__).resolve().parent / "data"


def wait_until(what: str, condition: Callable[[], Any], timeout: float = 5.0) -> Any:
    """Poll `condition` until it is truthy; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.01)


@pytest.fixture
def switch() -> Iterator[SwitchDouble]:
    with SwitchDouble() as server:
        yield server


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    """The lab policy and its rules file, copied where a test may change them."""
    folder = tmp_path / "policy"
    folder.mkdir()
    for name in ("lab.yaml", "lab.rules"):
        shutil.copy(DATA / name, folder / name)
    return folder / "lab.yaml"


ControllerFactory = Callable[..., Controller]


@pytest.fixture
def make_controller(tmp_path: Path, lab: Path) -> Iterator[ControllerFactory]:
    started: list[Controller] = []

    def make(
        *servers: SwitchDouble | str,
        policy: Path | None = lab,
        db_url: str | None = None,
        election_id: int = 10,
        wait: bool = True,
        tick: float = 0.05,
        pipeline: Pipeline | None = None,
    ) -> Controller:
        npms = tuple(
            NpmAddress(f"npm{i + 1}", s if isinstance(s, str) else s.address, 1)
            for i, s in enumerate(servers)
        )
        options = ControllerOptions(
            npms=npms,
            policy_path=policy,
            db_url=db_url or f"sqlite:///{tmp_path / 'cpm.db'}",
            election_id=election_id,
            state_dir=tmp_path,
            tick_seconds=tick,
            connect_timeout=5.0,
            **({"pipeline": pipeline} if pipeline is not None else {}),
        )
        controller = Controller(options)
        started.append(controller)
        controller.start()
        if wait:
            assert controller.wait_synced(20), "the controller did not reconcile in time"
        return controller

    yield make
    for controller in reversed(started):
        controller.stop()


@pytest.fixture
def real_lab(request: pytest.FixtureRequest, tmp_path: Path, lab: Path) -> Iterator[Lab]:
    """The lab policy on a real switch over veths (tests/controller/real_switch.py); indirect
    parameters: (old, new) replacements in the policy."""
    yield from running_lab(request, tmp_path, lab)
