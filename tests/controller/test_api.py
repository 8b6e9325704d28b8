"""The REST API and the CLI client commands: nothing answers without the token, bad requests
get a 4xx with a message, the SPM endpoints drive blocks and bypasses, policies apply."""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controller.api import ApiServer
from controller.cli import register
from controller.npm import Pipeline
from controller.runtime import Controller
from opengate import p4constants as pc
from opengate.errors import ConfigError
from opengate.target import p4_program_dir
from tests.controller.conftest import ControllerFactory, wait_until
from tests.controller.flows import H1, H2, OUT1, SPM1_MAC, key, request
from tests.switch_double import SwitchDouble

TOKEN = "s3cret-token"


@pytest.fixture
def served(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> Iterator[tuple[Controller, httpx.Client]]:
    controller = make_controller(switch)
    api = ApiServer(controller, "127.0.0.1", 0, TOKEN)
    api.start()
    try:
        with httpx.Client(
            base_url=f"http://127.0.0.1:{api.port}",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=30,
        ) as client:
            yield controller, client
    finally:
        api.stop()


def test_nothing_answers_without_the_token(served: tuple[Controller, httpx.Client]) -> None:
    controller, client = served
    base = str(client.base_url)
    paths = [
        "/openapi.json",
        "/docs",
        "/metrics",
        "/api/v1/status",
        "/api/v1/sessions",
        "/api/v1/spms",
        "/api/v1/policy",
        "/api/v1/nowhere",
    ]
    with httpx.Client(base_url=base, timeout=10) as anonymous:
        for path in paths:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
                response = anonymous.get(path, headers=headers)
                assert response.status_code == 401, path
                assert response.json() == {"detail": "missing or wrong bearer token"}
        response = anonymous.post("/api/v1/spm/spm1/load", json={"cpu": 1, "queue_depth": 0})
        assert response.status_code == 401
    del controller


def test_openapi_schema_documents_the_api(served: tuple[Controller, httpx.Client]) -> None:
    _, client = served
    schema = client.get("/openapi.json").json()
    assert {
        "/api/v1/status",
        "/api/v1/policy/apply",
        "/api/v1/spm/{name}/load",
        "/api/v1/spm/{name}/bypass",
        "/metrics",
    } <= set(schema["paths"])
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


def test_load_reports_are_validated(served: tuple[Controller, httpx.Client]) -> None:
    _, client = served
    ok = {
        "ts": 1.0,
        "cpu": 50,
        "queue_depth": 5,
        "queue_held": 3,
        "queue_dropped": 7,
        "pps": 1,
        "bps": 2,
        "mem_bytes": 3,
        "workers": 1,
        "flows": 4,
    }
    assert client.post("/api/v1/spm/spm1/load", json=ok).json() == {"status": "up", "weight": 4}
    missing = client.post("/api/v1/spm/spm9/load", json=ok)
    assert (missing.status_code, missing.json()["detail"]) == (
        404,
        "no SPM named 'spm9' in the policy",
    )
    bad = client.post("/api/v1/spm/spm1/load", json={**ok, "cpu": -1})
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["body", "cpu"]
    too_much = client.post("/api/v1/spm/spm1/load", json={**ok, "cpu": 500})
    assert (too_much.status_code, too_much.json()["detail"]) == (
        422,
        "cpu is a percentage, got 500.0",
    )
    negative = client.post("/api/v1/spm/spm1/load", json={**ok, "queue_dropped": -1})
    assert negative.status_code == 422
    assert negative.json()["detail"][0]["loc"] == ["body", "queue_dropped"]
    spms = client.get("/api/v1/spms").json()["spms"]
    assert spms["spm1"]["report"]["flows"] == 4
    assert spms["spm1"]["report"]["queue_dropped"] == 7
    assert spms["spm1"]["report"]["queue_held"] == 3
    metrics = client.get("/metrics").text
    assert 'opengate_spm_weight{spm="spm1"} 4.0' in metrics
    assert 'opengate_spm_queue_dropped{spm="spm1"} 7.0' in metrics


def test_drop_alert_blocks_the_flow_and_is_stored(
    served: tuple[Controller, httpx.Client], switch: SwitchDouble
) -> None:
    controller, client = served
    flow = key(H1, OUT1, pc.IP_PROTO_TCP, 40000, 80)
    switch.inject_digest(
        pc.D_SESSION_REQUEST_T, [request(flow, ids_class=1, spm_port=3, spm_mac=SPM1_MAC)]
    )
    wait_until("the session", lambda: len(switch.table_entries(pc.T_SESSION)) == 2)
    alert = {
        "ts": "2026-01-01T00:00:00Z",
        "sid": 1000001,
        "gid": 1,
        "rev": 1,
        "msg": "OPENGATE example outbound web",
        "classtype": "policy-violation",
        "action": "drop",
        "community_id": "1:abc",
        # The reply direction, as an SPM may report it: the same flow.
        "flow": {"proto": "tcp", "src": OUT1, "dst": H1, "sport": 80, "dport": 40000},
    }
    result = client.post("/api/v1/spm/spm1/alerts", json=alert).json()
    assert result["blocked"] is True
    schema = controller.npms["npm1"].schema
    actions = {
        schema.actions.get_id(e.action.action.action_id).name
        for e in switch.table_entries(pc.T_SESSION)
    }
    assert actions == {pc.A_SESSION_BLOCK}
    (stored,) = client.get("/api/v1/alerts").json()["alerts"]
    assert (stored["sid"], stored["action"], stored["session_id"]) == (
        1000001,
        "drop",
        result["session"],
    )
    sessions = client.get("/api/v1/sessions").json()["sessions"]
    assert sessions[0]["state"] == "blocked"


def test_a_drop_alert_before_the_digest_blocks_the_session_when_it_comes(
    served: tuple[Controller, httpx.Client], switch: SwitchDouble
) -> None:
    """A drop alert for a flow whose session the CPM does not know yet blocks it once the
    digest is handled; a bypass asked for the same flow afterwards does not undo it."""
    controller, client = served
    flow = key(H1, OUT1, pc.IP_PROTO_TCP, 40020, 5201)  # class 2 allows bypass
    named = {"proto": "tcp", "src": H1, "dst": OUT1, "sport": 40020, "dport": 5201}
    alert = {"sid": 1000001, "gid": 1, "rev": 1, "msg": "early", "action": "drop", "flow": named}
    result = client.post("/api/v1/spm/spm1/alerts", json=alert).json()
    assert (result["session"], result["blocked"]) == (None, False)
    later = client.post("/api/v1/spm/spm1/bypass", json={"flow": named, "clean_bytes": 10**6})
    assert later.json()["pending"] is True
    switch.inject_digest(
        pc.D_SESSION_REQUEST_T, [request(flow, ids_class=2, spm_port=3, spm_mac=SPM1_MAC)]
    )

    def state() -> str | None:
        rows = client.get("/api/v1/sessions").json()["sessions"]
        return next((r["state"] for r in rows if r["sport"] == 40020), None)

    wait_until("the session blocked", lambda: state() == "blocked")
    schema = controller.npms["npm1"].schema
    wait_until(
        "its entries blocking",
        lambda: (
            {
                schema.actions.get_id(e.action.action.action_id).name
                for e in switch.table_entries(pc.T_SESSION)
            }
            == {pc.A_SESSION_BLOCK}
        ),
    )


def test_an_early_drop_alert_for_a_ping_blocks_its_session(
    served: tuple[Controller, httpx.Client], switch: SwitchDouble
) -> None:
    """An SPM names an ICMP flow by type and code, the session by the echo identifier: an early
    drop alert still finds the session when its digest comes."""
    _, client = served
    echo = key(H1, OUT1, pc.IP_PROTO_ICMP, 0x2222, 0)
    named = {"proto": "icmp", "src": H1, "dst": OUT1, "sport": 8, "dport": 0}
    alert = {"sid": 1000002, "gid": 1, "rev": 1, "msg": "ping", "action": "drop", "flow": named}
    result = client.post("/api/v1/spm/spm1/alerts", json=alert).json()
    assert (result["session"], result["blocked"]) == (None, False)
    switch.inject_digest(
        pc.D_SESSION_REQUEST_T, [request(echo, ids_class=1, spm_port=3, spm_mac=SPM1_MAC)]
    )

    def state() -> str | None:
        rows = client.get("/api/v1/sessions").json()["sessions"]
        return next((r["state"] for r in rows if r["proto"] in (1, "icmp")), None)

    wait_until("the ping's session blocked", lambda: state() == "blocked")


def test_bypass_follows_the_class(
    served: tuple[Controller, httpx.Client], switch: SwitchDouble
) -> None:
    _, client = served
    bulk = key(H1, OUT1, pc.IP_PROTO_TCP, 40000, 5201)  # class 2 allows bypass
    web = key(H2, OUT1, pc.IP_PROTO_TCP, 40001, 80)  # class 1 does not
    switch.inject_digest(
        pc.D_SESSION_REQUEST_T,
        [
            request(bulk, ids_class=2, spm_port=3, spm_mac=SPM1_MAC),
            request(web, ids_class=1, spm_port=3, spm_mac=SPM1_MAC),
        ],
    )
    wait_until("the sessions", lambda: len(switch.table_entries(pc.T_SESSION)) == 4)

    def flow(k: tuple[int, int, int, int, int], src: str, dst: str) -> dict[str, object]:
        return {"proto": 6, "src": src, "dst": dst, "sport": k[3], "dport": k[4]}

    ok = client.post(
        "/api/v1/spm/spm1/bypass", json={"flow": flow(bulk, H1, OUT1), "clean_bytes": 10**6}
    )
    assert ok.json()["bypassed"] is True
    refused = client.post("/api/v1/spm/spm1/bypass", json={"flow": flow(web, H2, OUT1)})
    assert (refused.status_code, refused.json()["detail"]) == (
        409,
        "class web does not allow bypass",
    )
    unknown = client.post(
        "/api/v1/spm/spm1/bypass", json={"flow": {"proto": "tcp", "src": H1, "dst": H2}}
    )
    assert (unknown.status_code, unknown.json()["pending"]) == (200, True)  # kept a while
    malformed = client.post(
        "/api/v1/spm/spm1/bypass", json={"flow": {"proto": "tcp", "src": "nowhere", "dst": H2}}
    )
    assert malformed.status_code == 422
    states = {
        s["sport"]: (s["state"], s["spm_port"])
        for s in client.get("/api/v1/sessions").json()["sessions"]
    }
    assert states == {40000: ("bypassed", 3), 40001: ("active", 3)}


def test_a_bypass_before_the_digest_is_applied_when_the_session_comes(
    served: tuple[Controller, httpx.Client], switch: SwitchDouble
) -> None:
    """The data plane made the session and the SPM asked for its bypass before the CPM handled
    the digest (seen under load in CI: the request was refused with 404 and the flow stayed
    inspected): the request waits for the session."""
    _, client = served
    bulk = key(H1, OUT1, pc.IP_PROTO_TCP, 40010, 5201)  # class 2 allows bypass
    # as the SPM names it, the reply direction first (either way round is the flow)
    flow = {"proto": "tcp", "src": OUT1, "dst": H1, "sport": 5201, "dport": 40010}
    early = client.post("/api/v1/spm/spm1/bypass", json={"flow": flow, "clean_bytes": 10**6})
    assert (early.status_code, early.json()["pending"]) == (200, True)
    switch.inject_digest(
        pc.D_SESSION_REQUEST_T, [request(bulk, ids_class=2, spm_port=3, spm_mac=SPM1_MAC)]
    )

    def state() -> str | None:
        rows = client.get("/api/v1/sessions").json()["sessions"]
        return next((r["state"] for r in rows if r["sport"] == 40010), None)

    wait_until("the session bypassed", lambda: state() == "bypassed")


def test_policy_apply_over_the_api(served: tuple[Controller, httpx.Client], lab: Path) -> None:
    controller, client = served
    broken = lab.read_text().replace("role: outside", "role: outsid")
    response = client.post("/api/v1/policy/apply", json={"path": str(lab), "text": broken})
    assert response.status_code == 422
    body = response.json()
    assert (body["path"], body["field"]) == (str(lab), "ports[1].role")
    assert body["line"] == 11  # the line of "role: outside" in lab.yaml
    assert controller.policy_version == 1
    changed = lab.read_text().replace("closing_linger: 0.2", "closing_linger: 1")
    diff = client.post("/api/v1/policy/diff", json={"path": str(lab), "text": changed}).json()
    assert diff["changed"] is True and "+  closing_linger: 1" in diff["text_diff"]
    applied = client.post("/api/v1/policy/apply", json={"path": str(lab), "text": changed})
    assert applied.json()["version"] == 2
    versions = client.get("/api/v1/policy/versions").json()["versions"]
    assert [(v["version"], v["status"]) for v in versions] == [(2, "applied"), (1, "superseded")]


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="opengate")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    result: int = args.handler(args)
    return result


