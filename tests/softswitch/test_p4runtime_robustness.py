"""The built-in switch's P4Runtime server against malformed and hostile requests: random and
mutated WriteRequests, ReadRequests, SetForwardingPipelineConfig requests and stream messages
(wrong ids and widths, oversize and missing fields, garbage bytes, huge batches), sent over gRPC
to one running server. Every answer is a proper gRPC status (never UNKNOWN from an exception in
a handler), nothing is logged as an exception, and the server answers a good request after
each. Bounded: a few dozen examples per RPC, seeded with known-bad ones."""

from __future__ import annotations

import logging
import queue
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from finsy.proto import p4r
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from softswitch.p4runtime_server import P4RuntimeServer
from softswitch.switch import Switch
from tests.softswitch.p4runtime_target import (
    CPU_PORT,
    DEVICE,
    Controller,
    device_config,
    ids,
    p4info,
)

I = ids()  # noqa: E741
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,  # the same examples each run: a failure is reproducible
)
ELECTION = 10


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[P4RuntimeServer, Controller, grpc.Channel]]:
    switch = Switch(device_id=DEVICE, cpu_port=CPU_PORT)
    srv = P4RuntimeServer(switch, "127.0.0.1:0", engine="python")
    srv.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{srv.port}")
    primary = Controller(channel)
    primary.open(ELECTION)
    primary.set_pipeline()
    try:
        yield srv, primary, channel
    finally:
        primary.close()
        channel.close()
        srv.stop(grace=0)


