"""The IDS classification of IPv6 flows, which the CPM does itself when it sets a session up.

An IPv4 flow's class comes from the NPM's IDS classification tables (the HSM classifier,
`controller.classifier`): the first IDS rule, in the policy's matching order, whose header
matches the opening packet gives its class. The NPM classifies no IPv6 packet; the opening
packet of an IPv6 flow comes to the CPM (CPU_REASON_SESSION_V6), which gives it the class the
same way, from the same rules, their headers evaluated for IPv6: each address expression's IPv6
part (`opengate.snort.header.address_intervals(..., family=6)`, the variables expanded to both
families, as the SPM's engine evaluates them: spm/ips/header.py), `->` and `<>`, `ip` and `icmp`
rules without ports, an `icmp` rule matching ICMPv6 (as on the SPM), a service rule any
addresses and ports of its transports. Rules no class claims (class 0) are left out, as for
IPv4, so that they shadow no later rule.

`Ids6Classifier.classify` is first match over the rules as written (`first_match`), with rules
that an earlier one shadows entirely (the same header) dropped: what tests/controller/test_ids6.py
holds it to.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from controller.hsm.snort_header import ClassMap
from opengate import p4constants as pc
from opengate.fields import Intervals
from opengate.snort.header import (
    ADDR6_MAX,
    PROTOCOLS,
    SERVICE_TRANSPORTS,
    address_intervals,
    ports,
)
from opengate.snort.rules import RawRule

PORT_MAX = 0xFFFF
ALL_ADDRESSES: Intervals = ((0, ADDR6_MAX),)
ALL_PORTS: Intervals = ((0, PORT_MAX),)
FlowKey = tuple[int, int, int, int, int]  # src, dst, proto, sport, dport (128-bit addresses)


def _contains(intervals: Intervals, value: int) -> bool:
    if intervals in (ALL_ADDRESSES, ALL_PORTS):
        return True
    i = bisect.bisect_right(intervals, (value, ADDR6_MAX + 1)) - 1
    return i >= 0 and intervals[i][0] <= value <= intervals[i][1]


@dataclass(frozen=True, slots=True)
class Ids6Rule:
    """An IDS rule's header for IPv6: sets of addresses and ports as sorted disjoint inclusive
    intervals, the IP protocols (None: any), with the class it maps to and its id (its position
    in the rules file, as `IdsRule.rule_id`)."""

    src: Intervals
    dst: Intervals
    sport: Intervals
    dport: Intervals
    protos: frozenset[int] | None
    bidirectional: bool
    class_id: int
    rule_id: int
    sid: int | None = None

    @property
    def header(self) -> tuple[object, ...]:
        return (self.src, self.dst, self.sport, self.dport, self.protos, self.bidirectional)

    def matches(self, key: FlowKey) -> bool:
        src, dst, proto, sport, dport = key
        if self.protos is not None and proto not in self.protos:
            return False
        return self._forward(src, dst, sport, dport) or (
            self.bidirectional and self._forward(dst, src, dport, sport)
        )

    def _forward(self, src: int, dst: int, sport: int, dport: int) -> bool:
        return (
            _contains(self.src, src)
            and _contains(self.dst, dst)
            and _contains(self.sport, sport)
            and _contains(self.dport, dport)
        )


def _protos(raw: RawRule) -> frozenset[int] | None:
    if raw.proto is None:
        return None
    found = PROTOCOLS.get(raw.proto) or SERVICE_TRANSPORTS.get(raw.proto)
    if found is None:
        return None  # an unknown service: any IP protocol
    values: set[int] = set()
    for match in found:
        if match.mask == 0:
            return None
        values.add(match.value)
    if raw.proto == "icmp":
        values.add(pc.IP_PROTO_ICMPV6)  # Snort's icmp rules match ICMPv6 too
    return frozenset(values)


def rule_from_raw(
    raw: RawRule, rule_id: int, values: Mapping[str, str], classes: ClassMap
) -> Ids6Rule:
    """One rule's IPv6 header (errors: ConfigError naming the rules file, line and field; the
    IPv4 side of the same rule raises them first)."""
    class_id = classes.class_of(raw)
    sid_option = raw.option("sid")
    sid = None
    if sid_option is not None and sid_option.value is not None:
        text = sid_option.value.strip()
        sid = int(text) if text.isdigit() else None
    protos = _protos(raw)
    if not raw.has_header:
        return Ids6Rule(ALL_ADDRESSES, ALL_ADDRESSES, ALL_PORTS, ALL_PORTS, protos, False,
                        class_id, rule_id, sid)  # fmt: skip
    assert raw.src is not None and raw.dst is not None
    assert raw.src_ports is not None and raw.dst_ports is not None
    path, line = raw.path, raw.line
    src = address_intervals(raw.src, values, 6, path=path, line=line, field="source")
    dst = address_intervals(raw.dst, values, 6, path=path, line=line, field="destination")
    if raw.proto in ("ip", "icmp"):
        sport, dport = ALL_PORTS, ALL_PORTS
    else:
        sport = ports(raw.src_ports, values, path=path, line=line, field="source ports")
        dport = ports(raw.dst_ports, values, path=path, line=line, field="destination ports")
    return Ids6Rule(src, dst, sport, dport, protos, raw.direction == "<>", class_id, rule_id, sid)


def rules_from_raw(
    raw_rules: Iterable[RawRule], values: Mapping[str, str], classes: ClassMap
) -> tuple[Ids6Rule, ...]:
    """The IPv6 headers of a rules file's rules in matching order (the class map's, as the IPv4
    side orders them), those of class 0 and those that can match no IPv6 packet left out."""
    out: list[Ids6Rule] = []
    for index, raw in enumerate(raw_rules):
        rule = rule_from_raw(raw, index, values, classes)
        if rule.class_id == 0 or not (rule.src and rule.dst and rule.sport and rule.dport):
            continue
        out.append(rule)
    if classes.precedence:
        rank = {class_id: i for i, class_id in enumerate(classes.precedence)}
        out.sort(key=lambda r: rank.get(r.class_id, len(rank)))
    return tuple(out)


def first_match(rules: Sequence[Ids6Rule], key: FlowKey) -> Ids6Rule | None:
    """The first rule that matches the flow's opening packet (the reference)."""
    for rule in rules:
        if rule.matches(key):
            return rule
    return None


class Ids6Classifier:
    """First match over the rules, with the rules that an earlier one with the same header
    shadows, and every rule after one that matches everything, dropped."""

    def __init__(self, rules: Sequence[Ids6Rule]) -> None:
        seen: set[tuple[object, ...]] = set()
        kept: list[Ids6Rule] = []
        for rule in rules:
            header = rule.header
            if header in seen:
                continue
            seen.add(header)
            kept.append(rule)
            if rule.protos is None and all(
                part in (ALL_ADDRESSES, ALL_PORTS) for part in header[:4]
            ):
                break
        self.rules = tuple(kept)

    def classify(self, key: FlowKey) -> Ids6Rule | None:
        return first_match(self.rules, key)
