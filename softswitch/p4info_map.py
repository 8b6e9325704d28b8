"""Binds a P4Info to a loaded program: P4Runtime ids to tables, actions and externs.

The mapping follows PI's for BMv2: objects are matched by their fully qualified names (p4c gives
the JSON and the P4Info the same names), match fields and action parameters by position.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from finsy.proto import p4i

from softswitch import tables as tb
from softswitch.errors import LoadError
from softswitch.externs import CounterArray, MeterArray, RegisterArray, ValueSet
from softswitch.program import Program

MATCH_KINDS = {
    p4i.MatchField.EXACT: "exact",
    p4i.MatchField.LPM: "lpm",
    p4i.MatchField.TERNARY: "ternary",
    p4i.MatchField.RANGE: "range",
    p4i.MatchField.OPTIONAL: "optional",
}

LOG = logging.getLogger(__name__)


@dataclass(slots=True)
class MatchFieldInfo:
    id: int
    name: str
    pos: int
    kind: str
    bitwidth: int


@dataclass(slots=True)
class ActionRef:
    p4_id: int
    name: str
    spec: tb.ActionSpec
    params: dict[int, tuple[int, str, int]]  # param id -> (position, name, bitwidth)
    default_only: bool
    table_only: bool


@dataclass(slots=True)
class TableInfo:
    p4_id: int
    name: str
    table: tb.Table
    fields: dict[int, MatchFieldInfo]
    actions: dict[int, ActionRef]
    action_by_spec: dict[int, int]  # JSON action id -> P4Runtime action id
    const_default: bool
    idle_timeout: bool
    direct_counter_id: int = 0
    direct_meter_id: int = 0
    profile_id: int = 0


@dataclass(slots=True)
class ProfileInfo:
    p4_id: int
    name: str
    profile: tb.ActionProfile
    table_ids: list[int]
    with_selector: bool
    max_group_size: int


@dataclass(slots=True)
class PacketMetadataInfo:
    fields: list[tuple[int, str, int]]  # (id, name, bitwidth), in header order

    @property
    def nbits(self) -> int:
        return sum(w for _, _, w in self.fields)


@dataclass(slots=True)
class P4InfoMap:
    p4info: Any
    program: Program
    tables: dict[int, TableInfo] = field(default_factory=dict)
    table_ids: dict[str, int] = field(default_factory=dict)  # JSON table name -> P4 id
    profiles: dict[int, ProfileInfo] = field(default_factory=dict)
    counters: dict[int, tuple[CounterArray, int]] = field(default_factory=dict)  # (array, unit)
    direct_counters: dict[int, tuple[int, int]] = field(default_factory=dict)  # -> (table id, unit)
    meters: dict[int, MeterArray] = field(default_factory=dict)
    direct_meters: dict[int, int] = field(default_factory=dict)  # -> table id
    registers: dict[int, RegisterArray] = field(default_factory=dict)
    digests: dict[int, int] = field(default_factory=dict)  # P4 digest id -> learn list id
    digest_of_learn: dict[int, int] = field(default_factory=dict)
    value_sets: dict[int, tuple[ValueSet, list[int]]] = field(default_factory=dict)
    packet_in: PacketMetadataInfo | None = None
    packet_out: PacketMetadataInfo | None = None
    actions: dict[int, str] = field(default_factory=dict)  # P4 action id -> name
    absent_tables: dict[int, str] = field(default_factory=dict)  # in the P4Info, not the JSON


def _by_name(items: dict[str, Any], name: str, what: str) -> Any:
    obj = items.get(name)
    if obj is None:
        raise LoadError(f"P4Info {what} {name!r} has no counterpart in the BMv2 JSON")
    return obj


def build_map(p4info: Any, program: Program) -> P4InfoMap:
    m = P4InfoMap(p4info, program)
    action_params: dict[int, dict[int, tuple[int, str, int]]] = {}
    for act in p4info.actions:
        m.actions[act.preamble.id] = act.preamble.name
        action_params[act.preamble.id] = {
            p.id: (i, p.name, p.bitwidth) for i, p in enumerate(act.params)
        }
    direct_counter_of: dict[int, int] = {}
    for dc in p4info.direct_counters:
        direct_counter_of[dc.direct_table_id] = dc.preamble.id
        m.direct_counters[dc.preamble.id] = (dc.direct_table_id, dc.spec.unit)
    direct_meter_of: dict[int, int] = {}
    for dm in p4info.direct_meters:
        direct_meter_of[dm.direct_table_id] = dm.preamble.id
        m.direct_meters[dm.preamble.id] = dm.direct_table_id
    for t in p4info.tables:
        name = t.preamble.name
        if name not in program.tables:
            # p4c keeps a table in the P4Info that its mid-end removed as never applied (dead
            # code); BMv2 takes such a program. Writes to it are refused by name.
            LOG.warning("P4Info table %r is not in the BMv2 JSON (removed by the compiler)", name)
            m.absent_tables[t.preamble.id] = name
            continue
        table: tb.Table = _by_name(program.tables, name, "table")
        if len(t.match_fields) != len(table.kinds):
            raise LoadError(
                f"table {name!r}: P4Info has {len(t.match_fields)} match fields, the JSON "
                f"{len(table.kinds)}"
            )
        fields: dict[int, MatchFieldInfo] = {}
        for pos, mf in enumerate(t.match_fields):
            kind = MATCH_KINDS.get(mf.match_type)
            if kind is None:
                raise LoadError(f"table {name!r}: match field {mf.name!r} has an unsupported kind")
            fields[mf.id] = MatchFieldInfo(mf.id, mf.name, pos, kind, mf.bitwidth)
        actions: dict[int, ActionRef] = {}
        by_spec: dict[int, int] = {}
        for ref in t.action_refs:
            aname = m.actions.get(ref.id)
            if aname is None:
                raise LoadError(f"table {name!r}: unknown action id {ref.id} in P4Info")
            spec = table.actions_by_name(aname)
            if spec is None:
                raise LoadError(f"table {name!r}: action {aname!r} missing from the JSON table")
            actions[ref.id] = ActionRef(
                ref.id,
                aname,
                spec,
                action_params[ref.id],
                ref.scope == p4i.ActionRef.DEFAULT_ONLY,
                ref.scope == p4i.ActionRef.TABLE_ONLY,
            )
            by_spec[spec.id] = ref.id
        info = TableInfo(
            p4_id=t.preamble.id,
            name=name,
            table=table,
            fields=fields,
            actions=actions,
            action_by_spec=by_spec,
            const_default=t.const_default_action_id != 0 or table.default_const,
            idle_timeout=t.idle_timeout_behavior == p4i.Table.NOTIFY_CONTROL,
            direct_counter_id=direct_counter_of.get(t.preamble.id, 0),
            direct_meter_id=direct_meter_of.get(t.preamble.id, 0),
            profile_id=t.implementation_id,
        )
        # Actions that the JSON table also knows but under another id (duplicated NoAction).
        for spec in table.actions.values():
            for ref_id, ref in actions.items():
                if ref.name == spec.name:
                    by_spec.setdefault(spec.id, ref_id)
        m.tables[info.p4_id] = info
        m.table_ids[name] = info.p4_id
    for ap in p4info.action_profiles:
        prof = _by_name(program.profiles, ap.preamble.name, "action profile")
        m.profiles[ap.preamble.id] = ProfileInfo(
            ap.preamble.id,
            ap.preamble.name,
            prof,
            list(ap.table_ids),
            ap.with_selector,
            ap.max_group_size,
        )
    for c in p4info.counters:
        m.counters[c.preamble.id] = (
            _by_name(program.counters, c.preamble.name, "counter"),
            c.spec.unit,
        )
    for mt in p4info.meters:
        m.meters[mt.preamble.id] = _by_name(program.meters, mt.preamble.name, "meter")
    for r in p4info.registers:
        m.registers[r.preamble.id] = _by_name(program.registers, r.preamble.name, "register")
    learn_by_name = {name: lid for lid, (name, _) in program.learn_lists.items()}
    for d in p4info.digests:
        lid = learn_by_name.get(d.preamble.name)
        if lid is None:
            raise LoadError(f"P4Info digest {d.preamble.name!r} has no learn list in the BMv2 JSON")
        m.digests[d.preamble.id] = lid
        m.digest_of_learn[lid] = d.preamble.id
    for vs in p4info.value_sets:
        vset = _by_name(program.value_sets, vs.preamble.name, "value set")
        m.value_sets[vs.preamble.id] = (vset, [mf.bitwidth for mf in vs.match])
    for cpm in p4info.controller_packet_metadata:
        info_md = PacketMetadataInfo([(md.id, md.name, md.bitwidth) for md in cpm.metadata])
        if cpm.preamble.name == "packet_in":
            m.packet_in = info_md
        elif cpm.preamble.name == "packet_out":
            m.packet_out = info_md
    return m
