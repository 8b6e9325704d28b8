"""The IPv6 side of the policy's ACL: its rules, their `ipv6_acl` entries, and both evaluated.

The IPv4 rules go to the HSM classifier (`controller.classifier`); the rules that apply to IPv6
compile here to entries of the NPM's `ipv6_acl`, a ternary/range table with the packet's
addresses as two 64-bit halves (p4src/include/control/ipv6.p4). Rule `i` of the `n` IPv6 rules
takes priority `n - i`, so the first rule that matches wins (P4Runtime: the highest priority);
a rule whose fields are unions (several prefixes, protocols, port ranges, ICMPv6 types) takes one
entry per combination, all at its priority. An entry reports the rule's id as the IPv4 ACL does:
the rule's position in the policy's `acl.rules`. After the user's rules, unless the policy says
`acl.icmpv6_errors: policy`, comes a rule that permits the ICMPv6 errors RFC 4890 (section
4.3.1) says a firewall must not drop: destination unreachable, packet too big, time exceeded,
parameter problem (its id is the one after the policy's last rule). The table's default entry is
`acl.default`.

`first_match` (the rules, one after the other) and `lookup` (the entries, as the table matches)
say the same for every packet; tests/controller/test_acl6.py holds them to that.
"""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from controller.hsm.rules import AclAction
from opengate import p4constants as pc
from opengate.entries import Range, TableEntry, Ternary
from opengate.fields import ANY_PORT, ANY_PROTO, PortRange, ProtoMatch

HALF = 64
HALF_MAX = (1 << HALF) - 1
ADDR6_MAX = (1 << 128) - 1
ICMPV6_TYPE_MAX = 0xFF
# RFC 4890 section 4.3.1: the ICMPv6 errors that must not be dropped.
ICMPV6_ERRORS = (1, 2, 3, 4)
ICMPV6_ERRORS_NAME = "icmpv6-errors (RFC 4890)"
ICMPV6_ERROR_MODES = ("permit", "policy")

P4_ACTIONS = {
    AclAction.PERMIT: pc.A_IPV6_ACL_PERMIT,
    AclAction.DENY: pc.A_IPV6_ACL_DENY,
    AclAction.TO_CPU: pc.A_IPV6_ACL_TO_CPU,
}
VERDICTS = {action: verdict for verdict, action in P4_ACTIONS.items()}


def mask128(length: int) -> int:
    return (ADDR6_MAX << (128 - length)) & ADDR6_MAX


@dataclass(frozen=True, slots=True, order=True)
class Prefix6:
    """An IPv6 prefix as an integer; `value` has no bits set beyond `length`."""

    value: int
    length: int

    def __post_init__(self) -> None:
        if not 0 <= self.length <= 128 or not 0 <= self.value <= ADDR6_MAX:
            raise ValueError(f"not an IPv6 prefix: {self.value:#x}/{self.length}")
        if self.value & ~mask128(self.length):
            raise ValueError(f"prefix value {self.value:#x} has bits beyond /{self.length}")

    @classmethod
    def of(cls, network: ipaddress.IPv6Network) -> Prefix6:
        return cls(int(network.network_address), network.prefixlen)

    def contains(self, address: int) -> bool:
        return address & mask128(self.length) == self.value

    def halves(self) -> tuple[Ternary, Ternary]:
        """The prefix as ternary matches on the address's high and low halves."""
        mask = mask128(self.length)
        return (
            Ternary(self.value >> HALF, mask >> HALF),
            Ternary(self.value & HALF_MAX, mask & HALF_MAX),
        )

    def __str__(self) -> str:
        return f"{ipaddress.IPv6Address(self.value)}/{self.length}"


ANY6: tuple[Prefix6, ...] = (Prefix6(0, 0),)


@dataclass(frozen=True, slots=True)
class Acl6Rule:
    """One rule as it applies to IPv6. Each field is a union of alternatives (an empty one
    matches nothing); `icmp_types` None: any type (the rule's protocols are then any)."""

    rule_id: int
    action: AclAction
    src: tuple[Prefix6, ...] = ANY6
    dst: tuple[Prefix6, ...] = ANY6
    proto: tuple[ProtoMatch, ...] = ANY_PROTO
    sport: tuple[PortRange, ...] = ANY_PORT
    dport: tuple[PortRange, ...] = ANY_PORT
    icmp_types: tuple[int, ...] | None = None

    def matches(self, packet: Packet6) -> bool:
        return (
            any(p.contains(packet.src) for p in self.src)
            and any(p.contains(packet.dst) for p in self.dst)
            and any(p.contains(packet.proto) for p in self.proto)
            and any(r.contains(packet.sport) for r in self.sport)
            and any(r.contains(packet.dport) for r in self.dport)
            and (self.icmp_types is None or packet.icmp_type in self.icmp_types)
        )


