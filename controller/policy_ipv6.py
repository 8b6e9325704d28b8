"""The policy's IPv6 parts that need more than a field's conversion: a port's router
advertisements (RFC 4861 section 6.2.1's bounds) and the IPv6 translations, NPTv6 (RFC 6296)
and NAT64 (RFC 6146), each mistake reported with its file, line and field."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from controller import policy_values as pv
from controller.policy_model import (
    NAT64_WELL_KNOWN,
    Nat64Spec,
    Nptv6Mapping,
    PortSpec,
    RaSettings,
)
from opengate import nptv6
from opengate import p4constants as pc
from opengate.yamlconf import Reader, as_bool, as_int, as_ipv4


def router_advertisements(
    item: Reader, role: str, addresses6: Sequence[ipaddress.IPv6Interface]
) -> RaSettings | None:
    """ports[].router_advertisements: on an inside port with IPv6 addresses, RFC 4861
    section 6.2.1's bounds (interval 4..1800 s, lifetime 0 or interval..9000 s)."""
    key = "router_advertisements"
    if not item.has(key):
        return None
    if not isinstance(item.data.get(key), dict):
        raise item.error(key, "expected a mapping (`{}` for the defaults)")
    sub = item.sub(key)
    interval = sub.get("interval", pv.positive_float, 600.0)
    if not 4 <= interval <= 1800:
        raise sub.error("interval", f"{interval:g} s is not 4..1800 (RFC 4861 6.2.1)")
    lifetime = sub.get("lifetime", as_int, 1800)
    if lifetime != 0 and not interval <= lifetime <= 9000:
        raise sub.error(
            "lifetime", f"{lifetime} s is neither 0 nor {interval:g}..9000 (RFC 4861 6.2.1)"
        )
    autonomous = sub.get("autonomous", as_bool, False)
    mtu = pv.opt(sub, "mtu", as_int)
    if mtu is not None and not 1280 <= mtu <= 65535:
        raise sub.error("mtu", f"{mtu} is not 1280..65535 (IPv6's minimum MTU is 1280)")
    sub.reject_unknown()
    if role != "inside":
        raise item.error(key, "router advertisements go out of inside ports only")
    if not addresses6:
        raise item.error(key, "the port has no IPv6 address whose prefix to advertise")
    if autonomous:
        odd = [str(a.network) for a in addresses6 if a.network.prefixlen != 64]
        if odd:
            raise sub.error(
                "autonomous", f"{odd[0]} is not a /64: SLAAC forms addresses in /64s only"
            )
    return RaSettings(interval, lifetime, autonomous, mtu)


def nptv6_mappings_of(section: Reader, ports: Sequence[PortSpec]) -> tuple[Nptv6Mapping, ...]:
    """nat.nptv6: each mapping on an outside port, two IPv6 prefixes of one length (/48 or
    shorter, opengate.nptv6), no prefix of a port overlapping another of its mappings', no
    outside prefix holding one of the gateway's own addresses."""
    out: list[Nptv6Mapping] = []
    own = {a.ip for p in ports for a in p.addresses6}
    for item in section.items("nptv6", required=False):
        port = item.get("port", as_int)
        spec = next((p for p in ports if p.number == port), None)
        if spec is None or spec.role != pc.ROLE_OUTSIDE:
            raise item.error("port", f"port {port} is not an outside port")
        inside = item.get("inside", pv.network6)
        outside = item.get("outside", pv.network6)
        if inside.prefixlen != outside.prefixlen or inside.prefixlen > nptv6.MAX_PREFIX:
            field_name = "outside" if inside.prefixlen != outside.prefixlen else "inside"
            try:
                nptv6.check_pair(inside, outside)
            except ValueError as error:
                raise item.error(field_name, str(error)) from None
        if inside.prefixlen == 0:
            raise item.error("inside", "::/0 would map every address")
        if inside == outside:
            raise item.error("outside", f"{outside} is the inside prefix: it maps onto another")
        for other in out:
            if other.port != port:
                continue
            for field_name, mine, theirs in (
                ("inside", inside, other.inside),
                ("outside", outside, other.outside),
            ):
                if mine.overlaps(theirs):
                    raise item.error(
                        field_name,
                        f"{mine} overlaps {theirs} of the mapping on line {other.line}",
                    )
        held = sorted(a for a in own if a in outside)
        if held:
            raise item.error("outside", f"{outside} holds the gateway's own address {held[0]}")
        out.append(Nptv6Mapping(port, inside, outside, item.line))
        item.reject_unknown()
    return tuple(out)


def nat64_of(
    section: Reader, ports: Sequence[PortSpec], npt: Sequence[Nptv6Mapping]
) -> tuple[Nat64Spec, ...]:
    """nat.nat64: each on an outside port, a /96 prefix (RFC 6052's well-known one by
    default) that overlaps no other, no network or address of a port and no NPTv6 prefix,
    and an IPv4 address to leave from (the port's first by default)."""
    out: list[Nat64Spec] = []
    for item in section.items("nat64", required=False):
        port = item.get("port", as_int)
        spec = next((p for p in ports if p.number == port), None)
        if spec is None or spec.role != pc.ROLE_OUTSIDE:
            raise item.error("port", f"port {port} is not an outside port")
        prefix = pv.opt(item, "prefix", pv.network6)
        if prefix is None:
            prefix = NAT64_WELL_KNOWN
        if prefix.prefixlen != 96:
            raise item.error(
                "prefix",
                f"{prefix} is a /{prefix.prefixlen}: NAT64 takes a /96 here (the IPv4 "
                "address in the last 32 bits, RFC 6052)",
            )
        address = pv.opt(item, "address", as_ipv4)
        if address is None:
            if not spec.addresses:
                raise item.error("address", f"port {port} has no IPv4 address to use")
            address = spec.addresses[0].ip
        for other in out:
            if other.prefix.overlaps(prefix):
                raise item.error("prefix", f"{prefix} overlaps {other.prefix} of line {other.line}")
        for p in ports:
            for iface in p.addresses6:
                if iface.network.overlaps(prefix):
                    raise item.error(
                        "prefix", f"{prefix} overlaps port {p.number}'s {iface.network}"
                    )
        for mapping in npt:
            if mapping.inside.overlaps(prefix) or mapping.outside.overlaps(prefix):
                raise item.error(
                    "prefix", f"{prefix} overlaps the NPTv6 mapping on line {mapping.line}"
                )
        out.append(Nat64Spec(port, prefix, address, item.line))
        item.reject_unknown()
    return tuple(out)
