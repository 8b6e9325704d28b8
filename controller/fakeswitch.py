"""An in-process P4Runtime server that keeps state but forwards no packets.

For the controller's unit tests and its benchmark ceiling: it enforces what P4Runtime says a
server must (primary arbitration by election id, INSERT/MODIFY/DELETE semantics with per-update
errors, action profile references, table sizes, digest configuration), and lets a test play the
data plane: `inject_digest`, `inject_packet_in`, `notify_idle`, and it records packet-outs and
every Write. `TARGET`-selected integration tests run the real switches instead (STYLE.md 15).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from concurrent import futures
from dataclasses import dataclass, field

import grpc
from finsy.proto import p4d, p4i, p4r, p4r_grpc, rpc_code, rpc_status

from opengate.p4info import P4InfoError, P4Schema

LOG = logging.getLogger(__name__)

_DETAILS_KEY = "grpc-status-details-bin"
EntryKey = tuple[int, tuple[tuple[int, bytes], ...], int]


class _UpdateError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def entry_key(entry: p4r.TableEntry) -> EntryKey:
    fields = tuple(
        sorted((m.field_id, m.SerializeToString(deterministic=True)) for m in entry.match)
    )
    return (entry.table_id, fields, entry.priority)


@dataclass(slots=True)
class _Stored:
    entry: p4r.TableEntry
    last_hit: float
    notified: bool = False
    packets: int = 0
    bytes: int = 0


@dataclass(slots=True)
class _Stream:
    election_id: int
    outbox: queue.Queue[p4r.StreamMessageResponse | None] = field(default_factory=queue.Queue)
    arbitrated: bool = False


@dataclass(frozen=True, slots=True)
class _Shape:
    """What a table entry with a given action must look like: field and parameter widths."""

    fields: dict[int, int]
    exact_fields: int
    params: dict[int, int]


@dataclass(slots=True)
class WriteRecord:
    updates: int
    kinds: dict[str, int]


class FakeSwitchState:
    """Everything one device holds. All access under `lock`."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.schema: P4Schema | None = None
        self.device_config = b""
        self.cookie = 0
        self.entries: dict[EntryKey, _Stored] = {}
        self.defaults: dict[int, p4r.TableEntry] = {}
        self.members: dict[tuple[int, int], p4r.ActionProfileMember] = {}
        self.groups: dict[tuple[int, int], p4r.ActionProfileGroup] = {}
        self.meters: dict[tuple[int, int], p4r.MeterConfig] = {}
        self.digest_configs: dict[int, p4r.DigestEntry] = {}
        self.table_counts: dict[int, int] = {}

    def reset(self) -> None:
        self.entries.clear()
        self.defaults.clear()
        self.members.clear()
        self.groups.clear()
        self.meters.clear()
        self.digest_configs.clear()
        self.table_counts.clear()


