"""Test-only helpers: network namespaces and veths that are always removed, and raw sockets
opened inside another namespace (from a short-lived thread that enters it, so that the test
process itself never leaves its own namespace)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator

CLONE_NEWNET = 0x40000000
ETH_P_ALL = 0x0003
SO_RCVBUFFORCE = 33


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command. `ip -n NS ...` runs as `nsenter --net=... ip ...`: iproute2's -n also
    remounts / and /sys, which fails where / is not a mount point (a chroot)."""
    command = list(argv)
    if command[:2] == ["ip", "-n"]:
        command = ["nsenter", f"--net=/run/netns/{command[2]}", "ip", *command[3:]]
    return subprocess.run(command, capture_output=True, text=True, check=check)


@contextlib.contextmanager
def netns(name: str) -> Iterator[str]:
    sh("ip", "netns", "del", name, check=False)
    sh("ip", "netns", "add", name)
    try:
        sh("ip", "-n", name, "link", "set", "lo", "up")
        yield name
    finally:
        sh("ip", "netns", "del", name, check=False)


def in_netns(name: str, fn: Callable[[], socket.socket]) -> socket.socket:
    """Run `fn` in a thread that has entered the namespace `name`; return what it made."""
    result: list[socket.socket | BaseException] = []

    def target() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err))
            result.append(fn())
        except BaseException as exc:  # handed to the caller
            result.append(exc)
        finally:
            os.close(fd)

    t = threading.Thread(target=target)
    t.start()
    t.join()
    out = result[0]
    if isinstance(out, BaseException):
        raise out
    return out


def raw_socket(netns_name: str, iface: str) -> socket.socket:
    def make() -> socket.socket:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        # room for a burst of frames (the default ~200 KiB holds about 300 small ones)
        s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 16 << 20)
        s.bind((iface, 0))
        return s

    sock = in_netns(netns_name, make)
    sock.settimeout(0.1)
    return sock


def wait_for(what: str, cond: Callable[[], bool], timeout: float) -> None:
    """Poll `cond` until it holds; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.05)
