"""IPv6 in rule headers: addresses and prefixes, lists that mix the families, negation,
HOME_NET of both families from the configuration's variables; the address matcher against a
brute-force reference (hypothesis); rules that fire on IPv6 flows in the worker."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opengate.errors import ConfigError
from opengate.snort.header import SnortVariables, address_intervals
from opengate.snort.rules import parse_rule
from spm.config import load_config
from spm.ips.engine import BuiltinEngine, RuleSet
from spm.ips.header import address_set, compile_header
from spm.ips.loader import load_ruleset
from spm.verdict import Alert, Verdict
from spm.worker import Worker
from tests.spm.spm_packets import TcpConversation, udp

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _in(expr: str, addr: str, variables: dict[str, str] | None = None) -> bool:
    values = SnortVariables().with_values(variables or {}).values
    return ipaddress.ip_address(addr).packed in address_set(expr, values)


def test_ipv6_addresses_and_prefixes() -> None:
    assert _in("2001:db8::1", "2001:db8::1") and not _in("2001:db8::1", "2001:db8::2")
    assert _in("2001:db8::/32", "2001:db8:ffff::1") and not _in("2001:db8::/32", "2001:db9::1")
    assert _in("2001:db8::5/126", "2001:db8::7")  # host bits are masked off, as for IPv4
    assert not _in("2001:db8::5/126", "2001:db8::8")
    assert _in("::/0", "::1") and not _in("::/0", "10.0.0.1")  # all IPv6, no IPv4
    assert _in("0.0.0.0/0", "10.0.0.1") and not _in("0.0.0.0/0", "::1")
    assert _in("any", "::1") and _in("any", "10.0.0.1")
    assert not _in("10.0.0.0/8", "::a00:1")  # an IPv4 prefix holds no IPv6 address


def test_lists_mix_the_families_and_negation_excludes_only_what_it_names() -> None:
    mixed = "[10.0.0.0/8,2001:db8::/32]"
    assert _in(mixed, "10.1.2.3") and _in(mixed, "2001:db8::9")
    assert not _in(mixed, "192.0.2.1") and not _in(mixed, "2001:db9::1")
    assert _in("!10.0.0.0/8", "2001:db8::1") and not _in("!10.0.0.0/8", "10.0.0.1")
    assert _in("[!2001:db8::/32]", "10.0.0.1") and not _in("[!2001:db8::/32]", "2001:db8::1")
    carved = "[2001:db8::/32,!2001:db8:bad::/48,10.0.0.0/8]"
    assert _in(carved, "2001:db8:1::1") and not _in(carved, "2001:db8:bad::1")
    assert _in(carved, "10.0.0.1")
    assert (
        not _in("!any", "::1") and not _in("[any,!::/0]", "::1") and _in("[any,!::/0]", "1.1.1.1")
    )


def test_home_net_of_both_families_and_external_net_its_complement() -> None:
    home = {"HOME_NET": "[10.0.0.0/8, 2001:db8:1::/48]", "EXTERNAL_NET": "!$HOME_NET"}
    for addr, inside in (("10.9.9.9", True), ("2001:db8:1::10", True), ("2001:db8:2::80", False)):
        assert _in("$HOME_NET", addr, home) is inside
        assert _in("$EXTERNAL_NET", addr, home) is not inside
    # Snort 3's space-separated variable values too
    assert _in("$HOME_NET", "2001:db8:1::1", {"HOME_NET": "10.0.0.0/8 2001:db8:1::/48"})


def test_a_malformed_ipv6_item_is_an_error_naming_the_field() -> None:
    with pytest.raises(ConfigError, match=r"malformed IPv6 prefix '2001:zz::/32'"):
        address_intervals("[10.0.0.0/8,2001:zz::/32]", {}, 6, field="source")
    with pytest.raises(ConfigError, match=r"length must be 0\.\.128"):
        address_intervals("2001:db8::/129", {}, 6)
    rules = RuleSet(
        [parse_rule("alert tcp 2001:db8::/999 any -> any 80 (sid:5;)", path="t.rules", line=3)], {}
    )
    [unsupported] = rules.report.unsupported
    assert (unsupported.sid, unsupported.line, unsupported.option) == (5, 3, "source")


def test_an_expression_of_one_family_leaves_the_other_empty_but_any_is_both() -> None:
    assert address_intervals("10.0.0.0/8", {}, 6) == ()
    assert address_intervals("2001:db8::/32", {}, 4) == ()
    assert address_intervals("any", {}, 6) == ((0, (1 << 128) - 1),)
    header = compile_header("tcp", "any", "any", "->", "any", "any", {})
    assert header.is_any
    header = compile_header("tcp", "::/0", "any", "->", "any", "any", {})
    assert not header.is_any


# --- the matcher against a brute-force reference --------------------------------------------------

_NETS = [
    "10.0.0.0/8",
    "10.1.0.0/16",
    "10.1.2.3",
    "192.0.2.0/24",
    "0.0.0.0/0",
    "2001:db8::/32",
    "2001:db8:1::/48",
    "2001:db8:1::5",
    "2001:db8:1:2::/64",
    "fe80::/10",
    "::/0",
    "any",
    "$HOME_NET",
]
_HOME = "[10.1.0.0/16, 2001:db8:1::/48, !2001:db8:1:bad::/64]"


def _probe_addresses() -> list[Address]:
    """Each network's first and last address and their neighbours outside, both families."""
    out: set[Address] = set()
    for text in [*_NETS, "2001:db8:1:bad::/64"]:
        if text in ("any", "$HOME_NET"):
            continue
        net: Network = ipaddress.ip_network(text)
        top = 2**net.max_prefixlen - 1
        for value in (
            int(net.network_address) - 1,
            int(net.network_address),
            int(net.broadcast_address),
            int(net.broadcast_address) + 1,
        ):
            if 0 <= value <= top:
                out.add(
                    ipaddress.ip_address(value)
                    if net.version == 4
                    else ipaddress.IPv6Address(value)
                )
    return sorted(out, key=lambda a: (a.version, int(a)))


