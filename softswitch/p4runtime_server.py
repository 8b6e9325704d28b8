"""The P4Runtime gRPC service of the software switch (P4Runtime 1.3/1.4 semantics).

Pipeline config (VERIFY, VERIFY_AND_SAVE, VERIFY_AND_COMMIT, COMMIT), Write with per-update
errors, Read with wildcards, and the stream: primary arbitration by election id, PacketIn /
PacketOut through the @controller_header metadata, digests with acks and timeouts, idle-timeout
notifications. Registers can be read and written (BMv2 cannot).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
from finsy.proto import p4d, p4i, p4r, p4r_grpc, rpc_code, rpc_status
from google.protobuf import any_pb2

from softswitch import tables as tb
from softswitch.engine import CloneSession, Dataplane, Replica
from softswitch.errors import LoadError
from softswitch.externs import Meter
from softswitch.p4info_map import P4InfoMap, PacketMetadataInfo, TableInfo, build_map
from softswitch.program import Program, load_json_bytes
from softswitch.switch import Switch

LOG = logging.getLogger(__name__)

_DETAILS_KEY = "grpc-status-details-bin"
Code = grpc.StatusCode
READ_BATCH = 1000


class P4RTError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _int_code(code: grpc.StatusCode) -> int:
    value: int = code.value[0]
    return value


def to_int(data: bytes) -> int:
    return int.from_bytes(data, "big")


def canonical(value: int) -> bytes:
    """P4Runtime's canonical bytestring: shortest big-endian form, one byte for zero."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def check_width(data: bytes, width: int, what: str) -> int:
    if not data:
        raise P4RTError(Code.INVALID_ARGUMENT, f"{what}: empty bytestring")
    value = to_int(data)
    if value.bit_length() > width:
        raise P4RTError(
            Code.INVALID_ARGUMENT, f"{what}: value 0x{data.hex()} does not fit in {width} bits"
        )
    return value


# ---------------------------------------------------------------------------- configuration
@dataclass(slots=True)
class Pipeline:
    p4info: Any
    device_config: bytes
    cookie: int
    program: Program
    map: P4InfoMap
    dataplane: Dataplane


@dataclass(slots=True)
class DigestConfig:
    max_timeout_ns: int
    max_list_size: int
    ack_timeout_ns: int


@dataclass(slots=True)
class DigestState:
    config: DigestConfig
    pending: list[tuple[int, ...]] = field(default_factory=list)
    pending_since: int = 0
    in_flight: dict[int, tuple[int, list[tuple[int, ...]]]] = field(default_factory=dict)
    suppressed: dict[tuple[int, ...], int] = field(default_factory=dict)  # sample -> expiry ns
    next_list_id: int = 1


@dataclass(slots=True, eq=False)
class Stream:
    election_id: int | None = None
    role: str = ""
    out: queue.Queue[p4r.StreamMessageResponse | None] = field(default_factory=queue.Queue)


