"""End to end: `python -m softswitch` on veth pairs, programmed over P4Runtime, then SIGTERM."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import grpc
import pytest
from finsy.proto import p4r, p4r_grpc
from scapy.compat import raw
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from softswitch.native.build import compiler
from tests.softswitch.conftest import veth_pairs
from tests.softswitch.p4runtime_target import ids
from tests.softswitch.test_p4runtime import Client, insert, route_entry, set_pipeline

pytestmark = [
    pytest.mark.needs_root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for veth pairs and raw sockets"),
]

PAIRS = (("sswt-a0", "sswt-a1"), ("sswt-b0", "sswt-b1"))


@pytest.fixture
def veths() -> Iterator[None]:
    with veth_pairs(list(PAIRS)):
        yield


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


MODES = {  # extra arguments, what the switch's log must say, what it must not
    "native": ([], b"ports served by the native data plane", b"Python engine"),
    "python engine": (["--engine", "python"], b"ready", b"native path"),
    "native, Python ports": (["--python-io"], b"native path: program ready", b"ports served"),
}


@pytest.fixture(params=list(MODES))
def switch_process(
    veths: None, request: pytest.FixtureRequest
) -> Iterator[tuple[subprocess.Popen[bytes], int, str]]:
    mode = request.param
    if mode != "python engine" and compiler() is None:
        pytest.skip("native engine: no C compiler (cc)")
    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "softswitch",
        "-i",
        f"1@{PAIRS[0][0]}",
        "-i",
        f"2@{PAIRS[1][0]}",
        "--no-p4",
        "--",
        "--grpc-server-addr",
        f"127.0.0.1:{port}",
        "--device-id",
        "1",
        "--cpu-port",
        "255",
        *MODES[mode][0],
    ]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE)
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=30)  # ready once the port accepts
        channel.close()
        yield proc, port, mode
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _raw_socket(ifname: str) -> socket.socket:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    s.bind((ifname, 0))
    return s


def test_cli_switch_forwards_between_veths_and_stops_on_sigterm(
    switch_process: tuple[subprocess.Popen[bytes], int, str],
) -> None:
    """On each engine and port layer: a routed frame comes out rewritten, SIGTERM stops it, and
    its log says which engine and port layer served the program."""
    proc, port, mode = switch_process
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    client = Client(p4r_grpc.P4RuntimeStub(channel), election=1)
    client.open()
    i = ids(set_pipeline(client))
    client.write(insert(p4r.Entity(table_entry=route_entry(i, b"\x0a\x00\x00\x00", 8, 2))))
    tx = _raw_socket(PAIRS[0][1])
    rx = _raw_socket(PAIRS[1][1])
    rx.settimeout(5)
    frame = raw(
        Ether(dst="00:00:00:00:00:02", src="00:00:00:00:00:01")
        / IP(src="10.0.0.1", dst="10.0.0.9", ttl=9)
        / TCP(sport=5, dport=6)
        / b"e2e"
    )
    tx.send(frame)
    deadline = time.monotonic() + 5
    got = None
    while time.monotonic() < deadline:
        data = rx.recv(65536)
        pkt = Ether(data)
        if IP in pkt and pkt[IP].dst == "10.0.0.9":
            got = pkt
            break
    assert got is not None and got[IP].ttl == 8 and got.dst == "02:00:00:00:00:02"
    tx.close()
    rx.close()
    client.close()
    channel.close()
    proc.terminate()
    assert proc.wait(timeout=10) == 0
    assert proc.stderr is not None
    log = proc.stderr.read()
    _, must, must_not = MODES[mode]
    assert b"ready" in log and must in log and must_not not in log, log.decode(errors="replace")
