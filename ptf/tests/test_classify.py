"""Step 4: HSM / IPP classification on a miss. The tables are written here by hand for one or two
rules; the compiler that fills them from rule files is tested against linear search elsewhere."""

from __future__ import annotations

from ptf import testutils

from opengate import p4constants as pc
from opengate.entries import Exact, Lpm, Range, TableEntry, Ternary

from opengate_test import (
    HOST_IN,
    HOST_OUT_MAC,
    INSIDE,
    OUTSIDE,
    OpenGateTest,
    ip,
    refresh,
    routed,
    segment_params,
    tcp_packet,
)


class DeniedFlowDropped(OpenGateTest):
    """A flow the ACL denies is dropped and counted as ACL_DENY; nothing is reported."""

    def runTest(self) -> None:
        self.classify_everything(acl_action=pc.A_ACL_DENY, rule_id=3)
        self.enable_digest(pc.D_SESSION_REQUEST_T)
        self.assert_dropped(INSIDE, bytes(refresh(tcp_packet())), pc.DROP_ACL_DENY)
        self.assertEqual(self.drain_digests(), 0)


class NoMatchingRuleUsesDefaultVerdict(OpenGateTest):
    """With no rule installed, the acl_verdict default (deny) applies."""

    def runTest(self) -> None:
        testutils.send_packet(self, INSIDE, bytes(refresh(tcp_packet())))
        testutils.verify_no_other_packets(self)


class DefaultVerdictPermitForwards(OpenGateTest):
    """The policy's default verdict is the acl_verdict default action: permit lets flows open."""

    def runTest(self) -> None:
        self.set_default(pc.T_ACL_VERDICT, pc.A_ACL_PERMIT, {"rule_id": 0xFFFFFFFF})
        syn = refresh(tcp_packet())
        testutils.send_packet(self, INSIDE, bytes(syn))
        testutils.verify_packet(self, routed(syn, OUTSIDE, HOST_OUT_MAC), OUTSIDE)


