"""A session as the CPM holds it: its two directions' keys, its NAT binding, its verdict, and
how it maps onto the `session` table's two entries (the data plane's contract,
docs/explanation/architecture.md, "NAT and inspection"), both ways: the entries a session needs
(`direction_params`), and the session a pair of entries found on a switch stands for
(`partner_key`, `session_from_entries`).

An IPv6 session (`session_v6`'s two entries: no NAT, both with the class and SPM the CPM chose)
has the same kind of key with 128-bit addresses. The two families' keys never meet: the CPM
makes no session of an IPv6 address below 2**32 (::/96, the IPv4-compatible addresses RFC 4291
deprecates), so a key is IPv6's exactly when an address of it is above 2**32 - 1
(`key_is_v6`).

A NAT64 session (nat_kind NAT_64, p4src/include/control/nat64.p4) has an IPv6 original key and an
IPv4 reply key: the original direction is a `session_v6_nat64` entry (the IPv4 addresses, the
source port and the IPv4 route), the reply direction a `session_nat64_reply` entry in the IPv4
table (the IPv6 addresses, the inside port and the IPv6 route). Its routes (`Nat64Routes`) come
from the policy when the session is made and again whenever its entries are rewritten."""

from __future__ import annotations

import datetime as dt
import ipaddress
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controller.session_encoding import FlowKey
from opengate import p4constants as pc
from opengate.inet import internet_checksum, ipv4_packet

ACTIVE, CLOSING, BLOCKED, BYPASSED = "active", "closing", "blocked", "bypassed"
FIN_ORIGINAL, FIN_REPLY = 1, 2


IPV4_MAX = 0xFFFFFFFF
HALF_MAX = (1 << 64) - 1
IPV6_EXTENSIONS = (
    pc.IPV6_EXT_HOP_BY_HOP,
    pc.IPV6_EXT_ROUTING,
    pc.IPV6_EXT_FRAGMENT,
    pc.IPV6_EXT_DEST_OPTS,
)


def key_is_v6(key: FlowKey) -> bool:
    return key[0] > IPV4_MAX or key[1] > IPV4_MAX


def proto4(proto6: int) -> int:
    """The IPv4 protocol of a translated IPv6 one (ICMPv6 becomes ICMP, RFC 7915)."""
    return pc.IP_PROTO_ICMP if proto6 == pc.IP_PROTO_ICMPV6 else proto6


def proto6(proto4_: int) -> int:
    return pc.IP_PROTO_ICMPV6 if proto4_ == pc.IP_PROTO_ICMP else proto4_


@dataclass(frozen=True, slots=True)
class Nat64Routes:
    """Where a NAT64 session's two directions leave: the IPv4 route of the translated original
    direction, the IPv6 route of the translated reply (port, next hop's MAC, the port's MAC)."""

    v4_port: int
    v4_next_hop_mac: int
    v4_router_mac: int
    v6_port: int
    v6_next_hop_mac: int
    v6_router_mac: int


def address_text(value: int, v6: bool) -> str:
    return str(ipaddress.IPv6Address(value) if v6 else ipaddress.IPv4Address(value))


def endpoint_text(value: int, port: int, v6: bool) -> str:
    """`10.0.1.10:5000`, `[2001:db8:1::10]:5000`."""
    text = address_text(value, v6)
    return f"[{text}]:{port}" if v6 else f"{text}:{port}"


def flow_text(key: FlowKey) -> str:
    src, dst, proto, sport, dport = key
    v6 = key_is_v6(key)
    return f"{endpoint_text(src, sport, v6)} > {endpoint_text(dst, dport, v6)} p{proto}"


def row_keys(row: Mapping[str, Any]) -> tuple[FlowKey, FlowKey]:
    """A database row's (original, reply) keys (an IPv6 row's addresses are in src6, dst6)."""
    if row.get("src6"):
        src, dst = int(ipaddress.IPv6Address(row["src6"])), int(ipaddress.IPv6Address(row["dst6"]))
        key = (src, dst, row["proto"], row["sport"], row["dport"])
        if row["nat_kind"] == pc.NAT_64:
            r_proto = proto4(row["proto"])
            return key, (row["r_src"], row["r_dst"], r_proto, row["r_sport"], row["r_dport"])
        return key, (dst, src, row["proto"], row["r_sport"], row["r_dport"])
    key = (row["src"], row["dst"], row["proto"], row["sport"], row["dport"])
    return key, (row["r_src"], row["r_dst"], row["proto"], row["r_sport"], row["r_dport"])


