"""P4Runtime conformance: the Read RPC ("Wildcard Reads" of tables and of indexed externs,
"Batch Processing" and its errors), constant entries, and counters, meters and registers
(tests/softswitch/p4runtime_target.py chooses the target)."""

from __future__ import annotations

import grpc
import pytest
from finsy.proto import p4r, rpc_code

from tests.softswitch.p4runtime_target import (
    DEVICE,
    Controller,
    Target,
    bmv2_differs,
    error_details,
    ids,
    target,
)

__all__ = ["target"]  # the fixture

U = p4r.Update
I = ids()  # noqa: E741
PI_FILTERS = "PI reads every entry of the table whatever the filters (its TODO: full filtering)"


def acl(src: int, priority: int, action: str = "MyIngress.drop") -> p4r.TableEntry:
    te = p4r.TableEntry(table_id=I["MyIngress.acl"], priority=priority)
    fm = te.match.add(field_id=1)
    fm.ternary.value = src.to_bytes(4, "big")
    fm.ternary.mask = b"\xff\xff\xff\xff"
    te.action.action.action_id = I[action]
    return te


def insert(*entries: p4r.TableEntry) -> list[p4r.Update]:
    return [p4r.Update(type=U.INSERT, entity=p4r.Entity(table_entry=e)) for e in entries]


def read_acl(c: Controller, **fields: object) -> list[p4r.TableEntry]:
    te = p4r.TableEntry(table_id=I["MyIngress.acl"], **fields)  # type: ignore[arg-type]
    return [e.table_entry for e in c.read(p4r.Entity(table_entry=te))]


def key_of(e: p4r.TableEntry) -> tuple[bytes, int]:
    return (e.match[0].ternary.value, e.priority)


@pytest.fixture
def three_acls(target: Target) -> Controller:
    """Entries 10.0.0.1 at priorities 10 and 20 (drop), 10.0.0.2 at 10 (to_cpu, metadata)."""
    c = target.primary()
    tagged = acl(0x0A000002, 10, "MyIngress.to_cpu")
    tagged.controller_metadata = 7
    tagged.metadata = b"m"
    c.write(*insert(acl(0x0A000001, 10), acl(0x0A000001, 20), tagged))
    return c


@bmv2_differs(PI_FILTERS)
def test_a_wildcard_read_filters_on_the_priority_it_is_given(three_acls: Controller) -> None:
    """Table Wildcard Reads: "`priority`: If default (0), all entries from the specified table
    will be considered. Otherwise, results will be filtered based on the provided priority
    value.\""""
    assert len(read_acl(three_acls)) == 3
    found = read_acl(three_acls, priority=10)
    assert sorted(key_of(e) for e in found) == [
        (b"\x0a\x00\x00\x01", 10),
        (b"\x0a\x00\x00\x02", 10),
    ]
    assert [key_of(e) for e in read_acl(three_acls, priority=20)] == [(b"\x0a\x00\x00\x01", 20)]


@bmv2_differs(PI_FILTERS)
def test_a_wildcard_read_filters_on_action_and_metadata(three_acls: Controller) -> None:
    """ "`action`: ... the client can provide an `action_id` (for direct tables), which will be
    use to filter table entries"; "`controller_metadata`: If default (0), all entries ...
    Otherwise, results will be filtered based on the provided `controller_metadata` value";
    likewise `metadata`."""
    to_cpu = p4r.TableAction()
    to_cpu.action.action_id = I["MyIngress.to_cpu"]
    for found in (
        read_acl(three_acls, action=to_cpu),
        read_acl(three_acls, controller_metadata=7),
        read_acl(three_acls, metadata=b"m"),
    ):
        assert [key_of(e) for e in found] == [(b"\x0a\x00\x00\x02", 10)]


def test_a_read_with_the_full_key_returns_that_entry(three_acls: Controller) -> None:
    """ "If a *request* fully specifies the entity key, the `Read` operation should retrieve a
    single P4 entity" (match and priority are a TableEntry's key)."""
    wanted = acl(0x0A000001, 20)
    entity = p4r.Entity(table_entry=p4r.TableEntry(table_id=wanted.table_id, priority=20))
    entity.table_entry.match.extend(wanted.match)
    assert [e.table_entry for e in three_acls.read(entity)] == [wanted]


def test_a_read_of_the_default_entry_returns_it_alone(target: Target) -> None:
    """ "`is_default_action`: If default (false), all non-default entries from the specified
    table will be considered. Otherwise, only the default entry will be considered.\""""
    c = target.primary()
    te = p4r.TableEntry(table_id=I["MyIngress.routes"], is_default_action=True)
    [got] = c.read(p4r.Entity(table_entry=te))
    assert got.table_entry.is_default_action and not got.table_entry.match
    assert got.table_entry.action.action.action_id == I["MyIngress.drop"]


