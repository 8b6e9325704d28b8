"""The policy loader: the examples load, and every kind of mistake is reported with the file,
the line and the field, before anything reaches a switch."""

from __future__ import annotations

import ipaddress
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.baseconfig import desired_base, diff_base, static_base, with_weights
from controller.policy import load_policy
from opengate import p4constants as pc
from opengate.entries import Exact
from opengate.errors import ConfigError
from opengate.target import repo_root

EXAMPLE = repo_root() / "controller" / "examples" / "gateway.yaml"


def _line_of(text: str, needle: str) -> int:
    for number, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in the policy")


def _broken(lab: Path, old: str, new: str) -> tuple[Path, int]:
    text = lab.read_text()
    assert old in text, old
    line = _line_of(text, old)
    lab.write_text(text.replace(old, new, 1))
    return lab, line


def test_example_policy_matches_the_default_topology() -> None:
    policy = load_policy(EXAMPLE)
    roles = {p.number: p.role for p in policy.ports}
    assert roles == {1: pc.ROLE_INSIDE, 2: pc.ROLE_OUTSIDE, 3: pc.ROLE_SPM, 4: pc.ROLE_SPM}
    neighbours = {str(n.address): (n.port, n.mac) for n in policy.neighbours}
    assert neighbours == {
        "10.0.1.10": (1, 0x000000000110),
        "10.0.1.11": (1, 0x000000000111),
        "198.51.100.20": (2, 0x000000000220),
    }
    assert {s.name: (s.port, s.mac) for s in policy.spms} == {
        "spm1": (3, 0x000000000333),
        "spm2": (4, 0x000000000444),
    }
    assert [str(m.address) for m in policy.nat.masquerade] == ["198.51.100.1"]
    gateway = policy.gateway_addresses()
    assert gateway[ipaddress.IPv4Address("10.0.1.1")] == 1
    assert gateway[ipaddress.IPv4Address("198.51.100.1")] == 2


def test_lab_policy_maps_ids_rules_to_classes(lab: Path) -> None:
    policy = load_policy(lab)
    assert [(r.sid, r.class_id) for r in policy.ids_rules] == [
        (1000001, 1),
        (1000002, 1),
        (1000003, 2),
        (1000004, 3),
    ]
    # $HOME_NET is the policy's network 'inside'.
    first = policy.ids_rules[0]
    assert [str(p) for p in first.src] == ["10.0.1.0/24"]
    # The masquerade address defaults to the port's first address.
    assert str(policy.nat.masquerade[0].address) == "198.51.100.1"


@pytest.mark.parametrize(
    ("old", "new", "field", "message"),
    [
        ("role: outside", "role: outsde", "ports[1].role", "not one of"),
        ('mac: "02:00:00:00:00:02"', 'mac: "02:00:00:00:00"', "ports[1].mac", "not a MAC"),
        (
            "dst: outside, proto: tcp, dport: 23",
            "dst: outsid, proto: tcp, dport: 23",
            "acl.rules[0].dst",
            "neither a prefix nor a network name",
        ),
        (
            "dport: 23, action: to_cpu",
            "dport: 23, action: allow",
            "acl.rules[0].action",
            "not one of",
        ),
        (
            "name: bulk, chain: ips-av,",
            "name: bulk, chain: ipsav,",
            "classes[1].chain",
            "no chain named",
        ),
        ("via: 198.51.100.20", "via: 198.51.100.99", "routes[0].via", "not a neighbour"),
        (
            "to: 10.0.1.10, to_port: 80",
            "to: 10.9.9.9, to_port: 80",
            "nat.port_forwards[0].to",
            "no route",
        ),
        ("closing_linger: 0.2", "closing_linger: -1", "sessions.closing_linger", ">= 0"),
        ("queue_limit: 1000", "queue_limt: 1000", "spm.queue_limt", "unknown field"),
        (
            "cpu_meters: {session_nat: cpu}",
            "cpu_meters: {session_nat: cpu, per_source: cpu2}",
            "cpu_meters.per_source",
            "no meter named",
        ),
        (
            "cpu_meters: {session_nat: cpu}",
            "cpu_meters: {session_nat: cpu, per_host: cpu}",
            "cpu_meters.per_host",
            "unknown CPU reason (known: session_nat, acl, ttl_expired, no_route, "
            "session_collision, session_v6, nat64_icmp_error, per_source)",
        ),
        (
            "{name: spm2, port: 4,",
            "{name: spm2, port: 5,",
            "spm_pools[0].spms[1].port",
            "not a port with role spm",
        ),
    ],
)
def test_mistakes_name_file_line_and_field(
    lab: Path, old: str, new: str, field: str, message: str
) -> None:
    path, line = _broken(lab, old, new)
    with pytest.raises(ConfigError) as caught:
        load_policy(path)
    error = caught.value
    assert error.path == str(path)
    assert error.field == field
    assert error.line == line
    assert message in error.message
    assert str(error).startswith(f"{path}:{line}: {field}: ")


