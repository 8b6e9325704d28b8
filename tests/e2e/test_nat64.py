"""End to end through NAT64 (RFC 6146) across the default topology: h3 has IPv6 only and reaches
out1, an IPv4 host, at 64:ff9b::198.51.100.20 (RFC 6052's well-known prefix); out1 sees the
gateway's outside address. Real traffic: curl, a byte-for-byte download, ping, UDP."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from tests.e2e.udp_probe import run_probe
from tests.helpers import wait_for
from topo.net import GatewayNetwork
from topo.services import generated_bytes

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

OUT1_64 = "64:ff9b::c633:6414"  # 198.51.100.20
PUBLIC = "198.51.100.1"
H3 = "2001:db8:1::12"


def ok(gateway: GatewayNetwork, host: str, command: str) -> str:
    result = gateway.run(host, command, timeout=60)
    assert result.returncode == 0, f"{host}$ {command} exited {result.returncode}:\n{result.output}"
    return result.output


def test_the_ipv6_only_host_has_no_ipv4(gateway: GatewayNetwork) -> None:
    """h3 is IPv6-only: no IPv4 address, no IPv4 route; what it reaches of out1 it reaches
    through NAT64."""
    assert "inet " not in ok(gateway, "h3", "ip -4 addr show scope global")
    assert ok(gateway, "h3", "ip -4 route show").strip() == ""


def test_an_ipv6_only_host_fetches_a_page_from_an_ipv4_server(gateway: GatewayNetwork) -> None:
    """curl -6 to the synthesized address: the server answers the gateway's IPv4 address."""
    page = ok(gateway, "h3", f"curl -6 -sS --max-time 20 http://[{OUT1_64}]/index.html")
    assert "OpenGate test server out1" in page
    seen = ok(gateway, "h3", f"curl -6 -sS --max-time 20 http://[{OUT1_64}]/whoami").strip()
    assert seen == PUBLIC


def test_a_download_through_nat64_is_byte_identical(gateway: GatewayNetwork) -> None:
    """2 MiB and 5 bytes through the translation: every segment's checksum adjusted right (a
    wrong one would be dropped by h3's stack and the transfer would stall)."""
    size = 2 * 1024 * 1024 + 5
    digest = ok(
        gateway, "h3", f"curl -6 -sS --max-time 60 http://[{OUT1_64}]/bytes/{size} | sha256sum"
    ).split()[0]
    assert digest == hashlib.sha256(generated_bytes(size)).hexdigest()


def test_ping_through_nat64(gateway: GatewayNetwork) -> None:
    """ICMPv6 echo becomes ICMP echo and back (the first may be answered late, through the
    CPM)."""
    output = ok(gateway, "h3", f"ping -6 -c 4 -i 0.2 -W 3 {OUT1_64}")
    assert " 0% packet loss" in output or " 25% packet loss" in output, output


def test_udp_through_nat64_is_answered(gateway: GatewayNetwork) -> None:
    """out1's echo service answers with the address it saw: the gateway's."""
    probe = (
        "import socket; s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); "
        "s.settimeout(5); "
        f"s.sendto(b'hello', ('{OUT1_64}', 7)); print(s.recv(200).decode())"
    )
    reply = ok(gateway, "h3", f'python3 -c "{probe}"').strip()
    assert reply.startswith(f"{PUBLIC}:") and reply.endswith(" hello"), reply


def translated_errors(gateway: GatewayNetwork) -> float:
    """The controller's count of ICMP errors it translated for NAT64 flows (0 before the
    first)."""
    series = 'opengate_nat64_icmp_errors_total{npm="npm1",result="translated"} '
    for line in gateway.api_text("/metrics").splitlines():
        if line.startswith(series):
            return float(line[len(series) :])
    return 0.0


def test_a_closed_port_behind_nat64_is_refused_at_once(
    gateway: GatewayNetwork, out1_errors_unlimited: None
) -> None:
    """Ten UDP flows from h3 to a port out1 does not serve: out1's ICMP port unreachable, about
    the translated datagram, reaches h3 as an ICMPv6 port unreachable quoting what h3 sent (RFC
    7915 section 4.2, translated by the CPM), and each socket is refused at once; counted as
    translated."""
    before = translated_errors(gateway)
    out = run_probe(gateway, "h3", f"refused {OUT1_64} 9 10", timeout=90)
    assert out["silent"] == [] and out["answered"] == [], out
    assert len(out["refused"]) == 10, out
    assert translated_errors(gateway) - before >= 10


def test_nat64_sessions_are_listed_by_the_api(gateway: GatewayNetwork) -> None:
    """The API shows the flow as NAT64: an IPv6 original, an IPv4 reply to the gateway's
    address."""
    ok(gateway, "h3", f"curl -6 -sS --max-time 20 -o /dev/null http://[{OUT1_64}]/index.html")

    def listed() -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = gateway.api("GET", "/api/v1/sessions")["sessions"]
        return [r for r in rows if r.get("src") == H3 and r.get("nat") == "64"]

    rows = wait_for("the NAT64 session in the API", listed, timeout=10)
    row = rows[0]
    assert (row["family"], row["dst"], row["r_src"], row["r_dst"]) == (
        6,
        OUT1_64,
        "198.51.100.20",
        PUBLIC,
    )