def test_cli_client_commands(
    served: tuple[Controller, httpx.Client],
    switch: SwitchDouble,
    lab: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, client = served
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    common = ["--api", str(client.base_url), "--token-file", str(token_file)]
    switch.inject_digest(pc.D_SESSION_REQUEST_T, [request(key(H1, OUT1, 6, 40000, 80))])
    wait_until("the session", lambda: len(switch.table_entries(pc.T_SESSION)) == 2)
    assert _cli(["status", *common]) == 0
    out = capsys.readouterr().out
    assert "policy: version 1 (lab," in out and "npm1" in out and "primary" in out
    assert _cli(["sessions", *common]) == 0
    assert "10.0.1.10:40000" in capsys.readouterr().out
    assert _cli(["status", "--hsm", *common]) == 0
    assert "npm1: active bank 1 (bank 0: 0, bank 1: " in capsys.readouterr().out
    assert _cli(["spms", *common, "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)["spms"]) == {"spm1", "spm2"}
    assert _cli(["policy", "show", *common]) == 0
    assert "name: lab" in capsys.readouterr().out
    lab.write_text(lab.read_text().replace("closing_linger: 0.2", "closing_linger: 1"))
    assert _cli(["policy", "diff", *common, str(lab)]) == 0
    assert "+  closing_linger: 1" in capsys.readouterr().out
    assert _cli(["policy", "apply", *common, str(lab)]) == 0
    assert "policy version 2 applied" in capsys.readouterr().out
    # A policy that denies the open session's flow: the session is held to it.
    lan_out = "    - {name: lan-out, src: inside, action: permit}"
    no_web = "    - {name: no-web, src: inside, proto: tcp, dport: 80, action: deny}"
    lab.write_text(lab.read_text().replace(lan_out, f"{no_web}\n{lan_out}"))
    assert _cli(["policy", "apply", *common, str(lab)]) == 0
    assert "policy version 3 applied" in (out := capsys.readouterr().out)
    assert "  open sessions held to it: 1 denied\n" in out, out
    lab.write_text(lab.read_text().replace("role: outside", "role: x"))
    assert _cli(["policy", "apply", *common, str(lab)]) == 1
    assert "422" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="cannot read the API token"):
        _cli(["status", "--api", str(client.base_url), "--token-file", str(tmp_path / "none")])


def test_hsm_view_reports_cost_per_packet_and_table_fill(
    served: tuple[Controller, httpx.Client],
) -> None:
    controller, client = served
    view = client.get("/api/v1/hsm").json()  # NPM name -> its classifier
    assert set(view) == set(controller.states)
    [npm] = view.values()
    stats = npm["stats"]
    assert stats is not None and stats["profile"] in ("hsm", "hybrid", "naive")
    assert npm["lookups_per_packet"] >= 2 and npm["memory_accesses_per_packet"] >= 2
    fill = npm["fill"]
    for table in stats["tables"]:
        share = fill[table["table"]]
        assert 0 <= share <= 1
        assert share == round(table["entries"] / (pc.TABLE_SIZES[table["table"]] // 2), 4)


def test_the_compact_build_gives_the_classifier_its_smaller_tables(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    """`make run BUILD=compact`: the controller pushes the compact build and compiles the rules
    for its tables (entries per bank from the pushed P4Info, not the default build's)."""
    program = p4_program_dir("compact")
    controller = make_controller(
        switch, pipeline=Pipeline(program / "opengate.p4info.txtpb", program / "opengate.json")
    )
    [state] = controller.states.values()
    limits = state.conn.classifier_limits
    assert limits[pc.T_ACL_ADDR_PAIR] == 32768 and limits[pc.T_IDS_CLASSIFICATION] == 32768
    assert limits[pc.T_SA_SEGMENT] == pc.TABLE_SIZES[pc.T_SA_SEGMENT] // 2  # not a chain table
    assert pc.TABLE_SIZES[pc.T_ACL_ADDR_PAIR] // 2 == 524288  # the default build's
    [npm] = controller.hsm_status().values()
    stats = npm["stats"]
    assert stats is not None
    for table in stats["tables"]:
        assert npm["fill"][table["table"]] == round(table["entries"] / limits[table["table"]], 4)


def test_counters_give_what_the_npm_counted(
    served: tuple[Controller, httpx.Client],
    switch: SwitchDouble,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Drops by reason, flow events and ports, read from the switch: in the API, in Prometheus
    and in `opengate counters`."""
    _, client = served
    # from a port the policy does not know: dropped as UNKNOWN_PORT
    frame = bytes(
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        / IP(src="10.0.1.10", dst="10.0.9.9")
        / UDP(sport=1000, dport=2000)
        / b"x"
    )
    for _ in range(3):
        switch.switch.receive(77, frame)

    def npm1() -> dict[str, Any]:
        data: dict[str, Any] = client.get("/api/v1/counters").json()["npms"]["npm1"]
        return data

    wait_until("three drops counted", lambda: npm1()["drops"]["UNKNOWN_PORT"]["packets"] == 3)
    counts = npm1()
    assert counts["drops"]["UNKNOWN_PORT"]["bytes"] == 3 * len(frame)
    assert counts["drops"]["NO_SESSION"]["packets"] == 0
    assert set(counts["drops"]) == set(pc.DROP_NAMES.values()) - {"NONE"}
    assert set(counts["flow_events"]) == set(pc.FLOW_EVENT_NAMES.values())
    assert counts["ports"]["77"]["rx_packets"] == 3
    metrics = client.get("/metrics").text
    assert 'opengate_npm_drops_total{npm="npm1",reason="UNKNOWN_PORT"} 3.0' in metrics
    assert 'opengate_npm_flow_events_total{event="COLLISION",npm="npm1"} 0.0' in metrics
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    assert _cli(["counters", "--api", str(client.base_url), "--token-file", str(token_file)]) == 0
    out = capsys.readouterr().out
    assert "UNKNOWN_PORT" in out and "NO_SESSION" not in out
    assert any(line.split()[:2] == ["77", "3"] for line in out.splitlines())


def test_counters_of_an_npm_that_does_not_answer_are_left_out(
    served: tuple[Controller, httpx.Client],
    switch: SwitchDouble,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Read that hangs gives up after COUNTER_READ_SECONDS: the API answers without it."""
    _, client = served
    monkeypatch.setattr("controller.runtime.COUNTER_READ_SECONDS", 0.5)
    release = threading.Event()
    real_check = switch.service._check_device

    def hanging_check(device_id: int) -> None:  # what Read calls first
        release.wait(10)
        real_check(device_id)

    monkeypatch.setattr(switch.service, "_check_device", hanging_check)
    try:
        started = time.monotonic()
        assert client.get("/api/v1/counters").json() == {"npms": {}}
        assert time.monotonic() - started < 5
    finally:
        release.set()
