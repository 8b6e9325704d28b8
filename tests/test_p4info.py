"""P4Info name resolution and the name-based entry <-> P4Runtime conversion."""

from __future__ import annotations

from pathlib import Path

import pytest

from opengate import p4constants as pc
from opengate.entries import Exact, Lpm, Range, TableEntry, Ternary
from opengate.gen_constants import render
from opengate.p4info import P4InfoError, P4Schema, encode_value
from opengate.target import repo_root
from opengate.testbed import segment_params


@pytest.fixture(scope="module")
def schema(build_dir: Path) -> P4Schema:
    return P4Schema.load(build_dir / "opengate.p4info.txtpb")


def test_unknown_table_suggests_the_closest_name(schema: P4Schema) -> None:
    with pytest.raises(P4InfoError, match=r"no table named 'sesion'; did you mean 'session'\?"):
        schema.tables.get("sesion")


def test_unknown_action_of_a_table_lists_close_match(schema: P4Schema) -> None:
    entry = TableEntry.make(pc.T_ROUTING, {"ipv4_dst": Lpm(0x0A000000, 8)}, "route_too", {})
    with pytest.raises(P4InfoError, match="did you mean 'route_to'"):
        schema.encode_entry(entry)


def test_value_too_wide_names_the_field(schema: P4Schema) -> None:
    entry = TableEntry.make(
        pc.T_PORT_ROLE, {"ingress_port": Exact(512)}, pc.A_SET_PORT_ROLE, {"role": 1}
    )
    with pytest.raises(
        P4InfoError, match=r"port_role.ingress_port: value 512 does not fit in 9 bits"
    ):
        schema.encode_entry(entry)


def test_wrong_match_kind_is_refused(schema: P4Schema) -> None:
    entry = TableEntry.make(
        pc.T_ROUTING, {"ipv4_dst": Exact(1)}, pc.A_ROUTE_TO, {"port": 1, "next_hop_mac": 2}
    )
    with pytest.raises(P4InfoError, match=r"routing\.ipv4_dst is an lpm field; got Exact"):
        schema.encode_entry(entry)


def test_missing_action_parameter_is_named(schema: P4Schema) -> None:
    entry = TableEntry.make(pc.T_ROUTING, {"ipv4_dst": Lpm(1, 32)}, pc.A_ROUTE_TO, {"port": 1})
    with pytest.raises(P4InfoError, match=r"missing parameter\(s\) \['next_hop_mac'\]"):
        schema.encode_entry(entry)


def test_canonical_bytestrings_strip_leading_zeros() -> None:
    assert encode_value(0, 32, "x") == b"\x00"
    assert encode_value(0x0102, 32, "x") == b"\x01\x02"
    with pytest.raises(P4InfoError):
        encode_value(-1, 8, "x")


def test_lpm_value_is_masked_to_its_prefix(schema: P4Schema) -> None:
    entry = TableEntry.make(
        pc.T_ROUTING,
        {"ipv4_dst": Lpm(0x0A0B0C0D, 16)},
        pc.A_ROUTE_TO,
        {"port": 1, "next_hop_mac": 2},
    )
    message = schema.encode_entry(entry)
    assert message.match[0].lpm.value == bytes([10, 11, 0, 0])
    assert message.match[0].lpm.prefix_len == 16


@pytest.mark.parametrize(
    "entry",
    [
        TableEntry.make(
            pc.T_SESSION,
            {
                "ipv4_src": Exact(1),
                "ipv4_dst": Exact(2),
                "ip_proto": Exact(6),
                "l4_sport": Exact(3),
                "l4_dport": Exact(0),
            },
            pc.A_SESSION_FORWARD,
            {
                "class_id": 1,
                "spm_port": 3,
                "spm_mac": 0xA,
                "nat_kind": 1,
                "nat_addr": 9,
                "nat_port": 80,
                "nat_before_spm": 0,
            },
        ),
        TableEntry.make(
            pc.T_SA_SEGMENT,
            {"version": Exact(1), "ipv4_src": Lpm(0x0A000000, 8)},
            pc.A_SET_SA_INDEX,
            segment_params(acl_index=4, ids_index=0),
        ),
        TableEntry.make(
            pc.T_SP_SEGMENT,
            {"version": Exact(0), "l4_sport": Range(1024, 2047)},
            pc.A_SET_SP_INDEX,
            segment_params(acl_index=1, ids_index=2),
            priority=7,
        ),
        TableEntry.make(
            pc.T_PROTO_SEGMENT,
            {"version": Exact(0), "ip_proto": Ternary(0, 0)},
            pc.A_SET_PROTO_INDEX,
            segment_params(acl_index=1, ids_index=1),
            priority=1,
        ),
    ],
    ids=["exact", "lpm", "range", "ternary-wildcard"],
)
def test_entry_survives_encode_and_decode(schema: P4Schema, entry: TableEntry) -> None:
    assert schema.decode_entry(schema.encode_entry(entry)) == entry


def test_wildcards_are_omitted_as_p4runtime_requires(schema: P4Schema) -> None:
    entry = TableEntry.make(
        pc.T_SP_SEGMENT,
        {"version": Exact(0), "l4_sport": Range(0, 0xFFFF)},
        pc.A_SET_SP_INDEX,
        segment_params(acl_index=1, ids_index=1),
        priority=1,
    )
    assert [m.field_id for m in schema.encode_entry(entry).match] == [1]


def test_ternary_table_entries_need_a_priority(schema: P4Schema) -> None:
    entry = TableEntry.make(
        pc.T_PROTO_SEGMENT,
        {"version": Exact(0), "ip_proto": Ternary(6, 0xFF)},
        pc.A_SET_PROTO_INDEX,
        segment_params(acl_index=1, ids_index=1),
    )
    with pytest.raises(P4InfoError, match="need a priority"):
        schema.encode_entry(entry)


def test_packet_metadata_round_trip(schema: P4Schema) -> None:
    values = {
        "ingress_port": 3,
        "_pad0": 0,
        "reason": 1,
        "ids_class": 2,
        "acl_rule": 77,
        "spm_port": 4,
        "_pad": 0,
    }
    encoded = schema.encode_packet_metadata("packet_in", values)
    assert schema.decode_packet_metadata("packet_in", encoded) == values


def test_generated_constants_match_the_committed_p4info(monkeypatch: pytest.MonkeyPatch) -> None:
    root = repo_root()
    monkeypatch.chdir(root)  # the generator records the relative paths it was given
    profiles = [
        Path("p4src/build/opengate.p4info.txtpb"),
        Path("p4src/build/naive_acl/opengate.p4info.txtpb"),
    ]
    fresh = render(profiles, Path("p4src/include/defines.p4"))
    current = (root / "opengate" / "p4constants.py").read_text()
    assert fresh == current, "opengate/p4constants.py is stale: run `make constants`"