@dataclass(slots=True, eq=False)
class Session:
    id: int
    npm: str
    key: FlowKey
    reply: FlowKey
    class_id: int
    spm_port: int
    spm_mac: int
    nat_kind: int  # of the original direction: NAT_NONE, NAT_REWRITE_SRC (SNAT), _DST (DNAT)
    nat_addr: int
    nat_port: int
    acl_rule: int
    ingress_port: int
    idle_timeout: float
    created_at: dt.datetime
    state: str = ACTIVE
    fins: int = 0
    close_at: float | None = None
    # on_demand: a data-plane slot carries the flow and the CPM wrote no entries for it (yet)
    slot_only: bool = False
    reported_at: float = 0.0  # monotonic time of its last digest, while slot_only
    nat64: Nat64Routes | None = None  # a NAT64 session's routes (None: from the policy)

    @property
    def steered(self) -> bool:
        return self.state not in (BLOCKED, BYPASSED) and self.spm_port != 0

    @property
    def v6(self) -> bool:
        return key_is_v6(self.key)

    def row(self) -> dict[str, Any]:
        """The database row. An IPv6 session's addresses are text in src6 and dst6 (the integer
        columns are 64 bits), its integer address columns 0."""
        v6 = self.v6
        reply_v6 = key_is_v6(self.reply)
        return {
            "id": self.id,
            "npm": self.npm,
            "src": 0 if v6 else self.key[0],
            "dst": 0 if v6 else self.key[1],
            "src6": str(ipaddress.IPv6Address(self.key[0])) if v6 else None,
            "dst6": str(ipaddress.IPv6Address(self.key[1])) if v6 else None,
            "proto": self.key[2],
            "sport": self.key[3],
            "dport": self.key[4],
            "r_src": 0 if reply_v6 else self.reply[0],
            "r_dst": 0 if reply_v6 else self.reply[1],
            "r_sport": self.reply[3],
            "r_dport": self.reply[4],
            "class_id": self.class_id,
            "spm_port": self.spm_port,
            "spm_mac": self.spm_mac,
            "nat_kind": self.nat_kind,
            "nat_addr": self.nat_addr,
            "nat_port": self.nat_port,
            "acl_rule": self.acl_rule,
            "ingress_port": self.ingress_port,
            "state": self.state,
            "idle_timeout": self.idle_timeout,
            "created_at": self.created_at,
        }

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Session:
        key, reply = row_keys(row)
        return cls(
            id=row["id"],
            npm=row["npm"],
            key=key,
            reply=reply,
            class_id=row["class_id"],
            spm_port=row["spm_port"],
            spm_mac=row["spm_mac"],
            nat_kind=row["nat_kind"],
            nat_addr=row["nat_addr"],
            nat_port=row["nat_port"],
            acl_rule=row["acl_rule"],
            ingress_port=row["ingress_port"],
            idle_timeout=row["idle_timeout"],
            created_at=row["created_at"],
            state=row["state"] if row["state"] != CLOSING else ACTIVE,
        )


def reply_key(key: FlowKey, nat_kind: int, nat_addr: int, nat_port: int) -> FlowKey:
    """The reply direction's key: the reverse of the original's tuple after NAT."""
    src, dst, proto, sport, dport = key
    if nat_kind == pc.NAT_64:
        # From the IPv4 server (the low 32 bits of the synthesized address) to the pool address.
        return (dst & IPV4_MAX, nat_addr, proto4(proto), dport, nat_port)
    if nat_kind == pc.NAT_REWRITE_SRC:
        src, sport = nat_addr, nat_port
    elif nat_kind == pc.NAT_REWRITE_DST:
        dst, dport = nat_addr, nat_port
    return (dst, src, proto, dport, sport)


def direction_params(session: Session) -> tuple[dict[str, int] | None, dict[str, int] | None]:
    """Action parameters of (original, reply); None: session_block (IPv6: session_v6_block;
    session_v6_forward takes the class and the SPM, both directions alike: no NAT)."""
    if session.state == BLOCKED:
        return None, None
    spm_port, spm_mac = (0, 0) if session.state == BYPASSED else (session.spm_port, session.spm_mac)
    if session.nat_kind == pc.NAT_64:
        return nat64_params(session)
    if session.v6:
        params = {"class_id": session.class_id, "spm_port": spm_port, "spm_mac": spm_mac}
        return params, dict(params)
    original = {
        "class_id": session.class_id,
        "spm_port": spm_port,
        "spm_mac": spm_mac,
        "nat_kind": session.nat_kind,
        "nat_addr": session.nat_addr,
        "nat_port": session.nat_port,
        "nat_before_spm": 0,
    }
    reply = dict(original)
    src, dst, _, sport, dport = session.key
    if session.nat_kind == pc.NAT_REWRITE_SRC:
        reply.update(nat_kind=pc.NAT_REWRITE_DST, nat_addr=src, nat_port=sport, nat_before_spm=1)
    elif session.nat_kind == pc.NAT_REWRITE_DST:
        reply.update(nat_kind=pc.NAT_REWRITE_SRC, nat_addr=dst, nat_port=dport, nat_before_spm=1)
    return original, reply


