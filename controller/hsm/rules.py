"""The ACL rule model, the ClassBench parser and the converter for policy-style rules.

An ACL is an ordered list of `AclRule`; the first rule that matches a packet decides (its 0-based
position is the rule id the data plane reports). Each field is a union of alternatives, so that a
policy rule naming several networks or port ranges stays one rule.
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from opengate.errors import ConfigError
from opengate.fields import (
    ANY_ADDR,
    ANY_PORT,
    ANY_PROTO,
    PORT_MAX,
    Packet,
    PortRange,
    Prefix,
    ProtoMatch,
    parse_prefix,
)

LOG = logging.getLogger(__name__)


class AclAction(enum.Enum):
    PERMIT = "permit"
    DENY = "deny"
    TO_CPU = "to_cpu"

    @property
    def p4_action(self) -> str:
        return {"permit": "acl_permit", "deny": "acl_deny", "to_cpu": "acl_to_cpu"}[self.value]


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a rule came from, for error messages and reports."""

    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True, slots=True)
class AclRule:
    src: tuple[Prefix, ...] = ANY_ADDR
    dst: tuple[Prefix, ...] = ANY_ADDR
    sport: tuple[PortRange, ...] = ANY_PORT
    dport: tuple[PortRange, ...] = ANY_PORT
    proto: tuple[ProtoMatch, ...] = ANY_PROTO
    action: AclAction = AclAction.PERMIT
    origin: Origin | None = None

    def matches(self, packet: Packet) -> bool:
        return _fields_match(self, packet)


# -- ClassBench --------------------------------------------------------------------------------

_CB_PORTS = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$")
_CB_HEX = re.compile(r"^\s*(0x[0-9a-fA-F]+)\s*/\s*(0x[0-9a-fA-F]+)\s*$")


