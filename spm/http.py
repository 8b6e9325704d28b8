"""HTTP/1.x message parsing on a reassembled stream, one parser per direction.

Produces the pieces the IPS and the AV need: the request line, URI (raw and normalized), headers,
cookie, status, and the message body decoded from chunked transfer encoding, handed on as it
arrives (never buffered whole here). Pipelined requests are matched with their responses so that
responses to HEAD, 1xx, 204 and 304 are known to carry no body.

Bounded: the header section may be at most `max_header_bytes`; a chunk-size line at most 1 KiB.
Anything that does not parse turns the parser "broken": it emits one ERROR event and then ignores
the rest of the stream (the IPS still sees it as raw stream data).

Not supported: HTTP/2 and HTTP/3; Content-Encoding (gzip bodies are handed on compressed: ClamAV
unpacks gzip itself, the IPS sees compressed file_data); multipart bodies are not split. The URI
normalization follows Snort 3's http_inspect defaults as far as the differential test
(tests/spm/test_snort_differential.py) has pinned them: double percent-decoding, '+' to space,
backslash to slash, path clean-up (/./, /../, //); not %u, UTF-8 overlong or IIS Unicode
decoding.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from enum import Enum

MAX_CHUNK_LINE = 1024
# the request methods Snort 3's default wizard knows (and, like it, any token followed by a
# target and an HTTP version: `is_http_start`)
_METHODS = frozenset(
    b"GET HEAD POST DELETE TRACE CONNECT VERSION_CONTROL REPORT CHECKOUT CHECKIN UNCHECKOUT "
    b"MKWORKSPACE LABEL MERGE BASELINE_CONTROL MKACTIVITY ORDERPATCH ACL PATCH BIND LINK "
    b"MKCALENDAR MKREDIRECTREF REBIND UNBIND UNLINK UPDATEREDIRECTREF PROPFIND PROPPATCH MKCOL "
    b"COPY MOVE LOCK UNLOCK SEARCH BCOPY BDELETE BMOVE BPROPFIND BPROPPATCH POLL UNSUBSCRIBE "
    b"X_MS_ENUMATTS NOTIFY OPTIONS SUBSCRIBE UPDATE PUT".split()
)
# the wizard matches these at the start of a stream, in any case, even as a prefix of a longer
# word ("GETPROPERTIES"); the others (OPTIONS, PUT, ...) only in a whole `M * HTTP/` start line
_WIZARD_METHODS = tuple(_METHODS - {b"NOTIFY", b"OPTIONS", b"SUBSCRIBE", b"UPDATE", b"PUT"})
_LONGEST_METHOD = max(map(len, _METHODS))
TOKEN = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]"  # a character of an RFC 9110 token (methods, names)
_METHOD = TOKEN + rb"{1,80}"  # Snort's http_inspect takes a method of 80 characters at most
_TOKEN_START = re.compile(_METHOD + rb"([ \t]|$)")
_ANY_REQUEST_START = re.compile(_METHOD + rb" \S+ HTTP/")
_REQUEST_LINE = re.compile(rb"(" + _METHOD + rb")[ \t]+(\S{1,65536})[ \t]+(HTTP/\d\.\d)\r?$")
_STATUS_LINE = re.compile(rb"(HTTP/\d\.\d) +(\d{3})(?: +(.*))?\r?$")
_PCT = re.compile(rb"%([0-9A-Fa-f]{2})")
_ABSOLUTE = re.compile(rb"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*")
# The empty line that ends a header section: its first, whether the lines end in CRLF or in a
# bare LF (RFC 9112 section 2.2), and the same wherever the stream is cut.
_HEAD_END = re.compile(rb"\n\r?\n")


def is_http_start(data: bytes) -> bool:
    """Whether a stream starts as HTTP/1 does (Snort's wizard: a known method, or any token
    with a target and a version; a response's `HTTP/`)."""
    if data.startswith(b"HTTP/"):
        return True
    return data[:_LONGEST_METHOD].upper().startswith(_WIZARD_METHODS) or bool(
        _ANY_REQUEST_START.match(data)
    )


class Ev(Enum):
    HEADERS = "headers"  # a message's header section is complete
    BODY = "body"  # decoded body bytes of the current message
    END = "end"  # the current message is complete
    ERROR = "error"  # the stream is not (or no longer) parseable HTTP


@dataclass(slots=True)
class HttpMessage:
    request: bool
    method: bytes = b""
    uri: bytes = b""  # raw, as sent
    version: bytes = b""
    status_code: bytes = b""
    status_msg: bytes = b""
    header_block: bytes = b""  # the start line and the header lines, raw (CRLFs kept)
    # the header lines as sent, each with its own line end but the last (Snort's
    # http_raw_header); and normalized (http_header): without the cookie lines, percent-decoded
    raw_header: bytes = b""
    norm_header: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)  # (lower-case name, value)
    content_length: int | None = None
    chunked: bool = False
    body_size: int = 0  # decoded body bytes seen so far

    def header(self, name: bytes) -> bytes | None:
        """The first value of a header (name in lower case)."""
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def header_values(self, name: bytes) -> list[bytes]:
        return [v for k, v in self.headers if k == name]

    @property
    def cookie(self) -> bytes:
        name = b"cookie" if self.request else b"set-cookie"
        return b", ".join(self.header_values(name))

    @property
    def norm_uri(self) -> bytes:
        return normalize_uri(self.uri)


