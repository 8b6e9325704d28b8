"""P4Runtime Write: each entity kind's INSERT/MODIFY/DELETE against the switch, one update at a
time (the service collects per-update errors).
"""

from __future__ import annotations

import time
from typing import Any

from finsy.proto import p4r

from softswitch import tables as tb
from softswitch.engine import CloneSession, Replica
from softswitch.externs import Meter
from softswitch.p4info_map import TableInfo
from softswitch.p4rt_codec import TableCodec
from softswitch.p4rt_common import (
    Code,
    DigestConfig,
    DigestState,
    P4RTError,
    Pipeline,
    check_width,
    to_int,
)

# Entity kind -> the WriteHandlers method that writes it (pipe, update type, the entity).
_WRITERS = {
    "table_entry": "_write_table_entry",
    "action_profile_member": "_write_member",
    "action_profile_group": "_write_group",
    "counter_entry": "_write_counter",
    "direct_counter_entry": "_write_direct_counter",
    "meter_entry": "_write_meter",
    "direct_meter_entry": "_write_direct_meter",
    "register_entry": "_write_register",
    "packet_replication_engine_entry": "_write_pre",
    "digest_entry": "_write_digest",
    "value_set_entry": "_write_value_set",
}


class WriteHandlers(TableCodec):
    """Mixin of P4RuntimeService: one Update at a time."""

    def _write_one(self, pipe: Pipeline, update: Any) -> None:
        U = p4r.Update  # noqa: N806
        kind = update.type
        if kind not in (U.INSERT, U.MODIFY, U.DELETE):
            raise P4RTError(Code.INVALID_ARGUMENT, "update type is UNSPECIFIED")
        entity = update.entity
        which = entity.WhichOneof("entity")
        method = _WRITERS.get(which or "")
        if method is None:
            raise P4RTError(Code.UNIMPLEMENTED, f"entity {which!r} is not supported")
        getattr(self, method)(pipe, kind, getattr(entity, which))

    def _write_table_entry(self, pipe: Pipeline, kind: int, te: Any) -> None:
        U = p4r.Update  # noqa: N806
        if te.is_const:
            # the spec's TableEntry: is_const must be false in any INSERT, MODIFY or DELETE
            raise P4RTError(Code.INVALID_ARGUMENT, "is_const is read-only: it must be false")
        info = self._table(pipe, te.table_id)
        t = info.table
        if te.is_default_action:
            self._write_default(pipe, info, kind, te)
            return
        if t.immutable:
            raise P4RTError(
                Code.PERMISSION_DENIED, f"table {info.name!r} has const entries and is read-only"
            )
        if not t.kinds:
            raise P4RTError(
                Code.INVALID_ARGUMENT,
                f"table {info.name!r} is keyless: only its default action can be set",
            )
        key, _ = self._match_key(info, te.match)
        if t.needs_priority:
            if te.priority <= 0:
                raise P4RTError(
                    Code.INVALID_ARGUMENT,
                    f"table {info.name!r}: priority must be > 0 for ternary/range/optional tables",
                )
        elif te.priority != 0:
            raise P4RTError(
                Code.INVALID_ARGUMENT,
                f"table {info.name!r}: priority must be 0 for exact/lpm tables",
            )
        ckey = t.canonical(key, te.priority)
        existing = t.entries.get(ckey)
        if kind == U.DELETE:
            if existing is None:
                raise P4RTError(Code.NOT_FOUND, f"table {info.name!r}: no such entry")
            t.delete(existing)
            self._release_refs(t, existing)
            return
        if kind == U.INSERT and existing is not None:
            raise P4RTError(Code.ALREADY_EXISTS, f"table {info.name!r}: entry already exists")
        if kind == U.MODIFY and existing is None:
            raise P4RTError(Code.NOT_FOUND, f"table {info.name!r}: no such entry")
        if kind == U.INSERT and t.max_size and len(t.entries) >= t.max_size:
            raise P4RTError(
                Code.RESOURCE_EXHAUSTED, f"table {info.name!r} is full ({t.max_size} entries)"
            )
        if te.idle_timeout_ns and not t.support_timeout:
            raise P4RTError(
                Code.INVALID_ARGUMENT, f"table {info.name!r} does not support idle timeout"
            )
        if te.HasField("counter_data") and not t.with_counters:
            raise P4RTError(Code.INVALID_ARGUMENT, f"table {info.name!r} has no direct counter")
        if te.HasField("meter_config") and t.direct_meter is None:
            raise P4RTError(Code.INVALID_ARGUMENT, f"table {info.name!r} has no direct meter")
        if not te.HasField("action"):
            raise P4RTError(Code.INVALID_ARGUMENT, f"table {info.name!r}: action is missing")
        entry = self._entry_with_action(pipe, info, key, te)
        entry.timeout_ns = te.idle_timeout_ns
        entry.last_hit = time.monotonic_ns()
        entry.controller_metadata = te.controller_metadata
        entry.metadata = bytes(te.metadata)
        if existing is not None:
            if (
                entry.ctr is not None
                and existing.ctr is not None
                and not te.HasField("counter_data")
            ):
                entry.ctr = existing.ctr
            t.delete(existing)
            self._release_refs(t, existing)
        if te.HasField("counter_data") and entry.ctr is not None:
            entry.ctr[0] = te.counter_data.packet_count
            entry.ctr[1] = te.counter_data.byte_count
        if te.HasField("meter_config") and entry.meter is not None:
            mc = te.meter_config
            entry.meter.configure(mc.cir, mc.cburst, mc.pir, mc.pburst)
        t.insert(entry)
        self._take_refs(t, entry)
        pipe.idle.arm(t, entry, info)

    def _entry_with_action(
        self, pipe: Pipeline, info: TableInfo, key: tuple[Any, ...], te: Any
    ) -> tb.Entry:
        t = info.table
        which = te.action.WhichOneof("type")
        if t.impl == "simple":
            if which != "action":
                raise P4RTError(
                    Code.INVALID_ARGUMENT,
                    f"table {info.name!r} is direct: it needs an action, not {which!r}",
                )
            spec, data, _ = self._action_data(info, te.action.action, default=False)
            return t.new_entry(key, te.priority, spec, data)
        prof = t.profile
        assert prof is not None
        if which == "action_profile_member_id":
            member = prof.members.get(te.action.action_profile_member_id)
            if member is None:
                raise P4RTError(
                    Code.NOT_FOUND,
                    f"table {info.name!r}: member "
                    f"{te.action.action_profile_member_id} does not exist",
                )
            entry = t.new_entry(key, te.priority, None, (), member=member)
            entry.nxt = None
            return entry
        if which == "action_profile_group_id":
            if prof.selector_hash is None:
                raise P4RTError(
                    Code.INVALID_ARGUMENT,
                    f"table {info.name!r}: its action profile has no selector (no groups)",
                )
            group = prof.groups.get(te.action.action_profile_group_id)
            if group is None:
                raise P4RTError(
                    Code.NOT_FOUND,
                    f"table {info.name!r}: group "
                    f"{te.action.action_profile_group_id} does not exist",
                )
            if not group.members:
                # BMv2 refuses it (EMPTY_GRP; PI reports it as UNKNOWN): a lookup that lands on
                # an empty group has no action to run.
                raise P4RTError(
                    Code.UNKNOWN,
                    f"table {info.name!r}: group {group.id} is empty",
                )
            return t.new_entry(key, te.priority, None, (), group=group)
        raise P4RTError(
            Code.INVALID_ARGUMENT,
            f"table {info.name!r} is indirect: use a member or group id ({which!r} given)",
        )

    @staticmethod
    def _profile_ref(entry: tb.Entry) -> tuple[str, int] | None:
        """The action profile member or group an indirect entry refers to."""
        if entry.member:
            return ("m", entry.member.id)
        if entry.group:
            return ("g", entry.group.id)
        return None

    @classmethod
    def _take_refs(cls, t: tb.Table, entry: tb.Entry) -> None:
        ref = cls._profile_ref(entry)
        if t.profile is not None and ref:
            t.profile.refcount[ref] = t.profile.refcount.get(ref, 0) + 1

    @classmethod
    def _release_refs(cls, t: tb.Table, entry: tb.Entry) -> None:
        ref = cls._profile_ref(entry)
        if t.profile is not None and ref and ref in t.profile.refcount:
            t.profile.refcount[ref] -= 1
            if t.profile.refcount[ref] <= 0:
                del t.profile.refcount[ref]

    def _write_default(self, pipe: Pipeline, info: TableInfo, kind: int, te: Any) -> None:
        U = p4r.Update  # noqa: N806
        t = info.table
        if te.match:
            raise P4RTError(
                Code.INVALID_ARGUMENT, f"table {info.name!r}: a default entry has no match"
            )
        if kind != U.MODIFY:
            raise P4RTError(
                Code.INVALID_ARGUMENT,
                f"table {info.name!r}: the default entry can only be modified",
            )
        if info.const_default:
            raise P4RTError(
                Code.PERMISSION_DENIED, f"table {info.name!r}: the default action is const"
            )
        if t.impl != "simple":
            raise P4RTError(
                Code.UNIMPLEMENTED, f"table {info.name!r}: default action of an indirect table"
            )
        if not te.HasField("action"):
            if t.initial_default is not None:
                spec, data = t.initial_default
                t.set_default(spec, data)
            return
        if te.action.WhichOneof("type") != "action":
            raise P4RTError(
                Code.INVALID_ARGUMENT,
                f"table {info.name!r}: the default entry needs a direct action",
            )
        spec, data, _ = self._action_data(info, te.action.action, default=True)
        t.set_default(spec, data)

    def _write_member(self, pipe: Pipeline, kind: int, m: Any) -> None:
        U = p4r.Update  # noqa: N806
        pinfo = pipe.map.profiles.get(m.action_profile_id)
        if pinfo is None:
            raise P4RTError(Code.NOT_FOUND, f"action_profile_id {m.action_profile_id} unknown")
        prof = pinfo.profile
        existing = prof.members.get(m.member_id)
        if kind == U.DELETE:
            if existing is None:
                raise P4RTError(Code.NOT_FOUND, f"member {m.member_id} does not exist")
            if prof.refcount.get(("m", m.member_id)) or any(
                m.member_id in g.members for g in prof.groups.values()
            ):
                raise P4RTError(Code.FAILED_PRECONDITION, f"member {m.member_id} is in use")
            prof.delete_member(m.member_id)
            return
        if kind == U.INSERT and existing is not None:
            raise P4RTError(Code.ALREADY_EXISTS, f"member {m.member_id} already exists")
        if kind == U.MODIFY and existing is None:
            raise P4RTError(Code.NOT_FOUND, f"member {m.member_id} does not exist")
        spec = self._profile_action(pipe, m.action_profile_id, m.action)
        ref_params = None
        for tid in pinfo.table_ids:
            info = pipe.map.tables.get(tid)  # None: a table the compiler removed
            ref = None if info is None else info.actions.get(m.action.action_id)
            if ref is not None:
                ref_params = ref
                break
        assert ref_params is not None
        data = self._params(ref_params.name, ref_params.params, m.action)
        if (
            kind == U.INSERT
            and pinfo.profile.max_size
            and len(prof.members) >= pinfo.profile.max_size
        ):
            raise P4RTError(Code.RESOURCE_EXHAUSTED, f"action profile {pinfo.name!r} is full")
        if existing is not None:
            existing.action = spec
            existing.data = data
            prof.refresh_groups_of(m.member_id)
        else:
            prof.add_member(tb.Member(m.member_id, spec, data))

    def _write_group(self, pipe: Pipeline, kind: int, g: Any) -> None:
        U = p4r.Update  # noqa: N806
        pinfo = pipe.map.profiles.get(g.action_profile_id)
        if pinfo is None:
            raise P4RTError(Code.NOT_FOUND, f"action_profile_id {g.action_profile_id} unknown")
        prof = pinfo.profile
        if not pinfo.with_selector:
            raise P4RTError(
                Code.INVALID_ARGUMENT, f"action profile {pinfo.name!r} has no selector: no groups"
            )
        existing = prof.groups.get(g.group_id)
        if kind == U.DELETE:
            if existing is None:
                raise P4RTError(Code.NOT_FOUND, f"group {g.group_id} does not exist")
            if prof.refcount.get(("g", g.group_id)):
                raise P4RTError(Code.FAILED_PRECONDITION, f"group {g.group_id} is in use")
            prof.delete_group(g.group_id)
            return
        if kind == U.INSERT and existing is not None:
            raise P4RTError(Code.ALREADY_EXISTS, f"group {g.group_id} already exists")
        if kind == U.MODIFY and existing is None:
            raise P4RTError(Code.NOT_FOUND, f"group {g.group_id} does not exist")
        members: dict[int, int] = {}
        for gm in g.members:
            if gm.member_id not in prof.members:
                raise P4RTError(
                    Code.NOT_FOUND, f"group {g.group_id}: member {gm.member_id} does not exist"
                )
            if gm.member_id in members:
                raise P4RTError(
                    Code.INVALID_ARGUMENT, f"group {g.group_id}: member {gm.member_id} listed twice"
                )
            if gm.weight <= 0:  # as PI: no default weight
                raise P4RTError(
                    Code.INVALID_ARGUMENT,
                    f"group {g.group_id}: member {gm.member_id}: weight must be a positive integer",
                )
            members[gm.member_id] = gm.weight
        # max_size as PI checks it (validate_max_group_size, group_update_members): the
        # client's value is fixed at creation; the P4Info's max_group_size bounds it.
        if existing is None:
            if g.max_size < 0:
                raise P4RTError(Code.INVALID_ARGUMENT, f"group {g.group_id}: max_size < 0")
            if pinfo.max_group_size and g.max_size > pinfo.max_group_size:
                raise P4RTError(
                    Code.INVALID_ARGUMENT,
                    f"group {g.group_id}: max_size {g.max_size} exceeds the P4Info's "
                    f"max_group_size {pinfo.max_group_size}",
                )
            user_max = g.max_size
        else:
            user_max = existing.max_size
            if g.max_size and g.max_size != user_max:
                raise P4RTError(
                    Code.INVALID_ARGUMENT,
                    f"group {g.group_id}: max_size cannot change after the group is created",
                )
        limit = user_max or pinfo.max_group_size
        if limit and sum(members.values()) > limit:
            raise P4RTError(
                Code.RESOURCE_EXHAUSTED,
                f"group {g.group_id}: the sum of member weights exceeds the group's size {limit}",
            )
        group = existing or tb.Group(g.group_id, user_max)
        prof.set_group_members(group, members)

    def _write_counter(self, pipe: Pipeline, kind: int, c: Any) -> None:
        if kind != p4r.Update.MODIFY:
            raise P4RTError(Code.INVALID_ARGUMENT, "counter entries can only be modified")
        item = pipe.map.counters.get(c.counter_id)
        if item is None:
            raise P4RTError(Code.NOT_FOUND, f"counter_id {c.counter_id} unknown")
        arr = item[0]
        indexes = [c.index.index] if c.HasField("index") else list(range(arr.size))
        for i in indexes:
            _check_index("counter", arr.name, i, arr.size)
        if not c.HasField("data"):
            return  # the spec's CounterEntry: no data, the value is not modified
        for i in indexes:
            arr.cells[i][0] = c.data.packet_count
            arr.cells[i][1] = c.data.byte_count

    def _direct_entry(self, pipe: Pipeline, te: Any) -> tb.Entry:
        info = self._table(pipe, te.table_id)
        key, _ = self._match_key(info, te.match)
        entry = info.table.entries.get(info.table.canonical(key, te.priority))
        if entry is None:
            raise P4RTError(Code.NOT_FOUND, f"table {info.name!r}: no such entry")
        return entry

    def _write_direct_counter(self, pipe: Pipeline, kind: int, c: Any) -> None:
        if kind != p4r.Update.MODIFY:
            raise P4RTError(Code.INVALID_ARGUMENT, "direct counter entries can only be modified")
        entry = self._direct_entry(pipe, c.table_entry)
        if entry.ctr is None:
            raise P4RTError(Code.INVALID_ARGUMENT, "the table has no direct counter")
        if c.HasField("data"):  # else not modified, as for a CounterEntry
            entry.ctr[0] = c.data.packet_count
            entry.ctr[1] = c.data.byte_count

    def _write_meter(self, pipe: Pipeline, kind: int, m: Any) -> None:
        if kind != p4r.Update.MODIFY:
            raise P4RTError(Code.INVALID_ARGUMENT, "meter entries can only be modified")
        arr = pipe.map.meters.get(m.meter_id)
        if arr is None:
            raise P4RTError(Code.NOT_FOUND, f"meter_id {m.meter_id} unknown")
        indexes = [m.index.index] if m.HasField("index") else list(range(arr.size))
        for i in indexes:
            _check_index("meter", arr.name, i, arr.size)
        for i in indexes:
            self._configure_meter(arr.meters[i], m)

    @staticmethod
    def _configure_meter(meter: Meter, m: Any) -> None:
        if m.HasField("config"):
            c = m.config
            if c.cir > c.pir:
                raise P4RTError(Code.INVALID_ARGUMENT, "meter config: cir > pir")
            meter.configure(c.cir, c.cburst, c.pir, c.pburst)
        else:
            meter.clear()

    def _write_direct_meter(self, pipe: Pipeline, kind: int, m: Any) -> None:
        if kind != p4r.Update.MODIFY:
            raise P4RTError(Code.INVALID_ARGUMENT, "direct meter entries can only be modified")
        entry = self._direct_entry(pipe, m.table_entry)
        if entry.meter is None:
            raise P4RTError(Code.INVALID_ARGUMENT, "the table has no direct meter")
        self._configure_meter(entry.meter, m)

    def _write_register(self, pipe: Pipeline, kind: int, r: Any) -> None:
        if kind != p4r.Update.MODIFY:
            raise P4RTError(Code.INVALID_ARGUMENT, "register entries can only be modified")
        arr = pipe.map.registers.get(r.register_id)
        if arr is None:
            raise P4RTError(Code.NOT_FOUND, f"register_id {r.register_id} unknown")
        if r.data.WhichOneof("data") != "bitstring":
            raise P4RTError(
                Code.INVALID_ARGUMENT, f"register {arr.name!r}: data must be a bitstring"
            )
        value = check_width(r.data.bitstring, arr.bitwidth, f"register {arr.name!r}")
        indexes = [r.index.index] if r.HasField("index") else list(range(arr.size))
        for i in indexes:
            _check_index("register", arr.name, i, arr.size)
        for i in indexes:
            arr.cells[i] = value

    @staticmethod
    def _replicas(reps: Any) -> list[Replica]:
        out = []
        for r in reps:
            port = to_int(r.port) if r.WhichOneof("port_kind") == "port" else r.egress_port
            out.append(Replica(port, r.instance))
        return out

    def _write_pre(self, pipe: Pipeline, kind: int, e: Any) -> None:
        U = p4r.Update  # noqa: N806
        pre = pipe.dataplane.pre
        which = e.WhichOneof("type")
        if which == "multicast_group_entry":
            g = e.multicast_group_entry
            if g.multicast_group_id == 0:
                raise P4RTError(Code.INVALID_ARGUMENT, "multicast_group_id 0 is not valid")
            exists = g.multicast_group_id in pre.groups
            if kind == U.DELETE:
                if not exists:
                    raise P4RTError(
                        Code.NOT_FOUND, f"multicast group {g.multicast_group_id} does not exist"
                    )
                del pre.groups[g.multicast_group_id]
                return
            if kind == U.INSERT and exists:
                raise P4RTError(
                    Code.ALREADY_EXISTS, f"multicast group {g.multicast_group_id} already exists"
                )
            if kind == U.MODIFY and not exists:
                raise P4RTError(
                    Code.NOT_FOUND, f"multicast group {g.multicast_group_id} does not exist"
                )
            reps = self._replicas(g.replicas)
            if len({(r.port, r.rid) for r in reps}) != len(reps):
                raise P4RTError(Code.INVALID_ARGUMENT, "duplicate replica in the multicast group")
            pre.groups[g.multicast_group_id] = reps
        elif which == "clone_session_entry":
            c = e.clone_session_entry
            if c.session_id == 0:
                raise P4RTError(Code.INVALID_ARGUMENT, "clone session_id 0 is not valid")
            exists = c.session_id in pre.clones
            if kind == U.DELETE:
                if not exists:
                    raise P4RTError(Code.NOT_FOUND, f"clone session {c.session_id} does not exist")
                del pre.clones[c.session_id]
                return
            if kind == U.INSERT and exists:
                raise P4RTError(Code.ALREADY_EXISTS, f"clone session {c.session_id} already exists")
            if kind == U.MODIFY and not exists:
                raise P4RTError(Code.NOT_FOUND, f"clone session {c.session_id} does not exist")
            pre.clones[c.session_id] = CloneSession(
                self._replicas(c.replicas), c.class_of_service, c.packet_length_bytes
            )
        else:
            raise P4RTError(Code.INVALID_ARGUMENT, "empty packet replication engine entry")

    def _write_digest(self, pipe: Pipeline, kind: int, d: Any) -> None:
        U = p4r.Update  # noqa: N806
        if d.digest_id not in pipe.map.digests:
            raise P4RTError(Code.NOT_FOUND, f"digest_id {d.digest_id} unknown")
        digests = pipe.digests
        exists = d.digest_id in digests
        if kind == U.DELETE:
            if not exists:
                raise P4RTError(Code.NOT_FOUND, f"digest {d.digest_id} is not configured")
            del digests[d.digest_id]
            return
        if kind == U.INSERT and exists:
            raise P4RTError(Code.ALREADY_EXISTS, f"digest {d.digest_id} is already configured")
        if kind == U.MODIFY and not exists:
            raise P4RTError(Code.NOT_FOUND, f"digest {d.digest_id} is not configured")
        cfg = DigestConfig(d.config.max_timeout_ns, d.config.max_list_size, d.config.ack_timeout_ns)
        if exists:
            digests[d.digest_id].config = cfg
        else:
            digests[d.digest_id] = DigestState(cfg)

    def _write_value_set(self, pipe: Pipeline, kind: int, v: Any) -> None:
        if kind != p4r.Update.MODIFY:
            raise P4RTError(Code.INVALID_ARGUMENT, "value set entries can only be modified")
        item = pipe.map.value_sets.get(v.value_set_id)
        if item is None:
            raise P4RTError(Code.NOT_FOUND, f"value_set_id {v.value_set_id} unknown")
        vset, widths = item
        members: list[tuple[int, int]] = []
        for member in v.members:
            value = mask = 0
            by_id = {fm.field_id: fm for fm in member.match}
            for i, w in enumerate(widths):
                padded = (w + 7) // 8 * 8
                fm = by_id.get(i + 1)
                fv, fmask = 0, 0
                if fm is not None:
                    which = fm.WhichOneof("field_match_type")
                    if which == "exact":
                        fv, fmask = check_width(fm.exact.value, w, vset.name), (1 << w) - 1
                    elif which == "ternary":
                        fv = check_width(fm.ternary.value, w, vset.name)
                        fmask = check_width(fm.ternary.mask, w, vset.name)
                    else:
                        raise P4RTError(
                            Code.INVALID_ARGUMENT, f"value set {vset.name!r}: match kind {which!r}"
                        )
                value = (value << padded) | fv
                mask = (mask << padded) | fmask
            members.append((value, mask))
        if vset.max_size and len(members) > vset.max_size:
            raise P4RTError(
                Code.RESOURCE_EXHAUSTED, f"value set {vset.name!r} holds at most {vset.max_size}"
            )
        vset.members = members


def _check_index(kind: str, name: str, index: int, size: int) -> None:
    """The spec's indexed externs: a negative index is INVALID_ARGUMENT, one past the array's
    end OUT_OF_RANGE."""
    if index < 0:
        raise P4RTError(Code.INVALID_ARGUMENT, f"{kind} {name!r}: negative index {index}")
    if index >= size:
        raise P4RTError(Code.OUT_OF_RANGE, f"{kind} {name!r}: index {index} out of range")
