"""What the fuzzers found, each kept as an input in its corpus (fuzz/corpus/<target>/finding-*)
and pinned here by the behaviour it broke."""

from __future__ import annotations

from collections import deque

from fuzz.py import run_one, target
from fuzz.run import CORPUS
from spm.http import Ev, HttpEvent, HttpParser


def _kinds(events: list[HttpEvent]) -> list[tuple[Ev, bytes]]:
    return [(e.kind, e.message.uri if e.message else b"") for e in events]


def test_http_finding_leading_empty_lines_replays() -> None:
    run_one(target("http"), (CORPUS / "http" / "finding-leading-empty-lines").read_bytes())


def test_http_empty_lines_before_a_message_are_skipped_however_the_stream_is_cut() -> None:
    """RFC 9112 section 2.2: empty lines before a message are ignored; "\\n\\n" in one segment
    was taken for an empty header section (an error) while "\\n" + "\\n" was skipped."""
    whole = HttpParser(False, deque([b"GET"]))
    assert whole.feed(b"\n\n") == []
    events = whole.feed(b"HTTP/1.1 204 No Content\r\n\r\n")
    assert [e.kind for e in events] == [Ev.HEADERS, Ev.END]
    assert events[0].message is not None and events[0].message.status_code == b"204"
    request = HttpParser(True, deque())
    assert _kinds(request.feed(b"\r\n\r\nGET /a HTTP/1.1\r\n\r\n")) == [
        (Ev.HEADERS, b"/a"),
        (Ev.END, b"/a"),
    ]


def test_http_finding_mixed_line_ends_replays() -> None:
    run_one(target("http"), (CORPUS / "http" / "finding-mixed-line-ends").read_bytes())


def test_http_header_section_ends_at_its_first_empty_line_whatever_the_line_ends() -> None:
    """A header line ending in a bare LF followed by a CRLF empty line ends the section (RFC
    9112 section 2.2: a recipient may take LF for a line end); it was missed when a later
    CRLF CRLF came in the same segment, so the next request was read as a header."""
    stream = b"GET /a HTTP/1.1\r\nHost: x\n\r\nGET /b HTTP/1.1\r\n\r\n"
    whole = _kinds(HttpParser(True, deque()).feed(stream))
    assert whole == [(Ev.HEADERS, b"/a"), (Ev.END, b"/a"), (Ev.HEADERS, b"/b"), (Ev.END, b"/b")]
    cut = HttpParser(True, deque())
    pieces = _kinds(cut.feed(stream[:20]) + cut.feed(stream[20:]))
    assert pieces == whole