class FakeP4RuntimeServer(p4r_grpc.P4RuntimeServicer):
    """`with FakeP4RuntimeServer() as server:` -> a server on 127.0.0.1:server.port."""

    def __init__(self, device_id: int = 1, schema: P4Schema | None = None, port: int = 0) -> None:
        self.device_id = device_id
        self.state = FakeSwitchState()
        self.state.schema = schema
        self.streams: list[_Stream] = []
        self._streams_lock = threading.Lock()
        self.packet_outs: queue.Queue[tuple[bytes, dict[str, int]]] = queue.Queue()
        self.digest_acks = 0
        self.writes: list[WriteRecord] = []
        self.keep_requests = False  # keep a copy of every WriteRequest in `requests`
        self.requests: list[p4r.WriteRequest] = []
        self.write_delay = 0.0  # seconds added to every Write (to model a slower switch)
        # The coming updates fail with (code, message), or go through (None).
        self.fail_next_writes: list[tuple[int, str] | None] = []
        self._list_id = 0
        self._shapes: dict[tuple[int, int], _Shape] = {}
        self._server: grpc.Server | None = None
        self.port = port

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> FakeP4RuntimeServer:
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="fake-p4rt"),
            options=[
                ("grpc.max_send_message_length", 256 << 20),
                ("grpc.max_receive_message_length", 256 << 20),
            ],
        )
        p4r_grpc.add_P4RuntimeServicer_to_server(self, server)
        self.port = server.add_insecure_port(f"127.0.0.1:{self.port}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        with self._streams_lock:
            streams = list(self.streams)
        for stream in streams:
            stream.outbox.put(None)
        if self._server is not None:
            self._server.stop(grace=0.5).wait()
            self._server = None

    def __enter__(self) -> FakeP4RuntimeServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    # -- arbitration -----------------------------------------------------------------------------

    def primary(self) -> _Stream | None:
        with self._streams_lock:
            live = [s for s in self.streams if s.arbitrated]
            return max(live, key=lambda s: s.election_id, default=None)

    def _announce(self) -> None:
        primary = self.primary()
        with self._streams_lock:
            streams = [s for s in self.streams if s.arbitrated]
        for stream in streams:
            update = p4r.MasterArbitrationUpdate(device_id=self.device_id)
            if primary is not None:
                update.election_id.high = primary.election_id >> 64
                update.election_id.low = primary.election_id & ((1 << 64) - 1)
            update.status.code = rpc_code.OK if stream is primary else rpc_code.ALREADY_EXISTS
            stream.outbox.put(p4r.StreamMessageResponse(arbitration=update))

    def StreamChannel(  # noqa: N802 (gRPC method name)
        self, request_iterator: Iterator[p4r.StreamMessageRequest], context: grpc.ServicerContext
    ) -> Iterator[p4r.StreamMessageResponse]:
        stream = _Stream(election_id=-1)
        with self._streams_lock:
            self.streams.append(stream)

        def read() -> None:
            try:
                for request in request_iterator:
                    self._on_stream_request(stream, request, context)
            except grpc.RpcError:
                pass
            finally:
                stream.outbox.put(None)

        reader = threading.Thread(target=read, name="fake-p4rt-stream", daemon=True)
        reader.start()
        try:
            while True:
                message = stream.outbox.get()
                if message is None:
                    return
                yield message
        finally:
            was_primary = self.primary() is stream
            with self._streams_lock:
                self.streams.remove(stream)
            if was_primary:
                self._announce()

    def _on_stream_request(
        self, stream: _Stream, request: p4r.StreamMessageRequest, context: grpc.ServicerContext
    ) -> None:
        kind = request.WhichOneof("update")
        if kind == "arbitration":
            election = request.arbitration.election_id
            election_id = election.high << 64 | election.low
            with self._streams_lock:
                taken = any(
                    s is not stream and s.arbitrated and s.election_id == election_id
                    for s in self.streams
                )
            if taken:
                update = p4r.MasterArbitrationUpdate(device_id=self.device_id)
                update.status.code = rpc_code.INVALID_ARGUMENT
                update.status.message = f"election id {election_id} is in use"
                stream.outbox.put(p4r.StreamMessageResponse(arbitration=update))
                return
            stream.election_id = election_id
            stream.arbitrated = True
            self._announce()
        elif kind == "packet":
            if self.primary() is not stream:
                return
            schema = self.state.schema
            meta: dict[str, int] = {}
            if schema is not None:
                meta = schema.decode_packet_metadata("packet_out", request.packet.metadata)
            self.packet_outs.put((request.packet.payload, meta))
        elif kind == "digest_ack":
            self.digest_acks += 1
        del context

    # -- pipeline --------------------------------------------------------------------------------

    def SetForwardingPipelineConfig(  # noqa: N802
        self, request: p4r.SetForwardingPipelineConfigRequest, context: grpc.ServicerContext
    ) -> p4r.SetForwardingPipelineConfigResponse:
        self._check_primary(request.election_id, context)
        with self.state.lock:
            self.state.schema = P4Schema(request.config.p4info)
            self.state.device_config = request.config.p4_device_config
            self.state.cookie = request.config.cookie.cookie
            self.state.reset()
            self._shapes.clear()
        return p4r.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(  # noqa: N802
        self, request: p4r.GetForwardingPipelineConfigRequest, context: grpc.ServicerContext
    ) -> p4r.GetForwardingPipelineConfigResponse:
        response = p4r.GetForwardingPipelineConfigResponse()
        with self.state.lock:
            if self.state.schema is None:
                return response
            response.config.cookie.cookie = self.state.cookie
            if request.response_type in (
                p4r.GetForwardingPipelineConfigRequest.ALL,
                p4r.GetForwardingPipelineConfigRequest.P4INFO_AND_COOKIE,
            ):
                response.config.p4info.CopyFrom(self.state.schema.p4info)
            if request.response_type in (
                p4r.GetForwardingPipelineConfigRequest.ALL,
                p4r.GetForwardingPipelineConfigRequest.DEVICE_CONFIG_AND_COOKIE,
            ):
                response.config.p4_device_config = self.state.device_config
        return response

    def Capabilities(  # noqa: N802
        self, request: p4r.CapabilitiesRequest, context: grpc.ServicerContext
    ) -> p4r.CapabilitiesResponse:
        return p4r.CapabilitiesResponse(p4runtime_api_version="1.4.0")

    def _check_primary(self, election: p4r.Uint128, context: grpc.ServicerContext) -> None:
        election_id = election.high << 64 | election.low
        primary = self.primary()
        if primary is None or primary.election_id != election_id:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "not the primary controller")

    # -- write -----------------------------------------------------------------------------------

    def Write(  # noqa: N802
        self, request: p4r.WriteRequest, context: grpc.ServicerContext
    ) -> p4r.WriteResponse:
        self._check_primary(request.election_id, context)
        if self.write_delay:
            time.sleep(self.write_delay)
        errors: list[tuple[int, str]] = []
        kinds: dict[str, int] = {}
        with self.state.lock:
            if self.state.schema is None:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no pipeline configured")
            for update in request.updates:
                kind = update.entity.WhichOneof("entity") or "none"
                kinds[kind] = kinds.get(kind, 0) + 1
                if self.fail_next_writes:
                    failure = self.fail_next_writes.pop(0)
                    if failure is not None:
                        errors.append(failure)
                        continue
                try:
                    self._apply(update)
                    errors.append((rpc_code.OK, ""))
                except _UpdateError as failure:
                    errors.append((failure.code, failure.message))
        self.writes.append(WriteRecord(len(request.updates), kinds))
        if self.keep_requests:
            copy = p4r.WriteRequest()
            copy.CopyFrom(request)
            self.requests.append(copy)
        if any(code != rpc_code.OK for code, _ in errors):
            status = rpc_status.Status(code=rpc_code.UNKNOWN, message="Write failed")
            for code, message in errors:
                status.details.add().Pack(p4r.Error(canonical_code=code, message=message))
            context.set_trailing_metadata(((_DETAILS_KEY, status.SerializeToString()),))
            context.abort(grpc.StatusCode.UNKNOWN, "Write failed")
        return p4r.WriteResponse()

    def _apply(self, update: p4r.Update) -> None:
        entity = update.entity
        kind = entity.WhichOneof("entity")
        if kind == "table_entry":
            self._write_table_entry(update.type, entity.table_entry)
        elif kind == "action_profile_member":
            self._write_member(update.type, entity.action_profile_member)
        elif kind == "action_profile_group":
            self._write_group(update.type, entity.action_profile_group)
        elif kind == "meter_entry":
            self._write_meter(update.type, entity.meter_entry)
        elif kind == "digest_entry":
            self._write_digest(update.type, entity.digest_entry)
        else:
            raise _UpdateError(rpc_code.UNIMPLEMENTED, f"{kind} writes are not supported")

    @property
    def _schema(self) -> P4Schema:
        assert self.state.schema is not None
        return self.state.schema

    def _validate_entry(self, entry: p4r.TableEntry) -> None:
        schema = self._schema
        try:
            table = schema.tables.get_id(entry.table_id)
        except P4InfoError as error:
            raise _UpdateError(rpc_code.NOT_FOUND, str(error)) from None
        which = entry.action.WhichOneof("type")
        if table.implementation_id:
            if which == "action_profile_member_id":
                ref = (table.implementation_id, entry.action.action_profile_member_id)
                if ref not in self.state.members:
                    raise _UpdateError(rpc_code.NOT_FOUND, f"member {ref[1]} does not exist")
            elif which == "action_profile_group_id":
                ref = (table.implementation_id, entry.action.action_profile_group_id)
                if ref not in self.state.groups:
                    raise _UpdateError(rpc_code.NOT_FOUND, f"group {ref[1]} does not exist")
            else:
                raise _UpdateError(
                    rpc_code.INVALID_ARGUMENT, f"{table.name} needs a member or group"
                )
            return
        if which != "action":
            raise _UpdateError(rpc_code.INVALID_ARGUMENT, f"{table.name} takes a direct action")
        action = entry.action.action
        if action.action_id not in table.action_ids:
            raise _UpdateError(rpc_code.INVALID_ARGUMENT, f"action not in {table.name}")
        shape = self._shape(table.id, action.action_id)
        exact_seen = 0
        for match in entry.match:
            width = shape.fields.get(match.field_id)
            if width is None:
                raise _UpdateError(rpc_code.INVALID_ARGUMENT, f"{table.name}: unknown field")
            if match.HasField("exact"):
                exact_seen += 1
                if int.from_bytes(match.exact.value, "big") >> width:
                    raise _UpdateError(rpc_code.INVALID_ARGUMENT, f"{table.name}: value too wide")
        if not entry.is_default_action and exact_seen != shape.exact_fields:
            raise _UpdateError(rpc_code.INVALID_ARGUMENT, f"{table.name}: exact field missing")
        if len(action.params) != len(shape.params):
            raise _UpdateError(rpc_code.INVALID_ARGUMENT, f"{table.name}: wrong parameters")
        for param in action.params:
            width = shape.params.get(param.param_id)
            if width is None or int.from_bytes(param.value, "big") >> width:
                raise _UpdateError(rpc_code.INVALID_ARGUMENT, f"{table.name}: bad parameter")
        if entry.idle_timeout_ns and not table.supports_timeout:
            raise _UpdateError(
                rpc_code.INVALID_ARGUMENT, f"{table.name} does not support idle timeouts"
            )

    def _shape(self, table_id: int, action_id: int) -> _Shape:
        key = (table_id, action_id)
        shape = self._shapes.get(key)
        if shape is None:
            table = self._schema.tables.get_id(table_id)
            action = self._schema.actions.get_id(action_id)
            shape = self._shapes[key] = _Shape(
                fields={f.id: f.bitwidth for f in table.match_fields},
                exact_fields=sum(
                    1 for f in table.match_fields if f.match_type == p4i.MatchField.EXACT
                ),
                params={p.id: p.bitwidth for p in action.params},
            )
        return shape

    def _write_table_entry(self, kind: int, entry: p4r.TableEntry) -> None:
        state = self.state
        if entry.is_default_action:
            if kind != p4r.Update.MODIFY:
                raise _UpdateError(
                    rpc_code.INVALID_ARGUMENT, "default entries can only be modified"
                )
            self._validate_entry(entry)
            stored = p4r.TableEntry()
            stored.CopyFrom(entry)
            state.defaults[entry.table_id] = stored
            return
        key = entry_key(entry)
        if kind == p4r.Update.DELETE:
            stored_entry = state.entries.pop(key, None)
            if stored_entry is None:
                raise _UpdateError(rpc_code.NOT_FOUND, "no such entry")
            state.table_counts[entry.table_id] -= 1
            return
        self._validate_entry(entry)
        copy = p4r.TableEntry()
        copy.CopyFrom(entry)
        if kind == p4r.Update.INSERT:
            if key in state.entries:
                raise _UpdateError(rpc_code.ALREADY_EXISTS, "entry exists")
            size = self._schema.tables.get_id(entry.table_id).size
            if state.table_counts.get(entry.table_id, 0) >= size:
                raise _UpdateError(rpc_code.RESOURCE_EXHAUSTED, "table is full")
            state.entries[key] = _Stored(copy, time.monotonic())
            state.table_counts[entry.table_id] = state.table_counts.get(entry.table_id, 0) + 1
        elif kind == p4r.Update.MODIFY:
            old = state.entries.get(key)
            if old is None:
                raise _UpdateError(rpc_code.NOT_FOUND, "no such entry")
            state.entries[key] = _Stored(copy, old.last_hit, False, old.packets, old.bytes)
        else:
            raise _UpdateError(rpc_code.INVALID_ARGUMENT, "unspecified update type")

    def _write_member(self, kind: int, member: p4r.ActionProfileMember) -> None:
        key = (member.action_profile_id, member.member_id)
        members = self.state.members
        if kind == p4r.Update.DELETE:
            if key not in members:
                raise _UpdateError(rpc_code.NOT_FOUND, f"member {member.member_id} not found")
            for group in self.state.groups.values():
                if group.action_profile_id == key[0] and any(
                    m.member_id == key[1] for m in group.members
                ):
                    raise _UpdateError(rpc_code.FAILED_PRECONDITION, f"member {key[1]} is in group")
            del members[key]
            return
        if kind == p4r.Update.INSERT and key in members:
            raise _UpdateError(rpc_code.ALREADY_EXISTS, f"member {member.member_id} exists")
        if kind == p4r.Update.MODIFY and key not in members:
            raise _UpdateError(rpc_code.NOT_FOUND, f"member {member.member_id} not found")
        copy = p4r.ActionProfileMember()
        copy.CopyFrom(member)
        members[key] = copy

    def _write_group(self, kind: int, group: p4r.ActionProfileGroup) -> None:
        key = (group.action_profile_id, group.group_id)
        groups = self.state.groups
        if kind == p4r.Update.DELETE:
            if key not in groups:
                raise _UpdateError(rpc_code.NOT_FOUND, f"group {group.group_id} not found")
            for stored in self.state.entries.values():
                if stored.entry.action.action_profile_group_id == group.group_id:
                    raise _UpdateError(
                        rpc_code.FAILED_PRECONDITION, f"group {group.group_id} is in use"
                    )
            del groups[key]
            return
        if kind == p4r.Update.INSERT and key in groups:
            raise _UpdateError(rpc_code.ALREADY_EXISTS, f"group {group.group_id} exists")
        if kind == p4r.Update.MODIFY and key not in groups:
            raise _UpdateError(rpc_code.NOT_FOUND, f"group {group.group_id} not found")
        total = 0
        for member in group.members:
            if (group.action_profile_id, member.member_id) not in self.state.members:
                raise _UpdateError(rpc_code.NOT_FOUND, f"member {member.member_id} not found")
            if member.weight <= 0:
                raise _UpdateError(rpc_code.INVALID_ARGUMENT, "member weights must be > 0")
            total += member.weight
        if group.max_size and total > group.max_size:
            raise _UpdateError(
                rpc_code.RESOURCE_EXHAUSTED, f"weights {total} exceed max_size {group.max_size}"
            )
        copy = p4r.ActionProfileGroup()
        copy.CopyFrom(group)
        groups[key] = copy

    def _write_meter(self, kind: int, meter: p4r.MeterEntry) -> None:
        if kind != p4r.Update.MODIFY:
            raise _UpdateError(rpc_code.INVALID_ARGUMENT, "meter entries can only be modified")
        key = (meter.meter_id, meter.index.index)
        if meter.HasField("config"):
            copy = p4r.MeterConfig()
            copy.CopyFrom(meter.config)
            self.state.meters[key] = copy
        else:
            self.state.meters.pop(key, None)

    def _write_digest(self, kind: int, digest: p4r.DigestEntry) -> None:
        configs = self.state.digest_configs
        if kind == p4r.Update.DELETE:
            if configs.pop(digest.digest_id, None) is None:
                raise _UpdateError(rpc_code.NOT_FOUND, "digest not configured")
            return
        if kind == p4r.Update.INSERT and digest.digest_id in configs:
            raise _UpdateError(rpc_code.ALREADY_EXISTS, "digest already configured")
        if kind == p4r.Update.MODIFY and digest.digest_id not in configs:
            raise _UpdateError(rpc_code.NOT_FOUND, "digest not configured")
        copy = p4r.DigestEntry()
        copy.CopyFrom(digest)
        configs[digest.digest_id] = copy

    # -- read ------------------------------------------------------------------------------------

    def Read(  # noqa: N802
        self, request: p4r.ReadRequest, context: grpc.ServicerContext
    ) -> Iterator[p4r.ReadResponse]:
        out: list[p4r.Entity] = []
        with self.state.lock:
            for entity in request.entities:
                out.extend(self._read(entity))
        for start in range(0, max(len(out), 1), 1000):
            response = p4r.ReadResponse()
            response.entities.extend(out[start : start + 1000])
            yield response

    def _read(self, entity: p4r.Entity) -> Iterable[p4r.Entity]:
        kind = entity.WhichOneof("entity")
        now = time.monotonic()
        if kind == "table_entry":
            query = entity.table_entry
            if query.is_default_action:
                stored_default = self.state.defaults.get(query.table_id)
                if stored_default is not None:
                    yield p4r.Entity(table_entry=stored_default)
                return
            for stored in self.state.entries.values():
                if query.table_id and stored.entry.table_id != query.table_id:
                    continue
                if query.match and entry_key(query)[1] != entry_key(stored.entry)[1]:
                    continue
                result = p4r.TableEntry()
                result.CopyFrom(stored.entry)
                if stored.entry.idle_timeout_ns:
                    result.time_since_last_hit.elapsed_ns = int((now - stored.last_hit) * 1e9)
                yield p4r.Entity(table_entry=result)
        elif kind == "action_profile_member":
            profile = entity.action_profile_member.action_profile_id
            for (pid, _), member in sorted(self.state.members.items()):
                if not profile or pid == profile:
                    yield p4r.Entity(action_profile_member=member)
        elif kind == "action_profile_group":
            profile = entity.action_profile_group.action_profile_id
            for (pid, _), group in sorted(self.state.groups.items()):
                if not profile or pid == profile:
                    yield p4r.Entity(action_profile_group=group)
        elif kind == "meter_entry":
            meter_id = entity.meter_entry.meter_id
            for (mid, index), config in sorted(self.state.meters.items()):
                if meter_id and mid != meter_id:
                    continue
                meter = p4r.MeterEntry(meter_id=mid)
                meter.index.index = index
                meter.config.CopyFrom(config)
                yield p4r.Entity(meter_entry=meter)
        elif kind == "digest_entry":
            wanted = entity.digest_entry.digest_id
            for digest_id, digest in sorted(self.state.digest_configs.items()):
                if not wanted or digest_id == wanted:
                    yield p4r.Entity(digest_entry=digest)
        elif kind == "direct_counter_entry":
            query_entry = entity.direct_counter_entry.table_entry
            for stored in self.state.entries.values():
                if query_entry.table_id and stored.entry.table_id != query_entry.table_id:
                    continue
                if query_entry.match and entry_key(query_entry)[1] != entry_key(stored.entry)[1]:
                    continue
                result_entry = p4r.DirectCounterEntry()
                result_entry.table_entry.CopyFrom(stored.entry)
                result_entry.table_entry.ClearField("action")
                result_entry.data.packet_count = stored.packets
                result_entry.data.byte_count = stored.bytes
                yield p4r.Entity(direct_counter_entry=result_entry)

    # -- playing the data plane ------------------------------------------------------------------

    def table_entries(self, table: str) -> list[p4r.TableEntry]:
        with self.state.lock:
            table_id = self._schema.tables.get(table).id
            return [s.entry for s in self.state.entries.values() if s.entry.table_id == table_id]

    def find_entry(self, table: str, match: p4r.TableEntry) -> p4r.TableEntry | None:
        with self.state.lock:
            stored = self.state.entries.get(entry_key(match))
            return stored.entry if stored is not None else None

    def default_entry(self, table: str) -> p4r.TableEntry | None:
        with self.state.lock:
            return self.state.defaults.get(self._schema.tables.get(table).id)

    def hit(self, entry: p4r.TableEntry, packets: int = 1, size: int = 64) -> None:
        """A packet hit `entry`: its idle timer restarts, its counter counts."""
        with self.state.lock:
            stored = self.state.entries.get(entry_key(entry))
            if stored is not None:
                stored.last_hit = time.monotonic()
                stored.notified = False
                stored.packets += packets
                stored.bytes += packets * size

    def plant(self, entry: p4r.TableEntry) -> None:
        """Put an entry in the table behind the controller's back (state it did not write)."""
        with self.state.lock:
            copy = p4r.TableEntry()
            copy.CopyFrom(entry)
            key = entry_key(copy)
            if key not in self.state.entries:
                counts = self.state.table_counts
                counts[copy.table_id] = counts.get(copy.table_id, 0) + 1
            self.state.entries[key] = _Stored(copy, time.monotonic())

    def remove(self, entry: p4r.TableEntry) -> bool:
        """Take an entry out behind the controller's back (as if it aged out unnoticed)."""
        with self.state.lock:
            stored = self.state.entries.pop(entry_key(entry), None)
            if stored is not None:
                self.state.table_counts[entry.table_id] -= 1
            return stored is not None

    def idle_for(self, entry: p4r.TableEntry, seconds: float) -> None:
        """Pretend `entry` was last hit `seconds` ago."""
        with self.state.lock:
            stored = self.state.entries.get(entry_key(entry))
            if stored is not None:
                stored.last_hit = time.monotonic() - seconds

    def _send_to_primary(self, message: p4r.StreamMessageResponse) -> bool:
        primary = self.primary()
        if primary is None:
            return False
        primary.outbox.put(message)
        return True

    def inject_digest(self, name: str, records: Iterable[Mapping[str, int]]) -> bool:
        """Send one DigestList with `records` (member name -> value) to the primary, if the
        digest is configured. Returns whether it was sent."""
        schema = self._schema
        digest = schema.digests.get(name)
        with self.state.lock:
            if digest.preamble.id not in self.state.digest_configs:
                return False
        fields = schema.digest_fields(name)
        struct = schema.p4info.type_info.structs[digest.type_spec.struct.name]
        widths = [m.type_spec.bitstring.bit.bitwidth for m in struct.members]
        self._list_id += 1
        message = p4r.DigestList(digest_id=digest.preamble.id, list_id=self._list_id)
        message.timestamp = time.time_ns()
        for record in records:
            data = p4d.P4Data()
            for name_, width in zip(fields, widths, strict=True):
                value = record.get(name_, 0)
                data.struct.members.add().bitstring = value.to_bytes((width + 7) // 8, "big")
            message.data.append(data)
        return self._send_to_primary(p4r.StreamMessageResponse(digest=message))

    def inject_packet_in(self, payload: bytes, metadata: Mapping[str, int]) -> bool:
        packet = p4r.PacketIn(payload=payload)
        packet.metadata.extend(self._schema.encode_packet_metadata("packet_in", metadata))
        return self._send_to_primary(p4r.StreamMessageResponse(packet=packet))

    def notify_idle(self, entries: Iterable[p4r.TableEntry]) -> bool:
        notification = p4r.IdleTimeoutNotification(timestamp=time.time_ns())
        with self.state.lock:
            for entry in entries:
                stored = self.state.entries.get(entry_key(entry))
                if stored is None:
                    continue
                stored.notified = True
                notification.table_entry.append(stored.entry)
        if not notification.table_entry:
            return False
        return self._send_to_primary(
            p4r.StreamMessageResponse(idle_timeout_notification=notification)
        )

    def age(self) -> int:
        """Notify every entry idle for longer than its timeout (once per idle period)."""
        now = time.monotonic()
        with self.state.lock:
            due = [
                s.entry
                for s in self.state.entries.values()
                if s.entry.idle_timeout_ns
                and not s.notified
                and (now - s.last_hit) * 1e9 >= s.entry.idle_timeout_ns
            ]
        if due:
            self.notify_idle(due)
        return len(due)

    def packet_out(self, timeout: float) -> tuple[bytes, dict[str, int]] | None:
        try:
            return self.packet_outs.get(timeout=timeout)
        except queue.Empty:
            return None