def nat64_params(session: Session) -> tuple[dict[str, int] | None, dict[str, int] | None]:
    """A NAT64 session's (session_v6_nat64, session_nat64_reply) parameters; without routes,
    both blocked (nothing to send the translated packets by)."""
    routes = session.nat64
    if routes is None:
        return None, None
    src, dst, _proto, sport, _dport = session.key
    original = {
        "v4_src": session.nat_addr,
        "v4_dst": dst & IPV4_MAX,
        "sport": session.nat_port,
        "port": routes.v4_port,
        "next_hop_mac": routes.v4_next_hop_mac,
        "router_mac": routes.v4_router_mac,
    }
    reply = {
        "src_hi": dst >> 64,
        "src_lo": dst & HALF_MAX,
        "dst_hi": src >> 64,
        "dst_lo": src & HALF_MAX,
        "dport": sport,
        "port": routes.v6_port,
        "next_hop_mac": routes.v6_next_hop_mac,
        "router_mac": routes.v6_router_mac,
    }
    return original, reply


def parse_flow(frame: bytes) -> FlowKey | None:
    """The 5-tuple of an Ethernet frame as the pipeline keys it (ICMP echo: identifier as
    the source port of a request, the destination port of a reply; IPv6: the upper-layer
    header after the extension headers, as p4src/include/parser.p4 walks them)."""
    if len(frame) < 14:
        return None
    offset = 12
    ethertype = struct.unpack_from("!H", frame, offset)[0]
    offset += 2
    if ethertype == pc.ETHERTYPE_VLAN and len(frame) >= 18:
        ethertype = struct.unpack_from("!H", frame, offset + 2)[0]
        offset += 4
    if ethertype == pc.ETHERTYPE_IPV6:
        return parse_flow6(frame, offset)
    if ethertype != pc.ETHERTYPE_IPV4 or len(frame) < offset + 20:
        return None
    ihl = (frame[offset] & 0x0F) * 4
    proto = frame[offset + 9]
    src, dst = struct.unpack_from("!II", frame, offset + 12)
    l4 = offset + ihl
    sport = dport = 0
    if proto in (pc.IP_PROTO_TCP, pc.IP_PROTO_UDP) and len(frame) >= l4 + 4:
        sport, dport = struct.unpack_from("!HH", frame, l4)
    elif proto == pc.IP_PROTO_ICMP and len(frame) >= l4 + 6:
        icmp_type = frame[l4]
        ident = struct.unpack_from("!H", frame, l4 + 4)[0]
        if icmp_type == pc.ICMP_ECHO_REQUEST:
            sport = ident
        elif icmp_type == pc.ICMP_ECHO_REPLY:
            dport = ident
    return (src, dst, proto, sport, dport)


def upper_layer6(packet: bytes, offset: int) -> tuple[int, int] | None:
    """(protocol, offset) of the upper-layer header of the IPv6 packet at `offset`, after its
    extension headers; None for a fragment after the first or a chain cut short."""
    if len(packet) < offset + 40:
        return None
    proto = packet[offset + 6]
    at = offset + 40
    for _ in range(8):  # the pipeline walks at most five (RFC 8200's order)
        if proto not in IPV6_EXTENSIONS:
            return proto, at
        if len(packet) < at + 8:
            return None
        if proto == pc.IPV6_EXT_FRAGMENT:
            if struct.unpack_from("!H", packet, at + 2)[0] >> 3:
                return None  # a later fragment: no upper-layer header
            proto, at = packet[at], at + 8
        else:
            proto, at = packet[at], at + 8 + packet[at + 1] * 8
    return None


def parse_flow6(frame: bytes, offset: int) -> FlowKey | None:
    """parse_flow of an IPv6 packet at `offset` (addresses as 128-bit integers)."""
    found = upper_layer6(frame, offset)
    if found is None:
        return None
    proto, l4 = found
    src = int.from_bytes(frame[offset + 8 : offset + 24], "big")
    dst = int.from_bytes(frame[offset + 24 : offset + 40], "big")
    if src <= IPV4_MAX or dst <= IPV4_MAX:
        return None  # ::/96: no session (module docstring)
    sport = dport = 0
    if proto in (pc.IP_PROTO_TCP, pc.IP_PROTO_UDP) and len(frame) >= l4 + 4:
        sport, dport = struct.unpack_from("!HH", frame, l4)
    elif proto == pc.IP_PROTO_ICMPV6 and len(frame) >= l4 + 6:
        icmp_type = frame[l4]
        ident = struct.unpack_from("!H", frame, l4 + 4)[0]
        if icmp_type == pc.ICMPV6_ECHO_REQUEST:
            sport = ident
        elif icmp_type == pc.ICMPV6_ECHO_REPLY:
            dport = ident
    return (src, dst, proto, sport, dport)


