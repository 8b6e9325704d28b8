"""The ACL's IPv6 side (controller.acl6) and the other IPv6 base entries: for random dual-stack
rule lists and random packets, the `ipv6_acl` entry of the highest priority that matches (walked
in Python over the entries the CPM writes) gives the verdict and rule that first-match over the
policy's rules, as written, gives (an oracle of its own, reading the rules' YAML); the IPv4 side
of the same policies still classifies as their IPv4 reading says. Routes: the longest prefix wins
by priority; neighbour advertisements: one per address and per port's link-local address."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller import acl6
from controller.baseconfig import desired_base
from controller.hsm.linear import LinearClassifier
from controller.hsm.rules import AclAction
from controller.policy import Policy, load_policy
from opengate import p4constants as pc
from opengate.entries import Exact, Range, TableEntry, Ternary
from opengate.fields import Packet
from opengate.p4info import P4Schema
from opengate.target import repo_root

ROOT = repo_root()
EXAMPLE = ROOT / "controller" / "examples" / "gateway.yaml"
NETWORKS = {
    "inside": ["10.0.1.0/24", "2001:db8:1::/64"],
    "outside": ["198.51.100.0/24", "2001:db8:2::/64"],
    "wide6": ["2001:db8::/32"],
    "only4": ["192.0.2.0/24"],
}
V6_LITERALS = [
    "2001:db8:1::/64",
    "2001:db8:1::10",
    "2001:db8:1::/63",
    "2001:db8:1:0:8000::/65",  # past the halves' boundary
    "2001:db8:1::8:0/125",
    "2001:db8:2::20/128",
    "::/0",
]
V4_LITERALS = ["10.0.1.0/24", "10.0.1.10", "198.51.100.0/25", "0.0.0.0/0"]
PORTS = ["80", "1024-65535", "53", "0-1023", "443"]
ACTIONS = ["permit", "deny", "to_cpu"]
HEAD = f"""\
version: 1
networks: {NETWORKS}
ports:
  - {{port: 1, role: inside, mac: "02:00:00:00:00:01", addresses: [10.0.1.1/24]}}
  - {{port: 2, role: outside, mac: "02:00:00:00:00:02", addresses: [198.51.100.1/24]}}
"""

V6_ADDRESSES = [
    "2001:db8:1::10",
    "2001:db8:1::1",
    "2001:db8:1:0:8000::1",
    "2001:db8:1:0:7fff::1",
    "2001:db8:1:1::1",
    "2001:db8:1::8:5",
    "2001:db8:2::20",
    "2001:db8:2::21",
    "2001:db8:7::1",
    "2001:db9::1",
]
V4_ADDRESSES = ["10.0.1.10", "10.0.1.200", "198.51.100.20", "198.51.100.200", "192.0.2.1"]


# -- random policies ---------------------------------------------------------------------------


@st.composite
def addresses_field(draw: st.DrawFn, family: int | None) -> Any:
    """A src or dst: nothing (any), `any`, names, or literals of the rule's family."""
    kind = draw(st.sampled_from(["absent", "any", "name", "names", "literal", "literals"]))
    if kind in ("literal", "literals") and family is None:
        kind = "name"
    if kind == "absent":
        return None
    if kind == "any":
        return "any"
    if kind == "name":
        return draw(st.sampled_from(sorted(NETWORKS)))
    if kind == "names":
        return draw(st.lists(st.sampled_from(sorted(NETWORKS)), min_size=1, max_size=3))
    pool = V6_LITERALS if family == 6 else V4_LITERALS
    if kind == "literal":
        return draw(st.sampled_from(pool))
    return draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3, unique=True))


@st.composite
def rule(draw: st.DrawFn) -> dict[str, Any]:
    family = draw(st.sampled_from([None, None, 4, 6]))
    out: dict[str, Any] = {"action": draw(st.sampled_from(ACTIONS))}
    for name in ("src", "dst"):
        value = draw(addresses_field(family))
        if value is not None:
            out[name] = value
    protos: list[Any] = [None, "tcp", "udp", ["tcp", "udp"], 47, "any"]
    if family != 4:
        protos += ["icmpv6", "ipv6-icmp"]
    if family != 6:
        protos += ["icmp"]
    if family is None:
        protos += [["icmp", "icmpv6"], ["tcp", "icmpv6"]]
    proto = draw(st.sampled_from(protos))
    if proto is not None:
        out["proto"] = proto
    if proto in ("tcp", "udp") or proto == ["tcp", "udp"]:
        for name in ("sport", "dport"):
            if draw(st.booleans()):
                out[name] = draw(st.sampled_from(PORTS))
    if proto in ("icmpv6", "ipv6-icmp") and draw(st.booleans()):
        out["icmp_type"] = draw(st.sampled_from([128, 129, [1, 3], 2, [128, 4], 135, "any"]))
    return out


