"""End to end across two NPMs sharing one SPM pool (topo/gateway-2npm.yaml): one controller
drives both switches, each site's traffic passes its own NPM with its own sessions, and both
NPMs steer to, and get back from, the same SPM hosts."""

from __future__ import annotations

import time
from typing import Any

import pytest

from opengate import p4constants as pc
from opengate.p4info import P4Schema
from opengate.p4rt import P4RuntimeClient
from opengate.target import p4_build_dir
from tests.e2e.udp_probe import FLOWS, STEP, assert_answered, run_probe
from tests.helpers import wait_for
from topo.net import GatewayNetwork

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

OUT = "198.51.100.20"
GATEWAY_OUTSIDE = "198.51.100.1"
SITES = {"npm1": ("a1", "outa"), "npm2": ("b1", "outb")}


def _sessions(network: GatewayNetwork, npm: str) -> list[dict[str, Any]]:
    params = {"npm": npm, "limit": 100_000}
    rows: list[dict[str, Any]] = network.api("GET", "/api/v1/sessions", params=params)["sessions"]
    return rows


def test_both_npms_run_the_compact_build(two_npms: GatewayNetwork) -> None:
    """What each switch was given (its forwarding pipeline config, read back over P4Runtime):
    the compact build's P4Info and device config, with its smaller classifier tables."""
    program = two_npms.program_dir
    assert program == p4_build_dir() / "compact"
    devices = {npm.name: npm.device_id for npm in two_npms.spec.npms}
    for npm in SITES:
        address = two_npms.net.get(npm).grpc_address
        with P4RuntimeClient(address, devices[npm]).connect(stream=False) as client:
            config = client.get_pipeline()
        sizes = {t.preamble.name: t.size for t in config.p4info.tables}
        assert sizes[pc.T_ACL_ADDR_PAIR] == sizes[pc.T_IDS_CLASSIFICATION] == 65536, npm
        assert config.p4info == P4Schema.load(program / "opengate.p4info.txtpb").p4info, npm


def test_each_site_reaches_its_own_outside_server(two_npms: GatewayNetwork) -> None:
    for npm, (inside, outside) in SITES.items():
        result = two_npms.run(inside, f"curl -sS --max-time 20 http://{OUT}/index.html")
        assert result.returncode == 0, f"{inside}: {result.output}"
        assert f"OpenGate test server {outside}" in result.output, (npm, result.output)
        seen = two_npms.run(inside, f"curl -sS --max-time 20 http://{OUT}/whoami")
        assert seen.output.strip() == GATEWAY_OUTSIDE, (npm, seen.output)

        def web_sessions(npm: str = npm) -> list[dict[str, Any]]:
            return [s for s in _sessions(two_npms, npm) if s["dport"] == 80]

        wait_for(f"{npm}'s session for its site's web request", web_sessions)


def test_both_npms_steer_to_both_shared_spms(two_npms: GatewayNetwork) -> None:
    spm_ports = {s["port"] for s in two_npms.api("GET", "/api/v1/spms")["spms"].values()}
    for npm, (inside, _) in SITES.items():
        outcome = run_probe(two_npms, inside, f"fixed {OUT} 40000 {FLOWS} --step {STEP}")
        assert_answered(outcome, inside)
        deadline = time.monotonic() + 15
        while True:
            used = {s["spm_port"] for s in _sessions(two_npms, npm) if s["dport"] == 7}
            if used == spm_ports or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert used == spm_ports, f"{npm}'s flows used SPM ports {used}, not {spm_ports}"


def test_both_sites_are_inspected_by_the_shared_spms(two_npms: GatewayNetwork) -> None:
    for inside, _ in SITES.values():
        result = two_npms.run(
            inside, f"curl -sS --max-time 5 http://{OUT}/opengate-forbidden -o /dev/null"
        )
        assert result.returncode != 0, f"{inside}: the forbidden request got through"
    alerts = two_npms.api("GET", "/api/v1/alerts")["alerts"]
    sids = [a for a in alerts if a.get("sid") == 1000101]
    assert len(sids) >= 2, f"expected an alert per site, got {sids}"
