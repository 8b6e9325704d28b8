"""The compiler's entries are valid P4Runtime entities for the committed P4Info (both profiles)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.hsm.compile import compile_hsm
from controller.hsm.naive import compile_naive
from controller.hsm.rules import parse_classbench
from controller.hsm.snort_header import load_ids_file
from controller.hsm.update import flip_entry
from opengate.p4info import P4Schema


def _schema(path: Path) -> P4Schema:
    if not path.is_file():
        pytest.skip(f"P4Info not built: {path}")
    return P4Schema.load(path)


def test_hsm_entries_encode_and_decode_unchanged(
    build_dir: Path, classbench_dir: Path, community_rules: Path
) -> None:
    schema = _schema(build_dir / "opengate.p4info.txtpb")
    acl = parse_classbench(classbench_dir / "ipc1_1k", limit=100)
    headers, _ = load_ids_file(community_rules, include_commented=True)
    for version in (0, 1):
        compiled = compile_hsm(acl, headers.rules).in_bank(version)
        for entry in compiled.entries:
            assert schema.decode_entry(schema.encode_entry(entry)) == entry
    schema.encode_entry(flip_entry(1))


def test_naive_entries_encode_and_decode_unchanged(
    build_dir: Path, classbench_dir: Path, community_rules: Path
) -> None:
    schema = _schema(build_dir / "naive_acl" / "opengate.p4info.txtpb")
    acl = parse_classbench(classbench_dir / "fw1_1k", limit=100)
    headers, _ = load_ids_file(community_rules)
    for entry in compile_naive(acl, headers.rules).entries:
        assert schema.decode_entry(schema.encode_entry(entry)) == entry
