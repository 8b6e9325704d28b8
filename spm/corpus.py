"""A capture that should fire each rule of a rule file: `opengate spm corpus RULES OUT.pcap`.

For every rule the built-in engine loads and this generator can satisfy, one flow (a whole TCP
connection, or a UDP exchange) whose payload places each content of the rule in the buffer it
names, at the position its offset/depth/distance/within allow, with a string that matches each
pcre, padded to satisfy bufferlen and isdataat; HTTP rules get a well-formed request (and
response) whose URI, headers, cookie, method, body, status code or message carry them. Benign
flows (ordinary requests and responses) follow. The flows are apart (a 5-tuple each) and in
file order, so an alert names its flow by its Community ID. With `family=6` every flow is
IPv6 (the addresses from 2001:db8::/32, or from the IPv6 part of the rule's header: a rule whose
header names IPv4 addresses only is skipped), so that the engines are compared on IPv6 too.

It is how the built-in engine is held to Snort 3 (`compare`): both engines replay the same
capture and their (flow, sid) alerts are compared. `seed` varies what a rule leaves open
(filler bytes, the case of nocase contents, pcre alternatives and repetitions, where a free
content goes), so a second seed gives a corpus the engine was not tuned on.

Not generated (counted by reason in `Corpus.skipped`): rules with byte_test/byte_jump, packet
field options (flags, dsize, ttl, ...), flowbits a rule tests (isset) or that never alert
(noalert), detection_filter, relative bufferlen, and rules whose placements conflict.
"""

from __future__ import annotations

import importlib
import io
import ipaddress
import json
import random
import re
import struct
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opengate.inet import internet_checksum
from spm.community_id import community_id_str
from spm.eve import EveLog
from spm.http import TOKEN, is_http_start
from spm.ips.engine import RuleSet
from spm.ips.header import AddressSet, Header, IntervalSet
from spm.ips.option_types import (
    HTTP_ANY_BUFFERS,
    HTTP_REQUEST_BUFFERS,
    HTTP_RESPONSE_BUFFERS,
    PKT_DATA,
    BufferLen,
    ByteJump,
    ByteTest,
    CompiledRule,
    Content,
    IsDataAt,
    Pcre,
)
from spm.ips.snort import prefix_args, snort_env, snort_lua
from spm.pcap import write_pcap
from spm.replay import replay, replay_config

# the regex parser's own tree (Python 3.11 names; sre_parse is the deprecated alias)
sre_c: Any = importlib.import_module("re._constants")
sre_p: Any = importlib.import_module("re._parser")

T0 = 1_700_000_000.0  # capture time of the first packet
MSS = 1400
HTTP_BUFFERS = HTTP_REQUEST_BUFFERS | HTTP_RESPONSE_BUFFERS | HTTP_ANY_BUFFERS | {"file_data"}
_URI_SAFE = frozenset(range(0x21, 0x7F)) - {ord("#")}  # what a URI carries unencoded here
# a raw buffer and its normalized twin hold the same bytes when nothing needs normalizing (the
# generator writes no percent-encodings, no /./ or //): one buffer serves both
_SAME_BYTES = {
    "http_raw_uri": "http_uri",
    "http_raw_header": "http_header",
    "http_raw_cookie": "http_cookie",
}
_FILLER = b"abcdefghijklmnopqrstuvwxyz"
# family -> (the rule flows' server, the benign flows' server), documentation addresses
SERVERS = {4: ("192.0.2.80", "198.51.100.10"), 6: ("2001:db8::80", "2001:db8:51::10")}


_LAST_HEADERS = (b"Connection: keep-alive\r\n", b"Cache-Control: no-cache\r\n", b"X-End: 1\r\n")


class CannotGenerate(Exception):  # noqa: N818 (a reason, counted; not an error)
    """The rule asks for something this generator does not produce; the message is the reason."""


@dataclass(slots=True)
class CorpusFlow:
    """One flow of the corpus: `sid` 0 for a benign flow."""

    sid: int
    proto: int  # 6 or 17
    client: str
    server: str
    cport: int
    sport: int
    packets: list[bytes] = field(default_factory=list)  # IP packets, in order

    def ends(self, to_server: bool) -> tuple[str, str, int, int]:
        """(source, destination, source port, destination port) of a packet that way."""
        if to_server:
            return self.client, self.server, self.cport, self.sport
        return self.server, self.client, self.sport, self.cport


