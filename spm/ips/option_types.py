"""What the built-in engine compiles a Snort 3 rule's options into (contents, pcres, byte tests,
flow and flowbits options, the compiled rule), the buffers they read, and the shape of the raw
rules it takes (`opengate.snort.rules.RawRule` fits). `spm.ips.options` does the compiling.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from spm.ips.base import RuleInfo
from spm.packet import Packet

# --- what the engine needs from the raw rules (opengate.snort.rules.RawRule fits) ---------------


class RawOptionLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> str | None: ...


class RawRuleLike(Protocol):
    @property
    def path(self) -> str: ...
    @property
    def line(self) -> int: ...
    @property
    def action(self) -> str: ...
    @property
    def proto(self) -> str | None: ...
    @property
    def options(self) -> Sequence[RawOptionLike]: ...


class UnsupportedOptionError(Exception):
    """The rule uses something the engine cannot evaluate."""

    def __init__(self, option: str, reason: str) -> None:
        self.option = option
        self.reason = reason
        super().__init__(f"{option}: {reason}")


# --- compiled options ---------------------------------------------------------------------------

PKT_DATA = "pkt_data"
HTTP_REQUEST_BUFFERS = frozenset(
    {"http_uri", "http_raw_uri", "http_method", "http_client_body", "http_raw_request"}
)
HTTP_RESPONSE_BUFFERS = frozenset({"http_stat_code", "http_stat_msg", "http_raw_status"})
HTTP_ANY_BUFFERS = frozenset(
    {
        "http_header",
        "http_raw_header",
        "http_cookie",
        "http_raw_cookie",
        "http_version",
        "http_raw_body",
    }
)
BUFFERS = (
    frozenset({PKT_DATA, "raw_data", "file_data"})
    | HTTP_REQUEST_BUFFERS
    | HTTP_RESPONSE_BUFFERS
    | HTTP_ANY_BUFFERS
)
FIELD_BUFFERS = frozenset({"http_header", "http_raw_header"})


@dataclass(frozen=True, slots=True)
class Content:
    pattern: bytes
    buffer: str
    field: str | None = None
    negated: bool = False
    nocase: bool = False
    offset: int | None = None
    depth: int | None = None
    distance: int | None = None
    within: int | None = None
    fast_pattern: bool = False

    @property
    def relative(self) -> bool:
        return self.distance is not None or self.within is not None


@dataclass(frozen=True, slots=True)
class Pcre:
    regex: re.Pattern[bytes]
    buffer: str
    field: str | None = None
    negated: bool = False
    relative: bool = False
    anchored: bool = False  # flag A: the match must start where the search starts
    source: str = ""


@dataclass(frozen=True, slots=True)
class ByteTest:
    buffer: str
    field: str | None
    count: int
    op: str  # < > <= >= = & ^
    negated: bool
    value: int
    offset: int
    relative: bool
    big_endian: bool
    string_base: int  # 0: binary, else 8/10/16
    bitmask: int | None


@dataclass(frozen=True, slots=True)
class ByteJump:
    buffer: str
    field: str | None
    count: int
    offset: int
    relative: bool
    big_endian: bool
    string_base: int
    multiplier: int
    align: bool
    from_beginning: bool
    from_end: bool
    post_offset: int
    bitmask: int | None


@dataclass(frozen=True, slots=True)
class IsDataAt:
    buffer: str
    field: str | None
    size: int
    relative: bool
    negated: bool


@dataclass(frozen=True, slots=True)
class BufferLen:
    buffer: str
    field: str | None
    check: Callable[[int], bool]
    relative: bool


PayloadOption = Content | Pcre | ByteTest | ByteJump | IsDataAt | BufferLen


@dataclass(frozen=True, slots=True)
class Flowbit:
    op: str  # set setx unset toggle isset isnotset reset noalert
    names: tuple[str, ...] = ()
    all_of: bool = True  # for isset/isnotset with a|b (any) or a&b (all)
    group: str | None = None


@dataclass(frozen=True, slots=True)
class DetectionFilter:
    by_src: bool
    count: int
    seconds: float


@dataclass(frozen=True, slots=True)
class FlowOpt:
    to_server: bool | None = None
    established: bool | None = None
    stream: str | None = None  # "only" | "no" | None


@dataclass(slots=True)
class CompiledRule:
    info: RuleInfo
    proto: str  # tcp | udp | icmp | ip | or a service name for service rules (http, ...)
    path: str
    line: int
    services: frozenset[str] = frozenset()
    flow: FlowOpt = FlowOpt()
    packet_checks: tuple[Callable[[Packet], bool], ...] = ()
    payload: tuple[PayloadOption, ...] = ()
    flowbits: tuple[Flowbit, ...] = ()
    detection_filter: DetectionFilter | None = None
    fast_pattern: Content | None = None
    buffers: frozenset[str] = frozenset()
    header: object | None = None  # set by the engine: the compiled header match
    index: int = -1

    @property
    def noalert(self) -> bool:
        return any(fb.op == "noalert" for fb in self.flowbits)
