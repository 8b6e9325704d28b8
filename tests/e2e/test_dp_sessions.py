"""End to end: sessions made by the NPM itself. With a routed policy (the example policy without
masquerade), every new TCP connection from an inside host is set up in the data plane: its SYN-ACK
is admitted by the slot its SYN claimed, never dropped while the controller installs the session
(the cause of the 1 s stalls before: the client retransmitted its SYN after a second)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from opengate import p4constants as pc
from topo.model import without_masquerade
from topo.net import GatewayNetwork

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

OUT1 = "198.51.100.20"
H1 = "10.0.1.10"
CONNECTIONS = 20


@pytest.fixture
def routed_gateway(gateway: GatewayNetwork) -> Iterator[GatewayNetwork]:
    running = gateway.api("GET", "/api/v1/policy")
    path = str(gateway.spec.policy)
    gateway.api(
        "POST",
        "/api/v1/policy/apply",
        json={"path": path, "text": without_masquerade(running["text"])},
    )
    try:
        yield gateway
    finally:
        gateway.api("POST", "/api/v1/policy/apply", json={"path": path, "text": running["text"]})


def flow_events(gateway: GatewayNetwork, event: int) -> int:
    return gateway.counter(pc.C_FLOW_EVENT_COUNTER, event)


def test_routed_connections_are_set_up_by_the_data_plane(routed_gateway: GatewayNetwork) -> None:
    """20 connections h1 -> out1: each answered (the server sees h1's own address), each made a
    slot (or, on a collision, took the counted controller path), no SYN-ACK dropped for want of
    a session, and the controller learns every one of them."""
    gateway = routed_gateway
    no_session = gateway.counter(pc.C_DROP_COUNTER, pc.DROP_NO_SESSION)
    created = flow_events(gateway, pc.FLOW_EVENT_CREATED)
    collisions = flow_events(gateway, pc.FLOW_EVENT_COLLISION)
    ports: set[int] = set()
    for _ in range(CONNECTIONS):
        result = gateway.run(
            "h1", f"curl -s -m 10 -w ' %{{local_port}}' http://{OUT1}/whoami", timeout=30
        )
        assert result.returncode == 0, (len(ports), result.output)
        seen, port = result.output.split()
        assert seen == H1, f"the server saw {seen}: the connection was translated"
        ports.add(int(port))
    made = flow_events(gateway, pc.FLOW_EVENT_CREATED) - created
    fell_back = flow_events(gateway, pc.FLOW_EVENT_COLLISION) - collisions
    assert made + fell_back == CONNECTIONS, (made, fell_back)
    assert gateway.counter(pc.C_DROP_COUNTER, pc.DROP_NO_SESSION) == no_session
    deadline = time.monotonic() + 20
    while True:
        rows = gateway.api("GET", "/api/v1/sessions", params={"limit": 100_000})["sessions"]
        known = {r["sport"] for r in rows if r["src"] == H1 and r["dport"] == 80}
        if ports <= known:
            break
        assert time.monotonic() < deadline, f"the controller lacks sessions {ports - known}"
        time.sleep(0.2)