# ---------------------------------------------------------------------------- the service
class P4RuntimeService(p4r_grpc.P4RuntimeServicer):
    def __init__(self, switch: Switch) -> None:
        self.switch = switch
        self.lock = threading.RLock()
        self.pipeline: Pipeline | None = None
        self.saved: Pipeline | None = None
        self.streams: list[Stream] = []
        self.digests: dict[int, DigestState] = {}
        self._stop = threading.Event()
        self._timer = threading.Thread(target=self._timer_loop, name="p4rt-timers", daemon=True)
        self._timer.start()
        switch.packet_in = self._packet_in

    def stop(self) -> None:
        self._stop.set()
        with self.lock:
            for s in self.streams:
                s.out.put(None)

    # ------------------------------------------------------------------ arbitration
    def _primary(self) -> Stream | None:
        best: Stream | None = None
        for s in self.streams:
            if s.election_id is not None and (
                best is None or s.election_id > (best.election_id or 0)
            ):
                best = s
        return best

    def _check_primary(self, election_id: Any, role: str = "") -> None:
        eid = (election_id.high << 64) | election_id.low
        primary = self._primary()
        if primary is None or primary.election_id != eid:
            raise P4RTError(Code.PERMISSION_DENIED, "not the primary controller (election id)")

    def _check_device(self, device_id: int) -> None:
        if device_id != self.switch.device_id:
            raise P4RTError(
                Code.NOT_FOUND,
                f"device id {device_id} is not this switch's ({self.switch.device_id})",
            )

    def _arbitration_response(self, s: Stream) -> p4r.StreamMessageResponse:
        primary = self._primary()
        msg = p4r.StreamMessageResponse()
        arb = msg.arbitration
        arb.device_id = self.switch.device_id
        if primary is not None and primary.election_id is not None:
            arb.election_id.high = primary.election_id >> 64
            arb.election_id.low = primary.election_id & ((1 << 64) - 1)
        if primary is s:
            arb.status.code = rpc_code.OK
            arb.status.message = "primary"
        elif primary is not None:
            arb.status.code = rpc_code.ALREADY_EXISTS
            arb.status.message = "not primary"
        else:
            arb.status.code = rpc_code.NOT_FOUND
            arb.status.message = "no primary"
        return msg

    def _notify_arbitration(self, before: Stream | None, requester: Stream) -> None:
        after = self._primary()
        targets = self.streams if after is not before else [requester]
        for s in targets:
            s.out.put(self._arbitration_response(s))

    # ------------------------------------------------------------------ RPC: Capabilities
    def Capabilities(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return p4r.CapabilitiesResponse(p4runtime_api_version="1.4.0")

    # ------------------------------------------------------------------ RPC: pipeline config
    def SetForwardingPipelineConfig(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        try:
            with self.lock:
                self._check_device(request.device_id)
                self._check_primary(request.election_id)
                self._set_pipeline(request)
        except P4RTError as exc:
            context.abort(exc.code, exc.message)
        return p4r.SetForwardingPipelineConfigResponse()

    def _load(self, config: Any) -> Pipeline:
        try:
            program = load_json_bytes(bytes(config.p4_device_config))
            pmap = build_map(config.p4info, program)
        except LoadError as exc:
            raise P4RTError(Code.INVALID_ARGUMENT, f"cannot load the pipeline: {exc}") from None
        dp = Dataplane(program, digest_sink=self._digest_sample)
        p4info = p4i.P4Info()
        p4info.CopyFrom(config.p4info)
        return Pipeline(
            p4info, bytes(config.p4_device_config), config.cookie.cookie, program, pmap, dp
        )

    def _commit(self, pipe: Pipeline) -> None:
        self.pipeline = pipe
        self.digests.clear()
        self.switch.set_dataplane(pipe.dataplane)
        LOG.info("pipeline committed (cookie %d)", pipe.cookie)

    def _set_pipeline(self, request: Any) -> None:
        action = request.action
        A = p4r.SetForwardingPipelineConfigRequest  # noqa: N806
        if action in (A.VERIFY, A.VERIFY_AND_SAVE, A.VERIFY_AND_COMMIT, A.RECONCILE_AND_COMMIT):
            if not request.HasField("config"):
                raise P4RTError(Code.INVALID_ARGUMENT, "config is missing")
            pipe = self._load(request.config)
            if action == A.VERIFY_AND_SAVE:
                self.saved = pipe
            elif action in (A.VERIFY_AND_COMMIT, A.RECONCILE_AND_COMMIT):
                self._commit(pipe)
        elif action == A.COMMIT:
            if self.saved is None:
                raise P4RTError(Code.FAILED_PRECONDITION, "COMMIT without a saved config")
            self._commit(self.saved)
            self.saved = None
        else:
            raise P4RTError(Code.INVALID_ARGUMENT, f"unknown action {action}")

    def GetForwardingPipelineConfig(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        try:
            self._check_device(request.device_id)
        except P4RTError as exc:
            context.abort(exc.code, exc.message)
        resp = p4r.GetForwardingPipelineConfigResponse()
        pipe = self.pipeline
        if pipe is None:
            return resp
        R = p4r.GetForwardingPipelineConfigRequest  # noqa: N806
        rt = request.response_type
        resp.config.cookie.cookie = pipe.cookie
        if rt in (R.ALL, R.P4INFO_AND_COOKIE):
            resp.config.p4info.CopyFrom(pipe.p4info)
        if rt in (R.ALL, R.DEVICE_CONFIG_AND_COOKIE):
            resp.config.p4_device_config = pipe.device_config
        return resp

    # ------------------------------------------------------------------ RPC: Write
    def Write(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        try:
            self._check_device(request.device_id)
            with self.lock:
                self._check_primary(request.election_id, request.role)
                if self.pipeline is None:
                    raise P4RTError(Code.FAILED_PRECONDITION, "no forwarding pipeline config set")
                if request.atomicity != p4r.WriteRequest.CONTINUE_ON_ERROR:
                    raise P4RTError(
                        Code.UNIMPLEMENTED, "only CONTINUE_ON_ERROR atomicity is supported"
                    )
                pipe = self.pipeline
                errors: list[tuple[grpc.StatusCode, str] | None] = []
                with pipe.dataplane.lock:
                    for update in request.updates:
                        try:
                            self._write_one(pipe, update)
                            errors.append(None)
                        except P4RTError as exc:
                            errors.append((exc.code, exc.message))
        except P4RTError as exc:
            context.abort(exc.code, exc.message)
        if any(e is not None for e in errors):
            status = rpc_status.Status(code=rpc_code.UNKNOWN, message="Write failure")
            for err in errors:
                detail = p4r.Error()
                if err is None:
                    detail.canonical_code = rpc_code.OK
                else:
                    detail.canonical_code = _int_code(err[0])
                    detail.message = err[1]
                    detail.space = "targets.softswitch"
                packed = any_pb2.Any()
                packed.Pack(detail)
                status.details.append(packed)
            first = next(e for e in errors if e is not None)
            context.set_trailing_metadata(((_DETAILS_KEY, status.SerializeToString()),))
            context.abort(Code.UNKNOWN, f"Write failure: {first[1]}")
        return p4r.WriteResponse()

    def _write_one(self, pipe: Pipeline, update: Any) -> None:
        U = p4r.Update  # noqa: N806
        kind = update.type
        if kind not in (U.INSERT, U.MODIFY, U.DELETE):
            raise P4RTError(Code.INVALID_ARGUMENT, "update type is UNSPECIFIED")
        entity = update.entity
        which = entity.WhichOneof("entity")
        if which == "table_entry":
            self._write_table_entry(pipe, kind, entity.table_entry)
        elif which == "action_profile_member":
            self._write_member(pipe, kind, entity.action_profile_member)
        elif which == "action_profile_group":
            self._write_group(pipe, kind, entity.action_profile_group)
        elif which == "counter_entry":
            self._write_counter(pipe, kind, entity.counter_entry)
        elif which == "direct_counter_entry":
            self._write_direct_counter(pipe, kind, entity.direct_counter_entry)
        elif which == "meter_entry":
            self._write_meter(pipe, kind, entity.meter_entry)
        elif which == "direct_meter_entry":
            self._write_direct_meter(pipe, kind, entity.direct_meter_entry)
        elif which == "register_entry":
            self._write_register(pipe, kind, entity.register_entry)
        elif which == "packet_replication_engine_entry":
            self._write_pre(pipe, kind, entity.packet_replication_engine_entry)
        elif which == "digest_entry":
            self._write_digest(pipe, kind, entity.digest_entry)
        elif which == "value_set_entry":
            self._write_value_set(pipe, kind, entity.value_set_entry)
        else:
            raise P4RTError(Code.UNIMPLEMENTED, f"entity {which!r} is not supported")

    # ---- tables
    def _table(self, pipe: Pipeline, table_id: int) -> TableInfo:
        info = pipe.map.tables.get(table_id)
        if info is None:
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
            what = f"table {info.name!r}, match field {mf.name!r}"
            expected = {
                "exact": "exact",
                "lpm": "lpm",
                "ternary": "ternary",
                "range": "range",
                "optional": "optional",
            }[mf.kind]
            if which != expected:
                raise P4RTError(
                    Code.INVALID_ARGUMENT,
                    f"{what}: match kind {which!r}, the table wants {expected!r}",
                )
            w = mf.bitwidth
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
            values[pos] = check_width(p.value, width, f"action {name!r}, param {pname!r}")
        missing = [params_name for (pos, params_name, _) in params.values() if values[pos] is None]
        if missing:
            raise P4RTError(Code.INVALID_ARGUMENT, f"action {name!r}: missing params {missing}")
        return tuple(v for v in values if v is not None)

    def _profile_action(self, pipe: Pipeline, profile_id: int, action: Any) -> tb.ActionSpec:
        pinfo = pipe.map.profiles.get(profile_id)
        if pinfo is None:
            raise P4RTError(Code.NOT_FOUND, f"action_profile_id {profile_id} unknown")
        for tid in pinfo.table_ids:
            info = pipe.map.tables[tid]
            ref = info.actions.get(action.action_id)
            if ref is not None:
                return ref.spec
        raise P4RTError(
            Code.INVALID_ARGUMENT,
            f"action profile {pinfo.name!r}: action_id {action.action_id} not allowed",
        )

    def _write_table_entry(self, pipe: Pipeline, kind: int, te: Any) -> None:
        U = p4r.Update  # noqa: N806
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
    def _take_refs(t: tb.Table, entry: tb.Entry) -> None:
        if t.profile is None:
            return
        ref = (
            ("m", entry.member.id)
            if entry.member
            else ("g", entry.group.id)
            if entry.group
            else None
        )
        if ref:
            t.profile.refcount[ref] = t.profile.refcount.get(ref, 0) + 1

    @staticmethod
    def _release_refs(t: tb.Table, entry: tb.Entry) -> None:
        if t.profile is None:
            return
        ref = (
            ("m", entry.member.id)
            if entry.member
            else ("g", entry.group.id)
            if entry.group
            else None
        )
        if ref and ref in t.profile.refcount:
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

    # ---- action profiles
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
            ref = pipe.map.tables[tid].actions.get(m.action.action_id)
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

    # ---- counters, meters, registers
    def _write_counter(self, pipe: Pipeline, kind: int, c: Any) -> None:
        if kind != p4r.Update.MODIFY:
            raise P4RTError(Code.INVALID_ARGUMENT, "counter entries can only be modified")
        item = pipe.map.counters.get(c.counter_id)
        if item is None:
            raise P4RTError(Code.NOT_FOUND, f"counter_id {c.counter_id} unknown")
        arr = item[0]
        indexes = [c.index.index] if c.HasField("index") else list(range(arr.size))
        for i in indexes:
            if not 0 <= i < arr.size:
                raise P4RTError(Code.OUT_OF_RANGE, f"counter {arr.name!r}: index {i} out of range")
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
            if not 0 <= i < arr.size:
                raise P4RTError(Code.OUT_OF_RANGE, f"meter {arr.name!r}: index {i} out of range")
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
            if not 0 <= i < arr.size:
                raise P4RTError(Code.OUT_OF_RANGE, f"register {arr.name!r}: index {i} out of range")
            arr.cells[i] = value

    # ---- packet replication engine
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

    # ---- digests and value sets
    def _write_digest(self, pipe: Pipeline, kind: int, d: Any) -> None:
        U = p4r.Update  # noqa: N806
        if d.digest_id not in pipe.map.digests:
            raise P4RTError(Code.NOT_FOUND, f"digest_id {d.digest_id} unknown")
        exists = d.digest_id in self.digests
        if kind == U.DELETE:
            if not exists:
                raise P4RTError(Code.NOT_FOUND, f"digest {d.digest_id} is not configured")
            del self.digests[d.digest_id]
            return
        if kind == U.INSERT and exists:
            raise P4RTError(Code.ALREADY_EXISTS, f"digest {d.digest_id} is already configured")
        if kind == U.MODIFY and not exists:
            raise P4RTError(Code.NOT_FOUND, f"digest {d.digest_id} is not configured")
        cfg = DigestConfig(d.config.max_timeout_ns, d.config.max_list_size, d.config.ack_timeout_ns)
        if exists:
            self.digests[d.digest_id].config = cfg
        else:
            self.digests[d.digest_id] = DigestState(cfg)

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

    # ------------------------------------------------------------------ RPC: Read
    def Read(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:  # noqa: N802
        try:
            self._check_device(request.device_id)
            with self.lock:
                pipe = self.pipeline
                if pipe is None:
                    raise P4RTError(Code.FAILED_PRECONDITION, "no forwarding pipeline config set")
                with pipe.dataplane.lock:
                    entities: list[Any] = []
                    for ent in request.entities:
                        entities.extend(self._read_one(pipe, ent))
        except P4RTError as exc:
            context.abort(exc.code, exc.message)
        for i in range(0, max(len(entities), 1), READ_BATCH):
            yield p4r.ReadResponse(entities=entities[i : i + READ_BATCH])

    def _read_one(self, pipe: Pipeline, ent: Any) -> list[Any]:
        which = ent.WhichOneof("entity")
        if which == "table_entry":
            return self._read_tables(pipe, ent.table_entry)
        if which == "action_profile_member":
            return self._read_members(pipe, ent.action_profile_member)
        if which == "action_profile_group":
            return self._read_groups(pipe, ent.action_profile_group)
        if which == "counter_entry":
            return self._read_counters(pipe, ent.counter_entry)
        if which == "direct_counter_entry":
            return self._read_direct(pipe, ent.direct_counter_entry.table_entry, counters=True)
        if which == "meter_entry":
            return self._read_meters(pipe, ent.meter_entry)
        if which == "direct_meter_entry":
            return self._read_direct(pipe, ent.direct_meter_entry.table_entry, counters=False)
        if which == "register_entry":
            return self._read_registers(pipe, ent.register_entry)
        if which == "packet_replication_engine_entry":
            return self._read_pre(pipe, ent.packet_replication_engine_entry)
        if which == "digest_entry":
            return self._read_digests(pipe, ent.digest_entry)
        if which == "value_set_entry":
            return self._read_value_sets(pipe, ent.value_set_entry)
        raise P4RTError(Code.UNIMPLEMENTED, f"reading {which!r} is not supported")

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

    def _matching_entries(self, pipe: Pipeline, te: Any) -> list[tuple[TableInfo, tb.Entry | None]]:
        infos = [self._table(pipe, te.table_id)] if te.table_id else list(pipe.map.tables.values())
        out: list[tuple[TableInfo, tb.Entry | None]] = []
        for info in infos:
            if te.is_default_action:
                out.append((info, info.table.default))
                continue
            if te.match:
                key, _ = self._match_key(info, te.match)
                entry = info.table.entries.get(info.table.canonical(key, te.priority))
                if entry is not None:
                    out.append((info, entry))
                continue
            out.extend((info, e) for e in info.table.iter_entries())
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
        for did, state in sorted(self.digests.items()):
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

    # ------------------------------------------------------------------ RPC: StreamChannel
    def StreamChannel(  # noqa: N802
        self, request_iterator: Iterator[Any], context: grpc.ServicerContext
    ) -> Iterator[Any]:
        stream = Stream()
        done = threading.Event()

        def reader() -> None:
            try:
                for msg in request_iterator:
                    self._stream_message(stream, msg, context)
            except grpc.RpcError:
                pass
            except P4RTError as exc:
                LOG.info("stream closed: %s", exc.message)
                stream.out.put(None)
                stream.election_id = None
                context.abort(exc.code, exc.message)
            except Exception:
                LOG.exception("stream reader failed")
            finally:
                done.set()
                stream.out.put(None)

        thread = threading.Thread(target=reader, name="p4rt-stream", daemon=True)
        thread.start()
        try:
            while True:
                item = stream.out.get()
                if item is None:
                    break
                yield item
        finally:
            with self.lock:
                before = self._primary()
                if stream in self.streams:
                    self.streams.remove(stream)
                after = self._primary()
                if after is not before:
                    for s in self.streams:
                        s.out.put(self._arbitration_response(s))

    def _stream_message(self, stream: Stream, msg: Any, context: grpc.ServicerContext) -> None:
        which = msg.WhichOneof("update")
        if which == "arbitration":
            arb = msg.arbitration
            if arb.device_id != self.switch.device_id:
                raise P4RTError(
                    Code.NOT_FOUND,
                    f"device id {arb.device_id} is not this switch's ({self.switch.device_id})",
                )
            if arb.role.name or arb.role.id:
                raise P4RTError(Code.UNIMPLEMENTED, "only the default role is supported")
            with self.lock:
                eid = (
                    (arb.election_id.high << 64) | arb.election_id.low
                    if arb.HasField("election_id")
                    else None
                )
                for other in self.streams:
                    if other is not stream and eid is not None and other.election_id == eid:
                        raise P4RTError(
                            Code.INVALID_ARGUMENT,
                            f"election id {eid} is used by another controller",
                        )
                before = self._primary()
                stream.election_id = eid
                if stream not in self.streams:
                    self.streams.append(stream)
                self._notify_arbitration(before, stream)
            return
        if stream not in self.streams:
            raise P4RTError(
                Code.FAILED_PRECONDITION, "the first stream message must be an arbitration update"
            )
        if which == "packet":
            if self._primary() is not stream:
                self._stream_error(
                    stream,
                    Code.PERMISSION_DENIED,
                    "PacketOut from a backup controller",
                    packet=msg.packet,
                )
                return
            self._packet_out(stream, msg.packet)
        elif which == "digest_ack":
            self._digest_ack(msg.digest_ack.digest_id, msg.digest_ack.list_id)
        else:
            self._stream_error(
                stream, Code.UNIMPLEMENTED, f"stream message {which!r} is not supported"
            )

    def _stream_error(
        self, stream: Stream, code: grpc.StatusCode, message: str, packet: Any = None
    ) -> None:
        resp = p4r.StreamMessageResponse()
        resp.error.canonical_code = _int_code(code)
        resp.error.message = message
        if packet is not None:
            resp.error.packet_out.packet_out.CopyFrom(packet)
        stream.out.put(resp)

    # ------------------------------------------------------------------ packet I/O
    def _packet_out(self, stream: Stream, pkt: Any) -> None:
        pipe = self.pipeline
        if pipe is None or self.switch.cpu_port is None:
            self._stream_error(
                stream, Code.FAILED_PRECONDITION, "no pipeline or no CPU port", packet=pkt
            )
            return
        header = b""
        md = pipe.map.packet_out
        if md is not None:
            values = {m.metadata_id: m.value for m in pkt.metadata}
            acc = 0
            for mid, name, width in md.fields:
                raw = values.get(mid, b"\x00")
                try:
                    v = check_width(raw, width, f"packet_out metadata {name!r}")
                except P4RTError as exc:
                    self._stream_error(stream, exc.code, exc.message, packet=pkt)
                    return
                acc = (acc << width) | v
            header = acc.to_bytes(md.nbits // 8, "big")
        self.switch.receive(self.switch.cpu_port, header + bytes(pkt.payload))

    def _packet_in(self, frame: bytes) -> None:
        pipe = self.pipeline
        primary = self._primary()
        if pipe is None or primary is None:
            return
        msg = p4r.StreamMessageResponse()
        md: PacketMetadataInfo | None = pipe.map.packet_in
        if md is not None and md.nbits:
            nbytes = md.nbits // 8
            if len(frame) < nbytes:
                return
            acc = int.from_bytes(frame[:nbytes], "big")
            shift = md.nbits
            for mid, _, width in md.fields:
                shift -= width
                msg.packet.metadata.append(
                    p4r.PacketMetadata(
                        metadata_id=mid, value=canonical((acc >> shift) & ((1 << width) - 1))
                    )
                )
            frame = frame[nbytes:]
        msg.packet.payload = frame
        primary.out.put(msg)

    # ------------------------------------------------------------------ digests
    def _digest_sample(self, learn_id: int, values: tuple[int, ...]) -> None:
        pipe = self.pipeline
        if pipe is None:
            return
        did = pipe.map.digest_of_learn.get(learn_id)
        if did is None:
            return
        state = self.digests.get(did)
        if state is None:
            return
        now = time.monotonic_ns()
        expiry = state.suppressed.get(values)
        if expiry is not None and expiry > now:
            return
        if values in state.pending:
            return
        if not state.pending:
            state.pending_since = now
        state.pending.append(values)
        if state.config.max_list_size <= 1 or len(state.pending) >= state.config.max_list_size:
            self._flush_digest(did, state, now)

    def _flush_digest(self, did: int, state: DigestState, now: int) -> None:
        primary = self._primary()
        samples, state.pending = state.pending, []
        if primary is None or not samples:
            return
        list_id = state.next_list_id
        state.next_list_id += 1
        if state.config.ack_timeout_ns:
            expiry = now + state.config.ack_timeout_ns
            for s in samples:
                state.suppressed[s] = expiry
            state.in_flight[list_id] = (expiry, samples)
        msg = p4r.StreamMessageResponse()
        dl = msg.digest
        dl.digest_id = did
        dl.list_id = list_id
        dl.timestamp = time.time_ns()
        for s in samples:
            data = p4d.P4Data()
            for v in s:
                data.struct.members.append(p4d.P4Data(bitstring=canonical(v)))
            dl.data.append(data)
        primary.out.put(msg)

    def _digest_ack(self, did: int, list_id: int) -> None:
        with self.lock:
            state = self.digests.get(did)
            if state is None:
                return
            item = state.in_flight.pop(list_id, None)
            if item is not None:
                for s in item[1]:
                    state.suppressed.pop(s, None)

    # ------------------------------------------------------------------ timers
    def _timer_loop(self) -> None:
        while not self._stop.wait(0.02):
            try:
                with self.lock:
                    pipe = self.pipeline
                    if pipe is None:
                        continue
                    with pipe.dataplane.lock:
                        self._digest_timers()
                        self._idle_timeouts(pipe)
            except Exception:
                LOG.exception("timer loop")

    def _digest_timers(self) -> None:
        now = time.monotonic_ns()
        for did, state in self.digests.items():
            if state.pending and now - state.pending_since >= state.config.max_timeout_ns:
                self._flush_digest(did, state, now)
            for lid in [lid for lid, (exp, _) in state.in_flight.items() if exp <= now]:
                del state.in_flight[lid]
            for s in [s for s, exp in state.suppressed.items() if exp <= now]:
                del state.suppressed[s]

    _last_idle_scan = 0

    def _idle_timeouts(self, pipe: Pipeline) -> None:
        now = time.monotonic_ns()
        if now - self._last_idle_scan < 100_000_000:
            return
        self._last_idle_scan = now
        primary = self._primary()
        if primary is None:
            return
        expired: list[Any] = []
        for info in pipe.map.tables.values():
            if not info.table.support_timeout:
                continue
            for entry in info.table.iter_entries():
                if (
                    entry.timeout_ns
                    and not entry.notified
                    and now - entry.last_hit >= entry.timeout_ns
                ):
                    entry.notified = True
                    expired.append(self.entry_proto(info, entry, False, False))
        if expired:
            msg = p4r.StreamMessageResponse()
            msg.idle_timeout_notification.timestamp = time.time_ns()
            msg.idle_timeout_notification.table_entry.extend(expired)
            primary.out.put(msg)


class P4RuntimeServer:
    """The gRPC server; `start()` returns once the port accepts connections."""

    def __init__(self, switch: Switch, address: str) -> None:
        self.service = P4RuntimeService(switch)
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="p4rt")
        )
        p4r_grpc.add_P4RuntimeServicer_to_server(self.service, self.server)
        self.port = self.server.add_insecure_port(address)
        if self.port == 0:
            raise OSError(f"cannot listen on {address}")
        self.address = address

    def start(self) -> None:
        self.server.start()

    def stop(self, grace: float = 0.5) -> None:
        self.service.stop()
        self.server.stop(grace).wait()


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
            if not 0 <= i < arr.size:
                raise P4RTError(Code.OUT_OF_RANGE, f"{kind} {arr.name!r}: index {i} out of range")
            yield ident, item, i


def _profiles(pipe: Pipeline, wanted_id: int) -> Iterator[tuple[int, Any]]:
    """The action profiles a Read asks for: one (unknown: NOT_FOUND) or all (id 0)."""
    for pid in [wanted_id] if wanted_id else list(pipe.map.profiles):
        pinfo = pipe.map.profiles.get(pid)
        if pinfo is None:
            raise P4RTError(Code.NOT_FOUND, f"action_profile_id {pid} unknown")
        yield pid, pinfo
