"""Rule headers (addresses, ports, direction) as the built-in engine evaluates them per packet.

The semantics are the project's one implementation, `opengate.snort.header` (shared with
the HSM compiler, so the NPM's classification and the SPM's IPS agree): variables with Snort 3's
defaults, lists, negation, CIDR, port ranges, `->` and `<>`; `ip` and `icmp` rules ignore ports.
This module only turns its interval sets into per-packet membership tests.

Both address families: each address expression is evaluated once for IPv4 and once for IPv6
(`address_intervals`), each family's items against its own packets, so a list may mix them
(`[10.0.0.0/8,2001:db8::/32]`, a HOME_NET of both) and a negation excludes only what it names
(`!10.0.0.0/8` matches every IPv6 address, `[!2001:db8::/32]` every IPv4 one). An expression of
one family's items only matches no packet of the other.

Not supported: IPv4-mapped IPv6 addresses (`::ffff:10.0.0.1`) are IPv6 here, not the IPv4
address they map (Snort compares them as the same address).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass

from opengate.errors import ConfigError
from opengate.fields import ADDR_MAX, Intervals
from opengate.snort.header import ADDR6_MAX, SnortVariables, address_intervals, ports
from spm.ips.option_types import UnsupportedOptionError

_FULL_PORTS: Intervals = ((0, 0xFFFF),)


@dataclass(frozen=True, slots=True)
class IntervalSet:
    """Sorted disjoint inclusive intervals; `everything` short-cuts `any`."""

    starts: tuple[int, ...]
    ends: tuple[int, ...]
    everything: bool = False

    @classmethod
    def of(cls, intervals: Intervals, everything: bool = False) -> IntervalSet:
        ordered = sorted(intervals)
        return cls(tuple(a for a, _ in ordered), tuple(b for _, b in ordered), everything)

    def __contains__(self, x: int) -> bool:
        if self.everything:
            return True
        i = bisect.bisect_right(self.starts, x) - 1
        return i >= 0 and x <= self.ends[i]


ANY = IntervalSet((), (), True)


@dataclass(frozen=True, slots=True)
class AddressSet:
    """An address expression: its IPv4 and its IPv6 addresses, as integers."""

    v4: IntervalSet
    v6: IntervalSet

    @property
    def everything(self) -> bool:
        return self.v4.everything and self.v6.everything

    def __contains__(self, addr: bytes) -> bool:
        """`addr` packed: 4 bytes (IPv4) or 16 (IPv6)."""
        family = self.v4 if len(addr) == 4 else self.v6
        return family.everything or int.from_bytes(addr, "big") in family


ANY_ADDRESS = AddressSet(ANY, ANY)


@dataclass(frozen=True, slots=True)
class Header:
    src: AddressSet
    sports: IntervalSet
    dst: AddressSet
    dports: IntervalSet
    bidirectional: bool
    is_any: bool = False  # set by compile_header: nothing to check

    def matches(self, src: bytes, sport: int, dst: bytes, dport: int, ports_too: bool) -> bool:
        """One direction. Addresses packed (4 or 16 bytes)."""
        if not (src in self.src and dst in self.dst):
            return False
        return not ports_too or (sport in self.sports and dport in self.dports)


def compile_header(
    proto: str | None,
    src: str | None,
    src_ports: str | None,
    direction: str | None,
    dst: str | None,
    dst_ports: str | None,
    variables: Mapping[str, str],
    *,
    path: str = "<rule>",
    line: int = 0,
) -> Header:
    """Resolve a rule header; an unresolvable one (unknown variable, malformed address) raises
    `UnsupportedOptionError` naming the field, so the rule is reported and not loaded."""
    if src is None:  # a service rule: any addresses and ports
        return Header(ANY_ADDRESS, ANY, ANY_ADDRESS, ANY, False, True)
    values = SnortVariables().with_values(variables).values
    try:
        s = address_set(src, values, path=path, line=line, field="source")
        d = address_set(dst or "any", values, path=path, line=line, field="destination")
        sp = ports(src_ports or "any", values, path=path, line=line, field="source ports")
        dp = ports(dst_ports or "any", values, path=path, line=line, field="destination ports")
    except ConfigError as exc:
        raise UnsupportedOptionError(exc.field or "header", exc.message) from None
    if proto in ("ip", "icmp"):
        sp = dp = _FULL_PORTS
    sp_set = IntervalSet.of(sp, sp == _FULL_PORTS)
    dp_set = IntervalSet.of(dp, dp == _FULL_PORTS)
    everything = s.everything and d.everything and sp_set.everything and dp_set.everything
    return Header(s, sp_set, d, dp_set, direction == "<>", everything)


def address_set(
    text: str, values: Mapping[str, str], *, path: str = "<rule>", line: int = 0,
    field: str = "address",
) -> AddressSet:  # fmt: skip
    """Both families of an address expression (`values`: the variables, defaults included);
    raises ConfigError on a malformed item of either family."""
    v4 = address_intervals(text, values, 4, path=path, line=line, field=field)
    v6 = address_intervals(text, values, 6, path=path, line=line, field=field)
    return AddressSet(
        IntervalSet.of(v4, v4 == ((0, ADDR_MAX),)), IntervalSet.of(v6, v6 == ((0, ADDR6_MAX),))
    )
