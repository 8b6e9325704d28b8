"""Messages between the dispatcher and its workers, over a SOCK_SEQPACKET socket pair (one
message per send, boundaries kept).

    P  batch of packets   dispatcher -> worker   (id u32, cid, IP packet)*
    V  batch of verdicts  worker -> dispatcher   (id u32, verdict u8)*
    E  events             worker -> dispatcher   JSON list: alerts, bypass requests, flow ends,
                                                 stats
    Q  quit               dispatcher -> worker
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Iterator
from typing import Any

MSG_PACKETS = ord("P")
MSG_VERDICTS = ord("V")
MSG_EVENTS = ord("E")
MSG_QUIT = ord("Q")

MAX_MESSAGE = 1 << 20  # bytes; batches are cut before this
SOCKET_BUFFER = 8 << 20

_PKT = struct.Struct("!IBH")  # id, cid length, packet length
_VERDICT = struct.Struct("!IB")


def socket_pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    for s in (a, b):
        for opt, fallback in ((32, socket.SO_SNDBUF), (33, socket.SO_RCVBUF)):  # *BUFFORCE
            try:
                s.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
            except OSError:
                s.setsockopt(socket.SOL_SOCKET, fallback, SOCKET_BUFFER)
    return a, b


def pack_packet(packet_id: int, cid: str, raw: bytes) -> bytes:
    c = cid.encode("ascii")
    return _PKT.pack(packet_id, len(c), len(raw)) + c + raw


def unpack_packets(msg: bytes) -> Iterator[tuple[int, str, bytes]]:
    off = 1
    view = memoryview(msg)
    n = len(msg)
    while off + _PKT.size <= n:
        packet_id, clen, plen = _PKT.unpack_from(msg, off)
        off += _PKT.size
        cid = bytes(view[off : off + clen]).decode("ascii")
        off += clen
        yield packet_id, cid, bytes(view[off : off + plen])
        off += plen


def pack_verdicts(verdicts: list[tuple[int, int]]) -> bytes:
    return bytes([MSG_VERDICTS]) + b"".join(_VERDICT.pack(i, v) for i, v in verdicts)


def unpack_verdicts(msg: bytes) -> Iterator[tuple[int, int]]:
    for off in range(1, len(msg) - _VERDICT.size + 1, _VERDICT.size):
        yield _VERDICT.unpack_from(msg, off)


def pack_events(events: list[dict[str, Any]]) -> bytes:
    return bytes([MSG_EVENTS]) + json.dumps(events, separators=(",", ":")).encode()


def unpack_events(msg: bytes) -> list[dict[str, Any]]:
    data = json.loads(msg[1:])
    return data if isinstance(data, list) else []


class Receiver:
    """Receives whole messages into one preallocated buffer (a fresh 1 MiB buffer per recv
    would cost more than the message)."""

    __slots__ = ("_buf", "_sock")

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = bytearray(MAX_MESSAGE + 65536)

    def recv(self) -> bytes:
        """One message (b"" when the peer closed); raises BlockingIOError/TimeoutError."""
        n = self._sock.recv_into(self._buf)
        return bytes(self._buf[:n])
