"""Step 5 with port forwards: the data plane carries a forward itself. The opening packet to the
forward's public address and port is rewritten to its target before routing (from the rule
alone), claims a slot keyed by the flow's public end and is reported with its binding; the
target's reply is found by its source (the forward's target), admitted by the slot and leaves
from the public end; a reply no slot admits is never translated nor masqueraded by the data
plane; an inspected forward reaches its SPM as it arrived and is rewritten on its way back; a
forward whose two candidate slots are taken is undone and goes to the controller as it arrived.

Only the v1model build has data-plane sessions; both v1model targets run these tests.
"""

from __future__ import annotations

from collections.abc import Iterator

from ptf import testutils
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet
from test_dp_nat import DataPlaneNatTest, returned_from_spm
from test_dp_session import INSPECTED, Flow, to_spm

from opengate import p4constants as pc
from opengate.entries import Exact, TableEntry

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
    TAG_BASE,
    ip,
    refresh,
    routed,
    tcp_packet,
    udp_packet,
)

PUBLIC_PORT = 8080  # the forward: GW_OUT_IP:8080 -> HOST_IN:80
TARGET_PORT = 80


class DataPlaneForwardTest(DataPlaneNatTest):
    def forward_in_data_plane(self, proto: int, public_port: int, target_port: int) -> None:
        """GW_OUT_IP:public_port (of `proto`) is forwarded to HOST_IN:target_port by the NPM."""
        self.insert(
            TableEntry.make(
                pc.T_DNAT_RULE,
                {
                    "ipv4_dst": Exact(ip(GW_OUT_IP)),
                    "ip_proto": Exact(proto),
                    "l4_dport": Exact(public_port),
                },
                pc.A_PORT_FORWARD_DP,
                {"to_addr": ip(HOST_IN), "to_port": target_port},
            )
        )
        self.insert(
            TableEntry.make(
                pc.T_DNAT_DP_REVERSE,
                {
                    "ipv4_src": Exact(ip(HOST_IN)),
                    "ip_proto": Exact(proto),
                    "l4_sport": Exact(target_port),
                },
                pc.A_FORWARDED_REPLY,
                {"public_addr": ip(GW_OUT_IP), "public_port": public_port},
            )
        )

    def opened_forward(self, packet: Packet, target_port: int = TARGET_PORT) -> None:
        """An opening packet from outside to the forward leaves inside rewritten to its target,
        reported with the key it arrived with and the binding."""
        testutils.send_packet(self, OUTSIDE, bytes(packet))
        testutils.verify_packet(
            self, routed(forwarded(packet, target_port), INSIDE, HOST_IN_MAC), INSIDE
        )
        record = self.next_digest(pc.D_SESSION_REQUEST_T)
        self.assertEqual(
            (record["ipv4_src"], record["ipv4_dst"], record["l4_dport"]),
            (ip(HOST_OUT), ip(GW_OUT_IP), packet[IP].payload.dport),
            "the digest keys the flow as it arrived",
        )
        self.assertEqual(
            (record["nat_kind"], record["nat_addr"], record["nat_port"]),
            (pc.NAT_REWRITE_DST, ip(HOST_IN), target_port),
        )


def from_client(
    sport: int = 50000, dport: int = PUBLIC_PORT, flags: str = "S", src: str = HOST_OUT
) -> Packet:
    return refresh(
        tcp_packet(
            src=src,
            dst=GW_OUT_IP,
            sport=sport,
            dport=dport,
            flags=flags,
            eth_src=HOST_OUT_MAC,
            eth_dst=GW_MAC[OUTSIDE],
            payload=b"to the server",
        )
    )


def from_server(
    dport: int = 50000, flags: str = "SA", dst: str = HOST_OUT, sport: int = TARGET_PORT
) -> Packet:
    return refresh(
        tcp_packet(src=HOST_IN, dst=dst, sport=sport, dport=dport, flags=flags, payload=b"back")
    )


def forwarded(packet: Packet, port: int) -> Packet:
    """`packet` with its destination rewritten to HOST_IN:port."""
    out = packet.copy()
    out[IP].dst = HOST_IN
    (out[TCP] if TCP in out else out[UDP]).dport = port
    return refresh(out)


