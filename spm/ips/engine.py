"""The built-in IPS engine: Snort 3 rules, a Hyperscan multi-pattern prefilter, and rule
evaluation per inspection event.

Compilation (once, in the dispatcher, before the workers fork): every rule's fast pattern (the
content marked fast_pattern, else its longest positive content) goes into one Hyperscan
literal database per buffer (pkt_data, http_uri, http_header, file_data, ...). Rules without a
positive content are evaluated on every event of their protocol; there are few.

Per event (a packet, after the worker updated the flow's stream PDU and HTTP state), for the
packet's direction: the buffers that grew since the last event are scanned (only their new
bytes, plus an overlap of the longest pattern, so each byte is scanned about once); the rules
whose fast pattern was seen in the current PDU or HTTP message become candidates and stay so
until the PDU is flushed or the message ends; candidates that have not fired are evaluated in
full: protocol, header (cached per flow), flow, packet checks, flowbits, payload options,
detection filter.

Not supported (besides the options listed in `spm.ips.options`): service detection beyond
HTTP, TLS, SSH and DNS (a service-only rule for another service never matches); `no_stream` and
`only_stream` are accepted but rules always see the reassembled stream; detection filters count
per worker, not per SPM; response rules cannot look at the request's buffers.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import hyperscan

from spm.community_id import PROTO_ICMP, PROTO_ICMP6, PROTO_TCP, PROTO_UDP
from spm.flow import Direction, Flow
from spm.http import percent_decode
from spm.ips.base import RuleMatch
from spm.ips.detect import Buffers, match_payload
from spm.ips.header import Header, compile_header
from spm.ips.option_types import (
    HTTP_REQUEST_BUFFERS,
    HTTP_RESPONSE_BUFFERS,
    PKT_DATA,
    CompiledRule,
    RawRuleLike,
    UnsupportedOptionError,
)
from spm.ips.options import LoadReport, UnsupportedRule, compile_rule
from spm.packet import Packet

LOG = logging.getLogger(__name__)

BODY_BUFFERS = frozenset({"file_data", "http_client_body", "http_raw_body"})
MESSAGE_BUFFERS = (
    HTTP_REQUEST_BUFFERS
    | HTTP_RESPONSE_BUFFERS
    | {"http_header", "http_raw_header", "http_cookie", "http_raw_cookie", "http_version"}
) - BODY_BUFFERS
SERVICE_CLASS = {"http": "http", "ssl": "tls", "tls": "tls", "ssh": "ssh", "dns": "dns"}
# flow classes known by content, as Snort's wizard knows them: a rule with `service` runs on such
# a flow only if it names that service (held to Snort for HTTP by the differential test)
IDENTIFIED_SERVICES = frozenset({"http"})
_PROTO_NUMBERS = {"tcp": (PROTO_TCP,), "udp": (PROTO_UDP,), "icmp": (PROTO_ICMP, PROTO_ICMP6)}


class RawHeaderLike(RawRuleLike, Protocol):
    """The header fields a raw rule also has (None for service rules like `alert http (...)`)."""

    @property
    def src(self) -> str | None: ...
    @property
    def src_ports(self) -> str | None: ...
    @property
    def direction(self) -> str | None: ...
    @property
    def dst(self) -> str | None: ...
    @property
    def dst_ports(self) -> str | None: ...


def _escape(pattern: bytes) -> bytes:
    return b"".join(b"\\x%02x" % c for c in pattern)


@dataclass(slots=True)
class _Prefilter:
    """One Hyperscan database: pattern id -> the rules whose fast pattern it is."""

    db: Any
    rules: list[tuple[int, ...]]
    overlap: int  # longest pattern - 1


@dataclass(slots=True)
class IpsCounters:
    events: int = 0
    bytes_scanned: int = 0
    candidates: int = 0
    evaluations: int = 0
    matches: int = 0


class RuleSet:
    """Compiled rules and their prefilters (read-only after construction: shared by workers)."""

    def __init__(
        self,
        raw_rules: Iterable[RawHeaderLike],
        variables: Mapping[str, str],
        report: LoadReport | None = None,
    ) -> None:
        self.report = report or LoadReport()
        self.rules: list[CompiledRule] = []
        seen: dict[tuple[int, int], CompiledRule] = {}
        for raw in raw_rules:
            try:
                rule = compile_rule(raw)
                rule.header = compile_header(
                    raw.proto,
                    raw.src,
                    raw.src_ports,
                    raw.direction,
                    raw.dst,
                    raw.dst_ports,
                    variables,
                    path=raw.path,
                    line=raw.line,
                )
            except UnsupportedOptionError as exc:
                self.report.unsupported.append(
                    UnsupportedRule(raw.path, raw.line, _sid_of(raw), exc.option, exc.reason)
                )
                continue
            key = (rule.info.gid, rule.info.sid)
            if key in seen:
                LOG.warning(
                    "%s:%d: rule %d:%d is defined again (first at %s:%d); the later one is used",
                    rule.path,
                    rule.line,
                    key[0],
                    key[1],
                    seen[key].path,
                    seen[key].line,
                )
                self.rules.remove(seen[key])
            seen[key] = rule
            self.rules.append(rule)
        for i, rule in enumerate(self.rules):
            rule.index = i
        self.report.loaded = len(self.rules)
        self.prefilters: dict[str, _Prefilter] = {}
        self.no_fp: dict[str, list[CompiledRule]] = defaultdict(list)  # by rule proto
        self._build_prefilters()
        # rules without a fast pattern, by protocol: those with and without payload options
        self.no_fp_payload = {k: [r for r in v if r.payload] for k, v in self.no_fp.items()}
        self.no_fp_packet = {k: [r for r in v if not r.payload] for k, v in self.no_fp.items()}

    def _build_prefilters(self) -> None:
        by_buffer: dict[str, dict[tuple[bytes, bool], list[int]]] = defaultdict(dict)
        for rule in self.rules:
            fp = rule.fast_pattern
            if fp is None:
                self.no_fp[SERVICE_CLASS.get(rule.proto, rule.proto)].append(rule)
                continue
            key = (fp.pattern.lower() if fp.nocase else fp.pattern, fp.nocase)
            by_buffer[fp.buffer].setdefault(key, []).append(rule.index)
        started = time.monotonic()
        for buffer, patterns in by_buffer.items():
            items = list(patterns.items())
            db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            db.compile(
                expressions=[_escape(p) for (p, _nc), _r in items],
                ids=list(range(len(items))),
                elements=len(items),
                flags=[
                    hyperscan.HS_FLAG_SINGLEMATCH | (hyperscan.HS_FLAG_CASELESS if nc else 0)
                    for (_p, nc), _r in items
                ],
            )
            self.prefilters[buffer] = _Prefilter(
                db, [tuple(r) for _k, r in items], max(len(p) for (p, _nc), _r in items) - 1
            )
        LOG.info(
            "IPS: %d rules (%d without a fast pattern), %d prefilter databases built in %.2fs",
            len(self.rules),
            sum(len(v) for v in self.no_fp.values()),
            len(self.prefilters),
            time.monotonic() - started,
        )


def _sid_of(raw: RawRuleLike) -> int:
    for opt in raw.options:
        if opt.name == "sid" and opt.value and opt.value.strip().isdigit():
            return int(opt.value.strip())
    return 0


@dataclass(slots=True)
class _DirState:
    pdu_gen: int = -1
    pdu_scanned: int = 0
    cand_pdu: set[int] = field(default_factory=set)
    msg_gen: int = -1
    body_scanned: int = 0
    cand_msg: set[int] = field(default_factory=set)
    fired: set[int] = field(default_factory=set)


@dataclass(slots=True)
class _FlowState:
    dirs: tuple[_DirState, _DirState] = field(default_factory=lambda: (_DirState(), _DirState()))
    header_ok: dict[tuple[int, bool, str], bool] = field(default_factory=dict)


class BuiltinEngine:
    """The `Detector` the workers run (see `spm.ips.base`)."""

    def __init__(self, ruleset: RuleSet) -> None:
        self.rs = ruleset
        self.counters = IpsCounters()
        self._df: dict[tuple[int, bytes], list[float]] = {}

    # --- per event ------------------------------------------------------------------------------

    def inspect(
        self, flow: Flow, d: Direction, pkt: Packet, to_server: bool, new_data: bool
    ) -> list[RuleMatch]:
        self.counters.events += 1
        fs = flow.ips.get("engine")
        if fs is None:
            fs = flow.ips["engine"] = _FlowState()
        st = fs.dirs[0 if to_server else 1]
        cands: set[int] = set()
        # one fetch (and decoding) per buffer and event, for the prefilters and the rules alike
        bufs = Buffers(lambda name, fld: self._buffer(d, pkt, new_data, name, fld))
        if new_data:
            self._scan(d, pkt, st, bufs)
            cands = st.cand_pdu | st.cand_msg
            cands -= st.fired
        matches: list[RuleMatch] = []
        rules = self.rs.rules
        self.counters.candidates += len(cands)
        for idx in sorted(cands):
            self._try(rules[idx], flow, fs, st, pkt, to_server, bufs, matches)
        groups = self.rs.no_fp_payload if new_data else self.rs.no_fp_packet
        for key in ("ip", _proto_name(pkt.proto), flow.flow_class):
            for rule in groups.get(key, ()):
                if rule.index not in st.fired:
                    self._try(rule, flow, fs, st, pkt, to_server, bufs, matches)
        if new_data:  # rules without payload options run on every packet, data or not
            for key in ("ip", _proto_name(pkt.proto), flow.flow_class):
                for rule in self.rs.no_fp_packet.get(key, ()):
                    if rule.index not in st.fired:
                        self._try(rule, flow, fs, st, pkt, to_server, bufs, matches)
        return matches

    def _scan(self, d: Direction, pkt: Packet, st: _DirState, bufs: Buffers) -> None:
        pf = self.rs.prefilters
        if d.pdu_gen != st.pdu_gen:
            st.pdu_gen, st.pdu_scanned = d.pdu_gen, 0
            st.cand_pdu = set()
            st.fired = set()
        http = _http_mode(d)
        size = len(d.pdu) if pkt.proto == PROTO_TCP else len(pkt.payload)
        p = None if http else pf.get(PKT_DATA)  # HTTP: pkt_data is the body, scanned below
        if p is not None and size > st.pdu_scanned:
            data = bufs.get(PKT_DATA, None) or b""
            self._hs(p, data[max(0, st.pdu_scanned - p.overlap) :], st.cand_pdu)
        st.pdu_scanned = size
        msg = d.message
        if msg is None:
            return
        if d.msg_gen != st.msg_gen:
            st.msg_gen, st.body_scanned = d.msg_gen, 0
            st.cand_msg = set()
            st.fired = set()
            for name in MESSAGE_BUFFERS:
                p = pf.get(name)
                buf = None if p is None else bufs.get(name, None)
                if p is not None and buf:
                    self._hs(p, buf, st.cand_msg)
        size = len(d.body)
        if size > st.body_scanned:
            for name in (*BODY_BUFFERS, PKT_DATA) if http else BODY_BUFFERS:
                p = pf.get(name)
                buf = None if p is None else bufs.get(name, None)
                if p is None or buf is None:
                    continue
                if len(buf) == size:  # the body as it is: only what came since the last scan
                    self._hs(p, buf[max(0, st.body_scanned - p.overlap) :], st.cand_msg)
                else:  # decoded (shorter): scanned whole
                    self._hs(p, buf, st.cand_msg)
            st.body_scanned = size

    def _hs(self, p: _Prefilter, data: bytes, out: set[int]) -> None:
        self.counters.bytes_scanned += len(data)
        ids: list[int] = []

        def on_match(pid: int, _frm: int, _to: int, _flags: int, _ctx: object) -> None:
            ids.append(pid)

        p.db.scan(data, match_event_handler=on_match)
        for pid in ids:
            out.update(p.rules[pid])

    def _buffer(
        self, d: Direction, pkt: Packet, new_data: bool, name: str, fld: str | None
    ) -> bytes | None:
        if name == PKT_DATA:
            if _http_mode(d):  # Snort 3: an HTTP flow's raw data is its message bodies
                return bytes(d.body) if new_data and d.body else None
            if pkt.proto == PROTO_TCP:
                return bytes(d.pdu) if new_data else pkt.payload
            return pkt.payload
        msg = d.message
        if msg is None:
            return None
        if name in ("file_data", "http_raw_body"):
            return bytes(d.body)
        if name in HTTP_REQUEST_BUFFERS and not msg.request:
            return None
        if name in HTTP_RESPONSE_BUFFERS and msg.request:
            return None
        if name == "http_client_body":
            return percent_decode(bytes(d.body))
        if name == "http_uri":
            return msg.norm_uri
        if name == "http_raw_uri":
            return msg.uri
        if name == "http_method":
            return msg.method
        if name in ("http_header", "http_raw_header"):
            if fld is not None:
                return msg.header(fld.encode())
            return msg.norm_header if name == "http_header" else msg.raw_header
        if name == "http_cookie":
            return percent_decode(msg.cookie) or None
        if name == "http_raw_cookie":
            return msg.cookie or None
        if name == "http_stat_code":
            return msg.status_code
        if name == "http_stat_msg":
            return msg.status_msg
        if name == "http_version":
            return msg.version
        if name in ("http_raw_request", "http_raw_status"):
            return msg.header_block.split(b"\n", 1)[0].rstrip(b"\r")
        return None

    # --- one rule -------------------------------------------------------------------------------

    def _try(
        self,
        rule: CompiledRule,
        flow: Flow,
        fs: _FlowState,
        st: _DirState,
        pkt: Packet,
        to_server: bool,
        bufs: Buffers,
        out: list[RuleMatch],
    ) -> None:
        """Evaluate one rule. A rule that matched, or that can never match in this direction of
        the flow (protocol, direction, header), is marked done until the next PDU or message."""
        self.counters.evaluations += 1
        fo = rule.flow
        if (
            (fo.to_server is not None and fo.to_server != to_server)
            or not self._proto_ok(rule, flow, pkt)
            or not self._header_ok(rule, flow, fs, pkt, to_server)
        ):
            st.fired.add(rule.index)
            return
        if fo.established is not None and fo.established != flow.established:
            return
        for check in rule.packet_checks:
            if not check(pkt):
                return
        for fb in rule.flowbits:
            if fb.op == "isset":
                have = [n in flow.flowbits for n in fb.names]
                if not (all(have) if fb.all_of else any(have)):
                    return
            elif fb.op == "isnotset":
                have = [n in flow.flowbits for n in fb.names]
                if all(have) if not fb.all_of else any(have):
                    return
        if rule.payload and not match_payload(rule.payload, bufs):
            return
        if rule.detection_filter is not None and not self._df_pass(rule, pkt):
            return
        st.fired.add(rule.index)
        for fb in rule.flowbits:
            if fb.op in ("set", "setx"):
                flow.flowbits.update(fb.names)
            elif fb.op == "unset":
                flow.flowbits.difference_update(fb.names)
            elif fb.op == "toggle":
                flow.flowbits.symmetric_difference_update(fb.names)
            elif fb.op == "reset":
                flow.flowbits.clear()
        self.counters.matches += 1
        if not rule.noalert:
            out.append(RuleMatch(rule.info))

    def _proto_ok(self, rule: CompiledRule, flow: Flow, pkt: Packet) -> bool:
        proto = rule.proto
        if proto == "ip":
            return True
        nums = _PROTO_NUMBERS.get(proto)
        if nums is not None:
            return pkt.proto in nums
        # a service rule (`alert http (...)`): the flow must have been identified as that
        return SERVICE_CLASS.get(proto) == flow.flow_class and flow.flow_class != ""

    def _header_ok(
        self, rule: CompiledRule, flow: Flow, fs: _FlowState, pkt: Packet, to_server: bool
    ) -> bool:
        key = (rule.index, to_server, flow.flow_class)
        cached = fs.header_ok.get(key)
        if cached is not None:
            return cached
        header = rule.header
        ok = True
        by_service = bool(rule.services) and any(
            SERVICE_CLASS.get(x) == flow.flow_class for x in rule.services
        )
        if rule.services and not by_service and flow.flow_class in IDENTIFIED_SERVICES:
            ok = False  # Snort 3: a flow of a known service runs only that service's rules
        elif isinstance(header, Header) and not header.is_any:
            src, dst = (flow.client, flow.server) if to_server else (flow.server, flow.client)
            sport, dport = pkt.sport, pkt.dport
            ok = header.matches(src, sport, dst, dport, not by_service) or (
                header.bidirectional and header.matches(dst, dport, src, sport, not by_service)
            )
        fs.header_ok[key] = ok
        return ok

    def _df_pass(self, rule: CompiledRule, pkt: Packet) -> bool:
        df = rule.detection_filter
        assert df is not None
        now = time.monotonic()
        key = (rule.index, pkt.src if df.by_src else pkt.dst)
        times = [t for t in self._df.get(key, []) if now - t < df.seconds]
        times.append(now)
        self._df[key] = times[-(df.count + 1) :]
        if len(self._df) > 100_000:
            self._df.clear()
        return len(times) > df.count


def _http_mode(d: Direction) -> bool:
    """The direction carries parsed HTTP (not a stream the parser gave up on)."""
    return d.http is not None and not d.http.broken


def _proto_name(proto: int) -> str:
    if proto == PROTO_TCP:
        return "tcp"
    if proto == PROTO_UDP:
        return "udp"
    if proto in (PROTO_ICMP, PROTO_ICMP6):
        return "icmp"
    return "ip"
