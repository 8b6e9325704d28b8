"""A small synchronous P4Runtime client over grpcio (protos from finsy).

Used by the controller, the PTF base test, the benchmarks and the tests alike, against BMv2 or the
built-in software switch. Arbitration, packet-in, digests and idle-timeout notifications arrive on
the stream and are queued for whoever asks for them.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
from finsy.proto import p4i, p4r, p4r_grpc, rpc_code, rpc_status

LOG = logging.getLogger(__name__)

_DETAILS_KEY = "grpc-status-details-bin"
METADATA_LIMIT = 16 << 20  # bytes of metadata a response may carry: the error details of a Write
# Request metadata that tells the built-in switch this client takes METADATA_LIMIT bytes of error
# details: it then sends one p4.Error per update however large the batch (without it, what a
# default gRPC client accepts; docs/explanation/softswitch.md). Other servers ignore it.
DETAILS_LIMIT_KEY = "og-error-details-limit"


@dataclass(frozen=True, slots=True)
class UpdateError:
    """What the switch said about one update of a Write."""

    index: int
    code: int
    message: str

    @property
    def code_name(self) -> str:
        return str(rpc_code.Code.Name(self.code))  # type: ignore[arg-type]


@dataclass(slots=True)
class P4RuntimeError(Exception):
    """A P4Runtime call failed. For Write, `details` has one item per failed update."""

    operation: str
    code: grpc.StatusCode
    message: str
    details: list[UpdateError] = field(default_factory=list)

    def __str__(self) -> str:
        text = f"{self.operation}: {self.code.name}: {self.message}"
        for detail in self.details:
            text += f"\n  update #{detail.index}: {detail.code_name}: {detail.message}"
        return text

    @classmethod
    def from_rpc_error(cls, operation: str, error: grpc.RpcError) -> P4RuntimeError:
        code, message, trailers = _call_info(error)
        details: list[UpdateError] = []
        for key, value in trailers:
            if key != _DETAILS_KEY:
                continue
            status = rpc_status.Status()
            status.ParseFromString(value if isinstance(value, bytes) else str(value).encode())
            for index, any_detail in enumerate(status.details):
                item = p4r.Error()
                if any_detail.Unpack(item) and item.canonical_code != rpc_code.OK:
                    details.append(UpdateError(index, item.canonical_code, item.message))
        return cls(operation, code, message or "", details)


def _call_info(error: grpc.RpcError) -> tuple[grpc.StatusCode, str, list[tuple[str, Any]]]:
    """Code, text and trailing metadata of a failed call (grpc's errors are also Calls)."""
    call: Any = error
    if not hasattr(call, "code"):
        return grpc.StatusCode.UNKNOWN, str(error), []
    return call.code(), call.details() or "", list(call.trailing_metadata() or ())


def _update(kind: int, entity: p4r.Entity) -> p4r.Update:
    return p4r.Update(type=kind, entity=entity)  # type: ignore[arg-type]


def entity_of(message: Any) -> p4r.Entity:
    """Wrap a TableEntry, CounterEntry, ... in a p4r.Entity."""
    entity = p4r.Entity()
    field_name = {
        p4r.TableEntry: "table_entry",
        p4r.ActionProfileMember: "action_profile_member",
        p4r.ActionProfileGroup: "action_profile_group",
        p4r.MeterEntry: "meter_entry",
        p4r.DirectMeterEntry: "direct_meter_entry",
        p4r.CounterEntry: "counter_entry",
        p4r.DirectCounterEntry: "direct_counter_entry",
        p4r.PacketReplicationEngineEntry: "packet_replication_engine_entry",
        p4r.RegisterEntry: "register_entry",
        p4r.DigestEntry: "digest_entry",
    }.get(type(message))
    if field_name is None:
        raise TypeError(f"not a P4Runtime entity: {type(message).__name__}")
    getattr(entity, field_name).CopyFrom(message)
    return entity


def update_of(kind: int, message: Any) -> p4r.Update:
    """An Update of `kind` (INSERT, MODIFY, DELETE) of an entity message (see `entity_of`)."""
    return p4r.Update(type=kind, entity=entity_of(message))  # type: ignore[arg-type]


class _CallDetails(
    collections.namedtuple(
        "_CallDetails",
        ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression"),
    ),
    grpc.ClientCallDetails,
):
    pass


class _DeclareDetailsLimit(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
):
    """Adds DETAILS_LIMIT_KEY to Write and Read calls."""

    _METHODS = ("/p4.v1.P4Runtime/Write", "/p4.v1.P4Runtime/Read")

    def _details(self, details: Any) -> Any:
        if details.method not in self._METHODS:
            return details
        metadata = [*(details.metadata or ()), (DETAILS_LIMIT_KEY, str(METADATA_LIMIT))]
        return _CallDetails(
            details.method,
            details.timeout,
            metadata,
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)


class P4RuntimeClient:
    """One controller connection to one device."""

    def __init__(
        self,
        address: str,
        device_id: int = 1,
        election_id: int = 1,
        role_name: str = "",
    ) -> None:
        self.address = address
        self.device_id = device_id
        self.election_id = election_id
        self.role_name = role_name
        self.is_primary = False
        # From the switch's last arbitration message: the highest election id it has seen
        # (None before there was a primary), and whether some controller is primary now.
        self.highest_election_id: int | None = None
        self.has_primary = False
        self.packet_ins: queue.Queue[p4r.PacketIn] = queue.Queue()
        self.digests: queue.Queue[p4r.DigestList] = queue.Queue()
        self.idle_timeouts: queue.Queue[p4r.IdleTimeoutNotification] = queue.Queue()
        self.stream_errors: queue.Queue[p4r.StreamError] = queue.Queue()
        self._requests: queue.Queue[p4r.StreamMessageRequest | None] = queue.Queue()
        self._arbitration = threading.Condition()
        self._arbitration_seen = False
        self._channel: grpc.Channel | None = None
        self._stub: p4r_grpc.P4RuntimeStub | None = None
        self._reader: threading.Thread | None = None
        self._stream: Any = None

    # -- connection ---------------------------------------------------------------------

    def connect(self, timeout: float = 10.0, stream: bool = True) -> P4RuntimeClient:
        """Open the channel and the stream, and send arbitration; wait for the answer. With
        `stream=False`, the channel only: enough for reads, which need no arbitration, and it
        does not contend for the primary role with the controller."""
        raw = grpc.insecure_channel(
            self.address,
            options=[
                ("grpc.max_send_message_length", 256 << 20),
                ("grpc.max_receive_message_length", 256 << 20),
                # A Write's error details (one p4.v1.Error per failed update) come back as
                # metadata: a chunk of 4,096 updates that all fail is about 400 KB of it, far
                # over gRPC's 16 KiB default, which fails the whole call instead.
                ("grpc.max_metadata_size", METADATA_LIMIT),
                ("grpc.absolute_max_metadata_size", METADATA_LIMIT),
            ],
        )
        self._channel = grpc.intercept_channel(raw, _DeclareDetailsLimit())
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            self._channel.close()
            raise ConnectionError(
                f"no P4Runtime server answers at {self.address} within {timeout:g}s"
            ) from None
        self._stub = p4r_grpc.P4RuntimeStub(self._channel)
        if not stream:
            return self
        self._stream = self._stub.StreamChannel(self._request_iterator())
        self._reader = threading.Thread(
            target=self._read_stream, name=f"p4rt-stream-{self.address}", daemon=True
        )
        self._reader.start()
        self._send_arbitration()
        with self._arbitration:
            if not self._arbitration.wait_for(lambda: self._arbitration_seen, timeout=timeout):
                raise ConnectionError(f"{self.address}: no arbitration answer within {timeout:g}s")
        return self

    def rearbitrate(self, election_id: int) -> None:
        """Arbitrate again on the open stream with `election_id` (used from then on)."""
        self.election_id = election_id
        self._send_arbitration()

    def _arbitration_changed(self) -> None:
        """Called on the stream's thread after each arbitration message (for subclasses)."""

    def _send_arbitration(self) -> None:
        arbitration = p4r.MasterArbitrationUpdate(device_id=self.device_id)
        arbitration.election_id.high = self.election_id >> 64
        arbitration.election_id.low = self.election_id & ((1 << 64) - 1)
        if self.role_name:
            arbitration.role.name = self.role_name
        self._requests.put(p4r.StreamMessageRequest(arbitration=arbitration))

    def _request_iterator(self) -> Iterator[p4r.StreamMessageRequest]:
        while True:
            request = self._requests.get()
            if request is None:
                return
            yield request

    def _read_stream(self) -> None:
        try:
            for response in self._stream:
                kind = response.WhichOneof("update")
                if kind == "arbitration":
                    arbitration = response.arbitration
                    election = arbitration.election_id
                    seen = (
                        election.high << 64 | election.low
                        if arbitration.HasField("election_id")
                        else None
                    )
                    code = arbitration.status.code
                    with self._arbitration:
                        self.highest_election_id = seen
                        self.has_primary = code != rpc_code.NOT_FOUND
                        self.is_primary = seen == self.election_id and code == rpc_code.OK
                        self._arbitration_seen = True
                        self._arbitration.notify_all()
                    self._arbitration_changed()
                elif kind == "packet":
                    self.packet_ins.put(response.packet)
                elif kind == "digest":
                    self.digests.put(response.digest)
                elif kind == "idle_timeout_notification":
                    self.idle_timeouts.put(response.idle_timeout_notification)
                elif kind == "error":
                    LOG.warning("%s: stream error: %s", self.address, response.error)
                    self.stream_errors.put(response.error)
        except grpc.RpcError as error:
            code, message, _ = _call_info(error)
            if code != grpc.StatusCode.CANCELLED:
                LOG.warning("%s: stream closed: %s: %s", self.address, code.name, message)
        finally:
            with self._arbitration:
                self._arbitration_seen = True
                self._arbitration.notify_all()

    def close(self) -> None:
        self._requests.put(None)
        if self._stream is not None:
            self._stream.cancel()
        if self._reader is not None:
            self._reader.join(timeout=5)
        if self._channel is not None:
            self._channel.close()

    def __enter__(self) -> P4RuntimeClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def stub(self) -> p4r_grpc.P4RuntimeStub:
        if self._stub is None:
            raise ConnectionError("not connected; call connect() first")
        return self._stub

    def _election(self) -> p4r.Uint128:
        return p4r.Uint128(high=self.election_id >> 64, low=self.election_id & ((1 << 64) - 1))

    # -- pipeline -----------------------------------------------------------------------

    def set_pipeline(self, p4info: p4i.P4Info, device_config: bytes, cookie: int = 0) -> None:
        request = p4r.SetForwardingPipelineConfigRequest(
            device_id=self.device_id,
            election_id=self._election(),
            action=p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
        )
        if self.role_name:
            request.role = self.role_name
        request.config.p4info.CopyFrom(p4info)
        request.config.p4_device_config = device_config
        request.config.cookie.cookie = cookie
        try:
            self.stub.SetForwardingPipelineConfig(request)
        except grpc.RpcError as error:
            raise P4RuntimeError.from_rpc_error("SetForwardingPipelineConfig", error) from None

    def get_pipeline(self) -> p4r.ForwardingPipelineConfig:
        request = p4r.GetForwardingPipelineConfigRequest(
            device_id=self.device_id,
            response_type=p4r.GetForwardingPipelineConfigRequest.ALL,
        )
        try:
            return self.stub.GetForwardingPipelineConfig(request).config
        except grpc.RpcError as error:
            raise P4RuntimeError.from_rpc_error("GetForwardingPipelineConfig", error) from None

    # -- write / read -------------------------------------------------------------------

    def write(
        self,
        updates: Sequence[p4r.Update],
        atomicity: int = p4r.WriteRequest.CONTINUE_ON_ERROR,
    ) -> None:
        if not updates:
            return
        request = p4r.WriteRequest(
            device_id=self.device_id,
            election_id=self._election(),
            atomicity=atomicity,  # type: ignore[arg-type]
        )
        if self.role_name:
            request.role = self.role_name
        request.updates.extend(updates)
        try:
            self.stub.Write(request)
        except grpc.RpcError as error:
            raise P4RuntimeError.from_rpc_error("Write", error) from None

    def insert(self, messages: Iterable[Any]) -> None:
        self.write([_update(p4r.Update.INSERT, entity_of(m)) for m in messages])

    def modify(self, messages: Iterable[Any]) -> None:
        self.write([_update(p4r.Update.MODIFY, entity_of(m)) for m in messages])

    def delete(self, messages: Iterable[Any]) -> None:
        self.write([_update(p4r.Update.DELETE, entity_of(m)) for m in messages])

    def read(
        self, entities: Iterable[p4r.Entity], timeout: float | None = None
    ) -> Iterator[p4r.Entity]:
        """`timeout`: seconds for the whole Read (None: no deadline)."""
        request = p4r.ReadRequest(device_id=self.device_id)
        if self.role_name:
            request.role = self.role_name
        request.entities.extend(entities)
        try:
            for response in self.stub.Read(request, timeout=timeout):
                yield from response.entities
        except grpc.RpcError as error:
            raise P4RuntimeError.from_rpc_error("Read", error) from None

    def read_table(self, table_id: int = 0) -> list[p4r.TableEntry]:
        """All entries of one table (0: every table), without default entries."""
        wildcard = p4r.Entity(table_entry=p4r.TableEntry(table_id=table_id))
        return [e.table_entry for e in self.read([wildcard])]

    def read_counter(self, counter_id: int, index: int | None = None) -> list[p4r.CounterEntry]:
        entry = p4r.CounterEntry(counter_id=counter_id)
        if index is not None:
            entry.index.index = index
        return [e.counter_entry for e in self.read([p4r.Entity(counter_entry=entry)])]

    # -- stream -------------------------------------------------------------------------

    def packet_out(self, payload: bytes, metadata: Iterable[p4r.PacketMetadata]) -> None:
        packet = p4r.PacketOut(payload=payload)
        packet.metadata.extend(metadata)
        self._requests.put(p4r.StreamMessageRequest(packet=packet))

    def ack_digest(self, digest: p4r.DigestList) -> None:
        ack = p4r.DigestListAck(digest_id=digest.digest_id, list_id=digest.list_id)
        self._requests.put(p4r.StreamMessageRequest(digest_ack=ack))

    def get_packet_in(self, timeout: float) -> p4r.PacketIn | None:
        return _get(self.packet_ins, timeout)

    def get_digest(self, timeout: float) -> p4r.DigestList | None:
        return _get(self.digests, timeout)

    def get_idle_timeout(self, timeout: float) -> p4r.IdleTimeoutNotification | None:
        return _get(self.idle_timeouts, timeout)


_T = TypeVar("_T")


def _get(source: queue.Queue[_T], timeout: float) -> _T | None:
    try:
        return source.get(timeout=timeout)
    except queue.Empty:
        return None
