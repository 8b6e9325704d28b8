"""The dual-stack policy: IPv6 networks, port addresses, neighbours, routes and ACL rules load
into their own fields (the IPv4 ones as they were), and every IPv6 mistake is reported with the
file, the line, the field and the exact message."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from controller.hsm.rules import AclAction
from controller.policy import Policy, link_local, load_policy
from opengate import p4constants as pc
from opengate.errors import ConfigError
from opengate.fields import Prefix, ProtoMatch
from opengate.target import repo_root

EXAMPLE = repo_root() / "controller" / "examples" / "gateway.yaml"

DUAL = """\
version: 1
networks:
  inside: [10.0.1.0/24, 2001:db8:1::/64]
  outside: [198.51.100.0/24, 2001:db8:2::/64]
  v6only: 2001:db8:5::/48
ports:
  - {port: 1, role: inside, mac: "02:00:00:00:00:01", addresses: [10.0.1.1/24, 2001:db8:1::1/64]}
  - port: 2
    role: outside
    mac: "02:00:00:00:00:02"
    addresses: [198.51.100.1/24, 2001:db8:2::1/64]
neighbours:
  - {name: h1, address: 10.0.1.10, mac: "00:00:00:00:01:10"}
  - {name: h1, address: "2001:db8:1::10", mac: "00:00:00:00:01:10"}
  - {name: out1, address: "2001:db8:2::20", mac: "00:00:00:00:02:20"}
routes:
  - {prefix: "::/0", via: "2001:db8:2::20"}
acl:
  default: deny
  rules:
    - {name: lan-out, src: inside, action: permit}
    - {name: v4-web, dst: 198.51.100.7, proto: tcp, dport: 80, action: permit}
    - name: v6-ping-in
      src: outside
      dst: "2001:db8:1::10"
      proto: icmpv6
      icmp_type: 128
      action: permit
    - {name: pings, proto: [icmp, icmpv6], action: deny}
    - {name: to-v6only, dst: v6only, proto: udp, action: to_cpu}