def test_invalid_yaml_names_the_line(lab: Path) -> None:
    path, line = _broken(lab, "routes:", "routes: [")
    with pytest.raises(ConfigError) as caught:
        load_policy(path)
    assert caught.value.path == str(path)
    assert caught.value.line is not None and caught.value.line >= line
    assert "not valid YAML" in caught.value.message


def test_duplicate_key_is_an_error(lab: Path) -> None:
    path, line = _broken(lab, "name: lab", "name: lab\nname: lab2")
    with pytest.raises(ConfigError) as caught:
        load_policy(path)
    assert caught.value.line == line + 1
    assert "duplicate key" in caught.value.message


def test_missing_rules_file_is_reported_at_its_field(lab: Path) -> None:
    path, line = _broken(lab, "rules: lab.rules", "rules: nowhere.rules")
    with pytest.raises(ConfigError) as caught:
        load_policy(path)
    assert (caught.value.field, caught.value.line) == ("ids.rules", line)
    assert "nowhere.rules" in caught.value.message


def test_bad_snort_rule_names_the_rules_file_and_line(lab: Path) -> None:
    rules = lab.parent / "lab.rules"
    lines = rules.read_text().splitlines()
    lines.append('alert tcp $HOME_NET any -> 300.1.1.1 80 (msg:"bad"; sid:9;)')
    rules.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as caught:
        load_policy(lab)
    assert caught.value.path == str(rules)
    assert caught.value.line == len(lines)
    assert caught.value.field == "destination"


def test_policy_text_can_come_from_the_caller(lab: Path) -> None:
    """The REST API receives the text; files it names are still read beside `path`."""
    text = lab.read_text().replace("name: lab", "name: from-api")
    policy = load_policy(lab, text)
    assert policy.name == "from-api"
    assert policy.sha256 != load_policy(lab).sha256


def test_sha256_covers_the_files_a_policy_names(lab: Path) -> None:
    before = load_policy(lab).sha256
    rules = lab.parent / "lab.rules"
    rules.write_text(rules.read_text() + "\n# a comment\n")
    assert load_policy(lab).sha256 != before


def test_community_rules_map_to_classes_by_classtype(shared_data: Path, lab: Path) -> None:
    rules = shared_data / "snort" / "snort3-community.rules"
    text = lab.read_text().replace("rules: lab.rules", f"rules: {rules}")
    text = text.replace(
        "{id: 3, name: dns, chain: strict-ips, sids: [1000004]}",
        "{id: 3, name: trojans, chain: strict-ips, classtypes: [trojan-activity]}",
    )
    policy = load_policy(lab, text)
    classes = {r.class_id for r in policy.ids_rules}
    assert classes == {1, 3}
    assert sum(1 for r in policy.ids_rules if r.class_id == 3) >= 700


@pytest.mark.parametrize("topology_file", ["gateway.yaml", "gateway-2npm.yaml"])
def test_example_policy_agrees_with_the_topology(topology_file: str) -> None:
    from topo.model import load_topology

    topology = load_topology(repo_root() / "topo" / topology_file, repo_root())
    policy = load_policy(topology.policy)
    lans = {lan.name: lan for lan in topology.lans}
    neighbours: dict[Any, Any] = {n.address: n for n in policy.neighbours}
    neighbours6: dict[Any, Any] = {n.address: n for n in policy.neighbours6}
    for npm in topology.npms:
        port_of_lan = {peer: port for port, peer in npm.ports.items() if peer in lans}
        for port, peer in npm.ports.items():
            spec = policy.port(port)
            assert spec is not None, f"{npm.name}: port {port} is not in the policy"
            gateway_mac = lans[peer].gateway_mac if peer in lans else None
            if gateway_mac is not None:
                assert spec.mac == int(gateway_mac.replace(":", ""), 16), f"{npm.name}:{port}"
        for host in topology.hosts:
            if host.role == "spm":
                spm = policy.spm_by_port(topology.host_port(npm, host) or 0)
                assert spm is not None, f"{npm.name} does not reach SPM {host.name}"
                assert spm.name == host.name, f"{npm.name}: {host.name}"
                assert spm.mac == int(host.mac.replace(":", ""), 16), host.name
                continue
            assert (host.ip is not None or host.ip6 is not None) and host.lan is not None
            if host.lan not in port_of_lan:
                continue  # another NPM's site
            families = (
                (host.ip, host.gateway, neighbours, "addresses"),
                (host.ip6, host.gateway6, neighbours6, "addresses6"),
            )
            for interface, gateway, known, addresses in families:
                if interface is None:
                    continue
                neighbour = known[interface.ip]
                assert neighbour.mac == int(host.mac.replace(":", ""), 16), host.name
                assert neighbour.port == port_of_lan[host.lan], host.name
                gateway_port = policy.port(neighbour.port)
                assert gateway_port is not None
                own = {a.ip for a in getattr(gateway_port, addresses)}
                assert gateway in own, host.name