@dataclass(slots=True)
class Corpus:
    flows: list[CorpusFlow] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  # reason -> rules

    @property
    def rule_flows(self) -> list[CorpusFlow]:
        return [f for f in self.flows if f.sid]

    def write_pcap(self, path: str | Path) -> int:
        """Write every packet as an Ethernet frame (`spm.pcap.write_pcap`), 0.1 ms apart and 10
        ms between flows; returns the bytes of IP packets written (for throughput)."""
        frames: list[tuple[float, bytes]] = []
        t = T0
        for flow in self.flows:
            for pkt in flow.packets:
                frame = (_ETHERNET6 if pkt[0] >> 4 == 6 else _ETHERNET) + pkt
                frames.append((t, frame + b"\0" * max(0, 60 - len(frame))))
                t += 0.0001
            t += 0.01
        write_pcap(path, frames)
        return sum(len(pkt) for flow in self.flows for pkt in flow.packets)


_ETHERNET = bytes.fromhex("0200000000020200000000010800")  # to, from, IPv4
_ETHERNET6 = _ETHERNET[:12] + b"\x86\xdd"  # IPv6


# --- strings that match a pcre ------------------------------------------------------------------


class _Sampler:
    """Builds a string a Python regex (as the engine translated the rule's pcre) matches."""

    def __init__(self, rng: random.Random, ignore_case: bool) -> None:
        self.rng = rng
        self.ignore_case = ignore_case
        self.groups: dict[int, bytes] = {}
        self.depth = 0

    def sample(self, items: Iterable[tuple[Any, Any]]) -> bytes:
        self.depth += 1
        if self.depth > 60:
            raise CannotGenerate("pcre too deeply nested")
        out = b"".join(self._one(op, av) for op, av in items)
        self.depth -= 1
        return out

    def _char_in(self, items: Sequence[tuple[Any, Any]]) -> int:
        negate = bool(items) and items[0][0] is sre_c.NEGATE
        if negate:
            items = items[1:]
        allowed = [c for c in range(1, 256) if _in_set(c, items)]
        if negate:
            allowed = [c for c in b"abcxyz019 -_/.ABC" if c not in allowed] or [
                c for c in range(32, 127) if c not in allowed
            ]
        if not allowed:
            raise CannotGenerate("pcre character class with no character")
        printable = [c for c in allowed if 33 <= c < 127] or allowed
        return self.rng.choice(printable[:8]) if self.rng.random() < 0.5 else printable[0]

    def _one(self, op: Any, av: Any) -> bytes:
        if op is sre_c.LITERAL:
            c = int(av)
            if self.ignore_case and 97 <= c | 32 <= 122 and self.rng.random() < 0.3:
                c ^= 32
            return bytes([c])
        if op is sre_c.NOT_LITERAL:
            return b"a" if av != ord("a") else b"b"
        if op is sre_c.ANY:
            return b"a"
        if op is sre_c.IN:
            return bytes([self._char_in(av)])
        if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, getattr(sre_c, "POSSESSIVE_REPEAT", None)):
            lo, hi, sub = av
            n = lo
            if hi is not sre_c.MAXREPEAT and hi > lo and self.rng.random() < 0.3:
                n = min(hi, lo + 1)
            elif hi is sre_c.MAXREPEAT and self.rng.random() < 0.3:
                n = lo + 1
            return b"".join(self.sample(sub) for _ in range(n))
        if op is sre_c.SUBPATTERN:
            group, _add, _del, sub = av
            text = self.sample(sub)
            if group is not None:
                self.groups[group] = text
            return text
        if op is getattr(sre_c, "ATOMIC_GROUP", None):
            return self.sample(av)
        if op is sre_c.BRANCH:
            _, alternatives = av
            return self.sample(self.rng.choice(alternatives))
        if op is sre_c.CATEGORY:
            return _CATEGORY_SAMPLE.get(str(av), b"a")
        if op is sre_c.GROUPREF:
            return self.groups.get(int(av), b"")
        if op is sre_c.GROUPREF_EXISTS:
            group, yes, no = av
            return self.sample(yes if group in self.groups or no is None else no)
        if op in (sre_c.AT, sre_c.ASSERT, sre_c.ASSERT_NOT):
            return b""
        raise CannotGenerate(f"pcre construct {op}")