"""


def _load(tmp_path: Path, text: str = DUAL) -> Policy:
    path = tmp_path / "dual.yaml"
    path.write_text(text)
    return load_policy(path)


def _error(tmp_path: Path, old: str, new: str) -> ConfigError:
    assert old in DUAL, old
    text = DUAL.replace(old, new, 1)
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text)
    error = caught.value
    assert error.path == str(tmp_path / "dual.yaml")
    last = new.rstrip("\n").splitlines()[-1]
    line = next(n for n, row in enumerate(text.splitlines(), 1) if last in row)
    assert error.line == line, str(error)
    return error


def test_each_family_goes_to_its_own_fields(tmp_path: Path) -> None:
    policy = _load(tmp_path)
    assert [str(n) for n in policy.networks["inside"]] == ["10.0.1.0/24"]
    assert [str(n) for n in policy.networks6["inside"]] == ["2001:db8:1::/64"]
    assert policy.networks["v6only"] == ()
    port1 = policy.port(1)
    assert port1 is not None
    assert [str(a) for a in port1.addresses] == ["10.0.1.1/24"]
    assert [str(a) for a in port1.addresses6] == ["2001:db8:1::1/64"]
    assert [(n.name, str(n.address), n.port) for n in policy.neighbours] == [("h1", "10.0.1.10", 1)]
    assert [(n.name, str(n.address), n.port, n.mac) for n in policy.neighbours6] == [
        ("h1", "2001:db8:1::10", 1, 0x110),
        ("out1", "2001:db8:2::20", 2, 0x220),
    ]
    assert [(str(r.prefix), r.port, r.next_hop_mac) for r in policy.routes6] == [
        ("2001:db8:1::10/128", 1, 0x110),
        ("2001:db8:2::20/128", 2, 0x220),
        ("::/0", 2, 0x220),
    ]
    route = policy.route6_for(ipaddress.IPv6Address("2001:db8:1::10"))
    assert route is not None and route.prefix.prefixlen == 128
    assert policy.gateway_addresses6() == {
        ipaddress.IPv6Address("2001:db8:1::1"): 1,
        ipaddress.IPv6Address("fe80::ff:fe00:1"): 1,
        ipaddress.IPv6Address("2001:db8:2::1"): 2,
        ipaddress.IPv6Address("fe80::ff:fe00:2"): 2,
    }


def test_rules_apply_to_the_families_their_fields_name(tmp_path: Path) -> None:
    policy = _load(tmp_path)
    rules = {spec.name: spec for spec in policy.acl_rules}
    # lan-out names a network: both families, each with its own prefixes
    lan = rules["lan-out"]
    assert lan.rule.src == (Prefix(int(ipaddress.IPv4Address("10.0.1.0")), 24),)
    assert lan.rule6 is not None and [str(p) for p in lan.rule6.src] == ["2001:db8:1::/64"]
    assert lan.rule6.rule_id == 0
    # a literal IPv4 address: IPv4 only
    assert rules["v4-web"].rule6 is None and rules["v4-web"].rule.dst != ()
    # a literal IPv6 address: IPv6 only; the IPv4 rule keeps its place and matches nothing
    ping = rules["v6-ping-in"]
    assert ping.rule.src == () and ping.rule6 is not None
    assert ping.rule6.icmp_types == (128,) and ping.rule6.rule_id == 2
    assert [str(p) for p in ping.rule6.src] == ["2001:db8:2::/64"]
    # icmp is IPv4's, icmpv6 IPv6's: each side gets its own
    pings = rules["pings"]
    assert pings.rule.proto == (ProtoMatch(pc.IP_PROTO_ICMP),)
    assert pings.rule6 is not None and pings.rule6.proto == (ProtoMatch(pc.IP_PROTO_ICMPV6),)
    # a network with no IPv4 prefix: the IPv4 side matches nothing
    v6only = rules["to-v6only"]
    assert v6only.rule.dst == () and v6only.rule6 is not None
    assert v6only.rule6.action is AclAction.TO_CPU
    # the IPv6 rules in order, then RFC 4890's errors (the id after the last rule)
    assert [r.rule_id for r in policy.acl6] == [0, 2, 3, 4, 5]
    assert policy.acl6[-1].icmp_types == (1, 2, 3, 4)
    assert policy.rule_name(5) == "icmpv6-errors (RFC 4890)"
    assert policy.rule_name(2) == "v6-ping-in"


def test_icmpv6_errors_policy_leaves_the_rules_alone(tmp_path: Path) -> None:
    policy = _load(
        tmp_path, DUAL.replace("  default: deny\n", "  default: deny\n  icmpv6_errors: policy\n")
    )
    assert [r.rule_id for r in policy.acl6] == [0, 2, 3, 4]
    assert policy.rule_name(5) is None


def test_ipv6_names_of_icmp_and_timeouts(tmp_path: Path) -> None:
    text = DUAL.replace("proto: [icmp, icmpv6]", "proto: ipv6-icmp")
    policy = _load(tmp_path, text)
    pings = next(s for s in policy.acl_rules if s.name == "pings")
    assert pings.rule.src == () and pings.rule6 is not None
    assert policy.sessions.timeout_for(pc.IP_PROTO_ICMPV6) == policy.sessions.timeout_for(
        pc.IP_PROTO_ICMP
    )


def test_the_example_is_dual_stack_and_keeps_its_ipv4() -> None:
    policy = load_policy(EXAMPLE)
    assert {str(n.address): (n.name, n.port, n.mac) for n in policy.neighbours6} == {
        "2001:db8:1::10": ("h1", 1, 0x110),
        "2001:db8:1::11": ("h2", 1, 0x111),
        "2001:db8:1::12": ("h3", 1, 0x112),
        "2001:db8:2::20": ("out1", 2, 0x220),
    }
    assert {str(n.address): (n.port, n.mac) for n in policy.neighbours} == {
        "10.0.1.10": (1, 0x110),
        "10.0.1.11": (1, 0x111),
        "198.51.100.20": (2, 0x220),
    }
    gateway = {str(a): p for a, p in policy.gateway_addresses6().items()}
    assert gateway["2001:db8:1::1"] == 1 and gateway["2001:db8:2::1"] == 2
    lan_out = policy.acl_rules[0]
    assert lan_out.name == "lan-out" and lan_out.rule6 is not None
    assert [str(p) for p in lan_out.rule6.src] == ["2001:db8:1::/64"]
    assert all(s.rule6 is None for s in policy.acl_rules[1:])
    assert pc.CPU_REASON_SESSION_V6 in policy.cpu_meters


def test_link_local_is_the_modified_eui64() -> None:
    """RFC 4291 appendix A: ff:fe in the middle, the universal/local bit inverted (the example
    MAC 34:56:78:9a:bc:de; a locally administered one, whose bit is then cleared)."""
    assert link_local(0x3456789ABCDE) == ipaddress.IPv6Address("fe80::3656:78ff:fe9a:bcde")
    assert link_local(0x020000000001) == ipaddress.IPv6Address("fe80::ff:fe00:1")
    assert link_local(0x000C290C47D5) == ipaddress.IPv6Address("fe80::20c:29ff:fe0c:47d5")


@pytest.mark.parametrize(
    ("old", "new", "field", "message"),
    [
        (
            "v6only: 2001:db8:5::/48",
            "v6only: 2001:db8:5::/129",
            "networks.v6only",
            "not an IPv4 or IPv6 prefix: '2001:db8:5::/129'",
        ),
        (
            "addresses: [10.0.1.1/24, 2001:db8:1::1/64]",
            "addresses: [10.0.1.1/24, 2001:db8:1::g/64]",
            "ports[0].addresses",
            "not an IPv4 or IPv6 address/prefix: '2001:db8:1::g/64'",
        ),
        (
            "addresses: [10.0.1.1/24, 2001:db8:1::1/64]",
            "addresses: [10.0.1.1/24, fe80::1/64]",
            "ports[0].addresses",
            "fe80::1/64 is link-local (each port's comes from its MAC)",
        ),
        (
            "addresses: [10.0.1.1/24, 2001:db8:1::1/64]",
            "addresses: [10.0.1.1/24, ff02::1/64]",
            "ports[0].addresses",
            "ff02::1/64 is a multicast address",
        ),
        (
            'address: "2001:db8:1::10"',
            'address: "2001:db8:1::10::1"',
            "neighbours[1].address",
            "not an IPv4 or IPv6 address: '2001:db8:1::10::1'",
        ),
        (
            'address: "2001:db8:1::10"',
            'address: "2001:db8:9::10"',
            "neighbours[1].address",
            "2001:db8:9::10 is in no port's subnet; give its port with 'port:'",
        ),
        (
            'address: "2001:db8:1::10"',
            'address: "::a00:10a"',
            "neighbours[1].address",
            "::a00:10a is an IPv4-compatible address (::/96, deprecated by RFC 4291)",
        ),
        (
            '{prefix: "::/0", via: "2001:db8:2::20"}',
            '{prefix: "::/0", via: 10.0.1.10}',
            "routes[0].via",
            "next hop 10.0.1.10 is an IPv4 neighbour; a route to an IPv6 prefix goes via an "
            "IPv6 one",
        ),
        (
            '{prefix: "::/0", via: "2001:db8:2::20"}',
            '{prefix: "2001:db8:7::1/48", via: "2001:db8:2::20"}',
            "routes[0].prefix",
            "not an IPv6 prefix (host bits must be zero): 2001:db8:7::1/48 has host bits set",
        ),
        (
            '{prefix: "::/0", via: "2001:db8:2::20"}',
            '{prefix: "2001:db8:1::10/128", via: "2001:db8:2::20"}',
            "routes[0].prefix",
            "2001:db8:1::10/128 has a route already",
        ),
        (
            '{prefix: "::/0", via: "2001:db8:2::20"}',
            '{prefix: "::/0", via: "2001:db8:2::21"}',
            "routes[0].via",
            "next hop 2001:db8:2::21 is not a neighbour (list it under 'neighbours')",
        ),
        (
            "{name: lan-out, src: inside, action: permit}",
            '{name: lan-out, src: [10.0.1.0/24, "2001:db8:1::/64"], action: permit}',
            "acl.rules[0].src",
            "mixes IPv4 (10.0.1.0/24) and IPv6 (2001:db8:1::/64) addresses: a rule with literal "
            "addresses is of one family; write one rule for each",
        ),
        (
            "{name: lan-out, src: inside, action: permit}",
            '{name: lan-out, src: 10.0.1.0/24, dst: "2001:db8:2::/64", action: permit}',
            "acl.rules[0].dst",
            "dst 2001:db8:2::/64 is IPv6 and src 10.0.1.0/24 is not: a rule with literal "
            "addresses is of one family; write one rule for each",
        ),
        (
            "{name: lan-out, src: inside, action: permit}",
            '{name: lan-out, src: "2001:db8:1::/64", proto: icmp, action: permit}',
            "acl.rules[0].proto",
            "icmp is IPv4's (ICMPv6 is icmpv6), and the rule's addresses are IPv6 "
            "(2001:db8:1::/64)",
        ),
        (
            "{name: lan-out, src: inside, action: permit}",
            "{name: lan-out, src: 10.0.1.0/24, proto: icmpv6, action: permit}",
            "acl.rules[0].proto",
            "icmpv6 is IPv6's, and the rule's addresses are IPv4 (10.0.1.0/24)",
        ),
        (
            "{name: lan-out, src: inside, action: permit}",
            "{name: lan-out, src: inside, proto: tcp, icmp_type: 128, action: permit}",
            "acl.rules[0].icmp_type",
            "icmp_type needs proto icmpv6 (alone)",
        ),
        (
            "{name: lan-out, src: inside, action: permit}",
            "{name: lan-out, proto: icmpv6, icmp_type: 256, action: permit}",
            "acl.rules[0].icmp_type",
            "ICMPv6 type 256 is not 0..255",
        ),
        (
            "{name: lan-out, src: inside, action: permit}",
            "{name: lan-out, proto: icmpv6, dport: 80, action: permit}",
            "acl.rules[0].dport",
            "ports need proto tcp and/or udp",
        ),
        (
            "{name: lan-out, src: inside, action: permit}",
            "{name: lan-out, proto: icmp6, action: permit}",
            "acl.rules[0].proto",
            "unknown protocol 'icmp6' (known: any, ah, esp, gre, icmp, icmpv6, ipv6-icmp, "
            "sctp, tcp, udp, or 0..255)",
        ),
        (
            "  default: deny\n",
            "  default: deny\n  icmpv6_errors: drop\n",
            "acl.icmpv6_errors",
            "'drop' is not one of: permit, policy",
        ),
    ],
)
def test_ipv6_mistakes_name_file_line_and_field(
    tmp_path: Path, old: str, new: str, field: str, message: str
) -> None:
    error = _error(tmp_path, old, new)
    assert (error.field, error.message) == (field, message)


def test_ipv4_only_fields_refuse_ipv6(tmp_path: Path) -> None:
    text = DUAL + "nat:\n  masquerade:\n    - {port: 2, sources: [v6only]}\n"
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text)
    assert caught.value.field == "nat.masquerade[0].sources"
    assert caught.value.message == "network 'v6only' has no IPv4 prefix (this field is IPv4's)"
    text = DUAL + 'nat:\n  masquerade:\n    - {port: 2, sources: ["2001:db8:1::/64"]}\n'
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text)
    assert caught.value.message == "'2001:db8:1::/64' is an IPv6 prefix; this field takes IPv4 only"
