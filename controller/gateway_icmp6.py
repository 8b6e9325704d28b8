"""ICMPv6 the gateway itself sends to inside hosts (RFC 4443): a time exceeded (type 3, code 0)
for a packet whose hop limit runs out at the gateway, a destination unreachable (type 1, code 0,
no route to destination) for one that no route takes, and the echo reply (129) to an echo request
(128) for one of the gateway's own IPv6 addresses. `controller.gateway_icmp.GatewayIcmp` answers
with these, rate-limited with the IPv4 answers.

An error comes from the ingress port's first global address and quotes as much of the packet as
fits without the error exceeding the minimum IPv6 MTU, 1280 bytes (RFC 4443 section 2.4 (c)); it
goes back out of the port the packet came in on, from the port's MAC to the sender's (an 802.1Q
tag kept). As RFC 4443 section 2.4 (e) asks, there is no error about an ICMPv6 error, a packet to
a multicast address or sent as link-layer multicast, or a packet from an address that is not one
host's (unspecified, loopback, multicast, one of the gateway's own); nor about a fragment after
the first (no upper-layer header to judge it by). The ICMPv6 checksum covers the pseudo-header
(RFC 8200 section 8.1).
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Container
from dataclasses import dataclass

from controller.session_model import upper_layer6
from opengate import p4constants as pc
from opengate.inet import internet_checksum

ETHERTYPE_VLAN = 0x8100
ICMPV6_UNREACHABLE = 1
UNREACHABLE_NO_ROUTE = 0
ICMPV6_TIME_EXCEEDED = 3
HOP_LIMIT_EXCEEDED = 0
MIN_MTU = 1280  # the error's whole IPv6 packet at most (RFC 4443 2.4 (c))
HEADER = 40
HOP_LIMIT = 64
TRAFFIC_CLASS_CS6 = 0xC0  # network control, as routers mark their own ICMP


@dataclass(frozen=True, slots=True)
class Received6:
    """What an answer needs of a packet-in's IPv6 frame."""

    sender_mac: bytes
    multicast_mac: bool  # sent to a link-layer multicast (or broadcast) address
    vlan: bytes  # the 802.1Q tag, or b""
    packet: bytes  # the IPv6 packet, without Ethernet padding

    @property
    def source(self) -> int:
        return int.from_bytes(self.packet[8:24], "big")

    @property
    def destination(self) -> int:
        return int.from_bytes(self.packet[24:40], "big")


def received6(frame: bytes) -> Received6 | None:
    """The frame's IPv6 packet and where it came from; None if it has none."""
    offset = 12
    vlan = b""
    if len(frame) >= 18 and struct.unpack_from("!H", frame, offset)[0] == ETHERTYPE_VLAN:
        vlan = frame[12:16]
        offset = 16
    if len(frame) < offset + 2 + HEADER:
        return None
    if struct.unpack_from("!H", frame, offset)[0] != pc.ETHERTYPE_IPV6:
        return None
    ip = offset + 2
    if frame[ip] >> 4 != 6:
        return None
    length = HEADER + struct.unpack_from("!H", frame, ip + 4)[0]
    packet = frame[ip : ip + min(length, len(frame) - ip)]
    return Received6(frame[6:12], bool(frame[0] & 1), vlan, packet)


def _is_a_host(address: int) -> bool:
    addr = ipaddress.IPv6Address(address)
    return not (addr.is_unspecified or addr.is_loopback or addr.is_multicast)


def ipv6_packet(
    source: int,
    destination: int,
    next_header: int,
    payload: bytes,
    hop_limit: int = HOP_LIMIT,
    traffic_class: int = 0,
) -> bytes:
    """An IPv6 header (no extension headers) and `payload`."""
    first = (6 << 28) | (traffic_class << 20)
    return (
        struct.pack("!IHBB", first, len(payload), next_header, hop_limit)
        + source.to_bytes(16, "big")
        + destination.to_bytes(16, "big")
        + payload
    )


