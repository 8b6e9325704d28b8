"""Malformed input never crashes the switch: random and truncated frames through every program."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.compat import raw
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Dot1Q, Ether

from softswitch.engine import Dataplane, Replica
from tests.softswitch.conftest import fixture_program

PROGRAMS = ("l3", "parse", "ops")
DATAPLANES = {name: Dataplane(fixture_program(name)) for name in PROGRAMS}
for _dp in DATAPLANES.values():
    _dp.pre.groups[1] = [Replica(1, 1), Replica(2, 2)]

SEEDS = [
    raw(Ether() / IP(src="10.0.0.1", dst="10.0.0.2", options=b"\x01\x01\x01\x00") / TCP() / b"abc"),
    raw(Ether() / Dot1Q(vlan=3) / IP() / UDP() / (b"x" * 20)),
    bytes.fromhex("000000000001000000000002") + b"\x88\x47" + bytes.fromhex("00064040") * 5,
    bytes.fromhex("000000000001000000000002") + b"\x88\xb5\x02\x00\x09",
    bytes.fromhex("000000000001000000000002") + b"\x90\x01\x07\x40",
    bytes.fromhex("000000000001000000000002") + b"\x88\xb6" + bytes(range(1, 17)),
]


def check(name: str, port: int, frame: bytes) -> None:
    dp = DATAPLANES[name]
    errors = dp.dropped_errors
    out = dp.process(port, frame)
    assert dp.dropped_errors == errors, "processing raised an exception"
    for out_port, out_frame in out:
        assert 0 <= out_port < 512 and isinstance(out_frame, bytes)


@pytest.mark.parametrize("name", PROGRAMS)
@pytest.mark.parametrize("seed", range(len(SEEDS)))
def test_every_truncation_of_valid_frames_is_handled(name: str, seed: int) -> None:
    frame = SEEDS[seed]
    for cut in range(len(frame) + 1):
        check(name, 1, frame[:cut])
        check(name, 255, frame[:cut])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(PROGRAMS),
    port=st.integers(min_value=0, max_value=511),
    seed=st.integers(min_value=0, max_value=len(SEEDS) - 1),
    flips=st.lists(
        st.tuples(st.integers(min_value=0, max_value=200), st.integers(0, 255)), max_size=8
    ),
    cut=st.integers(min_value=0, max_value=300),
)
def test_mutated_frames_never_crash(
    name: str, port: int, seed: int, flips: list[tuple[int, int]], cut: int
) -> None:
    frame = bytearray(SEEDS[seed])
    for pos, value in flips:
        if pos < len(frame):
            frame[pos] = value
    check(name, port, bytes(frame[:cut]))


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(PROGRAMS), frame=st.binary(max_size=200))
def test_random_bytes_never_crash(name: str, frame: bytes) -> None:
    check(name, 1, frame)
