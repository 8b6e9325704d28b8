"""NFQUEUE over netlink, in Python: bind a queue, receive packets, send verdicts.

Written against the kernel's nfnetlink_queue protocol directly (not libnetfilter_queue) because
the SPM needs what the C bindings do not expose: the fail-open flag (a full queue accepts rather
than drops), verdicts that set the packet mark, and verdicts issued later, from another loop
iteration, for packets that a worker process inspected.

Not supported: GSO packets (the kernel segments them before queueing, we never ask for GSO),
conntrack/uid/secctx attributes, payload rewriting.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass

LOG = logging.getLogger(__name__)

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_VERDICT = 1
NFQNL_MSG_CONFIG = 2
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4

NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQA_CFG_MASK = 4
NFQA_CFG_FLAGS = 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_CFG_CMD_UNBIND = 2
NFQNL_COPY_PACKET = 2
NFQA_CFG_F_FAIL_OPEN = 1 << 0

NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQA_MARK = 3
NFQA_IFINDEX_INDEV = 5
NFQA_HWADDR = 9
NFQA_PAYLOAD = 10

NF_DROP = 0
NF_ACCEPT = 1

SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5

_NLMSG = struct.Struct("=IHHII")
_NFGEN = struct.Struct("=BBH")
_ATTR = struct.Struct("=HH")


@dataclass(slots=True)
class QueuedPacket:
    """A packet the kernel holds until it gets a verdict for `packet_id`."""

    packet_id: int
    mark: int
    indev: int
    hw_src: bytes  # source MAC (6 bytes) when the kernel knows it
    payload: bytes  # the IP packet


def _attr(kind: int, data: bytes) -> bytes:
    length = _ATTR.size + len(data)
    pad = (-length) % 4
    return _ATTR.pack(length, kind) + data + b"\0" * pad


class NfQueue:
    """One bound NFQUEUE. Not thread-safe: one loop owns it."""

    def __init__(self, queue_num: int, max_len: int, fail_open: bool, rcvbuf: int = 8 << 20):
        self.queue_num = queue_num
        self._seq = 0
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        try:
            self._sock.bind((0, 0))
            try:
                self._sock.setsockopt(socket.SOL_SOCKET, 33, rcvbuf)  # SO_RCVBUFFORCE
            except OSError:
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            self._sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
            self._config(_attr(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_BIND, 0)))
            params = struct.pack("!IB", 0xFFFF, NFQNL_COPY_PACKET)
            flags = NFQA_CFG_F_FAIL_OPEN if fail_open else 0
            self._config(
                _attr(NFQA_CFG_PARAMS, params)
                + _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", max_len))
                + _attr(NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_FAIL_OPEN))
                + _attr(NFQA_CFG_FLAGS, struct.pack("!I", flags))
            )
        except BaseException:
            self._sock.close()
            raise
        self._buf = bytearray(256 * 1024)
        self._out: list[bytes] = []

    def fileno(self) -> int:
        return self._sock.fileno()

    def _header(self, msg_type: int, flags: int, payload_len: int) -> bytes:
        self._seq += 1
        return _NLMSG.pack(
            _NLMSG.size + _NFGEN.size + payload_len,
            (NFNL_SUBSYS_QUEUE << 8) | msg_type,
            NLM_F_REQUEST | flags,
            self._seq,
            0,
        ) + _NFGEN.pack(socket.AF_UNSPEC, 0, socket.htons(self.queue_num))

    def _config(self, attrs: bytes) -> None:
        """Send a config message and wait for its acknowledgement (raise on error)."""
        self._sock.send(self._header(NFQNL_MSG_CONFIG, NLM_F_ACK, len(attrs)) + attrs)
        want = self._seq
        while True:
            data = self._sock.recv(65536)
            for msg_type, seq, body in _messages(data):
                if msg_type == NLMSG_ERROR and seq == want:
                    err = -struct.unpack_from("=i", body)[0]
                    if err:
                        raise OSError(err, f"NFQUEUE {self.queue_num} config: {os.strerror(err)}")
                    return

    def receive(self) -> list[QueuedPacket]:
        """The packets of one datagram (non-blocking: [] if none is waiting)."""
        try:
            n = self._sock.recv_into(self._buf, 0, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return []
        except OSError as exc:
            if exc.errno == errno.ENOBUFS:
                LOG.warning("queue %d: kernel dropped messages (ENOBUFS)", self.queue_num)
                return []
            raise
        out: list[QueuedPacket] = []
        for msg_type, _seq, body in _messages(memoryview(self._buf)[:n]):
            if msg_type == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                pkt = _parse_packet(body)
                if pkt is not None:
                    out.append(pkt)
            elif msg_type == NLMSG_ERROR:
                err = -struct.unpack_from("=i", body)[0]
                if err:
                    LOG.warning("queue %d: netlink error %s", self.queue_num, os.strerror(err))
        return out

    def verdict(self, packet_id: int, verdict: int, mark: int | None = None) -> None:
        """Queue a verdict; `flush()` sends all queued verdicts in one datagram."""
        attrs = _attr(NFQA_VERDICT_HDR, struct.pack("!II", verdict, packet_id))
        if mark is not None:
            attrs += _attr(NFQA_MARK, struct.pack("!I", mark))
        self._out.append(self._header(NFQNL_MSG_VERDICT, 0, len(attrs)) + attrs)
        if len(self._out) >= 64:
            self.flush()

    def flush(self) -> None:
        if not self._out:
            return
        data = b"".join(self._out)
        self._out.clear()
        try:
            self._sock.send(data)
        except OSError as exc:  # a verdict for a packet the kernel no longer holds, etc.
            LOG.warning("queue %d: sending verdicts failed: %s", self.queue_num, exc)

    def close(self) -> None:
        if self._sock.fileno() < 0:
            return
        self.flush()
        try:
            attrs = _attr(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_UNBIND, 0))
            self._sock.send(self._header(NFQNL_MSG_CONFIG, 0, len(attrs)) + attrs)
        except OSError as exc:
            LOG.debug("queue %d: unbind failed: %s", self.queue_num, exc)
        self._sock.close()


def _messages(data: bytes | memoryview) -> Iterator[tuple[int, int, memoryview]]:
    """(type, seq, body after the nfgenmsg or the error code) of each netlink message."""
    view = memoryview(data)
    off = 0
    while off + _NLMSG.size <= len(view):
        length, msg_type, _flags, seq, _pid = _NLMSG.unpack_from(view, off)
        if length < _NLMSG.size or off + length > len(view):
            break
        body = view[off + _NLMSG.size : off + length]
        if msg_type != NLMSG_ERROR:
            body = body[_NFGEN.size :]
        yield msg_type, seq, body
        off += (length + 3) & ~3


def _parse_packet(body: memoryview) -> QueuedPacket | None:
    packet_id = -1
    mark = indev = 0
    hw = b""
    payload = b""
    off = 0
    while off + _ATTR.size <= len(body):
        length, kind = _ATTR.unpack_from(body, off)
        if length < _ATTR.size:
            break
        value = body[off + _ATTR.size : off + length]
        kind &= 0x7FFF
        if kind == NFQA_PACKET_HDR:
            packet_id = struct.unpack_from("!I", value)[0]
        elif kind == NFQA_MARK:
            mark = struct.unpack_from("!I", value)[0]
        elif kind == NFQA_IFINDEX_INDEV:
            indev = struct.unpack_from("!I", value)[0]
        elif kind == NFQA_HWADDR:
            hwlen = struct.unpack_from("!H", value)[0]
            hw = bytes(value[4 : 4 + min(hwlen, 8)])
        elif kind == NFQA_PAYLOAD:
            payload = bytes(value)
        off += (length + 3) & ~3
    if packet_id < 0:
        return None
    return QueuedPacket(packet_id, mark, indev, hw, payload)