class SegmentsAndAggregationSelectRule(OpenGateTest):
    """Two ACL rules, hand-compiled: rule 0 denies 10.0.1.10 -> any:22/tcp, rule 1 permits the
    rest. Port 22 falls in destination-port segment 2, everything else in segment 1."""

    def runTest(self) -> None:
        version = {"version": Exact(0)}

        def seg(
            table: str, field: str, value: object, action: str, acl: int, priority: int = 0
        ) -> None:
            self.insert(
                TableEntry.make(
                    table,
                    {**version, field: value},
                    action,  # type: ignore[dict-item]
                    segment_params(acl_index=acl, ids_index=0),
                    priority=priority,
                )
            )

        seg(pc.T_SA_SEGMENT, "ipv4_src", Lpm(0, 0), pc.A_SET_SA_INDEX, 1)
        seg(pc.T_SA_SEGMENT, "ipv4_src", Lpm(ip(HOST_IN), 32), pc.A_SET_SA_INDEX, 2)
        seg(pc.T_DA_SEGMENT, "ipv4_dst", Lpm(0, 0), pc.A_SET_DA_INDEX, 1)
        seg(pc.T_SP_SEGMENT, "l4_sport", Range(0, 0xFFFF), pc.A_SET_SP_INDEX, 1, priority=1)
        seg(pc.T_DP_SEGMENT, "l4_dport", Range(0, 21), pc.A_SET_DP_INDEX, 1, priority=1)
        seg(pc.T_DP_SEGMENT, "l4_dport", Range(22, 22), pc.A_SET_DP_INDEX, 2, priority=1)
        seg(pc.T_DP_SEGMENT, "l4_dport", Range(23, 0xFFFF), pc.A_SET_DP_INDEX, 1, priority=1)
        seg(pc.T_PROTO_SEGMENT, "ip_proto", Ternary(6, 0xFF), pc.A_SET_PROTO_INDEX, 2, priority=2)
        seg(pc.T_PROTO_SEGMENT, "ip_proto", Ternary(0, 0), pc.A_SET_PROTO_INDEX, 1, priority=1)
        # address classes: 1 = {rule 1}, 2 = {rule 0, rule 1}; port classes likewise.
        for sa, da, index in ((1, 1, 1), (2, 1, 2)):
            self.insert(
                TableEntry.make(
                    pc.T_ACL_ADDR_PAIR,
                    {**version, "acl_sa_index": Exact(sa), "acl_da_index": Exact(da)},
                    pc.A_SET_ACL_ADDR_INDEX,
                    {"index": index},
                )
            )
        for sp, dp, index in ((1, 1, 1), (1, 2, 2)):
            self.insert(
                TableEntry.make(
                    pc.T_ACL_PORT_PAIR,
                    {**version, "acl_sp_index": Exact(sp), "acl_dp_index": Exact(dp)},
                    pc.A_SET_ACL_PORT_INDEX,
                    {"index": index},
                )
            )
        for addr in (1, 2):
            for port in (1, 2):
                for proto in (1, 2):
                    deny = addr == 2 and port == 2 and proto == 2
                    key = {
                        **version,
                        "acl_addr_index": Exact(addr),
                        "acl_port_index": Exact(port),
                        "acl_proto_index": Exact(proto),
                    }
                    self.insert(
                        TableEntry.make(
                            pc.T_ACL_VERDICT,
                            key,
                            pc.A_ACL_DENY if deny else pc.A_ACL_PERMIT,
                            {"rule_id": 0 if deny else 1},
                        )
                    )
        ssh = refresh(tcp_packet(dport=22))
        web = refresh(tcp_packet(dport=80))
        testutils.send_packet(self, INSIDE, bytes(ssh))
        testutils.verify_no_other_packets(self)
        testutils.send_packet(self, INSIDE, bytes(web))
        testutils.verify_packet(self, routed(web, OUTSIDE, HOST_OUT_MAC), OUTSIDE)
        testutils.verify_no_other_packets(self)


class VersionFlipSwitchesBanks(OpenGateTest):
    """Entries of the idle bank (version 1) are invisible until classifier_version flips."""

    def runTest(self) -> None:
        self.classify_everything(acl_action=pc.A_ACL_DENY)
        for table, field, value, action, priority in (
            (pc.T_SA_SEGMENT, "ipv4_src", Lpm(0, 0), pc.A_SET_SA_INDEX, 0),
            (pc.T_DA_SEGMENT, "ipv4_dst", Lpm(0, 0), pc.A_SET_DA_INDEX, 0),
            (pc.T_SP_SEGMENT, "l4_sport", Range(0, 0xFFFF), pc.A_SET_SP_INDEX, 1),
            (pc.T_DP_SEGMENT, "l4_dport", Range(0, 0xFFFF), pc.A_SET_DP_INDEX, 1),
            (pc.T_PROTO_SEGMENT, "ip_proto", Ternary(0, 0), pc.A_SET_PROTO_INDEX, 1),
        ):
            self.insert(
                TableEntry.make(
                    table,
                    {"version": Exact(1), field: value},
                    action,
                    segment_params(acl_index=1, ids_index=1),
                    priority=priority,
                )
            )
        for table, keys, action in (
            (pc.T_ACL_ADDR_PAIR, ("acl_sa_index", "acl_da_index"), pc.A_SET_ACL_ADDR_INDEX),
            (pc.T_ACL_PORT_PAIR, ("acl_sp_index", "acl_dp_index"), pc.A_SET_ACL_PORT_INDEX),
        ):
            self.insert(
                TableEntry.make(
                    table,
                    {"version": Exact(1), keys[0]: Exact(1), keys[1]: Exact(1)},
                    action,
                    {"index": 1},
                )
            )
        key = {
            "version": Exact(1),
            "acl_addr_index": Exact(1),
            "acl_port_index": Exact(1),
            "acl_proto_index": Exact(1),
        }
        self.insert(TableEntry.make(pc.T_ACL_VERDICT, key, pc.A_ACL_PERMIT, {"rule_id": 9}))
        syn = refresh(tcp_packet())
        testutils.send_packet(self, INSIDE, bytes(syn))
        testutils.verify_no_other_packets(self)
        self.set_default(pc.T_CLASSIFIER_VERSION, pc.A_SET_CLASSIFIER_VERSION, {"version": 1})
        testutils.send_packet(self, INSIDE, bytes(syn))
        testutils.verify_packet(self, routed(syn, OUTSIDE, HOST_OUT_MAC), OUTSIDE)


