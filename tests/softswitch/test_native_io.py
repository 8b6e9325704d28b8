"""Native packet I/O (softswitch/native/og_io.c) on veth pairs.

og_io.c is compiled with a small C callback (port 1 <-> port 2; a frame starting 0xFF goes to
port 255, which has no interface, so it is upcalled; one starting 0xFD only wakes the upcall fd)
and driven through ctypes, as the native data plane's Python side drives it. Frames are sent and
read on the far ends of the veths with softswitch.ports (which puts VLAN tags back itself), and
compared byte for byte.
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import os
import re
import select
import shutil
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from softswitch.ports import open_port, received_frames
from tests.softswitch.conftest import veth_pairs

NATIVE = Path(__file__).resolve().parents[2] / "softswitch" / "native"


def c_define(source: str, name: str) -> int:
    """The value of `#define NAME N` or `#define NAME (A << B)` in softswitch/native/`source`."""
    text = (NATIVE / source).read_text()
    found = re.search(rf"^#define {name} \(?(\d+)u?(?: << (\d+))?\)?(?:\s|$)", text, re.M)
    assert found, f"no #define {name} in {source}"
    return int(found.group(1)) << int(found.group(2) or 0)


CPU_PORT = 255
UPCALL_MAX = c_define("og_io.h", "OG_IO_UPCALL_MAX")
UPCALL_BYTES = c_define("og_io.c", "OG_IO_UPCALL_BYTES")
ETH_TEST = 0x88B5  # IEEE local experimental EtherType
TP_STATUS_VLAN_VALID = 0x10
SOL_PACKET = 263
PACKET_AUXDATA = 8
SO_RCVBUFFORCE = 33


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root for veth pairs and raw sockets"
    for tool in ("cc", "ip", "sysctl"):
        if shutil.which(tool) is None:
            return f"needs `{tool}`, which is not installed"
    return None


pytestmark = [
    pytest.mark.needs_root,
    pytest.mark.skipif(_missing() is not None, reason=_missing() or ""),
]

SHIM = r"""
#include "og_io.h"
typedef struct { og_io *io; uint64_t calls; } shim_state;
static shim_state S;
__attribute__((visibility("default"))) void *shim_ctx(void) { return &S; }
__attribute__((visibility("default"))) void shim_attach(og_io *io) { S.io = io; }
__attribute__((visibility("default"))) uint64_t shim_calls(void) {
    return __atomic_load_n(&S.calls, __ATOMIC_RELAXED);
}
__attribute__((visibility("default")))
uint32_t shim_process(void *ctx, uint32_t in_port, const uint8_t *f, uint32_t len, og_frame *out,
                      uint32_t max_out) {
    shim_state *s = ctx;
    __atomic_store_n(&s->calls, s->calls + 1, __ATOMIC_RELAXED);
    if (!max_out || !len) return 0;
    if (f[0] == 0xFD) { og_io_notify(s->io); return 0; }
    out[0].port = f[0] == 0xFF ? 255 : in_port == 1 ? 2 : 1;
    out[0].len = len;
    out[0].data = f;
    return 1;
}
"""


class Stats(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "rx_frames",
            "tx_frames",
            "tx_errors",
            "upcalls",
            "upcall_drops",
            "rx_ring_drops",
        )
    ]


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    build = tmp_path_factory.mktemp("og_io")
    (build / "shim.c").write_text(SHIM)
    so = build / "og_io_test.so"
    cmd = ["cc", "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-pthread"]
    cmd += ["-fvisibility=hidden", f"-I{NATIVE}", str(NATIVE / "og_io.c"), str(build / "shim.c")]
    subprocess.run([*cmd, "-o", str(so)], check=True)
    lib = ctypes.CDLL(str(so))
    p, u32, u8p = ctypes.c_void_p, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint8)
    lib.og_io_new.argtypes = [u32, ctypes.POINTER(u32), ctypes.POINTER(ctypes.c_char_p)]
    lib.og_io_new.argtypes += [p, p, ctypes.c_char_p, u32]
    lib.og_io_new.restype = p
    lib.og_io_start.argtypes = [p]
    lib.og_io_stop.argtypes = [p]
    lib.og_io_stop.restype = None
    lib.og_io_free.argtypes = [p]
    lib.og_io_free.restype = None
    lib.og_io_upcall_fd.argtypes = [p]
    lib.og_io_pop_upcall.argtypes = [p, ctypes.POINTER(u32), u8p, u32]
    lib.og_io_pop_upcall.restype = ctypes.c_int32
    lib.og_io_send.argtypes = [p, u32, ctypes.c_char_p, u32]
    lib.og_io_get_stats.argtypes = [p, ctypes.POINTER(Stats)]
    lib.og_io_get_stats.restype = None
    lib.og_io_thread_id.argtypes = [p]
    lib.shim_ctx.restype = p
    lib.shim_attach.argtypes = [p]
    lib.shim_attach.restype = None
    lib.shim_calls.restype = ctypes.c_uint64
    return lib


class IO:
    """One og_io on the shim's callback, as its ctypes caller sees it."""

    def __init__(self, lib: ctypes.CDLL, ports: list[tuple[int, str]]) -> None:
        self.lib = lib
        nums = (ctypes.c_uint32 * len(ports))(*(num for num, _ in ports))
        names = (ctypes.c_char_p * len(ports))(*(name.encode() for _, name in ports))
        err = ctypes.create_string_buffer(256)
        fn = ctypes.cast(lib.shim_process, ctypes.c_void_p)
        handle = lib.og_io_new(len(ports), nums, names, fn, lib.shim_ctx(), err, len(err))
        if not handle:
            raise OSError(err.value.decode())
        self.handle: int | None = handle
        lib.shim_attach(handle)

    def start(self) -> None:
        assert self.lib.og_io_start(self.handle) == 0

    def stop(self) -> None:
        self.lib.og_io_stop(self.handle)

    def free(self) -> None:
        if self.handle is not None:
            self.lib.og_io_free(self.handle)
            self.handle = None

    def stats(self) -> Stats:
        out = Stats()
        self.lib.og_io_get_stats(self.handle, ctypes.byref(out))
        return out

    def upcall_fd(self) -> int:
        return int(self.lib.og_io_upcall_fd(self.handle))

    def pop(self, cap: int = UPCALL_MAX) -> tuple[int, int | bytes]:
        """(port, frame), or (0, -1) if empty, (0, -2) if `cap` is too small."""
        buf = (ctypes.c_uint8 * cap)()
        port = ctypes.c_uint32()
        n = self.lib.og_io_pop_upcall(self.handle, ctypes.byref(port), buf, cap)
        return (port.value, bytes(buf[:n])) if n >= 0 else (0, n)

    def send(self, port: int, frame: bytes) -> int:
        return int(self.lib.og_io_send(self.handle, port, frame, len(frame)))


