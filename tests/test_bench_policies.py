"""The policies the flood and new-flow benches compare are made from the example policy (the
flood's) and from its measurement form (the new-flow bench's, with no chain left): each variant
loads as a policy and differs from the base where its name says. A variant the bench was not
asked for is not made (`plain` needs a chain to remove, which the new-flow bench's base lacks)."""

from __future__ import annotations

import pytest

from bench.bench_flood import POLICIES, policy_variants
from bench.bench_newflows import measurement_policy
from controller.policy import Policy, load_policy
from opengate.errors import ConfigError
from opengate.target import repo_root

EXAMPLE = repo_root() / "controller" / "examples" / "gateway.yaml"


def _load(text: str) -> Policy:
    return load_policy(EXAMPLE, text)


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
        entries = "on_demand" if key == "ondemand" else "always"
        assert policy.sessions.data_plane_entries == entries, key


def test_the_flood_bench_makes_every_variant_of_the_example_policy() -> None:
    base = EXAMPLE.read_text()
    assert any(c.chain for c in _load(base).classes)
    variants = policy_variants(base, list(POLICIES))
    assert set(variants) == set(POLICIES)
    _check(base, variants)


def test_the_new_flow_bench_makes_its_variants_of_the_measurement_policy() -> None:
    base = measurement_policy(EXAMPLE.read_text(), udp_idle=1)
    assert all(c.chain is None for c in _load(base).classes)
    keys = ["routed", "ondemand", "npm", "cpm"]
    variants = policy_variants(base, keys)
    assert set(variants) == set(keys)
    _check(base, variants)
    # what failed the bench before variants were made on demand: `plain` of a policy without
    # chains is an error, not a silent copy
    with pytest.raises(ConfigError, match="no class with a chain"):
        policy_variants(base, ["plain"])
