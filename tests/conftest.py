"""Shared pytest fixtures: the target choice, the reference data folder, root checks."""

from __future__ import annotations

import fcntl
import os
import sys
import time
from collections.abc import Iterator
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


# Two runs of the suite on one machine (CI beside a developer's run) would make the same veths
# (PTF's og-sw*, the differential tests'), namespaces and Mininet topologies: the second waits
# here, before its first test, until the first has finished. Runs without root make none.
SUITE_LOCK = Path("/run/opengate/test-suite.lock")
SUITE_WAIT = 3600.0


@pytest.fixture(scope="session", autouse=True)
def one_suite_at_a_time() -> Iterator[None]:
    if os.geteuid() != 0:
        yield
        return
    SUITE_LOCK.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(SUITE_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + SUITE_WAIT
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = os.pread(fd, 16, 0).decode(errors="replace").strip()
                if time.monotonic() > deadline:
                    pytest.exit(f"another test run (pid {holder}) held {SUITE_LOCK} for an hour", 3)
                if not told:
                    print(
                        f"\nwaiting for another test run (pid {holder}) to end", file=sys.__stderr__
                    )
                    told = True
                time.sleep(1.0)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)