@dataclass(frozen=True, slots=True)
class Veths:
    """Port 1 is `sw1`, whose peer is `host1`; port 2 is `sw2`, peer `host2`."""

    sw1: str
    host1: str
    sw2: str
    host2: str


_serial = itertools.count()


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def veths() -> Iterator[Veths]:
    tag = f"ogt{os.getpid() % 100000}{next(_serial) % 10}"
    v = Veths(f"{tag}a0", f"{tag}a1", f"{tag}b0", f"{tag}b1")
    with veth_pairs([(v.sw1, v.host1), (v.sw2, v.host2)]):
        yield v


@pytest.fixture
def io(lib: ctypes.CDLL, veths: Veths) -> Iterator[IO]:
    io = IO(lib, [(1, veths.sw1), (2, veths.sw2)])
    try:
        io.start()
        yield io
    finally:
        io.free()


@pytest.fixture
def hosts(veths: Veths) -> Iterator[tuple[socket.socket, socket.socket]]:
    """Raw sockets on the far ends of port 1 and port 2, with room for a long burst."""
    socks = [open_port(veths.host1), open_port(veths.host2)]
    try:
        for s in socks:
            s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)
        yield socks[0], socks[1]
    finally:
        for s in socks:
            s.close()


def frame(seq: int, size: int = 64, first: int = 0x02) -> bytes:
    head = bytes([first, 0, 0, 0, 0, 2]) + bytes.fromhex("020000000001")
    head += struct.pack("!HI", ETH_TEST, seq)
    return head + bytes((seq + i) & 0xFF for i in range(size - len(head)))


def send(sock: socket.socket, data: bytes) -> None:
    """Send on a non-blocking socket, waiting (up to 5 s) while its buffer is full."""
    while True:
        try:
            sock.send(data)
            return
        except BlockingIOError:
            if not select.select([], [sock], [], 5.0)[1]:
                raise


def wait_for(what: str, cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.001)


