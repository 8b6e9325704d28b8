"""Step 5 with NAT: the data plane masquerades new flows itself. The opening packet claims a slot
and with it a port (the block's base plus the slot's index), leaves rewritten with exact
checksums and is reported with its binding; the reply to that port is found by it and rewritten
back; a reply that is not the flow's own is dropped; a full pair of candidates falls back to the
controller; an aged slot's port is taken again; a pinned slot never ages. New flows per source
are metered before they take anything.

Only the v1model build has data-plane sessions; both v1model targets run these tests.
"""

from __future__ import annotations

import time

from ptf import testutils
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet
from test_dp_session import (
    HOST_IN_ALT,
    HOST_IN_THIRD,
    HOST_OUT_ALT,
    INSPECTED,
    DataPlaneSessionTest,
    to_spm,
)

from opengate import p4constants as pc
from opengate.entries import Exact, Lpm, TableEntry

from opengate_test import (
    GW_MAC,
    GW_OUT_IP,
    HOST_IN,
    HOST_IN_MAC,
    HOST_OUT,
    HOST_OUT_MAC,
    INSIDE,
    OUTSIDE,
    SPM_A,
    SPM_MAC,
    TAG_BASE,
    icmp_echo,
    ip,
    refresh,
    routed,
    tag_mac,
    tcp_packet,
    udp_packet,
)

BASE = 50000  # the block's first port (any base works: the slot's index is added to it)
SLOTS = pc.REGISTER_SIZES[pc.R_FLOW_NAT]  # NAT_DP_SLOTS: one port per slot of the block


class DataPlaneNatTest(DataPlaneSessionTest):
    def setUp(self) -> None:
        super().setUp()
        self.enable_digest(pc.D_SESSION_REQUEST_T)

    def masquerade_in_data_plane(self) -> None:
        """The inside LAN leaving by the outside port is masqueraded as GW_OUT_IP, ports from
        the block at BASE; replies to GW_OUT_IP are looked up in that block."""
        self.insert(
            TableEntry.make(
                pc.T_SNAT_RULE,
                {"egress_port": Exact(OUTSIDE), "ipv4_src": Lpm(ip("10.0.1.0"), 24)},
                pc.A_MASQUERADE_DP,
                {"address": ip(GW_OUT_IP), "port_base": BASE},
            )
        )
        self.insert(
            TableEntry.make(
                pc.T_NAT_DP_REVERSE,
                {"ipv4_addr": Exact(ip(GW_OUT_IP))},
                pc.A_DP_UNMASQUERADE,
                {"port_base": BASE},
            )
        )

    def masqueraded_entry(self, port: int) -> TableEntry:
        """The controller's exact entry for the original direction of the flow HOST_IN:40000 ->
        HOST_OUT:80 (TCP) masqueraded as GW_OUT_IP:port."""
        return self.session_entry(
            HOST_IN,
            HOST_OUT,
            6,
            40000,
            80,
            nat_kind=pc.NAT_REWRITE_SRC,
            nat_addr=GW_OUT_IP,
            nat_port=port,
        )

    def opened(self, packet: Packet) -> int:
        """Send an opening packet from the inside; it must leave masqueraded, with a digest that
        names its binding. Returns the public port."""
        testutils.send_packet(self, INSIDE, bytes(packet))
        record = self.next_digest(pc.D_SESSION_REQUEST_T)
        self.assertEqual(record["ipv4_src"], ip(packet[IP].src), "the digest keys the flow as sent")
        self.assertEqual(record["nat_addr"], ip(GW_OUT_IP))
        port = record["nat_port"]
        self.assertTrue(BASE <= port < BASE + SLOTS, f"port {port} outside the block")
        testutils.verify_packet(
            self, routed(masqueraded(packet, port), OUTSIDE, HOST_OUT_MAC), OUTSIDE
        )
        return port

    def steered_nat_done(self, packet: Packet) -> None:
        """`packet`, translated already, reaches SPM_A tagged NAT-done; SPM_A sends it back."""
        steered = to_spm(packet, SPM_A)
        steered[Ether].src = tag_mac(TAG_BASE | 1)
        testutils.verify_packet(self, steered, SPM_A)
        testutils.send_packet(self, SPM_A, bytes(returned_from_spm(packet, SPM_A, TAG_BASE | 1)))

    def answered(self, answer: Packet, inside_port: int) -> None:
        """A reply to GW_OUT_IP arrives outside and must reach the inside host, rewritten."""
        testutils.send_packet(self, OUTSIDE, bytes(answer))
        testutils.verify_packet(
            self, routed(unmasqueraded(answer, inside_port), INSIDE, HOST_IN_MAC), INSIDE
        )


