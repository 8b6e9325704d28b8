"""The policies the flood and new-flow benches compare are made from the example policy (the
flood's) and from its measurement form (the new-flow bench's, with no chain left): each variant
loads as a policy and differs from the base where its name says. A variant the bench was not
asked for is not made (`plain` needs a chain to remove, which the new-flow bench's base lacks).
`denied` denies the flooding host's UDP before any other rule, and nothing else."""

from __future__ import annotations

import pytest

from bench.bench_flood import POLICIES, policy_variants
from bench.bench_newflows import measurement_policy
from controller.hsm.rules import AclAction
from controller.policy import Policy, load_policy
from opengate.errors import ConfigError
from opengate.fields import Packet
from opengate.target import repo_root

EXAMPLE = repo_root() / "controller" / "examples" / "gateway.yaml"
FLOODER = "10.0.1.11"  # h2 in topo/gateway.yaml
OTHER = "10.0.1.10"  # h1
OUT1 = "198.51.100.20"


def _load(text: str) -> Policy:
    return load_policy(EXAMPLE, text)


def _first_match(policy: Policy, packet: str) -> tuple[str, AclAction]:
    rule = next(r for r in policy.acl_rules if r.rule.matches(Packet.parse(packet)))
    return rule.name, rule.rule.action


def _check(base: str, variants: dict[str, str]) -> None:
    loaded = {key: _load(text) for key, text in variants.items()}
    original = _load(base)
    assert original.nat.masquerade
    for key, policy in loaded.items():
        if key == "npm":
            assert policy == original
            continue
        if key == "cpm":
            assert policy.nat.masquerade and policy.nat.data_plane_ports is None
            continue
        assert not policy.nat.masquerade, key
        if key == "plain":
            assert all(c.chain is None for c in policy.classes)
        flood = f"{FLOODER} {OUT1} 1024 20000 17"
        if key == "denied":
            assert _first_match(policy, flood)[1] == AclAction.DENY
            assert len(policy.acl_rules) == len(original.acl_rules) + 1
            assert [r.name for r in policy.acl_rules[1:]] == [r.name for r in original.acl_rules]
            # the flooder's TCP and the other hosts' UDP meet the rules they met before
            for packet in (f"{FLOODER} {OUT1} 1024 80 6", f"{OTHER} {OUT1} 1024 20000 17"):
                assert _first_match(policy, packet) == _first_match(original, packet), packet
        else:
            assert _first_match(policy, flood) == _first_match(original, flood), key
        entries = "on_demand" if key == "ondemand" else "always"
        assert policy.sessions.data_plane_entries == entries, key


def test_the_flood_bench_makes_every_variant_of_the_example_policy() -> None:
    base = EXAMPLE.read_text()
    assert any(c.chain for c in _load(base).classes)
    variants = policy_variants(base, list(POLICIES), flooder=FLOODER)
    assert set(variants) == set(POLICIES)
    _check(base, variants)
    with pytest.raises(ConfigError, match="flooding host"):
        policy_variants(base, ["denied"])


def test_the_new_flow_bench_makes_its_variants_of_the_measurement_policy() -> None:
    base = measurement_policy(EXAMPLE.read_text(), udp_idle=1)
    loaded = _load(base)
    assert all(c.chain is None for c in loaded.classes)
    # no meter on the path to the CPU, per reason or per source, and no new-flow limit: they
    # cap the rates on purpose (the example's cpu_meters block spans lines: a one-line pattern
    # that drops it would keep it)
    assert _load(EXAMPLE.read_text()).cpu_meters, "the example policy has CPU meters"
    assert (loaded.cpu_meters, loaded.cpu_source_meter) == ({}, None)
    assert loaded.sessions.new_flows_per_source is None
    keys = ["routed", "ondemand", "npm", "cpm"]
    variants = policy_variants(base, keys, flooder=FLOODER)
    assert set(variants) == set(keys)
    _check(base, variants)
    # what failed the bench before variants were made on demand: `plain` of a policy without
    # chains is an error, not a silent copy
    with pytest.raises(ConfigError, match="no class with a chain"):
        policy_variants(base, ["plain"])
