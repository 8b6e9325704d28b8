"""Decoding of the IP packets NFQUEUE hands over (no link layer): IPv4, IPv6 and its extension
headers, TCP, UDP, SCTP, ICMP, ICMPv6.

Decoding never raises on bad input: a packet that cannot be decoded comes back with `error` set
(the reason, counted by the worker) and whatever layers were valid. Lengths are checked against the
buffer before every read.

IPv6 extension headers (RFC 8200 and the IANA registry: hop-by-hop, routing, fragment,
destination options, AH, mobility, HIP, shim6, the two experimental ones) are walked, at most 8,
to the upper-layer protocol, which is `proto`; ESP (50) and "no next header" (59) end the chain
as protocols of their own. A fragment header with offset 0 and M clear (an atomic fragment, RFC
6946) is not a fragment. The first fragment of a datagram decodes its L4 header (a UDP length
beyond the fragment is expected there); a later one has no L4 header (`first_fragment` False).

Not supported: IP options are skipped, not interpreted; IPv4/IPv6 fragments are not reassembled,
here or before the queue (the SPM keeps conntrack, and with it the kernel's defragmentation, off
its packets); IPv6 jumbograms (payload length 0); tunnels (GRE, IP-in-IP) are not decapsulated.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from spm.community_id import (
    PROTO_ICMP,
    PROTO_ICMP6,
    PROTO_SCTP,
    PROTO_TCP,
    PROTO_UDP,
    community_id,
)

# TCP flags
FIN = 0x01
SYN = 0x02
RST = 0x04
PSH = 0x08
ACK = 0x10
URG = 0x20
ECE = 0x40
CWR = 0x80

_IPV6_EXT = frozenset({0, 43, 44, 60, 51, 135, 139, 140, 253, 254})
_MAX_IPV6_EXT = 8

_IP4 = struct.Struct("!BBHHHBBH4s4s")
_IP6 = struct.Struct("!IHBB16s16s")
_TCP = struct.Struct("!HHIIBBH")
_PORTS = struct.Struct("!HH")
_ICMP_ECHO = struct.Struct("!BBHHH")


@dataclass(slots=True)
class Packet:
    """One decoded IP packet. Addresses are packed bytes (4 or 16)."""

    raw: bytes
    version: int = 0
    src: bytes = b""
    dst: bytes = b""
    proto: int = 0
    ttl: int = 0
    ip_id: int = 0
    fragment: bool = False  # any fragment (MF set or offset > 0)
    first_fragment: bool = True
    sport: int = 0
    dport: int = 0
    has_ports: bool = False
    tcp_flags: int = 0
    seq: int = 0
    ack: int = 0
    window: int = 0
    icmp_type: int = -1
    icmp_code: int = -1
    icmp_id: int = -1
    icmp_seq: int = -1
    payload: bytes = b""
    error: str | None = None

    @property
    def is_tcp(self) -> bool:
        return self.proto == PROTO_TCP and self.has_ports

    def community_id(self) -> str:
        """Community ID v1 of this packet's flow ("" when it has no IP layer)."""
        if not self.version:
            return ""
        if self.proto in (PROTO_ICMP, PROTO_ICMP6) and self.icmp_type >= 0:
            return community_id(self.proto, self.src, self.dst, self.icmp_type, self.icmp_code)
        if self.has_ports:
            return community_id(self.proto, self.src, self.dst, self.sport, self.dport)
        return community_id(self.proto, self.src, self.dst)


def decode(raw: bytes) -> Packet:
    """Decode an IP packet (the first nibble says v4 or v6)."""
    pkt = Packet(raw)
    if not raw:
        pkt.error = "empty"
        return pkt
    version = raw[0] >> 4
    if version == 4:
        off = _decode_ipv4(pkt, raw)
    elif version == 6:
        off = _decode_ipv6(pkt, raw)
    else:
        pkt.error = "bad_ip_version"
        return pkt
    if off < 0 or (pkt.fragment and not pkt.first_fragment):
        return pkt
    _decode_l4(pkt, pkt.raw, off)  # pkt.raw: without link-layer padding (Ethernet, in a pcap)
    return pkt


def _decode_ipv4(pkt: Packet, raw: bytes) -> int:
    if len(raw) < 20:
        pkt.error = "ipv4_truncated"
        return -1
    vihl, _tos, total, ident, frag, ttl, proto, _csum, src, dst = _IP4.unpack_from(raw)
    ihl: int = (vihl & 0x0F) * 4
    if ihl < 20:
        pkt.error = "ipv4_bad_ihl"
        return -1
    if total < ihl:
        pkt.error = "ipv4_bad_length"
        return -1
    if total > len(raw):  # snapped capture: decode what is there, but say so
        pkt.error = "ipv4_truncated"
        total = len(raw)
    pkt.version = 4
    pkt.src, pkt.dst, pkt.proto, pkt.ttl, pkt.ip_id = src, dst, proto, ttl, ident
    offset = frag & 0x1FFF
    if frag & 0x2000 or offset:
        pkt.fragment = True
        pkt.first_fragment = offset == 0
    pkt.raw = raw[:total] if total < len(raw) else raw  # drop link-layer padding
    return ihl