@pytest.fixture
def no_exceptions(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    with caplog.at_level(logging.ERROR, logger="softswitch"):
        yield
    crashes = [r for r in caplog.records if r.exc_info and r.name.startswith("softswitch")]
    assert not crashes, crashes[0].getMessage()


def raw_call(channel: grpc.Channel, method: str, data: bytes) -> grpc.StatusCode:
    """Send `data` as the request of a unary (or server-streaming) method; the call's status."""
    path = f"/p4.v1.P4Runtime/{method}"
    try:
        if method == "Read":
            read: Any = channel.unary_stream(path)  # no serializers: the bytes as they are
            for _ in read(data, timeout=20):
                pass
        else:
            call: Any = channel.unary_unary(path)
            call(data, timeout=20)
    except grpc.RpcError as exc:
        check_status(exc)
        return exc.code()
    return grpc.StatusCode.OK


def check_status(exc: grpc.RpcError) -> None:
    details = exc.details() or ""
    assert "Exception calling application" not in details, details
    assert "Exception iterating responses" not in details, details
    if exc.code() == grpc.StatusCode.UNKNOWN:  # only the per-update / per-request statuses
        assert details.startswith(("Write failure", "Read failure")), details
    if exc.code() == grpc.StatusCode.INTERNAL:  # only a request that is not a protobuf
        assert "deserializ" in details.lower(), details


def still_answers(primary: Controller) -> None:
    entity = p4r.Entity(counter_entry=p4r.CounterEntry(counter_id=I["MyIngress.port_counter"]))
    assert len(primary.read(entity)) == 64


def mutate(data: bytes, edits: list[tuple[int, int]]) -> bytes:
    """Flip, drop or insert bytes at the given (position, value) edits."""
    out = bytearray(data)
    for pos, value in edits:
        if not out:
            out.append(value)
            continue
        i = pos % len(out)
        if value % 3 == 0:
            del out[i]
        elif value % 3 == 1:
            out.insert(i, value)
        else:
            out[i] ^= value or 1
    return bytes(out)


# ---- strategies: messages near the program's ids and widths, and past them

known_ids = st.sampled_from(sorted(I.values()))
some_id = st.one_of(known_ids, st.integers(0, 2**32 - 1))
some_bytes = st.one_of(
    st.binary(max_size=8),
    st.binary(min_size=17, max_size=64),
    st.just(b""),
    st.just(b"\xff" * 4096),
)
int32 = st.integers(-(2**31), 2**31 - 1)
big_int = st.one_of(int32, st.integers(-(2**63), 2**63 - 1))


@st.composite
def field_match(draw: st.DrawFn) -> p4r.FieldMatch:
    fm = p4r.FieldMatch(field_id=draw(st.integers(0, 8)))
    kind = draw(st.sampled_from(["exact", "lpm", "ternary", "range", "optional", "other", None]))
    if kind == "exact":
        fm.exact.value = draw(some_bytes)
    elif kind == "lpm":
        fm.lpm.value = draw(some_bytes)
        fm.lpm.prefix_len = draw(st.integers(-5, 300))
    elif kind == "ternary":
        fm.ternary.value, fm.ternary.mask = draw(some_bytes), draw(some_bytes)
    elif kind == "range":
        fm.range.low, fm.range.high = draw(some_bytes), draw(some_bytes)
    elif kind == "optional":
        fm.optional.value = draw(some_bytes)
    elif kind == "other":
        fm.other.type_url = "type.googleapis.com/nothing"
        fm.other.value = draw(some_bytes)
    return fm


@st.composite
def table_entry(draw: st.DrawFn) -> p4r.TableEntry:
    te = p4r.TableEntry(table_id=draw(some_id), priority=draw(int32))
    te.match.extend(draw(st.lists(field_match(), max_size=6)))
    which = draw(st.sampled_from(["action", "member", "group", "set", None]))
    if which == "action":
        te.action.action.action_id = draw(some_id)
        for _ in range(draw(st.integers(0, 4))):
            te.action.action.params.add(param_id=draw(st.integers(0, 5)), value=draw(some_bytes))
    elif which == "member":
        te.action.action_profile_member_id = draw(st.integers(0, 2**32 - 1))
    elif which == "group":
        te.action.action_profile_group_id = draw(st.integers(0, 2**32 - 1))
    elif which == "set":
        te.action.action_profile_action_set.action_profile_actions.add(weight=draw(int32))
    te.is_default_action = draw(st.booleans())
    te.is_const = draw(st.booleans())
    te.idle_timeout_ns = draw(st.integers(0, 2**63 - 1))
    if draw(st.booleans()):
        te.counter_data.packet_count = draw(big_int)
    if draw(st.booleans()):
        te.meter_config.cir = draw(big_int)
    if draw(st.booleans()):
        te.time_since_last_hit.elapsed_ns = 1
    te.metadata = draw(some_bytes)
    return te


ENTITY_KINDS = [
    *("table", "counter", "meter", "register", "digest", "member", "group", "pre", "vs"),
    *("direct_counter", "direct_meter", "extern", None),
]


@st.composite
def entity(draw: st.DrawFn) -> p4r.Entity:
    kind = draw(st.sampled_from(ENTITY_KINDS))
    e = p4r.Entity()
    index = draw(st.one_of(st.none(), big_int))
    if kind == "table":
        e.table_entry.CopyFrom(draw(table_entry()))
    elif kind in ("counter", "meter", "register"):
        target = getattr(e, f"{kind}_entry")
        setattr(target, f"{kind}_id", draw(some_id))
        if index is not None:
            target.index.index = index
        if kind == "counter":
            target.data.packet_count = draw(big_int)
        elif kind == "meter":
            target.config.cir, target.config.pir = draw(big_int), draw(big_int)
        else:
            target.data.bitstring = draw(some_bytes)
    elif kind == "digest":
        e.digest_entry.digest_id = draw(some_id)
        e.digest_entry.config.max_list_size = draw(int32)
        e.digest_entry.config.max_timeout_ns = draw(big_int)
        e.digest_entry.config.ack_timeout_ns = draw(big_int)
    elif kind == "member":
        e.action_profile_member.action_profile_id = draw(some_id)
        e.action_profile_member.member_id = draw(st.integers(0, 2**32 - 1))
        e.action_profile_member.action.action_id = draw(some_id)
        e.action_profile_member.action.params.add(param_id=1, value=draw(some_bytes))
    elif kind == "group":
        g = e.action_profile_group
        g.action_profile_id, g.group_id = draw(some_id), draw(st.integers(0, 2**32 - 1))
        g.max_size = draw(st.integers(-(2**31), 2**31 - 1))
        for _ in range(draw(st.integers(0, 3))):
            g.members.add(member_id=draw(st.integers(0, 5)), weight=draw(int32))
    elif kind == "pre":
        mg = e.packet_replication_engine_entry.multicast_group_entry
        mg.multicast_group_id = draw(st.integers(0, 2**32 - 1))
        for _ in range(draw(st.integers(0, 3))):
            mg.replicas.add(egress_port=draw(st.integers(0, 2**32 - 1)), instance=1)
    elif kind == "vs":
        e.value_set_entry.value_set_id = draw(some_id)
        e.value_set_entry.members.add().match.append(draw(field_match()))
    elif kind in ("direct_counter", "direct_meter"):
        getattr(e, f"{kind}_entry").table_entry.CopyFrom(draw(table_entry()))
    elif kind == "extern":
        e.extern_entry.extern_type_id = draw(some_id)
    return e


@st.composite
def write_request(draw: st.DrawFn) -> p4r.WriteRequest:
    req = p4r.WriteRequest(device_id=DEVICE)
    req.election_id.low = ELECTION
    if draw(st.integers(0, 4)) == 0:  # a bad envelope, now and then
        req.device_id = draw(st.sampled_from([0, 7]))
        req.role = draw(st.sampled_from(["", "x" * 300]))
        req.atomicity = draw(st.sampled_from([1, 2, 9]))  # type: ignore[assignment]
        req.election_id.low = draw(st.sampled_from([0, 3]))
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from([1, 1, 2, 2, 3, 3, 0, 5]))
        req.updates.add(type=kind, entity=draw(entity()))
    return req


