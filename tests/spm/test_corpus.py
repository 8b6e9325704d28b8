"""`spm.corpus`: the generator of traffic that should fire each rule (placement of contents by
offset/depth/distance/within, strings for pcres, well-formed packets and HTTP), checked without
Snort; `tests/spm/test_snort_differential.py` holds the engines to each other on it."""

# ruff: noqa: E501  (Snort rules and HTTP messages are kept one to a line)

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.utils import rdpcap

from opengate.snort.rules import parse_rule, parse_rules_text
from opengate.target import shared_data_dir
from spm.corpus import T0, CannotGenerate, build_buffers, flow_ids, generate, pcre_sample
from spm.eve import EveLog
from spm.ips.engine import RuleSet
from spm.ips.loader import load_ruleset
from spm.ips.option_types import CompiledRule, Content, Pcre
from spm.ips.options import LoadReport, compile_rule
from spm.pcap import CaptureReader, write_pcap
from spm.replay import replay, replay_config

REPO = Path(__file__).resolve().parents[2]
COMMUNITY = shared_data_dir() / "snort" / "snort3-community.rules"
RULES = """\
alert http any any -> any any (msg:"uri"; flow:to_server,established; http_uri; content:"/adm/"; content:"cmd="; distance:0; sid:3000001;)
alert http any any -> any any (msg:"ua field"; flow:to_server,established; http_header:field user-agent; content:"EvilBot/"; nocase; sid:3000002;)
alert http any any -> any any (msg:"cookie"; flow:to_server,established; http_cookie; content:"session=deadbeef"; sid:3000003;)
alert http any any -> any any (msg:"body"; flow:to_server,established; http_client_body; content:"passwd="; pcre:"/passwd=[a-f0-9]{8}\\x26/"; sid:3000004;)
alert http any any -> any any (msg:"status"; flow:to_client,established; http_stat_code; content:"403"; file_data; content:"<iframe src=|22|http"; sid:3000005;)
alert tcp any any -> any 9100 (msg:"raw"; flow:to_server,established; content:"PJL"; offset:2; depth:3; content:"FSDOWNLOAD"; distance:4; within:12; sid:3000006;)
alert udp any any -> any 53 (msg:"udp"; content:"|03|bad|07|example"; nocase; sid:3000007;)
alert http any any -> any any (msg:"uri length"; flow:to_server,established; http_uri; content:"/x.php"; bufferlen:>40; sid:3000008;)
alert tcp any any -> any 7 (msg:"dsize"; dsize:>60000; content:"x"; sid:3000009;)
"""


def _rule(text: str) -> CompiledRule:
    return compile_rule(parse_rule(text))


def _find_after(data: bytes, c: Content, start: int) -> int:
    """Where Snort would find `c` searching from `start` (its offset/depth/distance/within)."""
    if c.relative:
        lo = start + (c.distance or 0)
        hi = len(data) if c.within is None else lo + c.within
    else:
        lo = c.offset or 0
        hi = len(data) if c.depth is None else lo + c.depth
    hay, needle = (data.lower(), c.pattern.lower()) if c.nocase else (data, c.pattern)
    at = hay.find(needle, lo, hi)
    return at


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_contents_placed_where_the_rule_looks(seed: int) -> None:
    rule = _rule(
        'alert tcp any any -> any any (content:"AB"; offset:3; depth:4; content:"cd"; '
        'distance:2; within:6; content:"EF"; nocase; content:"!"; distance:0; within:1; sid:1;)'
    )
    data = build_buffers(rule, random.Random(seed))[("pkt_data", None)]
    cursor = 0
    for opt in rule.payload:
        assert isinstance(opt, Content)
        at = _find_after(data, opt, cursor)
        assert at >= 0, (opt, data)
        cursor = at + len(opt.pattern)