def receive(sock: socket.socket, count: int, timeout: float = 5.0) -> list[bytes]:
    """Exactly `count` frames from `sock` (fails on a timeout)."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"received {len(got)} of {count} frames")
        if select.select([sock], [], [], left)[0]:
            got.extend(received_frames(sock, count - len(got)))
    return got


def readable(fd: int, timeout: float) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


def next_upcall(io: IO, timeout: float = 5.0) -> tuple[int, bytes]:
    """The next upcalled frame, waiting on the eventfd as the slow path does: readable means
    "pop until -1" (it may stay readable after the last frame until a pop finds none)."""
    deadline = time.monotonic() + timeout
    while readable(io.upcall_fd(), max(0.0, deadline - time.monotonic())):
        port, got = io.pop()
        if isinstance(got, bytes):
            return port, got
    raise AssertionError("no upcall")


def expect_stats(io: IO, **expected: int) -> None:
    """The counters read `expected` within 5 s (a frame can arrive before its sender, the
    polling thread, has counted it)."""

    def current() -> dict[str, int]:
        stats = io.stats()
        return {name: int(getattr(stats, name)) for name in expected}

    deadline = time.monotonic() + 5.0
    while (got := current()) != expected and time.monotonic() < deadline:
        time.sleep(0.001)
    assert got == expected


def forwarded_more_than(io: IO, count: int) -> Callable[[], bool]:
    return lambda: io.stats().tx_frames > count


def promiscuity(ifname: str) -> int:
    """How many users hold `ifname` promiscuous (packet sockets do not show in its flags)."""
    out = subprocess.run(["ip", "-d", "link", "show", ifname], check=True, capture_output=True)
    words = out.stdout.decode().split()
    return int(words[words.index("promiscuity") + 1])


def test_frames_cross_between_ports_unchanged(
    io: IO, hosts: tuple[socket.socket, socket.socket]
) -> None:
    """A frame in on port 1 leaves on port 2 with the same bytes, and the other way round."""
    host1, host2 = hosts
    host1.send(frame(1))
    assert receive(host2, 1) == [frame(1)]
    host2.send(frame(2, 1500))
    assert receive(host1, 1) == [frame(2, 1500)]
    expect_stats(io, rx_frames=2, tx_frames=2, tx_errors=0, upcalls=0, rx_ring_drops=0)


def _vlan(tags: list[tuple[int, int]], seq: int, size: int = 64) -> bytes:
    plain = frame(seq, size)
    return plain[:12] + b"".join(struct.pack("!HH", t, c) for t, c in tags) + plain[12:]


@pytest.mark.parametrize(
    "tags",
    [[(0x8100, 0xA00A)], [(0x8100, 0x0000)], [(0x88A8, 0x0064), (0x8100, 0x2005)]],
    ids=["dot1q", "priority-tag", "qinq"],
)
def test_vlan_tag_moved_to_metadata_is_put_back(
    io: IO,
    veths: Veths,
    hosts: tuple[socket.socket, socket.socket],
    tags: list[tuple[int, int]],
) -> None:
    """The kernel takes the outer tag off a received frame (its receive path does, offload or
    not); the forwarded frame carries it again, TPID and TCI as sent."""
    host1, host2 = hosts
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003)) as tap:
        tap.bind((veths.sw1, 0))
        tap.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
        host1.send(_vlan(tags, 7))
        assert receive(host2, 1) == [_vlan(tags, 7)]
        assert readable(tap.fileno(), 5.0)
        data, anc, _, _ = tap.recvmsg(2048, socket.CMSG_SPACE(20))
        aux = [d for lvl, kind, d in anc if (lvl, kind) == (SOL_PACKET, PACKET_AUXDATA)]
        status = struct.unpack_from("=I", aux[0])[0]
        assert status & TP_STATUS_VLAN_VALID, "the tag was not in metadata: nothing tested"
        assert len(data) == len(_vlan(tags, 7)) - 4


def test_frames_longer_than_a_ring_slot_arrive_whole_and_in_order(
    io: IO, veths: Veths, hosts: tuple[socket.socket, socket.socket]
) -> None:
    """A frame longer than a receive ring slot (a jumbo frame here, a GSO frame from a veth in
    the gateway) is read whole from the socket: long and short frames, tagged and untagged,
    leave port 2 in the order they came, byte for byte."""
    host1, host2 = hosts
    slot = c_define("og_io.c", "OG_IO_RX_FRAME")
    for name in (veths.sw1, veths.host1, veths.sw2, veths.host2):
        _ip("link", "set", name, "mtu", "9100")
    long = 9000
    assert long > slot, "every frame fits a slot: nothing tested"
    tags = [(0x8100, 0x0123)]
    sent = []
    for seq in range(200):
        size = (long, 64, long - 1, 1500)[seq % 4]
        sent.append(_vlan(tags, seq, size) if seq % 3 == 0 else frame(seq, size))
    for data in sent:
        send(host1, data)
    assert receive(host2, len(sent), timeout=10.0) == sent
    expect_stats(io, rx_frames=len(sent), tx_frames=len(sent), tx_errors=0, rx_ring_drops=0)


def test_switch_sent_frames_are_not_read_back(
    io: IO, hosts: tuple[socket.socket, socket.socket]
) -> None:
    """A frame sent on port 2 is not received again on port 2 (it would come back on port 1 ahead
    of a later frame from host 2, which the ring of port 2 holds after it)."""
    host1, host2 = hosts
    host1.send(frame(1))
    assert receive(host2, 1) == [frame(1)]
    host2.send(frame(2))
    assert receive(host1, 1) == [frame(2)]
    expect_stats(io, rx_frames=2, tx_frames=2)


def test_frames_others_send_on_a_port_are_not_switched(
    io: IO, veths: Veths, hosts: tuple[socket.socket, socket.socket]
) -> None:
    """A frame another socket (the host's stack, say) sends out of port 1's interface is
    outgoing there: the switch does not take it in (it would reach host 2 ahead of a later frame
    from host 1, which the ring of port 1 holds after it)."""
    host1, host2 = hosts
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as other:
        other.bind((veths.sw1, 0))
        other.send(frame(1))
        assert receive(host1, 1) == [frame(1)]
    host1.send(frame(2))
    assert receive(host2, 1) == [frame(2)]
    expect_stats(io, rx_frames=1, tx_frames=1)


def test_frame_for_port_without_interface_is_upcalled(
    io: IO, hosts: tuple[socket.socket, socket.socket]
) -> None:
    """Output to port 255 (no interface) is queued: the eventfd is readable until the queue is
    drained; a too-small buffer leaves the frame queued."""
    host1, _ = hosts
    fd = io.upcall_fd()
    assert not readable(fd, 0)
    upcalls = [frame(1, first=0xFF), frame(2, 900, first=0xFF)]
    for f in upcalls:
        host1.send(f)
    wait_for("two upcalls", lambda: io.stats().upcalls == 2)
    assert readable(fd, 0)
    assert io.pop(cap=63) == (0, -2)
    assert io.pop() == (CPU_PORT, upcalls[0])
    assert readable(fd, 0)
    assert io.pop() == (CPU_PORT, upcalls[1])
    assert io.pop() == (0, -1)
    assert not readable(fd, 0)
    stats = io.stats()
    assert (stats.upcalls, stats.upcall_drops, stats.tx_frames) == (2, 0, 0)


def test_upcall_ring_drops_when_full_and_wraps_around(
    io: IO, veths: Veths, hosts: tuple[socket.socket, socket.socket]
) -> None:
    """Upcalls beyond the ring's bytes, or longer than OG_IO_UPCALL_MAX, are dropped and counted;
    once drained the ring takes frames again across its end."""
    host1, _ = hosts
    for name in (veths.host1, veths.sw1):
        _ip("link", "set", name, "mtu", "20000")
    size = 16000
    fits = UPCALL_BYTES // (8 + size)
    for seq in range(fits + 10):
        host1.send(frame(seq, size, first=0xFF))
    host1.send(frame(99999, UPCALL_MAX + 1, first=0xFF))
    wait_for("the upcalls", lambda: io.stats().upcalls + io.stats().upcall_drops == fits + 11)
    stats = io.stats()
    assert (stats.upcalls, stats.upcall_drops) == (fits, 11)
    popped = [io.pop() for _ in range(fits)]
    assert popped == [(CPU_PORT, frame(seq, size, first=0xFF)) for seq in range(fits)]
    assert io.pop() == (0, -1)
    for seq in range(1000, 1100):  # starts near the end of the ring, so some wrap
        host1.send(frame(seq, size, first=0xFF))
        assert next_upcall(io) == (CPU_PORT, frame(seq, size, first=0xFF))
    assert io.stats().upcall_drops == 11


def test_notify_wakes_the_upcall_fd(io: IO, hosts: tuple[socket.socket, socket.socket]) -> None:
    """og_io_notify from the callback makes the fd readable; popping the empty ring clears it."""
    host1, _ = hosts
    fd = io.upcall_fd()
    host1.send(frame(1, first=0xFD))
    assert readable(fd, 5.0)
    assert io.pop() == (0, -1)
    assert not readable(fd, 0)


def test_send_from_another_thread_alongside_forwarding(
    io: IO, hosts: tuple[socket.socket, socket.socket]
) -> None:
    """og_io_send from a Python thread while the polling thread forwards to the same port: every
    frame arrives once; a port without interface is -1, an oversize frame -EMSGSIZE."""
    host1, host2 = hosts
    n = 500
    sent = threading.Thread(target=lambda: [io.send(2, frame(10000 + i)) for i in range(n)])
    sent.start()
    for i in range(n):
        host1.send(frame(i))
    sent.join()
    got = receive(host2, 2 * n, timeout=10.0)
    assert sorted(got) == sorted(
        [frame(i) for i in range(n)] + [frame(10000 + i) for i in range(n)]
    )
    assert io.send(CPU_PORT, frame(1)) == -1
    assert io.send(2, frame(1, 9000)) == -errno.EMSGSIZE
    expect_stats(io, rx_frames=n, tx_frames=2 * n, tx_errors=1)


def test_burst_of_10000_frames_arrives_complete_and_in_order(
    io: IO, hosts: tuple[socket.socket, socket.socket]
) -> None:
    """10,000 frames, at most 512 of them not yet forwarded at any time: all leave port 2 in
    order, and no ring dropped any."""
    host1, host2 = hosts
    total, window = 10_000, 512
    for seq in range(total):
        if seq % 64 == 0:
            wait_for("the switch to catch up", forwarded_more_than(io, seq - window))
        send(host1, frame(seq))
    got = receive(host2, total, timeout=30.0)
    assert got == [frame(seq) for seq in range(total)]
    expect_stats(io, rx_frames=total, tx_frames=total, tx_errors=0, rx_ring_drops=0)


def test_stop_start_and_free_release_everything(
    lib: ctypes.CDLL, veths: Veths, hosts: tuple[socket.socket, socket.socket]
) -> None:
    """Stop is idempotent and a stopped switch forwards nothing until started again; free closes
    every descriptor og_io opened and takes the ports out of promiscuous mode."""
    host1, host2 = hosts
    fds = set(os.listdir("/proc/self/fd"))
    io = IO(lib, [(1, veths.sw1), (2, veths.sw2)])
    try:
        assert (promiscuity(veths.sw1), promiscuity(veths.sw2)) == (1, 1)
        io.start()
        assert lib.og_io_start(io.handle) == -errno.EALREADY
        host1.send(frame(1))
        assert receive(host2, 1) == [frame(1)]
        io.stop()
        io.stop()
        calls = lib.shim_calls()
        host1.send(frame(2))
        io.start()  # the frame waited in the ring
        assert receive(host2, 1) == [frame(2)]
        assert lib.shim_calls() == calls + 1
    finally:
        io.free()
    assert set(os.listdir("/proc/self/fd")) == fds
    assert (promiscuity(veths.sw1), promiscuity(veths.sw2)) == (0, 0)


def test_thread_id_names_the_polling_thread_while_it_runs(lib: ctypes.CDLL, veths: Veths) -> None:
    """og_io_thread_id is the polling thread's kernel id (the one a priority is set on) while it
    runs, 0 before its start and after its stop."""
    io = IO(lib, [(1, veths.sw1), (2, veths.sw2)])
    try:
        assert lib.og_io_thread_id(io.handle) == 0
        io.start()
        tid = lib.og_io_thread_id(io.handle)
        assert Path(f"/proc/self/task/{tid}/comm").read_text().strip() == "og-io"
        io.stop()
        assert lib.og_io_thread_id(io.handle) == 0
        assert not Path(f"/proc/self/task/{tid}").exists()
    finally:
        io.free()


def test_missing_interface_is_named_in_the_error(lib: ctypes.CDLL) -> None:
    with pytest.raises(OSError, match=r"interface 'ogtnone0': No such device"):
        IO(lib, [(1, "ogtnone0")])


def test_port_given_twice_is_an_error(lib: ctypes.CDLL, veths: Veths) -> None:
    fds = set(os.listdir("/proc/self/fd"))
    with pytest.raises(OSError, match=rf"interface '{veths.sw2}': port 1 is given twice"):
        IO(lib, [(1, veths.sw1), (2, veths.sw2), (1, veths.sw2)])
    assert set(os.listdir("/proc/self/fd")) == fds
