"""The native path (the program compiled to C) against the Python engine, frame for frame.

Two software switches run in this process behind real P4Runtime gRPC servers, one with the
Python engine and one native, and get the same pipeline (p4src/build/opengate.json) and the same
entries as the BMv2 differential test (test_differential_bmv2: ports and roles, routes, an HSM
classification set, sessions with and without NAT, a weighted SPM group, a port forward, a
masquerade rule, the ARP responder). The same frames then go through both data planes: every
output frame, packet-in and digest (as the bytes the server sends) must be identical, and so must
every counter and register afterwards. The stimuli are that test's (well-formed flows, many new
flows through the selector, seeded fuzzed frames) and hypothesis' random and mutated frames.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opengate import p4constants as pc
from opengate.p4info import P4Schema
from opengate.p4rt import P4RuntimeClient
from opengate.target import p4_build_dir
from softswitch.engine import Dataplane
from softswitch.native.build import compiler
from softswitch.native.dataplane import NativeDataplane
from softswitch.p4rt_common import p4data_struct
from softswitch.p4runtime_server import P4RuntimeServer
from softswitch.switch import Switch
from tests.softswitch.test_differential_bmv2 import (
    Frame,
    _install,
    fuzz_frames,
    selector_flows,
    well_formed,
)

pytestmark = pytest.mark.skipif(
    compiler() is None, reason="no C compiler (cc): the native path cannot be built"
)

DIGEST = -1
Out = tuple[Any, ...]


@dataclass
class Side:
    switch: Switch
    outputs: list[Out] = field(default_factory=list)

    def run(self, port: int, frame: bytes) -> list[Out]:
        self.outputs = []
        self.switch.receive(port, frame)
        return self.outputs


@pytest.fixture(scope="module")
def sides() -> Iterator[dict[str, Side]]:
    schema = P4Schema.load(p4_build_dir() / "opengate.p4info.txtpb")
    with contextlib.ExitStack() as stack:
        out: dict[str, Side] = {}
        for engine in ("python", "native"):
            sw = Switch(device_id=1, cpu_port=pc.CPU_PORT)
            server = P4RuntimeServer(sw, "127.0.0.1:0", engine=engine)
            server.start()
            stack.callback(server.stop)
            client = stack.enter_context(
                P4RuntimeClient(f"127.0.0.1:{server.port}", 1, 10).connect()
            )
            _install(client, schema)
            side = Side(sw)

            def transmit(port: int, frame: bytes, s: Side = side) -> None:
                s.outputs.append((port, frame))

            sw.transmit = transmit
            sw.packet_in = lambda frame, s=side: s.outputs.append((pc.CPU_PORT, frame))
            # each digest as the server sends it: its fields as an encoded P4Data, made by
            # protobuf for the Python engine and by C for the native one
            sw.dataplane.digest_sink = lambda did, values, s=side: s.outputs.append(
                (DIGEST, did, p4data_struct(values))
            )
            if engine == "native":
                sw.dataplane.digest_p4data_sink = lambda batch, s=side: s.outputs.extend(
                    (DIGEST, did, sample) for did, sample in batch
                )
            out[engine] = side
        stack.callback(out["native"].switch.set_dataplane, None)
        yield out


def same(sides: dict[str, Side], port: int, frame: bytes) -> list[Out]:
    py = sides["python"].run(port, frame)
    native = sides["native"].run(port, frame)
    assert native == py, f"frame in port {port}: {frame.hex()}"
    return py


def state(dp: Any) -> dict[str, list[Any]]:
    prog = dp.program
    out: dict[str, list[Any]] = {}
    for name, ctr in prog.counters.items():
        if not ctr.is_direct:
            out[f"counter {name}"] = [(int(c[0]), int(c[1])) for c in ctr.cells]
    for name, reg in prog.registers.items():
        if name in (pc.R_FLOW_SEEN, pc.R_FLOW_REPORTED):
            # time stamps: the two switches started at different times
            out[f"register {name}"] = [i for i, v in enumerate(reg.cells) if v]
        else:
            out[f"register {name}"] = [int(v) for v in reg.cells]
    for name, t in prog.tables.items():
        if t.with_counters:
            out[f"table {name}"] = sorted(
                (repr(e.key), e.priority, e.ctr[0], e.ctr[1])
                for e in t.entries.values()
                if e.ctr is not None
            )
    return out


def test_the_native_side_is_native(sides: dict[str, Side]) -> None:
    assert isinstance(sides["native"].switch.dataplane, NativeDataplane)
    assert isinstance(sides["python"].switch.dataplane, Dataplane)


def test_well_formed_flows_come_out_the_same(sides: dict[str, Side]) -> None:
    produced = 0
    for s in well_formed():
        if isinstance(s, Frame):
            produced += len(same(sides, s.port, s.data))
    assert produced > 15
    assert state(sides["native"].switch.dataplane) == state(sides["python"].switch.dataplane)


def test_new_flows_through_the_selector_come_out_the_same(sides: dict[str, Side]) -> None:
    originals, reverses = selector_flows(150)
    produced = 0
    for s in originals + reverses:
        assert isinstance(s, Frame)
        produced += len(same(sides, s.port, s.data))
    assert produced > 250
    assert state(sides["native"].switch.dataplane) == state(sides["python"].switch.dataplane)


def test_fuzzed_frames_come_out_the_same(sides: dict[str, Side]) -> None:
    for s in fuzz_frames(400, seed=7):
        if isinstance(s, Frame):
            same(sides, s.port, s.data)
    assert state(sides["native"].switch.dataplane) == state(sides["python"].switch.dataplane)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    port=st.sampled_from([1, 2, 3, 4, 7, pc.CPU_PORT]),
    seed=st.integers(min_value=0, max_value=20),
    flips=st.lists(st.tuples(st.integers(0, 80), st.integers(0, 255)), max_size=6),
    cut=st.integers(min_value=0, max_value=200),
)
def test_mutated_frames_come_out_the_same(
    sides: dict[str, Side], port: int, seed: int, flips: list[tuple[int, int]], cut: int
) -> None:
    frames = [s for s in well_formed() if isinstance(s, Frame)]
    frame = bytearray(frames[seed % len(frames)].data)
    for pos, value in flips:
        if pos < len(frame):
            frame[pos] = value
    same(sides, port, bytes(frame[:cut]))


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(frame=st.binary(max_size=120))
def test_random_bytes_come_out_the_same(sides: dict[str, Side], frame: bytes) -> None:
    same(sides, 1, frame)