_CATEGORY_SAMPLE = {
    "CATEGORY_DIGIT": b"7",
    "CATEGORY_NOT_DIGIT": b"a",
    "CATEGORY_SPACE": b" ",
    "CATEGORY_NOT_SPACE": b"a",
    "CATEGORY_WORD": b"a",
    "CATEGORY_NOT_WORD": b" ",
}
_CATEGORY_TEST: dict[str, Callable[[int], bool]] = {
    "CATEGORY_DIGIT": lambda c: 48 <= c <= 57,
    "CATEGORY_NOT_DIGIT": lambda c: not 48 <= c <= 57,
    "CATEGORY_SPACE": lambda c: c in b" \t\n\r\f\v",
    "CATEGORY_NOT_SPACE": lambda c: c not in b" \t\n\r\f\v",
    "CATEGORY_WORD": lambda c: chr(c).isalnum() or c == 95,
    "CATEGORY_NOT_WORD": lambda c: not (chr(c).isalnum() or c == 95),
}


def _never(_c: int) -> bool:
    return False


def _in_set(c: int, items: Sequence[tuple[Any, Any]]) -> bool:
    for op, av in items:
        if op is sre_c.LITERAL and c == av:
            return True
        if op is sre_c.RANGE and av[0] <= c <= av[1]:
            return True
        if op is sre_c.CATEGORY and _CATEGORY_TEST.get(str(av), _never)(c):
            return True
    return False


def pcre_sample(p: Pcre, rng: random.Random, tries: int = 40) -> bytes:
    """A string `p` matches (searched), or CannotGenerate."""
    pattern = p.regex.pattern
    flags = p.regex.flags
    parsed = sre_p.parse(
        pattern.decode("latin-1") if isinstance(pattern, bytes) else pattern, flags
    )
    for _ in range(tries):
        text = _Sampler(rng, bool(flags & re.IGNORECASE)).sample(parsed)
        if p.regex.search(text):
            return text
    raise CannotGenerate("no string found that the pcre matches")


# --- one buffer ---------------------------------------------------------------------------------


class _Buffer:
    """The bytes of one buffer, built by placing the rule's options in order."""

    def __init__(self, rng: random.Random, filler: bytes = _FILLER) -> None:
        self.data = bytearray()
        self.cursor = 0  # where the last match ended (what relative options count from)
        self.rng = rng
        self.filler = filler
        self.lengths: list[BufferLen] = []
        self.negated: list[Content] = []

    def _pad_to(self, n: int) -> None:
        while len(self.data) < n:
            self.data.append(self.rng.choice(self.filler))

    def _put(self, at: int, text: bytes) -> None:
        if at < 0:
            raise CannotGenerate("content before the buffer's start")
        self._pad_to(at)
        for i, b in enumerate(text):
            j = at + i
            if j < len(self.data):
                if self.data[j] != b:
                    raise CannotGenerate("contents overlap with different bytes")
            else:
                self.data.append(b)
        self.cursor = at + len(text)

    def content(self, c: Content) -> None:
        if c.negated:
            self.negated.append(c)
            return
        text = c.pattern
        if c.nocase:
            text = bytes(
                b ^ 32 if 97 <= b | 32 <= 122 and self.rng.random() < 0.5 else b for b in text
            )
        if c.relative:
            at = self.cursor + (c.distance or 0)
            if c.within is not None and c.within < len(text) - min(0, c.distance or 0):
                raise CannotGenerate("within shorter than the content")
        else:
            lo = c.offset or 0
            hi = None if c.depth is None else lo + c.depth - len(text)
            at = max(lo, len(self.data)) if hi is None or len(self.data) <= hi else lo
            found = bytes(self.data).find(text, lo)
            if found >= 0 and (hi is None or found <= hi):
                self.cursor = found + len(text)
                return
            if hi is not None and at > hi:
                raise CannotGenerate("depth leaves no room after earlier contents")
        self._put(at, text)

    def pcre(self, p: Pcre) -> None:
        if p.negated:
            return
        source = p.regex.pattern
        anchored_start = source.startswith(b"^" if isinstance(source, bytes) else "^")
        why = "no string found that the pcre matches"
        for _ in range(10):  # another sample when one clashes with bytes already placed
            text = pcre_sample(p, self.rng)
            if p.relative or p.anchored:
                at = self.cursor
            else:
                at = 0 if anchored_start else len(self.data)
            saved = (bytearray(self.data), self.cursor)
            try:
                self._put(at, text)
                return
            except CannotGenerate as exc:
                self.data, self.cursor = saved
                why = str(exc)
        raise CannotGenerate(why)

    def isdataat(self, d: IsDataAt) -> None:
        if d.negated:
            return
        self._pad_to((self.cursor if d.relative else 0) + d.size + 1)

    def finish(self) -> bytes:
        for bl in self.lengths:
            n = len(self.data)
            while not bl.check(n):
                n += 1
                if n > len(self.data) + 4096:
                    raise CannotGenerate("no buffer length satisfies bufferlen")
            self._pad_to(n)
        out = bytes(self.data)
        for c in self.negated:
            hay, needle = (out.lower(), c.pattern.lower()) if c.nocase else (out, c.pattern)
            if needle in hay and not c.relative and c.offset is None and c.depth is None:
                raise CannotGenerate("a negated content is in the generated buffer")
        return out


