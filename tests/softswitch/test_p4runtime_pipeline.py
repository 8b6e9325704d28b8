"""P4Runtime conformance: "SetForwardingPipelineConfig RPC" (VERIFY, VERIFY_AND_SAVE,
VERIFY_AND_COMMIT, COMMIT, RECONCILE_AND_COMMIT) and "GetForwardingPipelineConfig RPC"
(tests/softswitch/p4runtime_target.py chooses the target)."""

from __future__ import annotations

import grpc
import pytest
from finsy.proto import p4r

from tests.softswitch.p4runtime_target import (
    Controller,
    Target,
    bmv2_differs,
    device_config,
    ids,
    p4info,
    target,
)

__all__ = ["target"]  # the fixture

A = p4r.SetForwardingPipelineConfigRequest
I = ids()  # noqa: E741


def add_route(c: Controller, prefix: int = 0x0A000000) -> None:
    te = p4r.TableEntry(table_id=I["MyIngress.routes"])
    fm = te.match.add(field_id=1)
    fm.lpm.value = prefix.to_bytes(4, "big")
    fm.lpm.prefix_len = 8
    te.action.action.action_id = I["MyIngress.drop"]
    c.write(p4r.Update(type=p4r.Update.INSERT, entity=p4r.Entity(table_entry=te)))


def routes(c: Controller) -> int:
    te = p4r.TableEntry(table_id=I["MyIngress.routes"])
    return len(c.read(p4r.Entity(table_entry=te)))


def refused(call: object, *args: object, **kwargs: object) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        call(*args, **kwargs)  # type: ignore[operator]
    return err.value.code()


@bmv2_differs("PI checks that the P4Info parses: an absent config is an empty one")
@pytest.mark.parametrize("action", [A.VERIFY, A.VERIFY_AND_SAVE, A.VERIFY_AND_COMMIT])
def test_an_action_without_a_config_is_invalid_argument(target: Target, action: int) -> None:
    """VERIFY, VERIFY_AND_SAVE, VERIFY_AND_COMMIT: "Returns an `INVALID_ARGUMENT` error if
    config is not provided or if the provided config cannot be realized.\""""
    c = target.controller(10)
    assert refused(c.set_pipeline, action, config=False) == grpc.StatusCode.INVALID_ARGUMENT


@bmv2_differs("BMv2 accepts a JSON that is not a program")
def test_a_config_that_cannot_be_realized_is_invalid_argument(target: Target) -> None:
    """ "Returns an `INVALID_ARGUMENT` error if ... the provided config cannot be realized.\""""
    c = target.controller(10)
    code = refused(c.set_pipeline, device_config_bytes=b'{"not": "a program"}')
    assert code == grpc.StatusCode.INVALID_ARGUMENT


def test_verify_leaves_the_forwarding_state_alone(target: Target) -> None:
    """VERIFY: "verifies that the target can realize the given config. The forwarding state in
    the target is not modified.\""""
    c = target.primary()
    add_route(c)
    c.set_pipeline(A.VERIFY, cookie=7)
    assert routes(c) == 1 and c.get_pipeline().cookie.cookie == 42


def test_verify_and_commit_clears_the_forwarding_state(target: Target) -> None:
    """VERIFY_AND_COMMIT: "saves and realizes the given config ... The forwarding state in the
    target is cleared.\""""
    c = target.primary()
    add_route(c)
    c.set_pipeline(A.VERIFY_AND_COMMIT, cookie=43)
    assert routes(c) == 0 and c.get_pipeline().cookie.cookie == 43


def test_writes_after_verify_and_save_go_to_the_saved_config_and_commit_realizes_them(
    target: Target,
) -> None:
    """VERIFY_AND_SAVE: "The forwarding state in the target is not modified. However, any
    subsequent `Read` / `Write` requests must refer to fields in the new config." COMMIT:
    "realizes the last saved, but not yet committed, config. The forwarding state in the target
    is updated by replaying the write requests to the target device since the last config was
    saved.\""""
    c = target.primary()
    add_route(c, 0x0A000000)
    c.set_pipeline(A.VERIFY_AND_SAVE, cookie=50)
    assert routes(c) == 0, "reads refer to the saved config"
    add_route(c, 0x0B000000)
    add_route(c, 0x0C000000)
    if target.switch is not None:
        assert target.switch.dataplane is not None
        assert c.get_pipeline().cookie.cookie == 42, "the running config is still the old one"
    c.set_pipeline(A.COMMIT, config=False)
    assert routes(c) == 2 and c.get_pipeline().cookie.cookie == 50


