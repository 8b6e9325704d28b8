"""The software switch and BMv2 agree, frame for frame, on the OpenGate pipeline.

Both targets run side by side on their own veth pairs with the same pipeline
(p4src/build/opengate.json) and the same entries (the shapes of ptf/lib/opengate_test.py: ports
and roles, routes, an HSM "classify everything" set with a few exceptions, sessions with and
without NAT, an SPM pool of two weighted members behind the selector, a port forward and a
masquerade rule, the ARP responder). The same stimuli go to both: well-formed flows, packet-outs,
many new flows through the weighted selector, and a few hundred seeded random, truncated and
mutated frames. What comes out must be identical: the same frames on the same ports, the same
packet-ins, nothing else, and the same drop and port counters read over P4Runtime.

Stimuli go in batches; a batch is done when no output has come for QUIET seconds (bounded by a
deadline). Outputs are compared per batch as multisets: BMv2 runs egress in several threads, so
the order between ports is not part of the behaviour. On a mismatch, the batch is replayed one
stimulus at a time to name the first one on which the targets differ.

Needs root (veths, raw sockets) and simple_switch_grpc (`TARGET=bmv2` must find it on PATH).
"""

from __future__ import annotations

import collections
import contextlib
import os
import queue
import random
import selectors
import socket
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from finsy.proto import p4r, rpc_code
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import (
    ICMPv6EchoReply,
    ICMPv6EchoRequest,
    ICMPv6ND_NS,
    ICMPv6NDOptSrcLLAddr,
    ICMPv6PacketTooBig,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
    PadN,
)
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.packet import Packet, Raw

from opengate import p4constants as pc
from opengate.entries import Exact, Lpm, MatchValue, Range, TableEntry, Ternary
from opengate.netutil import require_root, veth_pairs
from opengate.p4info import P4Schema
from opengate.p4rt import P4RuntimeClient, P4RuntimeError, entity_of
from opengate.switch import running_switch
from opengate.target import BMV2_BINARY, TargetError, p4_build_dir, repo_root, select_target
from opengate.testbed import (
    GW6_IN,
    GW6_OUT,
    GW_IN_IP,
    GW_MAC,
    GW_OUT_IP,
    HOST6_IN,
    HOST6_OUT,
    HOST_IN,
    HOST_IN_MAC,
    HOST_OUT,
    HOST_OUT_MAC,
    INSIDE,
    OUTSIDE,
    POOL,
    SPM_A,
    SPM_B,
    SPM_MAC,
    TAG_BASE,
    ip,
    ipv6_acl_entry,
    mac,
    nd_entry,
    nptv6_entries,
    route_v6_entry,
    segment_params,
    session_entry,
    session_v6_entry,
    tag_mac,
)
from softswitch.ports import open_port, received_frames

pytestmark = [pytest.mark.needs_root, pytest.mark.needs_bmv2, pytest.mark.slow]


PORTS = (INSIDE, OUTSIDE, SPM_A, SPM_B)
SOFT_PAIRS = tuple((f"ogd-s{n}", f"ogd-p{n}") for n in PORTS)
BMV2_PAIRS = tuple((f"ogd-b{n}", f"ogd-q{n}") for n in PORTS)

HOST_MASQ = "10.0.1.200"  # in the masqueraded half of the inside network
INSPECTED = 3
GROUP = 100 + POOL

# seconds without output that end a batch (0.5 s was once too short for a digest under
# stress-ng beside the suite)
QUIET = 1.0
DEADLINE = 15.0  # seconds a batch may take at most
BATCH = 40


# -- the configuration both targets get ---------------------------------------------------------


def gateway_entries() -> list[TableEntry]:
    """Ports, routes, NPM identity and SPM return tags (as OpenGateTest.setup_gateway), the ARP
    responder, a masquerade rule for 10.0.1.128/25 and a port forward."""
    roles = {
        INSIDE: pc.ROLE_INSIDE,
        OUTSIDE: pc.ROLE_OUTSIDE,
        SPM_A: pc.ROLE_SPM,
        SPM_B: pc.ROLE_SPM,
    }
    out = [
        TableEntry.make(pc.T_PORT_ROLE, {"ingress_port": Exact(p)}, pc.A_SET_PORT_ROLE, {"role": r})
        for p, r in roles.items()
    ]
    out += [
        TableEntry.make(
            pc.T_ROUTER_MAC, {"egress_port": Exact(p)}, pc.A_SET_SOURCE_MAC, {"mac": mac(m)}
        )
        for p, m in GW_MAC.items()
    ]
    for prefix, port, nh in (
        ("10.0.1.0", INSIDE, HOST_IN_MAC),
        ("198.51.100.0", OUTSIDE, HOST_OUT_MAC),
    ):
        out.append(
            TableEntry.make(
                pc.T_ROUTING,
                {"ipv4_dst": Lpm(ip(prefix), 24)},
                pc.A_ROUTE_TO,
                {"port": port, "next_hop_mac": mac(nh)},
            )
        )
    out.append(
        TableEntry.make(
            pc.T_NPM_IDENTITY, {}, pc.A_SET_NPM_IDENTITY, {"tag_base": TAG_BASE}, is_default=True
        )
    )
    out += [
        TableEntry.make(
            pc.T_SPM_RETURN,
            {"tag": Exact(TAG_BASE | nat_done)},
            pc.A_RESUME_AFTER_SPM,
            {"nat_done": nat_done},
        )
        for nat_done in (0, 1)
    ]
    out.append(
        TableEntry.make(
            pc.T_ARP_RESPONDER,
            {"target_ip": Exact(ip(GW_IN_IP))},
            pc.A_ARP_REPLY,
            {"mac": mac(GW_MAC[INSIDE])},
        )
    )
    out.append(
        TableEntry.make(
            pc.T_SNAT_RULE,
            {"egress_port": Exact(OUTSIDE), "ipv4_src": Lpm(ip("10.0.1.128"), 25)},
            pc.A_MASQUERADE,
        )
    )
    out.append(
        TableEntry.make(
            pc.T_DNAT_RULE,
            {"ipv4_dst": Exact(ip(GW_OUT_IP)), "ip_proto": Exact(6), "l4_dport": Exact(8080)},
            pc.A_PORT_FORWARD,
        )
    )
    # Data-plane sessions live their default lifetimes but are never reported again: a report
    # depends on the time since the last one, which two switches fed the same frames in turn
    # do not share (PTF tests the report, test_dp_session.LongLivedFlowIsReportedAgain).
    out.append(
        TableEntry.make(
            pc.T_FLOW_AGEING,
            {},
            pc.A_SET_FLOW_TIMEOUT,
            {
                "idle": pc.FLOW_DEFAULT_IDLE_TICKS,
                "closing": pc.FLOW_DEFAULT_CLOSING_TICKS,
                "report": (1 << 32) - 1,
            },
            is_default=True,
        )
    )
    # IPv6: the gateway's addresses, the two LANs, an ACL permitting the inside LAN out and
    # packet too big in (as PTF's test_ipv6).
    out += [nd_entry(GW6_IN, GW_MAC[INSIDE]), nd_entry(GW6_OUT, GW_MAC[OUTSIDE])]
    out += [
        route_v6_entry("2001:db8:1::/64", INSIDE, HOST_IN_MAC, GW_MAC[INSIDE]),
        route_v6_entry("2001:db8:2::/64", OUTSIDE, HOST_OUT_MAC, GW_MAC[OUTSIDE]),
        route_v6_entry(HOST6_OUT + "/128", OUTSIDE, "00:00:00:00:02:99", GW_MAC[OUTSIDE]),
        ipv6_acl_entry(20, pc.A_IPV6_ACL_PERMIT, 3, proto=58, icmpv6_type=2),
        ipv6_acl_entry(10, pc.A_IPV6_ACL_PERMIT, 7, src="2001:db8:1::/64"),
        ipv6_acl_entry(5, pc.A_IPV6_ACL_TO_CPU, 8, src="2001:db8:2::/64", proto=17, dport=(53, 53)),
        *nptv6_entries(OUTSIDE, "2001:db8:1::/48", "2001:db8:ff01::/48"),
    ]
    return out


