"""Session entries encoded for P4Runtime Writes on the session hot path.

`SessionEncoder` builds the session table's entries without name look-ups per entry, and writes
batches of `SessionUpdate`s straight into a WriteRequest's Updates (`fill`), so that no message
is built twice. (Hand-serialised Updates were measured against this and gained nothing once the
request is serialised for gRPC: `bench/bench_encoding.py`, docs/benchmarks.md.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from finsy.proto import p4r

from opengate import p4constants as pc
from opengate.p4info import P4Schema

FlowKey = tuple[int, int, int, int, int]  # src, dst, proto, sport, dport (as the packet arrives)


class SessionUpdate(NamedTuple):
    """One session entry to write: INSERT or MODIFY with its action (params None: block), or
    DELETE (params and timeout unused)."""

    kind: int
    key: FlowKey
    params: Mapping[str, int] | None = None
    idle_timeout_ns: int = 0


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

    def match(self, key: FlowKey) -> p4r.TableEntry:
        entry = p4r.TableEntry()
        self._fill_match(entry, key)
        return entry

    def entry(
        self, key: FlowKey, params: Mapping[str, int] | None, idle_timeout_ns: int
    ) -> p4r.TableEntry:
        entry = p4r.TableEntry()
        self._fill_entry(entry, key, params, idle_timeout_ns)
        return entry

    def fill(self, request: p4r.WriteRequest, updates: Sequence[SessionUpdate]) -> None:
        """Append `updates` to the request's Updates, each built in place."""
        delete = p4r.Update.DELETE
        for kind, key, params, idle_timeout_ns in updates:
            update = request.updates.add()
            update.type = kind  # type: ignore[assignment]
            entry = update.entity.table_entry
            if kind == delete:
                self._fill_match(entry, key)
            else:
                self._fill_entry(entry, key, params, idle_timeout_ns)

    def _fill_match(self, entry: p4r.TableEntry, key: FlowKey) -> None:
        entry.table_id = self.table_id
        for field_id, value in zip(self.fields, key, strict=True):
            entry.match.add(field_id=field_id).exact.value = _canonical(value)

    def _fill_entry(
        self,
        entry: p4r.TableEntry,
        key: FlowKey,
        params: Mapping[str, int] | None,
        idle_timeout_ns: int,
    ) -> None:
        self._fill_match(entry, key)
        action = entry.action.action
        if params is None:
            action.action_id = self.block_id
        else:
            action.action_id = self.forward_id
            for name, param_id in self.params:
                action.params.add(param_id=param_id, value=_canonical(params[name]))
        if idle_timeout_ns:
            entry.idle_timeout_ns = idle_timeout_ns

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
    """P4Runtime's canonical byte string of a non-negative value (no leading zero bytes)."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")
