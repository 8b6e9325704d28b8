"""The CPM's fair queue of packet-ins (controller.packet_in_queue): nothing accepted is lost, each
source keeps its order, sources are served in turn, a full source is dropped and counted; and
through the controller, a flood from one host does not make another host's packet wait."""

from __future__ import annotations

import threading
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Dot1Q, Ether

from controller import events as ev
from controller.packet_in_queue import PacketInQueue, source_of
from controller.runtime import PACKET_IN_BATCH
from controller.session_model import parse_flow
from tests.controller.conftest import ControllerFactory, wait_until
from tests.controller.flows import H1, H2, OUT1, ip, packet_in_meta, syn
from tests.switch_double import SwitchDouble

# A run of operations: ("put", source) or ("take", limit).
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 4)),
        st.tuples(st.just("take"), st.integers(0, 6)),
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(OPS, st.integers(1, 5))
def test_fair_queue_against_a_reference(ops: list[tuple[str, int]], per_source: int) -> None:
    """Against a brute-force model: per source a list of what it has waiting; a take walks the
    sources in the order they were last served (a source that had nothing waiting joins at the
    end), one item each, round after round."""
    drops: list[str] = []
    queue = PacketInQueue(per_source, on_drop=drops.append)
    waiting: dict[int, list[int]] = {}
    order: list[int] = []  # sources with items waiting, in serving order
    serial = 0
    accepted: list[int] = []
    taken: list[int] = []
    for op, arg in ops:
        if op == "put":
            serial += 1
            ok = queue.put(arg, "npm1", (arg, serial))
            expect_ok = len(waiting.get(arg, [])) < per_source
            assert ok == expect_ok
            if expect_ok:
                if arg not in waiting:
                    waiting[arg] = []
                    order.append(arg)
                waiting[arg].append(serial)
                accepted.append(serial)
        else:
            got = queue.take(arg)
            expected: list[tuple[int, int]] = []
            while order and len(expected) < arg:
                source = order.pop(0)
                expected.append((source, waiting[source].pop(0)))
                if waiting[source]:
                    order.append(source)
                else:
                    del waiting[source]
            assert got == expected
            taken += [s for _, s in got]
        assert len(queue) == sum(len(v) for v in waiting.values())
    taken += [s for _, s in queue.take(10**6)]
    assert sorted(taken) == accepted, "every accepted packet comes out once"
    assert queue.dropped == len(drops) == serial - len(accepted)
    assert drops == ["npm1"] * len(drops)


def test_sources_are_served_in_turn_and_each_keeps_its_order() -> None:
    queue = PacketInQueue(per_source=100)
    for n in range(5):
        queue.put("flood", "npm1", f"f{n}")
    queue.put("other", "npm1", "o0")
    queue.put("other", "npm1", "o1")
    assert queue.take(3) == ["f0", "o0", "f1"]
    assert queue.take(10) == ["o1", "f2", "f3", "f4"]
    assert len(queue) == 0 and queue.take(5) == []


def test_the_consumer_is_woken_once_per_take_while_packets_wait() -> None:
    """One wake for a burst of puts; another after a take that left packets; none after a take
    that emptied the queue, until the next put."""
    wakes: list[int] = []
    queue = PacketInQueue(per_source=10, wake=lambda: wakes.append(len(queue)))
    for n in range(3):
        queue.put("a", "npm1", n)
    assert wakes == [1]
    assert queue.take(1) == [0] and wakes == [1, 2]
    assert queue.take(10) == [1, 2] and wakes == [1, 2]
    queue.put("b", "npm1", "b0")
    assert wakes == [1, 2, 1]


def test_a_full_source_is_dropped_alone() -> None:
    drops: list[str] = []
    queue = PacketInQueue(per_source=2, on_drop=drops.append)
    assert [queue.put("a", "npm1", n) for n in range(4)] == [True, True, False, False]
    assert queue.put("b", "npm2", "b0")
    assert drops == ["npm1", "npm1"] and queue.dropped == 2
    assert Counter(queue.take(10)) == Counter([0, 1, "b0"])


def test_the_source_is_the_ipv4_source_else_the_port() -> None:
    plain = bytes(Ether() / IP(src="10.0.1.10", dst="198.51.100.20") / TCP())
    tagged = bytes(Ether() / Dot1Q(vlan=7) / IP(src="10.0.1.10", dst="198.51.100.20") / TCP())
    ipv6 = b"\x00" * 12 + b"\x86\xdd" + b"\x00" * 40

    def source(npm: str, frame: bytes, port: int) -> object:
        return source_of(npm, parse_flow(frame), port)

    assert source("npm1", plain, 1) == source("npm1", tagged, 2) == ("npm1", "ipv4", ip(H1))
    assert source("npm2", plain, 1) != source("npm1", plain, 1)
    assert source("npm1", ipv6, 3) == ("npm1", "port", 3)
    assert source("npm1", b"\x00" * 14, 4) == ("npm1", "port", 4), "a short frame: its port"
    assert source_of("npm1", None, 3) != source_of("npm1", (3, 0, 0, 0, 0), 1), "ports apart"


def test_a_flood_from_one_host_does_not_hold_up_another(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    """With the dispatcher held while 100 opening packets of H1 and then one of H2 arrive, H2's
    is set up in the first batch (with one queue it came last), and 30 more from H1 than its
    queue holds are dropped and counted."""
    controller = make_controller(switch)
    queue = controller.packet_ins
    queue.per_source = 100
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        inside.set()
        release.wait(60)

    controller.bus.publish(ev.Call(hold))
    wait_until("the dispatcher held", inside.is_set)
    try:
        for n in range(130):  # a remote port each: the lab policy has 10 NAT ports per remote end
            switch.inject_packet_in(syn(H1, OUT1, 40000, 1000 + n), packet_in_meta())
        late = syn(H2, OUT1, 40000, 80)
        switch.inject_packet_in(late, packet_in_meta())
        wait_until(
            "101 packet-ins queued, 30 dropped",
            lambda: len(queue) == 101 and queue.dropped == 30,
        )
    finally:
        release.set()
    wait_until("101 packet-outs", lambda: switch.packet_outs.qsize() == 101)
    order = [switch.packet_out(1.0) for _ in range(101)]
    payloads = [p[0] for p in order if p is not None]
    assert late in payloads[:PACKET_IN_BATCH], "H2's packet in the first batch"
    dropped = controller.metrics.registry.get_sample_value(
        "opengate_packet_ins_dropped_total", {"npm": "npm1"}
    )
    assert dropped == 30
