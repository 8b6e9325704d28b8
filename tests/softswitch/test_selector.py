"""Weighted action selectors choose the member simple_switch_grpc would choose.

The expected handles and choices below are worked out by hand from PI's
proto/frontend/src/action_prof_mgr.cpp (a weight-w member is w BMv2 members: itself plus w-1
copies created in member-id order, lowest free handle first, freed when no group needs them) and
behavioral-model's PI/src/group_selection.cpp (the group's handles in increasing order, indexed by
hash % count).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from softswitch import hashes
from softswitch.engine import Dataplane
from softswitch.errors import LoadError
from softswitch.program import load_program
from softswitch.tables import ActionProfile, ActionSpec, Group, Member
from tests.softswitch.conftest import FIXTURES

MakeDp = Callable[..., Dataplane]


def profile() -> ActionProfile:
    return ActionProfile("p", 1, 1024, "crc16", None)


def spec() -> ActionSpec:
    return ActionSpec("fwd", 1, [("port", 9)], lambda p, f, ad: None)


def members(prof: ActionProfile, *ids: int) -> None:
    for mid in ids:
        prof.add_member(Member(mid, spec(), (mid,)))


def order(group: Group) -> list[int]:
    return [m.id for m in group.expanded]


def test_members_take_the_lowest_free_handle_in_insertion_order() -> None:
    prof = profile()
    members(prof, 5, 2, 9)
    assert [prof.members[m].handles for m in (5, 2, 9)] == [[0], [1], [2]]
    prof.delete_member(2)
    members(prof, 7)
    assert prof.members[7].handles == [1]


def test_weight_copies_are_new_handles_allocated_in_member_id_order() -> None:
    prof = profile()
    members(prof, 1, 2)  # handles 0 and 1
    group = Group(10, 0)
    prof.set_group_members(group, {2: 3, 1: 2})
    # member 1 gets copy handle 2, then member 2 gets 3 and 4: BMv2's group is
    # [0:m1, 1:m2, 2:m1, 3:m2, 4:m2], not the members one after the other.
    assert prof.members[1].handles == [0, 2]
    assert prof.members[2].handles == [1, 3, 4]
    assert order(group) == [1, 2, 1, 2, 2]


def test_lowering_a_weight_frees_the_last_copies_after_the_update() -> None:
    prof = profile()
    members(prof, 1, 2)
    group = Group(10, 0)
    prof.set_group_members(group, {1: 3, 2: 1})  # m1: 0, 2, 3
    # PI creates m2's copy before it frees m1's (cleanup comes last): the copy is handle 4.
    prof.set_group_members(group, {1: 1, 2: 2})
    assert prof.members[1].handles == [0]
    assert prof.members[2].handles == [1, 4]
    assert order(group) == [1, 2, 2]
    members(prof, 3)
    assert prof.members[3].handles == [2]


def test_copies_stay_while_another_group_needs_them() -> None:
    prof = profile()
    members(prof, 1, 2)
    g1, g2 = Group(1, 0), Group(2, 0)
    prof.set_group_members(g1, {1: 3})  # copies 2, 3
    prof.set_group_members(g2, {1: 2, 2: 1})  # uses m1's handles 0, 2
    assert order(g2) == [1, 2, 1]
    prof.delete_group(1)
    assert prof.members[1].handles == [0, 2]  # handle 3 freed, 2 still used by group 2
    members(prof, 3)
    assert prof.members[3].handles == [3]


def test_member_is_chosen_by_crc16_modulo_count_over_handle_order(make_dataplane: MakeDp) -> None:
    dp = make_dataplane("l3")
    pc = dp.program.tables["MyIngress.port_class"]
    set_class = pc.actions_by_name("MyIngress.set_class")
    assert set_class is not None
    pc.insert(pc.new_entry(((0, 65535),), 1, set_class, (1,)))
    steer = dp.program.tables["MyIngress.steer"]
    prof = steer.profile
    fwd = steer.actions_by_name("MyIngress.forward")
    assert prof is not None and fwd is not None and prof.selector_algo == "crc16"
    prof.add_member(Member(1, fwd, (21,)))
    prof.add_member(Member(2, fwd, (22,)))
    group = Group(1, 0)
    prof.set_group_members(group, {1: 2, 2: 3})
    steer.insert(steer.new_entry((1,), 0, None, (), group=group))
    by_handle = [21, 22, 21, 22, 22]
    selector = next(
        p["selector"]
        for pipe in dp.program.doc["pipelines"]
        for p in pipe["action_profiles"]
        if p["name"] == prof.name
    )
    for sport in range(1000, 1200, 13):
        frame = bytes(
            Ether(dst="00:00:00:00:00:02")
            / IP(src="10.0.0.1", dst="10.0.0.2")
            / TCP(sport=sport, dport=80)
        )
        [(port, _)] = dp.process(1, frame)
        fields = {  # the selector's inputs, in the JSON's order: name -> (value, width)
            "src": (0x0A000001, 32),
            "dst": (0x0A000002, 32),
            "protocol": (6, 8),
            "metadata_t.sport": (sport, 16),
            "metadata_t.dport": (80, 16),
        }
        bits = n = 0
        for item in selector["input"]:
            value, width = fields[item["value"][1]]
            bits = (bits << width) | value
            n += width
        key = (bits << (-n % 8)).to_bytes((n + 7) // 8, "big")
        assert port == by_handle[hashes.crc16(key) % 5]


def test_a_field_named_with_a_struct_prefix_is_refused_not_guessed() -> None:
    doc = json.loads((FIXTURES / "l3.json").read_text())
    for pipe in doc["pipelines"]:
        for prof in pipe["action_profiles"]:
            for item in prof.get("selector", {}).get("input", []):
                item["value"][1] = "userMetadata." + item["value"][1]
    with pytest.raises(LoadError, match=r"has no field 'userMetadata\."):
        load_program(doc)


def test_hash_algorithms_unknown_to_bmv2_are_refused() -> None:
    doc = json.loads((FIXTURES / "l3.json").read_text())
    for pipe in doc["pipelines"]:
        for prof in pipe["action_profiles"]:
            if "selector" in prof:
                prof["selector"]["algo"] = "random"
    with pytest.raises(LoadError, match="unsupported hash algorithm 'random'"):
        load_program(doc)


def test_xxh64_matches_the_reference_vectors() -> None:
    assert hashes.xxh64(b"") == 0xEF46DB3751D8E999
    assert hashes.xxh64(b"Nobody inspects the spammish repetition") == 0xFBCEA83C8A378BF1


def test_csum16_straight_from_the_bits_equals_csum16_of_their_bytes() -> None:
    import random

    rng = random.Random(9)
    for nbits in [
        0,
        1,
        7,
        8,
        15,
        16,
        17,
        160,
        161,
        480,
        *(rng.randrange(1, 600) for _ in range(200)),
    ]:
        value = rng.getrandbits(nbits) if nbits else 0
        data = (value << (-nbits % 8)).to_bytes((nbits + 7) // 8, "big")
        assert hashes.csum16_of_int(value, nbits) == hashes.csum16(data), nbits
    assert hashes.csum16_of_int((1 << 32) - 1, 32) == hashes.csum16(b"\xff" * 4)
