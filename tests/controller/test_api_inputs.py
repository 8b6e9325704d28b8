"""What the REST API and the console accept but the controller could not hold is refused with a
4xx that says why, and nothing of it reaches the database, the switch or /metrics: integers past
what the columns take, text the database cannot store (NUL, lone surrogates), paths that are
not text files, YAML nested without end, bodies over the limit, alert actions without end.
Refusals are the client's errors: logged at DEBUG, without a traceback."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from controller.api import MAX_BODY_BYTES, BodyLimit, create_app
from controller.runtime import Controller
from controller.web import Console
from tests.controller.conftest import ControllerFactory
from tests.switch_double import SwitchDouble

TOKEN = "s3cret-token"
BIG = 2**64
STATE = ("/api/v1/status", "/api/v1/spms", "/api/v1/policy", "/api/v1/alerts", "/api/v1/sessions")


@pytest.fixture
def client(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> Iterator[tuple[Controller, TestClient]]:
    controller = make_controller(switch)
    app = create_app(controller, TOKEN, Console(controller, TOKEN))
    with TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}) as test_client:
        yield controller, test_client


def assert_state_answers(client: TestClient) -> None:
    for path in STATE:
        assert client.get(path).status_code == 200, path


def test_integers_past_64_bits_are_refused_not_a_server_error(
    client: tuple[Controller, TestClient],
) -> None:
    _, api = client
    for path in (
        f"/api/v1/sessions?offset={BIG}",
        f"/console/data/sessions?page={BIG}",
        f"/console/data/alerts?sid={BIG}",
        f"/console/data/policy/versions/{BIG}",
        f"/console/data/rules/{BIG}",
    ):
        response = api.get(path)
        assert response.status_code == 422, path
        assert isinstance(response.json()["detail"], list), path
    for body in ({"sid": BIG}, {"gid": -1}, {"flow": {"proto": BIG, "src": "1.2.3.4", "dst": "x"}}):
        assert api.post("/api/v1/spm/spm1/alerts", json=body).status_code == 422, body
    bypass = {"flow": {"proto": 6, "src": "10.0.1.10", "dst": "1.2.3.4"}, "clean_bytes": BIG}
    assert api.post("/api/v1/spm/spm1/bypass", json=bypass).status_code == 422
    assert api.post(f"/api/v1/sessions/{BIG}/block").status_code == 422
    # a search for a number no column holds finds nothing
    for words in (f"id:{BIG}", str(BIG), f"10.0.1.10:{BIG}", "²"):
        found = api.get("/console/data/sessions", params={"q": words})
        assert (found.status_code, found.json()["total"]) == (200, 0), words
    assert_state_answers(api)


def test_text_the_database_cannot_store_is_refused(
    client: tuple[Controller, TestClient], switch: SwitchDouble, lab: Path
) -> None:
    """A lone surrogate ("\\ud800" in JSON) or a NUL in any string: 422, and nothing stored."""
    controller, api = client
    surrogate = '"\\ud800"'
    headers = {"Content-Type": "application/json"}
    bodies = {
        "/api/v1/spm/spm1/alerts": '{"msg": %s}',
        "/api/v1/spm/spm1/load": '{"cpu": 1, "queue_depth": 0, "ts": %s}',
        "/api/v1/policy/validate": '{"path": %s}',
        "/console/data/policy/validate": '{"text": %s}',
        "/api/v1/ipsec/spm/spm1/status": '{"tunnels": [], "extra": {"x": %s}}',
    }
    for path, body in bodies.items():
        for value in (surrogate, '"a\\u0000b"'):
            response = api.post(path, content=body % value, headers=headers)
            assert response.status_code == 422, (path, value, response.text)
    assert api.get("/api/v1/sessions", params={"npm": "a\0b"}).status_code == 422
    # a policy whose name is a lone surrogate (a YAML escape): refused before any write
    writes = len(switch.writes)
    text = lab.read_text().replace("name: lab", 'name: "\\ud800"')
    response = api.post("/api/v1/policy/apply", json={"path": str(lab), "text": text})
    assert response.status_code == 422
    assert "lone surrogate" in response.json()["detail"]
    assert (response.json()["line"], len(switch.writes)) == (3, writes)
    assert controller.policy_version == 1
    assert controller.db.alerts() == []
    assert_state_answers(api)


def test_a_load_report_is_validated_whole_before_it_is_stored(
    client: tuple[Controller, TestClient],
) -> None:
    """Numbers JSON has not (Python's parser takes Infinity and NaN) or past 64 bits would make
    /api/v1/status and /api/v1/spms fail until the next report."""
    _, api = client
    headers = {"Content-Type": "application/json"}
    for body in (
        '{"cpu": 1, "queue_depth": 0, "pps": Infinity}',
        '{"cpu": NaN, "queue_depth": 0}',
        f'{{"cpu": 1, "queue_depth": {BIG}}}',
        f'{{"cpu": 1, "queue_depth": 0, "ts": "{"x" * 65}"}}',
    ):
        assert api.post("/api/v1/spm/spm1/load", content=body, headers=headers).status_code == 422
    assert_state_answers(api)
    assert api.get("/api/v1/spms").json()["spms"]["spm1"]["report"] == {}


def test_policy_paths_that_are_not_text_files_are_refused(
    client: tuple[Controller, TestClient], tmp_path: Path
) -> None:
    _, api = client
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\xff\xfe")
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # a read would wait for a writer for ever
    for path, why in (
        (str(binary), "not UTF-8 text"),
        (str(fifo), "not a regular file"),
        ("/dev/zero", "not a regular file"),
        (str(tmp_path), "not a regular file"),
    ):
        response = api.post("/api/v1/policy/validate", json={"path": path})
        assert response.status_code == 422, path
        assert why in response.json()["detail"], path
    assert api.post("/api/v1/policy/validate", json={"path": "a\0b"}).status_code == 422


def test_yaml_nested_without_end_is_refused(
    client: tuple[Controller, TestClient], lab: Path
) -> None:
    _, api = client
    for text in ("[" * 100_000, "a:\n" + "".join(f"{' ' * i}- \n" for i in range(1, 200))):
        response = api.post("/api/v1/policy/validate", json={"path": str(lab), "text": text})
        assert response.status_code == 422
        assert "nested more than 64 levels deep" in response.json()["detail"]


def test_a_body_over_the_limit_gets_413(client: tuple[Controller, TestClient]) -> None:
    _, api = client
    response = api.post(
        "/api/v1/policy/validate",
        content=b" " * (MAX_BODY_BYTES + 1),
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 413
    assert response.json() == {
        "detail": f"the request body is larger than the limit of {MAX_BODY_BYTES} bytes"
    }


def test_a_streamed_body_over_the_limit_gets_413_once_that_much_came() -> None:
    """Without a Content-Length (chunked), the body is counted as it comes."""
    inner = FastAPI()

    @inner.post("/echo")
    async def echo(body: dict[str, str]) -> dict[str, str]:
        return body

    limited = BodyLimit(inner, limit=20)
    json = {"Content-Type": "application/json"}
    with TestClient(limited) as test:
        small = test.post("/echo", content=iter([b'{"a": ', b'"b"}']), headers=json)
        assert (small.status_code, small.json()) == (200, {"a": "b"})
        large = test.post("/echo", content=iter([b'{"a": "', b"b" * 30, b'"}']), headers=json)
        assert large.status_code == 413


def test_alert_actions_do_not_grow_the_metrics(client: tuple[Controller, TestClient]) -> None:
    _, api = client
    for number in range(30):
        assert api.post("/api/v1/spm/spm1/alerts", json={"action": f"x{number}"}).status_code == 200
    assert api.post("/api/v1/spm/spm1/alerts", json={"action": "drop"}).status_code == 200
    lines = [
        line for line in api.get("/metrics").text.splitlines() if line.startswith("opengate_alerts")
    ]
    assert 'opengate_alerts_total{action="other",spm="spm1"} 30.0' in lines
    assert 'opengate_alerts_total{action="drop",spm="spm1"} 1.0' in lines
    assert not any("x1" in line for line in lines)
    assert len(api.get("/api/v1/alerts").json()["alerts"]) == 31  # each stored as it came


def test_refusals_are_logged_at_debug_without_a_traceback(
    client: tuple[Controller, TestClient], caplog: pytest.LogCaptureFixture
) -> None:
    _, api = client
    caplog.set_level(logging.DEBUG)
    assert api.post("/api/v1/sessions/999/block").status_code == 404
    assert api.post("/api/v1/spms/nobody/drain").status_code == 404
    assert api.get("/api/v1/ipsec/spm/nobody/config").status_code == 404
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    refused = [r for r in caplog.records if "refused (404" in r.getMessage()]
    assert len(refused) == 3 and all(r.exc_info is None for r in refused)
    metrics = api.get("/metrics").text.splitlines()
    failed = [line for line in metrics if line.startswith("opengate_handler_errors_total")]
    assert failed == [], failed  # a refusal is no failed handler


def test_refusals_have_the_shape_and_codes_the_schema_declares(
    client: tuple[Controller, TestClient],
) -> None:
    _, api = client
    schema = api.get("/openapi.json").json()
    problem = schema["components"]["schemas"]["Problem"]
    assert set(problem["properties"]) == {"detail", "path", "line", "field"}
    block = schema["paths"]["/api/v1/sessions/{session_id}/block"]["post"]["responses"]
    assert {"200", "401", "404", "422"} <= set(block)
    apply = schema["paths"]["/api/v1/policy/apply"]["post"]["responses"]
    assert {"200", "400", "401", "409", "413", "422", "503"} <= set(apply)
    for code in ("401", "409", "413", "422"):
        assert apply[code]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/Problem"
        }
    assert api.post("/api/v1/sessions/999/block").json() == {"detail": "no session 999"}
