"""End to end over IPv6, across the dual-stack default topology (topo/gateway.yaml) with the
controller running the example policy: what passes, what the gateway answers, what it drops
(RFC 6092: outbound permitted, inbound only for flows opened from inside)."""

from __future__ import annotations

import hashlib
import json

import pytest

from opengate import p4constants as pc
from tests.helpers import wait_for
from topo.net import GatewayNetwork
from topo.services import generated_bytes

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

OUT1 = "2001:db8:2::20"
H1 = "2001:db8:1::10"
GATEWAY_INSIDE = "2001:db8:1::1"


def ok(gateway: GatewayNetwork, host: str, command: str) -> str:
    result = gateway.run(host, command, timeout=60)
    assert result.returncode == 0, f"{host}$ {command} exited {result.returncode}:\n{result.output}"
    return result.output


def drops(gateway: GatewayNetwork, reason: int) -> int:
    return gateway.counter(pc.C_DROP_COUNTER, reason)


def test_inside_host_fetches_a_page_over_ipv6(gateway: GatewayNetwork) -> None:
    """curl -6: the SYN opens a session through the CPM, the rest of the flow hits it both ways;
    the server sees the inside host's own address (IPv6 is routed, not translated)."""
    page = ok(gateway, "h1", f"curl -6 -sS --max-time 20 http://[{OUT1}]/index.html")
    assert "OpenGate test server out1" in page
    seen = ok(gateway, "h1", f"curl -6 -sS --max-time 20 http://[{OUT1}]/whoami").strip()
    assert seen == H1


def test_ipv6_download_is_byte_identical(gateway: GatewayNetwork) -> None:
    size = 2 * 1024 * 1024 + 5
    digest = ok(
        gateway, "h2", f"curl -6 -sS --max-time 60 http://[{OUT1}]/bytes/{size} | sha256sum"
    ).split()[0]
    assert digest == hashlib.sha256(generated_bytes(size)).hexdigest()


def test_inside_host_pings_outside_over_ipv6(gateway: GatewayNetwork) -> None:
    """ping -6: the first request opens the session (it may be answered late, through the CPM);
    the rest are answered. The gateway's neighbour advertisements made the ping possible: h1
    resolved its default router's address (ND, answered in the data plane)."""
    output = ok(gateway, "h1", f"ping -6 -c 4 -i 0.2 -W 3 {OUT1}")
    assert " 0% packet loss" in output or " 25% packet loss" in output, output
    neighbours = ok(gateway, "h1", f"ip -6 neigh show {GATEWAY_INSIDE}")
    assert "02:00:00:00:00:01" in neighbours, neighbours


def test_udp_over_ipv6_is_answered(gateway: GatewayNetwork) -> None:
    """A UDP datagram to out1's echo service, and its answer naming h1's own address."""
    probe = (
        "import socket; s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); "
        "s.settimeout(5); "
        f"s.sendto(b'hello', ('{OUT1}', 7)); print(s.recv(200).decode())"
    )
    reply = ok(gateway, "h1", f'python3 -c "{probe}"').strip()
    assert reply.startswith(f"{H1}:") and reply.endswith(" hello"), reply


def test_iperf3_over_ipv6(gateway: GatewayNetwork) -> None:
    """One TCP flow for two seconds: every byte sent arrives (a stream that stalled would lose
    its throughput, not bytes: the count is the check)."""
    text = ok(gateway, "h1", f"iperf3 -6 -c {OUT1} -t 2 -J --connect-timeout 10000")
    end = json.loads(text)["end"]
    assert end["sum_received"]["bytes"] > 1_000_000, end
    assert end["sum_received"]["bytes"] <= end["sum_sent"]["bytes"]


def test_unsolicited_inbound_ipv6_connection_is_dropped(gateway: GatewayNetwork) -> None:
    """out1 cannot open a connection to h1 (RFC 6092): its SYN is dropped by the ACL's default
    and counted; h1's web server never sees it."""
    before = drops(gateway, pc.DROP_ACL_DENY)
    result = gateway.run("out1", f"curl -6 -sS --max-time 3 http://[{H1}]/", timeout=30)
    assert result.returncode != 0, result.output
    wait_for(
        "the inbound SYN to be counted as ACL_DENY",
        lambda: drops(gateway, pc.DROP_ACL_DENY) > before,
        timeout=10,
    )


def test_the_gateway_answers_pings_of_its_ipv6_address(gateway: GatewayNetwork) -> None:
    output = ok(gateway, "h1", f"ping -6 -c 2 -i 0.2 -W 5 {GATEWAY_INSIDE}")
    assert " 0% packet loss" in output


def test_an_ipv6_hop_limit_that_runs_out_at_the_gateway_is_answered(
    gateway: GatewayNetwork,
) -> None:
    """ping -6 with hop limit 1: the gateway's inside address answers with a time exceeded
    (ICMPv6 type 3), as traceroute6 needs."""
    result = gateway.run("h1", f"ping -6 -c 1 -t 1 -W 5 {OUT1}", timeout=30)
    assert f"From {GATEWAY_INSIDE} icmp_seq=1 Time exceeded" in result.output, result.output


def test_an_unreachable_ipv6_network_is_answered(gateway: GatewayNetwork) -> None:
    result = gateway.run("h1", "ping -6 -c 1 -W 5 2001:db8:77::1", timeout=30)
    assert f"From {GATEWAY_INSIDE} icmp_seq=1 Destination unreachable" in result.output, (
        result.output
    )


def test_ipv6_sessions_are_listed_by_the_api(gateway: GatewayNetwork) -> None:
    """The flow curl opened is a session of the CPM, with its IPv6 addresses."""
    ok(gateway, "h2", f"curl -6 -sS --max-time 20 http://[{OUT1}]/index.html")

    def listed() -> bool:
        text = json.dumps(gateway.api("GET", "/api/v1/sessions"))
        return "2001:db8:1::11" in text and OUT1 in text

    wait_for("the API to list h2's IPv6 session", listed, timeout=10)


def test_ipv6_request_matching_a_rule_is_blocked_and_alerted(gateway: GatewayNetwork) -> None:
    """The flow's class sends it to an SPM, as IPv4's: the forbidden URI's rule (HOME_NET holds
    the inside IPv6 prefix) fires, the request fails, and the alert names the IPv6 addresses."""
    result = gateway.run(
        "h1", f"curl -6 -sS --max-time 5 http://[{OUT1}]/opengate-forbidden -o /dev/null"
    )
    assert result.returncode != 0, "the forbidden request got through"

    def alert() -> dict[str, object] | None:
        alerts = gateway.api("GET", "/api/v1/alerts")["alerts"]
        return next((a for a in alerts if a.get("sid") == 1000101 and OUT1 in json.dumps(a)), None)

    found = wait_for("an alert for sid 1000101 over IPv6", alert, timeout=15)
    assert H1 in json.dumps(found), found


def test_eicar_over_ipv6_is_stopped(gateway: GatewayNetwork) -> None:
    def av_alerts() -> int:
        alerts = gateway.api("GET", "/api/v1/alerts")["alerts"]
        return sum(1 for a in alerts if str(a.get("msg", "")).startswith("AV:"))

    before = av_alerts()
    result = gateway.run("h2", f"curl -6 -sS --max-time 8 http://[{OUT1}]/eicar.com -o /dev/null")
    assert result.returncode != 0, "eicar.com was downloaded over IPv6 through the gateway"
    wait_for("an AV alert for the IPv6 download", lambda: av_alerts() > before, timeout=15)
