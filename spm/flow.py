"""Flows as a worker sees them: who is the client, TCP handshake state, both stream directions,
and the per-flow state of the inspectors. Keyed by Community ID; bounded in number and idle time.

Not supported: TCP state validation beyond the handshake (window checks, PAWS); a flow whose SYN
was missed is picked up mid-stream and deemed established, its client guessed from the ports
(the higher port is the client's).
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from spm.av.inspector import AvObject
from spm.community_id import PROTO_ICMP, PROTO_ICMP6, PROTO_TCP, PROTO_UDP
from spm.http import HttpMessage, HttpParser
from spm.packet import ACK, SYN, Packet
from spm.reassembly import StreamBudget, TcpStream
from spm.verdict import FlowInfo, Verdict

PROTO_NAMES = {PROTO_TCP: "tcp", PROTO_UDP: "udp", PROTO_ICMP: "icmp", PROTO_ICMP6: "ipv6-icmp"}

# TCP handshake states
NEW, SYN_SENT, SYN_RECV, ESTABLISHED = 0, 1, 2, 3


@dataclass(slots=True)
class Direction:
    """What the inspectors keep for one direction (0 = to server, 1 = to client)."""

    stream: TcpStream | None = None
    pdu: bytearray = field(default_factory=bytearray)  # stream bytes since the last flush
    pdu_gen: int = 0  # bumped on every flush: the IPS resets its per-PDU state
    http: HttpParser | None = None
    message: HttpMessage | None = None  # the current HTTP message
    body: bytearray = field(default_factory=bytearray)  # its decoded body, up to http_depth
    msg_gen: int = 0  # bumped for every new HTTP message
    av: AvObject | None = None
    fin: bool = False
    packets: int = 0
    bytes: int = 0


@dataclass(slots=True)
class Flow:
    cid: str
    proto: int
    client: bytes
    client_port: int
    server: bytes
    server_port: int
    first_seen: float
    last_seen: float
    midstream: bool = False
    tcp_state: int = NEW
    dirs: tuple[Direction, Direction] = field(default_factory=lambda: (Direction(), Direction()))
    verdict: Verdict = Verdict.ACCEPT  # BLOCK or BYPASS once decided for the whole flow
    flow_class: str = ""  # "", then tls | ssh | http | dns | other
    clean_bytes: int = 0
    bypass_requested: bool = False
    alerted: set[tuple[int, int]] = field(default_factory=set)  # (gid, sid) already reported
    flowbits: set[str] = field(default_factory=set)
    ips: dict[Any, Any] = field(default_factory=dict)  # the IPS engine's per-flow state
    http_methods: deque[bytes] = field(default_factory=deque)
    closed: bool = False

    def to_server(self, pkt: Packet) -> bool:
        return pkt.src == self.client and (pkt.sport == self.client_port or not pkt.has_ports)

    @property
    def established(self) -> bool:
        return self.tcp_state == ESTABLISHED or self.proto != PROTO_TCP

    def info(self) -> FlowInfo:
        return FlowInfo(
            PROTO_NAMES.get(self.proto, str(self.proto)),
            str(ipaddress.ip_address(self.client)),
            str(ipaddress.ip_address(self.server)),
            self.client_port,
            self.server_port,
        )

    def packet_info(self, pkt: Packet) -> FlowInfo:
        """The flow as the packet goes (src = the packet's sender)."""
        return FlowInfo(
            PROTO_NAMES.get(self.proto, str(self.proto)),
            str(ipaddress.ip_address(pkt.src)),
            str(ipaddress.ip_address(pkt.dst)),
            pkt.sport if pkt.has_ports else max(pkt.icmp_type, 0),
            pkt.dport if pkt.has_ports else max(pkt.icmp_code, 0),
        )


@dataclass(slots=True)
class FlowTableCounters:
    created: int = 0
    expired: int = 0
    evicted: int = 0


class FlowTable:
    """Flows by Community ID, least recently seen first (LRU), bounded."""

    def __init__(self, max_flows: int, timeout: float, budget: StreamBudget) -> None:
        self.max_flows = max_flows
        self.timeout = timeout
        self.budget = budget
        self._flows: OrderedDict[str, Flow] = OrderedDict()
        self.counters = FlowTableCounters()

    def __len__(self) -> int:
        return len(self._flows)

    def __iter__(self) -> Iterator[Flow]:
        return iter(list(self._flows.values()))

    def get(self, cid: str, now: float) -> Flow | None:
        flow = self._flows.get(cid)
        if flow is not None:
            flow.last_seen = now
            self._flows.move_to_end(cid)
        return flow

    def create(self, cid: str, pkt: Packet, now: float) -> tuple[Flow, list[Flow]]:
        """A new flow for this packet; also returns flows evicted to make room."""
        evicted: list[Flow] = []
        while len(self._flows) >= self.max_flows:
            _cid, old = self._flows.popitem(last=False)
            self.counters.evicted += 1
            evicted.append(old)
        client_is_src = True
        midstream = False
        if pkt.proto == PROTO_TCP:
            if pkt.tcp_flags & SYN and pkt.tcp_flags & ACK:
                client_is_src = False  # a SYN-ACK: the receiver opened the connection
            elif not pkt.tcp_flags & SYN:
                midstream = True
                client_is_src = pkt.sport >= pkt.dport
        elif pkt.proto in (PROTO_UDP,) and pkt.sport < pkt.dport and pkt.sport < 1024:
            client_is_src = False  # a reply from a well-known port, first seen
        if client_is_src:
            c, cp, s, sp = pkt.src, pkt.sport, pkt.dst, pkt.dport
        else:
            c, cp, s, sp = pkt.dst, pkt.dport, pkt.src, pkt.sport
        flow = Flow(cid, pkt.proto, c, cp, s, sp, now, now, midstream=midstream)
        if midstream:
            flow.tcp_state = ESTABLISHED
        self._flows[cid] = flow
        self.counters.created += 1
        return flow, evicted

    def remove(self, cid: str) -> Flow | None:
        return self._flows.pop(cid, None)

    def expire(self, now: float) -> list[Flow]:
        """Remove flows idle longer than the timeout (closed flows after a short grace)."""
        out: list[Flow] = []
        while self._flows:
            cid, flow = next(iter(self._flows.items()))
            idle = now - flow.last_seen
            if idle < self.timeout and not (flow.closed and idle > 5.0):
                break
            del self._flows[cid]
            out.append(flow)
            self.counters.expired += 1
        return out
