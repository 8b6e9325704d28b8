"""P4Runtime conformance: "Client Arbitration and Controller Replication", its rules for
MasterArbitrationUpdate messages and notifications, "Unset Election ID", roles, and the
primary-only checks of Write and SetForwardingPipelineConfig (tests/softswitch/
p4runtime_target.py chooses the target)."""

from __future__ import annotations

import grpc
import pytest
from finsy.proto import p4r, rpc_code

from tests.softswitch.p4runtime_target import (
    DEVICE,
    Target,
    bmv2_differs,
    ids,
    target,
)

__all__ = ["target"]  # the fixture

PI_PRIMARY = (
    "PI makes the live controller with the highest election id primary, whatever the highest "
    "id seen before"
)


def register_write(i: dict[str, int], value: bytes = b"\x01") -> p4r.Update:
    entry = p4r.RegisterEntry(register_id=i["MyIngress.flow_reg"])
    entry.index.index = 0
    entry.data.bitstring = value
    return p4r.Update(type=p4r.Update.MODIFY, entity=p4r.Entity(register_entry=entry))


def counter_write(i: dict[str, int]) -> p4r.Update:
    entry = p4r.CounterEntry(counter_id=i["MyIngress.port_counter"])
    entry.index.index = 0
    entry.data.packet_count = 1
    return p4r.Update(type=p4r.Update.MODIFY, entity=p4r.Entity(counter_entry=entry))


