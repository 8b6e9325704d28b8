"""What the P4Runtime service's parts share: its errors, value encoding checks, pipeline, digest
and stream state.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass, field
from typing import Any

import grpc
from finsy.proto import p4d, p4r

from softswitch.engine import Dataplane
from softswitch.idle import IdleTimers
from softswitch.p4info_map import P4InfoMap
from softswitch.program import Program

DETAILS_KEY = "grpc-status-details-bin"
Code = grpc.StatusCode
READ_BATCH = 1000


class P4RTError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def int_code(code: grpc.StatusCode) -> int:
    value: int = code.value[0]
    return value


def to_int(data: bytes) -> int:
    return int.from_bytes(data, "big")


def canonical(value: int) -> bytes:
    """P4Runtime's canonical bytestring: shortest big-endian form, one byte for zero."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def p4data_struct(values: tuple[int, ...]) -> bytes:
    """A digest sample as the encoded P4Data a DigestList carries: a struct of canonical
    bitstrings. The native data plane encodes the same bytes in C (og_dp.c)."""
    members = [p4d.P4Data(bitstring=canonical(v)) for v in values]
    data: bytes = p4d.P4Data(struct=p4d.P4StructLike(members=members)).SerializeToString()
    return data


def varint(value: int) -> bytes:
    """A protocol buffer varint."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(message: Any, name: str, wire_type: int) -> bytes:
    return varint(message.DESCRIPTOR.fields_by_name[name].number << 3 | wire_type)


_VARINT, _LEN = 0, 2
_DIGEST = _key(p4r.StreamMessageResponse, "digest", _LEN)
_DIGEST_ID = _key(p4r.DigestList, "digest_id", _VARINT)
_LIST_ID = _key(p4r.DigestList, "list_id", _VARINT)
_DATA = _key(p4r.DigestList, "data", _LEN)
_TIMESTAMP = _key(p4r.DigestList, "timestamp", _VARINT)


def digest_list_message(
    digest_id: int, list_id: int, timestamp: int, samples: list[bytes]
) -> bytes:
    """An encoded StreamMessageResponse carrying a DigestList of `samples` (each from
    p4data_struct or the native data plane): the bytes protobuf would produce for the same
    message, made without a protobuf object per field (a flood of new flows is a digest each)."""
    parts = [_DIGEST_ID, varint(digest_id)] if digest_id else []
    if list_id:
        parts += [_LIST_ID, varint(list_id)]
    for sample in samples:
        parts += [_DATA, varint(len(sample)), sample]
    if timestamp:
        parts += [_TIMESTAMP, varint(timestamp)]
    body = b"".join(parts)
    return b"".join((_DIGEST, varint(len(body)), body))


def check_width(data: bytes, width: int, what: str) -> int:
    if not data:
        raise P4RTError(Code.INVALID_ARGUMENT, f"{what}: empty bytestring")
    value = to_int(data)
    if value.bit_length() > width:
        raise P4RTError(
            Code.INVALID_ARGUMENT, f"{what}: value 0x{data.hex()} does not fit in {width} bits"
        )
    return value


# ---------------------------------------------------------------------------- configuration
@dataclass(slots=True)
class Pipeline:
    p4info: Any
    device_config: bytes
    cookie: int
    program: Program
    map: P4InfoMap
    dataplane: Dataplane
    idle: IdleTimers = field(default_factory=IdleTimers)
    # the digests the controller configured (DigestEntry), by digest id
    digests: dict[int, DigestState] = field(default_factory=dict)


@dataclass(slots=True)
class DigestConfig:
    max_timeout_ns: int
    max_list_size: int
    ack_timeout_ns: int


@dataclass(slots=True)
class DigestState:
    config: DigestConfig
    # samples waiting for their list, in arrival order (a dict: the duplicate test is one lookup)
    # (each sample is its encoded P4Data: p4data_struct)
    pending: dict[bytes, None] = field(default_factory=dict)
    pending_since: int = 0
    in_flight: dict[int, tuple[int, list[bytes]]] = field(default_factory=dict)
    suppressed: dict[bytes, int] = field(default_factory=dict)  # sample -> expiry ns
    next_list_id: int = 1


# Messages a stream holds for a controller that does not read them, beyond which new digest
# lists and packet-ins are dropped and counted rather than held in memory without bound (a flood
# towards a stalled controller). Idle-timeout notifications are never dropped (an entry is
# reported once per idle period, so the table's size bounds them, and a lost one would leave its
# entry installed for good); nor are the stream's own answers.
STREAM_BACKLOG = 4096
NOTIFICATIONS = ("digest samples", "packet-ins")


@dataclass(slots=True, eq=False)
class Stream:
    election_id: int | None = None
    role: str = ""
    # messages, or messages already encoded (digest lists: digest_list_message)
    out: queue.Queue[p4r.StreamMessageResponse | bytes | None] = field(default_factory=queue.Queue)
    # what the backlog bound dropped: digest samples, packet-ins
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(NOTIFICATIONS, 0))

    def notify(self, kind: str, message: p4r.StreamMessageResponse | bytes, count: int = 1) -> bool:
        """Queue a notification of `kind` (NOTIFICATIONS) unless the backlog is full; a dropped
        one counts `count` (a digest list: its samples)."""
        if self.out.qsize() >= STREAM_BACKLOG:
            self.dropped[kind] += count
            return False
        self.out.put(message)
        return True
