"""Two IPsec gateways in network namespaces joined by a veth pair, for the IPsec SPM's tests.

Each side has an "outside" address on the veth and a "LAN" address on its loopback; a route
sends the other side's LAN through the veth, so that traffic between the LAN addresses is what
the tunnel's SPD selects and traffic between the outside addresses is not. Names start with `ogv`
and carry the test process's id, so that runs side by side do not clash. Everything is removed
by `close()` (namespaces take their interfaces with them), which the fixtures call in `finally`.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from spm.ipsec.charon import Charon


@dataclass(slots=True)
class Side:
    ns: str
    veth: str
    outside: str  # address on the veth (/24)
    lan: str  # the LAN address (on lo, /32)
    lan_net: str
    charon: Charon | None = None

    def run(
        self, *argv: str, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.prefix, *argv],
            check=check,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def popen(self, *argv: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*self.prefix, *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    @property
    def prefix(self) -> tuple[str, ...]:
        # nsenter joins only the network namespace: `ip netns exec` also remounts / and /sys,
        # which fails where / is not a mount point (CI in a chroot)
        return ("nsenter", f"--net=/run/netns/{self.ns}")


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True, text=True)


class TwoSites:
    """Site A (10.11.0.1 behind 192.0.2.1) and site B (10.12.0.1 behind 192.0.2.2)."""

    def __init__(self, run_dir: Path) -> None:
        tag = f"{os.getpid() % 100000}"
        self.run_dir = run_dir
        self.a = Side(f"ogv{tag}a", f"ogv{tag}a0", "192.0.2.1", "10.11.0.1", "10.11.0.0/24")
        self.b = Side(f"ogv{tag}b", f"ogv{tag}b0", "192.0.2.2", "10.12.0.1", "10.12.0.0/24")
        self._made: list[str] = []

    def open(self) -> None:
        for side in (self.a, self.b):
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("netns", "del", side.ns)  # left by a killed run
            _ip("netns", "add", side.ns)
            self._made.append(side.ns)
        _ip("link", "add", self.a.veth, "type", "veth", "peer", "name", self.b.veth)
        for side, other in ((self.a, self.b), (self.b, self.a)):
            _ip("link", "set", side.veth, "netns", side.ns)
            side.run("ip", "link", "set", "lo", "up")
            side.run("ip", "addr", "add", f"{side.outside}/24", "dev", side.veth)
            side.run("ip", "link", "set", side.veth, "up")
            side.run("ip", "addr", "add", f"{side.lan}/32", "dev", "lo")
            side.run("ip", "route", "add", other.lan_net, "via", other.outside, "src", side.lan)

    def start_charons(self) -> None:
        for name, side in (("a", self.a), ("b", self.b)):
            side.charon = Charon(self.run_dir / name, prefix=side.prefix)
            side.charon.start()

    def close(self) -> None:
        for side in (self.a, self.b):
            if side.charon is not None:
                side.charon.stop()
                side.charon = None
        for ns in self._made:
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("netns", "del", ns)
        self._made.clear()


def wait_line(process: subprocess.Popen[str], stream: str, needle: str, timeout: float) -> str:
    """Read `stream` ('stdout'/'stderr') of `process` until a line contains `needle`. Reads the
    file descriptor itself (a buffered readline could hold the line select() no longer sees);
    what follows the needle's line in the same read is not kept."""
    fd = getattr(process, stream).fileno()
    selector = selectors.DefaultSelector()
    selector.register(fd, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    text = ""
    try:
        while time.monotonic() < deadline:
            if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            text += chunk.decode(errors="replace")
            for line in text.splitlines():
                if needle in line:
                    return line
    finally:
        selector.close()
    pytest.fail(f"no {needle!r} from {process.args!s} within {timeout:g}s: {text[-300:]!r}")


@contextlib.contextmanager
def tcpdump(prefix: Sequence[str], interface: str, path: Path) -> Iterator[Path]:
    """tcpdump on `interface` (run behind `prefix`, e.g. a namespace's nsenter) into `path`,
    ready before the body runs; stopped by its PID (SIGINT, so that it writes out what it
    has)."""
    argv = ["tcpdump", "-i", interface, "-n", "--immediate-mode", "-U", "-s", "0", "-w", str(path)]
    process = subprocess.Popen(
        [*prefix, *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_line(process, "stderr", "listening on", 15.0)
        yield path
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGINT)
        try:
            process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.communicate()


def capture(side: Side, path: Path) -> contextlib.AbstractContextManager[Path]:
    """tcpdump on the side's outside veth."""
    return tcpdump(side.prefix, side.veth, path)


SINK = """
import hashlib, socket, sys
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind((sys.argv[1], int(sys.argv[2])))
server.listen(1)
print("ready", flush=True)
conn, _ = server.accept()
digest, total = hashlib.sha256(), 0
while True:
    data = conn.recv(65536)
    if not data:
        break
    digest.update(data)
    total += len(data)
print(total, digest.hexdigest(), flush=True)
"""

SOURCE = """
import socket, sys, time
data = bytes.fromhex(sys.argv[3]) * int(sys.argv[4])
rate = float(sys.argv[5])  # bytes per second, 0: as fast as it goes
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=60) as conn:
    start = time.monotonic()
    for at in range(0, len(data), 65536):
        conn.sendall(data[at:at + 65536])
        if rate:
            time.sleep(max(0.0, start + (at + 65536) / rate - time.monotonic()))
"""


def transfer(
    sender: Side, receiver: Side, chunk: bytes, count: int, port: int = 5001, rate: int = 0
) -> tuple[int, str]:
    """Send `chunk` * `count` over TCP from sender's LAN address to receiver's; returns what the
    receiver got (bytes, sha256). `rate`: bytes per second (0: unpaced), so that a test can keep
    the tunnel uncongested."""
    sink = receiver.popen("python3", "-c", SINK, receiver.lan, str(port))
    try:
        wait_line(sink, "stdout", "ready", 15.0)
        sender.run(
            "python3",
            "-c",
            SOURCE,
            receiver.lan,
            str(port),
            chunk.hex(),
            str(count),
            str(rate),
            timeout=120,
        )
        out, _ = sink.communicate(timeout=60)
    finally:
        if sink.poll() is None:
            os.kill(sink.pid, signal.SIGKILL)
            sink.communicate()
    total, digest = out.split()[-2:]
    return int(total), digest


def ping(side: Side, target: str, count: int, interval: float = 0.2) -> Sequence[str]:
    result = side.run(
        "ping",
        "-n",
        "-q",
        "-I",
        side.lan,
        "-c",
        str(count),
        "-i",
        str(interval),
        "-W",
        "2",
        target,
        check=False,
        timeout=count * interval + 30,
    )
    return result.stdout.splitlines()