@dataclass(frozen=True, slots=True)
class Packet6:
    """What `ipv6_acl` looks at: the addresses, the upper-layer protocol, the ports (an ICMPv6
    echo request's identifier as its source port, a reply's as its destination port) and the
    ICMPv6 type (0 for other protocols)."""

    src: int
    dst: int
    proto: int
    sport: int = 0
    dport: int = 0
    icmp_type: int = 0


def icmpv6_errors_rule(rule_id: int) -> Acl6Rule:
    """The permit of RFC 4890's must-not-drop ICMPv6 errors."""
    return Acl6Rule(
        rule_id=rule_id,
        action=AclAction.PERMIT,
        proto=(ProtoMatch(pc.IP_PROTO_ICMPV6),),
        icmp_types=ICMPV6_ERRORS,
    )


def first_match(
    rules: Sequence[Acl6Rule], packet: Packet6, default: AclAction
) -> tuple[AclAction, int]:
    """(verdict, rule id) of the first rule that matches; (default, RULE_NONE) if none does."""
    for rule in rules:
        if rule.matches(packet):
            return rule.action, rule.rule_id
    return default, pc.RULE_NONE


def entries(rules: Sequence[Acl6Rule]) -> list[TableEntry]:
    """The `ipv6_acl` entries of the rules, every match field spelled out (a wildcard as the
    switch reads it back: ternary 0/0, the whole range), so that entries read back from a switch
    compare equal to these."""
    out: list[TableEntry] = []
    count = len(rules)
    for index, rule in enumerate(rules):
        priority = count - index
        action = P4_ACTIONS[rule.action]
        params = {"rule": rule.rule_id}
        protos: Iterable[tuple[Ternary, Ternary]]
        if rule.icmp_types is None:
            protos = [(Ternary(p.value, p.mask), Ternary(0, 0)) for p in rule.proto]
        else:
            protos = [
                (Ternary(p.value, p.mask), Ternary(t, ICMPV6_TYPE_MAX))
                for p in rule.proto
                for t in rule.icmp_types
            ]
        seen: set[TableEntry] = set()
        for src, dst, (proto, icmp_type), sport, dport in itertools.product(
            rule.src, rule.dst, protos, rule.sport, rule.dport
        ):
            src_hi, src_lo = src.halves()
            dst_hi, dst_lo = dst.halves()
            entry = TableEntry.make(
                pc.T_IPV6_ACL,
                {
                    "ipv6_src_hi": src_hi,
                    "ipv6_src_lo": src_lo,
                    "ipv6_dst_hi": dst_hi,
                    "ipv6_dst_lo": dst_lo,
                    "ip_proto": proto,
                    "l4_sport": Range(sport.low, sport.high),
                    "l4_dport": Range(dport.low, dport.high),
                    "icmpv6_type": icmp_type,
                },
                action,
                params,
                priority=priority,
            )
            if entry not in seen:
                seen.add(entry)
                out.append(entry)
    return out


def default_entry(default: AclAction) -> TableEntry:
    """The table's default entry: the policy's default verdict, no rule."""
    return TableEntry.make(
        pc.T_IPV6_ACL, {}, P4_ACTIONS[default], {"rule": pc.RULE_NONE}, is_default=True
    )


def _ternary(value: object) -> Ternary:
    assert isinstance(value, Ternary)
    return value


def _range(value: object) -> Range:
    assert isinstance(value, Range)
    return value


def entry_matches(entry: TableEntry, packet: Packet6) -> bool:
    """Whether an `ipv6_acl` entry matches the packet, as the table matches."""
    match = entry.match_dict
    fields = (
        ("ipv6_src_hi", packet.src >> HALF),
        ("ipv6_src_lo", packet.src & HALF_MAX),
        ("ipv6_dst_hi", packet.dst >> HALF),
        ("ipv6_dst_lo", packet.dst & HALF_MAX),
        ("ip_proto", packet.proto),
        ("icmpv6_type", packet.icmp_type),
    )
    for name, value in fields:
        ternary = _ternary(match[name])
        if value & ternary.mask != ternary.value & ternary.mask:
            return False
    for name, value in (("l4_sport", packet.sport), ("l4_dport", packet.dport)):
        span = _range(match[name])
        if not span.low <= value <= span.high:
            return False
    return True


def lookup(
    table: Sequence[TableEntry], default: TableEntry, packet: Packet6
) -> tuple[AclAction, int]:
    """(verdict, rule id) the table gives the packet: its matching entry of the highest
    priority, else its default entry."""
    best: TableEntry | None = None
    for entry in table:
        if (best is None or entry.priority > best.priority) and entry_matches(entry, packet):
            best = entry
    chosen = best or default
    return VERDICTS[chosen.action], chosen.params_dict["rule"]