def test_example_policy_meters_each_source_and_ages_data_plane_sessions() -> None:
    """The base configuration gives every source its cell of the per-source CPU meter, and the
    data plane's session lifetimes are the policy's idle timeouts and linger, in ticks."""
    policy = load_policy(repo_root() / "controller" / "examples" / "gateway.yaml")
    base = desired_base(policy, tag_base=0x100, weights={})
    cells = [key for key in base.meters if key[0] == pc.M_CPU_SOURCE_METER]
    assert len(cells) == pc.METER_SIZES[pc.M_CPU_SOURCE_METER]
    ageing = {
        dict(entry.match)["ip_proto"]: dict(entry.params)
        for entry in base.entries.values()
        if entry.table == pc.T_FLOW_AGEING
    }
    tcp = ageing[Exact(pc.IP_PROTO_TCP)]
    assert tcp["idle"] == round(300 * 1_000_000 / pc.FLOW_TICK_US)
    assert tcp["closing"] == round(2 * 1_000_000 / pc.FLOW_TICK_US)
    assert tcp["report"] == round(1 * 1_000_000 / pc.FLOW_TICK_US)  # report_interval's default
    without = desired_base(policy, tag_base=0x100, weights={}, available=frozenset())
    assert not [e for e in without.entries.values() if e.table == pc.T_FLOW_AGEING]
    assert not [k for k in without.meters if k[0] == pc.M_CPU_SOURCE_METER]


def test_example_policy_lets_the_npm_masquerade_and_limits_new_flows() -> None:
    """Data-plane masquerading: snat_rule names the address and the NPM's block, nat_dp_reverse
    lists the address; the CPM's range lies below the block. Every source gets its new-flow
    meter cell (packets). A program without them (TNA) gets the CPM's masquerade instead."""
    policy = load_policy(repo_root() / "controller" / "examples" / "gateway.yaml")
    assert policy.nat.data_plane_ports == (49152, 65535)
    assert policy.nat.ports == (20000, 49151)
    base = desired_base(policy, tag_base=0x100, weights={})
    snat = [e for e in base.entries.values() if e.table == pc.T_SNAT_RULE]
    assert snat and all(e.action == pc.A_MASQUERADE_DP for e in snat)
    assert {dict(e.params)["port_base"] for e in snat} == {49152}
    reverse = [e for e in base.entries.values() if e.table == pc.T_NAT_DP_REVERSE]
    assert [dict(e.match)["ipv4_addr"] for e in reverse] == [
        Exact(int(ipaddress.IPv4Address("198.51.100.1")))
    ]
    cells = {k: c for k, c in base.meters.items() if k[0] == pc.M_NEW_FLOW_METER}
    assert len(cells) == pc.METER_SIZES[pc.M_NEW_FLOW_METER]
    assert {c.config for c in cells.values()} == {(1000, 2000, 1000, 2000)}
    tna = desired_base(policy, tag_base=0x100, weights={}, available=frozenset({pc.T_SNAT_RULE}))
    snat = [e for e in tna.entries.values() if e.table == pc.T_SNAT_RULE]
    assert snat and all(e.action == pc.A_MASQUERADE for e in snat)
    assert not [k for k in tna.meters if k[0] == pc.M_NEW_FLOW_METER]


