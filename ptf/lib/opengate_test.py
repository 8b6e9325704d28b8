"""Layer 2 of the PTF suite: OpenGate feature helpers on top of the P4Runtime base test.

The test topology: switch port 1 is inside, 2 outside, 3 and 4 lead to two SPMs. PTF port n is the
peer of switch port n. Table and action names come from opengate.p4constants (generated from the
P4Info), never retyped.
"""

from __future__ import annotations

from typing import ClassVar

from finsy.proto import p4r
from ptf import testutils
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet

from opengate import p4constants as pc
from opengate.entries import Exact, Lpm, Range, TableEntry, Ternary
from opengate.testbed import (
    GW_IN_IP,
    GW_MAC,
    GW_OUT_IP,
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
    mac,
    segment_params,
    session_entry,
    tag_mac,
)

from base_test import P4RuntimeTest

# The test bed's names, re-exported for the test modules (layer 3).
__all__ = [
    "GW_IN_IP",
    "GW_MAC",
    "GW_OUT_IP",
    "HOST_IN",
    "HOST_IN_2",
    "HOST_IN_MAC",
    "HOST_OUT",
    "HOST_OUT_MAC",
    "INSIDE",
    "OUTSIDE",
    "POOL",
    "SPM_A",
    "SPM_B",
    "SPM_MAC",
    "TAG_BASE",
    "OpenGateTest",
    "icmp_echo",
    "ip",
    "mac",
    "refresh",
    "routed",
    "tag_mac",
    "tcp_packet",
    "udp_packet",
]

HOST_IN_2 = "10.0.1.11"