def returned_from_spm(packet: Packet, spm: int, tag: int) -> Packet:
    """`packet` as the SPM sends it back: from its MAC to the MAC of next-hop tag `tag`."""
    back = to_spm(packet, spm)
    back[Ether].src = SPM_MAC[spm]
    back[Ether].dst = tag_mac(tag)
    return back


def masqueraded(packet: Packet, port: int) -> Packet:
    """`packet` with its source rewritten to GW_OUT_IP:port (ICMP echo: the identifier)."""
    return _rewritten(packet, GW_OUT_IP, port, source=True)


def unmasqueraded(packet: Packet, port: int, dst: str = HOST_IN) -> Packet:
    """`packet` with its destination rewritten back to dst:port."""
    return _rewritten(packet, dst, port, source=False)


def _rewritten(packet: Packet, address: str, port: int, source: bool) -> Packet:
    out = packet.copy()
    setattr(out[IP], "src" if source else "dst", address)
    if TCP in out or UDP in out:
        setattr(out[TCP] if TCP in out else out[UDP], "sport" if source else "dport", port)
    else:
        out[ICMP].id = port
    return refresh(out)


def answer_tcp(port: int, flags: str = "SA", src: str = HOST_OUT, sport: int = 80) -> Packet:
    return refresh(
        tcp_packet(
            src=src,
            dst=GW_OUT_IP,
            sport=sport,
            dport=port,
            flags=flags,
            eth_src=HOST_OUT_MAC,
            eth_dst=GW_MAC[OUTSIDE],
            payload=b"hello",
        )
    )


class MasqueradedWithoutTheController(DataPlaneNatTest):
    """A TCP handshake and data through data-plane masquerading, byte for byte, with no
    packet-in and no controller write: SYN out rewritten, SYN-ACK back rewritten, data out on
    the same port."""

    def runTest(self) -> None:
        self.classify_everything()
        self.masquerade_in_data_plane()
        port = self.opened(refresh(tcp_packet(flags="S")))
        self.answered(answer_tcp(port), 40000)
        data = refresh(tcp_packet(flags="PA", payload=b"GET / HTTP/1.0\r\n\r\n"))
        testutils.send_packet(self, INSIDE, bytes(data))
        testutils.verify_packet(
            self, routed(masqueraded(data, port), OUTSIDE, HOST_OUT_MAC), OUTSIDE
        )
        testutils.verify_no_other_packets(self)
        self.assertIsNone(self.client.get_packet_in(timeout=0.2), "a packet-in")
        self.assertEqual(self.drain_digests(), 0, "only the opening packet is reported")
        # A FIN is reported with the key it arrived with, not the rewritten one.
        self.enable_digest(pc.D_SESSION_CLOSE_T)
        fin = refresh(tcp_packet(flags="FA"))
        testutils.send_packet(self, INSIDE, bytes(fin))
        testutils.verify_packet(
            self, routed(masqueraded(fin, port), OUTSIDE, HOST_OUT_MAC), OUTSIDE
        )
        self.assertEqual(self.closed_flow(), (ip(HOST_IN), 40000, ip(HOST_OUT), 80))
        self.wait_events(pc.FLOW_EVENT_HIT, 3)
        self.assertEqual(self.events(pc.FLOW_EVENT_NAT_CREATED), 1)
        self.assertEqual(self.events(pc.FLOW_EVENT_NAT_REVERSE), 1)


class MasqueradedUdpAndEcho(DataPlaneNatTest):
    """UDP (checksum kept exact) and ICMP echo (the identifier is the port) both ways."""

    def runTest(self) -> None:
        self.classify_everything()
        self.masquerade_in_data_plane()
        port = self.opened(refresh(udp_packet(payload=b"query")))
        answer = refresh(
            udp_packet(
                src=HOST_OUT,
                dst=GW_OUT_IP,
                sport=53,
                dport=port,
                eth_src=HOST_OUT_MAC,
                eth_dst=GW_MAC[OUTSIDE],
                payload=b"answer",
            )
        )
        self.answered(answer, 5353)
        ping = refresh(icmp_echo())
        ident = ping[ICMP].id
        port = self.opened(ping)
        pong = refresh(
            icmp_echo(
                src=HOST_OUT,
                dst=GW_OUT_IP,
                reply=True,
                eth_src=HOST_OUT_MAC,
                eth_dst=GW_MAC[OUTSIDE],
            )
        )
        pong[ICMP].id = port
        self.answered(refresh(pong), ident)
        testutils.verify_no_other_packets(self)
        self.assertEqual(self.events(pc.FLOW_EVENT_NAT_REVERSE), 2)


