"""The P4Runtime gRPC service of the software switch (P4Runtime 1.3/1.4 semantics).

Pipeline config (VERIFY, VERIFY_AND_SAVE, VERIFY_AND_COMMIT, COMMIT, and RECONCILE_AND_COMMIT of
the running program, which keeps its state), Write with per-update errors sized for a default
gRPC client (softswitch.p4rt_errors), Read with the spec's wildcard filters and per-request
errors, and the stream: arbitration by the spec's rules (the highest election id ever seen; no
primary once the primary goes), PacketIn / PacketOut through the @controller_header metadata,
digests with acks and timeouts, idle-timeout notifications. The default role only. Registers
can be read and written (BMv2 cannot).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
from finsy.proto import p4i, p4r, p4r_grpc, rpc_code

from softswitch.errors import LoadError
from softswitch.native import make_dataplane
from softswitch.p4info_map import PacketMetadataInfo, build_map
from softswitch.p4rt_common import (
    DETAILS_KEY,
    NOTIFICATIONS,
    READ_BATCH,
    STREAM_BACKLOG,
    Code,
    DigestState,
    P4RTError,
    Pipeline,
    Stream,
    canonical,
    check_width,
    digest_list_message,
    int_code,
    p4data_struct,
)
from softswitch.p4rt_errors import Failure, client_limit, error_status
from softswitch.p4rt_read import ReadHandlers
from softswitch.p4rt_write import WriteHandlers
from softswitch.program import load_json_bytes
from softswitch.switch import Switch

LOG = logging.getLogger(__name__)
DROP_REPORT_SECONDS = 5.0  # a warning of the stream backlog's drops at most this often
# The timer's period (idle timeouts, expiries, the backlog warning). A digest list is sent when
# its max_timeout_ns passes, not at the next period: a list that starts pending wakes the timer.
TIMER_TICK_SECONDS = 0.02


# ---------------------------------------------------------------------------- the service
# The largest gRPC message the server takes or sends (PI's pi_server.cpp: 256 MiB).
MAX_MESSAGE_BYTES = 256 << 20


class P4RuntimeService(WriteHandlers, ReadHandlers, p4r_grpc.P4RuntimeServicer):
    def __init__(self, switch: Switch, engine: str | None = None) -> None:
        self.switch = switch
        self.engine = engine  # auto | native | python (softswitch.native.make_dataplane)
        self.lock = threading.RLock()
        # The digest lists' state (pending, in flight, suppressed): samples come from the data
        # plane's threads (the native polling thread's upcalls, packet-outs), acks from the
        # stream, expiry from the timer. Innermost: nothing is locked while it is held.
        self._digest_lock = threading.Lock()
        self.pipeline: Pipeline | None = None
        self.saved: Pipeline | None = None
        self.streams: list[Stream] = []  # the live controllers (they sent an arbitration)
        self.primary: Stream | None = None
        # The highest election id ever received from a controller that became primary (the
        # spec's election_id_past); None until there was a primary.
        self.highest_election_id: int | None = None
        self._stop = threading.Event()
        self._timer_wake = threading.Event()
        self._timer = threading.Thread(target=self._timer_loop, name="p4rt-timers", daemon=True)
        self._timer.start()
        switch.packet_in = self._packet_in

    @property
    def digests(self) -> dict[int, DigestState]:
        """The running pipeline's configured digests, by id."""
        pipe = self.pipeline
        return pipe.digests if pipe is not None else {}

    def stop(self) -> None:
        self._stop.set()
        self._timer_wake.set()
        with self.lock:
            for s in self.streams:
                s.out.put(None)

    # ------------------------------------------------------------------ arbitration
    # P4Runtime, "Client Arbitration and Controller Replication": the primary is the live
    # controller whose election id is the highest the switch has ever received; when it goes,
    # there is no primary until a controller arbitrates with at least that id again.
    def _primary(self) -> Stream | None:
        return self.primary

    def _check_primary(self, election_id: Any) -> None:
        eid = (election_id.high << 64) | election_id.low
        primary = self.primary
        if primary is None or primary.election_id != eid:
            raise P4RTError(Code.PERMISSION_DENIED, "not the primary controller (election id)")

    def _check_device(self, device_id: int) -> None:
        if device_id != self.switch.device_id:
            raise P4RTError(
                Code.NOT_FOUND,
                f"device id {device_id} is not this switch's ({self.switch.device_id})",
            )

    @staticmethod
    def _check_role(role: str) -> None:
        """Write, Read and SetForwardingPipelineConfig name their role; this switch has only
        the default one (""): another is a role the device does not have (NOT_FOUND)."""
        if role:
            raise P4RTError(
                Code.NOT_FOUND, f"role {role!r} is not a role of this device (only the default)"
            )

    def _arbitration_response(self, s: Stream) -> p4r.StreamMessageResponse:
        primary = self.primary
        msg = p4r.StreamMessageResponse()
        arb = msg.arbitration
        arb.device_id = self.switch.device_id
        if self.highest_election_id is not None:
            arb.election_id.high = self.highest_election_id >> 64
            arb.election_id.low = self.highest_election_id & ((1 << 64) - 1)
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

    def _notify_all(self) -> None:
        """The advisory arbitration message to every live controller: the others first, the
        primary last (it accepts Writes once told)."""
        primary = self.primary
        for s in self.streams:
            if s is not primary:
                s.out.put(self._arbitration_response(s))
        if primary is not None:
            primary.out.put(self._arbitration_response(primary))

    def _arbitrate(self, stream: Stream, arb: Any) -> None:
        """One MasterArbitrationUpdate, by the spec's "Rules for Handling
        MasterArbitrationUpdate Messages" (a P4RTError terminates the stream)."""
        live = stream in self.streams
        if arb.device_id != self.switch.device_id:
            raise P4RTError(
                Code.FAILED_PRECONDITION if live else Code.NOT_FOUND,
                f"device id {arb.device_id} is not this switch's ({self.switch.device_id})",
            )
        if arb.role.name or arb.role.id:
            if live:
                raise P4RTError(
                    Code.FAILED_PRECONDITION,
                    "the role of a stream cannot change: open another stream",
                )
            raise P4RTError(Code.UNIMPLEMENTED, "only the default role is supported")
        if arb.role.HasField("config"):
            raise P4RTError(Code.INVALID_ARGUMENT, "role.config: no role scheme is supported")
        eid = (
            (arb.election_id.high << 64) | arb.election_id.low
            if arb.HasField("election_id")
            else None
        )
        if eid is not None and any(o is not stream and o.election_id == eid for o in self.streams):
            raise P4RTError(
                Code.INVALID_ARGUMENT, f"election id {eid} is used by another controller"
            )
        was_primary = self.primary is stream
        stream.election_id = eid
        if not live:
            self.streams.append(stream)
        highest = self.highest_election_id
        if eid is not None and (highest is None or eid >= highest):
            # It becomes, or stays, the primary: everyone is told.
            self.primary = stream
            self.highest_election_id = eid
            self._notify_all()
        elif was_primary:
            # A primary that downgraded itself: no primary now, and everyone is told.
            self.primary = None
            self._notify_all()
        else:
            stream.out.put(self._arbitration_response(stream))

    def _leave(self, stream: Stream) -> None:
        """A stream closed: if it was the primary's, the others hear there is none."""
        with self.lock:
            if stream not in self.streams:
                return
            self.streams.remove(stream)
            if self.primary is stream:
                self.primary = None
                self._notify_all()

    # ------------------------------------------------------------------ RPC: Capabilities
    def Capabilities(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        return p4r.CapabilitiesResponse(p4runtime_api_version="1.4.0")

    # ------------------------------------------------------------------ RPC: pipeline config
    def SetForwardingPipelineConfig(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        try:
            with self.lock:
                self._check_device(request.device_id)
                self._check_role(request.role)
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
        dp = make_dataplane(program, digest_sink=self._digest_sample, engine=self.engine)
        if hasattr(dp, "digest_p4data_sink"):  # the native engine encodes digests in C
            dp.digest_p4data_sink = self._digest_samples
        p4info = p4i.P4Info()
        p4info.CopyFrom(config.p4info)
        return Pipeline(
            p4info, bytes(config.p4_device_config), config.cookie.cookie, program, pmap, dp
        )

    def _commit(self, pipe: Pipeline) -> None:
        self.pipeline = pipe
        self.switch.set_dataplane(pipe.dataplane)
        LOG.info("pipeline committed (cookie %d)", pipe.cookie)

    def _drop_saved(self) -> None:
        if self.saved is not None:
            self.saved.dataplane.close()
            self.saved = None

    def _set_pipeline(self, request: Any) -> None:
        """The actions of the spec's SetForwardingPipelineConfig RPC. After VERIFY_AND_SAVE,
        Reads and Writes go to the saved config (its own tables, not forwarding yet); COMMIT
        makes it, with what was written to it, the running one."""
        action = request.action
        A = p4r.SetForwardingPipelineConfigRequest  # noqa: N806
        if action == A.COMMIT:
            if request.HasField("config"):
                raise P4RTError(Code.INVALID_ARGUMENT, "COMMIT takes no config")
            if self.saved is None:
                raise P4RTError(Code.NOT_FOUND, "COMMIT without a saved config (VERIFY_AND_SAVE)")
            saved, self.saved = self.saved, None
            self._commit(saved)
            return
        if action not in (A.VERIFY, A.VERIFY_AND_SAVE, A.VERIFY_AND_COMMIT, A.RECONCILE_AND_COMMIT):
            raise P4RTError(Code.INVALID_ARGUMENT, f"unknown action {action}")
        if not request.HasField("config"):
            raise P4RTError(Code.INVALID_ARGUMENT, "config is missing")
        config = request.config
        running = self.pipeline
        if action == A.RECONCILE_AND_COMMIT and running is not None:
            # The forwarding state is kept when the program is the one running (a new cookie
            # only); another program's is not carried over, so the action is refused.
            if config.p4info != running.p4info or config.p4_device_config != running.device_config:
                self._load(config).dataplane.close()  # an unloadable config says why first
                raise P4RTError(
                    Code.INVALID_ARGUMENT,
                    "RECONCILE_AND_COMMIT keeps the forwarding state only for the running "
                    "program (same P4Info and device config); use VERIFY_AND_COMMIT to change it",
                )
            self._drop_saved()
            running.cookie = config.cookie.cookie
            LOG.info("pipeline reconciled: the same program (cookie %d)", running.cookie)
            return
        pipe = self._load(config)
        if action == A.VERIFY:
            pipe.dataplane.close()
            return
        self._drop_saved()
        if action == A.VERIFY_AND_SAVE:
            self.saved = pipe
        else:
            self._commit(pipe)

    def _target(self) -> Pipeline:
        """The config Reads and Writes refer to: the saved one after VERIFY_AND_SAVE."""
        pipe = self.saved if self.saved is not None else self.pipeline
        if pipe is None:
            raise P4RTError(Code.FAILED_PRECONDITION, "no forwarding pipeline config set")
        return pipe

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
        A = p4r.WriteRequest  # noqa: N806
        try:
            self._check_device(request.device_id)
            self._check_role(request.role)
            with self.lock:
                self._check_primary(request.election_id)
                pipe = self._target()
                if request.atomicity in (A.ROLLBACK_ON_ERROR, A.DATAPLANE_ATOMIC):
                    raise P4RTError(
                        Code.UNIMPLEMENTED, "only CONTINUE_ON_ERROR atomicity is supported"
                    )
                if request.atomicity != A.CONTINUE_ON_ERROR:
                    raise P4RTError(Code.INVALID_ARGUMENT, f"unknown atomicity {request.atomicity}")
                errors: list[Failure] = []
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
            limit = client_limit(context.invocation_metadata())
            details, message = error_status("Write", "update", errors, limit)
            context.set_trailing_metadata(((DETAILS_KEY, details),))
            context.abort(Code.UNKNOWN, message)
        return p4r.WriteResponse()

    # ------------------------------------------------------------------ RPC: Read
    def Read(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:  # noqa: N802
        try:
            self._check_device(request.device_id)
            self._check_role(request.role)
            with self.lock:
                pipe = self._target()
                entities: list[Any] = []
                outcomes: list[Failure] = []
                with pipe.dataplane.lock:
                    for ent in request.entities:
                        try:
                            entities.extend(self._read_one(pipe, ent))
                            outcomes.append(None)
                        except P4RTError as exc:
                            outcomes.append((exc.code, exc.message))
        except P4RTError as exc:
            context.abort(exc.code, exc.message)
        for i in range(0, max(len(entities), 1), READ_BATCH):
            yield p4r.ReadResponse(entities=entities[i : i + READ_BATCH])
        if any(o is not None for o in outcomes):
            # The spec's "Batch Processing" of Read: the entities of the valid requests, then
            # UNKNOWN with a p4.Error per request.
            limit = client_limit(context.invocation_metadata())
            details, message = error_status("Read", "request", outcomes, limit)
            context.set_trailing_metadata(((DETAILS_KEY, details),))
            context.abort(Code.UNKNOWN, message)

    # ------------------------------------------------------------------ RPC: StreamChannel
    def StreamChannel(  # noqa: N802
        self, request_iterator: Iterator[Any], context: grpc.ServicerContext
    ) -> Iterator[Any]:
        stream = Stream()

        def reader() -> None:
            try:
                for msg in request_iterator:
                    self._stream_message(stream, msg)
            except grpc.RpcError:
                pass
            except P4RTError as exc:
                # The spec: an invalid arbitration terminates the stream with its code.
                LOG.info("stream closed: %s", exc.message)
                context.set_code(exc.code)
                context.set_details(exc.message)
            except Exception:
                LOG.exception("stream reader failed")
                context.set_code(Code.INTERNAL)
                context.set_details("the stream's reader failed")
            finally:
                self._leave(stream)
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
            self._leave(stream)

    def _stream_message(self, stream: Stream, msg: Any) -> None:
        which = msg.WhichOneof("update")
        if which == "arbitration":
            with self.lock:
                self._arbitrate(stream, msg.arbitration)
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
            ack = msg.digest_ack
            pipe = self.pipeline
            if pipe is None or ack.digest_id not in pipe.map.digests:
                # the spec's Stream Error Reporting: a digest_id of no Digest in the P4Info
                self._stream_error(
                    stream,
                    Code.INVALID_ARGUMENT,
                    f"DigestListAck: digest_id {ack.digest_id} is not a digest of the P4Info",
                    ack=ack,
                )
                return
            self._digest_ack(ack.digest_id, ack.list_id)
        else:
            self._stream_error(
                stream, Code.UNIMPLEMENTED, f"stream message {which!r} is not supported"
            )

    def _stream_error(
        self,
        stream: Stream,
        code: grpc.StatusCode,
        message: str,
        packet: Any = None,
        ack: Any = None,
    ) -> None:
        """A StreamError; its `details` names the kind of message at fault, as the spec
        requires (packet_out, digest_list_ack or other), with a copy of it."""
        resp = p4r.StreamMessageResponse()
        resp.error.canonical_code = int_code(code)
        resp.error.message = message
        if packet is not None:
            resp.error.packet_out.packet_out.CopyFrom(packet)
        elif ack is not None:
            resp.error.digest_list_ack.digest_list_ack.CopyFrom(ack)
        else:
            resp.error.other.SetInParent()
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
            known = {mid for mid, _, _ in md.fields}
            unknown = sorted({m.metadata_id for m in pkt.metadata} - known)
            if unknown or len(values) != len(pkt.metadata):
                what = f"unknown metadata id {unknown[0]}" if unknown else "a metadata id twice"
                self._stream_error(stream, Code.INVALID_ARGUMENT, f"PacketOut: {what}", packet=pkt)
                return
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
        primary.notify("packet-ins", msg)

    # ------------------------------------------------------------------ digests
    def _digest_sample(self, learn_id: int, values: tuple[int, ...]) -> None:
        """A digest from the Python engine: its fields, encoded here."""
        self._digest_samples([(learn_id, p4data_struct(values))])

    def _digest_samples(self, batch: list[tuple[int, bytes]]) -> None:
        """Digests from the data plane, each (learn id, its fields as an encoded P4Data), into
        their lists: a sample already pending or suppressed (sent, not yet acked) is dropped."""
        pipe = self.pipeline
        if pipe is None:
            return
        now = time.monotonic_ns()
        started = False
        with self._digest_lock:
            for learn_id, sample in batch:
                did = pipe.map.digest_of_learn.get(learn_id)
                if did is None:
                    continue
                state = pipe.digests.get(did)
                if state is None:
                    continue
                expiry = state.suppressed.get(sample)
                if expiry is not None and expiry > now:
                    continue
                if sample in state.pending:
                    continue
                if not state.pending:
                    state.pending_since = now
                state.pending[sample] = None
                size = state.config.max_list_size
                if size <= 1 or len(state.pending) >= size:
                    self._flush_digest(did, state, now)
                elif len(state.pending) == 1:
                    started = True
        if started:
            self._timer_wake.set()  # its max_timeout may end before the next period

    def _flush_digest(self, did: int, state: DigestState, now: int) -> None:
        primary = self._primary()
        samples, state.pending = list(state.pending), {}
        if primary is None or not samples:
            return
        list_id = state.next_list_id
        message = digest_list_message(did, list_id, time.time_ns(), samples)
        # (an ack waits for the digest lock, held here: it cannot overtake what follows)
        if not primary.notify("digest samples", message, len(samples)):
            return  # the controller does not keep up: dropped, counted, not suppressed
        state.next_list_id += 1
        if state.config.ack_timeout_ns:
            expiry = now + state.config.ack_timeout_ns
            for s in samples:
                state.suppressed[s] = expiry
            state.in_flight[list_id] = (expiry, samples)

    def _digest_ack(self, did: int, list_id: int) -> None:
        with self.lock:
            state = self.digests.get(did)
            if state is None:
                return
            with self._digest_lock:
                item = state.in_flight.pop(list_id, None)
                if item is not None:
                    for s in item[1]:
                        state.suppressed.pop(s, None)

    # ------------------------------------------------------------------ timers
    def _timer_loop(self) -> None:
        while not self._stop.is_set():
            self._timer_wake.wait(self._timer_delay())
            self._timer_wake.clear()
            if self._stop.is_set():
                return
            try:
                with self.lock:
                    pipe = self.pipeline
                    if pipe is None:
                        continue
                    with pipe.dataplane.lock:
                        self._digest_timers()
                        self._idle_timeouts(pipe)
                    self._report_backlog_drops()
            except Exception:
                LOG.exception("timer loop")

    def _timer_delay(self) -> float:
        """Seconds until the timer's next period or the first pending list's max_timeout (at
        least 1 ms: a list the timer could not send does not make it spin)."""
        delay = TIMER_TICK_SECONDS
        now = time.monotonic_ns()
        with self._digest_lock:
            for state in list(self.digests.values()):
                if state.pending:
                    due = state.pending_since + state.config.max_timeout_ns - now
                    delay = min(delay, max(0.001, due / 1e9))
        return delay

    _drops_reported: tuple[int, ...] = ()
    _drops_reported_at = 0.0

    def _report_backlog_drops(self) -> None:
        """A warning, at most every DROP_REPORT_SECONDS, when the backlog bound dropped more."""
        now = time.monotonic()
        if now - self._drops_reported_at < DROP_REPORT_SECONDS:
            return
        totals = tuple(sum(s.dropped[k] for s in self.streams) for k in NOTIFICATIONS)
        if totals != self._drops_reported and any(totals):
            self._drops_reported, self._drops_reported_at = totals, now
            lost = ", ".join(f"{n} {k}" for k, n in zip(NOTIFICATIONS, totals, strict=True))
            LOG.warning(
                "the primary controller's stream held %d messages: dropped so far %s",
                STREAM_BACKLOG,
                lost,
            )

    def _digest_timers(self) -> None:
        now = time.monotonic_ns()
        for did, state in self.digests.items():
            with self._digest_lock:
                if state.pending and now - state.pending_since >= state.config.max_timeout_ns:
                    self._flush_digest(did, state, now)
                _expire(state.in_flight, now, lambda item: item[0])
                _expire(state.suppressed, now, lambda expiry: expiry)

    _last_idle_scan = 0

    def _idle_timeouts(self, pipe: Pipeline) -> None:
        now = time.monotonic_ns()
        if now - self._last_idle_scan < 100_000_000:
            return
        self._last_idle_scan = now
        primary = self._primary()
        if primary is None:
            return
        expired = [
            self.entry_proto(info, entry, False, False)
            for info, entry in pipe.idle.expired(now, pipe.dataplane.sync_hit)
        ]
        if expired:
            msg = p4r.StreamMessageResponse()
            msg.idle_timeout_notification.timestamp = time.time_ns()
            msg.idle_timeout_notification.table_entry.extend(expired)
            primary.out.put(msg)


def _expire(items: dict[Any, Any], now: int, expiry: Callable[[Any], int]) -> None:
    """Drop the items whose expiry has passed. Items go in with one timeout, so in order of
    expiry: only the expired ones at the front are looked at (a scan of all of them, every
    20 ms, cost the digest reader its CPU in a flood: a second of samples awaits its ack). An
    item out of order (its timeout changed, or set again in place) only holds the ones behind
    it until it expires too; whether a sample is suppressed is read from its own expiry."""
    expired = []
    for key, value in items.items():
        if expiry(value) > now:
            break
        expired.append(key)
    for key in expired:
        del items[key]


def _serialize_stream(message: p4r.StreamMessageResponse | bytes) -> bytes:
    """StreamChannel's responses: messages, or bytes already encoded (digest lists)."""
    if isinstance(message, bytes):
        return message
    data: bytes = message.SerializeToString()
    return data


def _add_service(servicer: P4RuntimeService, server: grpc.Server) -> None:
    """The P4Runtime service's handlers, from its descriptor, as the generated
    add_P4RuntimeServicer_to_server makes them, except that StreamChannel also sends bytes."""
    service = p4r.DESCRIPTOR.services_by_name["P4Runtime"]
    handlers = {}
    for method in service.methods:
        request = getattr(p4r, method.input_type.name)
        response = getattr(p4r, method.output_type.name)
        serialize = (
            _serialize_stream if method.name == "StreamChannel" else response.SerializeToString
        )
        kind = {
            (False, False): grpc.unary_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler,
        }[(method.client_streaming, method.server_streaming)]
        handlers[method.name] = kind(
            getattr(servicer, method.name),
            request_deserializer=request.FromString,
            response_serializer=serialize,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )


class P4RuntimeServer:
    """The gRPC server; `start()` returns once the port accepts connections."""

    def __init__(
        self,
        switch: Switch,
        address: str,
        service: P4RuntimeService | None = None,
        engine: str | None = None,
    ) -> None:
        self.service = service if service is not None else P4RuntimeService(switch, engine)
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="p4rt"),
            # The port is this switch's alone: with SO_REUSEPORT (gRPC's default on Linux) a
            # second switch on a port in use would start and share it with the first.
            # A pipeline config is the whole BMv2 JSON (over gRPC's 4 MiB default for the
            # default build): PI's server takes up to 256 MiB, and so does this one.
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ],
        )
        _add_service(self.service, self.server)
        try:
            self.port = self.server.add_insecure_port(address)
        except RuntimeError as exc:  # grpcio raises where older versions returned 0
            raise OSError(f"cannot listen on {address}: the address is in use or invalid") from exc
        if self.port == 0:
            raise OSError(f"cannot listen on {address}: the address is in use or invalid")
        self.address = address

    def start(self) -> None:
        self.server.start()

    def stop(self, grace: float = 0.5) -> None:
        self.service.stop()
        self.server.stop(grace).wait()