@bmv2_differs("PI's COMMIT looks neither for a saved config nor at the request's config")
def test_commit_without_a_saved_config_is_not_found(target: Target) -> None:
    """COMMIT: "Returns a `NOT_FOUND` error if no saved config is found, i.e. if no
    `VERIFY_AND_SAVE` action preceded this one.\""""
    c = target.primary()
    assert refused(c.set_pipeline, A.COMMIT, config=False) == grpc.StatusCode.NOT_FOUND


@bmv2_differs("PI's COMMIT looks neither for a saved config nor at the request's config")
def test_commit_with_a_config_is_invalid_argument(target: Target) -> None:
    """COMMIT: "Returns an `INVALID_ARGUMENT` error if a config is provided with this
    message.\""""
    c = target.primary()
    c.set_pipeline(A.VERIFY_AND_SAVE)
    assert refused(c.set_pipeline, A.COMMIT) == grpc.StatusCode.INVALID_ARGUMENT


@bmv2_differs("PI refuses RECONCILE_AND_COMMIT of the running program")
def test_reconcile_and_commit_of_the_running_program_keeps_the_forwarding_state(
    target: Target,
) -> None:
    """RECONCILE_AND_COMMIT: "verifies, saves and realizes the given config, while preserving
    the forwarding state in the target." The same program with a new cookie keeps every
    entry and counter."""
    c = target.primary()
    add_route(c)
    counter = p4r.CounterEntry(counter_id=I["MyIngress.port_counter"])
    counter.index.index = 2
    counter.data.packet_count = 9
    c.write(p4r.Update(type=p4r.Update.MODIFY, entity=p4r.Entity(counter_entry=counter)))
    c.set_pipeline(A.RECONCILE_AND_COMMIT, cookie=99)
    assert routes(c) == 1
    query = p4r.CounterEntry(counter_id=I["MyIngress.port_counter"])
    query.index.index = 2
    [got] = c.read(p4r.Entity(counter_entry=query))
    assert got.counter_entry.data.packet_count == 9
    assert c.get_pipeline().cookie.cookie == 99


@bmv2_differs("PI replays the saved entries into the new program and answers UNKNOWN if that fails")
def test_reconcile_and_commit_of_another_program_is_refused_and_changes_nothing(
    target: Target,
) -> None:
    """RECONCILE_AND_COMMIT: "an `INVALID_ARGUMENT` error is returned if no config is provided,
    or if the existing forwarding state cannot be preserved for the given config by the
    target." This switch preserves it for the running program only."""
    c = target.primary()
    add_route(c)
    code = refused(c.set_pipeline, A.RECONCILE_AND_COMMIT, name="headermux")
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert routes(c) == 1 and c.get_pipeline().cookie.cookie == 42


def test_get_returns_the_config_as_set_by_response_type(target: Target) -> None:
    """GetForwardingPipelineConfig: `ALL` "returns a `ForwardingPipelineConfig` with all fields
    set as stored by the target"; `COOKIE_ONLY`: "reply by setting only the `cookie` field";
    "if a cookie was present in the `SetForwardingPipelineConfig` RPC, the same should be
    returned when reading the config.\""""
    c = target.primary()
    R = p4r.GetForwardingPipelineConfigRequest  # noqa: N806
    full = c.get_pipeline(R.ALL)
    assert full.p4info == p4info() and full.cookie.cookie == 42
    if target.switch is not None:  # a target may not return its device config
        assert full.p4_device_config == device_config()
    cookie = c.get_pipeline(R.COOKIE_ONLY)
    assert cookie.cookie.cookie == 42 and not cookie.HasField("p4info")
    assert not cookie.p4_device_config


@bmv2_differs("PI answers FAILED_PRECONDITION before a config instead of leaving it unset")
def test_get_before_any_config_leaves_the_config_unset(target: Target) -> None:
    """ "If a P4Runtime server is in a state where the forwarding-pipeline config is not known,
    the top-level `config` field will be unset in the response.\""""
    c = target.controller(stream=False)
    response = c.stub.GetForwardingPipelineConfig(
        p4r.GetForwardingPipelineConfigRequest(device_id=1)
    )
    assert not response.HasField("config")
