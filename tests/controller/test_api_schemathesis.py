"""The REST API against the OpenAPI schema it publishes, with schemathesis: every operation with
generated requests (valid and invalid), then sequences of calls that follow the schema's links.

A CPM runs on the switch double with a real SQLite file and the token, as in test_api.py, but
the app is called in-process (ASGI). Every built-in check is on: no 5xx, only the status codes,
content types, headers and bodies the schema declares. The examples are few and derandomized so
that a run is repeatable and takes well under two minutes on two cores.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, settings
from schemathesis.config import SchemathesisConfig

from controller.api import create_app
from controller.npm import NpmAddress
from controller.runtime import Controller, ControllerOptions
from docgen.api import openapi
from opengate import p4constants as pc
from tests.controller.conftest import DATA, wait_until
from tests.controller.flows import H1, OUT1, key, request
from tests.switch_double import SwitchDouble

TOKEN = "s3cret-token"
SESSIONS = 8
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CONFIG = SchemathesisConfig.from_dict(
    {
        "seed": 52,
        "base-url": "http://localhost",
        "headers": AUTH,
        "generation": {"deterministic": True, "database": "none"},
        "checks": {
            # Data the schema allows may still be refused with 422 and a message (a policy that
            # does not validate, an address that is not one): what no JSON schema can say.
            # `schema_shaped_422_for_valid_data` holds the rest to the schema.
            "positive_data_acceptance": {
                "expected-statuses": ["2xx", "401", "404", "409", "422"],
            },
        },
    }
)


def schema_shaped_422_for_valid_data(ctx: Any, response: Any, case: Any) -> bool | None:
    """Data the schema allows is never refused for not matching the schema (FastAPI's list of
    validation errors): the schema says all that the models check."""
    del ctx
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return None
    if response.status_code == 422 and isinstance(response.json().get("detail"), list):
        raise AssertionError(f"schema-valid data refused as invalid: {response.json()}")
    return None


FLOWS = [key(H1, OUT1, pc.IP_PROTO_TCP, 40000 + i, 80) for i in range(SESSIONS)]


def fresh_sessions(switch: SwitchDouble) -> None:
    """The module's sessions, and only they, installed and not blocked: what each stateful
    scenario starts from, so that the same draws meet the same state (Hypothesis replays
    prefixes of earlier scenarios and refuses a run whose data depends on what they left)."""
    assert APP.app is not None, "no app yet"
    client = TestClient(APP.app)
    listed = client.get("/api/v1/sessions", params={"limit": 1000}, headers=AUTH).json()
    for session in listed["sessions"]:
        client.delete(f"/api/v1/sessions/{session['id']}", headers=AUTH)
    wait_until("no sessions", lambda: not switch.table_entries(pc.T_SESSION))
    switch.inject_digest(pc.D_SESSION_REQUEST_T, [request(f) for f in FLOWS])
    wait_until("the sessions", lambda: len(switch.table_entries(pc.T_SESSION)) == 2 * SESSIONS)


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Controller, FastAPI, SwitchDouble]]:
    folder = tmp_path_factory.mktemp("schemathesis")
    for name in ("lab.yaml", "lab.rules"):
        shutil.copy(DATA / name, folder / name)
    with SwitchDouble() as switch:
        options = ControllerOptions(
            npms=(NpmAddress("npm1", switch.address, 1),),
            policy_path=folder / "lab.yaml",
            db_url=f"sqlite:///{folder / 'cpm.db'}",
            state_dir=folder,
            tick_seconds=0.05,
        )
        controller = Controller(options)
        controller.start()
        try:
            assert controller.wait_synced(20), "the controller did not reconcile in time"
            # sessions for the operations on one (GET /sessions links to them)
            switch.inject_digest(pc.D_SESSION_REQUEST_T, [request(f) for f in FLOWS])
            wait_until(
                "the sessions", lambda: len(switch.table_entries(pc.T_SESSION)) == 2 * SESSIONS
            )
            APP.app = create_app(controller, TOKEN)
            yield controller, APP.app, switch
        finally:
            APP.app = None
            controller.stop()


class LaterApp:
    """The ASGI app the schema's requests go to, set once the module's controller runs."""

    def __init__(self) -> None:
        self.app: FastAPI | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert self.app is not None, "no app yet"
        await self.app(scope, receive, send)


APP = LaterApp()
# The schema /openapi.json serves (made as docgen makes it, from the same create_app), its
# requests (the checks' own probes too) sent to APP in-process.
schema = schemathesis.openapi.from_dict(openapi(), config=CONFIG)
schema.app = APP


@schema.parametrize()
@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_operation_answers_as_its_schema_says(
    served: tuple[Controller, FastAPI, SwitchDouble], case: Any
) -> None:
    del served  # the controller APP serves
    case.call_and_validate(headers=AUTH, additional_checks=[schema_shaped_422_for_valid_data])


def test_sequences_of_calls_that_follow_the_links(
    served: tuple[Controller, FastAPI, SwitchDouble],
) -> None:
    """Stateful: a session listed by GET /sessions, then blocked or deleted (the schema's
    links), among calls of every other operation; every response checked as above."""
    controller, _, switch = served
    followed: list[int] = []

    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            fresh_sessions(switch)

        def teardown(self) -> None:
            status = controller.bus.call(controller.status)
            followed.append(SESSIONS - status["sessions"]["active"])

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            kwargs["additional_checks"] = [schema_shaped_422_for_valid_data]
            super().validate_response(response, case, **kwargs)

    Workflow.run(
        settings=settings(
            max_examples=25,
            stateful_step_count=6,
            # no shrinking: what a scenario does to the controller beyond its sessions (an SPM
            # drained, a policy version) carries over to the next, so a replay may differ
            phases=[Phase.generate],
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
    )
    assert any(followed), "no scenario blocked or deleted a session: the links were not followed"
