"""Value converters of the policy file: each takes a YAML value and returns the typed value or
raises ValueError with what was expected (the loader adds the file, line and field)."""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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


def network6(value: Any) -> ipaddress.IPv6Network:
    text = as_str(value)
    try:
        return ipaddress.IPv6Network(text, strict=True)
    except ValueError as error:
        if ":" not in text:
            raise ValueError(f"{text} is not an IPv6 prefix") from None
        raise ValueError(f"not an IPv6 prefix (host bits must be zero): {error}") from None


def network_any(value: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """An IPv4 or IPv6 prefix whose host bits are zero (a route's destination)."""
    text = as_str(value)
    try:
        return ipaddress.ip_network(text, strict=True)
    except ValueError as error:
        if ":" in text:
            raise ValueError(f"not an IPv6 prefix (host bits must be zero): {error}") from None
        raise ValueError(f"not an IPv4 prefix (host bits must be zero): {error}") from None


def address_any(value: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An IPv4 or IPv6 address."""
    try:
        return ipaddress.ip_address(as_str(value))
    except ValueError:
        raise ValueError(f"not an IPv4 or IPv6 address: {value!r}") from None


def interface_any(value: Any) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    """An IPv4 or IPv6 address with its prefix length (an IPv6 one global or unique local:
    the link-local address comes from the port's MAC)."""
    try:
        iface = ipaddress.ip_interface(as_str(value))
    except ValueError:
        raise ValueError(f"not an IPv4 or IPv6 address/prefix: {value!r}") from None
    if isinstance(iface, ipaddress.IPv6Interface):
        problem = unicast6_problem(iface.ip)
        if problem is not None:
            raise ValueError(f"{value} is {problem}")
    return iface


def unicast6_problem(address: ipaddress.IPv6Address) -> str | None:
    """Why an IPv6 address cannot be a host's (or the gateway's) routable address, or None."""
    if address.is_multicast:
        return "a multicast address"
    if address.is_unspecified or address.is_loopback:
        return "not a host's address"
    if address.is_link_local:
        return "link-local (each port's comes from its MAC)"
    if int(address) >> 32 == 0:
        return "an IPv4-compatible address (::/96, deprecated by RFC 4291)"
    return None


def icmp_types(value: Any) -> tuple[int, ...] | None:
    """ICMPv6 types: a number 0..255 or a list of them; None for any."""
    items = value if isinstance(value, list) else [value]
    out: list[int] = []
    for item in items:
        if item == "any":
            return None
        number = as_int(item)
        if not 0 <= number <= 255:
            raise ValueError(f"ICMPv6 type {number} is not 0..255")
        if number not in out:
            out.append(number)
    if not out:
        raise ValueError("an empty list matches nothing; leave the field out for any")
    return tuple(out)


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


# Protocol names of one family: ICMP is IPv4's, ICMPv6 IPv6's (a number is either's).
IPV4_ONLY_PROTOCOLS = frozenset({"icmp"})
IPV6_PROTOCOLS = {"icmpv6": pc.IP_PROTO_ICMPV6, "ipv6-icmp": pc.IP_PROTO_ICMPV6}


@dataclass(frozen=True, slots=True)
class ProtocolItem:
    """One protocol of an ACL rule, and the family its name limits it to (None: both)."""

    match: ProtoMatch
    family: int | None


def protocols(value: Any) -> tuple[ProtoMatch, ...] | None:
    items = protocol_items(value)
    return None if items is None else tuple(i.match for i in items)


def protocol_items(value: Any) -> tuple[ProtocolItem, ...] | None:
    """An ACL rule's `proto`: names (icmp IPv4's, icmpv6 and ipv6-icmp IPv6's) or numbers,
    one or a list; None for any."""
    items = value if isinstance(value, list) else [value]
    out: list[ProtocolItem] = []
    for item in items:
        if item in ("any", "ip"):
            return None
        if isinstance(item, int) and not isinstance(item, bool) and 0 <= item <= 255:
            out.append(ProtocolItem(ProtoMatch(item), None))
        elif isinstance(item, str) and item.lower() in PROTOCOL_NUMBERS:
            name = item.lower()
            family = 4 if name in IPV4_ONLY_PROTOCOLS else None
            out.append(ProtocolItem(ProtoMatch(PROTOCOL_NUMBERS[name]), family))
        elif isinstance(item, str) and item.lower() in IPV6_PROTOCOLS:
            out.append(ProtocolItem(ProtoMatch(IPV6_PROTOCOLS[item.lower()]), 6))
        else:
            known = ", ".join(sorted([*PROTOCOL_NUMBERS, *IPV6_PROTOCOLS]))
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
