"""Fixtures and helpers for the HSM compiler tests: the shared ClassBench and Snort data, rule and
packet generators (hypothesis strategies) and packet sets that exercise every segment edge."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import strategies as st

from controller.hsm.rules import AclAction, AclRule, IdsRule
from opengate.fields import PORT_MAX, Packet, PortRange, Prefix, ProtoMatch

CLASSBENCH_SETS = ("acl1_1k", "fw1_1k", "ipc1_1k", "acl1_10k", "fw1_10k", "ipc1_10k")


@pytest.fixture(scope="session")
def classbench_dir(shared_data: Path) -> Path:
    path = shared_data / "classbench"
    if not path.is_dir():
        pytest.skip(f"ClassBench sets missing: {path}")
    return path


@pytest.fixture(scope="session")
def community_rules(shared_data: Path) -> Path:
    path = shared_data / "snort" / "snort3-community.rules"
    if not path.is_file():
        pytest.skip(f"Snort community rules missing: {path}")
    return path


# -- strategies --------------------------------------------------------------------------------
# Small pools of values so that rules overlap, nest and share edges (where bugs live).

_BASES = (0x0A000000, 0x0A010000, 0x0A010100, 0xC0A80000, 0xFFFFFFFF, 0x00000000)
_PORT_EDGES = (0, 1, 79, 80, 81, 443, 1023, 1024, 8080, PORT_MAX - 1, PORT_MAX)


@st.composite
def prefixes(draw: st.DrawFn) -> Prefix:
    base = draw(st.sampled_from(_BASES))
    length = draw(st.sampled_from((0, 1, 8, 15, 16, 23, 24, 31, 32)))
    noise = draw(st.integers(0, 255))
    return Prefix.masked(base | noise, length)


@st.composite
def port_ranges(draw: st.DrawFn) -> PortRange:
    a = draw(st.sampled_from(_PORT_EDGES) | st.integers(0, PORT_MAX))
    b = draw(st.sampled_from(_PORT_EDGES) | st.integers(0, PORT_MAX))
    return PortRange(min(a, b), max(a, b))


protos = st.sampled_from(
    (ProtoMatch(0, 0), ProtoMatch(6), ProtoMatch(17), ProtoMatch(1), ProtoMatch(4, 0xFC))
)


def _field(strategy: st.SearchStrategy[object], any_value: tuple[object, ...]) -> st.SearchStrategy:
    # Mostly one value, sometimes "any", sometimes a short list (a union), rarely empty.
    return st.one_of(
        st.tuples(strategy),
        st.just(any_value),
        st.lists(strategy, min_size=2, max_size=3).map(tuple),
    )


@st.composite
def acl_rules(draw: st.DrawFn) -> AclRule:
    return AclRule(
        src=draw(_field(prefixes(), (Prefix(0, 0),))),
        dst=draw(_field(prefixes(), (Prefix(0, 0),))),
        sport=draw(_field(port_ranges(), (PortRange(0, PORT_MAX),))),
        dport=draw(_field(port_ranges(), (PortRange(0, PORT_MAX),))),
        proto=draw(_field(protos, (ProtoMatch(0, 0),))),
        action=draw(st.sampled_from(list(AclAction))),
    )


@st.composite
def ids_rule_lists(draw: st.DrawFn, max_size: int = 8) -> list[IdsRule]:
    count = draw(st.integers(0, max_size))
    out = []
    for index in range(count):
        base = draw(acl_rules())
        out.append(
            IdsRule(
                src=base.src,
                dst=base.dst,
                sport=base.sport,
                dport=base.dport,
                proto=base.proto,
                bidirectional=draw(st.booleans()),
                class_id=draw(st.integers(0, 5)),
                rule_id=index,
            )
        )
    return out


# -- packets -----------------------------------------------------------------------------------


def _pick_addr(rng: random.Random, prefixes: Sequence[Prefix]) -> int:
    prefix = rng.choice(prefixes)
    if prefix.length == 32:
        return prefix.value
    return prefix.value | rng.getrandbits(32 - prefix.length)


def rule_packets(rules: Sequence[AclRule | IdsRule], count: int, seed: int = 1) -> Iterator[Packet]:
    """Packets inside rules (each field drawn from a random rule's field), plus random ones."""
    rng = random.Random(seed)
    usable = [r for r in rules if r.src and r.dst and r.sport and r.dport and r.proto]
    for _ in range(count):
        if not usable or rng.random() < 0.1:
            yield Packet(
                rng.getrandbits(32),
                rng.getrandbits(32),
                rng.getrandbits(16),
                rng.getrandbits(16),
                rng.choice((1, 6, 17, 47, rng.getrandbits(8))),
            )
            continue
        rule = rng.choice(usable)
        other = rng.choice(usable) if rng.random() < 0.3 else rule
        sport = rng.choice(rule.sport)
        dport = rng.choice(other.dport)
        proto = rng.choice(rule.proto)
        proto_value = proto.value | (rng.getrandbits(8) & ~proto.mask & 0xFF)
        yield Packet(
            _pick_addr(rng, rule.src),
            _pick_addr(rng, other.dst),
            rng.randint(sport.low, sport.high),
            rng.randint(dport.low, dport.high),
            proto_value,
        )


def edge_values(rules: Sequence[AclRule | IdsRule]) -> dict[str, set[int]]:
    """Every segment edge of every field, and its neighbours (+-1)."""
    edges: dict[str, set[int]] = {"src": set(), "dst": set(), "sport": set(), "dport": set()}
    for rule in rules:
        for name, prefix_list in (("src", rule.src), ("dst", rule.dst)):
            for p in prefix_list:
                for v in (p.first - 1, p.first, p.last, p.last + 1):
                    if 0 <= v <= 0xFFFFFFFF:
                        edges[name].add(v)
        for name, ranges in (("sport", rule.sport), ("dport", rule.dport)):
            for r in ranges:
                for v in (r.low - 1, r.low, r.high, r.high + 1):
                    if 0 <= v <= PORT_MAX:
                        edges[name].add(v)
    return edges


def edge_packets(rules: Sequence[AclRule | IdsRule], seed: int = 2) -> Iterator[Packet]:
    """For each edge value of each field, one packet with that value and the other fields taken
    from a rule-derived packet; protocols 0..255 once each."""
    rng = random.Random(seed)
    base = list(rule_packets(rules, 64, seed))
    edges = edge_values(rules)
    for name in ("src", "dst", "sport", "dport"):
        for value in sorted(edges[name]):
            p = rng.choice(base)
            fields = {"src": p.src, "dst": p.dst, "sport": p.sport, "dport": p.dport}
            fields[name] = value
            yield Packet(fields["src"], fields["dst"], fields["sport"], fields["dport"], p.proto)
    for proto in range(256):
        p = rng.choice(base)
        yield Packet(p.src, p.dst, p.sport, p.dport, proto)