def test_conflicting_placements_are_refused() -> None:
    rule = _rule(
        'alert tcp any any -> any any (content:"AAAA"; depth:4; content:"BBBB"; depth:4; sid:1;)'
    )
    with pytest.raises(CannotGenerate, match=r"overlap|depth"):
        build_buffers(rule, random.Random(0))


def test_pcre_samples_match_most_community_pcres() -> None:
    if not COMMUNITY.is_file():
        pytest.skip(f"{COMMUNITY} is missing (the project's shared reference data)")
    rules = load_ruleset([str(COMMUNITY)], {}).rules
    pcres = [p for r in rules for p in r.payload if isinstance(p, Pcre) and not p.negated]
    found = 0
    for p in pcres:
        try:
            text = pcre_sample(p, random.Random(0))
        except CannotGenerate:
            continue
        assert p.regex.search(text), p.source
        found += 1
    assert len(pcres) > 150
    assert found >= 0.9 * len(pcres), f"{found} of {len(pcres)}"


def _corpus_rules() -> RuleSet:
    return RuleSet(parse_rules_text(RULES).rules, {}, LoadReport())


def test_packets_are_well_formed(tmp_path: Path) -> None:
    corpus = generate(_corpus_rules(), seed=0, benign=5)
    pcap = tmp_path / "c.pcap"
    corpus.write_pcap(pcap)
    frames = rdpcap(str(pcap))
    assert len(frames) == sum(len(f.packets) for f in corpus.flows)
    packets = [p for f in corpus.flows for p in f.packets]
    for frame, packet in zip(frames, packets, strict=True):
        assert bytes(frame)[14 : 14 + len(packet)] == packet
        ip = IP(packet)
        assert ip.len == len(packet)
        fresh = IP(packet)
        l4 = TCP if TCP in ip else UDP
        del fresh.chksum
        del fresh[l4].chksum
        fresh = IP(bytes(fresh))  # scapy computes the checksums again
        assert (ip.chksum, ip[l4].chksum) == (fresh.chksum, fresh[l4].chksum)
    # one TCP connection: the handshake, sequence numbers that follow the data
    first = corpus.rule_flows[0].packets
    syn, synack, ack = (IP(p)[TCP] for p in first[:3])
    assert (syn.flags, synack.flags, ack.flags) == ("S", "SA", "A")
    assert synack.ack == syn.seq + 1 and ack.seq == syn.seq + 1
    data = IP(first[3])[TCP]
    assert data.seq == ack.seq and IP(first[4])[TCP].ack == data.seq + len(data.payload)


def test_each_rule_flow_fires_its_rule_in_the_builtin_engine(tmp_path: Path) -> None:
    corpus = generate(_corpus_rules(), seed=3, benign=8)
    assert corpus.skipped == {"packet field options (flags, dsize, ttl, ...)": 1}
    assert {f.sid for f in corpus.rule_flows} == set(range(3000001, 3000009))
    pcap = tmp_path / "c.pcap"
    corpus.write_pcap(pcap)
    rules = tmp_path / "r.rules"
    rules.write_text(RULES)
    eve_path = tmp_path / "eve.json"
    with eve_path.open("w") as out:
        eve = EveLog(eve_path, "t", stream=out)
        stats = replay(pcap, replay_config(None, [rules], {}), eve, "builtin")
    ids = flow_ids(corpus)
    fired = set()
    for line in eve_path.read_text().splitlines():
        rec = json.loads(line)
        fired.add((ids[rec["community_id"]].sid, rec["alert"]["signature_id"]))
    assert fired == {(sid, sid) for sid in range(3000001, 3000009)}  # benign flows: nothing
    assert stats.alerts == 8