def build_buffers(rule: CompiledRule, rng: random.Random) -> dict[tuple[str, str | None], bytes]:
    """The bytes each (buffer, header field) of the rule must hold."""
    buffers: dict[tuple[str, str | None], _Buffer] = {}
    last: tuple[str, str | None] | None = None
    for opt in rule.payload:
        key = (_SAME_BYTES.get(opt.buffer, opt.buffer), opt.field)
        if key != last and key in buffers:  # a buffer named again: its cursor is at the start
            buffers[key].cursor = 0
        last = key
        if opt.buffer in ("http_uri", "http_raw_uri"):
            filler = b"abcdefghijklmnopqrstuvwxyz0123456789"
        else:
            filler = _FILLER
        buf = buffers.setdefault(key, _Buffer(rng, filler))
        if isinstance(opt, Content):
            buf.content(opt)
        elif isinstance(opt, Pcre):
            buf.pcre(opt)
        elif isinstance(opt, IsDataAt):
            buf.isdataat(opt)
        elif isinstance(opt, BufferLen):
            if opt.relative:
                raise CannotGenerate("bufferlen relative")
            buf.lengths.append(opt)
        elif isinstance(opt, ByteTest | ByteJump):
            raise CannotGenerate(type(opt).__name__.lower().replace("byte", "byte_"))
    return {k: b.finish() for k, b in buffers.items()}


# --- flows --------------------------------------------------------------------------------------


def ipv4(src: str, dst: str, proto: int, l4: bytes, ident: int = 0) -> bytes:
    """An IPv4 packet around an L4 segment whose checksum field is zero; both checksums set."""
    s, d = ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed
    pseudo = s + d + struct.pack("!BBH", 0, proto, len(l4))
    at = 16 if proto == 6 else 6
    csum = internet_checksum(pseudo + l4) or (0xFFFF if proto == 17 else 0)
    l4 = l4[:at] + struct.pack("!H", csum) + l4[at + 2 :]
    head = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), ident & 0xFFFF, 0x4000, 64, proto, 0, s, d
    )
    head = head[:10] + struct.pack("!H", internet_checksum(head)) + head[12:]
    return head + l4


def ipv6(src: str, dst: str, proto: int, l4: bytes) -> bytes:
    """An IPv6 packet (no extension headers) around an L4 segment whose checksum field is zero;
    its checksum set (RFC 8200's pseudo-header)."""
    s, d = ipaddress.IPv6Address(src).packed, ipaddress.IPv6Address(dst).packed
    pseudo = s + d + struct.pack("!IxxxB", len(l4), proto)
    at = 16 if proto == 6 else 6
    csum = internet_checksum(pseudo + l4) or (0xFFFF if proto == 17 else 0)
    l4 = l4[:at] + struct.pack("!H", csum) + l4[at + 2 :]
    return struct.pack("!IHBB16s16s", 6 << 28, len(l4), proto, 64, s, d) + l4


def ip_packet(src: str, dst: str, proto: int, l4: bytes, ident: int = 0) -> bytes:
    """`ipv6` for IPv6 addresses, else `ipv4`."""
    return ipv6(src, dst, proto, l4) if ":" in src else ipv4(src, dst, proto, l4, ident)


