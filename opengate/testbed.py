"""The packet-test bed: addresses of the standard test topology of the pipeline (switch port 1
inside, 2 outside, 3 and 4 to two SPMs) and builders of its table entries. Shared by the PTF
suite, the differential test of the software switch against BMv2 and the switch benchmark, so
that they cannot drift apart."""

from __future__ import annotations

import ipaddress

from opengate import p4constants as pc
from opengate.entries import Exact, MatchValue, TableEntry

INSIDE, OUTSIDE, SPM_A, SPM_B = 1, 2, 3, 4

GW_MAC = {INSIDE: "02:00:00:00:00:01", OUTSIDE: "02:00:00:00:00:02"}
HOST_IN_MAC = "00:00:00:00:01:10"
HOST_OUT_MAC = "00:00:00:00:02:20"  # the outside next hop (an upstream router, or the host)
SPM_MAC = {SPM_A: "00:00:00:00:03:33", SPM_B: "00:00:00:00:04:44"}

HOST_IN = "10.0.1.10"
HOST_OUT = "198.51.100.20"
GW_OUT_IP = "203.0.113.1"  # the gateway's outside (masquerade) address
GW_IN_IP = "10.0.1.1"

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
    match: dict[str, MatchValue] = {
        "ipv4_src": Exact(ip(src)),
        "ipv4_dst": Exact(ip(dst)),
        "ip_proto": Exact(proto),
        "l4_sport": Exact(sport),
        "l4_dport": Exact(dport),
    }
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
