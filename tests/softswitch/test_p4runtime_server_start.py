"""The built-in switch's P4Runtime port is its own: a second switch on a port in use fails to
start (gRPC's SO_REUSEPORT would let both listen and share the connections)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from softswitch.p4runtime_server import P4RuntimeServer
from softswitch.switch import Switch


@pytest.fixture
def first() -> Iterator[P4RuntimeServer]:
    server = P4RuntimeServer(Switch(device_id=1), "127.0.0.1:0")
    server.start()
    try:
        yield server
    finally:
        server.stop(grace=0)


def test_a_second_server_on_a_port_in_use_is_refused(first: P4RuntimeServer) -> None:
    with pytest.raises(OSError, match=f"127.0.0.1:{first.port}"):
        P4RuntimeServer(Switch(device_id=2), f"127.0.0.1:{first.port}")


def test_the_switch_started_on_a_port_in_use_exits_saying_so(first: P4RuntimeServer) -> None:
    """`python -m softswitch` (what opengate.switch starts, and starts again on another port
    when it exits) exits 2 with a message naming the address."""
    address = f"127.0.0.1:{first.port}"
    result = subprocess.run(
        [sys.executable, "-m", "softswitch", "--no-p4", "--", "--grpc-server-addr", address],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert f"cannot serve gRPC on {address}" in result.stderr