class _Tcp:
    FLAGS = {"F": 1, "S": 2, "R": 4, "P": 8, "A": 16}

    def __init__(self, flow: CorpusFlow) -> None:
        self.flow = flow
        self.seq = {True: 1_000_000, False: 5_000_000}  # to_server -> next sequence number
        self.ident = 1

    def _pkt(self, to_server: bool, flags: str, data: bytes = b"") -> None:
        f = self.flow
        src, dst, sp, dp = f.ends(to_server)
        bits = sum(self.FLAGS[x] for x in flags)
        ack = self.seq[not to_server] if "A" in flags else 0
        tcp = struct.pack("!HHIIBBHHH", sp, dp, self.seq[to_server], ack, 5 << 4, bits, 64240, 0, 0)
        f.packets.append(ip_packet(src, dst, 6, tcp + data, self.ident))
        self.ident += 1
        self.seq[to_server] = (
            self.seq[to_server] + len(data) + ("S" in flags) + ("F" in flags)
        ) & 0xFFFFFFFF

    def open(self) -> None:
        self._pkt(True, "S")
        self._pkt(False, "SA")
        self._pkt(True, "A")

    def send(self, to_server: bool, data: bytes) -> None:
        for i in range(0, len(data), MSS):
            self._pkt(to_server, "PA", data[i : i + MSS])
        self._pkt(not to_server, "A")

    def close(self) -> None:
        self._pkt(True, "FA")
        self._pkt(False, "FA")
        self._pkt(True, "A")


def _udp(flow: CorpusFlow, to_server: bool, data: bytes) -> None:
    src, dst, sp, dp = flow.ends(to_server)
    udp = struct.pack("!HHHH", sp, dp, 8 + len(data), 0) + data
    flow.packets.append(ip_packet(src, dst, 17, udp))


def _percent(text: bytes, safe: frozenset[int] = _URI_SAFE) -> bytes:
    return b"".join(bytes([b]) if b in safe else b"%%%02X" % b for b in text)


_HEADER_NAME = re.compile(TOKEN + rb"+:")


def _header_lines(blob: bytes) -> bytes:
    """Header lines around `blob` (what a rule wants in http_header): each line that is not
    `Name: value` gets a name; a line keeps the end it has in `blob` (a bare LF stays bare),
    CRLF otherwise."""
    out = []
    pieces = re.split(rb"(\r?\n)", blob)
    for line, end in zip(pieces[0::2], [*pieces[1::2], b"\r\n"], strict=True):
        if not line:
            continue
        named = _HEADER_NAME.match(line) is not None
        out.append((line if named else b"X-Corpus: " + line) + end)
    return b"".join(out)


@dataclass(slots=True)
class HttpParts:
    method: bytes = b"GET"
    uri: bytes = b"/"
    version: bytes = b"HTTP/1.1"
    headers: bytes = b""  # header lines, each with CRLF
    body: bytes = b""
    status: bytes = b"200"
    reason: bytes = b"OK"
    response_headers: bytes = b""
    response_body: bytes = b"ok"


def http_parts(rule: CompiledRule, bufs: dict[tuple[str, str | None], bytes]) -> HttpParts:
    parts = HttpParts()
    to_client = rule.flow.to_server is False
    headers: list[bytes] = []
    rheaders: list[bytes] = []
    for (buf, fld), data in bufs.items():
        if buf == "http_method":
            if not re.fullmatch(rb"[A-Za-z_-]+", data):
                raise CannotGenerate("http_method is not a token")
            parts.method = data
        elif buf == "http_uri":
            parts.uri = _percent(data if data.startswith(b"/") else b"/" + data)
        elif buf == "http_header":
            lines = (
                fld.encode() + b": " + data.replace(b"\r", b"").replace(b"\n", b"") + b"\r\n"
                if fld
                else _header_lines(data)
            )
            (rheaders if to_client else headers).append(lines)
        elif buf == "http_cookie":
            (rheaders if to_client else headers).append(
                (b"Set-Cookie: " if to_client else b"Cookie: ") + data + b"\r\n"
            )
        elif buf == "http_client_body":  # decoded by Snort (twice): a "%" is sent as %25
            parts.body = data.replace(b"%", b"%25")
        elif buf == "http_raw_body":
            parts.body = data
        elif buf == "file_data":
            if to_client:
                parts.response_body = data
            else:
                parts.body = data
        elif buf == "http_stat_code":
            if not re.fullmatch(rb"[0-9]{3}", data):
                raise CannotGenerate("http_stat_code is not three digits")
            parts.status = data
        elif buf == "http_stat_msg":
            parts.reason = data
        elif buf == "http_version":
            parts.version = data
        else:
            raise CannotGenerate(f"buffer {buf}")
    if parts.body and parts.method == b"GET" and ("http_method", None) not in bufs:
        parts.method = b"POST"
    # a header line after the rule's: Snort's http_header ends without the last line's CRLF,
    # which many rules want after their header
    avoid = [
        c.pattern.lower()
        for c in rule.payload
        if isinstance(c, Content) and c.negated and c.buffer in ("http_header", "http_raw_header")
    ]
    last = next(
        (t for t in _LAST_HEADERS if not any(a in t.lower() for a in avoid)), _LAST_HEADERS[-1]
    )
    parts.headers = b"".join(headers) + (last if headers else b"")
    parts.response_headers = b"".join(rheaders) + (last if rheaders else b"")
    return parts


