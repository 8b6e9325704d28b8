"""The packet-test bed: addresses of the standard test topology of the pipeline (switch port 1
inside, 2 outside, 3 and 4 to two SPMs) and builders of its table entries. Shared by the PTF
suite, the differential test of the software switch against BMv2 and the switch benchmark, so
that they cannot drift apart."""

from __future__ import annotations

import ipaddress

from opengate import nptv6
from opengate import p4constants as pc
from opengate.entries import Exact, MatchValue, Range, TableEntry, Ternary

INSIDE, OUTSIDE, SPM_A, SPM_B = 1, 2, 3, 4

GW_MAC = {INSIDE: "02:00:00:00:00:01", OUTSIDE: "02:00:00:00:00:02"}
HOST_IN_MAC = "00:00:00:00:01:10"
HOST_OUT_MAC = "00:00:00:00:02:20"  # the outside next hop (an upstream router, or the host)
SPM_MAC = {SPM_A: "00:00:00:00:03:33", SPM_B: "00:00:00:00:04:44"}

HOST_IN = "10.0.1.10"
HOST_OUT = "198.51.100.20"
GW_OUT_IP = "203.0.113.1"  # the gateway's outside (masquerade) address
GW_IN_IP = "10.0.1.1"

# IPv6 (documentation prefixes): inside 2001:db8:1::/64, outside 2001:db8:2::/64.
HOST6_IN = "2001:db8:1::10"
HOST6_OUT = "2001:db8:2::20"
GW6_IN = "2001:db8:1::1"
GW6_OUT = "2001:db8:2::1"

TAG_BASE = 0x0100
POOL = 7


def segment_params(**indexes: int) -> dict[str, int]:
    """A segment action's parameters, named as the P4Info names them (every segment action has
    the same: an index per chain): the indexes given, 0 for the other chains."""
    names = pc.ACTION_PARAMS[pc.A_SET_SA_INDEX]
    unknown = set(indexes) - set(names)
    if unknown:
        raise ValueError(f"segment actions have no parameter {sorted(unknown)}")
    return {name: indexes.get(name, 0) for name in names}


def mac(text: str) -> int:
    return int(text.replace(":", ""), 16)


def ip(text: str) -> int:
    return int(ipaddress.IPv4Address(text))


def tag_mac(tag: int) -> str:
    """The MAC address that carries next-hop tag `tag`."""
    value = (pc.TAG_MAC_PREFIX << 16) | tag
    return ":".join(f"{(value >> shift) & 0xFF:02x}" for shift in range(40, -8, -8))


def session_match(src: str, dst: str, proto: int, sport: int, dport: int) -> dict[str, MatchValue]:
    """The session table's key of a packet as it arrives."""
    return {
        "ipv4_src": Exact(ip(src)),
        "ipv4_dst": Exact(ip(dst)),
        "ip_proto": Exact(proto),
        "l4_sport": Exact(sport),
        "l4_dport": Exact(dport),
    }


def session_entry(
    src: str,
    dst: str,
    proto: int,
    sport: int,
    dport: int,
    *,
    class_id: int = 0,
    spm_port: int = 0,
    nat_kind: int = 0,
    nat_addr: str = "0.0.0.0",
    nat_port: int = 0,
    nat_before_spm: int = 0,
    block: bool = False,
) -> TableEntry:
    """One direction of a session, as the controller writes it (SPM MACs from SPM_MAC)."""
    match = session_match(src, dst, proto, sport, dport)
    if block:
        return TableEntry.make(pc.T_SESSION, match, pc.A_SESSION_BLOCK)
    params = {
        "class_id": class_id,
        "spm_port": spm_port,
        "spm_mac": mac(SPM_MAC[spm_port]) if spm_port else 0,
        "nat_kind": nat_kind,
        "nat_addr": ip(nat_addr),
        "nat_port": nat_port,
        "nat_before_spm": nat_before_spm,
    }
    return TableEntry.make(pc.T_SESSION, match, pc.A_SESSION_FORWARD, params)


HALF = (1 << 64) - 1


