"""IDS headers for the HSM compiler: Snort 3 rules turned into IdsRule terms, and the class
mapping (which inspection profile a rule maps to). The header semantics themselves (variables,
address and port expressions, service transports) are the project's one implementation,
`opengate.snort.header`, which the SPM's IPS engine uses too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from controller.hsm.rules import IdsRule, Origin
from opengate.errors import ConfigError
from opengate.fields import (
    ANY_PORT,
    ANY_PROTO,
    intervals_to_ranges,
)
from opengate.snort.header import PROTOCOLS, SERVICE_TRANSPORTS, SnortVariables, addresses, ports
from opengate.snort.rules import RawRule, parse_rules_file

LOG = logging.getLogger(__name__)


# -- class mapping -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClassMap:
    """Which IDS class (inspection profile, 1..255; 0 = no inspection) a rule maps to.

    By sid first, then by service (the rule's `service:` option, or its service protocol), then
    by classtype, else `default`. `precedence` orders the rules before compiling: rules of the
    classes listed first come first (stable; classes not listed keep file order, after them).
    """

    default: int = 1
    by_sid: Mapping[int, int] = field(default_factory=dict)
    by_service: Mapping[str, int] = field(default_factory=dict)
    by_classtype: Mapping[str, int] = field(default_factory=dict)
    precedence: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for what, mapping in (
            ("default", {"": self.default}),
            ("by_sid", self.by_sid),
            ("by_service", self.by_service),
            ("by_classtype", self.by_classtype),
        ):
            for key, value in mapping.items():
                if not 0 <= value <= 255:
                    raise ConfigError(f"class id {value} for {key!r} is not 0..255", field=what)

    def class_of(self, rule: RawRule) -> int:
        sid = _sid(rule)
        if sid is not None and sid in self.by_sid:
            return self.by_sid[sid]
        for service in _services(rule):
            if service in self.by_service:
                return self.by_service[service]
        option = rule.option("classtype")
        if option is not None and option.value is not None:
            classtype = option.value.strip()
            if classtype in self.by_classtype:
                return self.by_classtype[classtype]
        return self.default

    def order(self, rules: Sequence[IdsRule]) -> list[IdsRule]:
        if not self.precedence:
            return list(rules)
        rank = {class_id: i for i, class_id in enumerate(self.precedence)}
        return sorted(rules, key=lambda r: rank.get(r.class_id, len(rank)))


def _sid(rule: RawRule) -> int | None:
    option = rule.option("sid")
    if option is None or option.value is None:
        return None
    try:
        return int(option.value.strip())
    except ValueError:
        return None


def _services(rule: RawRule) -> list[str]:
    names: list[str] = []
    for option in rule.options_named("service"):
        if option.value:
            names += [s.strip() for s in option.value.split(",") if s.strip()]
    if rule.proto is not None and rule.proto not in PROTOCOLS:
        names.append(rule.proto)
    return names


# -- rules -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeaderNote:
    """A rule whose header the fast path cannot express as written."""

    path: str
    line: int
    sid: int | None
    kind: str  # "never-matches" | "ipv6-only" | "ports-ignored"
    detail: str

    def __str__(self) -> str:
        sid = f" (sid {self.sid})" if self.sid is not None else ""
        return f"{self.path}:{self.line}{sid}: {self.kind}: {self.detail}"


@dataclass(frozen=True, slots=True)
class IdsHeaders:
    """The compiled headers in matching order, and what could not be expressed."""

    rules: tuple[IdsRule, ...]
    notes: tuple[HeaderNote, ...]
    total: int  # rules given

    @property
    def skipped(self) -> tuple[HeaderNote, ...]:
        return tuple(n for n in self.notes if n.kind != "ports-ignored")


def ids_rules_from_raw(
    raw_rules: Iterable[RawRule],
    variables: SnortVariables | None = None,
    class_map: ClassMap | None = None,
) -> IdsHeaders:
    """Resolve each rule's header; `rule_id` is the rule's position in `raw_rules`."""
    values = (variables or SnortVariables()).values
    classes = class_map or ClassMap()
    rules: list[IdsRule] = []
    notes: list[HeaderNote] = []
    total = 0
    for index, raw in enumerate(raw_rules):
        total += 1
        rule, note = _header(raw, index, values, classes)
        if note is not None:
            notes.append(note)
        if rule is not None:
            rules.append(rule)
    for note in notes:
        LOG.info("%s", note)
    return IdsHeaders(tuple(classes.order(rules)), tuple(notes), total)


def _header(
    raw: RawRule, index: int, values: Mapping[str, str], classes: ClassMap
) -> tuple[IdsRule | None, HeaderNote | None]:
    sid = _sid(raw)
    path, line = raw.path, raw.line

    def note(kind: str, detail: str) -> HeaderNote:
        return HeaderNote(path, line, sid, kind, detail)

    if raw.proto is None:
        protos = ANY_PROTO
    elif raw.proto in PROTOCOLS:
        protos = PROTOCOLS[raw.proto]
    else:
        protos = SERVICE_TRANSPORTS.get(raw.proto, ANY_PROTO)
    class_id = classes.class_of(raw)
    origin = Origin(path, line)
    if not raw.has_header:
        return IdsRule(proto=protos, class_id=class_id, rule_id=index, sid=sid, origin=origin), None
    assert raw.src is not None and raw.dst is not None
    assert raw.src_ports is not None and raw.dst_ports is not None
    src, src_v6 = addresses(raw.src, values, path=path, line=line, field="source")
    dst, dst_v6 = addresses(raw.dst, values, path=path, line=line, field="destination")
    sports = ports(raw.src_ports, values, path=path, line=line, field="source ports")
    dports = ports(raw.dst_ports, values, path=path, line=line, field="destination ports")
    result_note: HeaderNote | None = None
    if not src or not dst:
        which = "source" if not src else "destination"
        if (src_v6 and not src) or (dst_v6 and not dst):
            return None, note("ipv6-only", f"{which} has no IPv4 address")
        return None, note("never-matches", f"{which} is empty ({raw.src} -> {raw.dst})")
    if not sports or not dports:
        return None, note("never-matches", f"empty port set ({raw.src_ports} {raw.dst_ports})")
    sport = intervals_to_ranges(sports)
    dport = intervals_to_ranges(dports)
    if raw.proto in ("ip", "icmp") and (sport != ANY_PORT or dport != ANY_PORT):
        result_note = note("ports-ignored", f"{raw.proto} rules have no ports; treated as any")
        sport, dport = ANY_PORT, ANY_PORT
    rule = IdsRule(
        src=src,
        dst=dst,
        sport=sport,
        dport=dport,
        proto=protos,
        bidirectional=raw.direction == "<>",
        class_id=class_id,
        rule_id=index,
        sid=sid,
        origin=origin,
    )
    return rule, result_note


def load_ids_file(
    path: str | Path,
    *,
    variables: SnortVariables | None = None,
    class_map: ClassMap | None = None,
    include_commented: bool = False,
    strict: bool = True,
) -> tuple[IdsHeaders, tuple[ConfigError, ...]]:
    """Parse a Snort 3 rules file and resolve its headers. Returns the headers and, when not
    `strict`, the rules that failed to parse or resolve (each error names file and line)."""
    parsed = parse_rules_file(path, include_commented=include_commented, strict=strict)
    errors = list(parsed.errors)
    good: list[RawRule] = []
    values = (variables or SnortVariables()).values
    for raw in parsed.rules:
        if strict:
            good.append(raw)
            continue
        try:  # resolve early so that one bad header does not sink the file
            _header(raw, 0, values, class_map or ClassMap())
        except ConfigError as error:
            LOG.warning("%s", error)
            errors.append(error)
            continue
        good.append(raw)
    headers = ids_rules_from_raw(good, variables, class_map)
    return headers, tuple(errors)


def load_class_map(path: str | Path) -> ClassMap:
    """A YAML class map: `default: 1`, `by_sid: {2000: 3}`, `by_service: {http: 2}`,
    `by_classtype: {trojan-activity: 4}`, `precedence: [4, 2]`."""
    name = str(path)
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read class map: {exc.strerror}", path=name) from None
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        raise ConfigError(
            f"malformed YAML: {exc}", path=name, line=line + 1 if line is not None else None
        ) from None
    if not isinstance(data, dict):
        raise ConfigError("a class map is a mapping", path=name)
    known = {"default", "by_sid", "by_service", "by_classtype", "precedence"}
    for key in data:
        if key not in known:
            raise ConfigError(
                f"unsupported option {key!r} (known: {', '.join(sorted(known))})",
                path=name,
                field=str(key),
            )

    def mapping(key: str, key_type: type) -> dict[Any, int]:
        value = data.get(key) or {}
        if not isinstance(value, dict):
            raise ConfigError("expected a mapping", path=name, field=key)
        out: dict[Any, int] = {}
        for k, v in value.items():
            if not isinstance(k, key_type) or not isinstance(v, int):
                raise ConfigError(f"bad entry {k!r}: {v!r}", path=name, field=key)
            out[k] = v
        return out

    default = data.get("default", 1)
    precedence = data.get("precedence", [])
    if not isinstance(default, int):
        raise ConfigError("expected a class id", path=name, field="default")
    if not isinstance(precedence, list) or not all(isinstance(c, int) for c in precedence):
        raise ConfigError("expected a list of class ids", path=name, field="precedence")
    try:
        return ClassMap(
            default=default,
            by_sid=mapping("by_sid", int),
            by_service=mapping("by_service", str),
            by_classtype=mapping("by_classtype", str),
            precedence=tuple(precedence),
        )
    except ConfigError as error:
        raise ConfigError(error.message, path=name, field=error.field) from None
