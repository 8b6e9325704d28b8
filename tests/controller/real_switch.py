"""A lab on a real data plane for the integration tests: the lab policy on the switch TARGET
selects (BMv2 or the built-in switch), its four ports on veths whose host ends are `Wire`s, and a
controller that has reconciled it (`real_lab` in conftest.py)."""

from __future__ import annotations

import os
import select
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from scapy.layers.l2 import Ether

from controller.npm import NpmAddress
from controller.runtime import Controller, ControllerOptions
from opengate.netutil import require_root, veth_pairs
from opengate.switch import running_switch
from opengate.target import TargetChoice, TargetError, select_target

H1_MAC, H2_MAC, OUT1_MAC = "00:00:00:00:01:10", "00:00:00:00:01:11", "00:00:00:00:02:20"
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4


class Wire:
    """The host end of a veth: send frames, wait for one that matches."""

    def __init__(self, iface: str) -> None:
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.bind((iface, 0))

    def send(self, frame: bytes) -> None:
        self.sock.send(frame)

    def expect(self, match: Callable[[Ether], object], timeout: float = 5.0) -> Ether:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                break
            data, address = self.sock.recvfrom(65535)
            if address[2] == PACKET_OUTGOING:
                continue
            frame = Ether(data)
            if match(frame):
                return frame
        pytest.fail(f"no matching frame within {timeout:g}s")

    def close(self) -> None:
        self.sock.close()


@dataclass
class Lab:
    controller: Controller
    wires: dict[int, Wire]
    target: TargetChoice


def running_lab(request: pytest.FixtureRequest, tmp_path: Path, lab: Path) -> Iterator[Lab]:
    """The lab policy on a real switch; indirect parameters: (old, new) replacements in it."""
    reason = require_root("controller integration tests")
    if reason:
        pytest.skip(reason)
    try:
        choice = select_target()
    except TargetError as error:
        pytest.skip(f"no data-plane target can run: {error}")
    text = lab.read_text().replace(
        "idle_timeout: {tcp: 30, udp: 30, icmp: 30, other: 30}",
        "idle_timeout: {tcp: 30, udp: 1, icmp: 30, other: 30}",
    )
    for before, after in getattr(request, "param", ()):
        assert before in text
        text = text.replace(before, after)
    lab.write_text(text)
    tag = f"{os.getpid() % 100000}"
    pairs = [(f"oc{tag}s{n}", f"oc{tag}h{n}") for n in range(1, 5)]
    with (
        veth_pairs(pairs),
        running_switch(
            {n: pairs[n - 1][0] for n in range(1, 5)}, tmp_path / "switch.log", choice
        ) as switch,
    ):
        options = ControllerOptions(
            npms=(NpmAddress("npm1", switch.grpc_address, 1),),
            policy_path=lab,
            db_url=f"sqlite:///{tmp_path / 'cpm.db'}",
            state_dir=tmp_path,
            tick_seconds=0.1,
        )
        controller = Controller(options)
        wires = {n: Wire(pairs[n - 1][1]) for n in range(1, 5)}
        try:
            controller.start()
            assert controller.wait_synced(180), "the controller did not reconcile the switch"
            yield Lab(controller, wires, choice)
        finally:
            controller.stop()
            for wire in wires.values():
                wire.close()