_PROBES = _probe_addresses()


def _reference(tree: Any, addr: Address) -> bool:
    """Snort's list semantics evaluated directly on one address: an item matches its network
    (of its family), `!x` its complement, a list its positive items minus its negated ones (all
    addresses minus the negated ones without a positive item)."""
    if isinstance(tree, str):
        if tree == "any":
            return True
        if tree == "$HOME_NET":
            return _reference(_HOME_TREE, addr)
        net = ipaddress.ip_network(tree)
        return net.version == addr.version and addr in net
    kind, body = tree
    if kind == "!":
        return not _reference(body, addr)
    positives = [x for x in body if not (isinstance(x, tuple) and x[0] == "!")]
    negatives = [x[1] for x in body if isinstance(x, tuple) and x[0] == "!"]
    inside = any(_reference(x, addr) for x in positives) if positives else True
    return inside and not any(_reference(x, addr) for x in negatives)


_HOME_TREE = ("[", ["10.1.0.0/16", "2001:db8:1::/48", ("!", "2001:db8:1:bad::/64")])


def _text(tree: Any) -> str:
    if isinstance(tree, str):
        return tree
    kind, body = tree
    if kind == "!":
        return "!" + _text(body)
    return "[" + ",".join(_text(x) for x in body) + "]"


_trees = st.recursive(
    st.sampled_from(_NETS),
    lambda inner: st.one_of(
        st.tuples(st.just("!"), inner),
        st.tuples(st.just("["), st.lists(inner, min_size=1, max_size=4)),
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(tree=_trees)
def test_address_matcher_agrees_with_the_brute_force_reference(tree: object) -> None:
    text = _text(tree)
    matcher = address_set(text, SnortVariables().with_values({"HOME_NET": _HOME}).values)
    for addr in _PROBES:
        assert (addr.packed in matcher) is _reference(tree, addr), (text, str(addr))


# --- rules on IPv6 flows in the worker ------------------------------------------------------------

RULES = [
    'alert tcp $EXTERNAL_NET any -> $HOME_NET 80 (msg:"in"; content:"attack"; sid:9001;)',
    'alert udp $HOME_NET any -> [192.0.2.53,2001:db8::53] 53 (msg:"dns"; content:"bad"; sid:9002;)',
    'alert tcp any any -> !2001:db8:1::/48 any (msg:"out"; content:"attack"; sid:9003;)',
    'alert tcp 2001:db8:2::80 any <> $HOME_NET 80 (msg:"bidi"; content:"attack"; sid:9004;)',
]


def _worker(variables: dict[str, str]) -> Worker:
    from spm.config import SpmConfig

    rules = RuleSet(
        [parse_rule(r, path="t.rules", line=i + 1) for i, r in enumerate(RULES)], variables
    )
    assert not rules.report.unsupported, rules.report.unsupported
    return Worker(SpmConfig(name="t", interface="eth0", tags=(1,)), BuiltinEngine(rules))


def _sids(w: Worker) -> set[int]:
    return {e.sid for e in w.events if isinstance(e, Alert)}


@pytest.mark.parametrize(
    ("client", "server", "sids"),
    [
        ("2001:db8:2::80", "2001:db8:1::10", {9001, 9004}),  # into HOME_NET over IPv6
        ("2001:db8:1::10", "2001:db8:2::80", {9003}),  # out of it: not to HOME_NET
        ("192.0.2.7", "10.1.0.10", {9001, 9003}),  # IPv4 into HOME_NET
        ("2001:db8:1::10", "2001:db8:1::11", set()),  # inside to inside
    ],
)
def test_rules_with_ipv6_headers_fire_on_the_flows_they_name(
    client: str, server: str, sids: set[int]
) -> None:
    w = _worker({"HOME_NET": "[10.1.0.0/16,2001:db8:1::/48]", "EXTERNAL_NET": "!$HOME_NET"})
    conv = TcpConversation(client=client, server=server, sport=80, cport=40001)
    for p in conv.handshake() + conv.send(True, b"an attack\r\n"):
        w.process(p)
    assert _sids(w) == sids


def test_udp_rule_with_a_mixed_destination_list_fires_for_both_families() -> None:
    w = _worker({"HOME_NET": "[10.1.0.0/16,2001:db8:1::/48]"})
    assert (
        w.process(udp("2001:db8:1::10", "2001:db8::53", 5353, 53, b"a bad name")) is Verdict.ACCEPT
    )
    assert w.process(udp("10.1.0.10", "192.0.2.53", 5353, 53, b"a bad name")) is Verdict.ACCEPT
    assert (
        w.process(udp("2001:db8:1::10", "2001:db8::54", 5353, 53, b"a bad name")) is Verdict.ACCEPT
    )
    alerts = [e for e in w.events if isinstance(e, Alert)]
    assert [(a.sid, a.flow.dst) for a in alerts] == [(9002, "2001:db8::53"), (9002, "192.0.2.53")]


def test_home_net_of_both_families_from_the_spm_configuration(tmp_path: Path) -> None:
    """The configuration's variables (a YAML list, IPv6 items quoted) reach the rules."""
    rules = tmp_path / "v6.rules"
    rules.write_text(RULES[0] + "\n")
    config = tmp_path / "spm.yaml"
    config.write_text(
        f"name: s\ninterface: eth0\ntags: [1]\nips:\n  rules: [{rules}]\n"
        '  variables: {HOME_NET: [10.1.0.0/16, "2001:db8:1::/48"], EXTERNAL_NET: "!$HOME_NET"}\n'
    )
    cfg = load_config(config)
    assert cfg.ips.variables["HOME_NET"] == "[10.1.0.0/16,2001:db8:1::/48]"
    w = Worker(cfg, BuiltinEngine(load_ruleset(cfg.ips.rules, cfg.ips.variables)))
    conv = TcpConversation(client="2001:db8:2::80", server="2001:db8:1::10", sport=80)
    for p in conv.handshake() + conv.send(True, b"an attack\r\n"):
        w.process(p)
    [alert] = [e for e in w.events if isinstance(e, Alert)]
    assert (alert.sid, alert.flow.src, alert.flow.dst) == (9001, "2001:db8:2::80", "2001:db8:1::10")