def http_request(p: HttpParts, host: str) -> bytes:
    head = b"%s %s %s\r\nHost: %s\r\n" % (p.method, p.uri, p.version, host.encode())
    if p.body or p.method == b"POST":
        head += b"Content-Length: %d\r\n" % len(p.body)
    return head + p.headers + b"\r\n" + p.body  # the rule's lines last (some end the head)


def http_response(p: HttpParts) -> bytes:
    head = b"HTTP/1.1 %s %s\r\nContent-Type: text/html\r\n" % (p.status, p.reason)
    head += b"Content-Length: %d\r\n" % len(p.response_body)
    return head + p.response_headers + b"\r\n" + p.response_body


def _pick(s: IntervalSet, preferred: int, lowest: int = 1) -> int:
    if preferred in s:
        return preferred
    for lo, hi in zip(s.starts, s.ends, strict=True):
        if hi >= lowest:
            return max(lo, lowest)
    raise CannotGenerate("no port or address in the rule's header")


def _is_http(rule: CompiledRule) -> bool:
    return rule.proto == "http" or "http" in rule.services or bool(rule.buffers & HTTP_BUFFERS)


def _address(s: AddressSet, family: int, default: str) -> str:
    """An address of `s` of the family (`default` if `s` has them all)."""
    part = s.v4 if family == 4 else s.v6
    if part.everything:
        return default
    if not part.starts:
        raise CannotGenerate(f"no IPv{family} address in the rule's header")
    value = _pick(part, 0)
    return str(ipaddress.IPv4Address(value) if family == 4 else ipaddress.IPv6Address(value))


def client_address(index: int, family: int, benign: bool = False) -> str:
    """The client of the corpus's flow number `index`: one address a flow."""
    if family == 6:
        return f"2001:db8:{0xC8 if benign else 1:x}:{index // 65535:x}::{1 + index % 65535:x}"
    if benign:
        return f"10.200.{index // 250 % 240}.{1 + index % 250}"
    return f"10.{1 + index // 60000}.{index // 250 % 240}.{1 + index % 250}"


