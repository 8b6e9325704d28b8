"""Skips that say which tool is missing and why; waiting for a condition."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def skip_unless_root(what: str) -> None:
    if os.geteuid() != 0:
        pytest.skip(f"{what} needs root (network namespaces, veths, raw sockets)")


def skip_unless_tool(tool: str, why: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} is not installed: {why}")
    return path


def wait_for(what: str, condition: Callable[[], T], timeout: float = 20.0) -> T:
    """Poll `condition` until it returns something truthy, and return that; fail naming `what`
    after `timeout` seconds. (The controller learns of a session from a digest after the flow
    has passed: a test that reads sessions right after traffic must wait for them.)"""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.1)
