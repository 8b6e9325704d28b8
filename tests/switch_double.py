"""The built-in switch's own P4Runtime server, with no ports, as the controller tests' switch.

Every P4Runtime rule (arbitration, INSERT/MODIFY/DELETE semantics, per-update errors, action
profile references, table sizes, digest configuration, idle timeouts) is the built-in switch's:
there is one implementation of them in the project. What this module adds is only what lets a
test play the data plane and watch the controller: `inject_digest`, `inject_packet_in`,
`idle_for`, `plant`/`remove` behind the controller's back, and records of every Write,
packet-out and digest acknowledgement. Packet-outs still run through the loaded pipeline;
frames it sends to ports go nowhere (there are none).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from finsy.proto import p4d, p4r

from opengate import p4constants as pc
from opengate.p4info import P4Schema
from softswitch.p4rt_common import P4RTError, Pipeline, Stream
from softswitch.p4runtime_server import P4RuntimeServer, P4RuntimeService
from softswitch.switch import Switch


@dataclass(slots=True)
class WriteRecord:
    updates: int
    kinds: dict[str, int]


class RecordingService(P4RuntimeService):
    """The built-in switch's service, recording what the controller sends it."""

    def __init__(self, switch: Switch) -> None:
        super().__init__(switch)
        self.writes: list[WriteRecord] = []
        self.keep_requests = False  # keep a copy of every WriteRequest in `requests`
        self.requests: list[p4r.WriteRequest] = []
        # The coming updates fail with (code, message), or go through (None).
        self.fail_next_writes: list[tuple[grpc.StatusCode, str] | None] = []
        self.packet_outs: queue.Queue[tuple[bytes, dict[str, int]]] = queue.Queue()
        self.digest_acks = 0

    def Write(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        kinds: dict[str, int] = {}
        for update in request.updates:
            kind = update.entity.WhichOneof("entity") or "none"
            kinds[kind] = kinds.get(kind, 0) + 1
        self.writes.append(WriteRecord(len(request.updates), kinds))
        if self.keep_requests:
            copy = p4r.WriteRequest()
            copy.CopyFrom(request)
            self.requests.append(copy)
        return super().Write(request, context)

    def _write_one(self, pipe: Pipeline, update: Any) -> None:
        if self.fail_next_writes:
            failure = self.fail_next_writes.pop(0)
            if failure is not None:
                raise P4RTError(*failure)
        super()._write_one(pipe, update)

    def _packet_out(self, stream: Stream, pkt: Any) -> None:
        if stream is self._primary() and self.pipeline is not None:
            schema = P4Schema(self.pipeline.p4info)
            meta = schema.decode_packet_metadata("packet_out", pkt.metadata)
            self.packet_outs.put((bytes(pkt.payload), meta))
        super()._packet_out(stream, pkt)

    def _digest_ack(self, did: int, list_id: int) -> None:
        self.digest_acks += 1
        super()._digest_ack(did, list_id)


class SwitchDouble:
    """`with SwitchDouble() as switch:` -> the built-in switch's P4Runtime server on
    127.0.0.1:switch.port, with no ports and no pipeline until a controller pushes one."""

    def __init__(self, device_id: int = 1, port: int = 0) -> None:
        self.switch = Switch(device_id=device_id, cpu_port=pc.CPU_PORT)
        self._server: P4RuntimeServer | None = None
        self._wanted_port = port
        self.port = port
        self.service = RecordingService(self.switch)
        self._list_id = 1 << 30  # far from the switch's own digest list ids

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> SwitchDouble:
        server = P4RuntimeServer(
            self.switch, f"127.0.0.1:{self._wanted_port}", service=self.service
        )
        server.start()
        self.port = server.port
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> SwitchDouble:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    # -- what the controller did -----------------------------------------------------------------

    @property
    def writes(self) -> list[WriteRecord]:
        return self.service.writes

    @property
    def requests(self) -> list[p4r.WriteRequest]:
        return self.service.requests

    @property
    def packet_outs(self) -> queue.Queue[tuple[bytes, dict[str, int]]]:
        return self.service.packet_outs

    @property
    def digest_acks(self) -> int:
        return self.service.digest_acks

    def keep_requests(self) -> None:
        """Keep a copy of every WriteRequest from now on (in `requests`)."""
        self.service.keep_requests = True

    def fail_next_writes(self, *failures: tuple[grpc.StatusCode, str] | None) -> None:
        """The coming updates fail with (code, message), or go through (None)."""
        self.service.fail_next_writes.extend(failures)

    def packet_out(self, timeout: float) -> tuple[bytes, dict[str, int]] | None:
        try:
            return self.packet_outs.get(timeout=timeout)
        except queue.Empty:
            return None

    @property
    def pipeline(self) -> Pipeline | None:
        return self.service.pipeline

    @property
    def schema(self) -> P4Schema:
        pipe = self.service.pipeline
        if pipe is None:
            raise AssertionError("no pipeline has been pushed to the switch")
        return P4Schema(pipe.p4info)

    def read(self, entity: p4r.Entity) -> list[p4r.Entity]:
        """What a P4Runtime Read of `entity` returns."""
        with self.service.lock:
            pipe = self.service.pipeline
            if pipe is None:
                return []
            with pipe.dataplane.lock:
                return list(self.service._read_one(pipe, entity))

    def table_entries(self, table: str) -> list[p4r.TableEntry]:
        if self.service.pipeline is None:
            return []
        entity = p4r.Entity()
        entity.table_entry.table_id = self.schema.tables.get(table).id
        return [e.table_entry for e in self.read(entity)]

    def find_entry(self, table: str, match: p4r.TableEntry) -> p4r.TableEntry | None:
        del table
        entity = p4r.Entity()
        entity.table_entry.table_id = match.table_id
        entity.table_entry.match.extend(match.match)
        entity.table_entry.priority = match.priority
        found = self.read(entity)
        return found[0].table_entry if found else None

    def default_entry(self, table: str) -> p4r.TableEntry:
        entity = p4r.Entity()
        entity.table_entry.table_id = self.schema.tables.get(table).id
        entity.table_entry.is_default_action = True
        (found,) = self.read(entity)
        return found.table_entry

    def entities(self, kind: str) -> list[p4r.Entity]:
        """Every entity of one kind (`action_profile_group`, `meter_entry`, `digest_entry`...)."""
        entity = p4r.Entity()
        getattr(entity, kind).SetInParent()
        return self.read(entity)

    # -- playing the data plane ------------------------------------------------------------------

    def _update(self, kind: p4r.Update.Type.ValueType, entry: p4r.TableEntry) -> bool:
        update = p4r.Update(type=kind)
        update.entity.table_entry.CopyFrom(entry)
        with self.service.lock:
            pipe = self.service.pipeline
            if pipe is None:
                return False
            with pipe.dataplane.lock:
                try:
                    P4RuntimeService._write_one(self.service, pipe, update)
                except P4RTError:
                    return False
        return True

    def plant(self, entry: p4r.TableEntry) -> bool:
        """Put an entry in the table behind the controller's back (state it did not write)."""
        return self._update(p4r.Update.INSERT, entry)

    def remove(self, entry: p4r.TableEntry) -> bool:
        """Take an entry out behind the controller's back (as if it aged out unnoticed)."""
        return self._update(p4r.Update.DELETE, entry)

    def idle_for(self, entry: p4r.TableEntry, seconds: float, *more: p4r.TableEntry) -> None:
        """Make `entry` (and `more`, at the same instant: one notification) last hit `seconds`
        ago: the switch's idle timer does the rest."""
        pipe = self.service.pipeline
        assert pipe is not None
        with self.service.lock, pipe.dataplane.lock:
            for one in (entry, *more):
                info = pipe.map.tables[one.table_id]
                key, _ = self.service._match_key(info, one.match)
                stored = info.table.entries.get(info.table.canonical(key, one.priority))
                assert stored is not None, "no such entry"
                stored.last_hit = time.monotonic_ns() - int(seconds * 1e9)
                stored.notified = False
                pipe.idle.arm(info.table, stored, info)  # its deadline moved earlier

    def _send_to_primary(self, message: p4r.StreamMessageResponse) -> bool:
        with self.service.lock:
            primary = self.service._primary()
        if primary is None:
            return False
        primary.out.put(message)
        return True

    def inject_digest(self, name: str, records: Iterable[Mapping[str, int]]) -> bool:
        """Send one DigestList with `records` (member name -> value) to the primary, if the
        controller configured the digest. Returns whether it was sent."""
        pipe = self.service.pipeline
        if pipe is None:
            return False
        schema = self.schema
        digest = schema.digests.get(name)
        if digest.preamble.id not in self.service.digests:
            return False
        fields = schema.digest_fields(name)
        struct = schema.p4info.type_info.structs[digest.type_spec.struct.name]
        widths = [m.type_spec.bitstring.bit.bitwidth for m in struct.members]
        self._list_id += 1
        message = p4r.DigestList(digest_id=digest.preamble.id, list_id=self._list_id)
        message.timestamp = time.time_ns()
        for record in records:
            data = p4d.P4Data()
            for field_name, width in zip(fields, widths, strict=True):
                value = record.get(field_name, 0)
                data.struct.members.add().bitstring = value.to_bytes((width + 7) // 8, "big")
            message.data.append(data)
        return self._send_to_primary(p4r.StreamMessageResponse(digest=message))

    def inject_packet_in(self, payload: bytes, metadata: Mapping[str, int]) -> bool:
        """A packet-in as the pipeline sends one: through the switch's own packet-in path."""
        pipe = self.service.pipeline
        if pipe is None or self.service._primary() is None:
            return False
        md = pipe.map.packet_in
        header = b""
        if md is not None and md.nbits:
            acc = 0
            for _mid, name, width in md.fields:
                acc = (acc << width) | metadata.get(name, 0)
            header = acc.to_bytes(md.nbits // 8, "big")
        self.service._packet_in(header + payload)
        return True