@bmv2_differs("PI keeps the stream of an arbitration for an unknown device open")
def test_an_arbitration_for_an_unknown_device_ends_the_stream_with_not_found(
    target: Target,
) -> None:
    """ "If `device_id` does not match any of the devices known to the P4Runtime server, the
    server shall terminate the stream by returning a `NOT_FOUND` error.\""""
    c = target.controller(stream=False)
    with pytest.raises(grpc.RpcError) as err:
        c.open(10, device_id=DEVICE + 1)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_an_election_id_in_use_ends_the_new_stream_with_invalid_argument(target: Target) -> None:
    """ "If the `election_id` is set and is already used by another live controller for the
    same (`device_id`, `role`), the P4Runtime server shall terminate the stream by returning
    an `INVALID_ARGUMENT` error.\""""
    target.controller(10)
    c = target.controller(stream=False)
    with pytest.raises(grpc.RpcError) as err:
        c.open(10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_the_highest_election_id_is_primary_and_the_others_are_told_already_exists(
    target: Target,
) -> None:
    """ "For the primary, `status` is OK ... For all backup controllers, `status` is set to
    non-OK (with `status.code` set to `google.rpc.ALREADY_EXISTS`)", and `election_id` "is
    set to the highest election ID that the server has seen"."""
    first = target.controller(stream=False)
    arb = first.open(10)
    assert arb.status.code == rpc_code.OK and arb.election_id.low == 10
    backup = target.controller(stream=False)
    arb = backup.open(5)
    assert arb.status.code == rpc_code.ALREADY_EXISTS and arb.election_id.low == 10
    assert first.nothing_more("arbitration"), "a new backup is told alone"
    higher = target.controller(stream=False)
    assert higher.open(20).status.code == rpc_code.OK
    for c in (first, backup):
        arb = c.next("arbitration")
        assert arb.status.code == rpc_code.ALREADY_EXISTS and arb.election_id.low == 20


@bmv2_differs(f"the spec leaves no primary when the primary goes; {PI_PRIMARY}")
def test_when_the_primary_goes_there_is_no_primary_and_the_others_hear_not_found(
    target: Target,
) -> None:
    """When a primary channel gets broken, "An advisory message is sent to all other
    controllers" and "The P4Runtime server will be without a primary controller, until a client
    sends a successful `MasterArbitrationUpdate`"; "if there is no primary currently, for all
    backup controllers, `status` is set to non-OK (with `status.code` set to
    `google.rpc.NOT_FOUND`)" with "the highest election ID that the server has seen"."""
    primary = target.primary(20)
    backup = target.controller(10)
    primary.close()
    arb = backup.next("arbitration")
    assert arb.status.code == rpc_code.NOT_FOUND
    assert (arb.election_id.high, arb.election_id.low) == (0, 20)
    with pytest.raises(grpc.RpcError) as err:
        backup.write(register_write(ids()))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED


@bmv2_differs(f"the spec compares with the highest election id ever seen; {PI_PRIMARY}")
def test_a_controller_becomes_primary_only_at_or_above_the_highest_election_id_seen(
    target: Target,
) -> None:
    """ "Let `election_id_past` be the highest election ID the server has ever seen ... If
    `election_id` is greater than or equal to `election_id_past`, then the controller becomes,
    or stays, primary ... Otherwise, the controller becomes a backup.\""""
    i = ids()
    primary = target.primary(20)
    backup = target.controller(10)
    primary.close()
    assert backup.next("arbitration").status.code == rpc_code.NOT_FOUND
    newcomer = target.controller(stream=False)
    arb = newcomer.open(15)  # below the highest seen: a backup, no primary yet
    assert arb.status.code == rpc_code.NOT_FOUND and arb.election_id.low == 20
    backup.arbitrate(20)  # the highest seen (the old primary's, which has gone): primary
    arb = backup.next("arbitration")
    assert arb.status.code == rpc_code.OK and arb.election_id.low == 20
    assert newcomer.next("arbitration").status.code == rpc_code.ALREADY_EXISTS
    backup.write(register_write(i))


@bmv2_differs(f"the spec demotes a primary that lowers its id below the highest; {PI_PRIMARY}")
def test_a_primary_that_lowers_its_election_id_becomes_a_backup_and_all_are_told(
    target: Target,
) -> None:
    """ "Otherwise, the controller becomes a backup. If the controller was previously a primary
    (and downgraded itself), then an advisory message is sent to all controllers for this
    `device_id` and `role`." Here a backup holds 5 and the primary (10) re-arbitrates with 7:
    7 is below the highest seen (10), so nobody is primary."""
    i = ids()
    primary = target.primary(10)
    backup = target.controller(5)
    primary.arbitrate(7)
    for c in (primary, backup):
        arb = c.next("arbitration")
        assert arb.status.code == rpc_code.NOT_FOUND and arb.election_id.low == 10
    for c in (primary, backup):
        with pytest.raises(grpc.RpcError) as err:
            c.write(register_write(i))
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED


@bmv2_differs("PI sends no arbitration response to a primary that arbitrates again with its own id")
def test_a_primary_that_arbitrates_again_with_its_id_stays_primary(target: Target) -> None:
    """ "If `election_id` is greater than or equal to `election_id_past`, then the controller
    becomes, or stays, primary.\""""
    primary = target.primary(10)
    primary.arbitrate(10)
    assert primary.next("arbitration").status.code == rpc_code.OK
    primary.write(register_write(ids()))


@bmv2_differs("PI treats an unset election id as 0, which can be primary")
def test_a_controller_without_an_election_id_never_becomes_primary(target: Target) -> None:
    """ "If the `election_id` is unset, the sender's `election_id` is considered lower than any
    `election_id`, and the sender will thus never become primary.\""""
    c = target.controller(stream=False)
    arb = c.open(None)
    assert arb.status.code == rpc_code.NOT_FOUND
    assert not arb.HasField("election_id"), "no primary yet: the election id is left unset"


def test_an_arbitration_naming_another_device_on_a_live_stream_fails_the_precondition(
    target: Target,
) -> None:
    """ "If the `device_id` does not match the one already assigned to this stream, the
    P4Runtime server shall terminate the stream by returning a `FAILED_PRECONDITION` error.\""""
    c = target.controller(10)
    c.arbitrate(10, device_id=DEVICE + 1)
    assert c.stream_error().code() == grpc.StatusCode.FAILED_PRECONDITION


@bmv2_differs("PI accepts roles (with its own role config)")
def test_an_arbitration_for_a_role_other_than_the_default_is_unimplemented(
    target: Target,
) -> None:
    """Role definition "is **out-of-scope** of this document"; this switch has the default role
    only ("A controller can omit the role message ... This implies the "default role", which
    corresponds to "full pipeline access""), and refuses another with UNIMPLEMENTED."""
    c = target.controller(stream=False)
    with pytest.raises(grpc.RpcError) as err:
        c.open(10, role="backup-realm")
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


@bmv2_differs("PI accepts roles (with its own role config)")
@pytest.mark.parametrize("rpc", ["Write", "Read", "SetForwardingPipelineConfig"])
def test_a_request_for_a_role_the_device_does_not_have_is_not_found(
    target: Target, rpc: str
) -> None:
    """Write and SetForwardingPipelineConfig: "If `device_id` does not match any of the devices
    known to the P4Runtime server or if `role` does not match any of the roles for the device,
    the server must return a `NOT_FOUND` error." (Read: the same, for this switch's only role.)"""
    c = target.primary(10)
    i = ids()
    with pytest.raises(grpc.RpcError) as err:
        if rpc == "Write":
            c.write(register_write(i), role="realm-2")
        elif rpc == "Read":
            c.read(p4r.Entity(table_entry=p4r.TableEntry()), role="realm-2")
        else:
            c.set_pipeline(role="realm-2")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


@bmv2_differs("PI answers a write for an unknown device with PERMISSION_DENIED")
def test_a_write_for_another_device_is_not_found(target: Target) -> None:
    """Write: "If `device_id` does not match any of the devices known to the P4Runtime server
    ... the server must return a `NOT_FOUND` error.\""""
    c = target.primary(10)
    with pytest.raises(grpc.RpcError) as err:
        c.write(counter_write(ids()), device_id=DEVICE + 1)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_backup_cannot_write_or_set_the_pipeline(target: Target) -> None:
    """ "If the client is not the primary for (`device_id`, `role`) according to the
    `election_id` value, the server must return a `PERMISSION_DENIED` error.\""""
    target.primary(10)
    backup = target.controller(5)
    with pytest.raises(grpc.RpcError) as err:
        backup.write(counter_write(ids()))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.RpcError) as err:
        backup.set_pipeline()
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_a_write_before_any_pipeline_fails_the_precondition(target: Target) -> None:
    """ "If the `Write` is attempted before a `ForwardingPipelineConfig` has been set, the server
    must return a `FAILED_PRECONDITION` error.\""""
    c = target.controller(10)
    with pytest.raises(grpc.RpcError) as err:
        c.write(counter_write(ids()))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_reads_need_neither_an_election_id_nor_a_stream(target: Target) -> None:
    """ "Since `ReadRequest`s do not mutate any state on the switch, they do not require an
    `election_id`, and they do not require the presence of an open `StreamChannel`.\""""
    target.primary(10)
    reader = target.controller(stream=False)
    entity = p4r.Entity(counter_entry=p4r.CounterEntry(counter_id=ids()["MyIngress.port_counter"]))
    assert len(reader.read(entity)) > 0
