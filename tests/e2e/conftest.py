"""The end-to-end fixtures: one topology up at a time (they share host and SPM names), each
brought up once and reused by the tests that ask for it, always taken down."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from opengate.target import repo_root
from tests.helpers import skip_unless_root, skip_unless_tool
from topo.model import load_topology
from topo.net import GatewayNetwork

# The SPMs offload clean flows of their "other" class (not HTTP, TLS, SSH or DNS) after 1 MiB,
# when the controller's class allows it (classes "bulk" and "other" of the example policy).
BYPASS_AFTER = 1 << 20
SPM_BYPASS = {"classes": ["other"], "after_bytes": BYPASS_AFTER}


class Topologies:
    """Keeps at most one running topology; asking for another stops the current one."""

    def __init__(self) -> None:
        self.current: tuple[str, GatewayNetwork] | None = None

    def get(self, file_name: str, **options: Any) -> GatewayNetwork:
        if self.current is not None and self.current[0] == file_name:
            return self.current[1]
        self.close()
        spec = load_topology(repo_root() / "topo" / file_name, root=repo_root())
        run_dir = repo_root() / "run" / "e2e" / spec.name
        network = GatewayNetwork(spec, run_dir, **options)
        network.__enter__()
        self.current = (file_name, network)
        return network

    def close(self) -> None:
        if self.current is not None:
            _, network = self.current
            self.current = None
            network.stop()


# One manager for the whole run: the console's browser tests (tests/web/) use these fixtures too,
# and two managers would each keep a topology up, with the same interface names.
_TOPOLOGIES = Topologies()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed test's report shows the running topology's state and its logs' last lines (the
    run directory is gone with a CI machine)."""
    report = yield
    if report.failed and _TOPOLOGIES.current is not None:
        name, network = _TOPOLOGIES.current
        report.sections.append((f"topology {name}", network.diagnosis()))
    return report


# Package scope: the last topology is stopped once the package's tests are done, not at the end
# of the whole run (a BMv2 of the default build holds about 4 GB, which the PTF suite's BMv2
# then needs).
@pytest.fixture(scope="package")
def topologies() -> Iterator[Topologies]:
    skip_unless_root("the Mininet topology")
    skip_unless_tool("mnexec", "Mininet (Debian package mininet) runs the topology's hosts")
    try:
        yield _TOPOLOGIES
    finally:
        _TOPOLOGIES.close()


@pytest.fixture
def gateway(topologies: Topologies) -> GatewayNetwork:
    """The default topology (topo/gateway.yaml) with the example policy."""
    return topologies.get("gateway.yaml", spm_bypass=SPM_BYPASS)


@pytest.fixture
def two_npms(topologies: Topologies) -> GatewayNetwork:
    """Two NPMs sharing the SPM pool (topo/gateway-2npm.yaml), running the compact build: two
    BMv2s of the default build take 8 GB, and the compact build gets its end-to-end run."""
    return topologies.get("gateway-2npm.yaml", spm_bypass=SPM_BYPASS, p4_build="compact")


@pytest.fixture
def two_sites(topologies: Topologies) -> GatewayNetwork:
    """The two-site VPN (topo/gateway-2site.yaml): site A and site B joined by an IPsec tunnel."""
    from spm.ipsec.charon import find_charon

    if find_charon() is None:
        pytest.skip("charon-systemd is not installed (Debian package charon-systemd)")
    return topologies.get("gateway-2site.yaml", p4_build="compact")  # two NPMs, as above


@pytest.fixture
def out1_errors_unlimited(gateway: GatewayNetwork) -> Iterator[None]:
    """out1's kernel sends an ICMP error for every datagram (by default, after a burst, about
    one a second to a host: the test would measure Linux's rate limit, not the gateway)."""
    before = gateway.run("out1", "sysctl -n net.ipv4.icmp_ratelimit").output.strip()
    assert before.isdigit(), before
    gateway.run("out1", "sysctl -qw net.ipv4.icmp_ratelimit=0")
    try:
        yield
    finally:
        gateway.run("out1", f"sysctl -qw net.ipv4.icmp_ratelimit={before}")