def huge_batch() -> p4r.WriteRequest:
    req = p4r.WriteRequest(device_id=DEVICE)
    req.election_id.low = ELECTION
    for n in range(6000):
        te = p4r.TableEntry(table_id=I["MyIngress.acl"], priority=n + 1)
        te.match.add(field_id=1).ternary.value = b"\x01"
        te.match[0].ternary.mask = b"\xff\xff\xff\xff\xff"  # too wide
        req.updates.add(type=p4r.Update.INSERT).entity.table_entry.CopyFrom(te)
    return req


# mostly none: a mutated message is most often no longer a message of its type
EDITS: st.SearchStrategy[list[tuple[int, int]]] = st.one_of(
    st.just([]),
    st.just([]),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
)
KNOWN_BAD_WRITES = [
    p4r.WriteRequest(device_id=DEVICE),  # no election id
    p4r.WriteRequest(device_id=DEVICE, updates=[p4r.Update(type=p4r.Update.INSERT)]),
    huge_batch(),
]


@SETTINGS
@given(write_request(), EDITS)
@example(KNOWN_BAD_WRITES[0], [])
@example(KNOWN_BAD_WRITES[1], [])
@example(KNOWN_BAD_WRITES[2], [])
@example(KNOWN_BAD_WRITES[2], [(7, 2), (100, 1)])
def test_writes_always_get_a_proper_status(
    server: tuple[P4RuntimeServer, Controller, grpc.Channel],
    no_exceptions: None,
    request: p4r.WriteRequest,
    edits: list[tuple[int, int]],
) -> None:
    _, primary, channel = server
    data = request.SerializeToString()
    raw_call(channel, "Write", mutate(data, edits) if edits else data)
    still_answers(primary)


@st.composite
def read_request(draw: st.DrawFn) -> p4r.ReadRequest:
    req = p4r.ReadRequest(device_id=draw(st.sampled_from([DEVICE, DEVICE, 0])))
    req.role = draw(st.sampled_from(["", "", "realm"]))
    req.entities.extend(draw(st.lists(entity(), max_size=5)))
    return req


@SETTINGS
@given(read_request(), EDITS)
@example(p4r.ReadRequest(device_id=DEVICE, entities=[p4r.Entity()]), [])
@example(p4r.ReadRequest(device_id=DEVICE, entities=[p4r.Entity()] * 5000), [])
def test_reads_always_get_a_proper_status(
    server: tuple[P4RuntimeServer, Controller, grpc.Channel],
    no_exceptions: None,
    request: p4r.ReadRequest,
    edits: list[tuple[int, int]],
) -> None:
    _, primary, channel = server
    data = request.SerializeToString()
    raw_call(channel, "Read", mutate(data, edits) if edits else data)
    still_answers(primary)