def halves(text: str) -> tuple[int, int]:
    """An IPv6 address as the P4 program holds it: (bits 127..64, bits 63..0)."""
    value = int(ipaddress.IPv6Address(text))
    return value >> 64, value & HALF


def prefix_match(text: str, hi_name: str, lo_name: str) -> dict[str, MatchValue]:
    """An IPv6 prefix as ternary matches on the two halves (a half the prefix does not reach
    is left out: P4Runtime's don't-care)."""
    net = ipaddress.IPv6Network(text)
    value, mask = int(net.network_address), int(net.netmask)
    out: dict[str, MatchValue] = {}
    if mask >> 64:
        out[hi_name] = Ternary(value >> 64, mask >> 64)
    if mask & HALF:
        out[lo_name] = Ternary(value & HALF, mask & HALF)
    return out


def session_v6_entry(
    src: str,
    dst: str,
    proto: int,
    sport: int,
    dport: int,
    *,
    class_id: int = 0,
    spm_port: int = 0,
    block: bool = False,
) -> TableEntry:
    """One direction of an IPv6 session, as the controller writes it (SPM MACs from SPM_MAC)."""
    match = session_v6_match(src, dst, proto, sport, dport)
    if block:
        return TableEntry.make(pc.T_SESSION_V6, match, pc.A_SESSION_V6_BLOCK)
    params = {
        "class_id": class_id,
        "spm_port": spm_port,
        "spm_mac": mac(SPM_MAC[spm_port]) if spm_port else 0,
    }
    return TableEntry.make(pc.T_SESSION_V6, match, pc.A_SESSION_V6_FORWARD, params)


def session_v6_match(
    src: str, dst: str, proto: int, sport: int, dport: int
) -> dict[str, MatchValue]:
    """session_v6's key of a packet as it arrives."""
    src_hi, src_lo = halves(src)
    dst_hi, dst_lo = halves(dst)
    return {
        "ipv6_src_hi": Exact(src_hi),
        "ipv6_src_lo": Exact(src_lo),
        "ipv6_dst_hi": Exact(dst_hi),
        "ipv6_dst_lo": Exact(dst_lo),
        "ip_proto": Exact(proto),
        "l4_sport": Exact(sport),
        "l4_dport": Exact(dport),
    }


NAT64_PREFIX = "64:ff9b::/96"


def nat64_address(ipv4: str, prefix: str = NAT64_PREFIX) -> str:
    """An IPv4 address in a /96 NAT64 prefix (RFC 6052 section 2.2)."""
    network = ipaddress.IPv6Network(prefix)
    value = int(network.network_address) | int(ipaddress.IPv4Address(ipv4))
    return str(ipaddress.IPv6Address(value))


def nat64_entries(
    inside6: str, server4: str, proto6: int, sport: int, dport: int, v4_src: str, v4_port: int
) -> list[TableEntry]:
    """Both directions of a NAT64 session from `inside6`:`sport` to `server4`:`dport` (through
    the well-known prefix), as the controller writes it (controller.session_model.nat64_params):
    the original leaves by OUTSIDE from `v4_src`:`v4_port`, the reply returns by INSIDE. An
    echo's ports: the identifier as the request's source port, 0 as its destination."""
    server6 = nat64_address(server4)
    proto4 = pc.IP_PROTO_ICMP if proto6 == pc.IP_PROTO_ICMPV6 else proto6
    src_hi, src_lo = halves(server6)
    dst_hi, dst_lo = halves(inside6)
    reply_match = session_match(server4, v4_src, proto4, dport, v4_port)
    return [
        TableEntry.make(
            pc.T_SESSION_V6,
            session_v6_match(inside6, server6, proto6, sport, dport),
            pc.A_SESSION_V6_NAT64,
            {
                "v4_src": int(ipaddress.IPv4Address(v4_src)),
                "v4_dst": int(ipaddress.IPv4Address(server4)),
                "sport": v4_port,
                "port": OUTSIDE,
                "next_hop_mac": mac(HOST_OUT_MAC),
                "router_mac": mac(GW_MAC[OUTSIDE]),
            },
        ),
        TableEntry.make(
            pc.T_SESSION,
            reply_match,
            pc.A_SESSION_NAT64_REPLY,
            {
                "src_hi": src_hi,
                "src_lo": src_lo,
                "dst_hi": dst_hi,
                "dst_lo": dst_lo,
                "dport": sport,
                "port": INSIDE,
                "next_hop_mac": mac(HOST_IN_MAC),
                "router_mac": mac(GW_MAC[INSIDE]),
            },
        ),
    ]


