"""End to end: sessions made by the NPM itself. With a routed policy (the example policy without
masquerade), every new TCP connection from an inside host is set up in the data plane: its SYN-ACK
is admitted by the slot its SYN claimed, never dropped while the controller installs the session
(the cause of the 1 s stalls before: the client retransmitted its SYN after a second)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from opengate import p4constants as pc
from tests.e2e.udp_probe import run_probe
from tests.helpers import wait_for
from topo.model import with_entries_on_demand, without_inspection, without_masquerade
from topo.net import GatewayNetwork

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

OUT1 = "198.51.100.20"
H1 = "10.0.1.10"
CONNECTIONS = 20


def _applied(
    gateway: GatewayNetwork, on_demand: bool, inspected: bool = True
) -> Iterator[GatewayNetwork]:
    running = gateway.api("GET", "/api/v1/policy")
    path = str(gateway.spec.policy)
    text = without_masquerade(running["text"])
    if on_demand:
        text = with_entries_on_demand(text)
    if not inspected:
        text = without_inspection(text)
    gateway.api("POST", "/api/v1/policy/apply", json={"path": path, "text": text})
    try:
        yield gateway
    finally:
        gateway.api("POST", "/api/v1/policy/apply", json={"path": path, "text": running["text"]})


@pytest.fixture
def routed_gateway(gateway: GatewayNetwork) -> Iterator[GatewayNetwork]:
    yield from _applied(gateway, on_demand=False)


@pytest.fixture
def uninspected_gateway(gateway: GatewayNetwork) -> Iterator[GatewayNetwork]:
    """The routed policy with no chain on any class: the NPM alone carries every flow."""
    yield from _applied(gateway, on_demand=False, inspected=False)


@pytest.fixture
def on_demand_gateway(gateway: GatewayNetwork) -> Iterator[GatewayNetwork]:
    """The routed policy with `sessions.data_plane_entries: on_demand`."""
    yield from _applied(gateway, on_demand=True)


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


def test_both_directions_pass_while_the_controller_installs_the_entries(
    uninspected_gateway: GatewayNetwork,
) -> None:
    """Ten UDP flows h1 -> out1's echo service, 100 round trips each from its first datagram
    on: the controller writes each flow's two exact entries while its datagrams pass both ways,
    and one direction's entry may carry packets before the other's exists. No datagram is lost
    (a reply taken for a flow the controller ended was dropped, about one flow in three)."""
    gateway = uninspected_gateway
    retired = flow_events(gateway, pc.FLOW_EVENT_RETIRED)
    out = run_probe(gateway, "h1", f"rounds {OUT1} 10 100", timeout=120)
    lost = out["lost"]
    assert lost == [], (
        f"{len(lost)} round trips unanswered (flow, trip): {lost[:10]}; slots retired "
        f"meanwhile: {flow_events(gateway, pc.FLOW_EVENT_RETIRED) - retired}"
    )
    # Their sessions (uninspected, under this test's policy) go, so that no later test meets
    # them again through a source port its own flows happen to take. All of them: on a loaded
    # machine the controller may still be installing the last ones when the probe ends (one
    # left behind was found by the steering test as an uninspected flow of its own).
    ports = set(out["ports"])

    def sessions() -> dict[int, int]:
        rows = gateway.api("GET", "/api/v1/sessions", params={"limit": 100_000})["sessions"]
        return {
            r["sport"]: r["id"]
            for r in rows
            if r["src"] == H1 and r["dport"] == 7 and r["sport"] in ports
        }

    def all_sessions() -> dict[int, int]:
        found = sessions()
        return found if found.keys() == ports else {}

    ids = wait_for(f"the sessions of the {len(ports)} flows", all_sessions)
    for session_id in ids.values():
        gateway.api("DELETE", f"/api/v1/sessions/{session_id}")


def _session_stats(gateway: GatewayNetwork) -> dict[str, int]:
    return dict(gateway.api("GET", "/api/v1/status")["sessions"])


def test_entries_on_demand_short_flows_recorded_long_ones_installed(
    on_demand_gateway: GatewayNetwork,
) -> None:
    """With exact entries on demand: short connections h1 -> out1 are answered, and the
    controller records each one its slot carries without writing entries (the API lists them);
    a ping that lasts 2 s is reported again by the data plane and gets its entries."""
    gateway = on_demand_gateway
    before = _session_stats(gateway)
    created = flow_events(gateway, pc.FLOW_EVENT_CREATED)
    ports: set[int] = set()
    for _ in range(10):
        result = gateway.run(
            "h1", f"curl -s -m 10 -w ' %{{local_port}}' http://{OUT1}/whoami", timeout=30
        )
        assert result.returncode == 0, (len(ports), result.output)
        ports.add(int(result.output.split()[1]))
    made = flow_events(gateway, pc.FLOW_EVENT_CREATED) - created

    def recorded() -> bool:
        stats = _session_stats(gateway)
        return (
            stats["slot_only"] - before["slot_only"] >= made
            and stats["installed"] - before["installed"] >= 10 - made  # collisions' flows
        )

    # (a closed connection's record goes after FIN both ways and the linger: the counts, not
    # the list of sessions, say that each was recorded)
    wait_for("the controller to record the connections its slots carry", recorded)
    assert made >= 1 and len(ports) == 10, (made, ports)
    after = _session_stats(gateway)
    # recorded, not installed: no entries written for them (a collision's flow would be)
    assert after["installed"] - before["installed"] == 10 - made, (before, after)
    reported = flow_events(gateway, pc.FLOW_EVENT_REPORTED)
    ping = gateway.run("h1", f"ping -c 5 -i 0.5 -W 2 {OUT1}", timeout=30)
    assert ping.returncode == 0 and "5 received" in ping.output, ping.output

    def promoted() -> bool:
        return _session_stats(gateway)["promoted"] > before["promoted"]

    wait_for("the ping's session to get its entries", promoted)
    assert flow_events(gateway, pc.FLOW_EVENT_REPORTED) > reported
    # The API says which sessions the switch holds entries for: one echo more (a new ICMP
    # flow, recorded only) beside the long ping (installed); ICMP idles after 30 s.
    one = gateway.run("h1", f"ping -c 1 -W 2 {OUT1}", timeout=30)
    assert one.returncode == 0, one.output

    def icmp_entries() -> list[str]:
        rows = gateway.api("GET", "/api/v1/sessions", params={"limit": 100_000})["sessions"]
        return sorted(str(r["entries"]) for r in rows if r["proto"] == pc.IP_PROTO_ICMP)

    wait_for(
        "the API to list both pings, one with entries",
        lambda: icmp_entries() == ["False", "True"],
    )


def test_deleting_a_session_its_slot_alone_carries_ends_the_flow(
    on_demand_gateway: GatewayNetwork,
) -> None:
    """With exact entries on demand, a UDP flow h1 -> out1's echo service is recorded without
    entries; deleting its session through the API frees its slot in the NPM (which counts the
    flow ended), so the flow's next datagram opens it anew: a new slot, a new session."""
    gateway = on_demand_gateway
    port = 45555
    probe = f"fixed {OUT1} {port} 1 --tries 3"

    def session() -> dict[str, Any]:
        """The flow's session ({}: none)."""
        rows = gateway.api("GET", "/api/v1/sessions", params={"limit": 100_000})["sessions"]
        flows = [r for r in rows if r["src"] == H1 and r["sport"] == port and r["dport"] == 7]
        return dict(flows[-1]) if flows else {}

    assert run_probe(gateway, "h1", probe)["replied"] == [port]
    first = wait_for("the flow's session", session)
    assert first["entries"] is False, first
    ended = flow_events(gateway, pc.FLOW_EVENT_ENDED)
    created = flow_events(gateway, pc.FLOW_EVENT_CREATED)
    gateway.api("DELETE", f"/api/v1/sessions/{first['id']}")
    wait_for(
        "the NPM to end the flow", lambda: flow_events(gateway, pc.FLOW_EVENT_ENDED) == ended + 1
    )
    assert run_probe(gateway, "h1", probe)["replied"] == [port]

    def new_session() -> dict[str, Any]:
        row = session()
        return row if row and row["id"] != first["id"] else {}

    second = wait_for("a new session for the flow", new_session)
    assert second["entries"] is False, second
    assert flow_events(gateway, pc.FLOW_EVENT_CREATED) > created
    gateway.api("DELETE", f"/api/v1/sessions/{second['id']}")


