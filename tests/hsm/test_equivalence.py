"""The compiled tables classify every packet exactly as first-match linear search does.

Packets: random ones, every segment edge and its neighbours, and packets drawn from inside the
rules. Rule sets: random ones (hypothesis: overlapping prefixes, port edges, lists, `<>`), and the
shared ClassBench sets with the Snort community rules as the IDS set.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.hsm.compile import compile_hsm
from controller.hsm.linear import LinearClassifier
from controller.hsm.lookup import TableState, Walker
from controller.hsm.naive import compile_naive
from controller.hsm.rules import AclRule, IdsRule, parse_classbench
from controller.hsm.snort_header import load_ids_file
from opengate.fields import Packet
from opengate.snort.header import SnortVariables

from .conftest import acl_rules, edge_packets, ids_rule_lists, rule_packets

SLOW = bool(os.environ.get("HSM_SLOW"))
EXAMPLES = 400 if SLOW else 60


def assert_same_as_linear(
    entries: Iterable[object], acl: Sequence[AclRule], ids: Sequence[IdsRule],
    packets: Iterable[Packet],
) -> int:  # fmt: skip
    walker = Walker(TableState(entries))  # type: ignore[arg-type]
    linear = LinearClassifier(acl, ids)
    checked = 0
    for packet in packets:
        assert walker.classify(packet) == linear.classify(packet), str(packet)
        checked += 1
    return checked


def _packets(acl: Sequence[AclRule], ids: Sequence[IdsRule], count: int) -> list[Packet]:
    rules: list[AclRule | IdsRule] = [*acl, *ids]
    return [*rule_packets(rules, count), *edge_packets(rules)]


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(acl=st.lists(acl_rules(), max_size=10), ids=ids_rule_lists())
def test_random_rule_sets_classify_like_linear_search(
    acl: list[AclRule], ids: list[IdsRule]
) -> None:
    compiled = compile_hsm(acl, ids)
    assert_same_as_linear(compiled.entries, acl, ids, _packets(acl, ids, 60))


@settings(max_examples=EXAMPLES // 2, deadline=None)
@given(acl=st.lists(acl_rules(), max_size=8), ids=ids_rule_lists(max_size=5))
def test_naive_profile_classifies_like_linear_search(
    acl: list[AclRule], ids: list[IdsRule]
) -> None:
    compiled = compile_naive(acl, ids)
    assert_same_as_linear(compiled.entries, acl, ids, _packets(acl, ids, 40))


@settings(max_examples=EXAMPLES // 2, deadline=None)
@given(acl=st.lists(acl_rules(), max_size=8), ids=ids_rule_lists(max_size=6))
def test_integrated_segmentation_agrees_with_two_separate_hsms(
    acl: list[AclRule], ids: list[IdsRule]
) -> None:
    together = Walker(TableState(compile_hsm(acl, ids).entries))
    acl_only = Walker(TableState(compile_hsm(acl, []).entries))
    ids_only = Walker(TableState(compile_hsm([], ids).entries))
    for packet in _packets(acl, ids, 40):
        both = together.classify(packet)
        a, i = acl_only.classify(packet), ids_only.classify(packet)
        assert (both.acl_rule, both.acl_action) == (a.acl_rule, a.acl_action)
        assert (both.ids_class, both.ids_rule) == (i.ids_class, i.ids_rule)


# -- the shared data ---------------------------------------------------------------------------

# (set, rules used): whole sets where the HSM tables fit a bank; the first rules of the others
# (their full cross products do not fit, see bench/bench_hsm.py), whole with HSM_SLOW=1.
CASES = [
    ("acl1_1k", None),
    ("fw1_1k", 150),
    ("ipc1_1k", 150),
    ("acl1_10k", 120),
    ("fw1_10k", 120),
    ("ipc1_10k", 120),
]
HOME = {"HOME_NET": "[10.0.0.0/8,172.16.0.0/12,192.168.0.0/16]", "EXTERNAL_NET": "!$HOME_NET"}


@pytest.fixture(scope="module")
def community_ids(community_rules: Path) -> dict[str, list[IdsRule]]:
    out = {}
    for name, values in (("defaults", {}), ("home-net", HOME)):
        headers, _ = load_ids_file(
            community_rules,
            variables=SnortVariables().with_values(values),
            include_commented=True,
        )
        out[name] = list(headers.rules)
    return out


@pytest.mark.parametrize("variables", ["defaults", "home-net"])
@pytest.mark.parametrize(("name", "limit"), CASES)
def test_classbench_with_community_rules_classifies_like_linear_search(
    classbench_dir: Path,
    community_ids: dict[str, list[IdsRule]],
    name: str,
    limit: int | None,
    variables: str,
) -> None:
    acl = parse_classbench(classbench_dir / name, limit=limit)
    ids = community_ids[variables]
    compiled = compile_hsm(acl, ids)
    count = 3000 if SLOW else 600
    checked = assert_same_as_linear(compiled.entries, acl, ids, _packets(acl, ids[:300], count))
    assert checked > count
