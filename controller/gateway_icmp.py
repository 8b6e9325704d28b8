"""ICMP the gateway itself sends to inside hosts (RFC 792, RFC 1812 section 4.3.2): a time
exceeded for a packet whose TTL ran out at the gateway (traceroute and mtr show the gateway's
hop), a destination unreachable for one that no route takes (host unreachable inside a network
of the gateway's ports, where the host is not a neighbour; net unreachable elsewhere), and the
echo reply to a ping of one of the gateway's own addresses.

The NPM sends such a packet to the CPM as it arrived (packet-in reason `TTL_EXPIRED` or
`NO_ROUTE`, before any session or NAT, metered like every packet-in). The answer goes back out of
the port it came in on, from the gateway's MAC on that port to the sender's MAC (an 802.1Q tag
kept); an error comes from the port's first address and quotes as much of the packet as fits in
576 bytes (RFC 1812 4.3.2.3). As RFC 1812 4.3.2.7 asks, there is no error about an ICMP error, a
fragment other than the first, or a packet from an address that is not one host's (0.0.0.0,
loopback, multicast, broadcast, one of the gateway's own); and at most `RATE` answers a second per
NPM (a burst of `BURST`), as Linux's icmp_msgs_per_sec limits its own.

IPv6 packet-ins get the ICMPv6 answers of `controller.gateway_icmp6` (RFC 4443), under the same
rate limit.
"""

from __future__ import annotations

import ipaddress
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from controller import gateway_icmp6 as icmp6
from controller.policy import Policy
from opengate import p4constants as pc
from opengate.inet import internet_checksum, ipv4_packet

ETHERTYPE_VLAN = 0x8100
ICMP_TIME_EXCEEDED = 11
UNREACHABLE, UNREACHABLE_NET, UNREACHABLE_HOST = 3, 0, 1
# ICMP types that are errors (no error is sent about them): unreachable, source quench,
# redirect, time exceeded, parameter problem.
ICMP_ERRORS = frozenset({3, 4, 5, 11, 12})
MAX_ERROR = 576  # the error's whole IPv4 datagram at most (RFC 1812 4.3.2.3)
RATE = 1000.0
BURST = 50.0


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
    stamp: float = field(default_factory=time.monotonic)
    tokens: float = field(init=False)

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


@dataclass(frozen=True, slots=True)
class Received:
    """What the answer needs of a packet-in's frame."""

    sender_mac: bytes
    vlan: bytes  # the 802.1Q tag, or b""
    datagram: bytes  # the IPv4 datagram, without Ethernet padding
    ihl: int

    @property
    def source(self) -> int:
        return int.from_bytes(self.datagram[12:16], "big")

    @property
    def destination(self) -> int:
        return int.from_bytes(self.datagram[16:20], "big")


def received(frame: bytes) -> Received | None:
    """The frame's IPv4 datagram and where it came from; None if it has none."""
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
    return Received(frame[6:12], vlan, frame[ip : ip + min(total, len(frame) - ip)], ihl)


def _frame(packet: Received, port_mac: int, ip_packet: bytes) -> bytes:
    return packet.sender_mac + port_mac.to_bytes(6, "big") + packet.vlan + b"\x08\x00" + ip_packet


def icmp_error(
    frame: bytes, port_mac: int, port_address: int, ident: int, kind: int, code: int = 0
) -> bytes | None:
    """The ICMP error `kind`/`code` about `frame`, from `port_mac` / `port_address`; None where
    none may be sent (RFC 1812 4.3.2.7)."""
    packet = received(frame)
    if packet is None:
        return None
    datagram = packet.datagram
    if struct.unpack_from("!H", datagram, 6)[0] & 0x1FFF:
        return None  # not the first fragment
    if datagram[9] == pc.IP_PROTO_ICMP and (
        len(datagram) <= packet.ihl or datagram[packet.ihl] in ICMP_ERRORS
    ):
        return None  # an error about an error, or an ICMP packet without its type
    if not _sender_is_a_host(packet.source) or packet.source == port_address:
        return None
    icmp = struct.pack("!BBHI", kind, code, 0, 0) + datagram[: MAX_ERROR - 20 - 8]
    icmp = icmp[:2] + struct.pack("!H", internet_checksum(icmp)) + icmp[4:]
    # DSCP CS6 (network control), as routers mark their own ICMP
    return _frame(
        packet,
        port_mac,
        ipv4_packet(port_address, packet.source, pc.IP_PROTO_ICMP, icmp, ident, 0xC0),
    )