@dataclass(slots=True)
class HttpEvent:
    kind: Ev
    message: HttpMessage | None
    data: bytes = b""
    reason: str = ""


class _St(Enum):
    HEAD = 0
    LENGTH = 1
    CHUNK_SIZE = 2
    CHUNK_DATA = 3
    CHUNK_CRLF = 4
    TRAILER = 5
    UNTIL_CLOSE = 6
    BROKEN = 7
    TUNNEL = 8


@dataclass(slots=True)
class HttpCounters:
    requests: int = 0
    responses: int = 0
    errors: int = 0


class HttpParser:
    """Parser for one direction. `methods` is shared by the two parsers of a connection: the
    request side appends each request's method, the response side takes them in order."""

    __slots__ = (
        "_buf",
        "_left",
        "_state",
        "counters",
        "max_header_bytes",
        "message",
        "methods",
        "request_side",
    )

    def __init__(
        self, request_side: bool, methods: deque[bytes], max_header_bytes: int = 65536
    ) -> None:
        self.request_side = request_side
        self.methods = methods
        self.max_header_bytes = max_header_bytes
        self.message: HttpMessage | None = None
        self.counters = HttpCounters()
        self._buf = bytearray()
        self._state = _St.HEAD
        self._left = 0

    @property
    def broken(self) -> bool:
        return self._state in (_St.BROKEN, _St.TUNNEL)

    def feed(self, data: bytes) -> list[HttpEvent]:
        events: list[HttpEvent] = []
        pos = 0
        n = len(data)
        while pos < n:
            st = self._state
            if st is _St.HEAD:
                pos = self._feed_head(data, pos, events)
            elif st is _St.LENGTH:
                take = min(self._left, n - pos)
                self._body(data[pos : pos + take], events)
                pos += take
                self._left -= take
                if self._left == 0:
                    self._end(events)
            elif st is _St.UNTIL_CLOSE:
                self._body(data[pos:], events)
                pos = n
            elif st is _St.CHUNK_DATA:
                take = min(self._left, n - pos)
                self._body(data[pos : pos + take], events)
                pos += take
                self._left -= take
                if self._left == 0:
                    self._state = _St.CHUNK_CRLF
            elif st in (_St.CHUNK_SIZE, _St.CHUNK_CRLF, _St.TRAILER):
                pos = self._feed_chunk_line(data, pos, events)
            else:  # BROKEN, TUNNEL
                break
        return events

    def close(self) -> list[HttpEvent]:
        """The connection closed: a body delimited by the close ends here."""
        events: list[HttpEvent] = []
        if self._state is _St.UNTIL_CLOSE:
            self._end(events)
        elif self._state not in (_St.HEAD, _St.BROKEN, _St.TUNNEL) or self._buf:
            self._break(events, "truncated message")
        return events

    # --- pieces ---------------------------------------------------------------------------------

    def _break(self, events: list[HttpEvent], reason: str) -> None:
        self._state = _St.BROKEN
        self._buf.clear()
        self.counters.errors += 1
        events.append(HttpEvent(Ev.ERROR, self.message, reason=reason))

    def _body(self, chunk: bytes, events: list[HttpEvent]) -> None:
        if chunk and self.message is not None:
            self.message.body_size += len(chunk)
            events.append(HttpEvent(Ev.BODY, self.message, chunk))

    def _end(self, events: list[HttpEvent]) -> None:
        events.append(HttpEvent(Ev.END, self.message))
        self._state = _St.HEAD

    def _feed_head(self, data: bytes, pos: int, events: list[HttpEvent]) -> int:
        buf = self._buf
        start = max(0, len(buf) - 3)
        buf += data[pos:]
        # Empty lines before a message are ignored (RFC 9112 section 2.2) wherever the stream is
        # cut: "\n\n" in one segment is no empty header section but skipped as "\n" + "\n" is.
        lead = len(buf) - len(buf.lstrip(b"\r\n"))
        if lead:
            del buf[:lead]
            start = 0
        found = _HEAD_END.search(buf, start)
        if found is None:
            if not buf.lstrip(b"\r\n"):
                buf.clear()
            elif len(buf) > self.max_header_bytes:
                self._break(events, "header section too long")
            elif not self._plausible_start(bytes(buf[:96])):
                self._break(events, "not HTTP")
            return len(data)
        head = bytes(buf[: found.end()])
        rest_in_buf = len(buf) - found.end()
        consumed_from_data = len(data) - pos - rest_in_buf
        buf.clear()
        if len(head) > self.max_header_bytes:
            self._break(events, "header section too long")
            return len(data)
        pos += consumed_from_data
        self._headers(head.lstrip(b"\r\n"), events)
        return pos

    def _plausible_start(self, first: bytes) -> bool:
        first = first.lstrip(b"\r\n")
        if self.request_side:
            return _TOKEN_START.match(first) is not None  # a method, maybe cut short
        return b"HTTP/"[: len(first)] == first[:5]

    def _headers(self, head: bytes, events: list[HttpEvent]) -> None:
        lines = head.split(b"\n")
        start = lines[0].rstrip(b"\r")
        msg = HttpMessage(request=self.request_side, header_block=head)
        if self.request_side:
            m = _REQUEST_LINE.match(start)
            if not m:
                self._break(events, "bad request line")
                return
            msg.method, msg.uri, msg.version = m.group(1), m.group(2), m.group(3)
        else:
            m = _STATUS_LINE.match(start)
            if not m:
                self._break(events, "bad status line")
                return
            msg.version, msg.status_code = m.group(1), m.group(2)
            msg.status_msg = m.group(3) or b""
        kept: list[bytes] = []  # header lines with their ends, as sent
        norm: list[bytes] = []  # the same without the cookie lines
        cookie = b"cookie" if self.request_side else b"set-cookie"
        for raw in lines[1:]:
            line = raw.rstrip(b"\r")
            if not line:
                continue
            kept.append(raw + b"\n")
            if line.split(b":", 1)[0].strip().lower() != cookie:
                norm.append(raw + b"\n")
            if line[:1] in (b" ", b"\t") and msg.headers:  # obsolete line folding
                name, value = msg.headers[-1]
                msg.headers[-1] = (name, value + b" " + line.strip())
                continue
            name, colon, value = line.partition(b":")
            if not colon:
                continue  # tolerated, as most servers do
            msg.headers.append((name.strip().lower(), value.strip()))
        msg.raw_header = _without_last_end(b"".join(kept))
        msg.norm_header = percent_decode(_without_last_end(b"".join(norm)))
        self.message = msg
        te = msg.header(b"transfer-encoding")
        msg.chunked = te is not None and b"chunked" in te.lower()
        cl = msg.header(b"content-length")
        if cl is not None and not msg.chunked:
            if not cl.isdigit() or len(cl) > 15:
                events.append(HttpEvent(Ev.HEADERS, msg))
                self._break(events, "bad Content-Length")
                return
            msg.content_length = int(cl)
        events.append(HttpEvent(Ev.HEADERS, msg))
        if self.request_side:
            self.counters.requests += 1
            self.methods.append(msg.method.upper())
            if msg.chunked:
                self._state = _St.CHUNK_SIZE
            elif msg.content_length:
                self._state, self._left = _St.LENGTH, msg.content_length
            else:
                self._end(events)
            return
        self.counters.responses += 1
        code = int(msg.status_code)
        if 100 <= code < 200 and code != 101:
            self._end(events)  # interim response; the request still waits for its final one
            return
        method = self.methods.popleft() if self.methods else b""
        if code == 101 or (method == b"CONNECT" and 200 <= code < 300):
            events.append(HttpEvent(Ev.END, msg))
            self._state = _St.TUNNEL
        elif method == b"HEAD" or code in (204, 304):
            self._end(events)
        elif msg.chunked:
            self._state = _St.CHUNK_SIZE
        elif msg.content_length is not None:
            if msg.content_length:
                self._state, self._left = _St.LENGTH, msg.content_length
            else:
                self._end(events)
        else:
            self._state = _St.UNTIL_CLOSE

    def _feed_chunk_line(self, data: bytes, pos: int, events: list[HttpEvent]) -> int:
        nl = data.find(b"\n", pos)
        if nl < 0:
            self._buf += data[pos:]
            if len(self._buf) > MAX_CHUNK_LINE:
                self._break(events, "chunk line too long")
            return len(data)
        self._buf += data[pos:nl]
        line = bytes(self._buf).rstrip(b"\r")
        self._buf.clear()
        pos = nl + 1
        if len(line) > MAX_CHUNK_LINE:
            self._break(events, "chunk line too long")
            return len(data)
        st = self._state
        if st is _St.CHUNK_CRLF:
            if line:
                self._break(events, "no CRLF after chunk data")
                return len(data)
            self._state = _St.CHUNK_SIZE
        elif st is _St.CHUNK_SIZE:
            size_txt = line.split(b";", 1)[0].strip()
            try:
                size = int(size_txt, 16)
            except ValueError:
                self._break(events, "bad chunk size")
                return len(data)
            if size < 0 or len(size_txt) > 15:
                self._break(events, "bad chunk size")
                return len(data)
            if size == 0:
                self._state = _St.TRAILER
            else:
                self._state, self._left = _St.CHUNK_DATA, size
        elif not line:  # TRAILER: an empty line ends the message
            self._end(events)
        return pos


