"""The hybrid on Tofino (issue #17, item 4): acl1_1k and the community IDS headers, compiled
against the table sizes of a committed TNA build (its P4Info, as `opengate hsm compile --p4info`
reads it), fit that build's banks with ACL rules spilled into its `acl_spill`, make entries that
build's P4Info accepts, and classify exactly as first-match linear search does.

Tofino 2's build has the ACL spill table but neither the IDS spill table nor the second and third
ACL partitions (docs/explanation/tofino.md); the IDS headers fit its class table.
Tofino 1's has no spill table (it would need a thirteenth stage): acl1_1k overflows it
(tests/hsm/test_cli.py)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from controller.hsm import schema
from controller.hsm.cli import limits_from_p4info
from controller.hsm.rules import parse_classbench
from controller.hsm.snort_header import load_ids_file
from controller.hsm.tables import compile_tables
from opengate.p4info import P4Schema
from opengate.snort.header import SnortVariables

from .test_equivalence import _packets, assert_same_as_linear

RFC1918 = "[10.0.0.0/8,172.16.0.0/12,192.168.0.0/16]"
# The builds whose P4Info has the ACL spill table (opengate.tofino.BUILDS, default profile).
HYBRID_BUILDS = ("tofino2-default",)
PACKETS_CHECKED = 3000


@pytest.mark.parametrize("build", HYBRID_BUILDS)
def test_acl1_1k_and_the_community_ids_headers_fit_the_tofino_build(
    build_dir: Path, classbench_dir: Path, community_rules: Path, build: str
) -> None:
    p4info = build_dir / "tofino" / f"{build}.p4info.txtpb"
    limits = limits_from_p4info(p4info)
    assert limits[schema.ACL_SPILL] > 0, f"{build} has no acl_spill"
    assert limits[schema.IDS_SPILL] == 0, f"{build} has an ids_spill: update the docstring"
    acl = parse_classbench(classbench_dir / "acl1_1k")
    variables = SnortVariables().with_values({"HOME_NET": RFC1918})
    headers, _ = load_ids_file(community_rules, variables=variables, include_commented=True)
    compiled = compile_tables(acl, headers.rules, limits=limits, fallback=False)
    stats = compiled.stats
    assert stats.profile == "hsm"
    # HSM alone does not fit Tofino's acl_addr_pair (16,390 entries for a 16,384-entry bank)
    assert 0 < stats.acl_spilled <= limits[schema.ACL_SPILL]
    assert stats.ids_spilled == 0 and not any(stats.partition_terms)
    for table, limit in limits.items():
        assert stats.entries(table) <= limit, f"{table}: {stats.entries(table)} > {limit}"
    target = P4Schema.load(p4info)
    for entry in compiled.entries:
        assert target.decode_entry(target.encode_entry(entry)) == entry
    packets = _packets(acl, headers.rules, 300)
    sample = random.Random(build).sample(packets, min(len(packets), PACKETS_CHECKED))
    assert assert_same_as_linear(compiled.entries, acl, headers.rules, sample) == len(sample)
