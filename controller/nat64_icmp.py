"""ICMPv4 errors about NAT64 flows, translated to ICMPv6 for the inside host (RFC 7915 section
4.2, the quoted packet as section 4.3 says; RFC 6146 section 3.5.3).

The NPM sends an ICMPv4 error whose quoted packet belongs to a NAT64 session to the CPM
(CPU_REASON_NAT64_ICMP_ERROR, metered like every packet-in): a port unreachable for a UDP
datagram, a time exceeded from a traceroute, and the fragmentation needed that path MTU discovery
through the translator lives on. `translate` builds the ICMPv6 error:

- the outer header from the ICMPv4 error's: from the error's source synthesized with the
  session's NAT64 prefix (RFC 6052), to the inside host, the traffic class the TOS, the hop
  limit the TTL less one (an error whose TTL runs out here is dropped);
- the type and code by section 4.2's table; a fragmentation needed becomes a packet too big
  whose MTU is the advertised MTU plus 20 (the headers' difference; the NPM knows no link MTU),
  or, where the router gave 0, the largest RFC 1191 plateau below the quoted packet's length
  (1280 at least), plus 20; a parameter problem's pointer is mapped by section 4.2's figure 3;
- the quoted packet translated back to what the inside host sent: the IPv6 header of the
  session's original direction, the inside host's port (or echo identifier) restored, the echo
  request's type 128, and the quoted transport checksum updated for the new pseudo-header and
  port (RFC 1624) where the quote holds it;
- the whole error at most 1280 bytes (RFC 4443 section 2.4 (c)), out of the session's IPv6
  route.

Anything else (section 4.2's "silently drop": source quench, host precedence violation, a
missing required option, unknown types and codes; a quote cut shorter than its IPv4 header and
8 bytes; an error about no NAT64 session) is dropped and counted by why.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from controller.gateway_icmp6 import MIN_MTU, icmpv6_message, ipv6_packet
from controller.session_model import Session
from controller.session_nat64 import nat64_routes
from opengate import p4constants as pc

if TYPE_CHECKING:
    from controller.sessions import SessionManager

ETHERTYPE_VLAN = 0x8100
IPV4_HEADER = 20
IPV6_HEADER = 40
ICMP_HEADER = 8
PREFIX96_MASK = ((1 << 128) - 1) ^ 0xFFFFFFFF
HEADER_DIFFERENCE = IPV6_HEADER - IPV4_HEADER

ICMP_UNREACHABLE, ICMP_TIME_EXCEEDED, ICMP_PARAMETER_PROBLEM = 3, 11, 12
ICMP_FRAGMENTATION_NEEDED = 4
ICMPV6_UNREACHABLE, ICMPV6_PACKET_TOO_BIG = 1, 2
ICMPV6_TIME_EXCEEDED, ICMPV6_PARAMETER_PROBLEM = 3, 4

# RFC 7915 section 4.2, destination unreachable: ICMPv4 code -> (ICMPv6 type, code). Codes 4
# (fragmentation needed), 2 (protocol unreachable: a parameter problem pointing at the next
# header) are built apart; 14 and anything unlisted is dropped.
UNREACHABLE_CODES: dict[int, tuple[int, int]] = {
    0: (ICMPV6_UNREACHABLE, 0),
    1: (ICMPV6_UNREACHABLE, 0),
    3: (ICMPV6_UNREACHABLE, 4),
    5: (ICMPV6_UNREACHABLE, 0),
    6: (ICMPV6_UNREACHABLE, 0),
    7: (ICMPV6_UNREACHABLE, 0),
    8: (ICMPV6_UNREACHABLE, 0),
    9: (ICMPV6_UNREACHABLE, 1),
    10: (ICMPV6_UNREACHABLE, 1),
    11: (ICMPV6_UNREACHABLE, 0),
    12: (ICMPV6_UNREACHABLE, 0),
    13: (ICMPV6_UNREACHABLE, 1),
    15: (ICMPV6_UNREACHABLE, 1),
}
PROTOCOL_UNREACHABLE = 2
NEXT_HEADER_POINTER = 6  # the IPv6 header's next header field
# RFC 7915 section 4.2, figure 3: an IPv4 header's byte -> the IPv6 header's; others dropped.
POINTERS: dict[int, int] = {
    0: 0, 1: 1, 2: 4, 3: 4, 8: 7, 9: 6,
    **{n: 8 for n in range(12, 16)},
    **{n: 24 for n in range(16, 20)},
}  # fmt: skip
PARAMETER_CODES = (0, 2)  # pointer indicates the error; bad length (1: missing option: dropped)
# RFC 1191 section 7's plateaus, for a fragmentation needed without an MTU.
PLATEAUS = (65535, 32000, 17914, 8166, 4352, 2002, 1492, 1006, 508, 296, 68)

RESULTS = (
    "translated",
    "no_session",
    "truncated",
    "ttl_expired",
    "untranslatable",
)


def _unpack(data: bytes) -> tuple[int, ...]:
    if len(data) % 2:
        data += b"\x00"
    return struct.unpack(f"!{len(data) // 2}H", data)


def adjust_checksum(checksum: int, removed: bytes, added: bytes) -> int:
    """RFC 1624 equation 3: the checksum after the 16-bit words of `removed` became those of
    `added`."""
    total = (~checksum & 0xFFFF) + sum(~w & 0xFFFF for w in _unpack(removed)) + sum(_unpack(added))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def plateau_mtu(total_length: int) -> int:
    """The IPv4 path MTU to assume for a fragmentation needed without one (RFC 7915 4.2:
    the largest plateau below the quoted packet's total length, 1280 at least)."""
    return next((p for p in PLATEAUS if MIN_MTU <= p < total_length), MIN_MTU)


def icmpv6_kind(
    kind: int, code: int, rest: bytes, quoted_length: int
) -> tuple[int, int, int] | None:
    """(ICMPv6 type, code, the 32-bit field after the checksum) for the ICMPv4 error `kind`,
    `code` whose 4 bytes after the checksum are `rest`; None: section 4.2 drops it."""
    if kind == ICMP_UNREACHABLE and code == ICMP_FRAGMENTATION_NEEDED:
        mtu = struct.unpack_from("!H", rest, 2)[0] or plateau_mtu(quoted_length)
        return ICMPV6_PACKET_TOO_BIG, 0, mtu + HEADER_DIFFERENCE
    if kind == ICMP_UNREACHABLE and code == PROTOCOL_UNREACHABLE:
        return ICMPV6_PARAMETER_PROBLEM, 1, NEXT_HEADER_POINTER
    if kind == ICMP_UNREACHABLE and code in UNREACHABLE_CODES:
        return (*UNREACHABLE_CODES[code], 0)
    if kind == ICMP_TIME_EXCEEDED and code in (0, 1):
        return ICMPV6_TIME_EXCEEDED, code, 0
    if kind == ICMP_PARAMETER_PROBLEM and code in PARAMETER_CODES and rest[0] in POINTERS:
        return ICMPV6_PARAMETER_PROBLEM, 0, POINTERS[rest[0]]
    return None


@dataclass(frozen=True, slots=True)
class Error4:
    """An ICMPv4 error as a packet-in brought it."""

    vlan: bytes  # the 802.1Q tag, or b""
    tos: int
    ttl: int
    source: int  # the router (or host) that sent the error
    kind: int
    code: int
    rest: bytes  # the 4 bytes after the checksum
    quoted: bytes  # the quoted IPv4 header (20 bytes) and what follows it

    @property
    def quoted_key(self) -> tuple[int, int, int, int, int] | None:
        """The quoted packet's flow as its reply is keyed: (its destination, its source,
        protocol, destination port, source port), an echo request's identifier as the last
        (the NPM's parser: parse_quoted_l4, parse_quoted_echo)."""
        q = self.quoted
        proto = q[9]
        src, dst = struct.unpack_from("!II", q, 12)
        l4 = q[IPV4_HEADER:]
        if proto in (pc.IP_PROTO_TCP, pc.IP_PROTO_UDP):
            sport, dport = struct.unpack_from("!HH", l4, 0)
            return (dst, src, proto, dport, sport)
        if proto == pc.IP_PROTO_ICMP and l4[0] == pc.ICMP_ECHO_REQUEST:
            return (dst, src, proto, 0, struct.unpack_from("!H", l4, 4)[0])
        return None


def parse_error4(frame: bytes) -> Error4 | None:
    """The frame's ICMPv4 error with a quote of an option-less IPv4 header and 8 bytes at least;
    None if it is not one."""
    offset = 12
    vlan = b""
    if len(frame) >= 18 and struct.unpack_from("!H", frame, offset)[0] == ETHERTYPE_VLAN:
        vlan, offset = frame[12:16], 16
    ip = offset + 2
    if len(frame) < ip + IPV4_HEADER + ICMP_HEADER + IPV4_HEADER + 8:
        return None
    if struct.unpack_from("!H", frame, offset)[0] != pc.ETHERTYPE_IPV4 or frame[ip] != 0x45:
        return None
    total = struct.unpack_from("!H", frame, ip + 2)[0]
    packet = frame[ip : ip + total]
    if frame[ip + 9] != pc.IP_PROTO_ICMP or len(packet) < IPV4_HEADER + ICMP_HEADER + 28:
        return None
    icmp = packet[IPV4_HEADER:]
    quoted = icmp[ICMP_HEADER:]
    if quoted[0] != 0x45:
        return None
    return Error4(
        vlan=vlan,
        tos=packet[1],
        ttl=packet[8],
        source=struct.unpack_from("!I", packet, 12)[0],
        kind=icmp[0],
        code=icmp[1],
        rest=icmp[4:8],
        quoted=quoted,
    )


def _inner(error: Error4, session: Session) -> bytes:
    """The quoted IPv4 packet as the inside host sent it: its IPv6 header, the transport's
    port (identifier) and checksum restored, what the quote holds of the rest."""
    q = error.quoted
    proto4 = q[9]
    quoted_total = struct.unpack_from("!H", q, 2)[0]
    nat_src, server = q[12:16], q[16:20]
    inside, server6 = session.key[0], session.key[1]
    inside_port = session.key[3]
    l4 = bytearray(q[IPV4_HEADER:])
    pseudo6 = inside.to_bytes(16, "big") + server6.to_bytes(16, "big")
    if proto4 in (pc.IP_PROTO_TCP, pc.IP_PROTO_UDP):
        at = 16 if proto4 == pc.IP_PROTO_TCP else 6
        old_port = bytes(l4[0:2])
        l4[0:2] = inside_port.to_bytes(2, "big")
        if len(l4) >= at + 2:
            checksum = struct.unpack_from("!H", l4, at)[0]
            if proto4 == pc.IP_PROTO_TCP or checksum != 0:  # UDP's 0: none (IPv6 needs one)
                new = adjust_checksum(checksum, nat_src + server + old_port, pseudo6 + l4[0:2])
                if proto4 == pc.IP_PROTO_UDP and new == 0:
                    new = 0xFFFF
                struct.pack_into("!H", l4, at, new)
        next_header = proto4
    else:  # an echo request (Error4.quoted_key)
        old = bytes(l4[0:2]) + bytes(l4[4:6])
        l4[0] = pc.ICMPV6_ECHO_REQUEST
        l4[4:6] = inside_port.to_bytes(2, "big")
        length = max(quoted_total - IPV4_HEADER, 0)
        pseudo = pseudo6 + struct.pack("!IxxxB", length, pc.IP_PROTO_ICMPV6)
        checksum = struct.unpack_from("!H", l4, 2)[0]
        new_words = bytes(l4[0:2]) + bytes(l4[4:6])
        struct.pack_into("!H", l4, 2, adjust_checksum(checksum, old, pseudo + new_words))
        next_header = pc.IP_PROTO_ICMPV6
    header = ipv6_packet(
        inside,
        server6,
        next_header,
        b"",
        hop_limit=q[8],
        traffic_class=q[1],
    )
    header = header[:4] + struct.pack("!H", max(quoted_total - IPV4_HEADER, 0)) + header[6:]
    return header + bytes(l4)


def translate(frame: bytes, session: Session) -> tuple[bytes | None, str]:
    """(the ICMPv6 error frame for the inside host, "translated"), or (None, why not), for
    the ICMPv4 error `frame` about NAT64 `session`'s flow."""
    error = parse_error4(frame)
    if error is None:
        return None, "truncated"
    routes = session.nat64
    if routes is None or session.nat_kind != pc.NAT_64:
        return None, "no_session"
    if error.ttl <= 1:
        return None, "ttl_expired"
    quoted_total = struct.unpack_from("!H", error.quoted, 2)[0]
    kind = icmpv6_kind(error.kind, error.code, error.rest, quoted_total)
    if kind is None:
        return None, "untranslatable"
    kind6, code6, field6 = kind
    source = (session.key[1] & PREFIX96_MASK) | error.source
    inside = session.key[0]
    inner = _inner(error, session)[: MIN_MTU - IPV6_HEADER - ICMP_HEADER]
    icmp = icmpv6_message(source, inside, kind6, code6, struct.pack("!I", field6) + inner)
    packet = ipv6_packet(
        source,
        inside,
        pc.IP_PROTO_ICMPV6,
        icmp,
        hop_limit=error.ttl - 1,
        traffic_class=error.tos,
    )
    ethernet = (
        routes.v6_next_hop_mac.to_bytes(6, "big")
        + routes.v6_router_mac.to_bytes(6, "big")
        + error.vlan
        + struct.pack("!H", pc.ETHERTYPE_IPV6)
    )
    return ethernet + packet, "translated"


@dataclass(slots=True)
class Nat64IcmpErrors:
    """Counts what became of the NPMs' NAT64_ICMP_ERROR packet-ins, by result (RESULTS), in
    `counts` and in the metric `counter` (labels npm, result)."""

    counter: Any = None
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RESULTS, 0))

    def answer(self, manager: SessionManager, npm: str, frame: bytes) -> bytes | None:
        """Translate the packet-in `frame` of `npm` and send it out of its session's IPv6 port
        (the session found by the reply key of the quoted packet among `manager`'s); the frame
        sent, or None (counted by why)."""
        error = parse_error4(frame)
        key = error.quoted_key if error is not None else None
        session = manager.find(npm, key) if key is not None else None
        if session is not None and session.nat_kind == pc.NAT_64 and session.nat64 is None:
            session.nat64 = nat64_routes(manager.policy, session.key)
        reply: bytes | None = None
        if error is None:
            result = "truncated"
        elif key is None:
            result = "untranslatable"
        elif session is None or session.nat_kind != pc.NAT_64 or session.nat64 is None:
            result = "no_session"
        else:
            reply, result = translate(frame, session)
        self.counts[result] += 1
        if self.counter is not None:
            self.counter.labels(npm, result).inc()
        if reply is not None and session is not None and session.nat64 is not None:
            manager.npms[npm].packet_out(reply, submit_to_ingress=False, port=session.nat64.v6_port)
            manager.stats.packet_outs += 1
        return reply
