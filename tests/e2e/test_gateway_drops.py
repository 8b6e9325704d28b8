"""End to end: what an outside host must not get through, checked on the NPM's drop counters."""

from __future__ import annotations

import sys
import time

import pytest

from opengate import p4constants as pc
from topo.net import GatewayNetwork

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

OUT1_MAC = "00:00:00:00:02:20"
GATEWAY_OUTSIDE_MAC = "02:00:00:00:00:02"


def drops(gateway: GatewayNetwork, reason: int) -> int:
    """drop_counter[reason]."""
    return gateway.counter(pc.C_DROP_COUNTER, reason)


def send_from_out1(gateway: GatewayNetwork, frame: str) -> None:
    script = f"from scapy.all import *; sendp({frame}, iface='out1-eth0', verbose=False)"
    result = gateway.run("out1", f'{sys.executable} -c "{script}"')
    assert result.returncode == 0, result.output


def wait_for_drops(gateway: GatewayNetwork, reason: int, expected: int) -> None:
    deadline = time.monotonic() + 10
    while (count := drops(gateway, reason)) < expected:
        assert time.monotonic() < deadline, (
            f"drop_counter[{pc.DROP_NAMES[reason]}] is {count}, expected {expected}"
        )
        time.sleep(0.1)


def test_spoofed_tag_from_outside_is_dropped(gateway: GatewayNetwork) -> None:
    before = drops(gateway, pc.DROP_TAG_SPOOF)
    tag = "02:4f:47:00:01:00"  # the first NPM's block: what an SPM would send back
    send_from_out1(
        gateway,
        f"Ether(src='{OUT1_MAC}', dst='{tag}')/IP(src='198.51.100.20', dst='10.0.1.10')"
        "/TCP(sport=80, dport=40000, flags='A')",
    )
    wait_for_drops(gateway, pc.DROP_TAG_SPOOF, before + 1)


def test_tcp_without_session_from_outside_is_dropped(gateway: GatewayNetwork) -> None:
    # To the port forward, which the ACL permits: only the missing session stops it.
    before = drops(gateway, pc.DROP_NO_SESSION)
    send_from_out1(
        gateway,
        f"Ether(src='{OUT1_MAC}', dst='{GATEWAY_OUTSIDE_MAC}')"
        "/IP(src='198.51.100.20', dst='198.51.100.1')/TCP(sport=40001, dport=8080, flags='A')",
    )
    wait_for_drops(gateway, pc.DROP_NO_SESSION, before + 1)
