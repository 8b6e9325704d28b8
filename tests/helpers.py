"""Skips that say which tool is missing and why."""

from __future__ import annotations

import os
import shutil

import pytest


def skip_unless_root(what: str) -> None:
    if os.geteuid() != 0:
        pytest.skip(f"{what} needs root (network namespaces, veths, raw sockets)")


def skip_unless_tool(tool: str, why: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} is not installed: {why}")
    return path