def test_port_forwards_are_carried_by_the_npm_unless_a_reply_would_be_ambiguous(
    lab: Path,
) -> None:
    """With data-plane NAT, a forward is port_forward_dp (its target) plus a dnat_dp_reverse
    entry (the target -> the public end); two forwards to one target stay the CPM's (a reply
    could not tell its public end), as does every forward of a program without the tables."""
    example = load_policy(repo_root() / "controller" / "examples" / "gateway.yaml")
    base = desired_base(example, tag_base=0x100, weights={})
    (dnat,) = [e for e in base.entries.values() if e.table == pc.T_DNAT_RULE]
    assert (dnat.action, dict(dnat.params)) == (
        pc.A_PORT_FORWARD_DP,
        {"to_addr": int(ipaddress.IPv4Address("10.0.1.10")), "to_port": 80},
    )
    (reverse,) = [e for e in base.entries.values() if e.table == pc.T_DNAT_DP_REVERSE]
    assert dict(reverse.match) == {
        "ipv4_src": Exact(int(ipaddress.IPv4Address("10.0.1.10"))),
        "ip_proto": Exact(pc.IP_PROTO_TCP),
        "l4_sport": Exact(80),
    }
    assert dict(reverse.params) == {
        "public_addr": int(ipaddress.IPv4Address("198.51.100.1")),
        "public_port": 8080,
    }
    text = (repo_root() / "controller" / "examples" / "gateway.yaml").read_text()
    twice = lab.parent / "twice.yaml"
    twice.write_text(
        text.replace(
            "    - {address: 198.51.100.1, proto: tcp, port: 8080, to: 10.0.1.10, to_port: 80}\n",
            "    - {address: 198.51.100.1, proto: tcp, port: 8080, to: 10.0.1.10, to_port: 80}\n"
            "    - {address: 198.51.100.1, proto: tcp, port: 8081, to: 10.0.1.10, to_port: 80}\n"
            "    - {address: 198.51.100.1, proto: tcp, port: 8082, to: 10.0.1.10, to_port: 82}\n",
        )
    )
    shutil.copy(repo_root() / "controller" / "examples" / "gateway.rules", lab.parent)
    base = desired_base(load_policy(twice), tag_base=0x100, weights={})
    actions = {
        dict(e.match)["l4_dport"]: e.action
        for e in base.entries.values()
        if e.table == pc.T_DNAT_RULE
    }
    assert actions == {
        Exact(8080): pc.A_PORT_FORWARD,
        Exact(8081): pc.A_PORT_FORWARD,
        Exact(8082): pc.A_PORT_FORWARD_DP,
    }
    tna = desired_base(example, tag_base=0x100, weights={}, available=frozenset({pc.T_DNAT_RULE}))
    assert [e.action for e in tna.entries.values() if e.table == pc.T_DNAT_RULE] == [
        pc.A_PORT_FORWARD
    ]


def test_cpm_ports_overlapping_the_npm_block_are_refused(lab: Path) -> None:
    path, _ = _broken(lab, "data_plane_ports: off", "data_plane_ports: 20005")
    with pytest.raises(ConfigError) as caught:
        load_policy(path)
    assert caught.value.field == "nat.ports"
    assert "overlaps the data plane's block 20005-36388" in caught.value.message


def test_npm_block_must_fit_below_65536(lab: Path) -> None:
    path, line = _broken(lab, "data_plane_ports: off", "data_plane_ports: 60000")
    with pytest.raises(ConfigError) as caught:
        load_policy(path)
    assert (caught.value.field, caught.value.line) == ("nat.data_plane_ports", line)
    assert "at most 49152" in caught.value.message


def test_new_flow_rate_must_be_positive(lab: Path) -> None:
    path, _ = _broken(
        lab, "acl_to_cpu: drop", "acl_to_cpu: drop\n  new_flows_per_source: {rate: 0}"
    )
    with pytest.raises(ConfigError) as caught:
        load_policy(path)
    assert caught.value.field == "sessions.new_flows_per_source.rate"


@settings(max_examples=60, deadline=None)
@given(
    before=st.dictionaries(st.sampled_from(["spm1", "spm2"]), st.integers(0, 10)),
    after=st.dictionaries(st.sampled_from(["spm1", "spm2"]), st.integers(0, 10)),
)
def test_weights_on_one_static_part_diff_as_whole_bases_do(
    before: dict[str, int], after: dict[str, int]
) -> None:
    """Two bases made from one static part (`with_weights`) share its meters, and `diff_base`
    then skips them: the writes are the same as between two bases made whole."""
    policy = load_policy(repo_root() / "controller" / "examples" / "gateway.yaml")
    static = static_base(policy, 0x100)
    fast = diff_base(with_weights(static, policy, before), with_weights(static, policy, after))
    whole = diff_base(
        desired_base(policy, tag_base=0x100, weights=before),
        desired_base(policy, tag_base=0x100, weights=after),
    )
    assert fast == whole
    assert not whole.meters  # weights move no meter
