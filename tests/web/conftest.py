"""Fixtures for the console's tests: a controller on the switch double serving the API and the
console (the controller tests' fixtures), and a client that has logged in."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from controller.api import ApiServer
from controller.runtime import Controller
from controller.web import Console
from controller.web.auth import hash_password
from tests.controller.conftest import ControllerFactory, lab, make_controller, switch
from tests.e2e.conftest import gateway, pytest_runtest_makereport, topologies
from tests.switch_double import SwitchDouble

# the controller tests' fixtures (a switch double) and the end-to-end ones (the topology)
# (and the report of a failed test shows the topology's state)
__all__ = [
    "gateway",
    "lab",
    "make_controller",
    "pytest_runtest_makereport",
    "switch",
    "topologies",
]

TOKEN = "console-test-token"
USER, PASSWORD = "ops", "correct horse battery"


@dataclass
class Served:
    controller: Controller
    server: ApiServer
    base: str

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base, timeout=30)

    @contextmanager
    def logged_in(self) -> Iterator[httpx.Client]:
        """A client with a console session (logged in with the token)."""
        with self.client() as client:
            response = client.post(
                "/console/login", data={"user": "", "secret": TOKEN, "next": "/console/"}
            )
            assert response.status_code == 303, response.text
            client.headers["X-OpenGate-Console"] = "1"
            yield client


@pytest.fixture
def served(switch: SwitchDouble, make_controller: ControllerFactory, lab: Path) -> Iterator[Served]:
    controller = make_controller(switch)
    console = Console(
        controller, TOKEN, {USER: hash_password(PASSWORD)}, (lab.parent / "lab.rules",)
    )
    server = ApiServer(controller, "127.0.0.1", 0, TOKEN, console=console)
    server.start()
    try:
        yield Served(controller, server, f"http://127.0.0.1:{server.port}")
    finally:
        server.stop()