def parse_classbench(
    path: str | Path, action: AclAction = AclAction.PERMIT, limit: int | None = None
) -> list[AclRule]:
    """Read a ClassBench filter set (one rule per line, highest priority first).

    `@SRC/LEN<TAB>DST/LEN<TAB>LO : HI<TAB>LO : HI<TAB>PROTO/MASK<TAB>FLAGS/MASK`; the FLAGS field
    is ignored, PROTO 0x00/0x00 is any protocol. ClassBench has no actions: every rule gets
    `action`. Errors name the file and line.
    """
    name = str(path)
    rules: list[AclRule] = []
    with open(path, encoding="ascii", errors="replace") as handle:
        for number, raw in enumerate(handle, start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            rules.append(parse_classbench_line(line, name, number, action))
            if limit is not None and len(rules) >= limit:
                break
    LOG.info("read %d ClassBench rules from %s", len(rules), name)
    return rules


def parse_classbench_line(
    line: str, path: str, number: int, action: AclAction = AclAction.PERMIT
) -> AclRule:
    if not line.startswith("@"):
        raise ConfigError("a ClassBench rule starts with '@'", path=path, line=number)
    fields = [f for f in line[1:].split("\t") if f.strip()]
    if len(fields) not in (5, 6):
        raise ConfigError(
            f"expected 6 tab-separated fields (src, dst, sport, dport, proto, flags), "
            f"got {len(fields)}",
            path=path,
            line=number,
        )
    names = ("src", "dst", "sport", "dport", "proto")
    try:
        src = parse_prefix(fields[0])
    except ValueError as exc:
        raise ConfigError(str(exc), path=path, line=number, field=names[0]) from None
    try:
        dst = parse_prefix(fields[1])
    except ValueError as exc:
        raise ConfigError(str(exc), path=path, line=number, field=names[1]) from None
    ports: list[PortRange] = []
    for field_name, text in zip(names[2:4], fields[2:4], strict=True):
        match = _CB_PORTS.match(text)
        if not match:
            raise ConfigError(
                f"malformed port range {text.strip()!r} (expected 'LO : HI')",
                path=path,
                line=number,
                field=field_name,
            )
        low, high = int(match.group(1)), int(match.group(2))
        ports.append(_port_range(low, high, path, number, field_name))
    match = _CB_HEX.match(fields[4])
    if not match:
        raise ConfigError(
            f"malformed protocol {fields[4].strip()!r} (expected 0xVV/0xMM)",
            path=path,
            line=number,
            field="proto",
        )
    value, mask = int(match.group(1), 16), int(match.group(2), 16)
    if value > 0xFF or mask > 0xFF:
        raise ConfigError(
            f"protocol {fields[4].strip()} is wider than 8 bits",
            path=path,
            line=number,
            field="proto",
        )
    return AclRule(
        src=(src,),
        dst=(dst,),
        sport=(ports[0],),
        dport=(ports[1],),
        proto=(ProtoMatch(value & mask, mask),),
        action=action,
        origin=Origin(path, number),
    )


def _port_range(low: int, high: int, path: str | None, line: int | None, field: str) -> PortRange:
    if low > high:
        raise ConfigError(f"port range {low}:{high} is reversed", path=path, line=line, field=field)
    if high > PORT_MAX:
        raise ConfigError(f"port {high} is above {PORT_MAX}", path=path, line=line, field=field)
    return PortRange(low, high)


# -- policy-style rules ------------------------------------------------------------------------

PROTOCOL_NUMBERS = {"icmp": 1, "tcp": 6, "udp": 17, "gre": 47, "esp": 50, "ah": 51, "sctp": 132}


def acl_rule_from_policy(
    *,
    src: Sequence[str | Prefix] | None,
    dst: Sequence[str | Prefix] | None,
    sport: Sequence[tuple[int, int] | PortRange] | None = None,
    dport: Sequence[tuple[int, int] | PortRange] | None = None,
    protocols: Iterable[str | int] | None = None,
    action: str | AclAction = AclAction.PERMIT,
    path: str | None = None,
    line: int | None = None,
) -> AclRule:
    """Turn a policy file's ACL rule (networks already resolved to prefix lists) into an AclRule.

    `None` for a field means any; an empty list matches nothing. Prefixes may be strings
    (`10.0.0.0/8`) or `Prefix`; ports are inclusive (low, high) pairs; protocols are names
    (tcp, udp, icmp, ...; `any`/`ip`) or numbers. Errors are `ConfigError`s naming path/line/field.
    """

    def prefixes(values: Sequence[str | Prefix] | None, field: str) -> tuple[Prefix, ...]:
        if values is None:
            return ANY_ADDR
        out: list[Prefix] = []
        for value in values:
            if isinstance(value, Prefix):
                out.append(value)
                continue
            try:
                out.append(parse_prefix(value))
            except ValueError as exc:
                raise ConfigError(str(exc), path=path, line=line, field=field) from None
        return tuple(out)

    def ports(
        values: Sequence[tuple[int, int] | PortRange] | None, field: str
    ) -> tuple[PortRange, ...]:
        if values is None:
            return ANY_PORT
        out: list[PortRange] = []
        for value in values:
            if isinstance(value, PortRange):
                out.append(value)
            else:
                low, high = value
                if low < 0:
                    raise ConfigError(f"port {low} is negative", path=path, line=line, field=field)
                out.append(_port_range(low, high, path, line, field))
        return tuple(out)

    protos: tuple[ProtoMatch, ...] = ANY_PROTO
    if protocols is not None:
        found: list[ProtoMatch] = []
        for proto in protocols:
            if isinstance(proto, int) or (isinstance(proto, str) and proto.isdigit()):
                number = int(proto)
                if not 0 <= number <= 0xFF:
                    raise ConfigError(
                        f"protocol {number} is not 0..255", path=path, line=line, field="protocol"
                    )
                found.append(ProtoMatch(number))
            elif proto.lower() in ("any", "ip"):
                found = list(ANY_PROTO)
                break
            elif proto.lower() in PROTOCOL_NUMBERS:
                found.append(ProtoMatch(PROTOCOL_NUMBERS[proto.lower()]))
            else:
                known = ", ".join(sorted(PROTOCOL_NUMBERS))
                raise ConfigError(
                    f"unknown protocol {proto!r} (known: any, {known}, or a number)",
                    path=path,
                    line=line,
                    field="protocol",
                )
        protos = tuple(found)
    if isinstance(action, str):
        try:
            action = AclAction(action.lower().replace("-", "_"))
        except ValueError:
            known = ", ".join(a.value for a in AclAction)
            raise ConfigError(
                f"unknown action {action!r} (known: {known})", path=path, line=line, field="action"
            ) from None
    return AclRule(
        src=prefixes(src, "src"),
        dst=prefixes(dst, "dst"),
        sport=ports(sport, "sport"),
        dport=ports(dport, "dport"),
        proto=protos,
        action=action,
        origin=Origin(path, line) if path is not None and line is not None else None,
    )


# -- IDS header rules --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IdsRule:
    """The header of one IDS rule, resolved to numbers, with the class it maps to.

    `rule_id` is the rule's position in its rules file (what `ids_classification` reports);
    the order of a list of IdsRule is the matching order (first match gives the class).
    `bidirectional` (`<>`) also matches with source and destination swapped.
    """

    src: tuple[Prefix, ...] = ANY_ADDR
    dst: tuple[Prefix, ...] = ANY_ADDR
    sport: tuple[PortRange, ...] = ANY_PORT
    dport: tuple[PortRange, ...] = ANY_PORT
    proto: tuple[ProtoMatch, ...] = ANY_PROTO
    bidirectional: bool = False
    class_id: int = 1
    rule_id: int = 0
    sid: int | None = None
    origin: Origin | None = None

    def matches(self, packet: Packet) -> bool:
        return self._forward(packet) or (self.bidirectional and self._forward(packet.reversed()))

    def _forward(self, packet: Packet) -> bool:
        return _fields_match(self, packet)


def _fields_match(rule: AclRule | IdsRule, packet: Packet) -> bool:
    """Whether each of the packet's five fields is in one of the rule's values for it."""
    return (
        any(p.contains(packet.src) for p in rule.src)
        and any(p.contains(packet.dst) for p in rule.dst)
        and any(r.contains(packet.sport) for r in rule.sport)
        and any(r.contains(packet.dport) for r in rule.dport)
        and any(p.contains(packet.proto) for p in rule.proto)
    )
