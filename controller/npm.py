"""One NPM switch as the controller sees it: a P4Runtime connection, its pipeline, reading its
entries back, writing batches, and turning its stream (digests, packet-ins, idle timeouts,
arbitration) into controller events.

P4Runtime client: the project's own `opengate.p4rt` over grpcio with the protos that finsy ships,
not finsy's asyncio controller: one small synchronous client serves the controller, the PTF tests
and the benchmarks, and gives exact control over how updates are batched into Writes and over
the per-update error details.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from finsy.proto import p4r, rpc_code

from controller.baseconfig import (
    BASE_DEFAULTS,
    BASE_TABLES,
    METERS,
    BaseConfig,
    BaseDiff,
    Group,
    GroupEntry,
    Member,
    MeterCell,
)
from controller.classifier import CLASSIFICATION_TABLES, Op, Write
from controller.hsm import schema as hsm_schema
from controller.metrics import Metrics
from opengate import p4constants as pc
from opengate.entries import Exact, TableEntry
from opengate.p4info import P4Schema, decode_value
from opengate.p4rt import P4RuntimeClient, P4RuntimeError, UpdateError, update_of
from opengate.throttled import ThrottledWarning

LOG = logging.getLogger(__name__)

MAX_UPDATES_PER_WRITE = 4096
# Where the CPM makes the sessions (no data-plane sessions: the TNA build), a flow's reply waits
# for its digest, so digests are sent one record at a time, at once: BMv2 holds a list that may
# grow for 100 ms or more (measured: first packet -> installed 2 ms with lists of 1, 105 ms with
# lists of 256 and a 1 ms timeout). The CPM batches on its side instead: the requests that queue
# up while it writes go into the next Write together.
DIGEST_MAX_LIST = 1
DIGEST_MAX_TIMEOUT_NS = 0
# Where the data plane makes them, no packet waits for a digest (a flow whose slots are both held
# waits at the CPM as a packet-in instead): lists of up to 128 records, held at most 20 ms, so
# that a flood of new flows costs the CPM a stream message and an ack per list, not per flow: with
# lists held 5 ms, gRPC's handling of a flood's short lists was about half of the CPM's work, and
# the inspected flow beside the flood kept less of its rate (bench_flood). The CPM learns of a
# flow up to 20 ms later. BMv2's P4Runtime server (PI) raises any max_timeout_ns to 100 ms and
# sends at its second sweep, so there the CPM learns of a flow 100-200 ms after its first packet.
DP_DIGEST_MAX_LIST = 128
DP_DIGEST_MAX_TIMEOUT_NS = 20_000_000
DIGEST_ACK_TIMEOUT_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class NpmAddress:
    name: str
    address: str  # host:port of the P4Runtime server
    device_id: int = 1


@dataclass(frozen=True, slots=True)
class Pipeline:
    p4info_path: Path
    json_path: Path

    def load(self) -> tuple[P4Schema, bytes, int]:
        p4info_bytes = self.p4info_path.read_bytes()
        config = self.json_path.read_bytes()
        cookie = int.from_bytes(hashlib.sha256(p4info_bytes + config).digest()[:8], "big") >> 1
        return P4Schema.load(self.p4info_path), config, cookie


StreamSink = Callable[[str, Any], None]  # (kind, payload): kind in digest|packet_in|idle


class _Client(P4RuntimeClient):
    """The shared client, plus a flag that says when its stream has ended, and the standby's
    take-over.

    P4Runtime ("Client Arbitration and Controller Replication"): when the primary's stream
    breaks, the switch has no primary and tells the others so (NOT_FOUND) with the highest
    election id it has seen; a controller becomes primary only by arbitrating with at least
    that id. So a standby told there is no primary arbitrates again with that id plus its own
    configured one: above every id seen, and two standbys with distinct ids never pick the same
    one (the higher configured id wins)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stream_closed = threading.Event()
        self.configured_election_id = self.election_id

    def _read_stream(self) -> None:
        try:
            super()._read_stream()
        finally:
            self.stream_closed.set()

    def _arbitration_changed(self) -> None:
        highest = self.highest_election_id
        if self.has_primary or self.is_primary or highest is None:
            return
        if self.election_id > highest:
            return  # already asked with a higher one; its answer follows
        election_id = highest + max(1, self.configured_election_id)
        LOG.info(
            "%s: no primary (highest election id %d): taking over with election id %d",
            self.address,
            highest,
            election_id,
        )
        self.rearbitrate(election_id)