@st.composite
def policies(draw: st.DrawFn) -> tuple[list[dict[str, Any]], str, str]:
    rules = draw(st.lists(rule(), min_size=0, max_size=8))
    return rules, draw(st.sampled_from(ACTIONS)), draw(st.sampled_from(["permit", "policy"]))


def policy_text(rules: Sequence[Mapping[str, Any]], default: str, errors: str) -> str:
    acl = {"default": default, "icmpv6_errors": errors, "rules": list(rules)}
    return HEAD + yaml.safe_dump({"acl": acl}, default_flow_style=None)


@st.composite
def packets6(draw: st.DrawFn) -> acl6.Packet6:
    def address() -> int:
        if draw(st.integers(0, 5)) == 0:
            return draw(st.integers(1 << 32, (1 << 128) - 1))
        return int(ipaddress.IPv6Address(draw(st.sampled_from(V6_ADDRESSES))))

    src, dst = address(), address()
    proto = draw(st.sampled_from([6, 17, 58, 58, 47, 1]))
    ports = st.sampled_from([0, 22, 53, 80, 443, 1023, 1024, 65535]) | st.integers(0, 65535)
    if proto == 58:
        icmp_type = draw(st.sampled_from([1, 2, 3, 4, 128, 129, 135]) | st.integers(0, 255))
        ident = draw(ports)
        sport = ident if icmp_type == 128 else 0
        dport = ident if icmp_type == 129 else 0
        return acl6.Packet6(src, dst, proto, sport, dport, icmp_type)
    sport, dport = (draw(ports), draw(ports)) if proto in (6, 17) else (0, 0)
    return acl6.Packet6(src, dst, proto, sport, dport)


# -- the oracle: the rules as written --------------------------------------------------------

PROTO_NUMBERS = {"tcp": 6, "udp": 17, "icmp": 1, "icmpv6": 58, "ipv6-icmp": 58}


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _family(rule: Mapping[str, Any]) -> set[int]:
    """The families a written rule applies to."""
    literal: set[int] = {
        ipaddress.ip_network(item, strict=False).version
        for name in ("src", "dst")
        for item in _items(rule.get(name, "any"))
        if item != "any" and item not in NETWORKS
    }
    families = literal or {4, 6}
    names = _items(rule.get("proto", "any"))
    if "any" not in names:
        if all(n == "icmp" for n in names):
            families.discard(6)
        if all(n in ("icmpv6", "ipv6-icmp") for n in names):
            families.discard(4)
    return families


def _address_matches(value: Any, address: int, version: int) -> bool:
    items = _items(value if value is not None else "any")
    if "any" in items:
        return True
    for item in items:
        prefixes = NETWORKS.get(item, [item])
        for text in prefixes:
            network = ipaddress.ip_network(text, strict=False)
            if network.version == version and ipaddress.ip_address(address) in network:
                return True
    return False


def _proto_matches(rule: Mapping[str, Any], proto: int, version: int) -> bool:
    items = _items(rule.get("proto", "any"))
    if "any" in items:
        return True
    for item in items:
        if (item == "icmp" and version == 6) or (item in ("icmpv6", "ipv6-icmp") and version == 4):
            continue
        if PROTO_NUMBERS.get(item, item) == proto:
            return True
    return False


def _port_matches(value: Any, port: int) -> bool:
    if value is None:
        return True
    low, _, high = str(value).partition("-")
    return int(low) <= port <= int(high or low)


