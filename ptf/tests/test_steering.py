"""Steps 6 and 7: steering to SPMs with the next-hop tag, and the return path."""

from __future__ import annotations

from ptf import testutils
from scapy.layers.l2 import Ether

from opengate import p4constants as pc
from opengate.entries import Exact, TableEntry

from opengate_test import (
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
    OpenGateTest,
    refresh,
    routed,
    tag_mac,
    tcp_packet,
)

INSPECTED = 3


def to_spm(packet: Ether, port: int, nat_done: int = 0) -> Ether:
    out = packet.copy()
    out[Ether].src = tag_mac(TAG_BASE | nat_done)
    out[Ether].dst = SPM_MAC[port]
    return out


class InspectedClassSteeredWithTag(OpenGateTest):
    """A new flow of an inspected class leaves on the SPM port, untouched but for its MACs: the
    tag as source, the SPM as destination; the digest names the chosen SPM."""

    def runTest(self) -> None:
        self.classify_everything(ids_class=INSPECTED)
        self.add_spm_pool(POOL, [(SPM_A, 1)], class_id=INSPECTED)
        self.enable_digest(pc.D_SESSION_REQUEST_T)
        syn = refresh(tcp_packet())
        testutils.send_packet(self, INSIDE, bytes(syn))
        testutils.verify_packet(self, to_spm(syn, SPM_A), SPM_A)
        testutils.verify_no_other_packets(self)
        record = self.next_digest(pc.D_SESSION_REQUEST_T)
        self.assertEqual((record["ids_class"], record["spm_port"]), (INSPECTED, SPM_A))


class BothDirectionsPickSameSpm(OpenGateTest):
    """The selector hashes a direction-agnostic key: a flow and its reverse choose the same SPM,
    for many flows over a pool of two."""

    def runTest(self) -> None:
        self.classify_everything(ids_class=INSPECTED)
        self.add_spm_pool(POOL, [(SPM_A, 1), (SPM_B, 1)], class_id=INSPECTED)
        used = set()
        for sport in range(41000, 41016):
            syn = refresh(tcp_packet(sport=sport))
            reverse = refresh(
                tcp_packet(
                    src=HOST_OUT,
                    dst=HOST_IN,
                    sport=80,
                    dport=sport,
                    flags="S",
                    eth_src=HOST_OUT_MAC,
                    eth_dst="02:00:00:00:00:02",
                )
            )
            testutils.send_packet(self, INSIDE, bytes(syn))
            result = self.dataplane.poll(exp_pkt=None, timeout=2)
            self.assertIsNotNone(result.packet, f"flow {sport}: nothing came out")
            port = result.port
            self.assertIn(port, (SPM_A, SPM_B))
            testutils.send_packet(self, OUTSIDE, bytes(reverse))
            testutils.verify_packet(self, to_spm(reverse, port), port)
            used.add(port)
        testutils.verify_no_other_packets(self)
        self.assertEqual(used, {SPM_A, SPM_B}, "16 flows all went to one SPM")


class SessionPinsSpm(OpenGateTest):
    """A session entry's SPM wins over the selector: the flow stays on SPM B although the pool
    now holds only SPM A."""

    def runTest(self) -> None:
        self.classify_everything(ids_class=INSPECTED)
        self.add_spm_pool(POOL, [(SPM_A, 1)], class_id=INSPECTED)
        self.add_session(HOST_IN, HOST_OUT, 6, 40000, 80, class_id=INSPECTED, spm_port=SPM_B)
        packet = refresh(tcp_packet(flags="A"))
        testutils.send_packet(self, INSIDE, bytes(packet))
        testutils.verify_packet(self, to_spm(packet, SPM_B), SPM_B)
        testutils.verify_no_other_packets(self)


class NoSpmFailClosedDrops(OpenGateTest):
    """A class that needs inspection, with an empty pool and fail-closed, drops new flows."""

    def runTest(self) -> None:
        self.classify_everything(ids_class=INSPECTED)
        self.insert_class_policy_only()
        self.assert_dropped(INSIDE, bytes(refresh(tcp_packet())), pc.DROP_NO_SPM)

    def insert_class_policy_only(self) -> None:
        self.insert(
            TableEntry.make(
                pc.T_CLASS_POLICY,
                {"class_id": Exact(INSPECTED)},
                pc.A_INSPECT,
                {"pool": POOL, "open_on_failure": 0},
            )
        )


class ReturnFromSpmResumesWithNat(OpenGateTest):
    """Back from the SPM with the NAT-pending tag, the packet hits its session again, gets its
    source NAT, and is routed out; TCP checksum updated."""

    def runTest(self) -> None:
        self.add_session(
            HOST_IN,
            HOST_OUT,
            6,
            40000,
            80,
            class_id=INSPECTED,
            spm_port=SPM_A,
            nat_kind=pc.NAT_REWRITE_SRC,
            nat_addr="203.0.113.1",
            nat_port=61000,
        )
        original = refresh(tcp_packet(flags="A", payload=b"GET / HTTP/1.0\r\n\r\n"))
        testutils.send_packet(self, INSIDE, bytes(original))
        sent_to_spm = to_spm(original, SPM_A)
        testutils.verify_packet(self, sent_to_spm, SPM_A)
        back = sent_to_spm.copy()
        back[Ether].src = SPM_MAC[SPM_A]
        back[Ether].dst = tag_mac(TAG_BASE)
        testutils.send_packet(self, SPM_A, bytes(back))
        expected = original.copy()
        expected["IP"].src = "203.0.113.1"
        expected["TCP"].sport = 61000
        testutils.verify_packet(self, routed(expected, OUTSIDE, HOST_OUT_MAC), OUTSIDE)
        testutils.verify_no_other_packets(self)


class ReplyDirectionNatBeforeSpm(OpenGateTest):
    """The reply of a source-NAT flow is un-NATed before the SPM (so the SPM sees the same
    addresses both ways), tagged NAT-done, and routed straight back after inspection."""

    def runTest(self) -> None:
        self.add_session(
            HOST_OUT,
            "203.0.113.1",
            6,
            80,
            61000,
            class_id=INSPECTED,
            spm_port=SPM_A,
            nat_kind=pc.NAT_REWRITE_DST,
            nat_addr=HOST_IN,
            nat_port=40000,
            nat_before_spm=1,
        )
        reply = refresh(
            tcp_packet(
                src=HOST_OUT,
                dst="203.0.113.1",
                sport=80,
                dport=61000,
                flags="A",
                eth_src=HOST_OUT_MAC,
                eth_dst="02:00:00:00:00:02",
            )
        )
        testutils.send_packet(self, OUTSIDE, bytes(reply))
        un_natted = reply.copy()
        un_natted["IP"].dst = HOST_IN
        un_natted["TCP"].dport = 40000
        un_natted = refresh(un_natted)
        testutils.verify_packet(self, to_spm(un_natted, SPM_A, nat_done=1), SPM_A)
        back = to_spm(un_natted, SPM_A, nat_done=1)
        back[Ether].src = SPM_MAC[SPM_A]
        back[Ether].dst = tag_mac(TAG_BASE | 1)
        testutils.send_packet(self, SPM_A, bytes(back))
        testutils.verify_packet(self, routed(un_natted, INSIDE, HOST_IN_MAC), INSIDE)
        testutils.verify_no_other_packets(self)
