"""Starting a switch on a port picked free beforehand: whose listener is on a port, and a port
that another process takes between the pick and the switch's bind."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from opengate import switch as switch_module
from opengate.netutil import free_tcp_port, listens_on, stop_process
from opengate.p4rt import P4RuntimeClient
from opengate.target import Target, TargetChoice


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A socket of this process listening on a free loopback port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock


def test_listens_on_tells_whose_listener_a_port_has(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    assert listens_on(os.getpid(), port) is True
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert listens_on(other.pid, port) is False
    finally:
        stop_process(other)
    assert listens_on(os.getpid(), free_tcp_port()) is None  # nobody listens there


def test_a_switch_whose_port_was_taken_starts_again_on_another(
    listener: socket.socket,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    taken = listener.getsockname()[1]
    picks = iter([taken])
    # the first pick is the port this test listens on, as if it had been taken after the pick
    monkeypatch.setattr(
        switch_module, "free_tcp_port", lambda: next(picks, None) or free_tcp_port()
    )
    choice = TargetChoice(Target.SOFT, (sys.executable, "-m", "softswitch"), "test")
    with caplog.at_level(logging.WARNING, logger="opengate.switch"):
        running = switch_module.start_switch({}, tmp_path / "switch.log", choice)
    try:
        port = int(running.grpc_address.rsplit(":", 1)[1])
        assert port != taken
        assert listens_on(running.process.pid, port) is True
        assert any(str(taken) in r.getMessage() for r in caplog.records), caplog.text
        # the switch's P4Runtime server answers there: arbitration makes this client primary
        with P4RuntimeClient(running.grpc_address).connect() as client:
            assert client.is_primary
    finally:
        stop_process(running.process)
