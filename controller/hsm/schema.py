"""Names (as pinned in the P4Info) and widths of the classification tables the compiler fills.

The P4 program (p4src/include/control/classify.p4) is the source of truth; this module repeats
only what the compiler, the table walker and the memory model need, in one place.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from opengate import p4constants as pc

VERSION_KEY = "version"
RULE_NONE = 0xFFFFFFFF
SEG_INDEX_BITS = 16
AGG_INDEX_BITS = 32
RULE_ID_BITS = 32
CLASS_ID_BITS = 8

CLASSIFIER_VERSION = "classifier_version"
SET_CLASSIFIER_VERSION = "set_classifier_version"

ACL_SIDE = "acl"
IDS_SIDE = "ids"
SIDES = (ACL_SIDE, IDS_SIDE)  # the rule sets
# The hybrid's other ACL partitions (acl2, acl3, ... as many as the v1model program declares):
# chains of their own over ACL rules the first one does not hold.
PARTITION_SIDES = tuple(
    sorted(
        (m[1] for t in pc.TABLE_SIZES if (m := re.fullmatch(r"(acl(\d+))_verdict", t))),
        key=lambda side: int(side[3:]),
    )
)

FIELDS = ("src", "dst", "sport", "dport", "proto")


@dataclass(frozen=True, slots=True)
class SegmentTable:
    name: str
    field: str  # index into FIELDS
    key: str
    kind: str  # lpm | range | ternary
    width: int
    action: str


SEGMENT_TABLES: tuple[SegmentTable, ...] = (
    SegmentTable("sa_segment", "src", "ipv4_src", "lpm", 32, "set_sa_index"),
    SegmentTable("da_segment", "dst", "ipv4_dst", "lpm", 32, "set_da_index"),
    SegmentTable("sp_segment", "sport", "l4_sport", "range", 16, "set_sp_index"),
    SegmentTable("dp_segment", "dport", "l4_dport", "range", 16, "set_dp_index"),
    SegmentTable("proto_segment", "proto", "ip_proto", "ternary", 8, "set_proto_index"),
)
SEGMENT_BY_FIELD = {t.field: t for t in SEGMENT_TABLES}


@dataclass(frozen=True, slots=True)
class Chain:
    """One chain of aggregation tables: the IDS's, or one partition of the ACL's."""

    side: str
    addr_pair: str
    port_pair: str
    final: str
    addr_action: str
    port_action: str
    rule_set: str  # whose rules it holds (ACL_SIDE or IDS_SIDE): the earliest of its chains wins

    def seg_key(self, field: str) -> str:
        short = {"src": "sa", "dst": "da", "sport": "sp", "dport": "dp", "proto": "proto"}[field]
        return f"{self.side}_{short}_index"

    @property
    def addr_key(self) -> str:
        return f"{self.side}_addr_index"

    @property
    def port_key(self) -> str:
        return f"{self.side}_port_index"


ACL_CHAIN = Chain(
    ACL_SIDE, "acl_addr_pair", "acl_port_pair", "acl_verdict", "set_acl_addr_index",
    "set_acl_port_index", ACL_SIDE,
)  # fmt: skip
IDS_CHAIN = Chain(
    IDS_SIDE, "ids_addr_pair", "ids_port_pair", "ids_classification", "set_ids_addr_index",
    "set_ids_port_index", IDS_SIDE,
)  # fmt: skip


def _partition_chain(side: str) -> Chain:
    return Chain(
        side, f"{side}_addr_pair", f"{side}_port_pair", f"{side}_verdict",
        f"set_{side}_addr_index", f"set_{side}_port_index", ACL_SIDE,
    )  # fmt: skip


PARTITION_CHAINS = tuple(_partition_chain(side) for side in PARTITION_SIDES)
# In the order of the segment actions' parameters (acl_index, ids_index, acl2_index, ...).
CHAINS = {ACL_SIDE: ACL_CHAIN, IDS_SIDE: IDS_CHAIN, **{c.side: c for c in PARTITION_CHAINS}}
PARTITION_TABLES = tuple(t for c in PARTITION_CHAINS for t in (c.addr_pair, c.port_pair, c.final))

ACL_ACTIONS = ("acl_permit", "acl_deny", "acl_to_cpu")
SET_IDS_CLASS = "set_ids_class"

ACL_NAIVE = "acl_naive"
IDS_NAIVE = "ids_naive"
# The hybrid's spill tables (same keys as the naive tables, plus the version).
ACL_SPILL = "acl_spill"
IDS_SPILL = "ids_spill"
SPILL_TABLES = {ACL_SIDE: ACL_SPILL, IDS_SIDE: IDS_SPILL}
NAIVE_KEYS = ("ipv4_src", "ipv4_dst", "l4_sport", "l4_dport", "ip_proto")
# What a hybrid program (the v1model builds: OG_HSM_SPILL) has beyond HSM: the extra ACL
# partitions and the spill tables. A program without them (TNA) classifies with HSM alone.
HYBRID_TABLES: tuple[str, ...] = (*PARTITION_TABLES, *SPILL_TABLES.values())

HSM_TABLES: tuple[str, ...] = (
    *(t.name for t in SEGMENT_TABLES),
    ACL_CHAIN.addr_pair,
    ACL_CHAIN.port_pair,
    ACL_CHAIN.final,
    IDS_CHAIN.addr_pair,
    IDS_CHAIN.port_pair,
    IDS_CHAIN.final,
)


def table_capacity(table: str) -> int:
    """Entries `table` holds (both banks together) in the default v1model build (P4Info); a
    program at hand gives its own through `program_limits`."""
    return pc.TABLE_SIZES[table]


def program_limits(sizes: Mapping[str, int]) -> dict[str, int]:
    """Entries per bank (half the declared size) of the classification tables of a program,
    from its P4Info's sizes by table name (bf-p4c's `pipe.` prefix dropped). A hybrid table the
    program lacks holds nothing (0): the compiler then spills nothing."""
    wanted = {*HSM_TABLES, *HYBRID_TABLES, ACL_NAIVE, IDS_NAIVE}
    limits = {
        short: size // 2
        for name, size in sizes.items()
        if (short := name.rpartition(".")[2]) in wanted
    }
    return {**{t: 0 for t in HYBRID_TABLES}, **limits}
