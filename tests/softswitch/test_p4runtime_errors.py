"""The error status of a partly failed Write or Read (softswitch/p4rt_errors.py): P4Runtime's
one p4.Error per update while it fits in what a default gRPC client accepts, and then the
shorter forms, never more than DETAILS_LIMIT bytes."""

from __future__ import annotations

import grpc
import pytest
from finsy.proto import p4r, rpc_code, rpc_status

from softswitch.p4rt_errors import DETAILS_LIMIT, DETAILS_LIMIT_KEY, client_limit, error_status

FULL = (grpc.StatusCode.RESOURCE_EXHAUSTED, "table 'MyIngress.acl' is full (256 entries)")


def decode(data: bytes) -> tuple[rpc_status.Status, list[p4r.Error]]:
    status = rpc_status.Status()
    status.ParseFromString(data)
    errors = []
    for packed in status.details:
        error = p4r.Error()
        assert packed.Unpack(error)
        errors.append(error)
    return status, errors


def test_a_small_batch_gets_one_error_per_update_with_its_message() -> None:
    outcomes = [None, FULL, None]
    data, message = error_status("Write", "update", outcomes, DETAILS_LIMIT)
    status, errors = decode(data)
    assert (status.code, status.message) == (rpc_code.UNKNOWN, message)
    assert message.startswith("Write failure: 1 of 3 updates failed (first: #1: table")
    assert errors == [
        p4r.Error(canonical_code=rpc_code.OK),
        p4r.Error(
            canonical_code=rpc_code.RESOURCE_EXHAUSTED, message=FULL[1], space=errors[1].space
        ),
        p4r.Error(canonical_code=rpc_code.OK),
    ]


def test_a_hundred_failures_keep_one_error_per_update_with_shorter_messages() -> None:
    data, _ = error_status("Write", "update", [FULL] * 100, DETAILS_LIMIT)
    assert len(data) <= DETAILS_LIMIT
    _, errors = decode(data)
    assert [e.canonical_code for e in errors] == [rpc_code.RESOURCE_EXHAUSTED] * 100
    assert all(FULL[1].startswith(e.message.removesuffix("...")) for e in errors)


@pytest.mark.parametrize("count", [300, 4096, 20_000])
def test_a_large_batch_lists_its_first_failures_naming_their_index(count: int) -> None:
    outcomes = [None if n % 2 else FULL for n in range(count)]
    data, message = error_status("Write", "update", outcomes, DETAILS_LIMIT)
    assert len(data) <= DETAILS_LIMIT
    _, errors = decode(data)
    assert errors and all(e.canonical_code == rpc_code.RESOURCE_EXHAUSTED for e in errors)
    assert [e.message.split(":")[0] for e in errors] == [
        f"update #{2 * n}" for n in range(len(errors))
    ]
    assert f"{(count + 1) // 2} of {count} updates failed" in message
    assert f"the details list the first {len(errors)} failed updates only" in message


def test_messages_of_many_bytes_per_character_still_fit() -> None:
    wide = (grpc.StatusCode.INVALID_ARGUMENT, "é" * 300)
    for count in (1, 60, 200):
        data, _ = error_status("Read", "request", [wide] * count, DETAILS_LIMIT)
        assert len(data) <= DETAILS_LIMIT
        assert decode(data)[1]


def test_a_client_may_declare_a_larger_limit_never_a_smaller_one() -> None:
    assert client_limit(None) == DETAILS_LIMIT
    assert client_limit(((DETAILS_LIMIT_KEY, "1048576"),)) == 1 << 20
    assert client_limit(((DETAILS_LIMIT_KEY, "10"),)) == DETAILS_LIMIT
    assert client_limit(((DETAILS_LIMIT_KEY, "lots"),)) == DETAILS_LIMIT
