"""The worker: verdicts for flows carrying malware, clean flows, bypass, bad input."""

from __future__ import annotations

import functools
import random
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, TCP
from scapy.packet import Raw

from spm.av.inspector import AvInspector
from spm.config import AvConfig, BypassConfig, LimitsConfig, SpmConfig
from spm.ips.base import Detector
from spm.verdict import Alert, BypassRequest, Verdict
from spm.worker import Worker
from tests.spm.spm_packets import TcpConversation, http_get, http_response, udp


def _cfg(**kw: object) -> SpmConfig:
    return SpmConfig(name="t", interface="eth0", tags=(1,), **kw)  # type: ignore[arg-type]


def _av_worker(sock: str, **kw: object) -> Worker:
    cfg = _cfg(av=AvConfig(enabled=True, clamd_socket=sock), **kw)
    return Worker(cfg, av=AvInspector(cfg.av))


def _run(worker: Worker, packets: list[bytes]) -> list[Verdict]:
    return [worker.process(p) for p in packets]


def test_http_download_of_eicar_is_blocked_at_the_last_body_packet(
    clamd_socket: str, eicar_bytes: bytes
) -> None:
    w = _av_worker(clamd_socket)
    conv = TcpConversation()
    assert set(_run(w, conv.handshake() + conv.send(True, http_get("/eicar.com")))) == {
        Verdict.ACCEPT
    }
    body = eicar_bytes + b"\r\n" + b"p" * 3000
    verdicts = _run(w, conv.send(False, http_response(body)))
    assert verdicts[:-1] == [Verdict.ACCEPT] * (len(verdicts) - 1)
    assert verdicts[-1] is Verdict.BLOCK
    # the rest of the flow, both ways, is blocked too
    assert w.process(conv.send(True, b"more")[0]) is Verdict.BLOCK
    alerts = [e for e in w.events if isinstance(e, Alert)]
    assert len(alerts) == 1 and alerts[0].source == "av" and "Eicar" in alerts[0].msg
    assert alerts[0].flow.src == "192.0.2.80" and alerts[0].community_id.startswith("1:")


def test_chunked_upload_of_a_clamav_sample_is_blocked(clamd_socket: str, testfiles: Path) -> None:
    w = _av_worker(clamd_socket)
    conv = TcpConversation()
    sample = (testfiles / "clam.zip").read_bytes()
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(sample[i : i + 100]), sample[i : i + 100])
        for i in range(0, len(sample), 100)
    )
    req = (
        b"POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunks
        + b"0\r\n\r\n"
    )
    verdicts = _run(w, conv.handshake() + conv.send(True, req, mss=300))
    assert verdicts[-1] is Verdict.BLOCK
    assert Verdict.BLOCK not in verdicts[:-1]


def test_clean_download_passes_and_reordered_segments_are_reassembled(
    clamd_socket: str, eicar_bytes: bytes
) -> None:
    w = _av_worker(clamd_socket)
    conv = TcpConversation()
    _run(w, conv.handshake() + conv.send(True, http_get()))
    clean = conv.send(False, http_response(b"hello " * 1000, chunked=True), mss=500)
    random.Random(1).shuffle(clean)
    assert set(_run(w, clean)) == {Verdict.ACCEPT}
    # the EICAR body, out of order, is still found when the gap closes
    _run(w, conv.send(True, http_get("/2")))
    bad = conv.send(False, http_response(eicar_bytes + b" " * 200), mss=40)
    verdicts = _run(w, bad[1:] + bad[:1])
    assert verdicts[-1] is Verdict.BLOCK


def test_clean_tls_flow_is_bypassed_after_n_bytes_and_the_cpm_is_asked() -> None:
    cfg = _cfg(bypass=BypassConfig(classes=("tls",), after_bytes=3000))
    w = Worker(cfg)
    conv = TcpConversation(sport=443)
    tls = b"\x16\x03\x01\x02\x00" + b"\x01" * 1500
    verdicts = _run(
        w, conv.handshake() + conv.send(True, tls) + conv.send(False, b"\x17\x03\x03" + b"x" * 3000)
    )
    assert verdicts[-1] is Verdict.BYPASS
    assert Verdict.BYPASS not in verdicts[:-2]
    reqs = [e for e in w.events if isinstance(e, BypassRequest)]
    assert len(reqs) == 1 and reqs[0].flow_class == "tls" and reqs[0].clean_bytes >= 3000
    assert w.process(conv.send(True, b"\x17\x03\x03abc")[0]) is Verdict.BYPASS