def _decode_ipv6(pkt: Packet, raw: bytes) -> int:
    if len(raw) < 40:
        pkt.error = "ipv6_truncated"
        return -1
    _vtcfl, plen, nxt, hlim, src, dst = _IP6.unpack_from(raw)
    end = 40 + plen
    if plen == 0:
        pkt.error = "ipv6_bad_length"
        return -1
    if end > len(raw):
        pkt.error = "ipv6_truncated"
        end = len(raw)
    pkt.version = 6
    pkt.src, pkt.dst, pkt.ttl = src, dst, hlim
    raw = raw[:end]
    pkt.raw = raw
    off = 40
    for _ in range(_MAX_IPV6_EXT):
        if nxt not in _IPV6_EXT:
            break
        if off + 8 > end:
            pkt.error = "ipv6_ext_truncated"
            pkt.proto = nxt
            return -1
        if nxt == 44:  # fragment header: offset (13 bits), 2 reserved, M
            frag = struct.unpack_from("!H", raw, off + 2)[0]
            offset = frag >> 3
            if offset or frag & 1:  # else an atomic fragment: the whole datagram
                pkt.fragment = True
                pkt.first_fragment = offset == 0
            pkt.ip_id = struct.unpack_from("!I", raw, off + 4)[0]
            hlen = 8
        elif nxt == 51:  # AH: length in 4-octet units minus 2
            hlen = (raw[off + 1] + 2) * 4
        else:
            hlen = (raw[off + 1] + 1) * 8
        nxt = raw[off]
        off += hlen
        if off > end:
            pkt.error = "ipv6_ext_truncated"
            pkt.proto = nxt
            return -1
    else:
        pkt.error = "ipv6_too_many_ext"
        return -1
    pkt.proto = nxt
    return off


def _decode_l4(pkt: Packet, raw: bytes, off: int) -> None:
    proto = pkt.proto
    left = len(raw) - off
    if proto == PROTO_TCP:
        if left < 20:
            pkt.error = "tcp_truncated"
            return
        sport, dport, seq, ack, doff, flags, window = _TCP.unpack_from(raw, off)
        hlen = (doff >> 4) * 4
        if hlen < 20 or hlen > left:
            pkt.error = "tcp_bad_offset"
            return
        pkt.sport, pkt.dport, pkt.seq, pkt.ack = sport, dport, seq, ack
        pkt.tcp_flags, pkt.window, pkt.has_ports = flags, window, True
        pkt.payload = raw[off + hlen :]
    elif proto in (PROTO_UDP, PROTO_SCTP):
        hdr = 8 if proto == PROTO_UDP else 12
        if left < hdr:
            pkt.error = "udp_truncated" if proto == PROTO_UDP else "sctp_truncated"
            return
        pkt.sport, pkt.dport = _PORTS.unpack_from(raw, off)
        pkt.has_ports = True
        if proto == PROTO_UDP:
            ulen = struct.unpack_from("!H", raw, off + 4)[0]
            if ulen < 8 or (ulen > left and not pkt.fragment):  # a first fragment: the rest later
                pkt.error = "udp_bad_length"
                return
            pkt.payload = raw[off + 8 : off + ulen]
        else:
            pkt.payload = raw[off + 12 :]
    elif proto in (PROTO_ICMP, PROTO_ICMP6):
        if left < 8:
            pkt.error = "icmp_truncated"
            return
        itype, code, _csum, ident, seq = _ICMP_ECHO.unpack_from(raw, off)
        pkt.icmp_type, pkt.icmp_code = itype, code
        pkt.icmp_id, pkt.icmp_seq = ident, seq
        pkt.payload = raw[off + 8 :]
    else:
        pkt.payload = raw[off:]


def flow_key(pkt: Packet) -> tuple[int, bytes, int, bytes, int]:
    """A direction-agnostic key (proto, low addr, low port, high addr, high port)."""
    a = (pkt.src, pkt.sport)
    b = (pkt.dst, pkt.dport)
    if b < a:
        a, b = b, a
    return (pkt.proto, a[0], a[1], b[0], b[1])


def flow_id(raw: bytes) -> tuple[str, bytes, bytes]:
    """What the dispatcher needs, cheaply: (Community ID, src, dst); ("", b"", b"") when the
    packet has no IP header worth hashing. IPv4 without options and IPv6 without extension
    headers take a fast path; anything else goes through `decode`."""
    n = len(raw)
    if n >= 20 and raw[0] == 0x45:
        proto = raw[9]
        src, dst = raw[12:16], raw[16:20]
        frag = (raw[6] << 8 | raw[7]) & 0x3FFF
        if frag == 0 and proto in (PROTO_TCP, PROTO_UDP, PROTO_SCTP) and n >= 24:
            sport, dport = _PORTS.unpack_from(raw, 20)
            return community_id(proto, src, dst, sport, dport), src, dst
        if frag == 0 and proto == PROTO_ICMP and n >= 22:
            return community_id(proto, src, dst, raw[20], raw[21]), src, dst
    elif n >= 44 and raw[0] >> 4 == 6:
        proto = raw[6]
        src, dst = raw[8:24], raw[24:40]
        if proto in (PROTO_TCP, PROTO_UDP, PROTO_SCTP):
            sport, dport = _PORTS.unpack_from(raw, 40)
            return community_id(proto, src, dst, sport, dport), src, dst
        if proto == PROTO_ICMP6:
            return community_id(proto, src, dst, raw[40], raw[41]), src, dst
    pkt = decode(raw)
    if not pkt.version:
        return "", b"", b""
    return pkt.community_id(), pkt.src, pkt.dst
