"""P4Runtime Read: each entity kind, with wildcards, as the switch holds it."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

from finsy.proto import p4i, p4r

from softswitch import tables as tb
from softswitch.p4info_map import TableInfo
from softswitch.p4rt_codec import TableCodec
from softswitch.p4rt_common import (
    Code,
    P4RTError,
    Pipeline,
    canonical,
)

# Entity kind -> the ReadHandlers method that reads it (pipe, the entity as a filter).
_READERS = {
    "table_entry": "_read_tables",
    "action_profile_member": "_read_members",
    "action_profile_group": "_read_groups",
    "counter_entry": "_read_counters",
    "direct_counter_entry": "_read_direct_counters",
    "meter_entry": "_read_meters",
    "direct_meter_entry": "_read_direct_meters",
    "register_entry": "_read_registers",
    "packet_replication_engine_entry": "_read_pre",
    "digest_entry": "_read_digests",
    "value_set_entry": "_read_value_sets",
}


class ReadHandlers(TableCodec):
    """Mixin of P4RuntimeService: the entities one Read request asks for."""

    def _read_one(self, pipe: Pipeline, ent: Any) -> list[Any]:
        which = ent.WhichOneof("entity")
        if which is None:
            # the spec's Wildcard Reads: the entity oneof must always be set
            raise P4RTError(Code.INVALID_ARGUMENT, "an Entity with no entity set")
        method = _READERS.get(which)
        if method is None:
            raise P4RTError(Code.UNIMPLEMENTED, f"reading {which!r} is not supported")
        result: list[Any] = getattr(self, method)(pipe, getattr(ent, which))
        return result

    def _read_direct_counters(self, pipe: Pipeline, d: Any) -> list[Any]:
        return self._read_direct(pipe, d.table_entry, counters=True)

    def _read_direct_meters(self, pipe: Pipeline, d: Any) -> list[Any]:
        return self._read_direct(pipe, d.table_entry, counters=False)

    def _matching_entries(self, pipe: Pipeline, te: Any) -> list[tuple[TableInfo, tb.Entry | None]]:
        """The entries a TableEntry selects, by the spec's table Wildcard Reads: table_id (0:
        every table, and then no other filter), then match (exact: one key), action id (direct
        tables), priority, controller_metadata and metadata, each left at its default to match
        anything; is_default_action selects the default entry instead."""
        action_id = te.action.action.action_id if te.HasField("action") else 0
        if te.HasField("action") and te.action.WhichOneof("type") != "action":
            raise P4RTError(Code.INVALID_ARGUMENT, "a Read filters on a direct action's id only")
        filtered = te.match or action_id or te.priority or te.controller_metadata or te.metadata
        if not te.table_id:
            if filtered or te.is_default_action:
                raise P4RTError(
                    Code.INVALID_ARGUMENT, "a Read of every table (table_id 0) takes no filter"
                )
            return [(i, e) for i in pipe.map.tables.values() for e in i.table.iter_entries()]
        info = self._table(pipe, te.table_id)
        t = info.table
        if te.is_default_action:
            if te.match or te.priority:
                raise P4RTError(
                    Code.INVALID_ARGUMENT, "the default entry has no match and priority 0"
                )
            return [(info, t.default)]
        if te.match:
            key, _ = self._match_key(info, te.match)
            if t.needs_priority and not te.priority:
                candidates = [e for e in t.iter_entries() if e.key == key]
            else:
                entry = t.entries.get(t.canonical(key, te.priority))
                candidates = [entry] if entry is not None else []
        else:
            candidates = list(t.iter_entries())
        if action_id:
            spec = info.actions.get(action_id)
            if spec is None:
                raise P4RTError(
                    Code.INVALID_ARGUMENT,
                    f"table {info.name!r}: action_id {action_id} is not an action of this table",
                )
        out: list[tuple[TableInfo, tb.Entry | None]] = []
        for e in candidates:
            if te.priority and e.priority != te.priority:
                continue
            if action_id and (
                e.action is None
                or e.member
                or e.group
                or info.action_by_spec.get(e.action.id) != action_id
            ):
                continue
            if te.controller_metadata and e.controller_metadata != te.controller_metadata:
                continue
            if te.metadata and e.metadata != te.metadata:
                continue
            out.append((info, e))
        return out

    def _read_tables(self, pipe: Pipeline, te: Any) -> list[Any]:
        out = []
        now = time.monotonic_ns()
        for info, entry in self._matching_entries(pipe, te):
            if entry is None:
                continue
            proto = self.entry_proto(
                info, entry, te.HasField("counter_data"), te.HasField("meter_config")
            )
            if te.is_default_action:
                del proto.match[:]
                proto.is_default_action = True
                proto.priority = 0
            if te.HasField("time_since_last_hit") and info.table.support_timeout:
                pipe.dataplane.sync_hit(entry)
                proto.time_since_last_hit.elapsed_ns = now - entry.last_hit
            out.append(p4r.Entity(table_entry=proto))
        return out

    def _read_direct(self, pipe: Pipeline, te: Any, counters: bool) -> list[Any]:
        out = []
        for info, entry in self._matching_entries(pipe, te):
            if entry is None:
                continue
            proto = self.entry_proto(info, entry, False, False)
            if counters:
                if entry.ctr is None:
                    continue
                dce = p4r.DirectCounterEntry(table_entry=proto)
                dce.data.packet_count = entry.ctr[0]
                dce.data.byte_count = entry.ctr[1]
                out.append(p4r.Entity(direct_counter_entry=dce))
            else:
                if entry.meter is None:
                    continue
                dme = p4r.DirectMeterEntry(table_entry=proto)
                cfg = entry.meter.config()
                if cfg is not None:
                    dme.config.cir, dme.config.cburst, dme.config.pir, dme.config.pburst = cfg
                out.append(p4r.Entity(direct_meter_entry=dme))
        return out

    def _read_members(self, pipe: Pipeline, m: Any) -> list[Any]:
        out = []
        for pid, pinfo in _profiles(pipe, m.action_profile_id):
            for mid, member in sorted(pinfo.profile.members.items()):
                if m.member_id and mid != m.member_id:
                    continue
                proto = p4r.ActionProfileMember(action_profile_id=pid, member_id=mid)
                aid = next((i for i, n in pipe.map.actions.items() if n == member.action.name), 0)
                self._action_proto(aid, member.action, member.data, proto.action)
                out.append(p4r.Entity(action_profile_member=proto))
        return out

    def _read_groups(self, pipe: Pipeline, g: Any) -> list[Any]:
        out = []
        for pid, pinfo in _profiles(pipe, g.action_profile_id):
            for gid, group in sorted(pinfo.profile.groups.items()):
                if g.group_id and gid != g.group_id:
                    continue
                proto = p4r.ActionProfileGroup(
                    action_profile_id=pid, group_id=gid, max_size=group.max_size
                )
                for mid, weight in sorted(group.members.items()):
                    proto.members.append(
                        p4r.ActionProfileGroup.Member(member_id=mid, weight=weight)
                    )
                out.append(p4r.Entity(action_profile_group=proto))
        return out

    def _read_counters(self, pipe: Pipeline, c: Any) -> list[Any]:
        out = []
        for cid, (arr, unit), i in _cells("counter", pipe.map.counters, c.counter_id, c):
            ce = p4r.CounterEntry(counter_id=cid)
            ce.index.index = i
            if unit in (p4i.CounterSpec.PACKETS, p4i.CounterSpec.BOTH):
                ce.data.packet_count = arr.cells[i][0]
            if unit in (p4i.CounterSpec.BYTES, p4i.CounterSpec.BOTH):
                ce.data.byte_count = arr.cells[i][1]
            out.append(p4r.Entity(counter_entry=ce))
        return out

    def _read_meters(self, pipe: Pipeline, m: Any) -> list[Any]:
        out = []
        for mid, arr, i in _cells("meter", pipe.map.meters, m.meter_id, m):
            me = p4r.MeterEntry(meter_id=mid)
            me.index.index = i
            cfg = arr.meters[i].config()
            if cfg is not None:
                me.config.cir, me.config.cburst, me.config.pir, me.config.pburst = cfg
            out.append(p4r.Entity(meter_entry=me))
        return out

    def _read_registers(self, pipe: Pipeline, r: Any) -> list[Any]:
        out = []
        for rid, arr, i in _cells("register", pipe.map.registers, r.register_id, r):
            re_ = p4r.RegisterEntry(register_id=rid)
            re_.index.index = i
            re_.data.bitstring = canonical(arr.cells[i])
            out.append(p4r.Entity(register_entry=re_))
        return out

    def _read_pre(self, pipe: Pipeline, e: Any) -> list[Any]:
        pre = pipe.dataplane.pre
        out = []
        which = e.WhichOneof("type")
        if which == "multicast_group_entry":
            gid = e.multicast_group_entry.multicast_group_id
            for g, reps in sorted(pre.groups.items()):
                if gid and g != gid:
                    continue
                mg = p4r.MulticastGroupEntry(multicast_group_id=g)
                for r in reps:
                    mg.replicas.append(p4r.Replica(egress_port=r.port, instance=r.rid))
                out.append(
                    p4r.Entity(
                        packet_replication_engine_entry=p4r.PacketReplicationEngineEntry(
                            multicast_group_entry=mg
                        )
                    )
                )
        elif which == "clone_session_entry":
            sid = e.clone_session_entry.session_id
            for s, sess in sorted(pre.clones.items()):
                if sid and s != sid:
                    continue
                cs = p4r.CloneSessionEntry(
                    session_id=s,
                    class_of_service=sess.class_of_service,
                    packet_length_bytes=sess.truncate,
                )
                for r in sess.replicas:
                    cs.replicas.append(p4r.Replica(egress_port=r.port, instance=r.rid))
                out.append(
                    p4r.Entity(
                        packet_replication_engine_entry=p4r.PacketReplicationEngineEntry(
                            clone_session_entry=cs
                        )
                    )
                )
        return out

    def _read_digests(self, pipe: Pipeline, d: Any) -> list[Any]:
        out = []
        for did, state in sorted(pipe.digests.items()):
            if d.digest_id and did != d.digest_id:
                continue
            de = p4r.DigestEntry(digest_id=did)
            de.config.max_timeout_ns = state.config.max_timeout_ns
            de.config.max_list_size = state.config.max_list_size
            de.config.ack_timeout_ns = state.config.ack_timeout_ns
            out.append(p4r.Entity(digest_entry=de))
        return out

    def _read_value_sets(self, pipe: Pipeline, v: Any) -> list[Any]:
        out = []
        for vid, (vset, widths) in pipe.map.value_sets.items():
            if v.value_set_id and vid != v.value_set_id:
                continue
            ve = p4r.ValueSetEntry(value_set_id=vid)
            for value, mask in vset.members:
                member = p4r.ValueSetMember()
                shift = sum((w + 7) // 8 * 8 for w in widths)
                for i, w in enumerate(widths):
                    shift -= (w + 7) // 8 * 8
                    fv = (value >> shift) & ((1 << w) - 1)
                    fmk = (mask >> shift) & ((1 << w) - 1)
                    fm = p4r.FieldMatch(field_id=i + 1)
                    if fmk == (1 << w) - 1:
                        fm.exact.value = canonical(fv)
                    elif fmk:
                        fm.ternary.value = canonical(fv)
                        fm.ternary.mask = canonical(fmk)
                    else:
                        continue
                    member.match.append(fm)
                ve.members.append(member)
            out.append(p4r.Entity(value_set_entry=ve))
        return out


def _cells(kind: str, arrays: Mapping[int, Any], wanted_id: int, request: Any) -> Iterator[Any]:
    """(id, array, index) for every cell a Read of an indexed extern asks for: one id or all
    (id 0), one index or all; unknown ids are NOT_FOUND, indexes out of range OUT_OF_RANGE."""
    for ident in [wanted_id] if wanted_id else list(arrays):
        item = arrays.get(ident)
        if item is None:
            raise P4RTError(Code.NOT_FOUND, f"{kind}_id {ident} unknown")
        arr = item[0] if isinstance(item, tuple) else item
        indexes = [request.index.index] if request.HasField("index") else range(arr.size)
        for i in indexes:
            if i < 0:
                raise P4RTError(Code.INVALID_ARGUMENT, f"{kind} {arr.name!r}: negative index {i}")
            if i >= arr.size:
                raise P4RTError(Code.OUT_OF_RANGE, f"{kind} {arr.name!r}: index {i} out of range")
            yield ident, item, i


def _profiles(pipe: Pipeline, wanted_id: int) -> Iterator[tuple[int, Any]]:
    """The action profiles a Read asks for: one (unknown: NOT_FOUND) or all (id 0)."""
    for pid in [wanted_id] if wanted_id else list(pipe.map.profiles):
        pinfo = pipe.map.profiles.get(pid)
        if pinfo is None:
            raise P4RTError(Code.NOT_FOUND, f"action_profile_id {pid} unknown")
        yield pid, pinfo