def classification_entries() -> list[TableEntry]:
    """OpenGateTest.classify_everything (ACL permit rule 5, IDS class INSPECTED), plus: UDP is
    not inspected (IDS proto class 2 has no classification), dport 23 is denied (ACL port class
    2), ICMP goes to the CPU (ACL proto class 3)."""
    v0 = Exact(0)
    seg: list[tuple[str, str, MatchValue, str, int, tuple[int, int]]] = [
        (pc.T_SA_SEGMENT, "ipv4_src", Lpm(0, 0), pc.A_SET_SA_INDEX, 0, (1, 1)),
        (pc.T_DA_SEGMENT, "ipv4_dst", Lpm(0, 0), pc.A_SET_DA_INDEX, 0, (1, 1)),
        (pc.T_SP_SEGMENT, "l4_sport", Range(0, 0xFFFF), pc.A_SET_SP_INDEX, 1, (1, 1)),
        (pc.T_DP_SEGMENT, "l4_dport", Range(0, 0xFFFF), pc.A_SET_DP_INDEX, 1, (1, 1)),
        (pc.T_DP_SEGMENT, "l4_dport", Range(23, 23), pc.A_SET_DP_INDEX, 10, (2, 1)),
        (pc.T_PROTO_SEGMENT, "ip_proto", Ternary(0, 0), pc.A_SET_PROTO_INDEX, 1, (1, 1)),
        (pc.T_PROTO_SEGMENT, "ip_proto", Ternary(17, 0xFF), pc.A_SET_PROTO_INDEX, 10, (1, 2)),
        (pc.T_PROTO_SEGMENT, "ip_proto", Ternary(1, 0xFF), pc.A_SET_PROTO_INDEX, 10, (3, 1)),
    ]
    out = [
        TableEntry.make(
            table,
            {"version": v0, name: value},
            action,
            segment_params(acl_index=acl, ids_index=ids),
            priority=prio,
        )
        for table, name, value, action, prio, (acl, ids) in seg
    ]
    pairs = [
        (pc.T_ACL_ADDR_PAIR, ("acl_sa_index", "acl_da_index"), (1, 1), pc.A_SET_ACL_ADDR_INDEX, 1),
        (pc.T_ACL_PORT_PAIR, ("acl_sp_index", "acl_dp_index"), (1, 1), pc.A_SET_ACL_PORT_INDEX, 1),
        (pc.T_ACL_PORT_PAIR, ("acl_sp_index", "acl_dp_index"), (1, 2), pc.A_SET_ACL_PORT_INDEX, 2),
        (pc.T_IDS_ADDR_PAIR, ("ids_sa_index", "ids_da_index"), (1, 1), pc.A_SET_IDS_ADDR_INDEX, 1),
        (pc.T_IDS_PORT_PAIR, ("ids_sp_index", "ids_dp_index"), (1, 1), pc.A_SET_IDS_PORT_INDEX, 1),
    ]
    out += [
        TableEntry.make(
            table, {"version": v0, keys[0]: Exact(a), keys[1]: Exact(b)}, action, {"index": i}
        )
        for table, keys, (a, b), action, i in pairs
    ]
    for (addr, port, proto), action, rule in (
        ((1, 1, 1), pc.A_ACL_PERMIT, 5),
        ((1, 2, 1), pc.A_ACL_DENY, 8),
        ((1, 1, 3), pc.A_ACL_TO_CPU, 7),
    ):
        key: dict[str, MatchValue] = {
            "version": v0,
            "acl_addr_index": Exact(addr),
            "acl_port_index": Exact(port),
            "acl_proto_index": Exact(proto),
        }
        out.append(TableEntry.make(pc.T_ACL_VERDICT, key, action, {"rule_id": rule}))
    ids_key: dict[str, MatchValue] = {
        "version": v0,
        "ids_addr_index": Exact(1),
        "ids_port_index": Exact(1),
        "ids_proto_index": Exact(1),
    }
    out.append(
        TableEntry.make(
            pc.T_IDS_CLASSIFICATION,
            ids_key,
            pc.A_SET_IDS_CLASS,
            {"class_id": INSPECTED, "rule_id": 0},
        )
    )
    out.append(
        TableEntry.make(
            pc.T_CLASS_POLICY,
            {"class_id": Exact(INSPECTED)},
            pc.A_INSPECT,
            {"pool": POOL, "open_on_failure": 0},
        )
    )
    return out


session = session_entry


