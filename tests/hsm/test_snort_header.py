"""IDS header semantics: variables, lists, negation, port ranges, direction, services, classes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from controller.hsm.snort_header import ClassMap, ids_rules_from_raw, load_class_map, load_ids_file
from opengate.errors import ConfigError
from opengate.fields import ANY_ADDR, ANY_PORT, Packet, PortRange, ProtoMatch, parse_prefix
from opengate.snort.header import SnortVariables, addresses, ports
from opengate.snort.rules import parse_rule, parse_rules_text

VARS = (
    SnortVariables()
    .with_values({"HOME_NET": "[10.0.0.0/8,192.168.0.0/16]", "EXTERNAL_NET": "!$HOME_NET"})
    .values
)


def ip(text: str) -> int:
    return parse_prefix(text).value


def header(text: str, variables: SnortVariables | None = None):  # type: ignore[no-untyped-def]
    return ids_rules_from_raw([parse_rule(text, path="t.rules", line=7)], variables)


def test_snort_default_variables_make_home_and_external_any() -> None:
    assert addresses("$HOME_NET", SnortVariables().values)[0] == ANY_ADDR
    assert addresses("$HTTP_SERVERS", SnortVariables().values)[0] == ANY_ADDR
    http = ports("$HTTP_PORTS", SnortVariables().values)
    assert (80, 81) in http and (8080, 8080) in http and (55555, 55555) in http
    assert ports("$ORACLE_PORTS", SnortVariables().values) == ((1024, 65535),)


def test_negated_variable_is_the_complement() -> None:
    external, _ = addresses("$EXTERNAL_NET", VARS)
    assert not any(p.contains(ip("10.1.2.3")) for p in external)
    assert not any(p.contains(ip("192.168.7.7")) for p in external)
    assert any(p.contains(ip("8.8.8.8")) for p in external)
    assert any(p.contains(ip("192.169.0.0")) for p in external)


def test_list_is_positives_minus_negatives() -> None:
    got, _ = addresses("[10.0.0.0/8, !10.1.0.0/16, !10.2.3.4]", {})
    contains: Callable[[str], bool] = lambda a: any(p.contains(ip(a)) for p in got)  # noqa: E731
    assert contains("10.0.0.1") and contains("10.2.3.5")
    assert not contains("10.1.9.9") and not contains("10.2.3.4") and not contains("11.0.0.0")
    assert ports("[1024:, !8080]", {}) == ((1024, 8079), (8081, 65535))
    assert ports("![80,443]", {}) == ((0, 79), (81, 442), (444, 65535))


def test_open_ended_port_ranges() -> None:
    assert ports("1024:", {}) == ((1024, 65535),)
    assert ports(":1023", {}) == ((0, 1023),)
    assert ports("[$HTTP_PORTS,443]", {"HTTP_PORTS": "80 8080"}) == (
        (80, 80), (443, 443), (8080, 8080),
    )  # fmt: skip


def test_space_separated_variable_values_are_lists() -> None:
    assert ports("$P", {"P": "80 !81 1000:1002"}) == ((80, 80), (1000, 1002))


def test_ipv6_items_are_dropped_and_an_ipv6_only_rule_is_reported() -> None:
    got, saw_v6 = addresses("[10.0.0.0/8, 2001:db8::/32]", {})
    assert saw_v6 and got == (parse_prefix("10.0.0.0/8"),)
    result = header("alert tcp 2001:db8::1 any -> any any (sid:5;)")
    assert result.rules == ()
    assert [(n.kind, n.line, n.sid) for n in result.notes] == [("ipv6-only", 7, 5)]


def test_a_header_that_can_never_match_is_reported() -> None:
    result = header("alert tcp !any any -> any any (sid:6;)")
    assert result.rules == () and result.notes[0].kind == "never-matches"


def test_bidirectional_rule_matches_both_ways() -> None:
    (rule,) = header("alert tcp 10.0.0.0/8 1234 <> 8.8.8.8 53 (sid:1;)").rules
    forward = Packet(ip("10.1.1.1"), ip("8.8.8.8"), 1234, 53, 6)
    assert rule.bidirectional and rule.matches(forward) and rule.matches(forward.reversed())
    assert not rule.matches(Packet(ip("10.1.1.1"), ip("8.8.8.8"), 53, 1234, 6))


def test_icmp_and_ip_rules_ignore_ports() -> None:
    result = header("alert icmp any 5 -> any any (sid:1;)")
    assert result.rules[0].sport == ANY_PORT and result.notes[0].kind == "ports-ignored"
    assert result.rules[0].proto == (ProtoMatch(1),)


def test_service_rules_match_any_header_of_their_transport() -> None:
    raw = parse_rules_text(
        "alert http (sid:1;)\nalert dns (sid:2;)\nalert file (sid:3;)\nalert foo (sid:4;)\n"
        "alert (gid:116; sid:5;)\n"
    ).rules
    rules = ids_rules_from_raw(raw).rules
    assert [r.proto for r in rules] == [
        (ProtoMatch(6),),
        (ProtoMatch(6), ProtoMatch(17)),
        (ProtoMatch(6), ProtoMatch(17)),
        (ProtoMatch(0, 0),),
        (ProtoMatch(0, 0),),
    ]
    assert all(r.src == ANY_ADDR and r.sport == ANY_PORT for r in rules)


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("alert tcp $NOPE any -> any any (sid:1;)", "source", "unknown variable $NOPE"),
        ("alert tcp any 90:80 -> any any (sid:1;)", "source ports", "port range 90:80 is reversed"),
        ("alert tcp 10.0.0.300 any -> any any (sid:1;)", "source", "malformed IPv4 prefix"),
        ("alert tcp 10.0.0.0/33 any -> any any (sid:1;)", "source", "malformed IPv4 prefix"),
        ("alert tcp any any -> any 70000 (sid:1;)", "destination ports", "above 65535"),
        ("alert tcp any any -> [1.2.3.4 any (sid:1;)", "header", "unbalanced"),
    ],
)
def test_bad_headers_are_errors_naming_file_line_and_field(
    text: str, field: str, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        header(text)
    assert (info.value.path, info.value.line, info.value.field) == ("t.rules", 7, field)
    assert message in str(info.value)


def test_self_referencing_variable_is_an_error() -> None:
    with pytest.raises(ConfigError, match="refers to itself"):
        addresses("$A", {"A": "[$B]", "B": "$A"})


def test_class_map_by_sid_then_service_then_classtype() -> None:
    raw = parse_rules_text(
        "alert tcp any any -> any 80 (service:http; classtype:trojan-activity; sid:10;)\n"
        "alert tcp any any -> any 80 (service:http; classtype:trojan-activity; sid:11;)\n"
        "alert tcp any any -> any 25 (classtype:trojan-activity; sid:12;)\n"
        "alert tcp any any -> any 25 (sid:13;)\n"
    ).rules
    classes = ClassMap(
        default=1, by_sid={10: 9}, by_service={"http": 2}, by_classtype={"trojan-activity": 3}
    )
    assert [r.class_id for r in ids_rules_from_raw(raw, class_map=classes).rules] == [9, 2, 3, 1]


def test_class_precedence_orders_rules_but_keeps_their_ids() -> None:
    raw = parse_rules_text(
        "alert tcp any any -> any any (sid:1;)\n"
        "alert tcp any any -> any any (service:ssl; sid:2;)\n"
    ).rules
    classes = ClassMap(by_service={"ssl": 7}, precedence=(7,))
    rules = ids_rules_from_raw(raw, class_map=classes).rules
    assert [(r.rule_id, r.class_id) for r in rules] == [(1, 7), (0, 1)]


def test_class_map_file_rejects_unknown_options(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("default: 2\nby_service: {http: 3}\nprecedence: [3]\n")
    assert load_class_map(good) == ClassMap(default=2, by_service={"http": 3}, precedence=(3,))
    bad = tmp_path / "bad.yaml"
    bad.write_text("default: 2\nby_port: {80: 3}\n")
    with pytest.raises(ConfigError, match="unsupported option 'by_port'") as info:
        load_class_map(bad)
    assert info.value.path == str(bad)
    with pytest.raises(ConfigError, match=r"not 0\.\.255"):
        ClassMap(default=300)


def test_variables_file_accepts_lua_and_snort2_styles(tmp_path: Path) -> None:
    path = tmp_path / "vars.conf"
    path.write_text("-- lua comment\nHOME_NET = '10.0.0.0/8'\nportvar WEB [80,8080]\n")
    values = SnortVariables.load(path).values
    assert values["HOME_NET"] == "10.0.0.0/8" and values["WEB"] == "[80,8080]"
    assert ports("$WEB", values) == ((80, 80), (8080, 8080))
    path.write_text("HOME_NET\n")
    with pytest.raises(ConfigError) as info:
        SnortVariables.load(path)
    assert (info.value.path, info.value.line) == (str(path), 1)


def test_community_rules_resolve_completely(community_rules: Path) -> None:
    headers, errors = load_ids_file(community_rules, include_commented=True)
    assert (headers.total, len(headers.rules), errors) == (3488, 3488, ())
    assert headers.skipped == ()
    with_home, _ = load_ids_file(
        community_rules,
        variables=SnortVariables().with_values(
            {"HOME_NET": "10.0.0.0/8", "EXTERNAL_NET": "!$HOME_NET"}
        ),
    )
    assert len(with_home.rules) == 829
    assert sum(r.bidirectional for r in with_home.rules) > 0


def test_lenient_loading_reports_bad_rules_with_their_lines(tmp_path: Path) -> None:
    path = tmp_path / "mixed.rules"
    path.write_text(
        "alert tcp any any -> any 80 (sid:1;)\nalert tcp $NOPE any -> any any (sid:2;)\n"
        "alert tcp any 5:4 -> any any (sid:3;)\nalert udp any any -> any 53 (sid:4;)\n"
    )
    headers, errors = load_ids_file(path, strict=False)
    assert [r.sid for r in headers.rules] == [1, 4]
    assert [(e.line, e.field) for e in errors] == [(2, "source"), (3, "source ports")]
    with pytest.raises(ConfigError, match="unknown variable"):
        load_ids_file(path)


def test_port_ranges_become_port_range_values() -> None:
    (rule,) = header("alert tcp any [1:3,5] -> any any (sid:1;)").rules
    assert rule.sport == (PortRange(1, 3), PortRange(5, 5))