def test_an_ipv6_corpus_is_well_formed_and_fires_each_rule_in_the_builtin_engine(
    tmp_path: Path,
) -> None:
    """family=6: every packet IPv6 (checksums as scapy computes them), from 2001:db8::/32 or
    the rule header's IPv6 addresses; a rule whose header names IPv4 addresses only is skipped."""
    from scapy.layers.inet6 import IPv6

    text = RULES + (
        'alert tcp any any -> 2001:db8:77::/48 8080 (msg:"v6 dst"; content:"hello6"; sid:3000010;)\n'
        'alert tcp any any -> 192.0.2.0/24 8080 (msg:"v4 dst"; content:"hello4"; sid:3000011;)\n'
    )
    corpus = generate(
        RuleSet(parse_rules_text(text).rules, {}, LoadReport()), seed=4, benign=4, family=6
    )
    assert corpus.skipped == {
        "packet field options (flags, dsize, ttl, ...)": 1,
        "no IPv6 address in the rule's header": 1,
    }
    assert {f.sid for f in corpus.rule_flows} == {*range(3000001, 3000009), 3000010}
    v6 = next(f for f in corpus.flows if f.sid == 3000010)
    assert v6.server == "2001:db8:77::" and v6.sport == 8080
    for packet in (p for f in corpus.flows for p in f.packets):
        ip = IPv6(packet)
        assert ip.version == 6 and ip.plen == len(packet) - 40
        l4 = TCP if TCP in ip else UDP
        fresh = IPv6(packet)
        del fresh[l4].chksum
        assert ip[l4].chksum == IPv6(bytes(fresh))[l4].chksum
    pcap = tmp_path / "c6.pcap"
    corpus.write_pcap(pcap)
    assert {bytes(f)[12:14] for f in rdpcap(str(pcap))} == {b"\x86\xdd"}
    rules = tmp_path / "r.rules"
    rules.write_text(text)
    out = tmp_path / "eve.json"
    with out.open("w") as stream:
        stats = replay(pcap, replay_config(None, [rules], {}), EveLog(out, "t", stream=stream))
    ids = flow_ids(corpus)
    fired = {
        (ids[r["community_id"]].sid, r["alert"]["signature_id"], r["ip_v"])
        for r in map(json.loads, out.read_text().splitlines())
    }
    assert fired == {(sid, sid, 6) for sid in [*range(3000001, 3000009), 3000010]}
    assert stats.ipv6 == stats.packets


def test_cli_writes_a_corpus_and_compare_needs_snort(tmp_path: Path) -> None:
    rules = tmp_path / "r.rules"
    rules.write_text(RULES)
    out = tmp_path / "c.pcap"
    run = subprocess.run(
        [sys.executable, "-m", "spm", "corpus", str(rules), "--out", str(out), "--benign", "3"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert re.search(
        r"8 rule flows and 3 benign, \d+ bytes of IP; rules not generated: 1 ", run.stdout
    )
    assert out.stat().st_size > 1000
    run = subprocess.run(
        [sys.executable, "-m", "spm", "corpus", str(rules), "--out", str(out), "--ipv6"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert {bytes(f)[12:14] for f in rdpcap(str(out))} == {b"\x86\xdd"}  # IPv6 frames only
    env_path = "/nonexistent"
    run = subprocess.run(
        [sys.executable, "-m", "spm", "corpus", str(rules), "--out", str(out), "--compare"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": env_path, "SNORT_PREFIX": env_path},
    )
    if run.returncode != 2:  # Snort under /opt/snort is found whatever PATH says
        pytest.skip("Snort 3 is installed under /opt/snort: the refusal is not reachable")
    assert "snort (Snort 3) is not installed" in run.stderr


def test_written_pcap_reads_back_frame_for_frame(tmp_path: Path) -> None:
    frames = [(T0 + 0.000001, b"\x02" * 60), (T0 + 1.9999996, b"\x03" * 70), (T0 + 5.5, b"x" * 61)]
    path = tmp_path / "w.pcap"
    write_pcap(path, frames)
    with CaptureReader(path) as reader:
        read = [(f.ts, f.linktype, f.data) for f in reader]
    assert [(round(ts, 6), data) for ts, _, data in read] == [
        (round(ts, 6), data) for ts, data in frames
    ]
    assert {linktype for _, linktype, _ in read} == {1}