def rule_flow(rule: CompiledRule, index: int, rng: random.Random, family: int = 4) -> CorpusFlow:
    """The flow that should fire `rule` (CannotGenerate says why there is none); `family`: 4 or
    6, the flow's IP version."""
    if rule.packet_checks:
        raise CannotGenerate("packet field options (flags, dsize, ttl, ...)")
    if rule.detection_filter is not None:
        raise CannotGenerate("detection_filter")
    if any(fb.op in ("isset", "noalert") for fb in rule.flowbits):
        raise CannotGenerate("flowbits isset or noalert")
    if not rule.payload:
        raise CannotGenerate("no payload options")
    proto = {"tcp": 6, "udp": 17, "http": 6}.get(rule.proto)
    if proto is None:
        raise CannotGenerate(f"protocol {rule.proto}")
    http = _is_http(rule)
    bufs = build_buffers(rule, rng)
    to_server = rule.flow.to_server is not False
    header = rule.header
    server_ip, server_port = SERVERS[family][0], 80 if http else 9000
    client_ip, client_port = client_address(index, family), 20000 + index % 40000
    if isinstance(header, Header) and not header.is_any:
        srv_ports = header.dports if to_server else header.sports
        server_port = _pick(srv_ports, server_port)
        cli_ports = header.sports if to_server else header.dports
        client_port = _pick(cli_ports, client_port, 1024)
        srv_addr = header.dst if to_server else header.src
        cli_addr = header.src if to_server else header.dst
        server_ip = _address(srv_addr, family, server_ip)
        client_ip = _address(cli_addr, family, client_ip)
    flow = CorpusFlow(rule.info.sid, proto, client_ip, server_ip, client_port, server_port)
    if proto == 17:
        data = bufs.get((PKT_DATA, None), b"")
        if set(bufs) - {(PKT_DATA, None)}:
            raise CannotGenerate("HTTP buffers on UDP")
        if to_server:
            _udp(flow, True, data)
        else:
            _udp(flow, True, b"hello")
            _udp(flow, False, data)
        return flow
    others = rule.services - {"http"}
    if (
        others
        and "http" not in rule.services
        and (http or is_http_start(bufs.get((PKT_DATA, None), b"")))
    ):
        raise CannotGenerate(f"service {sorted(others)[0]} rule on traffic that is HTTP")
    tcp = _Tcp(flow)
    tcp.open()
    if http and set(bufs) - {(PKT_DATA, None)}:
        raw = bufs.pop((PKT_DATA, None), b"")
        parts = http_parts(rule, bufs)
        if to_server:  # Snort 3's pkt_data in an HTTP flow: the message body
            parts.body += raw
        else:
            parts.response_body += raw
        tcp.send(True, http_request(parts, "www.example.com"))
        tcp.send(False, http_response(parts))
    else:
        data = bufs.get((PKT_DATA, None), b"")
        if to_server:
            tcp.send(True, data)
            tcp.send(False, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" if http else b"ok\n")
        else:
            tcp.send(True, b"GET / HTTP/1.1\r\nHost: www.example.com\r\n\r\n" if http else b"hi\n")
            tcp.send(False, data)
    tcp.close()
    return flow


_BENIGN_PAGES = (
    b"/",
    b"/index.html",
    b"/images/logo.png",
    b"/news/2023/11/report.html?page=2&lang=en",
    b"/api/v1/items?limit=20",
    b"/static/app.js",
    b"/search?q=network+gateway",
    b"/docs/manual.pdf",
)


def benign_flows(start: int, count: int, rng: random.Random, family: int = 4) -> list[CorpusFlow]:
    """Ordinary web traffic: GETs and form POSTs with plain answers."""
    flows = []
    for i in range(count):
        index = start + i
        client = client_address(index, family, benign=True)
        flow = CorpusFlow(0, 6, client, SERVERS[family][1], 30000 + index % 30000, 80)
        tcp = _Tcp(flow)
        tcp.open()
        page = rng.choice(_BENIGN_PAGES)
        if i % 4 == 3:
            body = b"name=alice&comment=hello+world"
            req = b"POST /comments HTTP/1.1\r\nHost: www.example.org\r\n"
            req += b"Content-Type: application/x-www-form-urlencoded\r\n"
            req += b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        else:
            req = b"GET %s HTTP/1.1\r\nHost: www.example.org\r\n" % page
            req += b"User-Agent: Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0\r\n"
            req += b"Accept: */*\r\n\r\n"
        tcp.send(True, req)
        body = b"<html><body><p>Hello from a plain server, page %d.</p></body></html>" % index
        tcp.send(
            False,
            b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s"
            % (len(body), body),
        )
        tcp.close()
        flows.append(flow)
    return flows


def generate(
    ruleset: RuleSet, seed: int = 0, benign: int = 50, copies: int = 1, family: int = 4
) -> Corpus:
    """One flow per rule of `ruleset` that can be generated, then `benign` benign flows; all of
    it `copies` times (each copy on other addresses, with other choices), for a longer capture.
    `skipped` counts the rules of one copy. `family` 6: every flow over IPv6."""
    if family not in SERVERS:
        raise ValueError(f"address family {family} is not 4 or 6")
    rng = random.Random(seed)
    corpus = Corpus()
    rules = [r for r in ruleset.rules if r.info.action != "pass"]
    for copy in range(copies):
        for rule in rules:
            try:
                corpus.flows.append(rule_flow(rule, len(corpus.flows), rng, family))
            except CannotGenerate as why:
                if copy == 0:
                    corpus.skipped[str(why)] += 1
        corpus.flows += benign_flows(len(corpus.flows), benign, rng, family)
    return corpus


# --- the two engines on one corpus --------------------------------------------------------------


@dataclass(slots=True)
class EngineRun:
    engine: str
    alerts: set[tuple[str, int]]  # (Community ID, sid)
    seconds: float  # inspection time (rules loaded before the clock starts)


@dataclass(slots=True)
class Comparison:
    """Alerts of the two engines over one corpus, by (flow, sid)."""

    builtin: EngineRun
    snort: EngineRun
    expected: set[tuple[str, int]]  # each rule flow with its own sid

    @property
    def both(self) -> set[tuple[str, int]]:
        return self.builtin.alerts & self.snort.alerts

    @property
    def builtin_only(self) -> set[tuple[str, int]]:
        return self.builtin.alerts - self.snort.alerts

    @property
    def snort_only(self) -> set[tuple[str, int]]:
        return self.snort.alerts - self.builtin.alerts

    @property
    def neither(self) -> set[tuple[str, int]]:
        """Rule flows that fired their rule in no engine (the generator's misses)."""
        return self.expected - self.builtin.alerts - self.snort.alerts

    @property
    def agreement(self) -> float:
        """Of the (flow, sid) alerts either engine raised, the share both raised."""
        either = self.builtin.alerts | self.snort.alerts
        return len(self.both) / len(either) if either else 1.0

    def summary(self) -> str:
        rules_both = {sid for _, sid in self.both}
        return (
            f"{len(self.expected)} rule flows: both engines raised {len(self.both)} (flow, sid) "
            f"alerts ({len(rules_both)} rules), the built-in alone {len(self.builtin_only)}, "
            f"Snort alone {len(self.snort_only)}; {len(self.neither)} rule flows fired in "
            f"neither; agreement {100 * self.agreement:.1f} %"
        )


def flow_ids(corpus: Corpus) -> dict[str, CorpusFlow]:
    """Community ID -> flow."""
    return {
        community_id_str(f.proto, f.client, f.server, f.cport, f.sport): f for f in corpus.flows
    }


def run_engine(
    pcap: str | Path, rules: Sequence[str | Path], engine: str, snort: str = ""
) -> EngineRun:
    """Replay `pcap` with `rules` on one engine (`spm.replay`); its (flow, sid) alerts."""
    out = io.StringIO()
    eve = EveLog("corpus", "corpus", stream=out)
    stats = replay(pcap, replay_config(None, rules, {}), eve, engine, snort)
    if stats.incomplete:
        raise RuntimeError(f"{engine} replay incomplete: {stats.incomplete}")
    alerts = set()
    for line in out.getvalue().splitlines():
        record = json.loads(line)
        if record.get("event_type") == "alert":
            alerts.add((str(record["community_id"]), int(record["alert"]["signature_id"])))
    return EngineRun(engine, alerts, stats.seconds or 0.0)


def compare(
    corpus: Corpus, pcap: str | Path, rules: Sequence[str | Path], snort: str
) -> Comparison:
    """Both engines over the corpus written at `pcap`."""
    ids = {cid: f for cid, f in flow_ids(corpus).items()}
    expected = {(cid, f.sid) for cid, f in ids.items() if f.sid}
    return Comparison(
        run_engine(pcap, rules, "builtin"), run_engine(pcap, rules, "snort", snort), expected
    )


def enable_all(src: str | Path, dst: str | Path, snort: str) -> list[str]:
    """Write `src` to `dst` with its commented-out rules enabled, less those Snort 3 refuses to
    load (unknown options such as asn1, undefined variables); returns Snort's errors for those."""
    lines = [_UNCOMMENT.sub(r"\1 ", line) for line in Path(src).read_text().splitlines()]
    refused: list[str] = []
    for _ in range(5):  # Snort stops at a handful of errors per kind; a few rounds suffice
        Path(dst).write_text("\n".join(lines) + "\n")
        with tempfile.TemporaryDirectory(prefix="opengate-rules-") as tmp:
            lua = Path(tmp) / "snort.lua"
            lua.write_text(snort_lua(replay_config(None, [dst], {}), Path(tmp)))
            run = subprocess.run(
                [snort, "-c", str(lua), "-T", "-q", *prefix_args(snort)],
                env=snort_env(snort),
                capture_output=True,
                text=True,
                check=False,
            )
        errors = re.findall(r"ERROR: .*?:(\d+) (.*)", run.stdout + run.stderr)
        if run.returncode == 0 or not errors:
            break
        for number, why in errors:
            refused.append(f"line {number}: {why}")
            lines[int(number) - 1] = ""
    return refused


_UNCOMMENT = re.compile(r"^#\s*(alert|drop|block|reject|pass|log|sdrop|rewrite) ")
