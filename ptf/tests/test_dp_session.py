"""Step 5: sessions made by the data plane. The first permitted opening packet claims a slot; the
reply and later packets are admitted by it before any controller write; a slot admits only its
own flow; collisions, ageing and the controller's removals are counted and fail closed.

Only the v1model build has data-plane sessions (docs/explanation/dp-sessions.md); both v1model
targets (BMv2, the built-in switch) run these tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator

from ptf import testutils
from scapy.layers.l2 import Ether
from scapy.packet import Packet

from opengate import p4constants as pc
from opengate.entries import Exact, TableEntry
from opengate.flow_slots import candidate_slots

from opengate_test import (
    GW_MAC,
    HOST_IN,
    HOST_IN_MAC,
    HOST_OUT,
    HOST_OUT_MAC,
    INSIDE,
    OUTSIDE,
    POOL,
    SPM_A,
    SPM_MAC,
    TAG_BASE,
    OpenGateTest,
    icmp_echo,
    ip,
    refresh,
    routed,
    tag_mac,
    tcp_packet,
    udp_packet,
)

INSPECTED = 3
# Other inside hosts, and an outside one, for flows that are not the default flow's (HOST_IN:40000
# -> HOST_OUT:80). Flows that meet the default flow in a slot are found with the slots' model
# (`flow_meeting`).
HOST_IN_ALT = "10.0.1.14"
HOST_OUT_ALT = "198.51.100.16"
HOST_IN_THIRD = "10.0.1.12"
DEFAULT_SPORT = 40000
# How often a routed flow without exact entries is reported again, at most (flow_ageing's
# default action: no entry for the protocol).
REPORT_SECONDS = pc.FLOW_DEFAULT_REPORT_TICKS * pc.FLOW_TICK_US / 1e6


Slots = tuple[int, int]
Flow = tuple[str, str, int, int]  # TCP: src, dst, sport, dport


def outside_flows(src: str) -> Iterator[Flow]:
    """TCP flows from `src` to port 80 of outside hosts other than HOST_OUT (.20) and the ALTs,
    in a fixed order."""
    for sport in range(1024, 65536):
        for last in range(21, 251):
            yield src, f"198.51.100.{last}", sport, 80


def reply(
    sport: int = DEFAULT_SPORT, flags: str = "SA", src: str = HOST_OUT, dst: str = HOST_IN
) -> Packet:
    return refresh(
        tcp_packet(
            src=src,
            dst=dst,
            sport=80,
            dport=sport,
            flags=flags,
            eth_src=HOST_OUT_MAC,
            eth_dst=GW_MAC[OUTSIDE],
        )
    )


class DataPlaneSessionTest(OpenGateTest):
    """Helpers: flow event counts (since the test began), forwarding checks."""

    def setUp(self) -> None:
        super().setUp()
        self._event_base = {
            event: self.counter(pc.C_FLOW_EVENT_COUNTER, event)[0] for event in pc.FLOW_EVENT_NAMES
        }

    def events(self, event: int) -> int:
        return self.counter(pc.C_FLOW_EVENT_COUNTER, event)[0] - self._event_base[event]

    def slot_candidates(self, flow: Flow, nat: bool = False) -> Slots:
        """A TCP flow's two candidate slots in the program under test (opengate.flow_slots,
        with the flow registers' size from its P4Info; a masqueraded flow's among the first
        NAT_DP_SLOTS)."""
        slots = self.schema.registers.get(pc.R_FLOW_STATE).size
        mask = self.schema.registers.get(pc.R_FLOW_NAT).size - 1 if nat else slots - 1
        src, dst, sport, dport = flow
        pair = candidate_slots(ip(src), ip(dst), 6, sport, dport, slots)
        return pair[0] & mask, pair[1] & mask

    def candidates(
        self, src: str = HOST_IN, dst: str = HOST_OUT, sport: int = DEFAULT_SPORT, nat: bool = False
    ) -> Slots:
        """The candidate slots of a TCP flow to port 80 (by default the default flow's)."""
        return self.slot_candidates((src, dst, sport, 80), nat)

    def first_flow(
        self, flows: Iterable[Flow], wanted: Callable[[Slots], bool], nat: bool = False
    ) -> Flow:
        """The first of `flows` whose candidate slots satisfy `wanted`. A test that then finds
        the slots it wanted taken (a collision, a reclaim) shows the model is the pipeline's."""
        for flow in flows:
            if wanted(self.slot_candidates(flow, nat)):
                return flow
        raise AssertionError("no flow has candidate slots that suit the test")

    def flow_meeting(
        self, src: str, wanted: Callable[[Slots], bool], nat: bool = False
    ) -> tuple[str, int]:
        """(outside host, source port) of a TCP flow from `src` to port 80 whose candidate
        slots satisfy `wanted`."""
        _, dst, sport, _ = self.first_flow(outside_flows(src), wanted, nat)
        return dst, sport

    def colliding(
        self, held: Slots, seconds: Iterable[Flow], thirds: Iterable[Flow], nat: bool = False
    ) -> tuple[Flow, Flow]:
        """Two flows (one of `seconds`, one of `thirds`) such that, once a flow holds the first
        of the candidate slots `held` and the second flow has taken its own first candidate,
        the third finds both of its candidates held: one by each."""
        third = self.first_flow(thirds, lambda c: held[0] in c and c[0] != c[1] and c != held, nat)
        pair = self.slot_candidates(third, nat)
        other = pair[1] if pair[0] == held[0] else pair[0]
        second = self.first_flow(seconds, lambda c: c[0] == other, nat)
        return second, third

    def colliding_flows(self, nat: bool = False) -> tuple[tuple[str, int], tuple[str, int]]:
        """(outside host, source port) of flows from HOST_IN_ALT and HOST_IN_THIRD that collide
        with the default flow (`colliding`)."""
        second, third = self.colliding(
            self.candidates(nat=nat), outside_flows(HOST_IN_ALT), outside_flows(HOST_IN_THIRD), nat
        )
        return (second[1], second[2]), (third[1], third[2])

    def wait_events(self, event: int, count: int) -> None:
        self.wait_for(
            f"flow_event_counter[{pc.FLOW_EVENT_NAMES[event]}] == {count}",
            lambda: self.events(event) == count,
        )

    def forwarded(self, port: int, packet: Packet, out_port: int, next_hop: str) -> None:
        testutils.send_packet(self, port, bytes(packet))
        testutils.verify_packet(self, routed(packet, out_port, next_hop), out_port)

    @staticmethod
    def ageing(
        proto: int, idle: int, closing: int, report: int = pc.FLOW_DEFAULT_REPORT_TICKS
    ) -> TableEntry:
        return TableEntry.make(
            pc.T_FLOW_AGEING,
            {"ip_proto": Exact(proto)},
            pc.A_SET_FLOW_TIMEOUT,
            {"idle": idle, "closing": closing, "report": report},
        )

    def set_ageing(self, proto: int, idle: int, closing: int) -> None:
        self.insert(self.ageing(proto, idle, closing))

    def change_ageing(self, proto: int, idle: int, closing: int) -> None:
        """Modify the entry set_ageing inserted (deleted at tear-down as before)."""
        self.client.modify([self.schema.encode_entry(self.ageing(proto, idle, closing))])


class ReplyAdmittedBeforeControllerWrite(DataPlaneSessionTest):
    """SYN out, SYN-ACK back, ACK out, data back: the whole handshake passes with no session
    entry written; one digest reports the flow, one slot is created, three packets hit it."""

    def runTest(self) -> None:
        self.classify_everything(rule_id=5)
        self.enable_digest(pc.D_SESSION_REQUEST_T)
        started = time.monotonic()
        self.forwarded(INSIDE, refresh(tcp_packet(flags="S")), OUTSIDE, HOST_OUT_MAC)
        self.forwarded(OUTSIDE, reply(), INSIDE, HOST_IN_MAC)
        self.forwarded(INSIDE, refresh(tcp_packet(flags="A")), OUTSIDE, HOST_OUT_MAC)
        self.forwarded(OUTSIDE, reply(flags="PA"), INSIDE, HOST_IN_MAC)
        elapsed = time.monotonic() - started
        testutils.verify_no_other_packets(self)
        record = self.next_digest(pc.D_SESSION_REQUEST_T)
        self.assertEqual((record["l4_sport"], record["acl_rule"]), (40000, 5))
        self.assertEqual(record["dp_session"], 1, "a slot carries the flow")
        # Only the opening packet is reported; a flow still without entries after
        # FLOW_REPORT_TICKS is reported again, which a loaded machine may reach here.
        if elapsed < REPORT_SECONDS:
            self.assertEqual(self.drain_digests(), 0, "only the opening packet is reported")
        self.wait_events(pc.FLOW_EVENT_HIT, 3)
        self.assertEqual(self.events(pc.FLOW_EVENT_CREATED), 1)
        self.assertEqual(self.client.read_table(self.schema.tables.get(pc.T_SESSION).id), [])


class LongLivedFlowIsReportedAgain(DataPlaneSessionTest):
    """A routed flow its slot carries without exact entries is reported again (its digest, with
    dp_session 1) by its first packet, of either direction, once FLOW_REPORT_TICKS have passed
    since the last report, and not before: the controller learns which flows live on."""

    def runTest(self) -> None:
        self.classify_everything(rule_id=5)
        self.enable_digest(pc.D_SESSION_REQUEST_T)
        self.forwarded(INSIDE, refresh(tcp_packet(flags="S")), OUTSIDE, HOST_OUT_MAC)
        reported = time.monotonic()
        first = self.next_digest(pc.D_SESSION_REQUEST_T)
        self.assertEqual((first["l4_sport"], first["dp_session"]), (40000, 1))
        self.forwarded(OUTSIDE, reply(), INSIDE, HOST_IN_MAC)
        if time.monotonic() - reported < REPORT_SECONDS * 0.9:
            self.assertEqual(self.drain_digests(), 0, "reported again too early")
        # The condition under test is time itself: the report interval passes.
        time.sleep(max(0.0, reported + REPORT_SECONDS * 1.2 - time.monotonic()))
        reported = time.monotonic()
        self.forwarded(OUTSIDE, reply(flags="A"), INSIDE, HOST_IN_MAC)
        again = self.next_digest(pc.D_SESSION_REQUEST_T)
        # Reported from the reply: its key as it arrived, the slot's verdict (SPM, class).
        self.assertEqual(
            (again["ipv4_src"], again["l4_sport"], again["l4_dport"], again["dp_session"]),
            (ip(HOST_OUT), 80, 40000, 1),
        )
        self.assertEqual(
            (again["spm_port"], again["ids_class"]), (first["spm_port"], first["ids_class"])
        )
        self.wait_events(pc.FLOW_EVENT_REPORTED, 1)
        # The next packet, within the interval: not reported again.
        self.forwarded(INSIDE, refresh(tcp_packet(flags="A")), OUTSIDE, HOST_OUT_MAC)
        testutils.verify_no_other_packets(self)
        if time.monotonic() - reported < REPORT_SECONDS * 0.9:
            self.assertEqual(self.events(pc.FLOW_EVENT_REPORTED), 1)


class UdpAndEchoRepliesAdmitted(DataPlaneSessionTest):
    """A UDP answer and an ICMP echo reply pass on the slot their request made."""

    def runTest(self) -> None:
        self.classify_everything()
        query = refresh(udp_packet())
        answer = refresh(
            udp_packet(
                src=HOST_OUT,
                dst=HOST_IN,
                sport=53,
                dport=5353,
                eth_src=HOST_OUT_MAC,
                eth_dst=GW_MAC[OUTSIDE],
                payload=b"answer",
            )
        )
        self.forwarded(INSIDE, query, OUTSIDE, HOST_OUT_MAC)
        self.forwarded(OUTSIDE, answer, INSIDE, HOST_IN_MAC)
        ping = refresh(icmp_echo())
        pong = refresh(
            icmp_echo(
                src=HOST_OUT, dst=HOST_IN, reply=True, eth_src=HOST_OUT_MAC, eth_dst=GW_MAC[OUTSIDE]
            )
        )
        self.forwarded(INSIDE, ping, OUTSIDE, HOST_OUT_MAC)
        self.forwarded(OUTSIDE, pong, INSIDE, HOST_IN_MAC)
        testutils.verify_no_other_packets(self)
        self.wait_events(pc.FLOW_EVENT_HIT, 2)
        self.assertEqual(self.events(pc.FLOW_EVENT_CREATED), 2)


class SlotAdmitsOnlyItsOwnFlow(DataPlaneSessionTest):
    """A packet that shares addresses but not ports with a slot's flow, or that answers from
    another port, is dropped as without a session."""

    def runTest(self) -> None:
        self.classify_everything()
        self.forwarded(INSIDE, refresh(tcp_packet(flags="S")), OUTSIDE, HOST_OUT_MAC)
        self.assert_dropped(OUTSIDE, bytes(reply(sport=40001)), pc.DROP_NO_SESSION)
        self.assert_dropped(
            INSIDE, bytes(refresh(tcp_packet(sport=40001, flags="A"))), pc.DROP_NO_SESSION
        )
        self.assertEqual(self.events(pc.FLOW_EVENT_HIT), 0)


class CollisionTakesTheControllerPath(DataPlaneSessionTest):
    """Three flows (found with the slots' model): the first two take a slot each; the third's two
    candidate slots are theirs, so it finds both held by live flows and goes to the controller as
    it arrived (packet-in, SESSION_COLLISION), neither forwarded nor reported: it waits there for
    its session, so its reply cannot come back first. Until the controller installs it, a reply
    is dropped, never admitted by another flow's slot. The first two are unaffected."""

    def runTest(self) -> None:
        self.classify_everything()
        self.enable_digest(pc.D_SESSION_REQUEST_T)
        (alt_dst, alt_port), (third_dst, third_port) = self.colliding_flows()
        self.forwarded(INSIDE, refresh(tcp_packet(flags="S")), OUTSIDE, HOST_OUT_MAC)
        second = refresh(tcp_packet(src=HOST_IN_ALT, dst=alt_dst, sport=alt_port, flags="S"))
        self.forwarded(INSIDE, second, OUTSIDE, HOST_OUT_MAC)
        third = refresh(tcp_packet(src=HOST_IN_THIRD, dst=third_dst, sport=third_port, flags="S"))
        self.expect_packet_in(INSIDE, bytes(third), pc.CPU_REASON_SESSION_COLLISION)
        self.wait_events(pc.FLOW_EVENT_COLLISION, 1)
        self.assertEqual(self.events(pc.FLOW_EVENT_CREATED), 2)
        sources = [self.next_digest(pc.D_SESSION_REQUEST_T)["ipv4_src"] for _ in range(2)]
        self.assertEqual(sources, [ip(HOST_IN), ip(HOST_IN_ALT)])
        # (BMv2 sends a digest list 100-200 ms after its first record)
        self.assertIsNone(self.client.get_digest(1.0), "the third flow was reported")
        self.assert_dropped(
            OUTSIDE,
            bytes(reply(third_port, src=third_dst, dst=HOST_IN_THIRD)),
            pc.DROP_NO_SESSION,
        )
        self.forwarded(OUTSIDE, reply(), INSIDE, HOST_IN_MAC)
        self.forwarded(OUTSIDE, reply(alt_port, src=alt_dst, dst=HOST_IN_ALT), INSIDE, HOST_IN_MAC)
        testutils.verify_no_other_packets(self)


class AgedSlotIsReclaimed(DataPlaneSessionTest):
    """Past its protocol's idle time a slot admits nothing, and the next flow that hashes there
    claims it (counted as reclaimed)."""

    def runTest(self) -> None:
        self.classify_everything()
        held = self.candidates()[0]
        alt_dst, alt_port = self.flow_meeting(HOST_IN_ALT, lambda c: c[0] == held)
        self.set_ageing(6, idle=50, closing=10)  # about 51 ms of 1.024 ms ticks
        self.forwarded(INSIDE, refresh(tcp_packet(flags="S")), OUTSIDE, HOST_OUT_MAC)
        time.sleep(0.3)  # the condition under test is time itself: six idle periods pass
        self.assert_dropped(OUTSIDE, bytes(reply()), pc.DROP_NO_SESSION)
        other = refresh(tcp_packet(src=HOST_IN_ALT, dst=alt_dst, sport=alt_port, flags="S"))
        self.forwarded(INSIDE, other, OUTSIDE, HOST_OUT_MAC)
        self.wait_events(pc.FLOW_EVENT_RECLAIMED, 1)
        self.assertEqual(self.events(pc.FLOW_EVENT_CREATED), 2)
        # The slot's lifetime is read from flow_ageing per packet: lengthened now, so that the
        # claiming flow's reply is judged by the claim, not by how fast a loaded machine sends
        # it (51 ms had passed before it on BMv2 beside other work).
        self.change_ageing(6, idle=100_000, closing=10)
        self.forwarded(OUTSIDE, reply(alt_port, src=alt_dst, dst=HOST_IN_ALT), INSIDE, HOST_IN_MAC)
        testutils.verify_no_other_packets(self)


class ResetClosesTheSlot(DataPlaneSessionTest):
    """After an RST the slot lives only for the closing linger; then the flow's packets are
    dropped as without a session."""

    def runTest(self) -> None:
        self.classify_everything()
        self.set_ageing(6, idle=100_000, closing=50)
        self.forwarded(INSIDE, refresh(tcp_packet(flags="S")), OUTSIDE, HOST_OUT_MAC)
        self.forwarded(OUTSIDE, reply(flags="R"), INSIDE, HOST_IN_MAC)
        self.wait_events(pc.FLOW_EVENT_CLOSING, 1)
        time.sleep(0.3)  # past the closing linger
        self.assert_dropped(INSIDE, bytes(refresh(tcp_packet(flags="A"))), pc.DROP_NO_SESSION)


class ControllerRemovalRetiresTheSlot(DataPlaneSessionTest):
    """Once the exact entries carried the flow, their removal ends it in the data plane too:
    the next packet of a direction whose entry carried one finds no entry, the slot is freed
    (retired) and the packet is dropped; so is the other direction's after it."""

    def runTest(self) -> None:
        self.classify_everything()
        self.forwarded(INSIDE, refresh(tcp_packet(flags="S")), OUTSIDE, HOST_OUT_MAC)
        forward = self.schema.encode_entry(self.session_entry(HOST_IN, HOST_OUT, 6, 40000, 80))
        back = self.schema.encode_entry(self.session_entry(HOST_OUT, HOST_IN, 6, 80, 40000))
        self.client.insert([forward, back])
        self.forwarded(INSIDE, refresh(tcp_packet(flags="A")), OUTSIDE, HOST_OUT_MAC)
        self.wait_for(
            "the exact entry to count the packet",
            lambda: self.direct_counter(self.session_entry(HOST_IN, HOST_OUT, 6, 40000, 80))[0],
        )
        self.client.delete([forward, back])
        self.assert_dropped(INSIDE, bytes(refresh(tcp_packet(flags="A"))), pc.DROP_NO_SESSION)
        self.assertEqual(self.events(pc.FLOW_EVENT_RETIRED), 1)
        self.assert_dropped(OUTSIDE, bytes(reply(flags="A")), pc.DROP_NO_SESSION)
        self.assertEqual(self.events(pc.FLOW_EVENT_HIT), 0)


class ControllerEndsAFlowItsSlotAloneCarries(DataPlaneSessionTest):
    """A packet-out through the pipeline with end_flow set, of a flow's original direction, frees
    the flow's slot (FLOW_EVENT_ENDED) and is used up (CPU_CONTROL): the flow's reply is then
    dropped as without a session. The flow whose slot is the other's first candidate keeps its
    slot, and an end_flow of a flow without a slot frees nothing."""

    def end_flow(self, packet: Packet) -> None:
        before = self.counter(pc.C_DROP_COUNTER, pc.DROP_CPU_CONTROL)[0]
        metadata = {"submit_to_ingress": 1, "end_flow": 1}
        self.client.packet_out(
            bytes(packet), self.schema.encode_packet_metadata("packet_out", metadata)
        )
        self.wait_for(
            "drop_counter[CPU_CONTROL] to count the packet-out",
            lambda: self.counter(pc.C_DROP_COUNTER, pc.DROP_CPU_CONTROL)[0] == before + 1,
        )
        testutils.verify_no_other_packets(self)

    def runTest(self) -> None:
        self.classify_everything()
        held = self.candidates()
        dst, port = self.flow_meeting(HOST_IN_ALT, lambda c: c[0] == held[0] and c[1] != held[0])
        self.forwarded(INSIDE, refresh(tcp_packet(flags="S")), OUTSIDE, HOST_OUT_MAC)
        alt = refresh(tcp_packet(src=HOST_IN_ALT, dst=dst, sport=port, flags="S"))
        self.forwarded(INSIDE, alt, OUTSIDE, HOST_OUT_MAC)
        self.end_flow(refresh(tcp_packet(src=HOST_IN_ALT, dst=dst, sport=port, flags="A")))
        self.assertEqual(self.events(pc.FLOW_EVENT_ENDED), 1)
        self.assert_dropped(
            OUTSIDE, bytes(reply(port, flags="A", src=dst, dst=HOST_IN_ALT)), pc.DROP_NO_SESSION
        )
        self.forwarded(OUTSIDE, reply(flags="A"), INSIDE, HOST_IN_MAC)  # its neighbour's lives
        self.end_flow(refresh(tcp_packet(sport=40001, flags="A")))  # no such flow
        self.assertEqual(self.events(pc.FLOW_EVENT_ENDED), 1)
        self.forwarded(OUTSIDE, reply(flags="A"), INSIDE, HOST_IN_MAC)
        self.end_flow(refresh(tcp_packet(flags="A")))
        self.assertEqual(self.events(pc.FLOW_EVENT_ENDED), 2)
        self.assert_dropped(OUTSIDE, bytes(reply(flags="A")), pc.DROP_NO_SESSION)
        testutils.verify_no_other_packets(self)


class ReplyAdmittedWhileOnlyTheOriginalEntryExists(DataPlaneSessionTest):
    """The controller's two entries of a session do not appear at once (one Write's updates are
    applied one by one): a packet may hit the original direction's entry before the reply's
    exists. The reply is then still admitted by the slot, not taken for a flow the controller
    ended; once the reply's own entry has carried a packet, its removal retires the slot."""

    def runTest(self) -> None:
        self.classify_everything()
        self.forwarded(INSIDE, refresh(tcp_packet(flags="S")), OUTSIDE, HOST_OUT_MAC)
        forward_entry = self.session_entry(HOST_IN, HOST_OUT, 6, 40000, 80)
        forward = self.schema.encode_entry(forward_entry)
        back = self.schema.encode_entry(self.session_entry(HOST_OUT, HOST_IN, 6, 80, 40000))
        self.client.insert([forward])
        self.forwarded(INSIDE, refresh(tcp_packet(flags="A")), OUTSIDE, HOST_OUT_MAC)
        self.wait_for(
            "the exact entry to count the packet", lambda: self.direct_counter(forward_entry)[0]
        )
        self.forwarded(OUTSIDE, reply(flags="A"), INSIDE, HOST_IN_MAC)
        self.assertEqual(self.events(pc.FLOW_EVENT_RETIRED), 0)
        self.wait_events(pc.FLOW_EVENT_HIT, 1)  # the reply, by the slot
        self.client.insert([back])
        self.forwarded(OUTSIDE, reply(flags="PA"), INSIDE, HOST_IN_MAC)
        self.client.delete([forward, back])
        self.assert_dropped(OUTSIDE, bytes(reply(flags="A")), pc.DROP_NO_SESSION)
        self.assertEqual(self.events(pc.FLOW_EVENT_RETIRED), 1)
        self.assert_dropped(INSIDE, bytes(refresh(tcp_packet(flags="A"))), pc.DROP_NO_SESSION)
        self.assertEqual(self.events(pc.FLOW_EVENT_HIT), 1)


class InspectedReplyFollowsTheSlotsSpm(DataPlaneSessionTest):
    """The reply of an inspected flow goes to the SPM its opening packet went to, tagged, before
    any session entry exists."""

    def runTest(self) -> None:
        self.classify_everything(ids_class=INSPECTED)
        self.add_spm_pool(POOL, [(SPM_A, 1)], class_id=INSPECTED)
        syn = refresh(tcp_packet(flags="S"))
        testutils.send_packet(self, INSIDE, bytes(syn))
        testutils.verify_packet(self, to_spm(syn, SPM_A), SPM_A)
        answer = reply()
        testutils.send_packet(self, OUTSIDE, bytes(answer))
        testutils.verify_packet(self, to_spm(answer, SPM_A), SPM_A)
        testutils.verify_no_other_packets(self)
        self.wait_events(pc.FLOW_EVENT_HIT, 1)


class NatFlowsStayWithTheController(DataPlaneSessionTest):
    """A flow that needs NAT goes to the controller (packet-in) and claims no slot."""

    def runTest(self) -> None:
        self.classify_everything()
        self.masquerade_inside()
        testutils.send_packet(self, INSIDE, bytes(refresh(tcp_packet(flags="S"))))
        self.assertIsNotNone(self.client.get_packet_in(timeout=5), "no packet-in")
        testutils.verify_no_other_packets(self)
        self.assertEqual(self.events(pc.FLOW_EVENT_CREATED), 0)


class CpuPathMeteredPerSource(DataPlaneSessionTest):
    """When one source has used up its share of the path to the CPU, its packets are dropped
    (cpu_source_meter) while another source's still reach the controller."""

    def runTest(self) -> None:
        self.classify_everything(acl_action=pc.A_ACL_TO_CPU)
        index = int.from_bytes(bytes([10, 0, 1, 10]), "big") & 0xFFF
        self.write_meter(pc.M_CPU_SOURCE_METER, index, cir=1, cburst=100, pir=1, pburst=100)
        flood = bytes(refresh(tcp_packet(flags="S", payload=b"x" * 200)))
        testutils.send_packet(self, INSIDE, flood)
        self.wait_for(
            "the flooding source's packet to be dropped by its meter",
            lambda: self.counter(pc.C_DROP_COUNTER, pc.DROP_CPU_SOURCE_METER)[0] == 1,
        )
        other = bytes(refresh(tcp_packet(src=HOST_IN_ALT, flags="S", payload=b"x" * 200)))
        testutils.send_packet(self, INSIDE, other)
        self.assertIsNotNone(self.client.get_packet_in(timeout=5), "no packet-in")
        testutils.verify_no_other_packets(self)


def to_spm(packet: Packet, spm_port: int) -> Packet:
    out = packet.copy()
    out[Ether].src = tag_mac(TAG_BASE)
    out[Ether].dst = SPM_MAC[spm_port]
    return out