def session_entries() -> list[TableEntry]:
    src, dst = pc.NAT_REWRITE_SRC, pc.NAT_REWRITE_DST
    return [
        session(HOST_IN, HOST_OUT, 6, 40000, 80),
        session(HOST_OUT, HOST_IN, 6, 80, 40000),
        session(HOST_IN, HOST_OUT, 6, 40001, 80, nat_kind=src, nat_addr=GW_OUT_IP, nat_port=61001),
        session(
            HOST_OUT,
            GW_OUT_IP,
            6,
            80,
            61001,
            nat_kind=dst,
            nat_addr=HOST_IN,
            nat_port=40001,
            nat_before_spm=1,
        ),
        session(HOST_IN, HOST_OUT, 17, 5353, 53, nat_kind=src, nat_addr=GW_OUT_IP, nat_port=62000),
        session(HOST_IN, HOST_OUT, 1, 0x1234, 0, nat_kind=src, nat_addr=GW_OUT_IP, nat_port=0x5678),
        session(
            HOST_IN,
            HOST_OUT,
            6,
            40002,
            80,
            class_id=INSPECTED,
            spm_port=SPM_A,
            nat_kind=src,
            nat_addr=GW_OUT_IP,
            nat_port=61002,
        ),
        session(
            HOST_OUT,
            GW_OUT_IP,
            6,
            80,
            61002,
            class_id=INSPECTED,
            spm_port=SPM_A,
            nat_kind=dst,
            nat_addr=HOST_IN,
            nat_port=40002,
            nat_before_spm=1,
        ),
        session(HOST_OUT, GW_OUT_IP, 6, 50000, 8080, nat_kind=dst, nat_addr=HOST_IN, nat_port=80),
        session(HOST_IN, HOST_OUT, 6, 40003, 80, block=True),
        session_v6_entry(HOST6_IN, HOST6_OUT, 6, 40000, 80),
        session_v6_entry(HOST6_OUT, HOST6_IN, 6, 80, 40000),
        session_v6_entry(HOST6_IN, HOST6_OUT, 58, 0x77, 0),
        session_v6_entry(HOST6_OUT, HOST6_IN, 58, 0, 0x77),
        session_v6_entry(HOST6_IN, HOST6_OUT, 6, 40003, 80, block=True),
        session_v6_entry(HOST6_IN, HOST6_OUT, 6, 40002, 80, class_id=INSPECTED, spm_port=SPM_A),
        session_v6_entry(HOST6_OUT, HOST6_IN, 6, 80, 40002, class_id=INSPECTED, spm_port=SPM_A),
    ]


# -- stimuli and outputs ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Frame:
    port: int
    data: bytes


@dataclass(frozen=True, slots=True)
class PacketOut:
    data: bytes
    egress_port: int
    submit_to_ingress: int = 0


Stimulus = Frame | PacketOut
# (port, frame, metadata): a frame on a port; a packet-in (port 255, its metadata by name); or
# a digest record (port DIGEST, no frame, the digest's name and its members by name).
Output = tuple[int, bytes, tuple[tuple[str, int], ...]]
DIGEST = -1
DIGESTS = (pc.D_SESSION_REQUEST_T, pc.D_SESSION_CLOSE_T, pc.D_SESSION_CLOSE_V6_T)


def tcp(
    src: str = HOST_IN,
    dst: str = HOST_OUT,
    sport: int = 40000,
    dport: int = 80,
    flags: str = "A",
    eth_src: str = HOST_IN_MAC,
    eth_dst: str = GW_MAC[INSIDE],
    ttl: int = 64,
    payload: bytes = b"",
) -> Packet:
    return (
        Ether(src=eth_src, dst=eth_dst)
        / IP(src=src, dst=dst, ttl=ttl, id=1)
        / TCP(sport=sport, dport=dport, flags=flags, seq=1000, window=8192)
        / payload
    )


def icmp_error(
    src: str, dst: str, quoted: Packet, kind: int = 3, code: int = 3, cut: int = 0
) -> Packet:
    """An ICMP error from `src` to `dst` quoting `quoted`'s IPv4 packet (its first `cut` bytes,
    if `cut`), sent into the gateway's inside port (from_outside moves it outside)."""
    body = bytes(quoted[IP])
    return (
        Ether(src=HOST_IN_MAC, dst=GW_MAC[INSIDE])
        / IP(src=src, dst=dst, id=2)
        / ICMP(type=kind, code=code)
        / Raw(body[:cut] if cut else body)
    )


def inside(payload: Packet, **ip: object) -> Frame:
    """A frame h1 sends the gateway's inside port: its IPv4 header (fields `ip` over h1 -> h2,
    id 1) and `payload` above it."""
    fields: dict[str, Any] = {"src": HOST_IN, "dst": HOST_OUT, "id": 1, **ip}
    return Frame(INSIDE, bytes(Ether(src=HOST_IN_MAC, dst=GW_MAC[INSIDE]) / IP(**fields) / payload))


def from_outside(packet: Packet) -> Packet:
    packet[Ether].src = HOST_OUT_MAC
    packet[Ether].dst = GW_MAC[OUTSIDE]
    return packet


def tcp6(
    src: str = HOST6_IN,
    dst: str = HOST6_OUT,
    sport: int = 40000,
    dport: int = 80,
    flags: str = "A",
    hlim: int = 64,
    ext: Packet | None = None,
    payload: bytes = b"",
) -> bytes:
    """An IPv6 TCP frame into the inside port (from the outside if `src` is outside)."""
    outside = src.startswith("2001:db8:2:")
    ip6 = IPv6(src=src, dst=dst, hlim=hlim, fl=0x12345)
    if ext is not None:
        ip6 = ip6 / ext
    eth = Ether(
        src=HOST_OUT_MAC if outside else HOST_IN_MAC, dst=GW_MAC[OUTSIDE if outside else INSIDE]
    )
    return bytes(eth / ip6 / TCP(sport=sport, dport=dport, flags=flags, seq=1000) / payload)


def _tagged(frame: bytes) -> bytes:
    """`frame` as SPM A returns it: from its MAC to this NPM's tag."""
    packet = Ether(frame)
    packet[Ether].src = SPM_MAC[SPM_A]
    packet[Ether].dst = tag_mac(TAG_BASE)
    return bytes(packet)