def tcp_packet(
    src: str = HOST_IN,
    dst: str = HOST_OUT,
    sport: int = 40000,
    dport: int = 80,
    flags: str = "S",
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


def udp_packet(
    src: str = HOST_IN,
    dst: str = HOST_OUT,
    sport: int = 5353,
    dport: int = 53,
    eth_src: str = HOST_IN_MAC,
    eth_dst: str = GW_MAC[INSIDE],
    payload: bytes = b"query",
) -> Packet:
    return (
        Ether(src=eth_src, dst=eth_dst)
        / IP(src=src, dst=dst, id=1)
        / UDP(sport=sport, dport=dport)
        / payload
    )


def icmp_echo(
    src: str = HOST_IN,
    dst: str = HOST_OUT,
    ident: int = 0x1234,
    reply: bool = False,
    eth_src: str = HOST_IN_MAC,
    eth_dst: str = GW_MAC[INSIDE],
) -> Packet:
    return (
        Ether(src=eth_src, dst=eth_dst)
        / IP(src=src, dst=dst, id=1)
        / ICMP(type=0 if reply else 8, id=ident, seq=1)
        / b"ping"
    )


def routed(packet: Packet, port: int, next_hop_mac: str) -> Packet:
    """What the gateway sends for `packet` when it routes it out of `port` (checksums redone)."""
    out = packet.copy()
    out[Ether].src = GW_MAC[port]
    out[Ether].dst = next_hop_mac
    out[IP].ttl -= 1
    return refresh(out)


def refresh(packet: Packet) -> Packet:
    """Rebuild with recomputed checksums (as scapy would send a fresh packet)."""
    out = packet.copy()
    del out[IP].chksum
    for layer in (TCP, UDP, ICMP):
        if out.haslayer(layer):
            del out[layer].chksum
    return Ether(bytes(out))


class OpenGateTest(P4RuntimeTest):
    """Feature helpers: ports, routes, sessions, classification, SPM pools."""

    _next_member: ClassVar[int] = 1
    register_event_counter: ClassVar[str] = pc.C_FLOW_EVENT_COUNTER

    def setUp(self) -> None:
        super().setUp()
        self.setup_gateway()

    # -- base configuration -------------------------------------------------------------

    def setup_gateway(self) -> None:
        roles = {
            INSIDE: pc.ROLE_INSIDE,
            OUTSIDE: pc.ROLE_OUTSIDE,
            SPM_A: pc.ROLE_SPM,
            SPM_B: pc.ROLE_SPM,
        }
        for port, role in roles.items():
            self.insert(
                TableEntry.make(
                    pc.T_PORT_ROLE,
                    {"ingress_port": Exact(port)},
                    pc.A_SET_PORT_ROLE,
                    {"role": role},
                )
            )
        for port, gw_mac in GW_MAC.items():
            self.insert(
                TableEntry.make(
                    pc.T_ROUTER_MAC,
                    {"egress_port": Exact(port)},
                    pc.A_SET_SOURCE_MAC,
                    {"mac": mac(gw_mac)},
                )
            )
        self.add_route("10.0.1.0", 24, INSIDE, HOST_IN_MAC)
        self.add_route("198.51.100.0", 24, OUTSIDE, HOST_OUT_MAC)
        self.set_default(pc.T_NPM_IDENTITY, pc.A_SET_NPM_IDENTITY, {"tag_base": TAG_BASE})
        for nat_done in (0, 1):
            self.insert(
                TableEntry.make(
                    pc.T_SPM_RETURN,
                    {"tag": Exact(TAG_BASE | nat_done)},
                    pc.A_RESUME_AFTER_SPM,
                    {"nat_done": nat_done},
                )
            )

    def add_route(self, prefix: str, length: int, port: int, next_hop_mac: str) -> None:
        self.insert(
            TableEntry.make(
                pc.T_ROUTING,
                {"ipv4_dst": Lpm(ip(prefix), length)},
                pc.A_ROUTE_TO,
                {"port": port, "next_hop_mac": mac(next_hop_mac)},
            )
        )

    def masquerade_inside(self) -> None:
        """The inside LAN (10.0.1.0/24) is masqueraded when it leaves by the outside port."""
        self.insert(
            TableEntry.make(
                pc.T_SNAT_RULE,
                {"egress_port": Exact(OUTSIDE), "ipv4_src": Lpm(ip("10.0.1.0"), 24)},
                pc.A_MASQUERADE,
            )
        )

    # -- drops --------------------------------------------------------------------------

    def assert_dropped(self, port: int, raw: bytes, reason: int) -> None:
        """Send `raw` on `port`; nothing may come out, and drop_counter[reason] counts it."""
        before = self.counter(pc.C_DROP_COUNTER, reason)[0]
        testutils.send_packet(self, port, raw)
        testutils.verify_no_other_packets(self)
        self.wait_for(
            f"drop_counter[{pc.DROP_NAMES[reason]}] to count the packet",
            lambda: self.counter(pc.C_DROP_COUNTER, reason)[0] == before + 1,
        )

    def total_drops(self) -> int:
        """Every cell of the drop counter, summed."""
        return sum(self.counter(pc.C_DROP_COUNTER, reason)[0] for reason in pc.DROP_NAMES)

    def expect_packet_in(self, port: int, raw: bytes, reason: int) -> None:
        """Send `raw` on `port`: it must reach the controller as it was sent, with `reason` and
        `port` in the packet-in metadata."""
        testutils.send_packet(self, port, raw)
        packet_in = self.client.get_packet_in(timeout=5)
        self.assertIsNotNone(packet_in, "no packet-in")
        assert packet_in is not None
        meta = self.schema.decode_packet_metadata("packet_in", packet_in.metadata)
        self.assertEqual((meta["ingress_port"], meta["reason"]), (port, reason))
        self.assertEqual(packet_in.payload, raw, "the packet as it arrived")

    def closed_flow(self) -> tuple[int, int, int, int]:
        """The flow of the next session-close digest: (ipv4_src, l4_sport, ipv4_dst, l4_dport)."""
        record = self.next_digest(pc.D_SESSION_CLOSE_T)
        return record["ipv4_src"], record["l4_sport"], record["ipv4_dst"], record["l4_dport"]

    # -- classification ------------------------------------------------------------------

    def classify_everything(
        self, acl_action: str = "", rule_id: int = 0, ids_class: int = 0
    ) -> None:
        """Install the HSM tables of a one-rule ACL and a one-rule IDS set that match any packet:
        every field falls in segment 1 of both rule sets, and the aggregation entries give
        `acl_action(rule_id)` and `ids_class`."""
        acl_action = acl_action or pc.A_ACL_PERMIT
        segments = (
            (pc.T_SA_SEGMENT, "ipv4_src", Lpm(0, 0), pc.A_SET_SA_INDEX, 0),
            (pc.T_DA_SEGMENT, "ipv4_dst", Lpm(0, 0), pc.A_SET_DA_INDEX, 0),
            (pc.T_SP_SEGMENT, "l4_sport", Range(0, 0xFFFF), pc.A_SET_SP_INDEX, 1),
            (pc.T_DP_SEGMENT, "l4_dport", Range(0, 0xFFFF), pc.A_SET_DP_INDEX, 1),
            (pc.T_PROTO_SEGMENT, "ip_proto", Ternary(0, 0), pc.A_SET_PROTO_INDEX, 1),
        )
        for table, field, value, action, priority in segments:
            self.insert(
                TableEntry.make(
                    table,
                    {"version": Exact(0), field: value},
                    action,
                    segment_params(acl_index=1, ids_index=1),
                    priority=priority,
                )
            )
        for table, keys, action in (
            (pc.T_ACL_ADDR_PAIR, ("acl_sa_index", "acl_da_index"), pc.A_SET_ACL_ADDR_INDEX),
            (pc.T_ACL_PORT_PAIR, ("acl_sp_index", "acl_dp_index"), pc.A_SET_ACL_PORT_INDEX),
            (pc.T_IDS_ADDR_PAIR, ("ids_sa_index", "ids_da_index"), pc.A_SET_IDS_ADDR_INDEX),
            (pc.T_IDS_PORT_PAIR, ("ids_sp_index", "ids_dp_index"), pc.A_SET_IDS_PORT_INDEX),
        ):
            match = {"version": Exact(0), keys[0]: Exact(1), keys[1]: Exact(1)}
            self.insert(TableEntry.make(table, match, action, {"index": 1}))
        verdict_key = {
            "version": Exact(0),
            "acl_addr_index": Exact(1),
            "acl_port_index": Exact(1),
            "acl_proto_index": Exact(1),
        }
        self.insert(
            TableEntry.make(pc.T_ACL_VERDICT, verdict_key, acl_action, {"rule_id": rule_id})
        )
        if ids_class:
            ids_key = {
                "version": Exact(0),
                "ids_addr_index": Exact(1),
                "ids_port_index": Exact(1),
                "ids_proto_index": Exact(1),
            }
            self.insert(
                TableEntry.make(
                    pc.T_IDS_CLASSIFICATION,
                    ids_key,
                    pc.A_SET_IDS_CLASS,
                    {"class_id": ids_class, "rule_id": 0},
                )
            )

    # -- sessions -----------------------------------------------------------------------

    session_entry = staticmethod(session_entry)

    def add_session(self, *args: object, idle_timeout_ns: int = 0, **kwargs: object) -> TableEntry:
        entry = self.session_entry(*args, **kwargs)  # type: ignore[arg-type]
        message = self.schema.encode_entry(entry)
        if idle_timeout_ns:
            message.idle_timeout_ns = idle_timeout_ns
        self.client.insert([message])
        self._undo.append(lambda: self.client.delete([message]))
        return entry

    def add_masqueraded_session(self, reply: bool = False) -> TableEntry:
        """The controller's entry masquerading HOST_IN:40000 -> HOST_OUT:80 (TCP) as
        GW_OUT_IP:61001, and with `reply` the reply's entry, rewritten back before any SPM.
        Returns the original direction's."""
        original = self.add_session(
            HOST_IN,
            HOST_OUT,
            6,
            40000,
            80,
            nat_kind=pc.NAT_REWRITE_SRC,
            nat_addr=GW_OUT_IP,
            nat_port=61001,
        )
        if reply:
            self.add_session(
                HOST_OUT,
                GW_OUT_IP,
                6,
                80,
                61001,
                nat_kind=pc.NAT_REWRITE_DST,
                nat_addr=HOST_IN,
                nat_port=40000,
                nat_before_spm=1,
            )
        return original

    # -- SPM pools ----------------------------------------------------------------------

    def add_spm_pool(
        self, pool: int, members: list[tuple[int, int]], class_id: int, fail_open: int = 0
    ) -> None:
        """A pool of SPMs [(port, weight)] behind the selector, used by IDS class `class_id`."""
        self.insert(
            TableEntry.make(
                pc.T_CLASS_POLICY,
                {"class_id": Exact(class_id)},
                pc.A_INSPECT,
                {"pool": pool, "open_on_failure": fail_open},
            )
        )
        profile_id = self.schema.tables.get(pc.T_SPM_SELECT).implementation_id
        action = self.schema.actions.get(pc.A_STEER_TO_SPM)
        group_id = 100 + pool
        group = p4r.ActionProfileGroup(action_profile_id=profile_id, group_id=group_id, max_size=8)
        member_ids = []
        for port, weight in members:
            member_id = OpenGateTest._next_member
            OpenGateTest._next_member += 1
            member = p4r.ActionProfileMember(action_profile_id=profile_id, member_id=member_id)
            member.action.CopyFrom(
                self.schema.encode_action(action, {"port": port, "spm_mac": mac(SPM_MAC[port])})
            )
            self.insert_message(member)
            member_ids.append((member_id, weight))
        for member_id, weight in member_ids:
            group.members.add(member_id=member_id, weight=weight)
        self.insert_message(group)
        table = self.schema.tables.get(pc.T_SPM_SELECT)
        entry = p4r.TableEntry(table_id=table.id)
        field_match = self.schema.encode_match(table, "pool", Exact(pool))
        assert field_match is not None
        entry.match.append(field_match)
        entry.action.action_profile_group_id = group_id
        self.insert_message(entry)
