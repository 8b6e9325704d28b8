"""Table entries between P4Runtime and the switch's tables: match keys, action data, and the
entries a Read returns (used by both Write and Read).
"""

from __future__ import annotations

from typing import Any

from finsy.proto import p4r

from softswitch import tables as tb
from softswitch.p4info_map import TableInfo
from softswitch.p4rt_common import (
    Code,
    P4RTError,
    Pipeline,
    canonical,
    check_width,
)


class TableCodec:
    """Mixin of P4RuntimeService: P4Runtime match and action encodings against the tables."""

    def _table(self, pipe: Pipeline, table_id: int) -> TableInfo:
        info = pipe.map.tables.get(table_id)
        if info is None:
            absent = pipe.map.absent_tables.get(table_id)
            if absent is not None:
                raise P4RTError(
                    Code.NOT_FOUND,
                    f"table {absent!r} is in the P4Info but not in the program: the compiler "
                    "removed it (it is never applied)",
                )
            raise P4RTError(Code.NOT_FOUND, f"table_id {table_id} is not a table of the P4Info")
        return info

    def _match_key(
        self, info: TableInfo, matches: Any
    ) -> tuple[tuple[Any, ...], list[tuple[int, int, int]]]:
        t = info.table
        specs: list[Any] = [None] * len(t.kinds)
        seen: set[int] = set()
        for fm in matches:
            mf = info.fields.get(fm.field_id)
            if mf is None:
                raise P4RTError(
                    Code.INVALID_ARGUMENT,
                    f"table {info.name!r}: unknown match field_id {fm.field_id}",
                )
            if fm.field_id in seen:
                raise P4RTError(
                    Code.INVALID_ARGUMENT,
                    f"table {info.name!r}: match field {mf.name!r} given twice",
                )
            seen.add(fm.field_id)
            which = fm.WhichOneof("field_match_type")
            w = mf.bitwidth
            if which == "exact" and mf.kind == "exact":  # the common case (sessions), checked
                data = fm.exact.value  # as check_width does, its message made only if needed
                value = int.from_bytes(data, "big")
                if not data or value.bit_length() > w:
                    check_width(data, w, f"table {info.name!r}, match field {mf.name!r}")
                specs[mf.pos] = value
                continue
            what = f"table {info.name!r}, match field {mf.name!r}"
            if which != mf.kind:
                raise P4RTError(
                    Code.INVALID_ARGUMENT,
                    f"{what}: match kind {which!r}, the table wants {mf.kind!r}",
                )
            if which == "exact":
                specs[mf.pos] = check_width(fm.exact.value, w, what)
            elif which == "lpm":
                value = check_width(fm.lpm.value, w, what)
                plen = fm.lpm.prefix_len
                if not 0 < plen <= w:
                    raise P4RTError(
                        Code.INVALID_ARGUMENT,
                        f"{what}: prefix_len {plen} out of range (omit the field for a wildcard)",
                    )
                if value & ((1 << (w - plen)) - 1):
                    raise P4RTError(
                        Code.INVALID_ARGUMENT,
                        f"{what}: value has bits set beyond prefix_len {plen}",
                    )
                specs[mf.pos] = (value, plen)
            elif which == "ternary":
                value = check_width(fm.ternary.value, w, what)
                mask = check_width(fm.ternary.mask, w, what + " mask")
                if mask == 0:
                    raise P4RTError(
                        Code.INVALID_ARGUMENT,
                        f"{what}: all-zero mask (omit the field for a wildcard)",
                    )
                if value & ~mask:
                    raise P4RTError(
                        Code.INVALID_ARGUMENT, f"{what}: value has bits set outside the mask"
                    )
                specs[mf.pos] = (value, mask)
            elif which == "range":
                low = check_width(fm.range.low, w, what + " low")
                high = check_width(fm.range.high, w, what + " high")
                if low > high:
                    raise P4RTError(Code.INVALID_ARGUMENT, f"{what}: low > high")
                if low == 0 and high == (1 << w) - 1:
                    raise P4RTError(
                        Code.INVALID_ARGUMENT, f"{what}: full range (omit the field for a wildcard)"
                    )
                specs[mf.pos] = (low, high)
            else:
                specs[mf.pos] = check_width(fm.optional.value, w, what)
        for mf in info.fields.values():
            if specs[mf.pos] is not None:
                continue
            if mf.kind in ("exact",):
                raise P4RTError(
                    Code.INVALID_ARGUMENT,
                    f"table {info.name!r}: exact match field {mf.name!r} is missing",
                )
            if mf.kind in {"lpm", "ternary"}:
                specs[mf.pos] = (0, 0)
            elif mf.kind == "range":
                specs[mf.pos] = (0, (1 << mf.bitwidth) - 1)
            else:  # optional wildcard
                specs[mf.pos] = None
        for mf in info.fields.values():
            if mf.kind == "optional" and t.kinds[mf.pos] == "ternary":  # p4c's JSON kind
                v = specs[mf.pos]
                specs[mf.pos] = (0, 0) if v is None else (v, (1 << mf.bitwidth) - 1)
        return tuple(specs), []

    def _action_data(
        self, info: TableInfo, action: Any, default: bool
    ) -> tuple[tb.ActionSpec, tuple[int, ...], int]:
        ref = info.actions.get(action.action_id)
        if ref is None:
            raise P4RTError(
                Code.INVALID_ARGUMENT,
                f"table {info.name!r}: action_id {action.action_id} is not an action of this table",
            )
        if default and ref.table_only:
            raise P4RTError(
                Code.INVALID_ARGUMENT,
                f"table {info.name!r}: action {ref.name!r} cannot be the default (@tableonly)",
            )
        if not default and ref.default_only:
            raise P4RTError(
                Code.INVALID_ARGUMENT, f"table {info.name!r}: action {ref.name!r} is @defaultonly"
            )
        return ref.spec, self._params(ref.name, ref.params, action), ref.p4_id

    def _params(
        self, name: str, params: dict[int, tuple[int, str, int]], action: Any
    ) -> tuple[int, ...]:
        values: list[int | None] = [None] * len(params)
        for p in action.params:
            spec = params.get(p.param_id)
            if spec is None:
                raise P4RTError(
                    Code.INVALID_ARGUMENT, f"action {name!r}: unknown param_id {p.param_id}"
                )
            pos, pname, width = spec
            if values[pos] is not None:
                raise P4RTError(
                    Code.INVALID_ARGUMENT, f"action {name!r}: param {pname!r} given twice"
                )
            data = p.value
            value = int.from_bytes(data, "big")
            if not data or value.bit_length() > width:  # check_width's message, made if needed
                check_width(data, width, f"action {name!r}, param {pname!r}")
            values[pos] = value
        missing = [params_name for (pos, params_name, _) in params.values() if values[pos] is None]
        if missing:
            raise P4RTError(Code.INVALID_ARGUMENT, f"action {name!r}: missing params {missing}")
        return tuple(v for v in values if v is not None)

    def _profile_action(self, pipe: Pipeline, profile_id: int, action: Any) -> tb.ActionSpec:
        pinfo = pipe.map.profiles.get(profile_id)
        if pinfo is None:
            raise P4RTError(Code.NOT_FOUND, f"action_profile_id {profile_id} unknown")
        for tid in pinfo.table_ids:
            info = pipe.map.tables.get(tid)
            ref = None if info is None else info.actions.get(action.action_id)
            if ref is not None:
                return ref.spec
        raise P4RTError(
            Code.INVALID_ARGUMENT,
            f"action profile {pinfo.name!r}: action_id {action.action_id} not allowed",
        )

    def entry_proto(
        self, info: TableInfo, entry: tb.Entry, with_counter: bool, with_meter: bool
    ) -> Any:
        te = p4r.TableEntry(table_id=info.p4_id)
        fields = sorted(info.fields.values(), key=lambda mf: mf.id) if entry.key else []
        for mf in fields:
            spec = entry.key[mf.pos]
            fm = p4r.FieldMatch(field_id=mf.id)
            if mf.kind == "exact":
                fm.exact.value = canonical(spec)
            elif mf.kind == "lpm":
                if spec[1] == 0:
                    continue
                fm.lpm.value = canonical(spec[0])
                fm.lpm.prefix_len = spec[1]
            elif mf.kind == "ternary":
                if spec[1] == 0:
                    continue
                fm.ternary.value = canonical(spec[0])
                fm.ternary.mask = canonical(spec[1])
            elif mf.kind == "range":
                if spec == (0, (1 << mf.bitwidth) - 1):
                    continue
                fm.range.low = canonical(spec[0])
                fm.range.high = canonical(spec[1])
            else:
                if isinstance(spec, tuple):
                    spec = spec[0] if spec[1] else None
                if spec is None:
                    continue
                fm.optional.value = canonical(spec)
            te.match.append(fm)
        te.priority = entry.priority
        if entry.member is not None:
            te.action.action_profile_member_id = entry.member.id
        elif entry.group is not None:
            te.action.action_profile_group_id = entry.group.id
        elif entry.action is not None:
            self._action_proto(
                info.action_by_spec.get(entry.action.id, 0),
                entry.action,
                entry.data,
                te.action.action,
            )
        te.controller_metadata = entry.controller_metadata
        te.metadata = entry.metadata
        te.idle_timeout_ns = entry.timeout_ns
        te.is_const = entry.is_const
        if with_counter and entry.ctr is not None:
            te.counter_data.packet_count = entry.ctr[0]
            te.counter_data.byte_count = entry.ctr[1]
        if with_meter and entry.meter is not None:
            cfg = entry.meter.config()
            if cfg is not None:
                (
                    te.meter_config.cir,
                    te.meter_config.cburst,
                    te.meter_config.pir,
                    te.meter_config.pburst,
                ) = cfg
        return te

    @staticmethod
    def _action_proto(action_id: int, spec: tb.ActionSpec, data: tuple[int, ...], out: Any) -> None:
        out.action_id = action_id
        for i, value in enumerate(data):
            out.params.append(p4r.Action.Param(param_id=i + 1, value=canonical(value)))
