"""ICMP errors the gateway itself sends (RFC 792, RFC 1812 section 4.3.2): a time exceeded for a
packet from an inside host whose TTL ran out at the gateway, so that traceroute and mtr show the
gateway's hop.

The NPM sends such a packet to the CPM as it arrived (packet-in reason `TTL_EXPIRED`, before
any session or NAT, metered like every packet-in). The answer goes back out of the port it came
in on, from the gateway's MAC and first address on that port to the sender's MAC, quoting as much
of the packet as fits in 576 bytes (RFC 1812 4.3.2.3). As RFC 1812 4.3.2.7 asks, there is no
answer to an ICMP error, a fragment other than the first, or a packet from an address that is
not one host's (0.0.0.0, loopback, multicast, broadcast); and at most `RATE` answers a second
per NPM (a burst of `BURST`), as Linux's icmp_msgs_per_sec limits its own.
"""

from __future__ import annotations

import ipaddress
import struct
import time
from dataclasses import dataclass, field

from controller.policy import Policy
from opengate import p4constants as pc

ETHERTYPE_VLAN = 0x8100
ICMP_TIME_EXCEEDED = 11
# ICMP types that are errors (no error is sent about them): unreachable, source quench,
# redirect, time exceeded, parameter problem.
ICMP_ERRORS = frozenset({3, 4, 5, 11, 12})
MAX_ERROR = 576  # the error's whole IPv4 datagram at most (RFC 1812 4.3.2.3)
RATE = 1000.0
BURST = 50.0


def checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071)."""
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _sender_is_a_host(address: int) -> bool:
    addr = ipaddress.IPv4Address(address)
    return not (
        addr.is_unspecified
        or addr.is_loopback
        or addr.is_multicast
        or addr == ipaddress.IPv4Address("255.255.255.255")
    )


@dataclass(slots=True)
class TokenBucket:
    rate: float
    burst: float
    tokens: float = field(init=False)
    stamp: float = field(init=False, default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.tokens = self.burst

    def take(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


def time_exceeded(frame: bytes, port_mac: int, port_address: int, ident: int) -> bytes | None:
    """The time exceeded (code 0, TTL exceeded in transit) for `frame` (Ethernet, an optional
    802.1Q tag kept), from `port_mac` / `port_address`; None where none may be sent."""
    offset = 12
    vlan = b""
    if len(frame) >= 18 and struct.unpack_from("!H", frame, offset)[0] == ETHERTYPE_VLAN:
        vlan = frame[12:16]
        offset = 16
    if len(frame) < offset + 2 + 20 or struct.unpack_from("!H", frame, offset)[0] != 0x0800:
        return None
    ip = offset + 2
    ihl = (frame[ip] & 0x0F) * 4
    total = struct.unpack_from("!H", frame, ip + 2)[0]
    if frame[ip] >> 4 != 4 or ihl < 20 or total < ihl or len(frame) < ip + ihl:
        return None
    if struct.unpack_from("!H", frame, ip + 6)[0] & 0x1FFF:
        return None  # not the first fragment
    if frame[ip + 9] == pc.IP_PROTO_ICMP and (
        len(frame) < ip + ihl + 1 or frame[ip + ihl] in ICMP_ERRORS
    ):
        return None  # an error about an error, or an ICMP packet without its type
    source = struct.unpack_from("!I", frame, ip + 12)[0]
    if not _sender_is_a_host(source):
        return None
    datagram = frame[ip : ip + min(total, len(frame) - ip)]  # without Ethernet padding
    quoted = datagram[: MAX_ERROR - 20 - 8]
    icmp = struct.pack("!BBHI", ICMP_TIME_EXCEEDED, 0, 0, 0) + quoted
    icmp = icmp[:2] + struct.pack("!H", checksum(icmp)) + icmp[4:]
    header = struct.pack(
        "!BBHHHBBHII",
        0x45,
        0xC0,  # DSCP CS6 (network control), as routers mark their own ICMP
        20 + len(icmp),
        ident & 0xFFFF,
        0,
        64,
        pc.IP_PROTO_ICMP,
        0,
        port_address,
        source,
    )
    header = header[:10] + struct.pack("!H", checksum(header)) + header[12:]
    ethernet = frame[6:12] + port_mac.to_bytes(6, "big") + vlan + b"\x08\x00"
    return ethernet + header + icmp


@dataclass(slots=True)
class GatewayIcmp:
    """Answers the NPMs' `TTL_EXPIRED` packet-ins, at most RATE a second per NPM."""

    sent: int = 0
    not_answered: int = 0  # no error may be sent about it, or the port has no address
    rate_limited: int = 0
    _buckets: dict[str, TokenBucket] = field(default_factory=dict)
    _ident: int = 0

    def answer(self, policy: Policy, npm: str, ingress_port: int, frame: bytes) -> bytes | None:
        """The frame to send out of `ingress_port` (its MAC and address from `policy`) for the
        packet-in `frame`, or None."""
        port = policy.port(ingress_port)
        if port is None or port.mac is None or not port.addresses:
            self.not_answered += 1
            return None
        self._ident += 1
        reply = time_exceeded(frame, port.mac, int(port.addresses[0].ip), self._ident)
        if reply is None:
            self.not_answered += 1
            return None
        bucket = self._buckets.setdefault(npm, TokenBucket(RATE, BURST))
        if not bucket.take():
            self.rate_limited += 1
            return None
        self.sent += 1
        return reply
