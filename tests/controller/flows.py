"""Flows, digests and packets of the lab topology, for the controller tests."""

from __future__ import annotations

import ipaddress

from finsy.proto import p4r
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.l2 import Ether

from controller.session_encoding import FlowKey
from opengate import p4constants as pc

H1, H2, OUT1, GW_OUT = "10.0.1.10", "10.0.1.11", "198.51.100.20", "198.51.100.1"
GW_IN_MAC, GW_OUT_MAC = "02:00:00:00:00:01", "02:00:00:00:00:02"
SPM1_MAC, SPM2_MAC = 0x000000000333, 0x000000000444


def ip(text: str) -> int:
    return int(ipaddress.IPv4Address(text))


def key(src: str, dst: str, proto: int, sport: int, dport: int) -> FlowKey:
    return (ip(src), ip(dst), proto, sport, dport)


def request(
    flow: FlowKey,
    *,
    ids_class: int = 0,
    spm_port: int = 0,
    spm_mac: int = 0,
    ingress_port: int = 1,
    acl_rule: int = 1,
) -> dict[str, int]:
    """A session_request_t digest record."""
    return {
        **key_fields(flow),
        "ingress_port": ingress_port,
        "acl_rule": acl_rule,
        "ids_class": ids_class,
        "spm_port": spm_port,
        "spm_mac": spm_mac,
    }


def close(flow: FlowKey, flags: int) -> dict[str, int]:
    return {**key_fields(flow), "tcp_flags": flags}


def key_fields(flow: FlowKey) -> dict[str, int]:
    """A flow key as the digests' five key members."""
    names = ("ipv4_src", "ipv4_dst", "ip_proto", "l4_sport", "l4_dport")
    return dict(zip(names, flow, strict=True))


def syn(src: str, dst: str, sport: int, dport: int, eth_dst: str = GW_IN_MAC) -> bytes:
    packet = (
        Ether(src="00:00:00:00:01:10", dst=eth_dst)
        / IP(src=src, dst=dst)
        / TCP(sport=sport, dport=dport, flags="S")
    )
    return bytes(packet)


def udp(src: str, dst: str, sport: int, dport: int) -> bytes:
    return bytes(Ether(dst=GW_IN_MAC) / IP(src=src, dst=dst) / UDP(sport=sport, dport=dport))


def ping(src: str, dst: str, ident: int) -> bytes:
    return bytes(Ether(dst=GW_IN_MAC) / IP(src=src, dst=dst) / ICMP(type=8, id=ident, seq=1))


def packet_in_meta(
    reason: int = pc.CPU_REASON_SESSION_NAT,
    *,
    ingress_port: int = 1,
    ids_class: int = 0,
    acl_rule: int = 1,
    spm_port: int = 0,
) -> dict[str, int]:
    return {
        "ingress_port": ingress_port,
        "reason": reason,
        "ids_class": ids_class,
        "acl_rule": acl_rule,
        "spm_port": spm_port,
    }


def params(entry: p4r.TableEntry, names: tuple[str, ...]) -> dict[str, int]:
    """Action parameters of an entry, by name, in P4Info order `names`."""
    values = [int.from_bytes(p.value, "big") for p in entry.action.action.params]
    return dict(zip(names, values, strict=True))