def test_http_flow_is_not_bypassed_when_its_class_is_not_allowed() -> None:
    w = Worker(_cfg(bypass=BypassConfig(classes=("tls",), after_bytes=10)))
    conv = TcpConversation()
    verdicts = _run(
        w,
        conv.handshake()
        + conv.send(True, http_get())
        + conv.send(False, http_response(b"x" * 100)),
    )
    assert set(verdicts) == {Verdict.ACCEPT}


def test_segment_that_cannot_be_buffered_is_dropped_not_the_flow() -> None:
    w = Worker(_cfg(limits=LimitsConfig(stream_flow_bytes=2000)))
    conv = TcpConversation()
    _run(w, conv.handshake())
    conv.cseq += 5000  # a hole of 5000 bytes: what follows cannot be buffered
    assert w.process(conv.send(True, b"far ahead")[0]) is Verdict.DROP
    conv.cseq -= 5000 + len(b"far ahead")
    assert w.process(conv.send(True, b"in order")[0]) is Verdict.ACCEPT


def test_udp_packets_are_accepted_and_flows_expire() -> None:
    w = Worker(_cfg(limits=LimitsConfig(flow_timeout=10.0)))
    assert w.process(udp("10.0.0.1", "10.0.0.2", 5353, 53, b"q"), now=100.0) is Verdict.ACCEPT
    assert len(w.flows) == 1
    assert w.expire(now=200.0) == 1
    assert len(w.flows) == 0
    assert w.events and isinstance(w.events[-1], str)


def test_flow_table_is_bounded_and_evicts_the_oldest() -> None:
    w = Worker(_cfg(limits=LimitsConfig(max_flows=16)))
    for i in range(100):
        w.process(udp("10.0.0.1", "10.0.0.2", 1000 + i, 53, b"q"))
    assert len(w.flows) == 16
    assert w.flows.counters.evicted == 84


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.binary(max_size=200))
def test_random_bytes_never_crash_the_worker(raw: bytes) -> None:
    w = Worker(_cfg())
    assert w.process(raw) in set(Verdict)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    segs=st.lists(
        st.tuples(
            st.integers(0, (1 << 32) - 1),
            st.sampled_from(["S", "SA", "A", "PA", "F", "R", "FPU", ""]),
            st.binary(max_size=64),
            st.integers(0, 15),
            st.booleans(),
        ),
        max_size=40,
    )
)
def test_malformed_and_absurd_tcp_never_crashes_or_leaks(
    segs: list[tuple[int, str, bytes, int, bool]],
) -> None:
    w = Worker(_cfg(limits=LimitsConfig(stream_flow_bytes=4096, stream_total_bytes=8192)))
    for seq, flags, data, dataofs, truncate in segs:
        pkt = (
            IP(src="10.0.0.1", dst="10.0.0.2")
            / TCP(sport=1, dport=80, seq=seq, flags=flags, dataofs=dataofs or None)
            / Raw(data)
        )
        raw = bytes(pkt)
        if truncate:
            raw = raw[: 20 + len(data) % 30]
        assert w.process(raw) in set(Verdict)
    assert w.budget.used <= 8192
    w.expire(now=1e12)
    assert w.budget.used == 0


def test_flood_of_tiny_out_of_order_segments_is_bounded() -> None:
    w = Worker(_cfg(limits=LimitsConfig(stream_flow_bytes=64 * 1024, stream_total_bytes=1 << 20)))
    conv = TcpConversation()
    _run(w, conv.handshake())
    base = conv.cseq
    verdicts = []
    for i in range(1, 6000, 2):  # 1-byte segments, each leaving a hole
        conv.cseq = base + i
        verdicts.append(w.process(conv.send(True, b"x")[0]))
    assert w.budget.used <= 64 * 1024
    assert Verdict.DROP in verdicts and Verdict.BLOCK not in verdicts