def icmpv6_message(source: int, destination: int, kind: int, code: int, body: bytes) -> bytes:
    """An ICMPv6 message with its checksum over the pseudo-header (source, destination,
    upper-layer length, next header 58) and the message."""
    message = struct.pack("!BBH", kind, code, 0) + body
    pseudo = (
        source.to_bytes(16, "big")
        + destination.to_bytes(16, "big")
        + struct.pack("!IxxxB", len(message), pc.IP_PROTO_ICMPV6)
    )
    checksum = internet_checksum(pseudo + message)
    return message[:2] + struct.pack("!H", checksum) + message[4:]


def _frame(packet: Received6, port_mac: int, ip_packet: bytes) -> bytes:
    return (
        packet.sender_mac
        + port_mac.to_bytes(6, "big")
        + packet.vlan
        + struct.pack("!H", pc.ETHERTYPE_IPV6)
        + ip_packet
    )


def icmp6_error(
    frame: bytes,
    port_mac: int,
    port_address: int,
    kind: int,
    code: int = 0,
    own: Container[int] = (),
) -> bytes | None:
    """The ICMPv6 error `kind`/`code` about `frame`, from `port_mac` / `port_address`; None
    where none may be sent (RFC 4443 2.4 (e)). `own`: the gateway's addresses."""
    packet = received6(frame)
    if packet is None or packet.multicast_mac:
        return None
    if ipaddress.IPv6Address(packet.destination).is_multicast:
        return None
    source = packet.source
    if not _is_a_host(source) or source == port_address or source in own:
        return None
    upper = upper_layer6(packet.packet, 0)
    if upper is None:
        return None  # a later fragment, or a chain cut short
    proto, at = upper
    if proto == pc.IP_PROTO_ICMPV6 and (len(packet.packet) <= at or packet.packet[at] < 128):
        return None  # an error about an error, or an ICMPv6 packet without its type
    quoted = packet.packet[: MIN_MTU - HEADER - 8]
    icmp = icmpv6_message(port_address, source, kind, code, bytes(4) + quoted)
    ip_packet = ipv6_packet(
        port_address, source, pc.IP_PROTO_ICMPV6, icmp, traffic_class=TRAFFIC_CLASS_CS6
    )
    return _frame(packet, port_mac, ip_packet)


def time_exceeded6(
    frame: bytes, port_mac: int, port_address: int, own: Container[int] = ()
) -> bytes | None:
    """The time exceeded (code 0, hop limit exceeded in transit) for `frame`."""
    return icmp6_error(frame, port_mac, port_address, ICMPV6_TIME_EXCEEDED, HOP_LIMIT_EXCEEDED, own)


def unreachable6(
    frame: bytes, port_mac: int, port_address: int, own: Container[int] = ()
) -> bytes | None:
    """The destination unreachable (code 0, no route to destination) for `frame`."""
    return icmp6_error(frame, port_mac, port_address, ICMPV6_UNREACHABLE, UNREACHABLE_NO_ROUTE, own)


def echo6_reply(frame: bytes, port_mac: int) -> bytes | None:
    """The echo reply to `frame` if it is an echo request without extension headers (from its
    destination, with its identifier, sequence number and data); None otherwise."""
    packet = received6(frame)
    if packet is None or packet.multicast_mac or not _is_a_host(packet.source):
        return None
    data = packet.packet
    if data[6] != pc.IP_PROTO_ICMPV6 or len(data) < HEADER + 8:
        return None
    if data[HEADER] != pc.ICMPV6_ECHO_REQUEST or data[HEADER + 1] != 0:
        return None
    body = data[HEADER + 4 :]  # identifier, sequence number, data
    icmp = icmpv6_message(packet.destination, packet.source, pc.ICMPV6_ECHO_REPLY, 0, body)
    ip_packet = ipv6_packet(packet.destination, packet.source, pc.IP_PROTO_ICMPV6, icmp)
    return _frame(packet, port_mac, ip_packet)