def from_public_end(packet: Packet, port: int = PUBLIC_PORT) -> Packet:
    """`packet` with its source rewritten to GW_OUT_IP:port."""
    out = packet.copy()
    out[IP].src = GW_OUT_IP
    (out[TCP] if TCP in out else out[UDP]).sport = port
    return refresh(out)


class ForwardedWithoutTheController(DataPlaneForwardTest):
    """A TCP handshake and data through a port forward the data plane carries, byte for byte,
    with no packet-in and no controller write; the FIN is reported with its arrival key."""

    def runTest(self) -> None:
        self.classify_everything()
        self.forward_in_data_plane(pc.IP_PROTO_TCP, PUBLIC_PORT, TARGET_PORT)
        self.opened_forward(from_client())
        answer = from_server()
        testutils.send_packet(self, INSIDE, bytes(answer))
        testutils.verify_packet(
            self, routed(from_public_end(answer), OUTSIDE, HOST_OUT_MAC), OUTSIDE
        )
        data = from_client(flags="PA")
        testutils.send_packet(self, OUTSIDE, bytes(data))
        testutils.verify_packet(
            self, routed(forwarded(data, TARGET_PORT), INSIDE, HOST_IN_MAC), INSIDE
        )
        testutils.verify_no_other_packets(self)
        self.assertIsNone(self.client.get_packet_in(timeout=0.2), "a packet-in")
        self.assertEqual(self.drain_digests(), 0, "only the opening packet is reported")
        self.enable_digest(pc.D_SESSION_CLOSE_T)
        fin = from_server(flags="FA")
        testutils.send_packet(self, INSIDE, bytes(fin))
        testutils.verify_packet(self, routed(from_public_end(fin), OUTSIDE, HOST_OUT_MAC), OUTSIDE)
        self.assertEqual(self.closed_flow(), (ip(HOST_IN), TARGET_PORT, ip(HOST_OUT), 50000))
        self.wait_events(pc.FLOW_EVENT_HIT, 3)
        self.assertEqual(self.events(pc.FLOW_EVENT_DNAT_CREATED), 1)
        self.assertEqual(self.events(pc.FLOW_EVENT_DNAT_REPLY), 2)


class ForwardedUdpKeepsItsChecksum(DataPlaneForwardTest):
    """A UDP forward both ways, the checksums exact after each rewrite."""

    def runTest(self) -> None:
        self.classify_everything()
        self.forward_in_data_plane(pc.IP_PROTO_UDP, 5353, 53)
        query = refresh(
            udp_packet(
                src=HOST_OUT,
                dst=GW_OUT_IP,
                sport=40001,
                dport=5353,
                eth_src=HOST_OUT_MAC,
                eth_dst=GW_MAC[OUTSIDE],
                payload=b"query",
            )
        )
        self.opened_forward(query, target_port=53)
        answer = refresh(
            udp_packet(src=HOST_IN, dst=HOST_OUT, sport=53, dport=40001, payload=b"answer")
        )
        testutils.send_packet(self, INSIDE, bytes(answer))
        testutils.verify_packet(
            self, routed(from_public_end(answer, 5353), OUTSIDE, HOST_OUT_MAC), OUTSIDE
        )
        testutils.verify_no_other_packets(self)
        self.assertEqual(self.events(pc.FLOW_EVENT_DNAT_REPLY), 1)


class OnlyTheFlowsOwnReplyIsTranslated(DataPlaneForwardTest):
    """From the forward's target, a TCP answer to a client that never came is dropped, not
    translated; a UDP datagram from it with no flow is a new flow of the inside host: with the
    data plane masquerading, it still goes to the controller rather than taking a port of the
    block (a forward's reply is never masqueraded by the data plane)."""

    def runTest(self) -> None:
        self.classify_everything()
        self.masquerade_in_data_plane()
        self.forward_in_data_plane(pc.IP_PROTO_TCP, PUBLIC_PORT, TARGET_PORT)
        self.forward_in_data_plane(pc.IP_PROTO_UDP, 5353, 53)
        self.opened_forward(from_client())
        self.assert_dropped(INSIDE, bytes(from_server(dport=50001)), pc.DROP_NO_SESSION)
        stray = refresh(udp_packet(src=HOST_IN, dst=HOST_OUT, sport=53, dport=40001))
        testutils.send_packet(self, INSIDE, bytes(stray))
        self.assertIsNotNone(self.client.get_packet_in(timeout=5), "no packet-in for it")
        testutils.verify_no_other_packets(self)
        self.assertEqual(self.events(pc.FLOW_EVENT_NAT_CREATED), 0)
        self.assertEqual(self.events(pc.FLOW_EVENT_DNAT_REPLY), 0)


