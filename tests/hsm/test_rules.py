"""The ACL rule model: ClassBench files, policy-style rules, and their errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.hsm.rules import AclAction, acl_rule_from_policy, parse_classbench
from opengate.errors import ConfigError
from opengate.fields import (
    ANY_ADDR,
    ANY_PORT,
    ANY_PROTO,
    Packet,
    PortRange,
    Prefix,
    ProtoMatch,
    intervals_to_prefixes,
    parse_prefix,
    prefixes_to_intervals,
)

from .conftest import CLASSBENCH_SETS

SIZES = {
    "acl1_1k": 942, "fw1_1k": 857, "ipc1_1k": 974,
    "acl1_10k": 9774, "fw1_10k": 9379, "ipc1_10k": 9518,
}  # fmt: skip


@pytest.mark.parametrize("name", CLASSBENCH_SETS)
def test_shared_classbench_sets_parse_completely(classbench_dir: Path, name: str) -> None:
    rules = parse_classbench(classbench_dir / name)
    assert len(rules) == SIZES[name]
    assert rules[-1].src == ANY_ADDR and rules[-1].proto == ANY_PROTO  # the catch-all
    assert rules[0].origin is not None and rules[0].origin.line == 1


def test_classbench_line_becomes_one_rule(tmp_path: Path) -> None:
    path = tmp_path / "set"
    path.write_text(
        "@176.19.181.33/28\t90.145.23.162/32\t0 : 65535\t1550 : 1551\t0x06/0xFF\t0x0000/0x0200\t\n"
    )
    (rule,) = parse_classbench(path)
    assert rule.src == (Prefix.masked(parse_prefix("176.19.181.32").value, 28),)
    assert rule.dport == (PortRange(1550, 1551),) and rule.proto == (ProtoMatch(6),)
    assert rule.matches(Packet(parse_prefix("176.19.181.47").value, rule.dst[0].value, 9, 1551, 6))


ANY_LINE = ("0.0.0.0/0", "0.0.0.0/0", "0 : 65535", "0 : 65535", "0x00/0x00", "0x0000/0x0000")


def _line(**fields: str) -> str:
    names = ("src", "dst", "sport", "dport", "proto", "flags")
    return "@" + "\t".join(fields.get(n, v) for n, v in zip(names, ANY_LINE, strict=True))


@pytest.mark.parametrize(
    ("line", "field", "message"),
    [
        (_line(src="1.2.3/8"), "src", "malformed IPv4 prefix"),
        (_line(src="1.2.3.4/40"), "src", "length must be 0..32"),
        (_line(sport="80 : 79"), "sport", "reversed"),
        (_line(dport="0 : 70000"), "dport", "above 65535"),
        (_line(dport="0-80"), "dport", "malformed port range"),
        (_line(proto="tcp"), "proto", "malformed protocol"),
        (_line()[1:], None, "starts with '@'"),
        ("@0.0.0.0/0\t0.0.0.0/0\t0 : 65535", None, "expected 6 tab-separated fields"),
    ],
)
def test_classbench_errors_name_file_line_and_field(
    tmp_path: Path, line: str, field: str | None, message: str
) -> None:
    path = tmp_path / "bad_set"
    good = "@0.0.0.0/0\t0.0.0.0/0\t0 : 65535\t0 : 65535\t0x00/0x00\t0x0000/0x0000"
    path.write_text(f"{good}\n{line}\n")
    with pytest.raises(ConfigError) as info:
        parse_classbench(path)
    assert (info.value.path, info.value.line, info.value.field) == (str(path), 2, field)
    assert message in str(info.value)
    assert str(info.value).startswith(f"{path}:2: ")


def test_policy_rule_with_lists_of_networks_and_ports() -> None:
    rule = acl_rule_from_policy(
        src=["10.0.0.0/8", Prefix.masked(0xC0A80000, 16)],
        dst=None,
        dport=[(80, 80), PortRange(8000, 8080)],
        protocols=["tcp", "udp"],
        action="deny",
        path="policy.yaml",
        line=12,
    )
    assert rule.dst == ANY_ADDR and rule.sport == ANY_PORT and rule.action is AclAction.DENY
    assert rule.proto == (ProtoMatch(6), ProtoMatch(17))
    assert rule.matches(Packet(0xC0A80101, 1, 5, 8001, 17))
    assert not rule.matches(Packet(0xC0A80101, 1, 5, 8081, 17))
    assert rule.origin is not None and str(rule.origin) == "policy.yaml:12"
    assert acl_rule_from_policy(src=None, dst=None, protocols=["any"]).proto == ANY_PROTO
    assert acl_rule_from_policy(src=None, dst=None, action="to-cpu").action is AclAction.TO_CPU


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({"src": ["10.0.0.0/99"]}, "src", "malformed IPv4 prefix"),
        ({"dport": [(90, 80)]}, "dport", "reversed"),
        ({"sport": [(-1, 80)]}, "sport", "negative"),
        ({"protocols": ["tcpp"]}, "protocol", "unknown protocol"),
        ({"protocols": [300]}, "protocol", "not 0..255"),
        ({"action": "allow"}, "action", "unknown action"),
    ],
)
def test_policy_rule_errors_name_the_field(
    kwargs: dict[str, object], field: str, message: str
) -> None:
    args: dict[str, object] = {"src": None, "dst": None, "path": "p.yaml", "line": 3}
    args.update(kwargs)
    with pytest.raises(ConfigError) as info:
        acl_rule_from_policy(**args)  # type: ignore[arg-type]
    assert (info.value.path, info.value.line, info.value.field) == ("p.yaml", 3, field)
    assert message in str(info.value)


def test_interval_sets_become_minimal_prefixes() -> None:
    # 10.0.0.1 .. 10.0.0.6 -> /32, /31, /31, /32
    got = intervals_to_prefixes(((0x0A000001, 0x0A000006),))
    assert [str(p) for p in got] == ["10.0.0.1/32", "10.0.0.2/31", "10.0.0.4/31", "10.0.0.6/32"]
    assert intervals_to_prefixes(((0, 0xFFFFFFFF),)) == (Prefix(0, 0),)
    assert prefixes_to_intervals(got) == ((0x0A000001, 0x0A000006),)