# Nothing listens on out1's UDP discard port: its kernel answers with a port unreachable.
CLOSED_PORT = 9
REFUSED_FLOWS = 10


@pytest.mark.parametrize("policy", ["gateway", "routed_gateway", "on_demand_gateway"])
def test_a_closed_port_is_refused_at_once(
    policy: str, request: pytest.FixtureRequest, out1_errors_unlimited: None
) -> None:
    """Ten UDP flows from h1 to a port out1 does not serve, masqueraded (the example policy),
    routed, and routed with entries on demand: each socket gets out1's port unreachable
    (ConnectionRefusedError) instead of waiting out its timeout. The example policy's ACL
    drops ICMP from outside: only its relation to the flow's session lets the error in, and
    with masquerade the quoted datagram is translated back to what h1 sent."""
    gateway: GatewayNetwork = request.getfixturevalue(policy)
    denied = gateway.counter(pc.C_DROP_COUNTER, pc.DROP_ACL_DENY)
    out = run_probe(gateway, "h1", f"refused {OUT1} {CLOSED_PORT} {REFUSED_FLOWS}", timeout=90)
    assert out["silent"] == [] and out["answered"] == [], out
    assert len(out["refused"]) == REFUSED_FLOWS, out
    assert gateway.counter(pc.C_DROP_COUNTER, pc.DROP_ACL_DENY) == denied
