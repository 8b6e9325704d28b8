"""A clamd client: INSTREAM scans over a Unix socket (or TCP "host:port"), PING, VERSION.

Every call opens its own connection, so a clamd that restarts is picked up at the next scan; a
clamd that is down or too slow gives `ScanStatus.UNAVAILABLE` (never an exception), and clamd's
own size limit (StreamMaxLength) gives `ScanStatus.TOO_LARGE`: the caller applies its policy.
"""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

LOG = logging.getLogger(__name__)

CHUNK = 64 * 1024


class ScanStatus(Enum):
    CLEAN = "clean"
    INFECTED = "infected"
    TOO_LARGE = "too_large"  # clamd refused: over its StreamMaxLength
    UNAVAILABLE = "unavailable"  # clamd down, timed out or answered nonsense


@dataclass(frozen=True, slots=True)
class ScanResult:
    status: ScanStatus
    signature: str | None = None
    detail: str = ""


class ClamdClient:
    def __init__(self, address: str, timeout: float = 5.0) -> None:
        self.address = address
        self.timeout = timeout

    def _connect(self) -> socket.socket:
        if self.address.startswith("/") or ":" not in self.address:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            target: str | tuple[str, int] = self.address
        else:
            host, _, port = self.address.rpartition(":")
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            target = (host, int(port))
        sock.settimeout(self.timeout)
        try:
            sock.connect(target)
        except OSError:
            sock.close()
            raise
        return sock

    def _command(self, command: bytes) -> str:
        with self._connect() as sock:
            sock.sendall(b"z" + command + b"\0")
            return _read_reply(sock)

    def ping(self) -> bool:
        try:
            return self._command(b"PING") == "PONG"
        except OSError:
            return False

    def version(self) -> str:
        return self._command(b"VERSION")

    def instream(self, data: bytes | Iterable[bytes]) -> ScanResult:
        chunks: Iterable[bytes] = (
            (data[i : i + CHUNK] for i in range(0, len(data), CHUNK))
            if isinstance(data, bytes | bytearray)
            else data
        )
        try:
            with self._connect() as sock:
                sock.sendall(b"zINSTREAM\0")
                try:
                    for chunk in chunks:
                        if chunk:
                            sock.sendall(struct.pack("!I", len(chunk)) + chunk)
                    sock.sendall(struct.pack("!I", 0))
                except BrokenPipeError:
                    pass  # clamd stopped reading (size limit): its reply says why
                reply = _read_reply(sock)
        except (OSError, ValueError) as exc:
            LOG.debug("clamd %s: %s", self.address, exc)
            return ScanResult(ScanStatus.UNAVAILABLE, detail=str(exc))
        return parse_reply(reply)


def _read_reply(sock: socket.socket) -> str:
    buf = b""
    while not buf.endswith(b"\0"):
        part = sock.recv(4096)
        if not part:
            break
        buf += part
        if len(buf) > 65536:
            raise ValueError("clamd reply too long")
    return buf.rstrip(b"\0").decode("utf-8", "replace").strip()


def parse_reply(reply: str) -> ScanResult:
    """'stream: OK', 'stream: Name FOUND', 'INSTREAM size limit exceeded. ERROR', ..."""
    text = reply.split(": ", 1)[1] if reply.startswith("stream:") else reply
    if text == "OK":
        return ScanResult(ScanStatus.CLEAN)
    if text.endswith(" FOUND"):
        return ScanResult(ScanStatus.INFECTED, signature=text[: -len(" FOUND")].strip())
    if "size limit" in text.lower():
        return ScanResult(ScanStatus.TOO_LARGE, detail=text)
    return ScanResult(ScanStatus.UNAVAILABLE, detail=text or "empty reply")
