"""The end-to-end fixture: the default topology, up once for all e2e tests, always taken down."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from opengate.target import repo_root
from tests.helpers import skip_unless_root, skip_unless_tool
from topo.model import load_topology
from topo.net import GatewayNetwork


@pytest.fixture(scope="session")
def gateway() -> Iterator[GatewayNetwork]:
    skip_unless_root("the Mininet topology")
    skip_unless_tool("mnexec", "Mininet (Debian package mininet) runs the topology's hosts")
    spec = load_topology(repo_root() / "topo" / "gateway.yaml", root=repo_root())
    run_dir = repo_root() / "run" / "e2e"
    with GatewayNetwork(spec, run_dir) as network:
        yield network