@dataclass(slots=True)
class WriteResult:
    failed: list[UpdateError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed


class NpmConnection:
    """P4Runtime to one NPM. Writes come from one thread (the event dispatcher) at a time."""

    def __init__(
        self,
        address: NpmAddress,
        pipeline: Pipeline,
        election_id: int,
        metrics: Metrics,
        sink: StreamSink,
    ) -> None:
        self.name = address.name
        self.address = address
        self.pipeline = pipeline
        self.election_id = election_id
        self.metrics = metrics
        self.sink = sink
        self.schema, self._config, self.cookie = pipeline.load()
        # Entries per bank of each classification table in this NPM's program (builds differ:
        # the compact build's chain tables are a sixteenth of the default's).
        self.classifier_limits = hsm_schema.program_limits(
            {t.name: t.size for t in self.schema.tables.by_id.values()}
        )
        self.client: _Client | None = None
        self.log = logging.LoggerAdapter(LOG, {"npm": self.name})
        self._write_failures = ThrottledWarning(LOG, "updates failed")
        self._pumps: list[threading.Thread] = []
        self._stop = threading.Event()
        self.connected_at = 0.0
        self.pipeline_pushed = False
        self._resolve_ids()

    @property
    def available(self) -> frozenset[str]:
        """Names of the tables and meters this NPM's program has (builds differ: no
        data-plane sessions on TNA)."""
        return frozenset(self.schema.tables.by_name) | frozenset(self.schema.meters.by_name)

    @property
    def slots_retire_themselves(self) -> bool:
        """Whether the program's data-plane slots, if it has any, end with their flow's exact
        entries and report a long-lived flow again (v1model,
        p4src/include/control/session_setup.p4). Tofino's (p4src/include/arch/tna_flow_slots.p4,
        a program with `end_flow` but no `flow_state` register) do neither: the CPM ends a
        removed session's slot with an end_flow frame, and writes entries for every flow (no
        entries on demand)."""
        if pc.R_FLOW_STATE in self.schema.registers:
            return True
        fields = self.schema.packet_metadata.get("packet_out", ())
        return not any(field.name == "end_flow" for field in fields)

    def _resolve_ids(self) -> None:
        schema = self.schema
        self.session_table = schema.tables.get(pc.T_SESSION)
        self.spm_select = schema.tables.get(pc.T_SPM_SELECT)
        self.profile_id = self.spm_select.implementation_id
        self.steer_action = schema.actions.get(pc.A_STEER_TO_SPM)
        # (IPv6 builds: an IPv6 session's FIN or RST too)
        self.digest_ids = {
            schema.digests.get(name).preamble.id: name
            for name in (pc.D_SESSION_REQUEST_T, pc.D_SESSION_CLOSE_T, pc.D_SESSION_CLOSE_V6_T)
            if name in schema.digests
        }
        self.digest_fields = {name: schema.digest_fields(name) for name in self.digest_ids.values()}

    # -- connection --------------------------------------------------------------------------

    @property
    def is_connected(self) -> bool:
        return self.client is not None and not self.client.stream_closed.is_set()

    @property
    def is_primary(self) -> bool:
        return self.is_connected and self.client is not None and self.client.is_primary

    def connect(self, timeout: float = 10.0) -> None:
        """Open the stream and arbitrate. Whether we are primary is in `is_primary`."""
        self.close()
        self._stop.clear()
        client = _Client(
            self.address.address, device_id=self.address.device_id, election_id=self.election_id
        )
        try:
            client.connect(timeout=timeout)
        except BaseException:
            client.close()  # a half-open stream would keep our election id at the switch
            raise
        self.client = client
        self.connected_at = time.monotonic()
        self.log.info(
            "connected to %s (device %d, election id %d): %s",
            self.address.address,
            self.address.device_id,
            self.election_id,
            "primary" if client.is_primary else "standby",
        )
        self._pumps = [
            threading.Thread(
                target=self._pump,
                args=(client.digests, "digest"),
                daemon=True,
                name=f"npm-{self.name}-digests",
            ),
            threading.Thread(
                target=self._pump,
                args=(client.packet_ins, "packet_in"),
                daemon=True,
                name=f"npm-{self.name}-packet-in",
            ),
            threading.Thread(
                target=self._pump,
                args=(client.idle_timeouts, "idle"),
                daemon=True,
                name=f"npm-{self.name}-idle",
            ),
        ]
        for pump in self._pumps:
            pump.start()

    def close(self) -> None:
        self._stop.set()
        for pump in self._pumps:
            pump.join(timeout=2)
        self._pumps = []
        if self.client is not None:
            self.client.close()
            self.client = None

    def _pump(self, source: queue.Queue[Any], kind: str) -> None:
        while not self._stop.is_set():
            try:
                item = source.get(timeout=0.2)
            except queue.Empty:
                continue
            if kind == "digest":
                self._ack(item)
            self.sink(kind, item)

    def _ack(self, digest: p4r.DigestList) -> None:
        if self.client is not None:
            self.client.ack_digest(digest)

    @property
    def _client(self) -> _Client:
        if self.client is None:
            raise ConnectionError(f"NPM {self.name} is not connected")
        return self.client

    # -- pipeline ----------------------------------------------------------------------------

    def ensure_pipeline(self) -> bool:
        """Push the pipeline unless the switch already runs ours (then its tables are kept).
        Returns True when it was pushed (the switch's state is new)."""
        client = self._client
        try:
            current = client.get_pipeline()
            has_ours = current.cookie.cookie == self.cookie
        except P4RuntimeError as error:
            self.log.info("no pipeline readable (%s); pushing it", error.message)
            has_ours = False
        if has_ours:
            self.log.info(
                "switch already runs this pipeline (cookie %#x); keeping its state", self.cookie
            )
            self.pipeline_pushed = False
            return False
        client.set_pipeline(self.schema.p4info, self._config, self.cookie)
        self.log.info("pushed the pipeline %s (cookie %#x)", self.pipeline.json_path, self.cookie)
        self.pipeline_pushed = True
        return True

    def enable_digests(self) -> None:
        """Configure both digests (read back first: a restart keeps a configuration that fits)."""
        updates = []
        batched = pc.T_FLOW_AGEING in self.schema.tables
        for digest_id in self.digest_ids:
            wanted = p4r.DigestEntry(digest_id=digest_id)
            wanted.config.max_timeout_ns = (
                DP_DIGEST_MAX_TIMEOUT_NS if batched else DIGEST_MAX_TIMEOUT_NS
            )
            wanted.config.max_list_size = DP_DIGEST_MAX_LIST if batched else DIGEST_MAX_LIST
            wanted.config.ack_timeout_ns = DIGEST_ACK_TIMEOUT_NS
            try:
                have = [
                    e.digest_entry
                    for e in self.read(
                        [p4r.Entity(digest_entry=p4r.DigestEntry(digest_id=digest_id))]
                    )
                    if e.digest_entry.digest_id == digest_id
                ]
            except P4RuntimeError as error:
                if error.code != grpc.StatusCode.NOT_FOUND:
                    self.log.debug("cannot read digest %#x back: %s", digest_id, error)
                have = []
            if not have:
                updates.append(update_of(p4r.Update.INSERT, wanted))
            elif have[0].config != wanted.config:
                updates.append(update_of(p4r.Update.MODIFY, wanted))
        result = self.write(updates, "digest config")
        retry = [
            update_of(p4r.Update.MODIFY, updates[e.index].entity.digest_entry)
            for e in result.failed
            if e.code == rpc_code.ALREADY_EXISTS
        ]
        if len(retry) != len(result.failed):
            raise P4RuntimeError(
                "Write (digest config)",
                grpc.StatusCode.UNKNOWN,
                "the switch refused the digest configuration",
                result.failed,
            )
        self.write_checked(retry, "digest config")

    # -- writing -----------------------------------------------------------------------------

    def write(self, updates: Sequence[p4r.Update], what: str) -> WriteResult:
        """Write in chunks; failed updates come back by index into `updates`."""
        return self.write_filled(len(updates), lambda r, a, b: r.updates.extend(updates[a:b]), what)

    def write_filled(
        self,
        count: int,
        fill: Callable[[p4r.WriteRequest, int, int], None],
        what: str,
        expected: frozenset[int] = frozenset(),
    ) -> WriteResult:
        """Like `write`, for `count` updates that `fill(request, start, end)` builds in place
        into each chunk's request (the session path: no message built twice). Failures with a
        code in `expected` (NOT_FOUND for a delete that may race) are returned, not warned."""
        result = WriteResult()
        client = self._client
        # the client's election id: the configured one, or the one it took over with
        election_id = client.election_id
        election = p4r.Uint128(high=election_id >> 64, low=election_id & (2**64 - 1))
        metrics = self.metrics
        for start in range(0, count, MAX_UPDATES_PER_WRITE):
            end = min(count, start + MAX_UPDATES_PER_WRITE)
            request = p4r.WriteRequest(
                device_id=self.address.device_id,
                election_id=election,
                atomicity=p4r.WriteRequest.CONTINUE_ON_ERROR,
            )
            fill(request, start, end)
            began = time.perf_counter()
            try:
                client.stub.Write(request)
            except grpc.RpcError as rpc_error:
                error = P4RuntimeError.from_rpc_error("Write", rpc_error)
                if not error.details:
                    metrics.p4rt_write_errors.labels(self.name).inc(end - start)
                    raise error from None
                for detail in error.details:
                    result.failed.append(
                        UpdateError(start + detail.index, detail.code, detail.message)
                    )
                metrics.p4rt_write_errors.labels(self.name).inc(len(error.details))
            finally:
                metrics.p4rt_write_seconds.labels(self.name).observe(time.perf_counter() - began)
                metrics.p4rt_writes.labels(self.name).inc()
                metrics.p4rt_updates.labels(self.name).inc(end - start)
        unexpected = [e for e in result.failed if e.code not in expected]
        if unexpected:
            # A flood can fail every batch (a full table): a line a second, with the count.
            self._write_failures.warning(
                f"{self.name}: {what}",
                f"{len(unexpected)} of {count}, first: {unexpected[0].message}",
            )
        return result

    def write_checked(self, updates: Sequence[p4r.Update], what: str) -> None:
        result = self.write(updates, what)
        if result.failed:
            raise P4RuntimeError(
                f"Write ({what})",
                grpc.StatusCode.UNKNOWN,
                f"{len(result.failed)} of {len(updates)} updates failed",
                result.failed,
            )

    def read(
        self, entities: Iterable[p4r.Entity], timeout: float | None = None
    ) -> list[p4r.Entity]:
        return list(self._client.read(entities, timeout))

    def packet_out(
        self, payload: bytes, submit_to_ingress: bool = True, port: int = 0, end_flow: bool = False
    ) -> None:
        """Send `payload` out of `port`, or through the pipeline (`submit_to_ingress`); with
        `end_flow`, the pipeline frees the data-plane slot of the payload's flow and drops it."""
        values = {"egress_port": port, "submit_to_ingress": int(submit_to_ingress)}
        if end_flow:
            values["end_flow"] = 1
        metadata = self.schema.encode_packet_metadata("packet_out", values)
        self._client.packet_out(payload, metadata)

    # -- encoding ----------------------------------------------------------------------------

    def entry_update(self, kind: int, entry: TableEntry) -> p4r.Update:
        message = self.schema.encode_entry(entry)
        if kind == p4r.Update.DELETE:
            message.ClearField("action")
        return update_of(kind, message)

    def member_message(self, member: Member) -> p4r.ActionProfileMember:
        message = p4r.ActionProfileMember(
            action_profile_id=self.profile_id, member_id=member.member_id
        )
        message.action.CopyFrom(
            self.schema.encode_action(
                self.steer_action, {"port": member.port, "spm_mac": member.mac}
            )
        )
        return message

    def group_message(self, group: Group) -> p4r.ActionProfileGroup:
        message = p4r.ActionProfileGroup(
            action_profile_id=self.profile_id, group_id=group.group_id, max_size=group.max_size
        )
        for member_id, weight in group.members:
            message.members.add(member_id=member_id, weight=weight)
        return message

    def group_entry_message(self, item: GroupEntry) -> p4r.TableEntry:
        message = p4r.TableEntry(table_id=self.spm_select.id)
        field_match = self.schema.encode_match(self.spm_select, "pool", Exact(item.pool))
        assert field_match is not None
        message.match.append(field_match)
        message.action.action_profile_group_id = item.group_id
        return message

    def meter_message(self, cell: MeterCell) -> p4r.MeterEntry:
        message = p4r.MeterEntry(meter_id=self.schema.meters.get(cell.meter).preamble.id)
        message.index.index = cell.index
        if cell.config is not None:
            cir, cburst, pir, pburst = cell.config
            message.config.cir = cir
            message.config.cburst = cburst
            message.config.pir = pir
            message.config.pburst = pburst
        return message

    # -- base configuration ------------------------------------------------------------------

    def read_base(self) -> BaseConfig:
        """The base configuration the switch holds now (tables the CPM owns)."""
        out = BaseConfig()
        queries = [
            p4r.Entity(table_entry=p4r.TableEntry(table_id=self.schema.tables.get(t).id))
            for t in BASE_TABLES
            if t in self.schema.tables
        ]
        queries += [
            p4r.Entity(
                table_entry=p4r.TableEntry(
                    table_id=self.schema.tables.get(t).id, is_default_action=True
                )
            )
            for t in BASE_DEFAULTS
            if t in self.schema.tables
        ]
        for entity in self.read(queries):
            decoded = self.schema.decode_entry(entity.table_entry)
            if decoded.is_default:
                # a default entry has no match (decoding spells a keyed table's wildcards)
                decoded = dataclasses.replace(decoded, match=(), priority=0)
            out.add(decoded)
        members = p4r.ActionProfileMember(action_profile_id=self.profile_id)
        groups = p4r.ActionProfileGroup(action_profile_id=self.profile_id)
        for entity in self.read(
            [p4r.Entity(action_profile_member=members), p4r.Entity(action_profile_group=groups)]
        ):
            if entity.HasField("action_profile_member"):
                member = entity.action_profile_member
                params = {p.param_id: decode_value(p.value) for p in member.action.params}
                port_id = self.steer_action.param("port").id
                mac_id = self.steer_action.param("spm_mac").id
                out.members[member.member_id] = Member(
                    member.member_id, params.get(port_id, 0), params.get(mac_id, 0)
                )
            else:
                group = entity.action_profile_group
                out.groups[group.group_id] = Group(
                    group.group_id,
                    tuple(sorted((m.member_id, m.weight) for m in group.members)),
                    group.max_size,
                )
        select = p4r.TableEntry(table_id=self.spm_select.id)
        for entity in self.read([p4r.Entity(table_entry=select)]):
            entry = entity.table_entry
            pool = decode_value(entry.match[0].exact.value) if entry.match else 0
            out.group_entries[pool] = GroupEntry(pool, entry.action.action_profile_group_id)
        for meter in METERS:
            if meter not in self.schema.meters:
                continue
            meter_id = self.schema.meters.get(meter).preamble.id
            query = p4r.MeterEntry(meter_id=meter_id)
            for entity in self.read([p4r.Entity(meter_entry=query)]):
                cell = entity.meter_entry
                config: tuple[int, int, int, int] | None = None
                if cell.HasField("config") and (cell.config.cir or cell.config.pir):
                    c = cell.config
                    config = (c.cir, c.cburst, c.pir, c.pburst)
                out.meters[(meter, cell.index.index)] = MeterCell(meter, cell.index.index, config)
        return out

    def apply_base(self, diff: BaseDiff) -> None:
        """Write a base diff in its safe order; raises P4RuntimeError if the switch refuses."""
        insert, modify, delete = p4r.Update.INSERT, p4r.Update.MODIFY, p4r.Update.DELETE
        steps: list[tuple[str, list[p4r.Update]]] = [
            (
                "members",
                [update_of(insert, self.member_message(m)) for m in diff.insert_members]
                + [update_of(modify, self.member_message(m)) for m in diff.modify_members],
            ),
            (
                "selector entries out",
                [update_of(delete, self.group_entry_message(g)) for g in diff.delete_group_entries],
            ),
            (
                "groups",
                [update_of(insert, self.group_message(g)) for g in diff.insert_groups]
                + [update_of(modify, self.group_message(g)) for g in diff.modify_groups],
            ),
            (
                "selector entries",
                [update_of(insert, self.group_entry_message(g)) for g in diff.insert_group_entries]
                + [
                    update_of(modify, self.group_entry_message(g))
                    for g in diff.modify_group_entries
                ],
            ),
            (
                "entries",
                [self.entry_update(insert, e) for e in diff.insert_entries]
                + [self.entry_update(modify, e) for e in diff.modify_entries],
            ),
            ("meters", [update_of(modify, self.meter_message(c)) for c in diff.meters]),
            ("entries out", [self.entry_update(delete, e) for e in diff.delete_entries]),
            ("groups out", [update_of(delete, self.group_message(g)) for g in diff.delete_groups]),
            (
                "members out",
                [update_of(delete, self.member_message(m)) for m in diff.delete_members],
            ),
        ]
        for what, updates in steps:
            if updates:
                self.write_checked(updates, what)

    # -- classification ----------------------------------------------------------------------

    def read_classification(self) -> tuple[int, list[TableEntry]]:
        """(active bank, every classification entry of both banks)."""
        version_table = self.schema.tables.get(pc.T_CLASSIFIER_VERSION)
        active = 0
        for entity in self.read(
            [
                p4r.Entity(
                    table_entry=p4r.TableEntry(table_id=version_table.id, is_default_action=True)
                )
            ]
        ):
            decoded = self.schema.decode_entry(entity.table_entry)
            active = decoded.params_dict.get("version", 0)
        queries = [
            p4r.Entity(table_entry=p4r.TableEntry(table_id=self.schema.tables.get(t).id))
            for t in CLASSIFICATION_TABLES
            if t in self.available
        ]
        entries = [self.schema.decode_entry(e.table_entry) for e in self.read(queries)]
        return active, entries

    def write_batch(self, batch: Sequence[Write], what: str) -> None:
        """One planned batch of classification writes, in one Write where it fits."""
        kinds = {
            Op.INSERT: p4r.Update.INSERT,
            Op.MODIFY: p4r.Update.MODIFY,
            Op.DELETE: p4r.Update.DELETE,
        }
        self.write_checked([self.entry_update(kinds[op], entry) for op, entry in batch], what)

    # -- digests -----------------------------------------------------------------------------

    def decode_digest(self, digest: p4r.DigestList) -> tuple[str, tuple[dict[str, int], ...]]:
        """(digest name, one record per data item by member name); ("", ()) if unknown."""
        name = self.digest_ids.get(digest.digest_id)
        if name is None:
            return "", ()
        fields = self.digest_fields[name]
        records = []
        from_bytes = int.from_bytes
        for data in digest.data:  # a flood of new flows is a record each: no Python to spare
            values = [from_bytes(m.bitstring, "big") for m in data.struct.members]
            records.append(dict(zip(fields, values, strict=True)))
        return name, tuple(records)

    def decode_packet_in(self, packet: p4r.PacketIn) -> dict[str, int]:
        return self.schema.decode_packet_metadata("packet_in", packet.metadata)
