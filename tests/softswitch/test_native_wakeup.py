"""The native slow path's one wake-up for two rings: a digest whose wake-up a slow-path frame's
read took is still delivered at once (in process, on a veth pair)."""

from __future__ import annotations

import ctypes as ct
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from finsy.proto import p4r, p4r_grpc, rpc_code

from softswitch.native import dataplane as native_dataplane
from softswitch.native.build import compiler
from softswitch.p4runtime_server import P4RuntimeServer
from softswitch.ports import Ports
from softswitch.switch import IO_NICE, Switch
from tests.softswitch.conftest import veth_pairs
from tests.softswitch.p4runtime_target import ids
from tests.softswitch.test_p4runtime import Client, frame, insert, route_entry, set_pipeline

pytestmark = [
    pytest.mark.needs_root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for veth pairs and raw sockets"),
    pytest.mark.skipif(compiler() is None, reason="needs a C compiler (cc) for the native path"),
]

INSIDE, OUTSIDE = "sswk-a0", "sswk-a1"
NO_INTERFACE = 9  # the route's port: no interface, so its frames go up to Python
PUSHED = (0x0A000063, 4242, 1)  # the digest pushed while the frame is taken up


@pytest.fixture
def veth() -> Iterator[None]:
    with veth_pairs([(INSIDE, OUTSIDE)]):
        yield


@pytest.fixture
def served(veth: None) -> Iterator[tuple[Switch, P4RuntimeServer, Client]]:
    """A switch on the veth's inside end, its P4Runtime server (native engine) and a primary
    client, before any pipeline: the port goes to the native data plane when one is set."""
    sw = Switch(device_id=1, cpu_port=255)
    ports = Ports({1: INSIDE})
    sw.transmit = ports.transmit
    sw.ports = ports
    ports.start(sw.receive)
    server = P4RuntimeServer(sw, "127.0.0.1:0", engine="native")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    client = Client(p4r_grpc.P4RuntimeStub(channel), election=10)
    try:
        assert client.open().status.code == rpc_code.OK
        yield sw, server, client
    finally:
        client.close()
        channel.close()
        server.stop()
        sw.set_dataplane(None)
        ports.close()


def test_a_digest_pushed_while_a_frame_is_taken_up_is_delivered(
    served: tuple[Switch, P4RuntimeServer, Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The frame's read clears the eventfd both rings share; a digest pushed just before that
    (here: from the frame's own hand-over to Python, without a wake-up of its own) must be
    drained in the same round. Only wake-ups drive the slow path here (its safety-net wait is
    an hour), so a lost one fails the test instead of waiting a second."""
    monkeypatch.setattr(native_dataplane, "UPCALL_WAIT_SECONDS", 3600.0)
    sw, server, client = served
    taken_up: list[int] = []

    def hand_over(port: int, data: bytes) -> None:
        taken_up.append(port)
        if port != NO_INTERFACE:
            return
        dp: Any = sw.dataplane
        learn_id = next(iter(server.service.pipeline.map.digest_of_learn))  # type: ignore[union-attr]
        values = (ct.c_uint64 * len(PUSHED))(*PUSHED)
        dp.lib.og_dp_push_digest(dp.dp, learn_id, len(PUSHED), values)

    sw.emit = hand_over  # type: ignore[method-assign,assignment]
    i = ids(set_pipeline(client))
    assert sw.dataplane is not None and sw.dataplane.native and sw.dataplane.owns_ports
    de = p4r.DigestEntry(digest_id=i["learn_t"])
    de.config.max_list_size = 1
    client.write(insert(p4r.Entity(digest_entry=de)))
    client.write(insert(p4r.Entity(table_entry=route_entry(i, b"\x0a\0\0\0", 8, NO_INTERFACE))))
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as peer:
        peer.bind((OUTSIDE, 0))
        peer.send(frame())
    digest = client.next("digest", timeout=10)
    members = [int.from_bytes(m.bitstring, "big") for m in digest.data[0].struct.members]
    assert tuple(members) == PUSHED
    assert taken_up == [NO_INTERFACE]  # nothing else woke the slow path


def thread_nice(name: str) -> list[int]:
    """The nice values of this process's threads called `name`."""
    out = []
    for task in Path("/proc/self/task").iterdir():
        if (task / "comm").read_text().strip() == name:
            out.append(int((task / "stat").read_text().rsplit(")", 1)[1].split()[16]))
    return out


@pytest.mark.parametrize("nice", [IO_NICE, 0])
def test_the_packet_io_thread_runs_at_the_switch_io_nice(
    served: tuple[Switch, P4RuntimeServer, Client], nice: int
) -> None:
    """The native data plane's polling thread takes the switch's io_nice when it opens the
    ports (0: it keeps the process's); the other threads are left alone."""
    sw, _, client = served
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert base > IO_NICE
    sw.io_nice = nice
    set_pipeline(client)
    assert sw.dataplane is not None and sw.dataplane.owns_ports
    assert thread_nice("og-io") == [nice or base]
    assert os.getpriority(os.PRIO_PROCESS, 0) == base
