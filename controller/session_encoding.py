"""Session entries encoded for P4Runtime Writes on the session hot path.

`SessionEncoder` builds the session table's entries without name look-ups per entry, and writes
batches of `SessionUpdate`s straight into a WriteRequest's Updates (`fill`), so that no message
is built twice. (Hand-serialised Updates were measured against this and gained nothing once the
request is serialised for gRPC: `bench/bench_encoding.py`, docs/benchmarks.md.)

An IPv6 session's key (addresses above 2**32, `controller.session_model.key_is_v6`) goes to
`session_v6` instead, its addresses as two 64-bit halves, its forward action with that action's
parameters (class, SPM port and MAC: no NAT). A NAT64 session's entries
(`controller.session_model.nat64_params`) take the NAT64 actions of both tables, told apart by
their parameters' names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from finsy.proto import p4r

from opengate import p4constants as pc
from opengate.p4info import P4Schema

FlowKey = tuple[int, int, int, int, int]  # src, dst, proto, sport, dport (as the packet arrives)
IPV4_MAX = 0xFFFFFFFF
HALF_MAX = (1 << 64) - 1


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
        self.nat64_reply_id = 0
        self.nat64_reply_params: list[tuple[str, int]] = []
        if pc.A_SESSION_NAT64_REPLY in schema.actions and (
            schema.actions.get(pc.A_SESSION_NAT64_REPLY).id in table.action_ids
        ):
            nat64_reply = schema.action_of(table, pc.A_SESSION_NAT64_REPLY)
            self.nat64_reply_id = nat64_reply.id
            self.nat64_reply_params = [(p.name, p.id) for p in nat64_reply.params]
        # IPv6 builds: session_v6 (0: the program has none)
        self.v6_table_id = 0
        self.v6_fields: list[int] = []
        self.v6_params: list[tuple[str, int]] = []
        self.v6_forward_id = self.v6_block_id = self.v6_nat64_id = 0
        self.v6_nat64_params: list[tuple[str, int]] = []
        if pc.T_SESSION_V6 in schema.tables:
            table6 = schema.tables.get(pc.T_SESSION_V6)
            self.v6_table_id = table6.id
            self.v6_fields = [
                table6.field(name).id
                for name in (
                    "ipv6_src_hi",
                    "ipv6_src_lo",
                    "ipv6_dst_hi",
                    "ipv6_dst_lo",
                    "ip_proto",
                    "l4_sport",
                    "l4_dport",
                )
            ]
            forward6 = schema.action_of(table6, pc.A_SESSION_V6_FORWARD)
            self.v6_forward_id = forward6.id
            self.v6_params = [(p.name, p.id) for p in forward6.params]
            self.v6_block_id = schema.action_of(table6, pc.A_SESSION_V6_BLOCK).id
            nat64 = schema.action_of(table6, pc.A_SESSION_V6_NAT64)
            self.v6_nat64_id = nat64.id
            self.v6_nat64_params = [(p.name, p.id) for p in nat64.params]

    @property
    def table_ids(self) -> tuple[int, ...]:
        """The session tables of the program: `session`, and `session_v6` where it has one."""
        return (self.table_id, self.v6_table_id) if self.v6_table_id else (self.table_id,)

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
        src, dst = key[0], key[1]
        if src > IPV4_MAX or dst > IPV4_MAX:
            if not self.v6_table_id:
                raise ValueError("an IPv6 session key, and the program has no session_v6")
            entry.table_id = self.v6_table_id
            values = (src >> 64, src & HALF_MAX, dst >> 64, dst & HALF_MAX, *key[2:])
            for field_id, value in zip(self.v6_fields, values, strict=True):
                entry.match.add(field_id=field_id).exact.value = _canonical(value)
            return
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
        if entry.table_id == self.v6_table_id:
            if params is None:
                action.action_id = self.v6_block_id
            elif "v4_src" in params:
                action.action_id = self.v6_nat64_id
                for name, param_id in self.v6_nat64_params:
                    action.params.add(param_id=param_id, value=_canonical(params[name]))
            else:
                action.action_id = self.v6_forward_id
                for name, param_id in self.v6_params:
                    action.params.add(param_id=param_id, value=_canonical(params[name]))
        elif params is None:
            action.action_id = self.block_id
        elif "src_hi" in params:
            if not self.nat64_reply_id:
                raise ValueError("a NAT64 session, and the program has no session_nat64_reply")
            action.action_id = self.nat64_reply_id
            for name, param_id in self.nat64_reply_params:
                action.params.add(param_id=param_id, value=_canonical(params[name]))
        else:
            action.action_id = self.forward_id
            for name, param_id in self.params:
                action.params.add(param_id=param_id, value=_canonical(params[name]))
        if idle_timeout_ns:
            entry.idle_timeout_ns = idle_timeout_ns

    def decode_key(self, entry: p4r.TableEntry) -> FlowKey:
        values = {m.field_id: int.from_bytes(m.exact.value, "big") for m in entry.match}
        if self.v6_table_id and entry.table_id == self.v6_table_id:
            src_hi, src_lo, dst_hi, dst_lo, proto, sport, dport = (
                values.get(f, 0) for f in self.v6_fields
            )
            return ((src_hi << 64) | src_lo, (dst_hi << 64) | dst_lo, proto, sport, dport)
        src, dst, proto, sport, dport = (values.get(f, 0) for f in self.fields)
        return (src, dst, proto, sport, dport)

    def decode_params(self, entry: p4r.TableEntry) -> dict[str, int] | None:
        action = entry.action.action
        if self.v6_table_id and entry.table_id == self.v6_table_id:
            if action.action_id == self.v6_block_id:
                return None
            nat64 = action.action_id == self.v6_nat64_id
            listed = self.v6_nat64_params if nat64 else self.v6_params
            names6 = {param_id: name for name, param_id in listed}
            return {names6[p.param_id]: int.from_bytes(p.value, "big") for p in action.params}
        if action.action_id == self.block_id:
            return None
        listed = self.nat64_reply_params if action.action_id == self.nat64_reply_id else self.params
        names = {param_id: name for name, param_id in listed}
        return {names[p.param_id]: int.from_bytes(p.value, "big") for p in action.params}


def _canonical(value: int) -> bytes:
    """P4Runtime's canonical byte string of a non-negative value (no leading zero bytes)."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")