class OnlyTheFlowsOwnReplyIsTranslated(DataPlaneNatTest):
    """To the flow's public port, a packet from another address, from another port, or of
    another protocol is not the reply: dropped as without a session. So is one to a port of the
    block that no flow holds."""

    def runTest(self) -> None:
        self.classify_everything()
        self.masquerade_in_data_plane()
        port = self.opened(refresh(tcp_packet(flags="S")))
        self.assert_dropped(OUTSIDE, bytes(answer_tcp(port, src=HOST_OUT_ALT)), pc.DROP_NO_SESSION)
        self.assert_dropped(OUTSIDE, bytes(answer_tcp(port, sport=81)), pc.DROP_NO_SESSION)
        other_port = BASE + (port - BASE + 1) % SLOTS
        self.assert_dropped(OUTSIDE, bytes(answer_tcp(other_port)), pc.DROP_NO_SESSION)
        self.assertEqual(self.events(pc.FLOW_EVENT_NAT_REVERSE), 0)
        self.answered(answer_tcp(port), 40000)
        testutils.verify_no_other_packets(self)


class FullCandidatesFallBackThenAgedPortIsReused(DataPlaneNatTest):
    """Three masqueraded flows (found with the slots' model): two take a port each, and the
    third, whose two candidate ports are theirs, goes to the controller (packet-in, counted).
    Once the first two have aged out, the third takes a port of theirs."""

    def runTest(self) -> None:
        self.classify_everything()
        self.masquerade_in_data_plane()
        # Alive until the third has fallen back, however slow the machine; then about 0.4 s.
        self.set_ageing(6, idle=100_000, closing=10)
        (alt_dst, alt_port), (third_dst, third_port) = self.colliding_flows(nat=True)
        first = self.opened(refresh(tcp_packet(flags="S")))
        second = self.opened(
            refresh(tcp_packet(src=HOST_IN_ALT, dst=alt_dst, sport=alt_port, flags="S"))
        )
        self.assertNotEqual(first, second)
        # the port is the block's base plus the slot: the model's first candidate, for both
        self.assertEqual(
            (first, second),
            (
                BASE + self.candidates(nat=True)[0],
                BASE + self.candidates(HOST_IN_ALT, alt_dst, alt_port, nat=True)[0],
            ),
        )
        third = refresh(tcp_packet(src=HOST_IN_THIRD, dst=third_dst, sport=third_port, flags="S"))
        testutils.send_packet(self, INSIDE, bytes(third))
        packet_in = self.client.get_packet_in(timeout=5)
        self.assertIsNotNone(packet_in, "no packet-in for the flow with no free port")
        testutils.verify_no_other_packets(self)
        self.assertEqual(self.events(pc.FLOW_EVENT_NAT_FULL), 1)
        self.change_ageing(6, idle=400, closing=10)
        time.sleep(1.5)  # the condition under test is time itself: three idle periods pass
        again = self.opened(
            refresh(tcp_packet(src=HOST_IN_THIRD, dst=third_dst, sport=third_port, flags="S"))
        )
        self.assertIn(again, (first, second))
        self.wait_events(pc.FLOW_EVENT_RECLAIMED, 1)
        self.assert_dropped(OUTSIDE, bytes(answer_tcp(again, src=HOST_OUT)), pc.DROP_NO_SESSION)


class ExactEntriesKeepThePort(DataPlaneNatTest):
    """Once the controller's exact entries carry a masqueraded flow, its packets (either way)
    keep the slot, and so the port, taken past the idle time; when the entries are removed, the
    next reply retires the slot and is dropped, and the port is free again."""

    def runTest(self) -> None:
        self.classify_everything()
        self.masquerade_in_data_plane()
        # Long until the exact entries carry the flow (however long their write takes), then
        # about 0.6 s, against packets every 0.1 s or so.
        self.set_ageing(6, idle=100_000, closing=10)
        port = self.opened(refresh(tcp_packet(flags="S")))
        forward = self.schema.encode_entry(self.masqueraded_entry(port))
        back = self.schema.encode_entry(
            self.session_entry(
                HOST_OUT,
                GW_OUT_IP,
                6,
                80,
                port,
                nat_kind=pc.NAT_REWRITE_DST,
                nat_addr=HOST_IN,
                nat_port=40000,
                nat_before_spm=1,
            )
        )
        self.client.insert([forward, back])
        for n in range(24):  # 2.4 s or more, four idle periods, carried by the exact entries only
            if n % 2:
                self.answered(answer_tcp(port, flags="A"), 40000)
            else:
                data = refresh(tcp_packet(flags="A"))
                testutils.send_packet(self, INSIDE, bytes(data))
                expected = routed(masqueraded(data, port), OUTSIDE, HOST_OUT_MAC)
                testutils.verify_packet(self, expected, OUTSIDE)
            if n == 1:  # both directions' entries have carried a packet
                self.change_ageing(6, idle=600, closing=10)
            time.sleep(0.1)
        self.assertEqual(self.events(pc.FLOW_EVENT_HIT), 0)
        self.client.delete([forward, back])
        self.assert_dropped(OUTSIDE, bytes(answer_tcp(port, flags="A")), pc.DROP_NO_SESSION)
        self.assertEqual(self.events(pc.FLOW_EVENT_RETIRED), 1)
        self.assertEqual(self.events(pc.FLOW_EVENT_NAT_REVERSE), 0)


