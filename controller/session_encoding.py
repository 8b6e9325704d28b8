"""Session entries encoded for P4Runtime Writes on the session hot path.

`SessionEncoder` builds the session table's protobufs without name look-ups per entry, and
serialises whole Updates by hand (field tags and varints of p4runtime.proto) so that a batch of
inserts is joined bytes, not messages; `varint` also frames those Updates into a WriteRequest
(controller/npm.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from finsy.proto import p4r

from opengate import p4constants as pc
from opengate.p4info import P4Schema
from opengate.p4rt import entity_of

FlowKey = tuple[int, int, int, int, int]  # src, dst, proto, sport, dport (as the packet arrives)


class SessionEncoder:
    """Session entries straight to protobufs (the hot path: no name lookups per entry)."""

    def __init__(self, schema: P4Schema) -> None:
        table = schema.tables.get(pc.T_SESSION)
        self.table_id = table.id
        self.fields = [
            (table.field(name).id)
            for name in ("ipv4_src", "ipv4_dst", "ip_proto", "l4_sport", "l4_dport")
        ]
        forward = schema.action_of(table, pc.A_SESSION_FORWARD)
        self.forward_id = forward.id
        self.params = [(p.name, p.id) for p in forward.params]
        self.block_id = schema.action_of(table, pc.A_SESSION_BLOCK).id
        # Pre-serialized pieces for update_bytes (field numbers of p4runtime.proto).
        self._table = b"\x08" + varint(self.table_id)  # TableEntry.table_id
        self._fields = [b"\x08" + varint(f) for f in self.fields]  # FieldMatch.field_id
        self._forward = b"\x08" + varint(self.forward_id)  # Action.action_id
        self._block = b"\x08" + varint(self.block_id)
        self._params = [(name, b"\x10" + varint(pid)) for name, pid in self.params]

    def match(self, key: FlowKey) -> p4r.TableEntry:
        entry = p4r.TableEntry(table_id=self.table_id)
        for field_id, value in zip(self.fields, key, strict=True):
            entry.match.add(field_id=field_id).exact.value = _canonical(value)
        return entry

    def entry(
        self, key: FlowKey, params: Mapping[str, int] | None, idle_timeout_ns: int
    ) -> p4r.TableEntry:
        entry = self.match(key)
        action = entry.action.action
        if params is None:
            action.action_id = self.block_id
        else:
            action.action_id = self.forward_id
            for name, param_id in self.params:
                action.params.add(param_id=param_id, value=_canonical(params[name]))
        entry.idle_timeout_ns = idle_timeout_ns
        return entry

    def update_bytes(
        self, kind: int, key: FlowKey, params: Mapping[str, int] | None, idle_timeout_ns: int
    ) -> bytes:
        """The serialized p4r.Update of a session entry (kind INSERT or MODIFY); equal to
        serializing `entry()`, at a fraction of the cost. DELETE: `delete_bytes`."""
        parts = [self._table, *self._match_fields(key)]
        if params is None:
            action = self._block
        else:
            pieces = [self._forward]
            for name, prefix in self._params:
                data = _canonical(params[name])
                param = prefix + b"\x1a" + _length(len(data)) + data  # Param.value
                pieces.append(b"\x22" + _length(len(param)) + param)  # Action.params
            action = b"".join(pieces)
        table_action = b"\x0a" + _length(len(action)) + action  # TableAction.action
        parts.append(b"\x1a" + _length(len(table_action)) + table_action)  # .action
        if idle_timeout_ns:
            parts.append(b"\x48" + varint(idle_timeout_ns))  # TableEntry.idle_timeout_ns
        return _wrap_update(kind, b"".join(parts))

    def delete_bytes(self, key: FlowKey) -> bytes:
        return _wrap_update(p4r.Update.DELETE, b"".join([self._table, *self._match_fields(key)]))

    def _match_fields(self, key: FlowKey) -> list[bytes]:
        out = []
        for prefix, value in zip(self._fields, key, strict=True):
            data = _canonical(value)
            exact = b"\x0a" + _SMALL[len(data)] + data  # Exact.value (at most 4 bytes)
            field = prefix + b"\x12" + _SMALL[len(exact)] + exact  # FieldMatch.exact
            out.append(b"\x12" + _SMALL[len(field)] + field)  # TableEntry.match
        return out

    def decode_key(self, entry: p4r.TableEntry) -> FlowKey:
        values = {m.field_id: int.from_bytes(m.exact.value, "big") for m in entry.match}
        src, dst, proto, sport, dport = (values.get(f, 0) for f in self.fields)
        return (src, dst, proto, sport, dport)

    def decode_params(self, entry: p4r.TableEntry) -> dict[str, int] | None:
        action = entry.action.action
        if action.action_id == self.block_id:
            return None
        names = {param_id: name for name, param_id in self.params}
        return {names[p.param_id]: int.from_bytes(p.value, "big") for p in action.params}


def _canonical(value: int) -> bytes:
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


_SMALL = [bytes((n,)) for n in range(128)]


def _length(value: int) -> bytes:
    return _SMALL[value] if value < 128 else varint(value)


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _wrap_update(kind: int, table_entry: bytes) -> bytes:
    """Update{type, entity: Entity{table_entry}} around a serialized TableEntry."""
    entity = b"\x12" + _length(len(table_entry)) + table_entry  # Entity.table_entry
    return b"\x08" + _SMALL[kind] + b"\x12" + _length(len(entity)) + entity


def _update(kind: int, message: p4r.TableEntry) -> p4r.Update:
    return p4r.Update(type=kind, entity=entity_of(message))  # type: ignore[arg-type]