def oracle6(
    rules: Sequence[Mapping[str, Any]], default: str, errors: str, p: acl6.Packet6
) -> tuple[AclAction, int]:
    for index, rule in enumerate(rules):
        if 6 not in _family(rule):
            continue
        types = rule.get("icmp_type", "any")
        if (
            _address_matches(rule.get("src"), p.src, 6)
            and _address_matches(rule.get("dst"), p.dst, 6)
            and _proto_matches(rule, p.proto, 6)
            and _port_matches(rule.get("sport"), p.sport)
            and _port_matches(rule.get("dport"), p.dport)
            and (types == "any" or p.icmp_type in _items(types))
        ):
            return AclAction(rule["action"]), index
    if errors == "permit" and p.proto == 58 and p.icmp_type in (1, 2, 3, 4):
        return AclAction.PERMIT, len(rules)
    return AclAction(default), pc.RULE_NONE


def oracle4(rules: Sequence[Mapping[str, Any]], p: Packet) -> int:
    for index, rule in enumerate(rules):
        if 4 not in _family(rule):
            continue
        if (
            _address_matches(rule.get("src"), p.src, 4)
            and _address_matches(rule.get("dst"), p.dst, 4)
            and _proto_matches(rule, p.proto, 4)
            and _port_matches(rule.get("sport"), p.sport)
            and _port_matches(rule.get("dport"), p.dport)
        ):
            return index
    return -1


# -- the properties ------------------------------------------------------------------------------


def _load(tmp_path: Path, text: str) -> Policy:
    path = tmp_path / "acl6.yaml"
    path.write_text(text)
    return load_policy(path)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(policy=policies(), packets=st.lists(packets6(), min_size=20, max_size=20))
def test_the_highest_matching_entry_is_the_first_matching_rule(
    tmp_path: Path,
    policy: tuple[list[dict[str, Any]], str, str],
    packets: list[acl6.Packet6],
) -> None:
    rules, default, errors = policy
    loaded = _load(tmp_path, policy_text(rules, default, errors))
    base = desired_base(loaded, tag_base=0x100, weights={})
    table = [e for e in base.entries.values() if e.table == pc.T_IPV6_ACL and not e.is_default]
    (default_entry,) = [
        e for e in base.entries.values() if e.table == pc.T_IPV6_ACL and e.is_default
    ]
    assert default_entry.params_dict == {"rule": pc.RULE_NONE}
    for packet in packets:
        expected = oracle6(rules, default, errors, packet)
        assert acl6.lookup(table, default_entry, packet) == expected, packet
        # the rules compiled (controller.acl6's own first match) agree too
        assert acl6.first_match(loaded.acl6, packet, loaded.acl_default) == expected


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(policy=policies(), data=st.data())
def test_the_ipv4_side_of_a_dual_stack_policy_reads_as_ipv4(
    tmp_path: Path, policy: tuple[list[dict[str, Any]], str, str], data: st.DataObject
) -> None:
    """Rule ids stay the positions of the policy's rules: an IPv6-only rule keeps its place on
    the IPv4 side, matching nothing."""
    rules, default, errors = policy
    loaded = _load(tmp_path, policy_text(rules, default, errors))
    linear = LinearClassifier([s.rule for s in loaded.acl_rules], [])
    v4 = st.sampled_from(V4_ADDRESSES).map(lambda a: int(ipaddress.IPv4Address(a)))
    for _ in range(20):
        packet = Packet(
            data.draw(v4),
            data.draw(v4),
            data.draw(st.sampled_from([0, 53, 80, 443, 5000])),
            data.draw(st.sampled_from([0, 53, 80, 443, 5000])),
            data.draw(st.sampled_from([1, 6, 17, 47, 58])),
        )
        assert linear.classify(packet).acl_rule == oracle4(rules, packet), packet


def test_entries_read_back_from_a_switch_compare_equal() -> None:
    """Every IPv6 base entry as P4Runtime encodes it and a switch reads it back (wildcards
    spelled out) is the entry the CPM made: a restart finds nothing to rewrite."""
    schema = P4Schema.load(ROOT / "p4src" / "build" / "opengate.p4info.txtpb")
    base = desired_base(load_policy(EXAMPLE), tag_base=0x100, weights={})
    tables = (pc.T_IPV6_ACL, pc.T_ROUTING_V6, pc.T_ND_RESPONDER)
    mine = [e for e in base.entries.values() if e.table in tables and not e.is_default]
    assert {e.table for e in mine} == set(tables)
    for entry in mine:
        assert schema.decode_entry(schema.encode_entry(entry)) == entry


