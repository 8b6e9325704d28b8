"""Small helpers for processes and links that tests, benchmarks and the topology share: veth pairs
that are always removed, processes stopped by PID, and waiting for a TCP port without sleeping
blindly."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

LOG = logging.getLogger(__name__)


def run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), check=check, capture_output=True, text=True)


def free_tcp_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for_port(
    host: str, port: int, timeout: float, process: subprocess.Popen[bytes] | None = None
) -> None:
    """Return once something accepts on host:port; fail early if `process` exits meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(
                f"process {process.args!r} exited with {process.returncode} "
                f"before listening on {host}:{port}"
            )
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.2)
            if sock.connect_ex((host, port)) == 0:
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing listens on {host}:{port} after {timeout:g}s")
        time.sleep(0.05)


def listens_on(pid: int, port: int) -> bool | None:
    """Whether process `pid` holds a listening TCP socket on `port` (any local address, IPv4 or
    IPv6): True; False if only other processes listen there; None if /proc cannot tell."""
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # local address "ADDR:PORT" in hex, state 0A: LISTEN, inode in the tenth column
            if len(fields) <= 9 or fields[3] != "0A":
                continue
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    if not inodes:
        return None
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for fd in fds:
        with contextlib.suppress(OSError):  # closed meanwhile
            if os.readlink(fd) in wanted:
                return True
    return False


def stop_process(process: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after `timeout`, by PID (never by name)."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        LOG.warning("pid %d ignored SIGTERM for %gs; killing it", process.pid, timeout)
        process.kill()
        process.wait(timeout=timeout)


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def delete_link(name: str) -> None:
    if link_exists(name):
        run(["ip", "link", "del", name], check=False)


def create_veth(a: str, b: str) -> None:
    delete_link(a)
    run(["ip", "link", "add", a, "type", "veth", "peer", "name", b])
    for name in (a, b):
        # No IPv6 autoconfiguration chatter on test links.
        with contextlib.suppress(OSError):
            Path(f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6").write_text("1")
        run(["ip", "link", "set", name, "mtu", "9000"])
        run(["ip", "link", "set", name, "up"])
        run(
            [
                "ethtool",
                "-K",
                name,
                "tx",
                "off",
                "rx",
                "off",
                "tso",
                "off",
                "gso",
                "off",
                "gro",
                "off",
            ],
            check=False,
        )


@contextlib.contextmanager
def veth_pairs(pairs: Sequence[tuple[str, str]]) -> Iterator[None]:
    """Create the veth pairs; remove them on exit, whatever happened."""
    try:
        for a, b in pairs:
            create_veth(a, b)
        yield
    finally:
        for a, _ in pairs:
            delete_link(a)


def require_root(what: str) -> str | None:
    """None if we are root, else the reason `what` cannot run."""
    if os.geteuid() != 0:
        return f"{what} needs root (network interfaces and raw sockets)"
    return None