def flow_frame(key: FlowKey) -> bytes:
    """A frame the pipeline keys as `key` (parse_flow's inverse): Ethernet, IPv4 with a valid
    header checksum, and a TCP ACK, a UDP datagram or an ICMP echo with no payload (a request
    with the source port as its identifier, a reply with the destination port)."""
    src, dst, proto, sport, dport = key
    if proto == pc.IP_PROTO_TCP:
        l4 = struct.pack("!HHIIBBHHH", sport, dport, 0, 0, 5 << 4, 0x10, 0, 0, 0)
    elif proto == pc.IP_PROTO_UDP:
        l4 = struct.pack("!HHHH", sport, dport, 8, 0)
    elif proto == pc.IP_PROTO_ICMP:
        request = sport != 0 or dport == 0
        kind, ident = (pc.ICMP_ECHO_REQUEST, sport) if request else (pc.ICMP_ECHO_REPLY, dport)
        bare = struct.pack("!BBHHH", kind, 0, 0, ident, 0)
        l4 = struct.pack("!BBHHH", kind, 0, internet_checksum(bare), ident, 0)
    else:
        l4 = b""
    ethernet = bytes(6) + bytes.fromhex("020000000000") + struct.pack("!H", pc.ETHERTYPE_IPV4)
    return ethernet + ipv4_packet(src, dst, proto, l4)


def partner_key(key: FlowKey, params: Mapping[str, int] | None) -> tuple[FlowKey, bool]:
    """The other direction's key, and whether `key` is the original direction."""
    if params is not None and "v4_src" in params:  # session_v6_nat64
        _src, _dst, proto, _sport, dport = key
        return (params["v4_dst"], params["v4_src"], proto4(proto), dport, params["sport"]), True
    if params is not None and "src_hi" in params:  # session_nat64_reply
        _src, _dst, proto, sport, _dport = key
        server6 = (params["src_hi"] << 64) | params["src_lo"]
        inside6 = (params["dst_hi"] << 64) | params["dst_lo"]
        return (inside6, server6, proto6(proto), params["dport"], sport), False
    if params is None or params.get("nat_kind", pc.NAT_NONE) == pc.NAT_NONE:
        src, dst, proto, sport, dport = key
        return (dst, src, proto, dport, sport), True
    if params["nat_before_spm"] == 0:
        return reply_key(key, params["nat_kind"], params["nat_addr"], params["nat_port"]), True
    # A reply entry: its rewrite restores the original's addresses.
    src, dst, proto, sport, dport = key
    if params["nat_kind"] == pc.NAT_REWRITE_DST:  # reply of an SNAT session
        return (params["nat_addr"], src, proto, params["nat_port"], sport), False
    return (dst, params["nat_addr"], proto, dport, params["nat_port"]), False  # reply of DNAT


def session_from_entries(
    session_id: int,
    npm: str,
    key: FlowKey,
    params: Mapping[str, int] | None,
    idle_timeout_ns: int,
    now: dt.datetime,
) -> Session:
    p = params or {}
    nat_kind = p.get("nat_kind", pc.NAT_NONE)
    nat_addr, nat_port = p.get("nat_addr", 0), p.get("nat_port", 0)
    if "v4_src" in p:  # a NAT64 session's original entry (its partner gives the IPv6 route)
        nat_kind, nat_addr, nat_port = pc.NAT_64, p["v4_src"], p["sport"]
    return Session(
        id=session_id,
        npm=npm,
        key=key,
        reply=reply_key(key, nat_kind, nat_addr, nat_port),
        class_id=p.get("class_id", 0),
        spm_port=p.get("spm_port", 0),
        spm_mac=p.get("spm_mac", 0),
        nat_kind=nat_kind,
        nat_addr=nat_addr,
        nat_port=nat_port,
        acl_rule=pc.RULE_NONE,
        ingress_port=0,
        idle_timeout=idle_timeout_ns / 1e9 if idle_timeout_ns else 60.0,
        created_at=now,
        state=BLOCKED if params is None else ACTIVE,
    )
