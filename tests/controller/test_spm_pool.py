"""SPM liveness: an SPM that has never reported has `spm.startup_grace` for its first report; one
that has reported is down `down_after` seconds after its last report."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest

from controller.policy import SpmSettings, load_policy
from controller.spm_pool import SpmPool
from opengate.errors import ConfigError

LAB = Path(__file__).parent / "data" / "lab.yaml"


def pool(down_after: float, grace: float) -> SpmPool:
    policy = load_policy(LAB)
    settings = SpmSettings(down_after=down_after, startup_grace=grace)
    return SpmPool(replace(policy, spm=settings), now=100.0)


def test_a_starting_spm_has_the_grace_and_a_reporting_one_down_after(
    caplog: pytest.LogCaptureFixture,
) -> None:
    spms = pool(down_after=2.5, grace=30.0)
    assert set(spms.states) == {"spm1", "spm2"}
    assert spms.weights() == {"spm1": 8, "spm2": 8}  # unknown SPMs are members meanwhile
    spms.report("spm1", {"cpu": 0}, now=101.0)
    assert spms.expired(103.4) == []
    with caplog.at_level(logging.WARNING, logger="controller.spm_pool"):
        assert spms.expired(103.6) == ["spm1"]  # 2.6 s after its last report
        assert spms.expired(129.9) == []  # spm2 never reported: still starting
        assert spms.expired(130.1) == ["spm2"]
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0].startswith("SPM spm1 is down: no load report for 2.6")
    assert messages[1].startswith("SPM spm2 is down: no report since it was configured for 30.1")
    assert spms.weights() == {}
    assert {n: s.status for n, s in spms.states.items()} == {"spm1": "down", "spm2": "down"}
    spms.report("spm2", {"cpu": 0}, now=131.0)
    assert spms.weights() == {"spm2": 8}
    assert spms.expired(133.4) == [] and spms.expired(133.6) == ["spm2"]


def test_the_grace_is_never_shorter_than_down_after_and_0_turns_liveness_off() -> None:
    spms = pool(down_after=5.0, grace=1.0)
    assert spms.expired(104.9) == []
    assert sorted(spms.expired(105.1)) == ["spm1", "spm2"]
    assert pool(down_after=0.0, grace=1.0).expired(1e9) == []


def test_startup_grace_in_the_policy(tmp_path: Path) -> None:
    text = LAB.read_text()
    path = tmp_path / "lab.yaml"
    for name in ("lab.rules",):
        (tmp_path / name).write_text((LAB.parent / name).read_text())
    path.write_text(text.replace("  queue_limit: 1000", "  queue_limit: 1000\n  startup_grace: 12"))
    assert load_policy(path).spm.startup_grace == 12.0
    assert load_policy(LAB).spm.startup_grace == 30.0
    path.write_text(text.replace("  queue_limit: 1000", "  queue_limit: 1000\n  startup_grace: -1"))
    with pytest.raises(ConfigError, match="startup_grace"):
        load_policy(path)