def ipv6_stimuli() -> list[Stimulus]:
    """One stimulus per behaviour of control/ipv6.p4 (and of PTF's test_ipv6)."""
    get = b"GET / HTTP/1.0\r\n\r\n"
    eth_in = Ether(src=HOST_IN_MAC, dst=GW_MAC[INSIDE])
    eth_out = Ether(src=HOST_OUT_MAC, dst=GW_MAC[OUTSIDE])
    ns = Ether(src=HOST_IN_MAC, dst="33:33:ff:00:00:01") / IPv6(
        src=HOST6_IN, dst="ff02::1:ff00:1", hlim=255
    )
    chain = (
        IPv6ExtHdrHopByHop(options=[PadN(optdata=b"\x00" * 4)])
        / IPv6ExtHdrDestOpt()
        / IPv6ExtHdrRouting(type=4, segleft=0)
        / IPv6ExtHdrFragment(offset=0, m=1, id=9)
        / IPv6ExtHdrDestOpt()
    )
    quoted = bytes(IPv6(src=HOST6_IN, dst=HOST6_OUT) / TCP(sport=40000, dport=80))
    return [
        Frame(
            INSIDE, bytes(ns / ICMPv6ND_NS(tgt=GW6_IN) / ICMPv6NDOptSrcLLAddr(lladdr=HOST_IN_MAC))
        ),
        Frame(INSIDE, bytes(ns / ICMPv6ND_NS(tgt=GW6_IN))),  # no option
        Frame(
            INSIDE,
            bytes(
                Ether(src=HOST_IN_MAC, dst="33:33:ff:00:00:01")
                / IPv6(src="::", dst="ff02::1:ff00:1", hlim=255)
                / ICMPv6ND_NS(tgt=GW6_IN)
            ),
        ),  # duplicate address detection
        Frame(INSIDE, bytes(ns / ICMPv6ND_NS(tgt="2001:db8:1::99"))),  # not the gateway's
        Frame(
            OUTSIDE,
            bytes(
                Ether(src=HOST_OUT_MAC, dst=GW_MAC[OUTSIDE])
                / IPv6(src=HOST6_OUT, dst=GW6_OUT, hlim=255)
                / ICMPv6ND_NS(tgt=GW6_OUT)
            ),
        ),  # unicast
        Frame(INSIDE, tcp6(flags="PA", payload=get)),  # session hit, /128 route
        Frame(OUTSIDE, tcp6(HOST6_OUT, HOST6_IN, 80, 40000, "A")),  # its reply
        Frame(INSIDE, tcp6(sport=40003)),  # blocked
        Frame(OUTSIDE, tcp6(HOST6_OUT, "2001:db8:ff01:ff::10", 80, 40000, "A")),  # NPTv6 inbound
        Frame(OUTSIDE, tcp6(HOST6_OUT, "2001:db8:ff01:ffff::10", 80, 40000, "A")),  # folds
        Frame(INSIDE, tcp6(sport=40002, flags="PA", payload=get)),  # inspected: to SPM A
        Frame(OUTSIDE, tcp6(HOST6_OUT, HOST6_IN, 80, 40002, "A")),  # its reply: to SPM A
        Frame(SPM_A, _tagged(tcp6(sport=40002, flags="PA", payload=get))),  # back: routed
        Frame(SPM_A, _tagged(tcp6(HOST6_OUT, HOST6_IN, 80, 40002, "A"))),
        Frame(SPM_A, _tagged(tcp6(sport=40999, flags="PA"))),  # back, no session
        Frame(INSIDE, tcp6(flags="FA")),  # session-close digest
        Frame(INSIDE, tcp6(ext=chain, payload=get)),  # extension headers walked
        Frame(INSIDE, tcp6(ext=IPv6ExtHdrDestOpt() / IPv6ExtHdrHopByHop())),  # out of order
        Frame(INSIDE, tcp6(ext=IPv6ExtHdrHopByHop(options=[PadN(optdata=b"\x00" * 130)] * 2))),
        Frame(
            INSIDE,
            bytes(
                eth_in
                / IPv6(src=HOST6_IN, dst=HOST6_OUT, nh=44)
                / IPv6ExtHdrFragment(nh=6, offset=3, id=9)
                / Raw(b"z" * 16)
            ),
        ),  # later fragment
        Frame(INSIDE, tcp6(sport=45001, flags="S")),  # opening: to the CPM
        Frame(
            INSIDE, bytes(eth_in / IPv6(src=HOST6_IN, dst=HOST6_OUT) / UDP(sport=1, dport=2) / b"u")
        ),
        Frame(
            INSIDE,
            bytes(eth_in / IPv6(src=HOST6_IN, dst=HOST6_OUT) / ICMPv6EchoRequest(id=0x77, seq=1)),
        ),  # echo of a session
        Frame(
            OUTSIDE,
            bytes(eth_out / IPv6(src=HOST6_OUT, dst=HOST6_IN) / ICMPv6EchoReply(id=0x77, seq=1)),
        ),
        Frame(
            OUTSIDE,
            bytes(eth_out / IPv6(src=HOST6_OUT, dst=HOST6_IN) / ICMPv6EchoReply(id=0x78, seq=1)),
        ),  # no session
        Frame(OUTSIDE, tcp6(HOST6_OUT, HOST6_IN, 80, 45000, "S")),  # unsolicited: ACL deny
        Frame(OUTSIDE, tcp6(HOST6_OUT, HOST6_IN, 53, 45000, "A")),  # no session
        Frame(
            OUTSIDE,
            bytes(eth_out / IPv6(src=HOST6_OUT, dst=HOST6_IN) / UDP(sport=9, dport=53) / b"q"),
        ),  # ACL to the CPU
        Frame(
            OUTSIDE,
            bytes(
                eth_out / IPv6(src=HOST6_OUT, dst=HOST6_IN) / ICMPv6PacketTooBig(mtu=1280) / quoted
            ),
        ),
        Frame(INSIDE, tcp6(flags="PA", hlim=1)),  # hop limit runs out: to the CPM
        Frame(OUTSIDE, tcp6(HOST6_OUT, HOST6_IN, 80, 40000, "A", hlim=1)),
        Frame(INSIDE, tcp6(dst="2001:db8:77::1", sport=45002, flags="S")),  # no route
        Frame(INSIDE, tcp6(src="ff0e::1")),  # multicast source
        Frame(INSIDE, tcp6(dst="ff02::16")),  # multicast
        Frame(INSIDE, tcp6(src="fe80::1")),  # link-local source
        Frame(INSIDE, tcp6(flags="PA")[: 14 + 30]),  # truncated IPv6 header
        Frame(INSIDE, tcp6(flags="PA") + b"\x00" * 8),  # trailing bytes
        PacketOut(tcp6(sport=45001, flags="S"), 0, submit_to_ingress=1),  # CPU loop
        PacketOut(tcp6(flags="PA", payload=get), 0, submit_to_ingress=1),  # session hit
    ]


