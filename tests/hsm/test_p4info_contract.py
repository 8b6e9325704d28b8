"""The compiler's entries are valid P4Runtime entities for the committed P4Info (both profiles)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from controller.hsm import schema as hsm_schema
from controller.hsm.compile import compile_hsm
from controller.hsm.hybrid import SpillPlan, compile_spilled
from controller.hsm.naive import compile_naive
from controller.hsm.rules import parse_classbench
from controller.hsm.snort_header import load_ids_file
from controller.hsm.update import flip_entry
from opengate.entries import TableEntry
from opengate.p4info import P4Schema


def _schema(path: Path) -> P4Schema:
    if not path.is_file():
        pytest.skip(f"P4Info not built: {path}")
    return P4Schema.load(path)


def _assert_round_trip(schema: P4Schema, entries: Iterable[TableEntry]) -> None:
    for entry in entries:
        assert schema.decode_entry(schema.encode_entry(entry)) == entry


def test_hsm_entries_encode_and_decode_unchanged(
    build_dir: Path, classbench_dir: Path, community_rules: Path
) -> None:
    """The v1model build's hybrid: the six ACL partitions and both spill tables hold entries."""
    schema = _schema(build_dir / "opengate.p4info.txtpb")
    acl = parse_classbench(classbench_dir / "ipc1_1k", limit=100)
    headers, _ = load_ids_file(community_rules, include_commented=True)
    plan = SpillPlan(
        acl=frozenset({3, 7}),
        ids=frozenset(r.rule_id for r in headers.rules[:5]),
        parts=tuple(frozenset(range(k, 100, 7)) for k in range(5)),
    )
    for version in (0, 1):
        compiled = compile_spilled(acl, headers.rules, plan, partitioned=True).in_bank(version)
        tables = {e.table for e in compiled.entries}
        assert {*hsm_schema.HSM_TABLES, *hsm_schema.HYBRID_TABLES} <= tables
        _assert_round_trip(schema, compiled.entries)
    schema.encode_entry(flip_entry(1))


def test_hsm_alone_entries_encode_for_the_tofino_build(
    build_dir: Path, classbench_dir: Path, community_rules: Path
) -> None:
    """A program without the hybrid's tables (TNA): segment actions without `acl2_index`."""
    schema = _schema(build_dir / "tofino" / "tofino2-default.p4info.txtpb")
    acl = parse_classbench(classbench_dir / "acl1_1k", limit=100)
    headers, _ = load_ids_file(community_rules)
    _assert_round_trip(schema, compile_hsm(acl, headers.rules).entries)


def test_naive_entries_encode_and_decode_unchanged(
    build_dir: Path, classbench_dir: Path, community_rules: Path
) -> None:
    schema = _schema(build_dir / "naive_acl" / "opengate.p4info.txtpb")
    acl = parse_classbench(classbench_dir / "fw1_1k", limit=100)
    headers, _ = load_ids_file(community_rules)
    _assert_round_trip(schema, compile_naive(acl, headers.rules).entries)