@bmv2_differs("PI does not set is_const on the entries of a constant table")
def test_constant_entries_are_read_with_is_const(target: Target) -> None:
    """ "`is_const`, a boolean value that is `true` if and only if the entry cannot be modified
    or deleted by the client"; "When reading static (immutable) entries from a constant table,
    the following fields must be set by the server: `table_id`, `match`, `action`,
    `is_default_action`, and `priority` (if required).\""""
    c = target.primary()
    te = p4r.TableEntry(table_id=I["MyIngress.const_ports"])
    found = [e.table_entry for e in c.read(p4r.Entity(table_entry=te))]
    assert sorted(e.match[0].exact.value for e in found) == [b"\x07", b"\x09"]
    assert all(e.is_const and e.action.action.action_id == I["MyIngress.set_class"] for e in found)


@bmv2_differs("PI answers an entity with nothing set with UNKNOWN and no per-request error")
def test_an_entity_with_nothing_set_is_invalid_argument(target: Target) -> None:
    """ "The `entity` oneof field in the `Entity` message must always be set, or the server must
    return an `INVALID_ARGUMENT` error.\""""
    c = target.primary()
    with pytest.raises(grpc.RpcError) as err:
        c.read(p4r.Entity())
    if err.value.code() == grpc.StatusCode.UNKNOWN:  # reported per request (Batch Processing)
        [detail] = error_details(err.value)[1]
        assert detail.canonical_code == rpc_code.INVALID_ARGUMENT
    else:
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_read_before_any_pipeline_fails_the_precondition(target: Target) -> None:
    """ "If the `Read` is attempted before `ForwardingPipelineConfig` has been set, the server
    must return a `FAILED_PRECONDITION` error.\""""
    c = target.controller(stream=False)
    with pytest.raises(grpc.RpcError) as err:
        c.read(p4r.Entity(table_entry=p4r.TableEntry()))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


@bmv2_differs("PI answers a read for an unknown device with FAILED_PRECONDITION")
def test_a_read_for_another_device_is_not_found(target: Target) -> None:
    """ "If it does not match any of the devices known to the P4Runtime server, the server must
    return a `NOT_FOUND` error.\""""
    c = target.primary()
    with pytest.raises(grpc.RpcError) as err:
        c.read(p4r.Entity(table_entry=p4r.TableEntry()), device_id=DEVICE + 1)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


@bmv2_differs("PI stops at the first invalid request and returns its code, without details")
def test_a_batch_read_returns_what_it_can_then_one_error_per_request(target: Target) -> None:
    """Batch Processing: "If a client asked to read `{a,b,c,d}` and `b` and `d` *requests*
    didn't validate, the server will return entities corresponding to `a` and `c`, followed by
    a status `{p4.Error(OK), p4.Error(xxx), p4.Error(yyy), p4.Error(OK)}`"; "the overall code
    should be set to `UNKNOWN`.\""""
    c = target.primary()
    counter = p4r.CounterEntry(counter_id=I["MyIngress.port_counter"])
    counter.index.index = 1
    bad_index = p4r.CounterEntry(counter_id=I["MyIngress.port_counter"])
    bad_index.index.index = 64
    bad_table = p4r.TableEntry(table_id=12345)
    request = p4r.ReadRequest(
        device_id=DEVICE,
        entities=[
            p4r.Entity(counter_entry=counter),
            p4r.Entity(table_entry=bad_table),
            p4r.Entity(counter_entry=counter),
            p4r.Entity(counter_entry=bad_index),
        ],
    )
    got: list[p4r.Entity] = []
    with pytest.raises(grpc.RpcError) as err:
        for response in c.stub.Read(request):
            got.extend(response.entities)
    assert err.value.code() == grpc.StatusCode.UNKNOWN
    assert [e.counter_entry.index.index for e in got] == [1, 1]
    _, details = error_details(err.value)
    assert [d.canonical_code for d in details] == [
        rpc_code.OK,
        rpc_code.NOT_FOUND,
        rpc_code.OK,
        rpc_code.OUT_OF_RANGE,
    ]


# ---- counters, meters, registers


def test_a_counter_read_without_an_index_returns_every_cell(target: Target) -> None:
    """CounterEntry: "A particular (non-default) `counter_id` in conjunction with `index` unset
    implies a request to read all counter-entries for the given indirect counter ID.\""""
    c = target.primary()
    entity = p4r.Entity(counter_entry=p4r.CounterEntry(counter_id=I["MyIngress.port_counter"]))
    assert sorted(e.counter_entry.index.index for e in c.read(entity)) == list(range(64))