class ReplyTranslatedWhileOnlyTheOriginalEntryExists(DataPlaneNatTest):
    """The original direction's exact entry may carry packets before the reply's exists (the
    controller's updates are applied one by one): a reply then is still translated back by the
    slot, not taken for a flow the controller ended."""

    def runTest(self) -> None:
        self.classify_everything()
        self.masquerade_in_data_plane()
        port = self.opened(refresh(tcp_packet(flags="S")))
        forward_entry = self.masqueraded_entry(port)
        self.insert(forward_entry)  # (deleted at tear-down)
        data = refresh(tcp_packet(flags="A"))
        testutils.send_packet(self, INSIDE, bytes(data))
        expected = routed(masqueraded(data, port), OUTSIDE, HOST_OUT_MAC)
        testutils.verify_packet(self, expected, OUTSIDE)
        self.wait_for(
            "the exact entry to count the packet", lambda: self.direct_counter(forward_entry)[0]
        )
        self.answered(answer_tcp(port, flags="A"), 40000)
        self.assertEqual(self.events(pc.FLOW_EVENT_RETIRED), 0)
        self.wait_events(pc.FLOW_EVENT_NAT_REVERSE, 1)


class InspectedMasqueradedFlow(DataPlaneNatTest):
    """With an SPM: the opening packet goes to it as sent (the SPM sees inside addresses) and is
    masqueraded when it comes back; the reply is translated before the SPM, tagged NAT-done, and
    routed straight in after it."""

    def runTest(self) -> None:
        self.classify_everything(ids_class=INSPECTED)
        self.add_spm_pool(1, [(SPM_A, 1)], class_id=INSPECTED)
        self.masquerade_in_data_plane()
        syn = refresh(tcp_packet(flags="S"))
        testutils.send_packet(self, INSIDE, bytes(syn))
        testutils.verify_packet(self, to_spm(syn, SPM_A), SPM_A)
        port = self.next_digest(pc.D_SESSION_REQUEST_T)["nat_port"]
        testutils.send_packet(self, SPM_A, bytes(returned_from_spm(syn, SPM_A, TAG_BASE)))
        testutils.verify_packet(
            self, routed(masqueraded(syn, port), OUTSIDE, HOST_OUT_MAC), OUTSIDE
        )
        answer = answer_tcp(port)
        testutils.send_packet(self, OUTSIDE, bytes(answer))
        inside = unmasqueraded(answer, 40000)
        self.steered_nat_done(inside)
        testutils.verify_packet(self, routed(inside, INSIDE, HOST_IN_MAC), INSIDE)
        testutils.verify_no_other_packets(self)


class NewFlowsMeteredPerSource(DataPlaneNatTest):
    """A source over its new-flow rate has its further opening packets dropped (counted) before
    they claim a slot or send a digest; another source still opens flows."""

    def runTest(self) -> None:
        self.classify_everything()
        index = ip(HOST_IN) & 0xFFF
        self.write_meter(pc.M_NEW_FLOW_METER, index, cir=1, cburst=2, pir=1, pburst=2)
        sent = 6
        for n in range(sent):
            testutils.send_packet(
                self, INSIDE, bytes(refresh(tcp_packet(sport=41000 + n, flags="S")))
            )
        self.wait_for(
            "every opening packet to be forwarded or dropped by the new-flow meter",
            lambda: (
                self.events(pc.FLOW_EVENT_CREATED)
                + self.counter(pc.C_DROP_COUNTER, pc.DROP_NEW_FLOW_RATE)[0]
                == sent
            ),
        )
        created = self.events(pc.FLOW_EVENT_CREATED)
        self.assertLessEqual(created, 3, "the burst is 2 flows")
        self.assertGreaterEqual(created, 1)
        self.assertEqual(self.drain_digests(), created)
        self.forwarded(
            INSIDE, refresh(tcp_packet(src=HOST_IN_ALT, flags="S")), OUTSIDE, HOST_OUT_MAC
        )