def test_a_rule_takes_one_entry_per_combination_at_its_priority(tmp_path: Path) -> None:
    rules: list[dict[str, Any]] = [
        {
            "src": ["2001:db8:1::/64", "2001:db8:3::/64"],
            "proto": ["tcp", "udp"],
            "dport": "53",
            "action": "permit",
        },
        {"proto": "icmpv6", "icmp_type": [128, 129], "action": "deny"},
    ]
    loaded = _load(tmp_path, policy_text(rules, "deny", "policy"))
    entries = acl6.entries(loaded.acl6)
    first = [e for e in entries if e.params_dict["rule"] == 0]
    second = [e for e in entries if e.params_dict["rule"] == 1]
    assert (len(first), len(second)) == (4, 2)
    assert {e.priority for e in first} == {2} and {e.priority for e in second} == {1}
    high = 0x20010DB800010000
    assert {(e.match_dict["ipv6_src_hi"], e.match_dict["ip_proto"]) for e in first} == {
        (Ternary(high, (1 << 64) - 1), Ternary(6, 0xFF)),
        (Ternary(high, (1 << 64) - 1), Ternary(17, 0xFF)),
        (Ternary(0x20010DB800030000, (1 << 64) - 1), Ternary(6, 0xFF)),
        (Ternary(0x20010DB800030000, (1 << 64) - 1), Ternary(17, 0xFF)),
    }
    assert all(e.match_dict["ipv6_src_lo"] == Ternary(0, 0) for e in first)
    assert all(e.match_dict["l4_dport"] == Range(53, 53) for e in first)
    assert {e.match_dict["icmpv6_type"] for e in second} == {
        Ternary(128, 0xFF),
        Ternary(129, 0xFF),
    }


# -- routes and neighbour advertisements --------------------------------------------------------

ROUTED = """\
version: 1
ports:
  - {port: 1, role: inside, mac: "02:00:00:00:00:01", addresses: ["2001:db8:1::1/64"]}
  - {port: 2, role: outside, mac: "02:00:00:00:00:02", addresses: ["2001:db8:2::1/64"]}
  - {port: 5, role: outside, mac: "02:00:00:00:00:05", addresses: ["2001:db8:5::1/64"]}
neighbours:
  - {address: "2001:db8:1::10", mac: "00:00:00:00:01:10"}
  - {address: "2001:db8:2::20", mac: "00:00:00:00:02:20"}
  - {address: "2001:db8:5::50", mac: "00:00:00:00:05:50"}
routes:
  - {prefix: "::/0", via: "2001:db8:2::20"}
  - {prefix: "2001:db8::/32", via: "2001:db8:5::50"}
  - {prefix: "2001:db8:7::/48", via: "2001:db8:2::20"}
  - {prefix: "2001:db8:7:0:8000::/65", via: "2001:db8:5::50"}
  - {prefix: "2001:db8:7:0:8000::/127", via: "2001:db8:1::10"}
"""


OWN = {int(ipaddress.IPv6Address(f"2001:db8:{n}::1")) for n in (1, 2, 5)}


def test_each_of_the_gateways_own_addresses_is_routed_nowhere() -> None:
    """One /128 no_route_v6 entry per global address of a port (priority 129, above a default
    route and a neighbour's /128 alike), none for the link-local ones (the NPM keeps link-local
    traffic on its link before any route)."""
    policy = load_policy(Path("routed.yaml"), ROUTED)
    base = desired_base(policy, tag_base=0x100, weights={})
    own = [
        e
        for e in base.entries.values()
        if e.table == pc.T_ROUTING_V6 and e.action == pc.A_NO_ROUTE_V6
    ]
    found = set()
    for entry in own:
        hi, lo = entry.match_dict["ipv6_dst_hi"], entry.match_dict["ipv6_dst_lo"]
        assert isinstance(hi, Ternary) and isinstance(lo, Ternary)
        assert (hi.mask, lo.mask, entry.priority) == ((1 << 64) - 1, (1 << 64) - 1, 129)
        found.add((hi.value << 64) | lo.value)
    assert found == OWN


def _route_lookup(entries: Sequence[TableEntry], address: int) -> TableEntry | None:
    best: TableEntry | None = None
    for entry in entries:
        hi, lo = entry.match_dict["ipv6_dst_hi"], entry.match_dict["ipv6_dst_lo"]
        assert isinstance(hi, Ternary) and isinstance(lo, Ternary)
        hit = (address >> 64) & hi.mask == hi.value and address & lo.mask == lo.value
        if hit and (best is None or entry.priority > best.priority):
            best = entry
    return best