def _decoded(m: re.Match[bytes]) -> bytes:
    return bytes([int(m.group(1), 16)])


def _without_last_end(lines: bytes) -> bytes:
    if lines.endswith(b"\r\n"):
        return lines[:-2]
    return lines[:-1] if lines.endswith(b"\n") else lines


def percent_decode(data: bytes) -> bytes:
    """Percent-decoding as Snort 3's http_inspect does by default (`iis_double_decode`): what
    the first pass makes into a percent-encoding is decoded again (%2541 is A)."""
    if b"%" not in data:
        return data
    once = _PCT.sub(_decoded, data.replace(b"%%", b"%"))  # Snort reads "%%" as one "%"
    return _PCT.sub(_decoded, once) if b"%" in once else once


def normalize_uri(uri: bytes) -> bytes:
    """Snort 3's http_uri with http_inspect's defaults: an absolute URI loses its scheme and
    authority; then percent-decoding, '+' to space and backslash to slash everywhere, and the
    path cleaned up (/./, /../, //); the query is not cleaned up."""
    absolute = _ABSOLUTE.match(uri)
    if absolute:
        uri = uri[absolute.end() :] or b"/"
    path, q, query = uri.partition(b"?")
    path = percent_decode(path).replace(b"+", b" ").replace(b"\\", b"/")
    if path.startswith(b"/"):
        parts: list[bytes] = []
        for seg in path.split(b"/")[1:]:
            if seg in (b"", b"."):
                continue
            if seg == b"..":
                if parts:
                    parts.pop()
                continue
            parts.append(seg)
        trailing = path.endswith((b"/", b"/.", b"/.."))
        path = b"/" + b"/".join(parts) + (b"/" if trailing and parts else b"")
    if q:
        query = percent_decode(query).replace(b"+", b" ").replace(b"\\", b"/")
        return path + b"?" + query
    return path