def time_exceeded(frame: bytes, port_mac: int, port_address: int, ident: int) -> bytes | None:
    """The time exceeded (code 0, TTL exceeded in transit) for `frame`."""
    return icmp_error(frame, port_mac, port_address, ident, ICMP_TIME_EXCEEDED)


def echo_reply(frame: bytes, port_mac: int, ident: int) -> bytes | None:
    """The echo reply to `frame` if it is an echo request (from its destination, with its
    identifier, sequence number and data); None otherwise."""
    packet = received(frame)
    if packet is None or packet.ihl != 20 or not _sender_is_a_host(packet.source):
        return None
    datagram = packet.datagram
    if datagram[9] != pc.IP_PROTO_ICMP or len(datagram) < 28 or datagram[20:22] != b"\x08\x00":
        return None
    icmp = b"\x00\x00\x00\x00" + datagram[24:]
    icmp = icmp[:2] + struct.pack("!H", internet_checksum(icmp)) + icmp[4:]
    ip_packet = ipv4_packet(packet.destination, packet.source, pc.IP_PROTO_ICMP, icmp, ident)
    return _frame(packet, port_mac, ip_packet)


@dataclass(slots=True)
class GatewayIcmp:
    """Answers the NPMs' `TTL_EXPIRED` and `NO_ROUTE` packet-ins, at most RATE a second per
    NPM; counts what it sent by kind."""

    sent: dict[str, int] = field(
        default_factory=lambda: {"time_exceeded": 0, "unreachable": 0, "echo_reply": 0}
    )
    not_answered: int = 0  # no answer may be sent about it, or the port has no address
    rate_limited: int = 0
    clock: Callable[[], float] = time.monotonic  # the rate limit's (a test's own)
    _buckets: dict[str, TokenBucket] = field(default_factory=dict)
    _ident: int = 0

    def answer(
        self, policy: Policy, npm: str, ingress_port: int, reason: int, frame: bytes
    ) -> bytes | None:
        """The frame to send out of `ingress_port` (its MAC and address from `policy`) for the
        packet-in `frame` with CPU reason `reason`, or None."""
        port = policy.port(ingress_port)
        packet = received(frame)
        reply: bytes | None = None
        kind = ""
        packet6 = icmp6.received6(frame) if packet is None else None
        if port is not None and port.mac is not None and port.addresses6 and packet6 is not None:
            own6 = {int(a.ip) for p in policy.ports for a in p.addresses6}
            address6 = int(port.addresses6[0].ip)
            if reason == pc.CPU_REASON_TTL_EXPIRED:
                kind = "time_exceeded"
                reply = icmp6.time_exceeded6(frame, port.mac, address6, own6)
            elif packet6.destination in own6:
                kind, reply = "echo_reply", icmp6.echo6_reply(frame, port.mac)
            elif reason == pc.CPU_REASON_NO_ROUTE:
                kind, reply = "unreachable", icmp6.unreachable6(frame, port.mac, address6, own6)
        elif port is not None and port.mac is not None and port.addresses and packet is not None:
            self._ident += 1
            own = {int(a.ip) for p in policy.ports for a in p.addresses}
            address = int(port.addresses[0].ip)
            if reason == pc.CPU_REASON_TTL_EXPIRED:
                kind, reply = "time_exceeded", time_exceeded(frame, port.mac, address, self._ident)
            elif packet.destination in own:
                kind, reply = "echo_reply", echo_reply(frame, port.mac, self._ident)
            elif reason == pc.CPU_REASON_NO_ROUTE:
                destination = ipaddress.IPv4Address(packet.destination)
                connected = any(destination in a.network for p in policy.ports for a in p.addresses)
                code = UNREACHABLE_HOST if connected else UNREACHABLE_NET
                kind = "unreachable"
                reply = icmp_error(frame, port.mac, address, self._ident, UNREACHABLE, code)
        if reply is None:
            self.not_answered += 1
            return None
        now = self.clock()
        bucket = self._buckets.get(npm)
        if bucket is None:
            bucket = self._buckets[npm] = TokenBucket(RATE, BURST, stamp=now)
        if not bucket.take(now):
            self.rate_limited += 1
            return None
        self.sent[kind] += 1
        return reply