class AclToCpuSendsPacketIn(OpenGateTest):
    """An ACL rule with the to-CPU verdict sends the packet to the controller with reason ACL
    and the rule id in the packet-in metadata."""

    def runTest(self) -> None:
        self.classify_everything(acl_action=pc.A_ACL_TO_CPU, rule_id=5)
        syn = refresh(tcp_packet())
        testutils.send_packet(self, INSIDE, bytes(syn))
        testutils.verify_no_other_packets(self)
        packet_in = self.client.get_packet_in(timeout=5)
        self.assertIsNotNone(packet_in, "no packet-in")
        assert packet_in is not None
        metadata = self.schema.decode_packet_metadata("packet_in", packet_in.metadata)
        self.assertEqual(
            (metadata["ingress_port"], metadata["reason"], metadata["acl_rule"]),
            (INSIDE, pc.CPU_REASON_ACL, 5),
        )
        self.assertEqual(packet_in.payload, bytes(syn))


class NaiveAclProfileFirstMatchWins(OpenGateTest):
    """The -DWITH_NAIVE_ACL profile: one priority ternary/range table. A higher-priority deny for
    TCP port 22 wins over a permit-everything rule below it."""

    p4info_param = "naive_p4info"
    config_param = "naive_config"

    def runTest(self) -> None:
        anything = {
            "ipv4_src": Ternary(0, 0),
            "ipv4_dst": Ternary(0, 0),
            "l4_sport": Range(0, 0xFFFF),
            "l4_dport": Range(0, 0xFFFF),
            "ip_proto": Ternary(0, 0),
        }
        ssh = {**anything, "l4_dport": Range(22, 22), "ip_proto": Ternary(6, 0xFF)}
        self.insert(TableEntry.make(pc.T_ACL_NAIVE, ssh, pc.A_ACL_DENY, {"rule_id": 0}, priority=2))
        self.insert(
            TableEntry.make(pc.T_ACL_NAIVE, anything, pc.A_ACL_PERMIT, {"rule_id": 1}, priority=1)
        )
        testutils.send_packet(self, INSIDE, bytes(refresh(tcp_packet(dport=22))))
        testutils.verify_no_other_packets(self)
        web = refresh(tcp_packet(dport=80))
        testutils.send_packet(self, INSIDE, bytes(web))
        testutils.verify_packet(self, routed(web, OUTSIDE, HOST_OUT_MAC), OUTSIDE)
        testutils.verify_no_other_packets(self)


def spill_entry(table: str, dport: int, action: str, params: dict[str, int]) -> TableEntry:
    """A spilled rule: any TCP packet to `dport` (bank 0)."""
    return TableEntry.make(
        table,
        {
            "version": Exact(0),
            "ipv4_src": Ternary(0, 0),
            "ipv4_dst": Ternary(0, 0),
            "l4_sport": Range(0, 0xFFFF),
            "l4_dport": Range(dport, dport),
            "ip_proto": Ternary(6, 0xFF),
        },
        action,
        params,
        priority=10,
    )


