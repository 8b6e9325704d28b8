"""Shared pytest fixtures: the target choice, the reference data folder, root checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from opengate.target import TargetChoice, p4_build_dir, select_target, shared_data_dir


@pytest.fixture(scope="session")
def target_choice() -> TargetChoice:
    return select_target()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = shared_data_dir()
    if not path.is_dir():
        pytest.skip(
            f"reference data folder {path} is missing (expected beside the project: ../shared/data)"
        )
    return path


@pytest.fixture(scope="session")
def build_dir() -> Path:
    return p4_build_dir()
