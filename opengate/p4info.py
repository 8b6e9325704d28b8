"""P4Info: load it once, resolve names to ids, and turn name-based entries into P4Runtime messages.

The P4 program is the single source of truth: nothing here knows a table name. A wrong name fails
with "no table named X; did you mean Y?", a value that does not fit its field names the field.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from finsy.proto import p4i, p4r
from google.protobuf import text_format

from opengate.entries import Exact, Lpm, MatchValue, Optional, Range, TableEntry, Ternary

# The repeated fields of a P4Info whose objects carry a preamble (name, id), in P4Info's order.
PREAMBLE_KINDS = (
    "tables",
    "actions",
    "action_profiles",
    "counters",
    "direct_counters",
    "meters",
    "direct_meters",
    "registers",
    "digests",
    "controller_packet_metadata",
    "value_sets",
)


class P4InfoError(LookupError):
    """A name or value that the loaded P4Info does not have or cannot hold."""


T = TypeVar("T")


@dataclass(slots=True)
class _Index(Generic[T]):
    """Objects of one kind by name, alias and id."""

    kind: str
    by_name: dict[str, T] = field(default_factory=dict)
    by_id: dict[int, T] = field(default_factory=dict)

    def add(self, preamble: p4i.Preamble, obj: T) -> None:
        self.by_id[preamble.id] = obj
        self.by_name[preamble.name] = obj
        if preamble.alias:
            self.by_name.setdefault(preamble.alias, obj)
        # Names pinned with a leading dot appear without it in P4Info; accept both spellings.
        self.by_name.setdefault(preamble.name.rsplit(".", 1)[-1], obj)

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    def get(self, name: str) -> T:
        try:
            return self.by_name[name]
        except KeyError:
            raise P4InfoError(_unknown(self.kind, name, self.by_name)) from None

    def get_id(self, ident: int) -> T:
        try:
            return self.by_id[ident]
        except KeyError:
            raise P4InfoError(f"no {self.kind} with id {ident:#x} in the P4Info") from None


def _unknown(kind: str, name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"no {kind} named {name!r}{hint}"


def encode_value(value: int, bitwidth: int, what: str) -> bytes:
    """P4Runtime canonical bytestring: big-endian, no leading zero bytes (but at least one byte)."""
    if value < 0 or value >= (1 << bitwidth):
        raise P4InfoError(f"{what}: value {value} does not fit in {bitwidth} bits")
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def decode_value(data: bytes) -> int:
    return int.from_bytes(data, "big")


@dataclass(frozen=True, slots=True)
class MatchFieldInfo:
    id: int
    name: str
    bitwidth: int
    match_type: int  # p4i.MatchField.MatchType


@dataclass(frozen=True, slots=True)
class ParamInfo:
    id: int
    name: str
    bitwidth: int


@dataclass(frozen=True, slots=True)
class ActionInfo:
    id: int
    name: str
    params: tuple[ParamInfo, ...]

    def param(self, name: str) -> ParamInfo:
        for param in self.params:
            if param.name == name:
                return param
        raise P4InfoError(
            _unknown(f"parameter of action {self.name!r}", name, [p.name for p in self.params])
        )


@dataclass(frozen=True, slots=True)
class TableInfo:
    id: int
    name: str
    match_fields: tuple[MatchFieldInfo, ...]
    action_ids: tuple[int, ...]
    size: int
    implementation_id: int
    supports_timeout: bool

    def field(self, name: str) -> MatchFieldInfo:
        for match_field in self.match_fields:
            if match_field.name == name:
                return match_field
        raise P4InfoError(
            _unknown(
                f"match field of table {self.name!r}", name, [f.name for f in self.match_fields]
            )
        )

    @property
    def needs_priority(self) -> bool:
        kinds = {f.match_type for f in self.match_fields}
        return bool(kinds & {p4i.MatchField.TERNARY, p4i.MatchField.RANGE, p4i.MatchField.OPTIONAL})


@dataclass(frozen=True, slots=True)
class PacketMetadataInfo:
    id: int
    name: str
    bitwidth: int


class P4Schema:
    """An indexed P4Info."""

    def __init__(self, info: p4i.P4Info) -> None:
        self.p4info = info
        self.tables: _Index[TableInfo] = _Index("table")
        self.actions: _Index[ActionInfo] = _Index("action")
        self.counters: _Index[p4i.Counter] = _Index("counter")
        self.direct_counters: _Index[p4i.DirectCounter] = _Index("direct counter")
        self.meters: _Index[p4i.Meter] = _Index("meter")
        self.digests: _Index[p4i.Digest] = _Index("digest")
        self.registers: _Index[p4i.Register] = _Index("register")
        self.action_profiles: _Index[p4i.ActionProfile] = _Index("action profile")
        self.packet_metadata: dict[str, tuple[PacketMetadataInfo, ...]] = {}
        for action in info.actions:
            params = tuple(ParamInfo(p.id, p.name, p.bitwidth) for p in action.params)
            self.actions.add(
                action.preamble, ActionInfo(action.preamble.id, action.preamble.name, params)
            )
        for table in info.tables:
            fields = tuple(
                MatchFieldInfo(f.id, f.name, f.bitwidth, f.match_type) for f in table.match_fields
            )
            self.tables.add(
                table.preamble,
                TableInfo(
                    id=table.preamble.id,
                    name=table.preamble.name,
                    match_fields=fields,
                    action_ids=tuple(ref.id for ref in table.action_refs),
                    size=table.size,
                    implementation_id=table.implementation_id,
                    supports_timeout=table.idle_timeout_behavior
                    == p4i.Table.IdleTimeoutBehavior.NOTIFY_CONTROL,
                ),
            )
        for counter in info.counters:
            self.counters.add(counter.preamble, counter)
        for direct_counter in info.direct_counters:
            self.direct_counters.add(direct_counter.preamble, direct_counter)
        for meter in info.meters:
            self.meters.add(meter.preamble, meter)
        for digest in info.digests:
            self.digests.add(digest.preamble, digest)
        for register in info.registers:
            self.registers.add(register.preamble, register)
        for profile in info.action_profiles:
            self.action_profiles.add(profile.preamble, profile)
        for cpm in info.controller_packet_metadata:
            self.packet_metadata[cpm.preamble.name] = tuple(
                PacketMetadataInfo(m.id, m.name, m.bitwidth) for m in cpm.metadata
            )

    @classmethod
    def load(cls, path: str | Path) -> P4Schema:
        path = Path(path)
        info = p4i.P4Info()
        data = path.read_bytes()
        if path.suffix in (".txt", ".txtpb", ".pbtxt"):
            text_format.Parse(data.decode(), info)
        else:
            info.ParseFromString(data)
        return cls(info)

    # -- table entries -------------------------------------------------------------------

    def action_of(self, table: TableInfo, action_name: str) -> ActionInfo:
        action = self.actions.get(action_name)
        if action.id not in table.action_ids:
            allowed = [self.actions.get_id(i).name for i in table.action_ids]
            raise P4InfoError(_unknown(f"action of table {table.name!r}", action_name, allowed))
        return action

    def encode_action(self, action: ActionInfo, params: Mapping[str, int]) -> p4r.Action:
        missing = {p.name for p in action.params} - set(params)
        if missing:
            raise P4InfoError(f"action {action.name!r}: missing parameter(s) {sorted(missing)}")
        message = p4r.Action(action_id=action.id)
        for name, value in params.items():
            param = action.param(name)
            message.params.add(
                param_id=param.id,
                value=encode_value(value, param.bitwidth, f"{action.name}.{name}"),
            )
        return message

    def encode_match(self, table: TableInfo, name: str, value: MatchValue) -> p4r.FieldMatch | None:
        """One field match, or None when the value is a wildcard (which P4Runtime omits)."""
        info = table.field(name)
        what = f"{table.name}.{name}"
        width = info.bitwidth
        kind = info.match_type
        full = (1 << width) - 1
        message = p4r.FieldMatch(field_id=info.id)
        if kind == p4i.MatchField.EXACT:
            if not isinstance(value, Exact):
                raise P4InfoError(f"{what} is an exact field; got {type(value).__name__}")
            message.exact.value = encode_value(value.value, width, what)
        elif kind == p4i.MatchField.LPM:
            if not isinstance(value, Lpm):
                raise P4InfoError(f"{what} is an lpm field; got {type(value).__name__}")
            if not 0 <= value.prefix_len <= width:
                raise P4InfoError(f"{what}: prefix length {value.prefix_len} outside 0..{width}")
            if value.prefix_len == 0:
                return None
            mask = full ^ ((1 << (width - value.prefix_len)) - 1)
            message.lpm.value = encode_value(value.value & mask, width, what)
            message.lpm.prefix_len = value.prefix_len
        elif kind == p4i.MatchField.TERNARY:
            if not isinstance(value, Ternary):
                raise P4InfoError(f"{what} is a ternary field; got {type(value).__name__}")
            if value.mask == 0:
                return None
            message.ternary.value = encode_value(value.value & value.mask, width, what)
            message.ternary.mask = encode_value(value.mask, width, what)
        elif kind == p4i.MatchField.RANGE:
            if not isinstance(value, Range):
                raise P4InfoError(f"{what} is a range field; got {type(value).__name__}")
            if value.low > value.high:
                raise P4InfoError(f"{what}: range {value.low}..{value.high} is reversed")
            if value.low == 0 and value.high == full:
                return None
            message.range.low = encode_value(value.low, width, what)
            message.range.high = encode_value(value.high, width, what)
        elif kind == p4i.MatchField.OPTIONAL:
            if not isinstance(value, Optional):
                raise P4InfoError(f"{what} is an optional field; got {type(value).__name__}")
            if value.value is None:
                return None
            message.optional.value = encode_value(value.value, width, what)
        else:
            raise P4InfoError(f"{what}: unsupported match type {kind}")
        return message

    def encode_entry(self, entry: TableEntry) -> p4r.TableEntry:
        table = self.tables.get(entry.table)
        action = self.action_of(table, entry.action)
        message = p4r.TableEntry(table_id=table.id)
        if entry.is_default:
            message.is_default_action = True
        else:
            matches = [self.encode_match(table, name, value) for name, value in entry.match]
            message.match.extend(
                sorted((m for m in matches if m is not None), key=lambda m: m.field_id)
            )
            if table.needs_priority:
                if entry.priority <= 0:
                    raise P4InfoError(f"{table.name}: entries need a priority > 0")
                message.priority = entry.priority
        message.action.action.CopyFrom(self.encode_action(action, entry.params_dict))
        return message

    def decode_entry(self, message: p4r.TableEntry) -> TableEntry:
        """The inverse of encode_entry, for reading a switch's entries back."""
        table = self.tables.get_id(message.table_id)
        fields = {f.id: f for f in table.match_fields}
        match: dict[str, MatchValue] = {}
        for field_match in message.match:
            info = fields[field_match.field_id]
            which = field_match.WhichOneof("field_match_type")
            if which == "exact":
                match[info.name] = Exact(decode_value(field_match.exact.value))
            elif which == "lpm":
                match[info.name] = Lpm(
                    decode_value(field_match.lpm.value), field_match.lpm.prefix_len
                )
            elif which == "ternary":
                match[info.name] = Ternary(
                    decode_value(field_match.ternary.value), decode_value(field_match.ternary.mask)
                )
            elif which == "range":
                match[info.name] = Range(
                    decode_value(field_match.range.low), decode_value(field_match.range.high)
                )
            elif which == "optional":
                match[info.name] = Optional(decode_value(field_match.optional.value))
        # Omitted fields are wildcards: spell them out so that decoded entries compare equal.
        for info in table.match_fields:
            if info.name in match:
                continue
            full = (1 << info.bitwidth) - 1
            if info.match_type == p4i.MatchField.LPM:
                match[info.name] = Lpm(0, 0)
            elif info.match_type == p4i.MatchField.TERNARY:
                match[info.name] = Ternary(0, 0)
            elif info.match_type == p4i.MatchField.RANGE:
                match[info.name] = Range(0, full)
            elif info.match_type == p4i.MatchField.OPTIONAL:
                match[info.name] = Optional(None)
        action_message = message.action.action
        action = self.actions.get_id(action_message.action_id)
        names = {p.id: p.name for p in action.params}
        params = {names[p.param_id]: decode_value(p.value) for p in action_message.params}
        return TableEntry.make(
            table.name,
            match,
            action.name,
            params,
            priority=message.priority,
            is_default=message.is_default_action,
        )

    # -- packet metadata -----------------------------------------------------------------

    def packet_metadata_fields(self, kind: str) -> tuple[PacketMetadataInfo, ...]:
        try:
            return self.packet_metadata[kind]
        except KeyError:
            raise P4InfoError(_unknown("controller header", kind, self.packet_metadata)) from None

    def encode_packet_metadata(
        self, kind: str, values: Mapping[str, int]
    ) -> list[p4r.PacketMetadata]:
        infos = self.packet_metadata_fields(kind)
        known = {m.name for m in infos}
        for name in values:
            if name not in known:
                raise P4InfoError(_unknown(f"{kind} metadata field", name, known))
        return [
            p4r.PacketMetadata(
                metadata_id=m.id, value=encode_value(values.get(m.name, 0), m.bitwidth, m.name)
            )
            for m in infos
        ]

    def decode_packet_metadata(
        self, kind: str, metadata: Iterable[p4r.PacketMetadata]
    ) -> dict[str, int]:
        names = {m.id: m.name for m in self.packet_metadata_fields(kind)}
        return {
            names[m.metadata_id]: decode_value(m.value) for m in metadata if m.metadata_id in names
        }

    def digest_fields(self, name: str) -> tuple[str, ...]:
        """Member names of a digest's struct, in order (P4Info type_info)."""
        digest = self.digests.get(name)
        type_name = digest.type_spec.struct.name
        struct = self.p4info.type_info.structs[type_name]
        return tuple(member.name for member in struct.members)