class HybridSpillTableEarlierRuleWins(OpenGateTest):
    """Hybrid classification: HSM says rule 5 (permit) for everything; a spilled rule 2 (deny,
    port 22) comes first and wins, a spilled rule 9 (deny, port 80) comes after rule 5 and does
    not; a spilled IDS rule that comes first sets the IDS class (seen in the digest)."""

    def runTest(self) -> None:
        if pc.T_ACL_SPILL not in self.schema.tables.by_name:
            self.skipTest("this build has no spill tables")
        self.classify_everything(rule_id=5)
        self.enable_digest(pc.D_SESSION_REQUEST_T)
        self.insert(spill_entry(pc.T_ACL_SPILL, 22, pc.A_ACL_DENY, {"rule_id": 2}))
        self.insert(spill_entry(pc.T_ACL_SPILL, 80, pc.A_ACL_DENY, {"rule_id": 9}))
        self.insert(
            spill_entry(pc.T_IDS_SPILL, 80, pc.A_SET_IDS_CLASS, {"class_id": 7, "rule_id": 1})
        )
        self.assert_dropped(INSIDE, bytes(refresh(tcp_packet(dport=22))), pc.DROP_ACL_DENY)
        web = refresh(tcp_packet(dport=80, flags="S"))
        testutils.send_packet(self, INSIDE, bytes(web))
        testutils.verify_packet(self, routed(web, OUTSIDE, HOST_OUT_MAC), OUTSIDE)
        testutils.verify_no_other_packets(self)
        record = self.next_digest(pc.D_SESSION_REQUEST_T)
        self.assertEqual((record["acl_rule"], record["ids_class"]), (5, 7))


class HybridPartitionTest(OpenGateTest):
    """Rules in the hybrid's extra ACL partitions (`acl2_*` to `acl6_*`): the segment lookups
    give their indexes beside the first partition's."""

    def partition_rules(self, part: str, rules: dict[int, tuple[int, str]]) -> None:
        """In partition `part`, rule `rule` with `action` for TCP packets to each port (the
        dp_segment entries of every port name all the partitions' indexes)."""
        v0 = {"version": Exact(0)}
        addr_pair, port_pair, verdict, set_addr, set_port = PARTITION_TABLES[part]
        self.insert(
            TableEntry.make(
                addr_pair,
                {**v0, f"{part}_sa_index": Exact(0), f"{part}_da_index": Exact(0)},
                set_addr,
                {"index": 1},
            )
        )
        for port, (rule, action) in rules.items():
            index = self.dport_index(port)
            self.insert(
                TableEntry.make(
                    port_pair,
                    {**v0, f"{part}_sp_index": Exact(0), f"{part}_dp_index": Exact(index)},
                    set_port,
                    {"index": index},
                )
            )
            key = {
                **v0,
                f"{part}_addr_index": Exact(1),
                f"{part}_port_index": Exact(index),
                f"{part}_proto_index": Exact(0),
            }
            self.insert(TableEntry.make(verdict, key, action, {"rule_id": rule}))

    def dport_index(self, port: int) -> int:
        """The destination port's segment (index = its position among the ports, + 2), in
        every partition."""
        index = 2 + PORTS.index(port)
        if port not in self.segments:
            self.segments.add(port)
            self.insert(
                TableEntry.make(
                    pc.T_DP_SEGMENT,
                    {"version": Exact(0), "l4_dport": Range(port, port)},
                    pc.A_SET_DP_INDEX,
                    segment_params(
                        acl_index=1, ids_index=1, **{f"{p}_index": index for p in PARTITION_TABLES}
                    ),
                    priority=10,  # over classify_everything's any-port segment
                )
            )
        return index

    def check(self, denied: tuple[int, ...], permitted: tuple[int, ...]) -> None:
        for dport in denied:
            self.assert_dropped(INSIDE, bytes(refresh(tcp_packet(dport=dport))), pc.DROP_ACL_DENY)
        for dport in permitted:
            packet = refresh(tcp_packet(dport=dport))
            testutils.send_packet(self, INSIDE, bytes(packet))
            testutils.verify_packet(self, routed(packet, OUTSIDE, HOST_OUT_MAC), OUTSIDE)
            testutils.verify_no_other_packets(self)

    def setUp(self) -> None:
        super().setUp()
        self.segments: set[int] = set()
        if pc.T_ACL6_VERDICT not in self.schema.tables.by_name:
            self.skipTest("this build has no extra ACL partitions")


