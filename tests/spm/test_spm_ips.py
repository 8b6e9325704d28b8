"""The built-in IPS engine: rule options, HTTP buffers, stream reassembly, the community rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from opengate.errors import ConfigError
from opengate.snort.rules import RawRule, parse_rule, parse_rules_file
from spm.config import IpsConfig, SpmConfig
from spm.ips.engine import BuiltinEngine, RuleSet
from spm.ips.loader import load_ruleset
from spm.ips.option_types import UnsupportedOptionError
from spm.ips.options import compile_rule, pcre_to_python, swap_greediness
from spm.verdict import Alert, Verdict
from spm.worker import Worker
from tests.spm.spm_packets import TcpConversation, http_get, http_response, udp


def raw_rule(text: str, line: int = 1) -> RawRule:
    return parse_rule(text, path="test.rules", line=line)


def _community(shared_data: Path) -> tuple[RawRule, ...]:
    path = shared_data / "snort" / "snort3-community.rules"
    return parse_rules_file(path, include_commented=True).rules


def _worker(rules: list[str], variables: dict[str, str] | None = None, **kw: object) -> Worker:
    rs = RuleSet([raw_rule(r, i + 1) for i, r in enumerate(rules)], variables or {})
    assert not rs.report.unsupported, rs.report.unsupported
    cfg = SpmConfig(name="t", interface="eth0", tags=(1,), **kw)  # type: ignore[arg-type]
    return Worker(cfg, BuiltinEngine(rs))


def _sids(w: Worker) -> list[int]:
    return [e.sid for e in w.events if isinstance(e, Alert)]


_PORTS = iter(range(20000, 60000))


def _http_exchange(
    w: Worker, request: bytes, body: bytes = b"ok", mss: int = 1400
) -> list[Verdict]:
    conv = TcpConversation(cport=next(_PORTS))
    pkts = (
        conv.handshake()
        + conv.send(True, request, mss)
        + conv.send(False, http_response(body), mss)
    )
    return [w.process(p) for p in pkts]


def test_http_uri_content_with_nocase_matches_the_normalized_uri() -> None:
    w = _worker(['alert http (msg:"cmd"; http_uri; content:"/cmd.exe",nocase; sid:1001; rev:2;)'])
    _http_exchange(w, http_get("/scripts/..%2f../winnt/system32/CMD.EXE?/c+dir"))
    alerts = [e for e in w.events if isinstance(e, Alert)]
    assert [(a.sid, a.rev, a.msg, a.action) for a in alerts] == [(1001, 2, "cmd", "alert")]


def test_block_rule_drops_the_packet_and_the_rest_of_the_flow() -> None:
    w = _worker(
        [
            'block tcp any any -> any 80 (msg:"x"; flow:to_server,established; '
            'http_uri; content:"evil"; sid:7;)'
        ]
    )
    conv = TcpConversation()
    verdicts = [
        w.process(p) for p in conv.handshake() + conv.send(True, b"GET /evil HTTP/1.1\r\n\r\n")
    ]
    assert verdicts[-1] is Verdict.BLOCK
    assert w.process(conv.send(False, b"HTTP/1.1 200 OK\r\n\r\n")[0]) is Verdict.BLOCK


def test_alert_action_drop_turns_alert_rules_into_blocks() -> None:
    w = _worker(
        ['alert tcp any any -> any any (msg:"x"; content:"evil"; sid:7;)'],
        ips=IpsConfig(alert_action="drop"),
    )
    conv = TcpConversation()
    verdicts = [w.process(p) for p in conv.handshake() + conv.send(True, b"evil")]
    assert verdicts[-1] is Verdict.BLOCK


def test_pattern_split_across_segments_and_reordered_is_found() -> None:
    w = _worker(['alert tcp any any -> any any (msg:"x"; content:"ATTACKSTRING"; sid:8;)'])
    conv = TcpConversation()
    pkts = conv.handshake() + conv.send(True, b"....ATTACK" + b"STRING....", mss=7)
    for p in pkts[:3] + pkts[4:] + pkts[3:4]:
        w.process(p)
    assert _sids(w) == [8]


def test_overlapping_segment_cannot_hide_a_pattern_already_received() -> None:
    w = _worker(['alert tcp any any -> any any (msg:"x"; content:"EVIL"; sid:9;)'])
    conv = TcpConversation()
    for p in conv.handshake():
        w.process(p)
    good = conv.send(True, b"EVIL")[0]
    conv.cseq -= 4
    w.process(good)
    w.process(conv.send(True, b"GOOD")[0])  # a retransmission with other bytes is ignored
    assert _sids(w) == [9]


@pytest.mark.parametrize(
    ("options", "payload", "hit"),
    [
        ('content:"abc",depth 3;', b"abcdef", True),
        ('content:"abc",depth 3;', b"xabcdef", False),
        ('content:"abc",offset 2;', b"abcabc", True),
        ('content:"abc",offset 4;', b"abcabc", False),
        ('content:"ab"; content:"ef",distance 2,within 2;', b"abcdef", True),
        ('content:"ab"; content:"ef",distance 0,within 3;', b"abcdef", False),
        ('content:"a"; content:"x",distance 0,within 1;', b"a.a.ax", True),  # backtracking
        ('content:"ab"; content:!"zz",distance 0;', b"abcd", True),
        ('content:"ab"; content:!"cd",distance 0;', b"abcd", False),
        ('content:"|41 42|C";', b"xABCx", True),
        ('content:"GET",nocase; pcre:"/^GET\\s+\\/[a-z]+\\.php/i";', b"get /index.PHP", True),
        ('content:"GET"; pcre:"/\\/admin/R";', b"/admin GET /x", False),
        ('content:"LEN"; byte_test:2,>,1000,0,relative;', b"LEN\x04\x00", True),
        ('content:"LEN"; byte_test:2,>,1000,0,relative,little;', b"LEN\x04\x00", False),
        ('content:"SZ"; byte_jump:1,0,relative; content:"END",within 3;', b"SZ\x02..END", True),
        ('content:"SZ"; byte_test:3,=,123,0,relative,string,dec;', b"SZ123", True),
        ('content:"abc"; isdataat:!1,relative;', b"xxabc", True),
        ('content:"abc"; isdataat:5,relative;', b"abc12", False),
        ('content:"abc"; bufferlen:<10;', b"abc", True),
        ('dsize:>4; content:"abc";', b"abc", False),
    ],
)
def test_payload_options(options: str, payload: bytes, hit: bool) -> None:
    w = _worker([f'alert udp any any -> any any (msg:"t"; {options} sid:10;)'])
    w.process(udp("10.0.0.1", "10.0.0.2", 1234, 5678, payload))
    assert bool(_sids(w)) is hit


def test_header_variables_negation_and_ports() -> None:
    rules = [
        'alert udp $EXTERNAL_NET any -> $HOME_NET 53 (msg:"in"; content:"q"; sid:20;)',
        'alert udp $HOME_NET any -> !$HOME_NET [1:100,!53] (msg:"out"; content:"q"; sid:21;)',
        'alert udp any any <> 10.9.0.0/16 7 (msg:"bi"; content:"q"; sid:22;)',
    ]
    w = _worker(rules, {"HOME_NET": "[10.0.0.0/8,!10.66.0.0/16]", "EXTERNAL_NET": "!$HOME_NET"})
    w.process(udp("192.0.2.1", "10.1.1.1", 999, 53, b"q"))
    w.process(udp("192.0.2.1", "10.66.1.1", 998, 53, b"q"))  # 10.66/16 is not home
    w.process(udp("10.1.1.1", "192.0.2.9", 997, 53, b"q"))  # port 53 excluded
    w.process(udp("10.1.1.1", "192.0.2.9", 996, 99, b"q"))
    w.process(udp("10.9.1.1", "192.0.2.9", 7, 995, b"q"))  # bidirectional, reversed
    assert _sids(w) == [20, 21, 22]


def test_flow_direction_and_flowbits() -> None:
    w = _worker(
        [
            'alert tcp any any -> any any (msg:"login"; flow:to_server,established; content:"USER";'
            " flowbits:set,logged; flowbits:noalert; sid:30;)",
            'alert tcp any any -> any any (msg:"after"; flow:to_client; content:"230";'
            " flowbits:isset,logged; sid:31;)",
            'alert tcp any any -> any any (msg:"wrongdir"; flow:to_server; content:"230"; sid:32;)',
        ]
    )
    conv = TcpConversation(sport=21)
    for p in conv.handshake() + conv.send(False, b"230 no\r\n") + conv.send(True, b"USER a\r\n"):
        w.process(p)
    assert _sids(w) == []
    for p in conv.send(False, b"230 ok\r\n"):
        w.process(p)
    assert _sids(w) == [31]


def test_flags_rule_matches_a_syn_without_payload() -> None:
    w = _worker(['alert tcp any any -> any any (msg:"syn"; flags:S; sid:40;)'])
    conv = TcpConversation()
    conv.handshake()
    w.process(conv.packets[0])
    w.process(conv.packets[1])
    assert _sids(w) == [40]


def test_http_header_and_client_body_and_status() -> None:
    w = _worker(
        [
            'alert http (msg:"ua"; http_header; content:"User-Agent|3A| evilbot"; sid:50;)',
            'alert http (msg:"body"; http_client_body; content:"cmd=rm"; sid:51;)',
            'alert http (msg:"resp"; http_stat_code; content:"404"; file_data; content:"trace";'
            " sid:52;)",
            'alert http (msg:"ua-field"; http_header:field user-agent; content:"evil",depth 4;'
            " sid:53;)",
        ]
    )
    req = (
        b"POST /a HTTP/1.1\r\nHost: x\r\nUser-Agent: evilbot/1.0\r\nContent-Length: 9\r\n\r\n"
        b"cmd=rm+x&"
    )
    conv = TcpConversation()
    pkts = conv.handshake() + conv.send(True, req, mss=20)
    pkts += conv.send(False, b"HTTP/1.1 404 NF\r\nContent-Length: 9\r\n\r\nbad trace", mss=25)
    for p in pkts:
        w.process(p)
    assert sorted(_sids(w)) == [50, 51, 52, 53]


def test_detection_filter_alerts_only_past_the_count() -> None:
    w = _worker(
        [
            'alert udp any any -> any any (msg:"df"; content:"x";'
            " detection_filter:track by_src, count 3, seconds 60; sid:60;)"
        ]
    )
    for i in range(3):
        w.process(udp("10.0.0.1", "10.0.0.2", 2000 + i, 9, b"x"))
    assert _sids(w) == []
    w.process(udp("10.0.0.1", "10.0.0.2", 2100, 9, b"x"))
    assert _sids(w) == [60]


@pytest.mark.parametrize(
    ("option", "reason_part"),
    [
        ("dce_iface:uuid 4b324fc8-1670-01d3-1278-5a47bf6ee188;", "not supported"),
        ('pcre:"/a/U";', "flag 'U'"),
        ('content:"x",offset var;', "not a number"),
        ("byte_extract:2,0,len;", "not supported"),
    ],
)
def test_unsupported_options_are_reported_not_dropped(option: str, reason_part: str) -> None:
    name = option.split(":", maxsplit=1)[0].split(";", maxsplit=1)[0]
    with pytest.raises(UnsupportedOptionError) as info:
        compile_rule(raw_rule(f'alert tcp any any -> any any (msg:"u"; {option} sid:70;)'))
    assert info.value.option.split()[0] == name or reason_part in info.value.reason
    assert reason_part in info.value.reason
    rs = RuleSet([raw_rule(f'alert tcp any any -> any any (msg:"u"; {option} sid:70;)', 12)], {})
    [item] = rs.report.unsupported
    assert (item.path, item.line, item.sid) == ("test.rules", 12, 70)


def test_pcre_dialect_differences_are_translated() -> None:
    assert swap_greediness(r"a.*b+?c{2,3}d*+[*?](?:x)?") == r"a.*?b+c{2,3}?d*+[*?](?:x)??"
    assert pcre_to_python(r"a[[:digit:]]+\z") == r"a[0-9]+\Z"
    assert pcre_to_python(r"^Basic\s+(?-i)QQ==") == r"^Basic\s+(?-i:QQ==)"


def test_community_rules_load_with_unsupported_ones_listed(shared_data: Path) -> None:
    raw = _community(shared_data)
    assert len(raw) == 3488
    rs = RuleSet(raw, {})
    report = rs.report
    assert report.loaded + len(report.unsupported) == 3488
    assert report.loaded > 3400
    options = report.unsupported_by_option()
    assert options["dce_iface"] == 15 and options["asn1"] == 10
    assert all(u.line > 0 and u.sid > 0 and u.reason for u in report.unsupported)


def test_enabled_community_rules_fire_on_their_attacks(shared_data: Path) -> None:
    raw = _community(shared_data)
    rs = RuleSet([r for r in raw if r.enabled], {})
    w = Worker(SpmConfig(name="t", interface="eth0", tags=(1,)), BuiltinEngine(rs))
    _http_exchange(w, http_get("/index.html"))
    assert _sids(w) == []
    # sid 21327: User-Agent ASafaWeb Scan (http_header); sid 26335: FBI Ransom Trojan (uri+pcre)
    _http_exchange(w, http_get("/nosignal.jpg?1.2345", extra="User-Agent: asafaweb.com\r\n"))
    assert sorted(_sids(w)) == [21327, 26335]


def test_broken_rules_file_is_refused_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.rules"
    path.write_text(
        'alert tcp any any -> any 80 (msg:"fine"; content:"a"; sid:1;)\n'
        "\n"
        'alert tcp any any -> any 80 (msg:"unclosed; sid:2;)\n'
    )
    with pytest.raises(ConfigError) as info:
        load_ruleset([str(path)], {})
    assert (info.value.path, info.value.line) == (str(path), 3)


def test_rules_file_loads_with_unsupported_rules_counted(tmp_path: Path) -> None:
    path = tmp_path / "mixed.rules"
    path.write_text(
        'alert tcp any any -> any 80 (msg:"ok"; content:"a"; sid:1;)\n'
        'alert tcp any any -> any 80 (msg:"dce"; dce_opnum:"15"; sid:2;)\n'
        '# alert tcp any any -> any 80 (msg:"off"; content:"b"; sid:3;)\n'
    )
    rs = load_ruleset([str(path)], {})
    assert [r.info.sid for r in rs.rules] == [1]
    assert [(u.sid, u.line, u.option) for u in rs.report.unsupported] == [(2, 2, "dce_opnum")]
    assert len(load_ruleset([str(path)], {}, include_disabled=True).rules) == 2
