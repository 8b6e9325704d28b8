"""Switch ports on Linux interfaces through raw AF_PACKET sockets, served by one thread.

Like BMv2 with libpcap, a port sees every frame in promiscuous mode, VLAN tags that the kernel
moved into packet metadata (VLAN offload) are put back into the frame, and the frames the switch
itself sends are not read back.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import struct
import threading
from collections.abc import Callable, Iterator

LOG = logging.getLogger(__name__)

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_AUXDATA = 8
PACKET_OUTGOING = 4
TP_STATUS_VLAN_VALID = 0x10
TP_STATUS_VLAN_TPID_VALID = 0x40
_AUX = struct.Struct("=IIIHHHH")
_CMSG_SPACE = socket.CMSG_SPACE(_AUX.size)
MAX_FRAME = 65536 + 64
BATCH = 64

Receive = Callable[[int, bytes], None]


class PortError(OSError):
    """An interface could not be opened as a switch port."""


class Ports:
    """The switch's ports, read by one thread. `suspend()` closes the sockets while another
    layer (the native data plane's C polling thread) serves the interfaces; `resume()` reopens
    them."""

    def __init__(self, interfaces: dict[int, str]) -> None:
        self.interfaces = dict(interfaces)
        self.sockets: dict[int, socket.socket] = {}
        self._selector: selectors.BaseSelector | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._receive: Receive | None = None
        self._open()

    def _open(self) -> None:
        try:
            for num, ifname in self.interfaces.items():
                self.sockets[num] = open_port(ifname)
        except OSError:
            self._close_sockets()
            raise

    def _close_sockets(self) -> None:
        for sock in self.sockets.values():
            sock.close()
        self.sockets.clear()

    def transmit(self, port: int, frame: bytes) -> None:
        sock = self.sockets.get(port)
        if sock is None:
            LOG.debug("frame for port %d, which has no interface (or is suspended): dropped", port)
            return
        try:
            sock.send(frame)
        except OSError as exc:
            LOG.debug("port %d: send failed: %s", port, exc)

    def start(self, receive: Receive) -> None:
        self._receive = receive
        self._stopping.clear()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        for num, sock in self.sockets.items():
            self._selector.register(sock, selectors.EVENT_READ, num)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._thread = threading.Thread(
            target=self._run, args=(self._selector, receive), name="ports", daemon=True
        )
        self._thread.start()

    def _run(self, selector: selectors.BaseSelector, receive: Receive) -> None:
        while not self._stopping.is_set():
            for key, _ in selector.select():
                num = key.data
                if num is None:
                    return
                self._drain(num, key.fileobj, receive)  # type: ignore[arg-type]

    @staticmethod
    def _drain(num: int, sock: socket.socket, receive: Receive) -> None:
        try:
            for frame in received_frames(sock, BATCH):
                receive(num, frame)
        except OSError as exc:
            LOG.warning("port %d: receive failed: %s", num, exc)

    def _stop_thread(self) -> None:
        self._stopping.set()
        if self._wake_w is not None:
            with contextlib.suppress(OSError):
                self._wake_w.send(b"x")
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None
        if self._selector is not None:
            self._selector.close()
            self._selector = None
        for s in (self._wake_r, self._wake_w):
            if s is not None:
                s.close()
        self._wake_r = self._wake_w = None

    def suspend(self) -> None:
        """Stop reading and close the sockets (another layer serves the interfaces)."""
        self._stop_thread()
        self._close_sockets()

    def resume(self) -> None:
        """Reopen the sockets and read again, if suspended."""
        if self.sockets or not self.interfaces:
            return
        self._open()
        if self._receive is not None:
            self.start(self._receive)

    def close(self) -> None:
        self._stop_thread()
        self._close_sockets()


def open_port(ifname: str) -> socket.socket:
    """A non-blocking raw socket on `ifname`, promiscuous, with VLAN auxiliary data."""
    try:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    except OSError as exc:
        raise PortError(exc.errno, f"cannot open a raw socket (root needed?): {exc}") from None
    try:
        sock.bind((ifname, 0))
        ifindex = socket.if_nametoindex(ifname)
        mreq = struct.pack("iHH8s", ifindex, PACKET_MR_PROMISC, 0, b"")
        sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
        sock.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise PortError(exc.errno, f"interface {ifname!r}: {exc.strerror or exc}") from None
    return sock


def received_frames(sock: socket.socket, limit: int | None = None) -> Iterator[bytes]:
    """The frames waiting on a socket from `open_port` (at most `limit`), not counting those
    sent on it, with the VLAN tag the kernel took off put back. Receive errors other than
    "nothing waiting" are raised."""
    count = 0
    while limit is None or count < limit:
        try:
            frame, ancdata, _flags, addr = sock.recvmsg(MAX_FRAME, _CMSG_SPACE)
        except (BlockingIOError, InterruptedError):
            return
        count += 1
        if addr[2] == PACKET_OUTGOING:
            continue
        for level, kind, data in ancdata:
            if level == SOL_PACKET and kind == PACKET_AUXDATA and len(data) >= _AUX.size:
                status, _, _, _, _, tci, tpid = _AUX.unpack_from(data)
                if status & TP_STATUS_VLAN_VALID and len(frame) >= 12:
                    if not status & TP_STATUS_VLAN_TPID_VALID:
                        tpid = 0x8100
                    frame = frame[:12] + struct.pack("!HH", tpid, tci) + frame[12:]
        yield frame
