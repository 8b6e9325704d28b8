"""What the P4Runtime service's parts share: its errors, value encoding checks, pipeline, digest
and stream state.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass, field
from typing import Any

import grpc
from finsy.proto import p4r

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


@dataclass(slots=True)
class DigestConfig:
    max_timeout_ns: int
    max_list_size: int
    ack_timeout_ns: int


@dataclass(slots=True)
class DigestState:
    config: DigestConfig
    # samples waiting for their list, in arrival order (a dict: the duplicate test is one lookup)
    pending: dict[tuple[int, ...], None] = field(default_factory=dict)
    pending_since: int = 0
    in_flight: dict[int, tuple[int, list[tuple[int, ...]]]] = field(default_factory=dict)
    suppressed: dict[tuple[int, ...], int] = field(default_factory=dict)  # sample -> expiry ns
    next_list_id: int = 1


@dataclass(slots=True, eq=False)
class Stream:
    election_id: int | None = None
    role: str = ""
    out: queue.Queue[p4r.StreamMessageResponse | None] = field(default_factory=queue.Queue)