@bmv2_differs("PI accepts DELETE of a counter cell and reports an index out of range as UNKNOWN")
def test_a_counter_can_only_be_modified_and_its_index_must_be_in_range(target: Target) -> None:
    """CounterEntry: "The P4Runtime server must return an `INVALID_ARGUMENT` error code for
    update types `INSERT` and `DELETE`"; "The server must return `INVALID_ARGUMENT` for a
    negative index value and `OUT_OF_RANGE` if the index value exceeds the size of the counter
    array.\""""
    c = target.primary()
    updates = []
    for kind, index in ((U.INSERT, 1), (U.DELETE, 1), (U.MODIFY, -1), (U.MODIFY, 64)):
        entry = p4r.CounterEntry(counter_id=I["MyIngress.port_counter"])
        entry.index.index = index
        entry.data.packet_count = 5
        updates.append(p4r.Update(type=kind, entity=p4r.Entity(counter_entry=entry)))
    with pytest.raises(grpc.RpcError) as err:
        c.write(*updates)
    assert [d.canonical_code for d in error_details(err.value)[1]] == [
        rpc_code.INVALID_ARGUMENT,
        rpc_code.INVALID_ARGUMENT,
        rpc_code.INVALID_ARGUMENT,
        rpc_code.OUT_OF_RANGE,
    ]


def test_a_counter_modified_is_read_back(target: Target) -> None:
    """CounterEntry MODIFY: "The counter value is set to the value specified by the client in
    the `data` field.\""""
    c = target.primary()
    entry = p4r.CounterEntry(counter_id=I["MyIngress.port_counter"])
    entry.index.index = 3
    entry.data.packet_count, entry.data.byte_count = 5, 500
    c.write(p4r.Update(type=U.MODIFY, entity=p4r.Entity(counter_entry=entry)))
    [got] = c.read(p4r.Entity(counter_entry=entry))
    assert got.counter_entry == entry


def test_a_meter_configured_is_read_back(target: Target) -> None:
    """MeterEntry, and Read-Write Symmetry: the configuration written is the one read."""
    c = target.primary()
    entry = p4r.MeterEntry(meter_id=I["MyIngress.cpu_meter"])
    entry.index.index = 0
    entry.config.cir, entry.config.cburst, entry.config.pir, entry.config.pburst = 10, 5, 20, 5
    c.write(p4r.Update(type=U.MODIFY, entity=p4r.Entity(meter_entry=entry)))
    query = p4r.MeterEntry(meter_id=I["MyIngress.cpu_meter"])
    query.index.index = 0
    [got] = c.read(p4r.Entity(meter_entry=query))
    assert got.meter_entry.config == entry.config


@bmv2_differs("BMv2's P4Runtime server (PI) does not write registers")
def test_a_register_written_is_read_back(target: Target) -> None:
    """RegisterEntry and Read-Write Symmetry: the value written is the one read."""
    c = target.primary()
    entry = p4r.RegisterEntry(register_id=I["MyIngress.flow_reg"])
    entry.index.index = 2
    entry.data.bitstring = b"\x12\x34"
    c.write(p4r.Update(type=U.MODIFY, entity=p4r.Entity(register_entry=entry)))
    query = p4r.RegisterEntry(register_id=I["MyIngress.flow_reg"])
    query.index.index = 2
    [got] = c.read(p4r.Entity(register_entry=query))
    assert got.register_entry.data.bitstring == b"\x12\x34"


@bmv2_differs("PI reports a direct counter of a missing entry as INVALID_ARGUMENT")
def test_a_direct_counter_of_a_missing_entry_is_not_found(target: Target) -> None:
    """DirectCounterEntry: "If a matching `TableEntry` is not found, the server returns the
    error code `NOT_FOUND`.\""""
    c = target.primary()
    te = p4r.TableEntry(table_id=I["MyIngress.session"])
    for fid, value in enumerate(
        (b"\x0a\x00\x00\x01", b"\x0a\x00\x00\x02", b"\x06", b"\x01", b"\x02"), 1
    ):
        te.match.add(field_id=fid).exact.value = value
    dce = p4r.DirectCounterEntry(table_entry=te)
    dce.data.packet_count = 1
    with pytest.raises(grpc.RpcError) as err:
        c.write(p4r.Update(type=U.MODIFY, entity=p4r.Entity(direct_counter_entry=dce)))
    assert [d.canonical_code for d in error_details(err.value)[1]] == [rpc_code.NOT_FOUND]