def test_ipv6_tcp_flow_is_reassembled_and_inspected(clamd_socket: str, eicar_bytes: bytes) -> None:
    from scapy.layers.inet6 import IPv6

    w = _av_worker(clamd_socket)
    client, server = "2001:db8::1", "2001:db8::80"
    seq_c, seq_s = 100, 900

    def seg(to_server: bool, flags: str, data: bytes = b"") -> bytes:
        nonlocal seq_c, seq_s
        if to_server:
            p = IPv6(src=client, dst=server) / TCP(sport=5555, dport=80, flags=flags, seq=seq_c)
            seq_c += len(data) + (1 if "S" in flags else 0)
        else:
            p = IPv6(src=server, dst=client) / TCP(sport=80, dport=5555, flags=flags, seq=seq_s)
            seq_s += len(data) + (1 if "S" in flags else 0)
        return bytes(p / Raw(data)) if data else bytes(p)

    pkts = [seg(True, "S"), seg(False, "SA"), seg(True, "A"), seg(True, "PA", http_get())]
    body = http_response(eicar_bytes)
    pkts += [seg(False, "PA", body[:30]), seg(False, "PA", body[30:])]
    verdicts = [w.process(p) for p in pkts]
    assert verdicts[-1] is Verdict.BLOCK and Verdict.BLOCK not in verdicts[:-1]
    [alert] = [e for e in w.events if isinstance(e, Alert)]
    assert alert.flow.src == "2001:db8::80"
    flow = w.flows.get(alert.community_id, 0.0)
    assert flow is not None and alert.community_id == flow.cid


@functools.cache
def _fuzz_engine() -> Detector:
    from opengate.snort.rules import parse_rule
    from spm.ips.engine import BuiltinEngine, RuleSet

    rules = [
        'alert tcp any any -> any any (msg:"a"; content:"GET"; pcre:"/^GET\\s+\\S+/"; '
        "byte_test:2,>,100,0,relative; sid:1;)",
        'alert tcp any any -> any any (msg:"b"; content:"|00 01|"; byte_jump:2,0,relative; '
        'content:"x",within 10; isdataat:!5,relative; sid:2;)',
        'alert http (msg:"c"; http_uri; content:"/a"; http_header; content:"Host"; sid:3;)',
        'alert tcp any any -> any any (msg:"d"; flags:PA; dsize:<10; sid:4;)',
    ]
    return BuiltinEngine(RuleSet([parse_rule(r, line=i) for i, r in enumerate(rules)], {}))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payloads=st.lists(st.binary(max_size=300), max_size=12), seed=st.integers(0, 1000))
def test_garbage_payloads_through_the_ips_never_crash(payloads: list[bytes], seed: int) -> None:
    w = Worker(_cfg(limits=LimitsConfig(stream_flow_bytes=2048)), _fuzz_engine())
    conv = TcpConversation()
    pkts = conv.handshake()
    rng = random.Random(seed)
    for data in payloads:
        if data:
            head = b"GET /a HTTP/1.1\r\nHost: x\r\n" if rng.random() < 0.3 else b""
            pkts += conv.send(rng.random() < 0.5, head + data)
    rng.shuffle(pkts)
    for p in pkts:
        assert w.process(p) in set(Verdict)


def test_raw_tcp_stream_is_scanned_at_fin_and_before_a_bypass(
    clamd_socket: str, eicar_bytes: bytes
) -> None:
    w = _av_worker(clamd_socket)
    conv = TcpConversation(sport=2121)
    verdicts = [w.process(p) for p in conv.handshake() + conv.send(False, eicar_bytes)]
    assert Verdict.BLOCK not in verdicts  # a raw stream is whole only at its end
    assert w.process(conv.fin(False)) is Verdict.BLOCK
    # a flow of a bypassable class is scanned before it is let go
    cfg = _cfg(
        av=AvConfig(enabled=True, clamd_socket=clamd_socket),
        bypass=BypassConfig(classes=("other",), after_bytes=10),
    )
    w2 = Worker(cfg, av=AvInspector(cfg.av))
    conv2 = TcpConversation(sport=2121, cport=40001)
    verdicts = [w2.process(p) for p in conv2.handshake() + conv2.send(False, eicar_bytes)]
    assert verdicts[-1] is Verdict.BLOCK
    assert not [e for e in w2.events if isinstance(e, BypassRequest)]


def test_inspection_buffers_are_bounded_in_total_and_freed_with_their_flows() -> None:
    limit = 64 * 1024
    w = Worker(_cfg(limits=LimitsConfig(inspect_total_bytes=limit)))
    for i in range(60):  # 60 flows with 8 KiB of request data each: 480 KiB if unbounded
        conv = TcpConversation(cport=30000 + i)
        for p in conv.handshake() + conv.send(True, b"z" * 8192):
            w.process(p)
    assert w.buffered <= limit + 16 * 1024
    assert w.counters.buffer_pressure > 0
    w.expire(now=1e12)
    assert w.buffered == 0
