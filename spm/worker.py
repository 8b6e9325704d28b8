"""A worker: decodes each packet, tracks its flow, reassembles TCP, parses HTTP, runs the IPS and
the AV, and gives the packet a verdict. One worker is one process; the dispatcher sends it every
packet of the flows it owns, so none of this state is shared.

The inspection order for a packet: decode -> flow (blocked or bypassed flows end here) -> TCP
reassembly -> flow class -> PDU and HTTP buffers -> AV objects -> IPS -> verdict -> bypass check.

Memory is bounded: flows (limits.max_flows, LRU), out-of-order TCP data (per flow and per
worker, see `spm.reassembly`), the PDUs and HTTP bodies the IPS looks at (16 KiB and
limits.http_depth per direction, limits.inspect_total_bytes per worker: past it, packets are
inspected one by one and their bytes not kept), AV objects (`spm.av.inspector`).

Both families alike: flows, streams and rules see IPv4 and IPv6 packets the same way (a flow is
keyed by its Community ID, its ends are 4- or 16-byte addresses).

Not supported: reassembling IP fragments. Fragments of either family reach the queue as they
came (the SPM keeps conntrack, and with it the kernel's defragmentation, off its packets): a first
fragment is inspected as far as it goes, a later one is accepted uninspected and counted as
`fragments_uninspected`.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from spm.av.inspector import AvInspector, AvOutcome
from spm.community_id import PROTO_TCP, PROTO_UDP
from spm.config import SpmConfig
from spm.flow import ESTABLISHED, NEW, SYN_RECV, SYN_SENT, Direction, Flow, FlowTable
from spm.http import Ev, HttpParser, is_http_start
from spm.ips.base import Detector, RuleMatch
from spm.logs import ContextLogger
from spm.packet import ACK, FIN, RST, SYN, Packet, decode
from spm.reassembly import Seg, StreamBudget, TcpStream
from spm.verdict import Alert, BypassRequest, Verdict

LOG = logging.getLogger(__name__)

PDU_MAX = 16 * 1024  # stream bytes the IPS sees at once (a PDU), per direction
AV_GID = 3000  # gid of alerts raised by the AV (sid 1: infected, 2: size limit, 3: clamd down)
_DROP_ACTIONS = frozenset({"drop", "block", "reject", "sdrop"})
_ENCRYPTED = frozenset({"tls", "ssh"})  # the AV cannot read these streams


@dataclass(slots=True)
class WorkerCounters:
    packets: int = 0
    bytes: int = 0
    accepted: int = 0
    dropped: int = 0
    blocked: int = 0
    bypassed: int = 0
    alerts: int = 0
    fragments_uninspected: int = 0
    buffer_pressure: int = 0  # times a PDU or body was kept small: buffers over their total
    decode_errors: Counter[str] = field(default_factory=Counter)


class Worker:
    def __init__(
        self,
        cfg: SpmConfig,
        detector: Detector | None = None,
        av: AvInspector | None = None,
        index: int = 0,
    ) -> None:
        self.cfg = cfg
        self.index = index
        self.detector = detector
        self.av = av
        lim = cfg.limits
        self.budget = StreamBudget(lim.stream_total_bytes)
        self.flows = FlowTable(lim.max_flows, lim.flow_timeout, self.budget)
        self.counters = WorkerCounters()
        self.events: list[Alert | BypassRequest | str] = []  # str: a flow's cid that ended
        self.buffered = 0  # bytes in all flows' PDUs and HTTP bodies
        self._bypass_classes = frozenset(cfg.bypass.classes)
        self.now = 0.0  # the time `process` was given for the packet at hand (alerts carry it)
        self._log = ContextLogger(LOG, f"spm {cfg.name} worker {index}")

    # --- entry point ----------------------------------------------------------------------------

    def process(self, raw: bytes, cid: str = "", now: float | None = None) -> Verdict:
        now = time.time() if now is None else now
        self.now = now
        c = self.counters
        c.packets += 1
        c.bytes += len(raw)
        pkt = decode(raw)
        if pkt.error is not None:
            c.decode_errors[pkt.error] += 1
            return self._count(Verdict.DROP)
        if pkt.fragment and not pkt.first_fragment:
            c.fragments_uninspected += 1
            return self._count(Verdict.ACCEPT)
        cid = cid or pkt.community_id()
        flow = self.flows.get(cid, now)
        if (
            flow is not None
            and flow.closed
            and pkt.proto == PROTO_TCP
            and pkt.tcp_flags & (SYN | ACK) == SYN
        ):  # the 5-tuple is reused by a new connection
            self.flows.remove(cid)
            self._release(flow)
            flow = None
        if flow is None:
            flow, evicted = self.flows.create(cid, pkt, now)
            for old in evicted:
                self._release(old)
        elif flow.verdict is not Verdict.ACCEPT:
            return self._count(flow.verdict)
        try:
            verdict = self._inspect(flow, pkt)
        except Exception:  # a bug must not take the worker (and all its flows) down
            self._log.exception("flow %s: inspection failed; blocking the flow", cid)
            verdict = Verdict.BLOCK
        if verdict in (Verdict.BLOCK, Verdict.BYPASS):
            flow.verdict = verdict
            self._release(flow, keep=True)
        return self._count(verdict)

    def expire(self, now: float | None = None) -> int:
        now = time.time() if now is None else now
        gone = self.flows.expire(now)
        for flow in gone:
            self._release(flow)
        return len(gone)

    def stats(self) -> dict[str, Any]:
        c = self.counters
        out: dict[str, Any] = {
            "worker": self.index,
            "flows": len(self.flows),
            "packets": c.packets,
            "bytes": c.bytes,
            "accepted": c.accepted,
            "dropped": c.dropped,
            "blocked": c.blocked,
            "bypassed": c.bypassed,
            "alerts": c.alerts,
            "fragments_uninspected": c.fragments_uninspected,
            "decode_errors": dict(c.decode_errors),
            "stream_buffered": self.budget.used,
            "stream_refusals": self.budget.refusals,
            "inspect_buffered": self.buffered,
            "buffer_pressure": c.buffer_pressure,
        }
        if self.av is not None:
            out["av"] = {k: getattr(self.av.counters, k) for k in self.av.counters.__slots__}
        return out

    # --- pieces ---------------------------------------------------------------------------------

    def _set_pdu(self, d: Direction, pdu: bytearray) -> None:
        """Start a new PDU in direction `d` (the IPS resets its per-PDU state)."""
        self.buffered += len(pdu) - len(d.pdu)
        d.pdu = pdu
        d.pdu_gen += 1

    def _room(self, wanted: int) -> int:
        """How much a PDU or a body may hold: `wanted`, or nothing more while the worker's
        inspection buffers are over their total (limits.inspect_total_bytes): then a packet is
        inspected on its own and its bytes are not kept."""
        if self.buffered <= self.cfg.limits.inspect_total_bytes:
            return wanted
        self.counters.buffer_pressure += 1
        return 0

    def _count(self, verdict: Verdict) -> Verdict:
        c = self.counters
        if verdict is Verdict.ACCEPT:
            c.accepted += 1
        elif verdict is Verdict.DROP:
            c.dropped += 1
        elif verdict is Verdict.BLOCK:
            c.blocked += 1
        else:
            c.bypassed += 1
        return verdict

    def _release(self, flow: Flow, keep: bool = False) -> None:
        """Free a flow's buffers; unless `keep`, it is gone (tell the dispatcher)."""
        for d in flow.dirs:
            if d.stream is not None:
                d.stream.release()
                d.stream = None
            if d.av is not None and self.av is not None:
                self.av.discard(d.av)
                d.av = None
            self.buffered -= len(d.pdu) + len(d.body)
            d.pdu = bytearray()
            d.body = bytearray()
            d.http = None
            d.message = None
        flow.ips.clear()
        if not keep:
            self.events.append(flow.cid)

    def _inspect(self, flow: Flow, pkt: Packet) -> Verdict:
        to_server = flow.to_server(pkt)
        d = flow.dirs[0 if to_server else 1]
        other = flow.dirs[1 if to_server else 0]
        d.packets += 1
        data = b""
        end_of_stream = False
        if pkt.proto == PROTO_TCP:
            verdict, data, end_of_stream = self._tcp(flow, d, other, pkt, to_server)
            if verdict is not Verdict.ACCEPT:
                return verdict
        else:
            data = pkt.payload
        d.bytes += len(data)
        verdict = Verdict.ACCEPT
        if data:
            verdict = self._data(flow, d, other, pkt, data)
        if end_of_stream:
            verdict = max(verdict, self._end_of_stream(flow, d, pkt))
        if self.detector is not None and verdict is not Verdict.BLOCK:
            matches = self.detector.inspect(flow, d, pkt, to_server, bool(data))
            if matches:
                verdict = max(verdict, self._rule_matches(flow, pkt, matches))
        if self.buffered > self.cfg.limits.inspect_total_bytes and d.pdu:
            self.counters.buffer_pressure += 1
            self._set_pdu(d, bytearray())  # over the total: this packet's bytes are not kept
        if verdict is Verdict.ACCEPT and data:
            flow.clean_bytes += len(data)
            verdict = self._maybe_bypass(flow, pkt)
        return verdict

    def _tcp(
        self, flow: Flow, d: Direction, other: Direction, pkt: Packet, to_server: bool
    ) -> tuple[Verdict, bytes, bool]:
        flags = pkt.tcp_flags
        lim = self.cfg.limits
        if flags & RST:
            flow.closed = True
            for x in flow.dirs:
                if x.av is not None and self.av is not None:
                    self.av.discard(x.av)
                    x.av = None
            return Verdict.ACCEPT, b"", False
        seq = pkt.seq
        if flags & SYN:
            if d.stream is None:
                d.stream = TcpStream(self.budget, lim.stream_flow_bytes, lim.stream_segments)
            if not d.stream.started or d.stream.next_offset == 0:
                d.stream.start(seq + 1)
            seq += 1
            if not flags & ACK and to_server and flow.tcp_state == NEW:
                flow.tcp_state = SYN_SENT
            elif flags & ACK and not to_server and flow.tcp_state in (NEW, SYN_SENT):
                flow.tcp_state = SYN_RECV
        elif flags & ACK and to_server and flow.tcp_state == SYN_RECV:
            flow.tcp_state = ESTABLISHED
        if not pkt.payload and not flags & FIN:
            return Verdict.ACCEPT, b"", False
        if d.stream is None:
            d.stream = TcpStream(self.budget, lim.stream_flow_bytes, lim.stream_segments)
        if flow.tcp_state in (SYN_SENT, SYN_RECV) and pkt.payload and not flags & SYN:
            flow.tcp_state = ESTABLISHED  # data flows: the handshake's last ACK was missed
        status, data = d.stream.add(seq, pkt.payload, bool(flags & FIN))
        if status is Seg.REFUSED:
            return Verdict.DROP, b"", False
        end = d.stream.finished and not d.fin
        if end:
            d.fin = True
            if other.fin:
                flow.closed = True
        return Verdict.ACCEPT, data, end

    def _classify(self, flow: Flow, pkt: Packet, data: bytes) -> None:
        if pkt.proto == PROTO_TCP and is_http_start(data):
            flow.flow_class = "http"
        elif len(data) >= 3 and data[0] in (0x14, 0x15, 0x16, 0x17) and data[1] == 3:
            flow.flow_class = "tls"
        elif data.startswith(b"SSH-"):
            flow.flow_class = "ssh"
        elif pkt.proto == PROTO_UDP and 53 in (pkt.sport, pkt.dport):
            flow.flow_class = "dns"
        else:
            flow.flow_class = "other"
        if flow.flow_class == "http" and pkt.proto == PROTO_TCP:
            depth = self.cfg.limits
            for i, x in enumerate(flow.dirs):
                x.http = HttpParser(
                    i == 0, flow.http_methods, max(4096, min(65536, depth.http_depth))
                )

    def _data(
        self, flow: Flow, d: Direction, other: Direction, pkt: Packet, data: bytes
    ) -> Verdict:
        if not flow.flow_class:
            self._classify(flow, pkt, data)
        # the PDU the IPS sees: stream bytes since the last turn of the conversation
        if pkt.proto == PROTO_TCP:
            if other.pdu:
                self._set_pdu(other, bytearray())
            limit = self._room(PDU_MAX)
            if len(d.pdu) + len(data) > limit:
                self._set_pdu(d, bytearray(data[-max(limit, 1) :] if limit else data))
            else:
                d.pdu += data
                self.buffered += len(data)
        else:
            self._set_pdu(d, bytearray(data))
        verdict = Verdict.ACCEPT
        if d.http is not None:
            verdict = self._http(flow, d, pkt, data)
        elif self.av is not None and pkt.proto == PROTO_TCP and flow.flow_class not in _ENCRYPTED:
            if d.av is None:
                d.av = self.av.begin("stream")
            outcome = self.av.add(d.av, data)
            if outcome is not None:
                verdict = self._av_outcome(flow, pkt, outcome)
        return verdict

    def _http(self, flow: Flow, d: Direction, pkt: Packet, data: bytes) -> Verdict:
        assert d.http is not None
        verdict = Verdict.ACCEPT
        depth = self.cfg.limits.http_depth
        for ev in d.http.feed(data):
            if ev.kind is Ev.HEADERS:
                d.message = ev.message
                self.buffered -= len(d.body)
                d.body = bytearray()
                d.msg_gen += 1
            elif ev.kind is Ev.BODY:
                room = self._room(depth) - len(d.body)
                if room > 0:
                    chunk = ev.data[:room]
                    d.body += chunk
                    self.buffered += len(chunk)
                if self.av is not None:
                    if d.av is None:
                        d.av = self.av.begin("http-body")
                    outcome = self.av.add(d.av, ev.data)
                    if outcome is not None:
                        verdict = max(verdict, self._av_outcome(flow, pkt, outcome))
            elif ev.kind is Ev.END:
                if d.av is not None and self.av is not None:
                    obj, d.av = d.av, None
                    verdict = max(verdict, self._av_outcome(flow, pkt, self.av.finish(obj)))
            else:
                self._log.debug("flow %s: HTTP parsing stopped: %s", flow.cid, ev.reason)
        return verdict

    def _end_of_stream(self, flow: Flow, d: Direction, pkt: Packet) -> Verdict:
        verdict = Verdict.ACCEPT
        if d.http is not None:
            for ev in d.http.close():
                if ev.kind is Ev.END and d.av is not None and self.av is not None:
                    obj, d.av = d.av, None
                    verdict = max(verdict, self._av_outcome(flow, pkt, self.av.finish(obj)))
        if d.av is not None and self.av is not None:
            obj, d.av = d.av, None
            if obj.kind == "stream":
                verdict = max(verdict, self._av_outcome(flow, pkt, self.av.finish(obj)))
            else:
                self.av.discard(obj)
        return verdict

    def _av_outcome(self, flow: Flow, pkt: Packet, outcome: AvOutcome) -> Verdict:
        if outcome.reason == "clean":
            return Verdict.ACCEPT
        sid, msg, classtype = {
            "infected": (1, f"AV: {outcome.signature} found", "trojan-activity"),
            "size_limit": (
                2,
                f"AV: object of {outcome.size} bytes over the scan limit",
                "misc-activity",
            ),
            "clamd_down": (3, "AV: clamd unavailable, object not scanned", "misc-activity"),
        }[outcome.reason]
        action = "block" if outcome.block else "alert"
        self._alert(flow, pkt, AV_GID, sid, 1, msg, classtype, action, "av", 1)
        return Verdict.BLOCK if outcome.block else Verdict.ACCEPT

    def _rule_matches(self, flow: Flow, pkt: Packet, matches: list[RuleMatch]) -> Verdict:
        verdict = Verdict.ACCEPT
        for m in matches:
            r = m.rule
            if r.action == "pass":
                return Verdict.ACCEPT
            drops = r.action in _DROP_ACTIONS or (
                r.action == "alert" and self.cfg.ips.alert_action == "drop"
            )
            action = "block" if drops else "alert"
            if r.action != "sdrop":
                self._alert(
                    flow, pkt, r.gid, r.sid, r.rev, r.msg, r.classtype, action, "ips", r.priority
                )
            if action == "block":
                verdict = Verdict.BLOCK
        return verdict

    def _alert(
        self,
        flow: Flow,
        pkt: Packet,
        gid: int,
        sid: int,
        rev: int,
        msg: str,
        classtype: str,
        action: str,
        source: str,
        priority: int,
    ) -> None:
        key = (gid, sid)
        if key in flow.alerted:
            return
        flow.alerted.add(key)
        self.counters.alerts += 1
        self.events.append(
            Alert(
                sid,
                gid,
                rev,
                msg,
                classtype,
                action,
                flow.packet_info(pkt),
                flow.cid,
                source,
                priority,
                self.now,
            )
        )
        self._log.info("flow %s: [%d:%d:%d] %s (%s)", flow.cid, gid, sid, rev, msg, action)

    def _maybe_bypass(self, flow: Flow, pkt: Packet) -> Verdict:
        if (
            flow.flow_class not in self._bypass_classes
            or flow.clean_bytes < self.cfg.bypass.after_bytes
            or flow.alerted
            or any(x.av is not None and x.av.kind == "http-body" for x in flow.dirs)
        ):
            return Verdict.ACCEPT
        for x in flow.dirs:  # raw stream objects: scan what there is before letting go
            if x.av is not None and self.av is not None:
                obj, x.av = x.av, None
                if self._av_outcome(flow, pkt, self.av.finish(obj)) is Verdict.BLOCK:
                    return Verdict.BLOCK
        if not flow.bypass_requested:
            flow.bypass_requested = True
            self.events.append(
                BypassRequest(flow.info(), flow.cid, flow.clean_bytes, flow.flow_class)
            )
            self._log.info(
                "flow %s: clean %s flow bypassed after %d bytes",
                flow.cid,
                flow.flow_class,
                flow.clean_bytes,
            )
        return Verdict.BYPASS