@st.composite
def pipeline_request(draw: st.DrawFn) -> bytes:
    """A SetForwardingPipelineConfig that is never a valid change of program: VERIFY or
    VERIFY_AND_SAVE (the running program stays) of a mutated config, or any action from a
    client that is not the primary."""
    A = p4r.SetForwardingPipelineConfigRequest  # noqa: N806
    req = A(device_id=draw(st.sampled_from([DEVICE, 0])))
    primary = draw(st.booleans())
    actions = [A.VERIFY, A.VERIFY_AND_SAVE, 0, 9] if primary else list(range(7))
    req.action = draw(st.sampled_from(actions))  # type: ignore[assignment]
    req.election_id.low = ELECTION if primary else 3
    if draw(st.booleans()):
        req.config.p4info.CopyFrom(p4info())
        config = device_config()
        edits = draw(
            st.lists(st.tuples(st.integers(0, len(config)), st.integers(0, 255)), max_size=8)
        )
        req.config.p4_device_config = mutate(config, edits) if edits else config
        if draw(st.booleans()):
            del req.config.p4info.tables[draw(st.integers(0, len(req.config.p4info.tables) - 1))]
    data: bytes = req.SerializeToString()
    return data


@SETTINGS
@given(pipeline_request())
@example(b"\x08\x01\x20\x01")  # VERIFY, no election id, no config
@example(b"\xff" * 64)  # not a protobuf
def test_pipeline_configs_always_get_a_proper_status(
    server: tuple[P4RuntimeServer, Controller, grpc.Channel],
    no_exceptions: None,
    data: bytes,
) -> None:
    srv, primary, channel = server
    raw_call(channel, "SetForwardingPipelineConfig", data)
    # a saved config would take this module's later reads: drop it
    with srv.service.lock:
        srv.service._drop_saved()
    still_answers(primary)


@st.composite
def stream_messages(draw: st.DrawFn) -> list[p4r.StreamMessageRequest]:
    out = []
    for _ in range(draw(st.integers(1, 6))):
        msg = p4r.StreamMessageRequest()
        kind = draw(st.sampled_from(["arbitration", "packet", "ack", "other", None]))
        if kind == "arbitration":
            msg.arbitration.device_id = draw(st.sampled_from([DEVICE, 0, 5]))
            if draw(st.booleans()):
                msg.arbitration.election_id.low = draw(st.integers(0, 2**64 - 1))
                msg.arbitration.election_id.high = draw(st.sampled_from([0, 0, 2**64 - 1]))
            if draw(st.booleans()):
                msg.arbitration.role.name = draw(st.sampled_from(["", "r"]))
        elif kind == "packet":
            msg.packet.payload = draw(some_bytes)
            for _ in range(draw(st.integers(0, 3))):
                msg.packet.metadata.add(metadata_id=draw(st.integers(0, 4)), value=draw(some_bytes))
        elif kind == "ack":
            msg.digest_ack.digest_id = draw(some_id)
            msg.digest_ack.list_id = draw(st.integers(0, 2**64 - 1))
        elif kind == "other":
            msg.other.type_url = "x"
        out.append(msg)
    return out


@SETTINGS
@given(stream_messages())
def test_streams_always_end_with_a_proper_status(
    server: tuple[P4RuntimeServer, Controller, grpc.Channel],
    no_exceptions: None,
    messages: list[p4r.StreamMessageRequest],
) -> None:
    """A stream of random messages (below the primary's election id: it never takes over)."""
    _, primary, channel = server
    for msg in messages:
        if msg.HasField("arbitration") and msg.arbitration.election_id.high:
            msg.arbitration.election_id.high = 0
        if msg.HasField("arbitration") and msg.arbitration.election_id.low >= ELECTION:
            msg.arbitration.election_id.low %= ELECTION
    requests: queue.Queue[Any] = queue.Queue()
    for msg in messages:
        requests.put(msg)
    requests.put(None)
    call = channel.stream_stream(
        "/p4.v1.P4Runtime/StreamChannel",
        request_serializer=p4r.StreamMessageRequest.SerializeToString,
        response_deserializer=p4r.StreamMessageResponse.FromString,
    )(iter(requests.get, None), timeout=20)
    try:
        for _ in call:
            pass
    except grpc.RpcError as exc:
        check_status(exc)
    still_answers(primary)
    assert primary.responses.qsize() == 0 or all(
        r.WhichOneof("update") != "arbitration" or r.arbitration.status.code == 0
        for r in list(primary.responses.queue)
    ), "the primary stayed primary"
