"""End to end, with real traffic across the default topology (topo/gateway.yaml) and the
controller running the example policy: what passes, what is translated, what is dropped."""

from __future__ import annotations

import hashlib
import sys

import pytest

from topo.net import GatewayNetwork
from topo.services import generated_bytes

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

OUT1 = "198.51.100.20"
GATEWAY_OUTSIDE = "198.51.100.1"


def ok(gateway: GatewayNetwork, host: str, command: str) -> str:
    result = gateway.run(host, command, timeout=60)
    assert result.returncode == 0, f"{host}$ {command} exited {result.returncode}:\n{result.output}"
    return result.output


def test_inside_host_fetches_a_page_from_outside(gateway: GatewayNetwork) -> None:
    page = ok(gateway, "h1", f"curl -sS --max-time 20 http://{OUT1}/index.html")
    assert "OpenGate test server out1" in page


def test_outside_server_sees_the_masquerade_address(gateway: GatewayNetwork) -> None:
    seen = ok(gateway, "h2", f"curl -sS --max-time 20 http://{OUT1}/whoami").strip()
    assert seen == GATEWAY_OUTSIDE


def test_download_is_byte_identical(gateway: GatewayNetwork) -> None:
    size = 3 * 1024 * 1024 + 17
    digest = ok(
        gateway, "h1", f"curl -sS --max-time 60 http://{OUT1}/bytes/{size} | sha256sum"
    ).split()[0]
    assert digest == hashlib.sha256(generated_bytes(size)).hexdigest()


def test_inside_host_pings_outside(gateway: GatewayNetwork) -> None:
    output = ok(gateway, "h1", f"ping -c 3 -i 0.2 -W 2 {OUT1}")
    assert " 0% packet loss" in output


def test_udp_datagram_is_answered_through_nat(gateway: GatewayNetwork) -> None:
    reply = ok(
        gateway,
        "h1",
        f'{sys.executable} -c "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM);'
        f" s.settimeout(10); s.sendto(b'hello', ('{OUT1}', 7)); print(s.recv(100).decode())\"",
    ).strip()
    address, _, payload = reply.partition(" ")
    assert (address.split(":")[0], payload) == (GATEWAY_OUTSIDE, "hello")


def test_port_forward_reaches_the_inside_server(gateway: GatewayNetwork) -> None:
    page = ok(gateway, "out1", f"curl -sS --max-time 20 http://{GATEWAY_OUTSIDE}:8080/index.html")
    assert "OpenGate test server h1" in page


def test_outside_cannot_open_a_connection_to_an_inside_host(gateway: GatewayNetwork) -> None:
    result = gateway.run("out1", "curl -sS --max-time 3 http://10.0.1.10/ -o /dev/null")
    assert result.returncode != 0, "an outside host reached an inside host without a port forward"
