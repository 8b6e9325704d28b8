"""Digests leave the software switch as bytes made without protobuf objects: each sample encoded
as a P4Data struct (in C by the native data plane, og_dp.c; by `p4data_struct` for the Python
engine) and each list wrapped by `digest_list_message`. These tests hold both to protobuf's own
encoding of the same messages, and check that what the server sends parses back to the values.
"""

from __future__ import annotations

import ctypes as ct

import pytest
from finsy.proto import p4d, p4r
from hypothesis import given, settings
from hypothesis import strategies as st

from opengate.target import p4_build_dir
from softswitch.native import make_dataplane
from softswitch.native.build import compiler
from softswitch.native.dataplane import DIGEST_BATCH, DIGEST_FIELDS
from softswitch.p4rt_common import canonical, digest_list_message, p4data_struct
from softswitch.program import load_json_bytes

U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
# values of every byte length, zero and the extremes included
VALUES = st.one_of(U64, st.sampled_from([0, 1, 255, 256, (1 << 56) - 1, 1 << 56, (1 << 64) - 1]))
SAMPLE = st.lists(VALUES, min_size=0, max_size=DIGEST_FIELDS).map(tuple)


def reference_sample(values: tuple[int, ...]) -> p4d.P4Data:
    data = p4d.P4Data()
    data.struct.SetInParent()  # a struct even with no members
    for v in values:
        data.struct.members.append(p4d.P4Data(bitstring=canonical(v)))
    return data


@given(st.lists(SAMPLE, max_size=5), st.integers(0, (1 << 32) - 1), U64, U64.map(lambda t: t >> 1))
@settings(max_examples=200, deadline=None)
def test_digest_list_bytes_are_protobufs(
    samples: list[tuple[int, ...]], digest_id: int, list_id: int, timestamp: int
) -> None:
    msg = p4r.StreamMessageResponse()
    msg.digest.digest_id = digest_id
    msg.digest.list_id = list_id
    msg.digest.timestamp = timestamp
    for s in samples:
        msg.digest.data.append(reference_sample(s))
    encoded = digest_list_message(
        digest_id, list_id, timestamp, [p4data_struct(s) for s in samples]
    )
    assert encoded == msg.SerializeToString()
    back = p4r.StreamMessageResponse.FromString(encoded)
    assert back.WhichOneof("update") == "digest"
    assert [
        tuple(int.from_bytes(m.bitstring, "big") for m in d.struct.members)
        for d in back.digest.data
    ] == samples


@pytest.fixture(scope="module")
def native() -> object:
    if compiler() is None:
        pytest.skip("no C compiler (cc): the native path cannot be built")
    program = load_json_bytes((p4_build_dir() / "opengate.json").read_bytes())
    return make_dataplane(program, engine="native")


@given(st.lists(st.tuples(st.integers(1, 1000), SAMPLE), min_size=1, max_size=DIGEST_BATCH + 40))
@settings(max_examples=60, deadline=None)
def test_native_encoding_is_protobufs(
    native: object, digests: list[tuple[int, tuple[int, ...]]]
) -> None:
    """The C encoder against protobuf, sample for sample, in order, across more than one batch."""
    got: list[tuple[int, bytes]] = []
    dp = native
    dp.digest_p4data_sink = got.extend  # type: ignore[attr-defined]
    for learn_id, values in digests:
        arr = (ct.c_uint64 * max(1, len(values)))(*values)
        dp.lib.og_dp_push_digest(dp.dp, learn_id, len(values), arr)  # type: ignore[attr-defined]
    dp.drain_digests()  # type: ignore[attr-defined]
    assert got == [(i, reference_sample(v).SerializeToString()) for i, v in digests]
