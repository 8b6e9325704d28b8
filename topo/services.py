"""Services that test hosts run: a small HTTP server for the scenarios.

    python -m topo.services http --bind 198.51.100.20 --port 80 --root DIR

Serves the files under DIR, and two generated resources:
  /whoami          the client's address as the server sees it (to check NAT)
  /bytes/N         N pseudo-random bytes (a clean download of a chosen size, reproducible)

    python -m topo.services udp-echo --bind 198.51.100.20 --port 7

Answers each datagram with "ADDRESS:PORT PAYLOAD", the sender as this host sees it.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import socket
import sys
import time
from collections.abc import Sequence
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MAX_GENERATED = 1 << 30


def generated_bytes(size: int, seed: int = 0) -> bytes:
    """The body of /bytes/N: deterministic, so a client can check it byte for byte."""
    return random.Random(seed).randbytes(size)


class Handler(SimpleHTTPRequestHandler):
    server_version = "OpenGateTest/1"

    def do_GET(self) -> None:
        if self.path == "/whoami":
            self._send(f"{self.client_address[0]}\n".encode(), "text/plain")
        elif self.path.startswith("/bytes/"):
            try:
                size = int(self.path.removeprefix("/bytes/"))
            except ValueError:
                self.send_error(400, "size must be an integer")
                return
            if not 0 <= size <= MAX_GENERATED:
                self.send_error(400, f"size must be 0..{MAX_GENERATED}")
                return
            body = generated_bytes(size)
            self._send(
                body, "application/octet-stream", {"X-SHA256": hashlib.sha256(body).hexdigest()}
            )
        else:
            super().do_GET()

    def _send(self, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write(f"{self.client_address[0]} {format % args}\n")


def family(address: str) -> socket.AddressFamily:
    """The socket family of an address in text form."""
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def udp_echo(bind: str, port: int) -> int:
    with socket.socket(family(bind), socket.SOCK_DGRAM) as sock:
        sock.bind((bind, port))
        while True:
            payload, peer = sock.recvfrom(65535)
            address, source_port = peer[0], peer[1]
            sock.sendto(f"{address}:{source_port} ".encode() + payload, peer)


def wait_udp_echo(address: str, port: int, timeout: float) -> None:
    """Return once the echo service at address:port answers (readiness probe)."""
    deadline = time.monotonic() + timeout
    with socket.socket(family(address), socket.SOCK_DGRAM) as sock:
        sock.settimeout(0.2)
        while time.monotonic() < deadline:
            sock.sendto(b"ready?", (address, port))
            try:
                if sock.recv(100).endswith(b"ready?"):
                    return
            except (TimeoutError, ConnectionRefusedError):
                continue
    raise TimeoutError(f"no UDP echo at {address}:{port} after {timeout:g}s")


class WebServer(ThreadingHTTPServer):
    """The standard library's threading server with a listen backlog of 1,024: its default of 5
    overflows when connections open faster than it accepts them (a SYN dropped by the server's
    kernel, retransmitted by the client a second later, looks like a stall of the gateway)."""

    request_queue_size = 1024


class WebServer6(WebServer):
    """The same on an IPv6 address."""

    address_family = socket.AF_INET6


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m topo.services", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="service", required=True)
    http = sub.add_parser("http")
    http.add_argument("--bind", required=True)
    http.add_argument("--port", type=int, default=80)
    http.add_argument("--root", type=Path, required=True)
    echo = sub.add_parser("udp-echo")
    echo.add_argument("--bind", required=True)
    echo.add_argument("--port", type=int, default=7)
    args = parser.parse_args(argv)
    if args.service == "udp-echo":
        return udp_echo(args.bind, args.port)
    handler = partial(Handler, directory=str(args.root))
    server_class = WebServer6 if family(args.bind) == socket.AF_INET6 else WebServer
    with server_class((args.bind, args.port), handler) as server:
        server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
