"""Community ID v1: the spec's test vectors (JSON baselines and the pcaps they came from)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

import pytest

from spm.community_id import community_id_str
from spm.packet import decode


class Baseline(TypedDict):
    seed: int
    use_base64: bool


BASELINES: dict[str, Baseline] = {
    "baseline_deflt.json": {"seed": 0, "use_base64": True},
    "baseline_seed1.json": {"seed": 1, "use_base64": True},
    "baseline_nob64.json": {"seed": 0, "use_base64": False},
}


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_community_id_reproduces_spec_baseline(shared_data: Path, name: str) -> None:
    records = json.loads((shared_data / "community-id" / name).read_text())
    assert records
    for rec in records:
        got = community_id_str(
            rec["proto"], rec["saddr"], rec["daddr"], rec["sport"], rec["dport"], **BASELINES[name]
        )
        assert got == rec["communityid"], rec


def test_community_id_is_the_same_in_both_directions() -> None:
    out = community_id_str(6, "1.2.3.4", "5.6.7.8", 1122, 3344)
    back = community_id_str(6, "5.6.7.8", "1.2.3.4", 3344, 1122)
    assert out == back == "1:wCb3OG7yAFWelaUydu0D+125CLM="


def test_icmp_echo_and_reply_share_an_id_but_time_exceeded_is_one_way() -> None:
    assert community_id_str(1, "1.2.3.4", "5.6.7.8", 8, 0) == community_id_str(
        1, "5.6.7.8", "1.2.3.4", 0, 0
    )
    assert community_id_str(1, "1.2.3.4", "5.6.7.8", 11, 0) == "1:f/YiSyWqczrTgfUCZlBUnvHRcPk="


def test_decoded_pcap_packets_give_the_baseline_ids(shared_data: Path) -> None:
    from scapy.layers.inet import IP
    from scapy.layers.inet6 import IPv6
    from scapy.utils import rdpcap

    records = json.loads((shared_data / "community-id" / "baseline_deflt.json").read_text())
    seen: set[str] = set()
    protos: set[int] = set()
    for pcap in sorted((shared_data / "community-id").glob("*.pcap")):
        for frame in rdpcap(str(pcap)):
            layer = frame.getlayer(IP) or frame.getlayer(IPv6)
            assert layer is not None
            pkt = decode(bytes(layer))  # some captures are snapped: headers still decode
            seen.add(pkt.community_id())
            protos.add(pkt.proto)
    # Every flow of the captures is in the baseline, and every baseline flow whose protocol has a
    # capture here (all but RSVP) was found in it.
    assert seen <= {r["communityid"] for r in records}
    assert {r["communityid"] for r in records if r["proto"] in protos} <= seen
