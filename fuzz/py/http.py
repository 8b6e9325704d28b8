"""The SPM's HTTP/1 parser (spm/http.py): whatever the bytes of a connection's two directions,
parsing raises nothing (what does not parse turns the parser "broken": one ERROR event), and a
stream parsed as it arrives in pieces gives the same messages, bodies and errors as the whole
stream parsed at once. The URI normalisation takes any URI."""

from __future__ import annotations

from collections import deque

from fuzz.py.reader import Reader
from spm.http import Ev, HttpEvent, HttpParser, is_http_start, normalize_uri, percent_decode

ERRORS: tuple[type[BaseException], ...] = ()
MAX_HEADER_BYTES = 4096


def _summary(events: list[HttpEvent]) -> list[tuple[object, ...]]:
    """The events with each message's body joined (a body arrives in as many pieces as the
    stream does)."""
    out: list[tuple[object, ...]] = []
    body: bytes | None = None  # the body pieces since the last other event
    for ev in events:
        if ev.kind is Ev.BODY:
            body = (body or b"") + ev.data
            continue
        if body is not None:
            out.append((Ev.BODY, body))
            body = None
        if ev.message is not None:
            m = ev.message
            out.append((ev.kind, m.method, m.uri, m.status_code, m.header_block, tuple(m.headers)))
        else:
            out.append((ev.kind,))
    if body is not None:
        out.append((Ev.BODY, body))
    return out


def _parse(stream: bytes, cuts: list[int], request: bool, methods: deque[bytes]) -> list[HttpEvent]:
    parser = HttpParser(request, methods, max_header_bytes=MAX_HEADER_BYTES)
    events: list[HttpEvent] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        events += parser.feed(stream[start:cut])
        start = cut
    events += parser.close()
    return events


def one_input(data: bytes) -> None:
    r = Reader(data)
    ncuts, split = r.u8() % 16, r.u16()
    cuts = sorted({r.u16() for _ in range(ncuts)})
    body = r.rest()
    request, response = body[: split % (len(body) + 1)], body[split % (len(body) + 1) :]
    is_http_start(request)
    normalize_uri(request[:512])
    percent_decode(request[:512])
    for side, stream in ((True, request), (False, response)):
        methods = deque([b"GET", b"HEAD", b"GET"]) if not side else deque()
        valid_cuts = [c for c in cuts if c < len(stream)]
        whole = _parse(stream, [], side, deque(methods))
        pieces = _parse(stream, valid_cuts, side, deque(methods))
        assert _summary(whole) == _summary(pieces), "the pieces parse differently"
