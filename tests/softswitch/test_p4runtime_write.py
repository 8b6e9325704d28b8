"""P4Runtime conformance: the Write RPC (update semantics, "Batch Atomicity", "Error
Reporting"), TableEntry's rules (priority, default entry, constant tables, is_const) and
Read-Write symmetry (tests/softswitch/p4runtime_target.py chooses the target)."""

from __future__ import annotations

import grpc
import pytest
from finsy.proto import p4r, rpc_code

from softswitch.p4rt_errors import DETAILS_LIMIT_KEY
from tests.softswitch.p4runtime_target import (
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


def route(prefix: int, plen: int = 24, port: int = 3) -> p4r.TableEntry:
    te = p4r.TableEntry(table_id=I["MyIngress.routes"])
    fm = te.match.add(field_id=1)
    fm.lpm.value = prefix.to_bytes(4, "big")
    fm.lpm.prefix_len = plen
    te.action.action.action_id = I["MyIngress.set_nexthop"]
    te.action.action.params.add(param_id=1, value=b"\x02\x00\x00\x00\x00\x02")
    te.action.action.params.add(param_id=2, value=port.to_bytes(2, "big").lstrip(b"\0") or b"\0")
    return te


def acl(src: int, priority: int) -> p4r.TableEntry:
    te = p4r.TableEntry(table_id=I["MyIngress.acl"], priority=priority)
    fm = te.match.add(field_id=1)
    fm.ternary.value = src.to_bytes(4, "big")
    fm.ternary.mask = b"\xff\xff\xff\xff"
    te.action.action.action_id = I["MyIngress.drop"]
    return te


def update(kind: int, te: p4r.TableEntry) -> p4r.Update:
    return p4r.Update(type=kind, entity=p4r.Entity(table_entry=te))  # type: ignore[arg-type]


def read_routes(c: Controller) -> list[p4r.TableEntry]:
    entity = p4r.Entity(table_entry=p4r.TableEntry(table_id=I["MyIngress.routes"]))
    return [e.table_entry for e in c.read(entity)]


def failed_write(c: Controller, *updates: p4r.Update, **kwargs: object) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        c.write(*updates, **kwargs)  # type: ignore[arg-type]
    return err.value


def test_an_insert_of_an_existing_entry_is_already_exists_and_leaves_it_unchanged(
    target: Target,
) -> None:
    """INSERT: "If the entity already exists, an `ALREADY_EXISTS` error is returned, and the
    existing entity remains unchanged.\""""
    c = target.primary()
    c.write(update(U.INSERT, route(0x0A000000, port=3)))
    error = failed_write(c, update(U.INSERT, route(0x0A000000, port=4)))
    assert error.code() == grpc.StatusCode.UNKNOWN
    _, [detail] = error_details(error)
    assert detail.canonical_code == rpc_code.ALREADY_EXISTS
    [entry] = read_routes(c)
    assert entry.action.action.params[1].value == b"\x03"


@pytest.mark.parametrize("kind", [U.MODIFY, U.DELETE])
def test_a_modify_or_delete_of_a_missing_entry_is_not_found(target: Target, kind: int) -> None:
    """MODIFY: "If the entity does not exist, a `NOT_FOUND` error is returned." DELETE: "If the
    entity does not exist, a `NOT_FOUND` error is returned.\""""
    c = target.primary()
    _, [detail] = error_details(failed_write(c, update(kind, route(0x0B000000))))
    assert detail.canonical_code == rpc_code.NOT_FOUND


def test_a_delete_ignores_everything_but_the_key(target: Target) -> None:
    """ "When deleting an entry, these key fields (along with `is_default_action`) are the only
    fields considered by the server. All other fields must be ignored, even if they have
    nonsensical values (such as an invalid action field).\""""
    c = target.primary()
    c.write(update(U.INSERT, route(0x0A000000)))
    key_only = route(0x0A000000)
    key_only.action.action.action_id = 12345
    c.write(update(U.DELETE, key_only))
    assert read_routes(c) == []


@bmv2_differs('is_const "must be false in any INSERT, MODIFY, or DELETE"; PI ignores it')
def test_a_write_that_sets_is_const_is_invalid_argument(target: Target) -> None:
    """ "The `is_const` field must be `false` in any `INSERT`, `MODIFY`, or `DELETE` write
    request of a table entry. If it is true, the server must reject the operation and return
    an `INVALID_ARGUMENT` error.\""""
    c = target.primary()
    entry = route(0x0A000000)
    entry.is_const = True
    _, [detail] = error_details(failed_write(c, update(U.INSERT, entry)))
    assert detail.canonical_code == rpc_code.INVALID_ARGUMENT
    assert read_routes(c) == []


def test_priority_is_needed_for_ternary_and_refused_for_exact_or_lpm(target: Target) -> None:
    """ "The `priority` field must be set to a non-zero value if the match key includes a
    ternary match ... or to zero otherwise.\""""
    c = target.primary()
    lpm = route(0x0A000000)
    lpm.priority = 5
    _, details = error_details(failed_write(c, update(U.INSERT, acl(1, 0)), update(U.INSERT, lpm)))
    assert [d.canonical_code for d in details] == [rpc_code.INVALID_ARGUMENT] * 2


def test_the_default_entry_can_be_modified_but_not_inserted_or_deleted(target: Target) -> None:
    """ "we do not allow `INSERT` and `DELETE` updates on the default entry and the P4Runtime
    server must return an `INVALID_ARGUMENT` error code if the client attempts one.\""""
    c = target.primary()
    default = p4r.TableEntry(table_id=I["MyIngress.routes"], is_default_action=True)
    default.action.action.action_id = I["MyIngress.drop"]
    _, details = error_details(
        failed_write(c, update(U.INSERT, default), update(U.DELETE, default))
    )
    assert [d.canonical_code for d in details] == [rpc_code.INVALID_ARGUMENT] * 2
    c.write(update(U.MODIFY, default))


@bmv2_differs("PI refuses writes to a constant table with NOT_FOUND")
def test_a_constant_table_refuses_writes_with_permission_denied(target: Target) -> None:
    """Constant tables: "If the P4Runtime client attempts to perform any other kind of write
    update on a constant table the server must return a `PERMISSION_DENIED` error.\""""
    c = target.primary()
    te = p4r.TableEntry(table_id=I["MyIngress.const_ports"])
    te.match.add(field_id=1).exact.value = b"\x07"
    te.action.action.action_id = I["MyIngress.set_class"]
    te.action.action.params.add(param_id=1, value=b"\x01")
    _, [detail] = error_details(failed_write(c, update(U.MODIFY, te)))
    assert detail.canonical_code == rpc_code.PERMISSION_DENIED


@bmv2_differs("PI reports a full table as UNKNOWN")
def test_a_full_table_is_resource_exhausted(target: Target) -> None:
    """ "The P4Runtime server must return `RESOURCE_EXHAUSTED` when a table entry cannot be
    inserted because of a size limitation." (routes holds 256 entries.)"""
    c = target.primary()
    c.write(*(update(U.INSERT, route(0x0A000000 + (n << 8))) for n in range(256)))
    _, [detail] = error_details(failed_write(c, update(U.INSERT, route(0x0B000000))))
    assert detail.canonical_code == rpc_code.RESOURCE_EXHAUSTED


def test_continue_on_error_attempts_every_update_and_reports_each_in_order(
    target: Target,
) -> None:
    """CONTINUE_ON_ERROR: "Each operation within the batch must be attempted even if one or
    more encounter errors." Error reporting: "set `grpc::Status::code_` to `UNKNOWN` ... The
    number of `p4.Error` messages packed into `google.rpc.Status.details` field should therefore
    always match the number of updates ... If some of the updates were successful, the
    corresponding `p4.Error` should set the code to OK and omit other fields", and "The code and
    message fields must be the same as `code_` and `error_message_`"."""
    c = target.primary()
    updates = [
        update(U.INSERT, route(0x0A000000)),
        update(U.DELETE, route(0x0C000000)),
        update(U.INSERT, route(0x0B000000)),
        update(U.INSERT, route(0x0A000000)),
    ]
    error = failed_write(c, *updates)
    assert error.code() == grpc.StatusCode.UNKNOWN
    status, details = error_details(error)
    assert status is not None
    assert (status.code, status.message) == (rpc_code.UNKNOWN, error.details())
    assert [d.canonical_code for d in details] == [
        rpc_code.OK,
        rpc_code.NOT_FOUND,
        rpc_code.OK,
        rpc_code.ALREADY_EXISTS,
    ]
    assert details[0] == p4r.Error(canonical_code=rpc_code.OK), "OK omits the other fields"
    assert len(read_routes(c)) == 2


@pytest.mark.parametrize(
    "atomicity", [p4r.WriteRequest.ROLLBACK_ON_ERROR, p4r.WriteRequest.DATAPLANE_ATOMIC]
)
def test_the_optional_atomicity_modes_are_unimplemented(target: Target, atomicity: int) -> None:
    """ROLLBACK_ON_ERROR and DATAPLANE_ATOMIC are *Optional*: "If a P4Runtime server does not
    support this option at all, an `UNIMPLEMENTED` error is returned at all times.\""""
    c = target.primary()
    error = failed_write(c, update(U.INSERT, route(0x0A000000)), atomicity=atomicity)
    assert error.code() == grpc.StatusCode.UNIMPLEMENTED
    assert read_routes(c) == []


def test_a_write_is_read_back_as_written(target: Target) -> None:
    """Read-Write Symmetry: "if a client writes a P4 entity and then reads it back then the
    client should expect that the message it wrote and the message it read should match".
    (controller_metadata and metadata too: "it must be returned by the server along with the
    rest of the entry".)"""
    c = target.primary()
    written = route(0x0A000000)
    written.controller_metadata = 77
    written.metadata = b"cookie"
    c.write(update(U.INSERT, written))
    assert read_routes(c) == [written]


# ---- per-update errors of a large batch, as a default gRPC client receives them


@bmv2_differs("PI's details of 100 failed updates outgrow a default client's 8 KiB of metadata")
def test_a_batch_of_failed_updates_gives_a_default_client_one_error_per_update(
    target: Target,
) -> None:
    """One p4.Error per update (spec: "should therefore always match the number of updates")
    while they fit in what a default gRPC client accepts: 100 updates, all failing."""
    c = target.primary()
    updates = [update(U.INSERT, route(0x0A000000 + (n << 8))) for n in range(100)]
    c.write(*updates)
    error = failed_write(c, *updates)
    assert error.code() == grpc.StatusCode.UNKNOWN
    _, details = error_details(error)
    assert [d.canonical_code for d in details] == [rpc_code.ALREADY_EXISTS] * 100


@bmv2_differs(
    "PI sends one p4.Error per update however many: a default client fails such a call with "
    "RESOURCE_EXHAUSTED (the spec's Guidelines: the client must raise grpc.max_metadata_size)"
)
def test_a_batch_too_large_for_a_default_client_still_reports_its_failures(
    target: Target,
) -> None:
    """2,000 ACL inserts into a table of 256: 1,744 fail, 150 KB of metadata as one p4.Error
    per update. A default client (8 KiB) still gets UNKNOWN with the counts and the first
    failures in order, each naming its update, never RESOURCE_EXHAUSTED. Error Reporting: "if
    one or more updates in the batch ... failed, set `grpc::Status::code_` to `UNKNOWN`.\""""
    c = target.primary(10)
    error = failed_write(c, *(update(U.INSERT, acl(n, 1)) for n in range(2000)))
    assert error.code() == grpc.StatusCode.UNKNOWN, error.details()
    status, details = error_details(error)
    assert status is not None and details
    assert "1744 of 2000 updates failed" in (error.details() or "")
    assert {d.canonical_code for d in details} == {rpc_code.RESOURCE_EXHAUSTED}
    named = [int(d.message.split(":")[0].removeprefix("update #")) for d in details]
    assert named == list(range(256, 256 + len(details)))


def test_a_client_that_declares_a_larger_limit_gets_one_error_per_update(
    target: Target,
) -> None:
    """A client that accepts more metadata (opengate.p4rt sends DETAILS_LIMIT_KEY) gets the
    spec's one p4.Error per update of a 2,000-update batch."""
    if target.switch is None:
        pytest.skip("DETAILS_LIMIT_KEY is the built-in switch's")
    channel = grpc.insecure_channel(
        target.address,
        options=[("grpc.max_metadata_size", 1 << 24), ("grpc.absolute_max_metadata_size", 1 << 24)],
    )
    try:
        c = Controller(channel)
        c.open(10)
        c.set_pipeline()
        batch = [update(U.INSERT, acl(n, 1)) for n in range(2000)]
        with pytest.raises(grpc.RpcError) as err:
            c.write(*batch, metadata=((DETAILS_LIMIT_KEY, str(1 << 24)),))
        _, details = error_details(err.value)
        codes = [d.canonical_code for d in details]
        assert codes == [rpc_code.OK] * 256 + [rpc_code.RESOURCE_EXHAUSTED] * (2000 - 256)
    finally:
        c.close()
        channel.close()
