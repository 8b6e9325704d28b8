"""Rule headers (addresses, ports, direction) as the built-in engine evaluates them per packet.

The semantics are the project's one implementation, `opengate.snort.header` (shared with
the HSM compiler, so the NPM's classification and the SPM's IPS agree): variables with Snort 3's
defaults, lists, negation, CIDR, port ranges, `->` and `<>`; `ip` and `icmp` rules ignore ports.
This module only turns its interval sets into per-packet membership tests.

Not supported: IPv6 addresses in rule headers. The shared compiler is IPv4-only (it drops IPv6
items), so an IPv6 packet matches a header address only when that address is `any` (or a
variable that is `any`, as HOME_NET and EXTERNAL_NET are by default).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass

from opengate.errors import ConfigError
from opengate.fields import ANY_ADDR, Intervals
from opengate.snort.header import SnortVariables, addresses, ports
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
class Header:
    src: IntervalSet  # IPv4 addresses as integers
    sports: IntervalSet
    dst: IntervalSet
    dports: IntervalSet
    bidirectional: bool
    is_any: bool = False  # set by compile_header: nothing to check

    def matches(self, src: bytes, sport: int, dst: bytes, dport: int, ports_too: bool) -> bool:
        """One direction. Addresses packed (4 or 16 bytes)."""
        if not (_addr_in(src, self.src) and _addr_in(dst, self.dst)):
            return False
        return not ports_too or (sport in self.sports and dport in self.dports)


def _addr_in(addr: bytes, s: IntervalSet) -> bool:
    if s.everything:
        return True
    if len(addr) != 4:
        return False  # IPv6 against an IPv4-only set (see the module note)
    return int.from_bytes(addr, "big") in s


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
        return Header(ANY, ANY, ANY, ANY, False, True)
    values = SnortVariables().with_values(variables).values
    try:
        s, _ = addresses(src, values, path=path, line=line, field="source")
        d, _ = addresses(dst or "any", values, path=path, line=line, field="destination")
        sp = ports(src_ports or "any", values, path=path, line=line, field="source ports")
        dp = ports(dst_ports or "any", values, path=path, line=line, field="destination ports")
    except ConfigError as exc:
        raise UnsupportedOptionError(exc.field or "header", exc.message) from None
    if proto in ("ip", "icmp"):
        sp = dp = _FULL_PORTS
    sets = (
        _addr_set(s),
        IntervalSet.of(sp, sp == _FULL_PORTS),
        _addr_set(d),
        IntervalSet.of(dp, dp == _FULL_PORTS),
    )
    return Header(*sets, direction == "<>", all(x.everything for x in sets))


def _addr_set(prefixes: tuple[object, ...]) -> IntervalSet:
    if prefixes == ANY_ADDR:
        return ANY
    return IntervalSet.of(tuple((p.first, p.last) for p in prefixes))  # type: ignore[attr-defined]