PORTS = (22, 80, 443, 8080, 25)
# The extra partitions' tables and actions (their key fields are named after the partition).
PARTITION_TABLES = {
    f"acl{n}": (
        getattr(pc, f"T_ACL{n}_ADDR_PAIR"),
        getattr(pc, f"T_ACL{n}_PORT_PAIR"),
        getattr(pc, f"T_ACL{n}_VERDICT"),
        getattr(pc, f"A_SET_ACL{n}_ADDR_INDEX"),
        getattr(pc, f"A_SET_ACL{n}_PORT_INDEX"),
    )
    for n in range(2, 7)
}


class HybridSecondPartitionEarlierRuleWins(HybridPartitionTest):
    """The first partition says rule 5 (permit) for everything; in the second, rule 2 (deny,
    port 22) comes first and wins, rule 9 (deny, port 80) comes after rule 5 and does not, and a
    packet the second does not match (port 443) keeps the first's verdict."""

    def runTest(self) -> None:
        self.classify_everything(rule_id=5)
        self.partition_rules("acl2", {22: (2, pc.A_ACL_DENY), 80: (9, pc.A_ACL_DENY)})
        self.dport_index(443)
        self.check(denied=(22,), permitted=(80, 443))


class HybridThirdPartitionEarliestOfThreeWins(HybridPartitionTest):
    """Three partitions: the first says rule 5 (permit) for everything. Port 22: the third's
    rule 2 (deny) is the earliest. Port 80: the second's rule 4 (deny) beats the third's rule 6
    (permit). Port 443: the third's rule 3 (permit) beats the second's rule 4 (deny). Port 8080:
    the third's rule 9 (deny) comes after the first's rule 5, which stands."""

    def runTest(self) -> None:
        self.classify_everything(rule_id=5)
        self.partition_rules("acl2", {80: (4, pc.A_ACL_DENY), 443: (4, pc.A_ACL_DENY)})
        self.partition_rules(
            "acl3",
            {
                22: (2, pc.A_ACL_DENY),
                80: (6, pc.A_ACL_PERMIT),
                443: (3, pc.A_ACL_PERMIT),
                8080: (9, pc.A_ACL_DENY),
            },
        )
        self.check(denied=(22, 80), permitted=(443, 8080))


class HybridSixPartitionsEarliestWins(HybridPartitionTest):
    """All six partitions: the first says rule 20 (permit) for everything; each port's earliest
    rule is in another partition. Port 22: the sixth's rule 3 (deny) beats the second's rule 12
    (permit). Port 80: the fourth's rule 2 (deny) beats the third's rule 3 and the sixth's rule 4
    (permit). Port 443: the fifth's rule 1 (deny) beats the sixth's 2 and the second's 6
    (permit). Port 25: the fifth's rule 1 (permit) beats the second's 7 and the third's 8
    (deny). Port 8080: the sixth's rule 30 (deny) comes after the first's rule 20."""

    def runTest(self) -> None:
        deny, permit = pc.A_ACL_DENY, pc.A_ACL_PERMIT
        self.classify_everything(rule_id=20)
        self.partition_rules("acl2", {22: (12, permit), 443: (6, permit), 25: (7, deny)})
        self.partition_rules("acl3", {80: (3, permit), 25: (8, deny)})
        self.partition_rules("acl4", {80: (2, deny)})
        self.partition_rules("acl5", {443: (1, deny), 25: (1, permit)})
        self.partition_rules(
            "acl6", {22: (3, deny), 80: (4, permit), 443: (2, permit), 8080: (30, deny)}
        )
        self.check(denied=(22, 80, 443), permitted=(25, 8080))