def well_formed() -> list[Stimulus]:
    """One stimulus per behaviour of the packet walk (and of the PTF suite)."""
    get = b"GET / HTTP/1.0\r\n\r\n"
    f: list[Stimulus] = [
        Frame(INSIDE, bytes(tcp(flags="PA", payload=get))),  # session hit, routed
        Frame(OUTSIDE, bytes(from_outside(tcp(HOST_OUT, HOST_IN, 80, 40000, "A")))),  # its reply
        Frame(INSIDE, bytes(tcp(sport=40001, flags="PA", payload=get))),  # SNAT session
        Frame(
            OUTSIDE, bytes(from_outside(tcp(HOST_OUT, GW_OUT_IP, 80, 61001, "SA", payload=b"x")))
        ),
        inside(UDP(sport=5353, dport=53) / b"query"),
        inside(UDP(sport=5353, dport=53, chksum=0) / b"query"),
        inside(ICMP(type=8, id=0x1234, seq=1) / b"ping"),
        Frame(OUTSIDE, bytes(from_outside(tcp(HOST_OUT, GW_OUT_IP, 50000, 8080, "A")))),  # DNAT
        Frame(INSIDE, bytes(tcp(sport=40003))),  # blocked session
        Frame(INSIDE, bytes(tcp(flags="FA"))),  # end of a session: session-close digest
        Frame(OUTSIDE, bytes(from_outside(tcp(HOST_OUT, HOST_IN, 80, 40000, "R")))),
        Frame(INSIDE, bytes(tcp(sport=40002, flags="PA", payload=get))),  # inspected: to SPM A
        # Back from SPM A with the NAT-pending tag: NATed and routed.
        Frame(
            SPM_A,
            bytes(
                tcp(
                    sport=40002,
                    flags="PA",
                    payload=get,
                    eth_src=SPM_MAC[SPM_A],
                    eth_dst=tag_mac(TAG_BASE),
                )
            ),
        ),
        # Reply of the inspected flow: un-NATed before the SPM, tagged NAT-done; then its return.
        Frame(OUTSIDE, bytes(from_outside(tcp(HOST_OUT, GW_OUT_IP, 80, 61002, "A")))),
        Frame(
            SPM_A,
            bytes(
                tcp(
                    HOST_OUT,
                    HOST_IN,
                    80,
                    40002,
                    "A",
                    eth_src=SPM_MAC[SPM_A],
                    eth_dst=tag_mac(TAG_BASE | 1),
                )
            ),
        ),
        Frame(INSIDE, bytes(tcp(eth_dst=tag_mac(TAG_BASE)))),  # tag on a non-SPM port: spoof
        Frame(
            SPM_B, bytes(tcp(eth_src=SPM_MAC[SPM_B], eth_dst=tag_mac(TAG_BASE | 0x10)))
        ),  # unknown
        Frame(INSIDE, bytes(tcp(sport=45000, flags="A"))),  # ACK without a session
        Frame(INSIDE, bytes(tcp(sport=45001, flags="S"))),  # new flow, inspected: selector
        Frame(INSIDE, bytes(tcp(sport=45002, dport=23, flags="S"))),  # ACL deny
        inside(
            UDP(sport=6000, dport=7000) / b"new udp flow"
        ),  # new UDP flow, not inspected: routed at once
        inside(ICMP(type=8, id=77, seq=1)),  # new ICMP echo: ACL to CPU
        Frame(INSIDE, bytes(tcp(src=HOST_MASQ, sport=45003, flags="S"))),  # needs SNAT: to CPU
        Frame(OUTSIDE, bytes(from_outside(tcp(HOST_OUT, GW_OUT_IP, 50001, 8080, "S")))),  # fwd
        Frame(INSIDE, bytes(tcp(flags="PA", ttl=1))),  # TTL expires
        Frame(INSIDE, bytes(tcp(flags="PA", ttl=0))),
        Frame(OUTSIDE, bytes(from_outside(tcp(HOST_OUT, HOST_IN, 80, 40000, "A", ttl=1)))),
        inside(UDP(sport=1900, dport=1900) / b"M-SEARCH", dst="239.255.255.250", ttl=1),
        Frame(INSIDE, bytes(tcp(dst="192.0.2.9", sport=45004, flags="S"))),  # no route
        Frame(
            INSIDE,
            bytes(
                Ether(src=HOST_IN_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(pdst=GW_IN_IP, psrc=HOST_IN)
            ),
        ),  # ARP for the gateway: answered
        Frame(
            INSIDE,
            bytes(Ether(src=HOST_IN_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(pdst="10.0.1.77")),
        ),
        Frame(INSIDE, bytes(Ether(src=HOST_IN_MAC, dst=GW_MAC[INSIDE]) / IPv6() / UDP())),
        Frame(
            INSIDE,
            bytes(
                Ether(src=HOST_IN_MAC, dst=GW_MAC[INSIDE])
                / Dot1Q(vlan=10)
                / IP(src=HOST_IN, dst=HOST_OUT, id=1)
                / TCP(sport=40000, dport=80, flags="A")
            ),
        ),  # VLAN-tagged session packet
        inside(TCP(sport=40000, dport=80, flags="A"), options=b"\x01\x01\x01\x00"),  # IPv4 options
        inside(TCP(sport=40000, dport=80, flags="A"), flags="MF"),  # first fragment
        inside(Raw(b"\x00" * 24), frag=10, proto=6),  # later fragment
        Frame(INSIDE, bytes(tcp(flags="PA"))[:40]),  # truncated TCP header
        Frame(INSIDE, _bad_ip_checksum(tcp(flags="PA"))),
        Frame(INSIDE, bytes(tcp(flags="PA"))[:14] + b"\x44" + bytes(tcp(flags="PA"))[15:]),  # IHL 4
        Frame(OUTSIDE, bytes(tcp(flags="PA")) + b"\x00" * 20),  # Ethernet padding, wrong port
        # ICMP errors quoting a packet of a session (related: admitted, NAT undone in the
        # quoted packet), of no session, or cut short after the quoted IPv4 header.
        Frame(OUTSIDE, bytes(from_outside(icmp_error(HOST_OUT, HOST_IN, tcp(flags="PA"))))),
        Frame(
            OUTSIDE,
            bytes(
                from_outside(
                    icmp_error(HOST_OUT, GW_OUT_IP, tcp(GW_OUT_IP, HOST_OUT, 61001, 80), 3, 4)
                )
            ),
        ),
        Frame(
            INSIDE,
            bytes(icmp_error(HOST_IN, HOST_OUT, tcp(HOST_OUT, HOST_IN, 61001, 40001), 3, 3)),
        ),
        Frame(
            OUTSIDE,
            bytes(
                from_outside(
                    icmp_error(
                        "198.51.100.1",
                        GW_OUT_IP,
                        IP(src=GW_OUT_IP, dst=HOST_OUT, ttl=1) / UDP(sport=62000, dport=53) / b"q",
                        11,
                        0,
                    )
                )
            ),
        ),
        Frame(
            OUTSIDE,
            bytes(
                from_outside(
                    icmp_error(
                        "198.51.100.1",
                        GW_OUT_IP,
                        IP(src=GW_OUT_IP, dst=HOST_OUT, ttl=1) / ICMP(type=8, id=0x5678) / b"p",
                        11,
                        0,
                    )
                )
            ),
        ),
        Frame(OUTSIDE, bytes(from_outside(icmp_error(HOST_OUT, HOST_IN, tcp(sport=45999))))),
        Frame(OUTSIDE, bytes(from_outside(icmp_error(HOST_OUT, HOST_IN, tcp(), cut=24)))),
        PacketOut(bytes(tcp(flags="PA", payload=b"from the CPU")), OUTSIDE),
        PacketOut(bytes(tcp(sport=45005, flags="S")), 0, submit_to_ingress=1),  # still no session
        PacketOut(bytes(tcp(flags="PA", payload=get)), 0, submit_to_ingress=1),  # session hit
        *ipv6_stimuli(),
    ]
    return f


def _bad_ip_checksum(packet: Packet) -> bytes:
    data = bytearray(bytes(packet))
    data[24] ^= 0xFF
    return bytes(data)


def selector_flows(count: int) -> tuple[list[Stimulus], list[Stimulus]]:
    """New inspected flows (TCP SYNs), then their reverse SYNs: the selector's choice per flow.
    The reverses come after all the originals: the first SYN of a flow makes its data-plane
    session (and the digest), and a target reads its ports in an order of its own, so a reverse
    sent beside its original could come first on one target and second on the other."""
    rng = random.Random(11)
    out: list[Stimulus] = []
    reverses: list[Stimulus] = []
    for i in range(count):
        src = f"10.0.1.{rng.randrange(2, 120)}"
        dst = f"198.51.100.{rng.randrange(1, 255)}"
        sport, dport = rng.randrange(1024, 65536), rng.choice((80, 443, 8443, 25))
        proto = "udp" if i % 5 == 4 else "tcp"
        if proto == "tcp":
            out.append(Frame(INSIDE, bytes(tcp(src, dst, sport, dport, "S"))))
            reverses.append(Frame(OUTSIDE, bytes(from_outside(tcp(dst, src, dport, sport, "S")))))
        else:  # other IP protocols are inspected too (only UDP is exempt): GRE-like
            out.append(
                Frame(
                    INSIDE,
                    bytes(
                        Ether(src=HOST_IN_MAC, dst=GW_MAC[INSIDE])
                        / IP(src=src, dst=dst, proto=47, id=i)
                        / Raw(bytes(rng.randrange(256) for _ in range(16)))
                    ),
                )
            )
    return out, reverses


def _fix_ipv4_checksum(frame: bytearray) -> None:
    """Recompute the IPv4 header checksum of an untagged IPv4 frame in place (if it is one)."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00":
        return
    ihl = (frame[14] & 0x0F) * 4
    if ihl < 20 or len(frame) < 14 + ihl:
        return
    frame[24:26] = b"\x00\x00"
    total = sum(int.from_bytes(frame[i : i + 2], "big") for i in range(14, 14 + ihl, 2))
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    frame[24:26] = (~total & 0xFFFF).to_bytes(2, "big")


def fuzz_frames(count: int, seed: int = 2024) -> list[Stimulus]:
    """Random, truncated and mutated frames, on random ports (seeded). Some mutations get their
    IPv4 checksum fixed so that they go past validation into the tables."""
    rng = random.Random(seed)
    templates = [s.data for s in well_formed() if isinstance(s, Frame)]
    out: list[Stimulus] = []
    for i in range(count):
        port = rng.choice(PORTS)
        kind = i % 5
        if kind == 0:  # random bytes, sometimes with a plausible Ethernet/IPv4 start
            length = rng.randrange(14, 160)
            data = bytes(rng.getrandbits(8) for _ in range(length))
            if rng.random() < 0.5:
                data = bytes.fromhex(GW_MAC[INSIDE].replace(":", "")) + data[6:12] + b"\x08\x00"
                data += bytes([0x45]) + bytes(rng.getrandbits(8) for _ in range(length))
        elif kind == 1:  # a well-formed frame cut short
            base = rng.choice(templates)
            data = base[: rng.randrange(14, len(base) + 1)]
        elif kind == 2:  # a well-formed frame with a few bytes changed (headers mostly)
            mutable = bytearray(rng.choice(templates))
            for _ in range(rng.randrange(1, 4)):
                mutable[rng.randrange(12, min(len(mutable), 60))] = rng.getrandbits(8)
            data = bytes(mutable)
        elif kind == 3:  # IPv4/L4 fields changed, IPv4 checksum still right
            mutable = bytearray(rng.choice(templates))
            for _ in range(rng.randrange(1, 3)):
                pos = rng.choice((15, 16, 17, 20, 21, 22, 23, *range(26, 38), 47))
                if pos < len(mutable):
                    mutable[pos] = rng.getrandbits(8)
            _fix_ipv4_checksum(mutable)
            data = bytes(mutable)
        else:  # a known frame with a tag (or a random MAC) as destination, on any port
            mutable = bytearray(rng.choice(templates))
            tag = rng.choice((TAG_BASE, TAG_BASE | 1, TAG_BASE | 2, rng.getrandbits(16)))
            mutable[0:6] = bytes.fromhex(tag_mac(tag).replace(":", ""))
            data = bytes(mutable)
        out.append(Frame(port, data))
    return out


# -- the two targets ---------------------------------------------------------------------------


@dataclass
class Side:
    name: str
    client: P4RuntimeClient
    sockets: dict[int, socket.socket]
    outputs: collections.Counter[Output] = field(default_factory=collections.Counter)


class Harness:
    """Sends the same stimuli to both targets and collects what each one emits."""

    def __init__(self, schema: P4Schema, sides: Sequence[Side]) -> None:
        self.schema = schema
        self.sides = sides
        self.selector = selectors.DefaultSelector()
        for side in sides:
            for sock in side.sockets.values():
                self.selector.register(sock, selectors.EVENT_READ, side)

    def close(self) -> None:
        self.selector.close()

    def _port_of(self, side: Side, sock: socket.socket) -> int:
        return next(p for p, s in side.sockets.items() if s is sock)

    def _poll(self, timeout: float) -> bool:
        got = False
        for key, _ in self.selector.select(timeout):
            side: Side = key.data
            sock: socket.socket = key.fileobj  # type: ignore[assignment]
            port = self._port_of(side, sock)
            for frame in received_frames(sock):
                side.outputs[(port, frame, ())] += 1
                got = True
        for side in self.sides:
            while True:
                try:
                    packet_in = side.client.packet_ins.get_nowait()
                except queue.Empty:
                    break
                meta = self.schema.decode_packet_metadata("packet_in", packet_in.metadata)
                output = (pc.CPU_PORT, bytes(packet_in.payload), tuple(sorted(meta.items())))
                side.outputs[output] += 1
                got = True
            while (digest := side.client.get_digest(0)) is not None:
                for output in self._digest_records(digest):
                    side.outputs[output] += 1
                got = True
        return got

    def _digest_records(self, digest: p4r.DigestList) -> Iterator[Output]:
        name = next(
            n for n in DIGESTS if self.schema.digests.get(n).preamble.id == digest.digest_id
        )
        fields = self.schema.digest_fields(name)
        for data in digest.data:
            values = [int.from_bytes(m.bitstring, "big") for m in data.struct.members]
            yield (
                DIGEST,
                b"",
                (("digest", DIGESTS.index(name)), *zip(fields, values, strict=True)),
            )

    def exchange(self, stimuli: Sequence[Stimulus]) -> list[collections.Counter[Output]]:
        """Send `stimuli` to every side; return each side's outputs once all are quiet."""
        self._poll(0)
        for side in self.sides:
            side.outputs = collections.Counter()
        for stimulus in stimuli:
            for side in self.sides:
                if isinstance(stimulus, Frame):
                    side.sockets[stimulus.port].send(stimulus.data)
                else:
                    metadata = self.schema.encode_packet_metadata(
                        "packet_out",
                        {
                            "egress_port": stimulus.egress_port,
                            "submit_to_ingress": stimulus.submit_to_ingress,
                        },
                    )
                    side.client.packet_out(stimulus.data, metadata)
        started = last = time.monotonic()
        while True:
            now = time.monotonic()
            if now - last >= QUIET or now - started >= DEADLINE:
                break
            if self._poll(min(0.05, QUIET - (now - last))):
                last = time.monotonic()
        return [side.outputs for side in self.sides]

    def counters(self, side: Side) -> dict[str, list[tuple[int, int]]]:
        out = {}
        for name in (pc.C_DROP_COUNTER, pc.C_PORT_RX_COUNTER, pc.C_PORT_TX_COUNTER):
            counter_id = self.schema.counters.get(name).preamble.id
            cells = sorted(
                (c.index.index, c.data.packet_count, c.data.byte_count)
                for c in side.client.read_counter(counter_id)
            )
            out[name] = [(p, b) for _, p, b in cells]
        return out

    def require_same(self, stimuli: Sequence[Stimulus], what: str) -> int:
        """Run `stimuli` in batches; fail naming the first stimulus the targets disagree on.
        Returns how many outputs each target produced."""
        total = 0
        for i in range(0, len(stimuli), BATCH):
            batch = stimuli[i : i + BATCH]
            soft, bmv2 = self.exchange(batch)
            if soft != bmv2:
                pytest.fail(
                    f"{what}: {self._explain(batch)}\n  in the batch, software switch only: "
                    f"{show(soft - bmv2)}\n  in the batch, BMv2 only: {show(bmv2 - soft)}"
                )
            total += sum(soft.values())
        return total

    def _explain(self, batch: Sequence[Stimulus]) -> str:
        for stimulus in batch:
            soft, bmv2 = self.exchange([stimulus])
            if soft != bmv2:
                return (
                    f"the targets differ on {describe(stimulus)}\n"
                    f"  software switch only: {show(soft - bmv2)}\n"
                    f"  BMv2 only:            {show(bmv2 - soft)}"
                )
        return "the targets differ on the batch as a whole but on no single stimulus of it"


def describe(stimulus: Stimulus) -> str:
    if isinstance(stimulus, Frame):
        summary = Ether(stimulus.data).summary()
        return f"frame in port {stimulus.port}: {stimulus.data.hex()} ({summary})"
    return (
        f"packet-out (egress {stimulus.egress_port}, submit {stimulus.submit_to_ingress}): "
        f"{stimulus.data.hex()}"
    )


def show(outputs: collections.Counter[Output]) -> str:
    if not outputs:
        return "nothing"
    return "; ".join(
        f"{n} x port {port}: {frame.hex()}{f' {dict(meta)}' if meta else ''}"
        for (port, frame, meta), n in outputs.items()
    )


def _install(client: P4RuntimeClient, schema: P4Schema) -> None:
    build = p4_build_dir()
    client.set_pipeline(schema.p4info, (build / "opengate.json").read_bytes())
    entries = gateway_entries() + classification_entries() + session_entries()
    updates = [
        p4r.Update(
            type=p4r.Update.MODIFY if e.is_default else p4r.Update.INSERT,
            entity=p4r.Entity(table_entry=schema.encode_entry(e)),
        )
        for e in entries
    ]
    client.write(updates)
    # Digests one record per list at once, never acknowledged and never timing out, so that a
    # record is sent once and its repeats are always filtered: the same on both targets, in
    # whatever order the samples arrive.
    for name in DIGESTS:
        digest = p4r.DigestEntry(digest_id=schema.digests.get(name).preamble.id)
        digest.config.max_timeout_ns = 0
        digest.config.max_list_size = 1
        digest.config.ack_timeout_ns = 3600 * 10**9
        client.insert([digest])
    # The SPM pool: two members; the group is created with weights 3:1 and then changed to 2:3,
    # so that PI's weight copies are created and freed (their handles decide the choice).
    profile_id = schema.tables.get(pc.T_SPM_SELECT).implementation_id
    action = schema.actions.get(pc.A_STEER_TO_SPM)
    for member_id, port in ((1, SPM_A), (2, SPM_B)):
        member = p4r.ActionProfileMember(action_profile_id=profile_id, member_id=member_id)
        member.action.CopyFrom(
            schema.encode_action(action, {"port": port, "spm_mac": mac(SPM_MAC[port])})
        )
        client.insert([member])
    group = p4r.ActionProfileGroup(action_profile_id=profile_id, group_id=GROUP, max_size=8)
    group.members.add(member_id=1, weight=3)
    group.members.add(member_id=2, weight=1)
    client.insert([group])
    del group.members[:]
    group.members.add(member_id=1, weight=2)
    group.members.add(member_id=2, weight=3)
    client.modify([group])
    table = schema.tables.get(pc.T_SPM_SELECT)
    entry = p4r.TableEntry(table_id=table.id)
    match = schema.encode_match(table, "pool", Exact(POOL))
    assert match is not None
    entry.match.append(match)
    entry.action.action_profile_group_id = GROUP
    client.insert([entry])


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    reason = require_root("the differential test")
    if reason:
        pytest.skip(reason)
    try:
        bmv2_choice = select_target({**os.environ, "TARGET": "bmv2"})
    except TargetError:
        pytest.skip(f"{BMV2_BINARY} (BMv2) is not on PATH: nothing to compare the switch with")
    soft_choice = select_target({**os.environ, "TARGET": "soft"})
    schema = P4Schema.load(p4_build_dir() / "opengate.p4info.txtpb")
    log_dir = repo_root() / "run" / "differential"
    with contextlib.ExitStack() as stack:
        stack.enter_context(veth_pairs(SOFT_PAIRS + BMV2_PAIRS))
        sides = []
        for name, choice, pairs in (
            ("soft", soft_choice, SOFT_PAIRS),
            ("bmv2", bmv2_choice, BMV2_PAIRS),
        ):
            sw = stack.enter_context(
                running_switch(
                    {n: pair[0] for n, pair in zip(PORTS, pairs, strict=True)},
                    log_dir / f"{name}.log",
                    choice,
                )
            )
            client = stack.enter_context(P4RuntimeClient(sw.grpc_address, 1, 10).connect())
            _install(client, schema)
            sockets = {n: open_port(pair[1]) for n, pair in zip(PORTS, pairs, strict=True)}
            for sock in sockets.values():
                stack.callback(sock.close)
            sides.append(Side(name, client, sockets))
        h = Harness(schema, sides)
        stack.callback(h.close)
        yield h


def _counters_delta(
    h: Harness, before: list[dict[str, list[tuple[int, int]]]]
) -> list[dict[str, list[tuple[int, int]]]]:
    after = [h.counters(side) for side in h.sides]
    return [
        {
            name: [(p1 - p0, b1 - b0) for (p0, b0), (p1, b1) in zip(b[name], a[name], strict=True)]
            for name in a
        }
        for b, a in zip(before, after, strict=True)
    ]


def _check(h: Harness, stimuli: Sequence[Stimulus], what: str) -> int:
    before = [h.counters(side) for side in h.sides]
    produced = h.require_same(stimuli, what)
    soft, bmv2 = _counters_delta(h, before)
    for name in soft:
        assert soft[name] == bmv2[name], f"{what}: {name} differs (soft, bmv2 per index)"
    return produced


def test_well_formed_flows_come_out_the_same(harness: Harness) -> None:
    produced = _check(harness, well_formed(), "well-formed flows")
    assert produced > 15  # the stimuli do produce output (not two silent switches)


def test_weighted_selector_picks_the_same_spm_for_each_flow(harness: Harness) -> None:
    originals, reverses = selector_flows(150)
    produced = _check(harness, originals, "new flows through the selector")
    produced += _check(harness, reverses, "their reverse SYNs")
    assert produced > 250


def test_fuzzed_and_truncated_frames_come_out_the_same(harness: Harness) -> None:
    _check(harness, fuzz_frames(400), "fuzzed frames")


def test_drop_counters_agree(harness: Harness) -> None:
    soft, bmv2 = (harness.counters(side) for side in harness.sides)
    assert soft[pc.C_DROP_COUNTER] == bmv2[pc.C_DROP_COUNTER]
    assert sum(p for p, _ in soft[pc.C_DROP_COUNTER]) > 0


def _write_outcome(client: P4RuntimeClient, kind: int, message: object) -> str:
    """ "OK", or the canonical code of the (single) update's error."""
    try:
        client.write([p4r.Update(type=kind, entity=entity_of(message))])  # type: ignore[arg-type]
    except P4RuntimeError as error:
        codes = [rpc_code.Code.Name(d.code) for d in error.details]  # type: ignore[arg-type]
        return codes[0] if codes else error.code.name
    return "OK"


def test_selector_writes_are_accepted_or_refused_alike(harness: Harness) -> None:
    """Group weights and sizes, and entries pointing at an empty group: the same verdicts as PI
    on BMv2 (the codes are PI's)."""
    schema = harness.schema
    profile_id = schema.tables.get(pc.T_SPM_SELECT).implementation_id
    table = schema.tables.get(pc.T_SPM_SELECT)

    def group(gid: int, max_size: int, *weights: tuple[int, int]) -> p4r.ActionProfileGroup:
        g = p4r.ActionProfileGroup(action_profile_id=profile_id, group_id=gid, max_size=max_size)
        for member_id, weight in weights:
            g.members.add(member_id=member_id, weight=weight)
        return g

    def entry(pool: int, gid: int) -> p4r.TableEntry:
        e = p4r.TableEntry(table_id=table.id)
        match = schema.encode_match(table, "pool", Exact(pool))
        assert match is not None
        e.match.append(match)
        e.action.action_profile_group_id = gid
        return e

    ins, mod, dele = p4r.Update.INSERT, p4r.Update.MODIFY, p4r.Update.DELETE
    steps: list[tuple[int, object]] = [
        (ins, group(201, 8, (1, 0))),  # weight 0
        (ins, group(202, 2, (1, 2), (2, 1))),  # weights above max_size
        (ins, group(203, 4, (1, 2), (2, 2))),
        (mod, group(203, 5, (1, 1))),  # max_size changed
        (mod, group(203, 0, (1, 1), (2, 4))),  # weights above the size given at creation
        (mod, group(203, 0, (1, 3), (2, 1))),
        (ins, group(204, 4)),  # empty group: allowed
        (ins, entry(98, 204)),  # an entry pointing at it: refused by BMv2
        (ins, entry(99, 203)),
        (dele, entry(99, 203)),
        (dele, group(203, 0)),
        (dele, group(204, 0)),
    ]
    outcomes = {
        side.name: [_write_outcome(side.client, kind, message) for kind, message in steps]
        for side in harness.sides
    }
    assert outcomes["soft"] == outcomes["bmv2"]
    assert outcomes["soft"][0] == "INVALID_ARGUMENT"
