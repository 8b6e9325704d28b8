"""Value converters of the policy file: each takes a YAML value and returns the typed value or
raises ValueError with what was expected (the loader adds the file, line and field)."""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from controller.hsm.rules import (
    PROTOCOL_NUMBERS,
)
from opengate import p4constants as pc
from opengate.fields import PortRange, Prefix, ProtoMatch
from opengate.yamlconf import (
    Reader,
    as_int,
    as_str,
)

T = TypeVar("T")

# one port per cell of the program's flow_nat register (controller.policy.NatSpec)
NAT_DP_PORTS = pc.REGISTER_SIZES[pc.R_FLOW_NAT]


def opt(reader: Reader, key: str, convert: Callable[[Any], T]) -> T | None:
    """An optional field: None when absent."""
    return reader.get(key, convert) if reader.has(key) else None


def member_id(name: str) -> int:
    """A stable action-profile member id per SPM name (so that policy versions agree)."""
    return 1 + int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big") % 0x7FFFFFFE


def list_of(convert: Callable[[Any], Any]) -> Callable[[Any], list[Any]]:
    def inner(value: Any) -> list[Any]:
        if not isinstance(value, list):
            value = [value]
        return [convert(v) for v in value]

    return inner


def network(value: Any) -> ipaddress.IPv4Network:
    try:
        return ipaddress.IPv4Network(as_str(value), strict=True)
    except ValueError as error:
        raise ValueError(f"not an IPv4 prefix (host bits must be zero): {error}") from None


def positive(value: Any) -> int:
    number = as_int(value)
    if number <= 0:
        raise ValueError(f"expected a positive integer, got {number}")
    return number


def positive_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"expected a positive number of seconds, got {value!r}")
    return float(value)


def non_negative_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"expected a number of seconds >= 0, got {value!r}")
    return float(value)


def port_number(value: Any) -> int:
    number = as_int(value)
    if not 1 <= number <= 65535:
        raise ValueError(f"port {number} is not 1..65535")
    return number


def dp_block(value: Any) -> int | None:
    """data_plane_ports: the first port of the NPM's block of NAT_DP_PORTS, or off."""
    if value is False or value == "off":
        return None
    base = as_int(value)
    if not 1 <= base <= 65536 - NAT_DP_PORTS:
        raise ValueError(
            f"the block of {NAT_DP_PORTS} ports from {base} does not fit in 1..65535 "
            f"(at most {65536 - NAT_DP_PORTS}; or 'off')"
        )
    return base


def port_range(value: Any) -> tuple[int, int]:
    if isinstance(value, list) and len(value) == 2:
        low, high = as_int(value[0]), as_int(value[1])
    elif isinstance(value, str) and "-" in value:
        left, _, right = value.partition("-")
        if not (left.strip().isdigit() and right.strip().isdigit()):
            raise ValueError(f"expected LOW-HIGH, got {value!r}")
        low, high = int(left), int(right)
    else:
        raise ValueError(f"expected LOW-HIGH or [LOW, HIGH], got {value!r}")
    if not 1 <= low <= high <= 65535:
        raise ValueError(f"port range {low}-{high} is not within 1..65535 in order")
    return low, high


def ports(value: Any) -> tuple[PortRange, ...] | None:
    items = value if isinstance(value, list) else [value]
    out: list[PortRange] = []
    for item in items:
        if item == "any":
            return None
        if isinstance(item, int) and not isinstance(item, bool):
            low = high = item
        elif isinstance(item, str):
            sep = "-" if "-" in item else ":"
            left, _, right = item.partition(sep)
            if not left.strip().isdigit() or (right and not right.strip().isdigit()):
                raise ValueError(f"expected a port, LOW-HIGH or any, got {item!r}")
            low = int(left)
            high = int(right) if right else low
        else:
            raise ValueError(f"expected a port, LOW-HIGH or any, got {item!r}")
        if not 0 <= low <= high <= 65535:
            raise ValueError(f"port range {low}-{high} is not within 0..65535 in order")
        out.append(PortRange(low, high))
    if not out:
        raise ValueError("an empty list matches nothing; leave the field out for any")
    return tuple(out)


def protocols(value: Any) -> tuple[ProtoMatch, ...] | None:
    items = value if isinstance(value, list) else [value]
    out: list[ProtoMatch] = []
    for item in items:
        if item in ("any", "ip"):
            return None
        if isinstance(item, int) and not isinstance(item, bool) and 0 <= item <= 255:
            out.append(ProtoMatch(item))
        elif isinstance(item, str) and item.lower() in PROTOCOL_NUMBERS:
            out.append(ProtoMatch(PROTOCOL_NUMBERS[item.lower()]))
        else:
            known = ", ".join(sorted(PROTOCOL_NUMBERS))
            raise ValueError(f"unknown protocol {item!r} (known: any, {known}, or 0..255)")
    if not out:
        raise ValueError("an empty list matches nothing; leave the field out for any")
    return tuple(out)


def to_prefixes(nets: Sequence[ipaddress.IPv4Network] | None) -> tuple[Prefix, ...]:
    if nets is None:
        return (Prefix(0, 0),)
    return tuple(Prefix(int(n.network_address), n.prefixlen) for n in nets)


def str_or_list(value: Any) -> list[str]:
    items = value if isinstance(value, list) else [value]
    return [as_str(str(v)) for v in items]


def snort_value(items: list[str]) -> str:
    return items[0] if len(items) == 1 else "[" + ",".join(items) + "]"
