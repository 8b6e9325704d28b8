"""Match values of the five classified header fields, and the packets they classify.

A rule field is a tuple of alternatives (a union): prefixes for the addresses, inclusive ranges
for the ports, value/mask pairs for the protocol. An empty tuple matches nothing, which is how a
negation of "any" or an IPv6-only address list ends up. The helpers here normalise such unions
(address and port sets as sorted disjoint intervals, turned back into minimal prefixes or ranges)
so that negations and lists in Snort headers and policy files can be expressed exactly.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

ADDR_BITS = 32
ADDR_MAX = (1 << ADDR_BITS) - 1
PORT_MAX = 0xFFFF
PROTO_MAX = 0xFF


def prefix_mask(length: int) -> int:
    return (ADDR_MAX << (ADDR_BITS - length)) & ADDR_MAX


@dataclass(frozen=True, slots=True, order=True)
class Prefix:
    """An IPv4 prefix; `value` has no bits set beyond `length`."""

    value: int
    length: int

    def __post_init__(self) -> None:
        if not 0 <= self.length <= ADDR_BITS:
            raise ValueError(f"prefix length {self.length} outside 0..32")
        if self.value & ~prefix_mask(self.length) & ADDR_MAX or not 0 <= self.value <= ADDR_MAX:
            raise ValueError(f"prefix value {self.value:#x} has bits beyond /{self.length}")

    @classmethod
    def masked(cls, value: int, length: int) -> Prefix:
        return cls(value & prefix_mask(length), length)

    @property
    def first(self) -> int:
        return self.value

    @property
    def last(self) -> int:
        return self.value | (ADDR_MAX >> self.length if self.length < ADDR_BITS else 0)

    def contains(self, addr: int) -> bool:
        return (addr & prefix_mask(self.length)) == self.value

    def covers(self, other: Prefix) -> bool:
        """True if every address of `other` is in this prefix."""
        return self.length <= other.length and self.contains(other.value)

    def __str__(self) -> str:
        return f"{ipaddress.IPv4Address(self.value)}/{self.length}"


@dataclass(frozen=True, slots=True, order=True)
class PortRange:
    """An inclusive range of 16-bit port numbers."""

    low: int
    high: int

    def __post_init__(self) -> None:
        if not 0 <= self.low <= self.high <= PORT_MAX:
            raise ValueError(f"port range {self.low}:{self.high} is not within 0..65535 in order")

    def contains(self, port: int) -> bool:
        return self.low <= port <= self.high

    def __str__(self) -> str:
        return str(self.low) if self.low == self.high else f"{self.low}:{self.high}"


@dataclass(frozen=True, slots=True, order=True)
class ProtoMatch:
    """An IP protocol value/mask (ternary); mask 0 is any protocol."""

    value: int
    mask: int = PROTO_MAX

    def __post_init__(self) -> None:
        if not (0 <= self.mask <= PROTO_MAX and 0 <= self.value <= PROTO_MAX):
            raise ValueError(f"protocol {self.value:#x}/{self.mask:#x} is not 8-bit")
        if self.value & ~self.mask:
            raise ValueError(f"protocol value {self.value:#x} has bits outside mask {self.mask:#x}")

    def contains(self, proto: int) -> bool:
        return (proto & self.mask) == self.value

    def __str__(self) -> str:
        if self.mask == 0:
            return "any"
        if self.mask == PROTO_MAX:
            return str(self.value)
        return f"{self.value:#04x}/{self.mask:#04x}"


ANY_ADDR: tuple[Prefix, ...] = (Prefix(0, 0),)
ANY_PORT: tuple[PortRange, ...] = (PortRange(0, PORT_MAX),)
ANY_PROTO: tuple[ProtoMatch, ...] = (ProtoMatch(0, 0),)


@dataclass(frozen=True, slots=True)
class Packet:
    """The five header fields classification looks at (ports as the data plane sets them)."""

    src: int
    dst: int
    sport: int
    dport: int
    proto: int

    @classmethod
    def parse(cls, text: str) -> Packet:
        """`SRC_IP DST_IP SPORT DPORT PROTO` (addresses dotted or integers, numbers in any base)."""
        parts = text.split()
        if len(parts) != 5:
            raise ValueError(f"expected 5 fields SRC_IP DST_IP SPORT DPORT PROTO, got {len(parts)}")
        src, dst = (_parse_addr(p) for p in parts[:2])
        sport, dport, proto = (int(p, 0) for p in parts[2:])
        if not (0 <= sport <= PORT_MAX and 0 <= dport <= PORT_MAX and 0 <= proto <= PROTO_MAX):
            raise ValueError("port or protocol out of range")
        return cls(src, dst, sport, dport, proto)

    def reversed(self) -> Packet:
        return Packet(self.dst, self.src, self.dport, self.sport, self.proto)

    def __str__(self) -> str:
        return (
            f"{ipaddress.IPv4Address(self.src)} {ipaddress.IPv4Address(self.dst)} "
            f"{self.sport} {self.dport} {self.proto}"
        )


def _parse_addr(text: str) -> int:
    if "." in text:
        return int(ipaddress.IPv4Address(text))
    value = int(text, 0)
    if not 0 <= value <= ADDR_MAX:
        raise ValueError(f"address {text} out of range")
    return value


def parse_prefix(text: str) -> Prefix:
    """`a.b.c.d/len` or `a.b.c.d` (a /32). Host bits beyond the length are masked off, as
    ClassBench and Snort do. Raises ValueError with a readable message."""
    addr_text, slash, len_text = text.strip().partition("/")
    try:
        addr = int(ipaddress.IPv4Address(addr_text))
    except ipaddress.AddressValueError as exc:
        raise ValueError(f"malformed IPv4 prefix {text!r}: {exc}") from None
    if not slash:
        return Prefix(addr, ADDR_BITS)
    if not len_text.isdigit() or not 0 <= int(len_text) <= ADDR_BITS:
        raise ValueError(f"malformed IPv4 prefix {text!r}: length must be 0..32")
    return Prefix.masked(addr, int(len_text))


# -- interval sets -----------------------------------------------------------------------------
# A set of integers as a sorted tuple of disjoint, non-adjacent inclusive (low, high) intervals.

Intervals = tuple[tuple[int, int], ...]


def normalize(intervals: Iterable[tuple[int, int]]) -> Intervals:
    out: list[tuple[int, int]] = []
    for low, high in sorted(intervals):
        if out and low <= out[-1][1] + 1:
            if high > out[-1][1]:
                out[-1] = (out[-1][0], high)
        else:
            out.append((low, high))
    return tuple(out)


def complement(intervals: Intervals, maximum: int) -> Intervals:
    out: list[tuple[int, int]] = []
    nxt = 0
    for low, high in intervals:
        if low > nxt:
            out.append((nxt, low - 1))
        nxt = high + 1
    if nxt <= maximum:
        out.append((nxt, maximum))
    return tuple(out)


def subtract(base: Intervals, minus: Intervals, maximum: int) -> Intervals:
    return intersect(base, complement(minus, maximum))


def intersect(a: Intervals, b: Intervals) -> Intervals:
    out: list[tuple[int, int]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        low = max(a[i][0], b[j][0])
        high = min(a[i][1], b[j][1])
        if low <= high:
            out.append((low, high))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def prefixes_to_intervals(prefixes: Iterable[Prefix]) -> Intervals:
    return normalize((p.first, p.last) for p in prefixes)


def intervals_to_prefixes(intervals: Intervals) -> tuple[Prefix, ...]:
    """The minimal list of prefixes covering exactly these addresses."""
    out: list[Prefix] = []
    for low, high in intervals:
        cur = low
        while cur <= high:
            # Largest aligned block starting at cur that stays within high.
            size = cur & -cur if cur else 1 << ADDR_BITS
            while cur + size - 1 > high:
                size >>= 1
            out.append(Prefix(cur, ADDR_BITS - size.bit_length() + 1))
            cur += size
    return tuple(out)


def ranges_to_intervals(ranges: Iterable[PortRange]) -> Intervals:
    return normalize((r.low, r.high) for r in ranges)


def intervals_to_ranges(intervals: Intervals) -> tuple[PortRange, ...]:
    return tuple(PortRange(low, high) for low, high in intervals)


def normalize_prefixes(prefixes: Sequence[Prefix]) -> tuple[Prefix, ...]:
    """Minimal equivalent prefix list (drops prefixes covered by others, merges siblings)."""
    return intervals_to_prefixes(prefixes_to_intervals(prefixes))


def normalize_ranges(ranges: Sequence[PortRange]) -> tuple[PortRange, ...]:
    return intervals_to_ranges(ranges_to_intervals(ranges))


def is_any_addr(prefixes: Sequence[Prefix]) -> bool:
    return any(p.length == 0 for p in prefixes)


def is_any_port(ranges: Sequence[PortRange]) -> bool:
    return ranges_to_intervals(ranges) == ((0, PORT_MAX),)


def proto_values(protos: Sequence[ProtoMatch]) -> frozenset[int]:
    return frozenset(v for v in range(PROTO_MAX + 1) if any(p.contains(v) for p in protos))


def is_any_proto(protos: Sequence[ProtoMatch]) -> bool:
    return any(p.mask == 0 for p in protos) or len(proto_values(protos)) == PROTO_MAX + 1
