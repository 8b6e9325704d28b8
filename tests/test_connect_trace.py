"""bench.connect_trace's reading of captures: two connections written as pcap files with known
times (one through the CPM, one not), and the stages it finds, to the microsecond."""

from __future__ import annotations

from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import wrpcap

from bench import connect_trace
from bench.connect_trace import Capture

GRPC = 50051
ROLES = {"npm1-eth1": "inside", "npm1-eth2": "outside", "npm1-eth3": "spm", "npm1-eth4": "spm"}


def _syn(isn: int, t: float, src: str = "10.0.1.10", sport: int = 40000) -> Ether:
    p = Ether() / IP(src=src, dst="198.51.100.20") / TCP(sport=sport, dport=80, flags="S", seq=isn)
    p.time = t
    return p


def _synack(isn: int, t: float) -> Ether:
    p = (
        Ether()
        / IP(src="198.51.100.20", dst="10.0.1.10")
        / TCP(sport=80, dport=40000, flags="SA", seq=777, ack=isn + 1)
    )
    p.time = t
    return p


def _grpc(isn: int, t: float, from_switch: bool) -> Ether:
    inner = bytes(_syn(isn, 0.0)[IP])  # the packet, as a packet-in or packet-out carries it
    sport, dport = (GRPC, 41000) if from_switch else (41000, GRPC)
    p = Ether() / IP(src="127.0.0.1", dst="127.0.0.1") / TCP(sport=sport, dport=dport)
    p = p / Raw(b"\x00\x00\x40" + inner)
    p.time = t
    return p


def test_the_stages_of_two_connections(tmp_path: Path) -> None:
    a, b = 0x11111111, 0x22222222  # a: through the CPM; b: a session made by the data plane
    files = {
        "npm1-eth1-in": [_syn(a, 10.000), _syn(b, 20.000), _syn(a, 11.0)],  # a's retransmission
        "npm1-eth3-out": [_syn(a, 10.050), _synack(a, 10.080)],
        "npm1-eth4-out": [_syn(b, 20.001), _synack(b, 20.011)],
        "npm1-eth3-in": [_syn(a, 10.060), _synack(a, 10.090)],
        "npm1-eth4-in": [_syn(b, 20.003), _synack(b, 20.012)],
        "npm1-eth2-out": [_syn(a, 10.061), _syn(b, 20.004)],
        "npm1-eth2-in": [_synack(a, 10.070), _synack(b, 20.010)],
        "npm1-eth1-out": [_synack(a, 10.095), _synack(b, 20.015)],
        "lo-inout": [_grpc(a, 10.002, True), _grpc(a, 10.030, False)],
    }
    for name, packets in files.items():
        wrpcap(str(tmp_path / f"{name}.pcap"), packets)
    trace = connect_trace.analyse(Capture(tmp_path, ROLES, GRPC))
    stages = trace["stages"]
    expected = {
        "switch: SYN in, packet-in out": (1, 2.0, 2.0),
        "CPM: packet-in to packet-out": (1, 28.0, 28.0),
        "switch: packet-out in, SYN to the SPM": (1, 20.0, 20.0),
        "switch: SYN in, to the SPM (no CPM)": (1, 1.0, 1.0),  # b only
        "SPM: SYN": (2, 6.0, 10.0),
        "switch: SYN back, out": (2, 1.0, 1.0),
        "out1 answers": (2, 7.5, 9.0),
        "switch: SYN-ACK in, to the SPM": (2, 5.5, 10.0),
        "SPM: SYN-ACK": (2, 5.5, 10.0),
        "switch: SYN-ACK back, to h1": (2, 4.0, 5.0),
    }
    assert set(stages) == set(expected)
    for name, (n, median, largest) in expected.items():
        got = stages[name]
        assert got[0] == n, name
        assert got[1:] == pytest.approx((median, largest), abs=1e-3), name
    assert trace["connections"] == 2
    assert sorted(trace["totals"]) == pytest.approx([15.0, 95.0], abs=1e-3)
