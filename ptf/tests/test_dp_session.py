"""Step 5: sessions made by the data plane. The first permitted opening packet claims a slot; the
reply and later packets are admitted by it before any controller write; a slot admits only its
own flow; collisions, ageing and the controller's removals are counted and fail closed.

Only the v1model build has data-plane sessions (README "The NPM pipeline"); both v1model targets
(BMv2, the built-in switch) run these tests.
"""

from __future__ import annotations

import time

from ptf import testutils
from scapy.layers.l2 import Ether
from scapy.packet import Packet

from opengate import p4constants as pc
from opengate.entries import Exact, TableEntry

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
# Flows whose addresses swap bits that only one end has set have the same direction-agnostic key
# (src ^ dst and src + dst: 10 ^ 20 = 14 ^ 16 = 12 ^ 18 and 10 + 20 = 14 + 16 = 12 + 18), hence
# the same two candidate slots: real collisions.
HOST_IN_ALT = "10.0.1.14"
HOST_OUT_ALT = "198.51.100.16"
HOST_IN_THIRD = "10.0.1.12"
HOST_OUT_THIRD = "198.51.100.18"
# How often a routed flow without exact entries is reported again, at most (flow_ageing's
# default action: no entry for the protocol).
REPORT_SECONDS = pc.FLOW_DEFAULT_REPORT_TICKS * pc.FLOW_TICK_US / 1e6


def reply(sport: int = 40000, flags: str = "SA", src: str = HOST_OUT, dst: str = HOST_IN) -> Packet:
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
    """Three flows with the same key, hence the same two candidate slots: the first two get one
    each; the third finds both held by live flows and takes the controller path (forwarded and
    reported, but no slot): its reply is dropped until the controller installs it, and is never
    admitted by another flow's slot. The first two are unaffected."""

    def runTest(self) -> None:
        self.classify_everything()
        self.enable_digest(pc.D_SESSION_REQUEST_T)
        self.forwarded(INSIDE, refresh(tcp_packet(flags="S")), OUTSIDE, HOST_OUT_MAC)
        second = refresh(tcp_packet(src=HOST_IN_ALT, dst=HOST_OUT_ALT, flags="S"))
        self.forwarded(INSIDE, second, OUTSIDE, HOST_OUT_MAC)
        third = refresh(tcp_packet(src=HOST_IN_THIRD, dst=HOST_OUT_THIRD, flags="S"))
        self.forwarded(INSIDE, third, OUTSIDE, HOST_OUT_MAC)
        self.wait_events(pc.FLOW_EVENT_COLLISION, 1)
        self.assertEqual(self.events(pc.FLOW_EVENT_CREATED), 2)
        sources = [self.next_digest(pc.D_SESSION_REQUEST_T)["ipv4_src"] for _ in range(3)]
        self.assertEqual(sources, [ip(HOST_IN), ip(HOST_IN_ALT), ip(HOST_IN_THIRD)])
        self.assert_dropped(
            OUTSIDE, bytes(reply(src=HOST_OUT_THIRD, dst=HOST_IN_THIRD)), pc.DROP_NO_SESSION
        )
        self.forwarded(OUTSIDE, reply(), INSIDE, HOST_IN_MAC)
        self.forwarded(OUTSIDE, reply(src=HOST_OUT_ALT, dst=HOST_IN_ALT), INSIDE, HOST_IN_MAC)
        testutils.verify_no_other_packets(self)


class AgedSlotIsReclaimed(DataPlaneSessionTest):
    """Past its protocol's idle time a slot admits nothing, and the next flow that hashes there
    claims it (counted as reclaimed)."""

    def runTest(self) -> None:
        self.classify_everything()
        self.set_ageing(6, idle=50, closing=10)  # about 51 ms of 1.024 ms ticks
        self.forwarded(INSIDE, refresh(tcp_packet(flags="S")), OUTSIDE, HOST_OUT_MAC)
        time.sleep(0.3)  # the condition under test is time itself: six idle periods pass
        self.assert_dropped(OUTSIDE, bytes(reply()), pc.DROP_NO_SESSION)
        other = refresh(tcp_packet(src=HOST_IN_ALT, dst=HOST_OUT_ALT, flags="S"))
        self.forwarded(INSIDE, other, OUTSIDE, HOST_OUT_MAC)
        self.wait_events(pc.FLOW_EVENT_RECLAIMED, 1)
        self.assertEqual(self.events(pc.FLOW_EVENT_CREATED), 2)
        # The slot's lifetime is read from flow_ageing per packet: lengthened now, so that the
        # claiming flow's reply is judged by the claim, not by how fast a loaded machine sends
        # it (51 ms had passed before it on BMv2 beside other work).
        self.change_ageing(6, idle=100_000, closing=10)
        self.forwarded(OUTSIDE, reply(src=HOST_OUT_ALT, dst=HOST_IN_ALT), INSIDE, HOST_IN_MAC)
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
    dropped as without a session. The flow that shares its candidate slots keeps its slot, and
    an end_flow of a flow without a slot frees nothing."""

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
        self.forwarded(INSIDE, refresh(tcp_packet(flags="S")), OUTSIDE, HOST_OUT_MAC)
        alt = refresh(tcp_packet(src=HOST_IN_ALT, dst=HOST_OUT_ALT, flags="S"))
        self.forwarded(INSIDE, alt, OUTSIDE, HOST_OUT_MAC)
        self.end_flow(refresh(tcp_packet(src=HOST_IN_ALT, dst=HOST_OUT_ALT, flags="A")))
        self.assertEqual(self.events(pc.FLOW_EVENT_ENDED), 1)
        self.assert_dropped(
            OUTSIDE, bytes(reply(flags="A", src=HOST_OUT_ALT, dst=HOST_IN_ALT)), pc.DROP_NO_SESSION
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