def nat64_route_entry(prefix: str = NAT64_PREFIX) -> TableEntry:
    """A NAT64 prefix in routing_v6 (its flows open at the CPM)."""
    return TableEntry.make(
        pc.T_ROUTING_V6,
        prefix_match(prefix, "ipv6_dst_hi", "ipv6_dst_lo"),
        pc.A_ROUTE_V6_NAT64,
        {},
        priority=ipaddress.IPv6Network(prefix).prefixlen + 1,
    )


def route_v6_entry(prefix: str, port: int, next_hop_mac: str, router_mac: str) -> TableEntry:
    """A route: the prefix on both halves, longer prefixes first (priority = length + 1)."""
    return TableEntry.make(
        pc.T_ROUTING_V6,
        prefix_match(prefix, "ipv6_dst_hi", "ipv6_dst_lo"),
        pc.A_ROUTE_V6_TO,
        {"port": port, "next_hop_mac": mac(next_hop_mac), "router_mac": mac(router_mac)},
        priority=ipaddress.IPv6Network(prefix).prefixlen + 1,
    )


def nd_entry(address: str, router_mac: str) -> TableEntry:
    """The gateway answers neighbour solicitations for `address` with `router_mac`."""
    hi, lo = halves(address)
    return TableEntry.make(
        pc.T_ND_RESPONDER,
        {"target_hi": Exact(hi), "target_lo": Exact(lo)},
        pc.A_ND_ADVERTISE,
        {"mac": mac(router_mac)},
    )


def ipv6_acl_entry(
    priority: int,
    action: str,
    rule: int,
    *,
    src: str | None = None,
    dst: str | None = None,
    proto: int | None = None,
    sport: tuple[int, int] | None = None,
    dport: tuple[int, int] | None = None,
    icmpv6_type: int | None = None,
) -> TableEntry:
    """An ipv6_acl rule; a field left None is a wildcard."""
    match: dict[str, MatchValue] = {}
    if src is not None:
        match.update(prefix_match(src, "ipv6_src_hi", "ipv6_src_lo"))
    if dst is not None:
        match.update(prefix_match(dst, "ipv6_dst_hi", "ipv6_dst_lo"))
    if proto is not None:
        match["ip_proto"] = Ternary(proto, 0xFF)
    if sport is not None:
        match["l4_sport"] = Range(*sport)
    if dport is not None:
        match["l4_dport"] = Range(*dport)
    if icmpv6_type is not None:
        match["icmpv6_type"] = Ternary(icmpv6_type, 0xFF)
    return TableEntry.make(pc.T_IPV6_ACL, match, action, {"rule": rule}, priority=priority)


def nptv6_entries(port: int, inside: str, outside: str) -> list[TableEntry]:
    """An NPTv6 mapping on `port` (opengate.nptv6): outbound sources in `inside` become
    `outside`'s, inbound destinations in `outside` become `inside`'s."""
    inner, outer = ipaddress.IPv6Network(inside), ipaddress.IPv6Network(outside)
    return [
        TableEntry.make(
            pc.T_NPTV6_OUTBOUND,
            {"egress_port": Exact(port), **prefix_match(inside, "ipv6_src_hi", "ipv6_src_lo")},
            pc.A_NPT_REWRITE_SRC,
            nptv6.action_params(inner, outer),
            priority=1,
        ),
        TableEntry.make(
            pc.T_NPTV6_INBOUND,
            {"ingress_port": Exact(port), **prefix_match(outside, "ipv6_dst_hi", "ipv6_dst_lo")},
            pc.A_NPT_REWRITE_DST,
            nptv6.action_params(outer, inner),
            priority=1,
        ),
    ]