class InspectedForwardSeenAsItArrived(DataPlaneForwardTest):
    """With an SPM: the opening packet reaches it as it arrived (to the public end) and is
    rewritten to the target on its way back; the reply is rewritten to the public end before the
    SPM, tagged NAT-done, and routed straight out after it."""

    def runTest(self) -> None:
        self.classify_everything(ids_class=INSPECTED)
        self.add_spm_pool(1, [(SPM_A, 1)], class_id=INSPECTED)
        self.forward_in_data_plane(pc.IP_PROTO_TCP, PUBLIC_PORT, TARGET_PORT)
        syn = from_client()
        testutils.send_packet(self, OUTSIDE, bytes(syn))
        testutils.verify_packet(self, to_spm(syn, SPM_A), SPM_A)
        record = self.next_digest(pc.D_SESSION_REQUEST_T)
        self.assertEqual((record["nat_kind"], record["nat_port"]), (pc.NAT_REWRITE_DST, 80))
        testutils.send_packet(self, SPM_A, bytes(returned_from_spm(syn, SPM_A, TAG_BASE)))
        testutils.verify_packet(
            self, routed(forwarded(syn, TARGET_PORT), INSIDE, HOST_IN_MAC), INSIDE
        )
        answer = from_server()
        testutils.send_packet(self, INSIDE, bytes(answer))
        public = from_public_end(answer)
        self.steered_nat_done(public)
        testutils.verify_packet(self, routed(public, OUTSIDE, HOST_OUT_MAC), OUTSIDE)
        testutils.verify_no_other_packets(self)


class FullCandidatesUndoTheForward(DataPlaneForwardTest):
    """Three forwarded flows (found with the slots' model, each to a public port of its own):
    two take a slot each, the third, whose two candidate slots are theirs, is undone and goes to
    the controller exactly as it arrived (packet-in, counted); nothing of it leaves."""

    def runTest(self) -> None:
        self.classify_everything()

        def clients(public_ports: range) -> Iterator[Flow]:
            # a forward's slot is keyed by its public end: client -> GW_OUT_IP:public
            for public in public_ports:
                for client in range(1024, 65536):
                    yield HOST_OUT, GW_OUT_IP, client, public

        held = self.slot_candidates((HOST_OUT, GW_OUT_IP, 50000, PUBLIC_PORT))
        second, third = self.colliding(
            held, clients(range(9000, 9500)), clients(range(9500, 10000))
        )
        pairs = [(50000, PUBLIC_PORT), (second[2], second[3]), (third[2], third[3])]
        for n, (_, public) in enumerate(pairs):
            self.forward_in_data_plane(pc.IP_PROTO_TCP, public, TARGET_PORT + n)
        for n, (client, public) in enumerate(pairs[:2]):
            self.opened_forward(from_client(client, public), TARGET_PORT + n)
        third = from_client(*pairs[2])
        testutils.send_packet(self, OUTSIDE, bytes(third))
        packet_in = self.client.get_packet_in(timeout=5)
        self.assertIsNotNone(packet_in, "no packet-in for the forward with no free slot")
        assert packet_in is not None
        self.assertEqual(
            bytes(Ether(packet_in.payload)[IP]), bytes(third[IP]), "not the packet as it arrived"
        )
        testutils.verify_no_other_packets(self)
        self.assertEqual(self.events(pc.FLOW_EVENT_DNAT_FALLBACK), 1)
        self.assertEqual(self.events(pc.FLOW_EVENT_DNAT_CREATED), 2)
