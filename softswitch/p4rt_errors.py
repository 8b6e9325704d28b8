"""The error status of a Write or Read that failed part-way: a google.rpc.Status whose details
hold a p4.v1.Error per update (or per read request), sized for what a gRPC client accepts.

P4Runtime (section "Error Reporting", under the Write RPC) asks for one p4.Error per update, in
order. The status travels as gRPC trailing metadata (grpc-status-details-bin), and a gRPC client
accepts 8 KiB of metadata by default (grpc-core's soft limit: above it a growing share of calls
fail with RESOURCE_EXHAUSTED, and every call above its 16 KiB hard limit; Java's default is 8 KiB
of the base64 text). One p4.Error per update costs 35 bytes even for an update that succeeded,
so a batch of a hundred failed updates with their messages does not fit. Within `limit` bytes
of serialized status (DETAILS_LIMIT: 5 KiB, 6.8 KiB as base64, beside the status message) the
details are:

1. one p4.Error per update, as the spec says, when that fits;
2. else still one per update, without the error space and with every message cut alike to
   what fits (down to none: the codes alone, for up to about 130 updates);
3. else only the failed updates, in order, as many as fit, each message starting with
   "update #I:" (its index in the batch).

The top-level message always counts the failures and quotes the first; in case 3 it also says
that the details list the failures only.

A client that accepts more says so with the request metadata DETAILS_LIMIT_KEY (its limit in
bytes), and then gets the full list up to that size (opengate.p4rt does).
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from finsy.proto import p4r, rpc_code, rpc_status
from google.protobuf import any_pb2

from softswitch.p4rt_common import int_code

DETAILS_LIMIT = 5120
DETAILS_LIMIT_KEY = "og-error-details-limit"
MESSAGE_CAP = 100
SPACE = "targets.softswitch"

Failure = tuple[grpc.StatusCode, str] | None  # one update's outcome: None when it succeeded


def client_limit(metadata: Sequence[tuple[str, str | bytes]] | None) -> int:
    """The details limit for a call: DETAILS_LIMIT, or more if the client declared more."""
    for key, value in metadata or ():
        if key == DETAILS_LIMIT_KEY:
            text = value.decode() if isinstance(value, bytes) else value
            if text.isdigit():
                return max(DETAILS_LIMIT, int(text))
    return DETAILS_LIMIT


def _packed(code: int, message: str = "", space: bool = True) -> any_pb2.Any:
    detail = p4r.Error(canonical_code=code)
    if code != rpc_code.OK:
        detail.message = message
        if space:
            detail.space = SPACE
    packed = any_pb2.Any()
    packed.Pack(detail)
    return packed


def _cut(text: str, cap: int) -> str:
    if len(text) <= cap:
        return text
    return text[: cap - 3] + "..." if cap > 3 else ""


def _per_update(message: str, outcomes: Sequence[Failure], cap: int | None) -> bytes:
    """The spec's status: a p4.Error per outcome; with `cap`, messages cut to `cap` characters
    and no error space."""
    status = rpc_status.Status(code=rpc_code.UNKNOWN, message=message)
    for outcome in outcomes:
        if outcome is None:
            status.details.append(_packed(rpc_code.OK))
        elif cap is None:
            status.details.append(_packed(int_code(outcome[0]), outcome[1]))
        else:
            status.details.append(_packed(int_code(outcome[0]), _cut(outcome[1], cap), False))
    data: bytes = status.SerializeToString()
    return data


def error_status(
    what: str, item: str, outcomes: Sequence[Failure], limit: int
) -> tuple[bytes, str]:
    """The serialized google.rpc.Status (code UNKNOWN) of a `what` ("Write") whose `outcomes`
    (one per `item`: "update") include a failure, and its message (the gRPC status message
    must be the same)."""
    failed = [(i, f) for i, f in enumerate(outcomes) if f is not None]
    first_index, (_, first_text) = failed[0]
    counted = f"{what} failure: {len(failed)} of {len(outcomes)} {item}s failed"
    message = f"{counted} (first: #{first_index}: {_cut(first_text, MESSAGE_CAP)})"
    data = _per_update(message, outcomes, None)
    if len(data) <= limit:
        return data, message
    # Every message shortened alike to what fits (down to none: the codes alone).
    bare = len(_per_update(message, outcomes, 0))
    cap = min(MESSAGE_CAP, (limit - bare) // len(failed) - 2)
    while cap >= 0:
        data = _per_update(message, outcomes, cap)
        if len(data) <= limit:
            return data, message
        cap = cap // 2 - 1 if cap > 0 else -1  # characters that took more than a byte
    # Only the failed ones, each naming its index, as many as fit.
    listed: list[any_pb2.Any] = []
    size = 0
    budget = limit - 400  # the message below, and the framing of each detail
    for index, (code, text) in failed:
        packed = _packed(int_code(code), f"{item} #{index}: {_cut(text, MESSAGE_CAP)}", False)
        size += packed.ByteSize() + 4
        if size > budget:
            break
        listed.append(packed)
    while True:
        listed_message = (
            f"{message}; the details list the first {len(listed)} failed {item}s only, each "
            f"message naming its index: one per {item} would exceed the metadata a gRPC client "
            "accepts"
        )
        status = rpc_status.Status(code=rpc_code.UNKNOWN, message=listed_message, details=listed)
        data = status.SerializeToString()
        if len(data) <= limit or not listed:
            return data, listed_message
        listed.pop()
