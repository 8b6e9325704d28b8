"""HTTP/1.x parsing on reassembled streams: messages, chunked bodies, pipelining, bad input."""

from __future__ import annotations

import itertools
from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from spm.http import Ev, HttpEvent, HttpParser, normalize_uri

REQ = (
    b"POST /up%6Coad/./a/../b.php?x=%41 HTTP/1.1\r\nHost: example\r\n"
    b"Cookie: a=1\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: x\r\n\r\n"
    b"GET /second HTTP/1.1\r\nHost: example\r\n\r\n"
)


def _run(parser: HttpParser, pieces: list[bytes]) -> list[HttpEvent]:
    events: list[HttpEvent] = []
    for piece in pieces:
        events += parser.feed(piece)
    return events


def _summary(events: list[HttpEvent]) -> tuple[list[tuple[str, bytes]], bytes]:
    kinds = [
        (e.kind.value, e.message.uri if e.message else b"") for e in events if e.kind != Ev.BODY
    ]
    body = b"".join(e.data for e in events if e.kind is Ev.BODY)
    return kinds, body


def test_chunked_request_body_is_decoded_and_pipelined_request_follows() -> None:
    events = _run(HttpParser(True, deque()), [REQ])
    kinds, body = _summary(events)
    assert body == b"hello world"
    assert kinds == [
        ("headers", b"/up%6Coad/./a/../b.php?x=%41"),
        ("end", b"/up%6Coad/./a/../b.php?x=%41"),
        ("headers", b"/second"),
        ("end", b"/second"),
    ]
    first = events[0].message
    assert first is not None
    assert first.method == b"POST" and first.cookie == b"a=1"
    assert first.norm_uri == b"/upload/b.php?x=A"
    assert first.raw_header.startswith(b"Host: example\r\n")


@settings(max_examples=100, deadline=None)
@given(cuts=st.lists(st.integers(0, len(REQ)), max_size=30))
def test_events_do_not_depend_on_how_the_stream_is_cut(cuts: list[int]) -> None:
    bounds = sorted({0, len(REQ), *cuts})
    pieces = [REQ[a:b] for a, b in itertools.pairwise(bounds)]
    assert _summary(_run(HttpParser(True, deque()), pieces)) == _summary(
        _run(HttpParser(True, deque()), [REQ])
    )


def test_response_to_head_has_no_body_even_with_content_length() -> None:
    methods: deque[bytes] = deque()
    req = HttpParser(True, methods)
    resp = HttpParser(False, methods)
    req.feed(b"HEAD / HTTP/1.1\r\n\r\nGET /x HTTP/1.1\r\n\r\n")
    events = resp.feed(
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody"
    )
    kinds, body = _summary(events)
    assert [k for k, _ in kinds] == ["headers", "end", "headers", "end"]
    assert body == b"body"


def test_response_without_length_ends_at_close() -> None:
    resp = HttpParser(False, deque([b"GET"]))
    events = resp.feed(b"HTTP/1.0 200 OK\r\n\r\nall of it")
    events += resp.close()
    kinds, body = _summary(events)
    assert body == b"all of it"
    assert kinds[-1][0] == "end"


def test_interim_100_continue_then_final_response() -> None:
    resp = HttpParser(False, deque([b"POST"]))
    events = resp.feed(
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nno"
    )
    msgs = [e.message for e in events if e.kind is Ev.HEADERS]
    assert [m.status_code for m in msgs if m] == [b"100", b"404"]
    assert msgs[-1] is not None and msgs[-1].status_msg == b"Not Found"


def test_garbage_and_absurd_chunk_sizes_break_the_parser_once() -> None:
    assert [e.kind for e in HttpParser(True, deque()).feed(b"\x16\x03\x01\x02\x00")] == [Ev.ERROR]
    parser = HttpParser(True, deque())
    events = parser.feed(
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n"
    )
    assert events[-1].kind is Ev.ERROR
    assert parser.broken
    assert parser.feed(b"more bytes") == []


def test_header_section_longer_than_the_limit_is_an_error() -> None:
    parser = HttpParser(True, deque(), max_header_bytes=1024)
    events = parser.feed(b"GET / HTTP/1.1\r\n" + b"X-A: " + b"a" * 2000)
    assert [e.kind for e in events] == [Ev.ERROR]


def test_uri_normalization() -> None:
    assert normalize_uri(b"/a//b/./c/../d%2ephp") == b"/a/b/d.php"
    assert normalize_uri(b"/../../etc/passwd") == b"/etc/passwd"
    assert normalize_uri(b"/dir/") == b"/dir/"