@given(
    st.sampled_from(
        [
            "2001:db8:7::1",
            "2001:db8:7:0:8000::",
            "2001:db8:7:0:8000::1",
            "2001:db8:7:0:8000::2",
            "2001:db8:7:0:7fff::1",
            "2001:db8:8::1",
            "2001:db8:1::10",
            "2001:db9::1",
            "2001:db8:1::1",
            "2001:db8:2::1",
            "2001:db8:5::1",
            "2001:db8:5::2",
        ]
    ).map(lambda a: int(ipaddress.IPv6Address(a)))
    | st.integers(0, (1 << 128) - 1)
)
def test_the_longest_prefix_wins_by_priority(address: int) -> None:
    policy = load_policy(Path("routed.yaml"), ROUTED)
    base = desired_base(policy, tag_base=0x100, weights={})
    entries = [e for e in base.entries.values() if e.table == pc.T_ROUTING_V6]
    routes = [e for e in entries if e.action == pc.A_ROUTE_V6_TO]
    assert sorted(e.priority for e in routes) == sorted(
        r.prefix.prefixlen + 1 for r in policy.routes6
    )
    chosen = _route_lookup(entries, address)
    if address in OWN:
        # the gateway's own address: above every route, ::/0 and the /32 among them
        assert chosen is not None and chosen.action == pc.A_NO_ROUTE_V6
        assert (chosen.priority, chosen.params_dict) == (129, {})
        return
    route = policy.route6_for(ipaddress.IPv6Address(address))
    if route is None:
        assert chosen is None
        return
    assert chosen is not None
    assert chosen.priority == route.prefix.prefixlen + 1
    router_macs = {1: 0x020000000001, 2: 0x020000000002, 5: 0x020000000005}
    assert chosen.params_dict == {
        "port": route.port,
        "next_hop_mac": route.next_hop_mac,
        "router_mac": router_macs[route.port],
    }


def test_a_slash_65_route_masks_both_halves() -> None:
    policy = load_policy(Path("routed.yaml"), ROUTED)
    base = desired_base(policy, tag_base=0x100, weights={})
    (entry,) = [e for e in base.entries.values() if e.table == pc.T_ROUTING_V6 and e.priority == 66]
    assert entry.match_dict == {
        "ipv6_dst_hi": Ternary(0x20010DB800070000, (1 << 64) - 1),
        "ipv6_dst_lo": Ternary(1 << 63, 1 << 63),
    }
    (default,) = [
        e for e in base.entries.values() if e.table == pc.T_ROUTING_V6 and e.priority == 1
    ]
    assert default.match_dict == {"ipv6_dst_hi": Ternary(0, 0), "ipv6_dst_lo": Ternary(0, 0)}


def test_neighbour_advertisements_for_each_address_and_link_local() -> None:
    """The example's ports: each global address, and each port's link-local address made from
    its MAC (02:00:00:00:00:01: fe80::ff:fe00:1; RFC 4291 appendix A), answered with the port's
    MAC."""
    base = desired_base(load_policy(EXAMPLE), tag_base=0x100, weights={})
    advertised = {
        (
            str(ipaddress.IPv6Address((_exact(e, "target_hi") << 64) | _exact(e, "target_lo"))),
            e.params_dict["mac"],
        )
        for e in base.entries.values()
        if e.table == pc.T_ND_RESPONDER
    }
    assert advertised == {
        ("2001:db8:1::1", 0x020000000001),
        ("fe80::ff:fe00:1", 0x020000000001),
        ("2001:db8:2::1", 0x020000000002),
        ("fe80::ff:fe00:2", 0x020000000002),
    }
    # a build without the IPv6 tables gets none of these entries
    without = desired_base(load_policy(EXAMPLE), 0x100, {}, available=frozenset())
    assert not [
        e
        for e in without.entries.values()
        if e.table in (pc.T_ND_RESPONDER, pc.T_ROUTING_V6, pc.T_IPV6_ACL)
    ]


def _exact(entry: TableEntry, name: str) -> int:
    value = entry.match_dict[name]
    assert isinstance(value, Exact)
    return value.value
