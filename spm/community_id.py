"""Community ID v1 flow hashing (corelight/community-id-spec).

The flow id is direction-agnostic: both directions of a TCP/UDP/SCTP flow, an ICMP echo and its
reply, hash to the same string. Used by the dispatcher to keep a flow on one worker and in alerts.

Not supported: nothing of the spec is left out; non-IP packets have no Community ID.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import struct

PROTO_ICMP = 1
PROTO_TCP = 6
PROTO_UDP = 17
PROTO_ICMP6 = 58
PROTO_SCTP = 132

_PORT_PROTOS = frozenset({PROTO_TCP, PROTO_UDP, PROTO_SCTP, PROTO_ICMP, PROTO_ICMP6})

# ICMP type -> the type of its counterpart (request <-> reply), per the spec.
_ICMP4_PAIRS = {8: 0, 0: 8, 13: 14, 14: 13, 15: 16, 16: 15, 10: 9, 9: 10, 17: 18, 18: 17}
_ICMP6_PAIRS = {
    128: 129,
    129: 128,
    133: 134,
    134: 133,
    135: 136,
    136: 135,
    130: 131,
    131: 130,
    144: 145,
    145: 144,
}


def _icmp_ports(proto: int, itype: int, code: int) -> tuple[int, int, bool]:
    """(sport, dport, one_way) for an ICMP type/code, as the spec maps them."""
    pairs = _ICMP4_PAIRS if proto == PROTO_ICMP else _ICMP6_PAIRS
    other = pairs.get(itype)
    if other is None:
        return itype, code, True
    return itype, other, False


def community_id(
    proto: int,
    saddr: bytes,
    daddr: bytes,
    sport: int | None = None,
    dport: int | None = None,
    *,
    seed: int = 0,
    use_base64: bool = True,
) -> str:
    """The Community ID of a flow. Addresses are packed (4 or 16 bytes); for ICMP/ICMPv6 `sport`
    is the type and `dport` the code."""
    if len(saddr) != len(daddr) or len(saddr) not in (4, 16):
        raise ValueError("addresses must both be IPv4 (4 bytes) or IPv6 (16 bytes)")
    one_way = False
    has_ports = proto in _PORT_PROTOS and sport is not None and dport is not None
    sp = dp = 0
    if has_ports:
        assert sport is not None and dport is not None
        sp, dp = sport, dport
        if proto in (PROTO_ICMP, PROTO_ICMP6):
            sp, dp, one_way = _icmp_ports(proto, sp, dp)
    if not one_way and (saddr > daddr or (saddr == daddr and sp > dp)):
        saddr, daddr, sp, dp = daddr, saddr, dp, sp
    data = struct.pack("!H", seed & 0xFFFF) + saddr + daddr + struct.pack("!BB", proto, 0)
    if has_ports:
        data += struct.pack("!HH", sp, dp)
    digest = hashlib.sha1(data, usedforsecurity=False).digest()
    text = base64.b64encode(digest).decode("ascii") if use_base64 else digest.hex()
    return "1:" + text


def community_id_str(
    proto: int,
    saddr: str,
    daddr: str,
    sport: int | None = None,
    dport: int | None = None,
    *,
    seed: int = 0,
    use_base64: bool = True,
) -> str:
    """`community_id` with textual addresses ("10.0.0.1", "fe80::1")."""
    return community_id(
        proto,
        ipaddress.ip_address(saddr).packed,
        ipaddress.ip_address(daddr).packed,
        sport,
        dport,
        seed=seed,
        use_base64=use_base64,
    )
