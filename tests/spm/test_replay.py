"""`opengate spm replay`: a capture file inspected offline, alerts as the daemon's EVE records,
with the packets' capture times; link types, VLAN tags, pcapng, damaged and foreign files; the
CLI; Snort reading the same file (a stand-in script here, the real Snort 3 when installed)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from scapy.layers.inet import IP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.packet import Packet, Padding
from scapy.utils import PcapNgWriter, PcapWriter, wrpcap

from opengate.errors import ConfigError
from spm import cli
from spm.community_id import community_id_str
from spm.eve import EveLog
from spm.ips.snort import parse_alert_json, snort_lua, snort_pcap_command
from spm.packet import decode
from spm.pcap import CaptureReader
from spm.replay import ReplayStats, find_snort_binary, replay, replay_config
from tests.spm.spm_packets import TcpConversation, http_get, http_response, udp

REPO = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000  # 2023-11-14T22:13:20Z
CLIENT, SERVER = "10.0.0.1", "192.0.2.80"
RULES = (
    'alert http any any -> any any (msg:"test uri"; http_uri; content:"/evil"; '
    "sid:1000001; rev:1;)\n"
    'alert udp any any -> any 53 (msg:"test udp"; content:"badname"; sid:1000002; rev:3;)\n'
)
HTTP_CID = community_id_str(6, CLIENT, SERVER, 40000, 80)


def _ether(raw: bytes, ts: float, vlans: tuple[int, ...] = ()) -> Packet:
    """An Ethernet frame around an IP packet, padded to the 60-byte minimum as on the wire."""
    frame: Packet = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    for vid in vlans:
        frame = frame / Dot1Q(vlan=vid)
    frame = frame / (IPv6(raw) if raw[0] >> 4 == 6 else IP(raw))
    if len(frame) < 60:
        frame = frame / Padding(b"\0" * (60 - len(frame)))
    frame.time = ts
    return frame


def _raw(raw: bytes, ts: float) -> Packet:
    pkt: Packet = IPv6(raw) if raw[0] >> 4 == 6 else IP(raw)
    pkt.time = ts
    return pkt


def _http(path: str = "/evil/x", client: str = CLIENT, server: str = SERVER) -> list[bytes]:
    """A handshake, a GET of `path` (its 4th packet, at T0 + 0.75 below), and a response."""
    conv = TcpConversation(client=client, server=server)
    return (
        conv.handshake()
        + conv.send(True, http_get(path))
        + conv.send(False, http_response(b"hello"))
        + [conv.fin(True), conv.fin(False)]
    )


def _timed(raws: list[bytes], start: float = T0, step: float = 0.25) -> list[tuple[bytes, float]]:
    return [(r, start + i * step) for i, r in enumerate(raws)]


def _rules(tmp_path: Path) -> Path:
    path = tmp_path / "test.rules"
    path.write_text(RULES)
    return path


def _replay(tmp_path: Path, pcap: Path, **kw: Any) -> tuple[list[dict[str, Any]], ReplayStats]:
    out = io.StringIO()
    cfg = replay_config(kw.pop("config", None), [_rules(tmp_path)], kw.pop("variables", {}))
    stats = replay(pcap, cfg, EveLog("<test>", cfg.name, stream=out), **kw)
    return [json.loads(line) for line in out.getvalue().splitlines()], stats


def _http_alert(ts: str = "2023-11-14T22:13:20.750000+0000", spm: str = "replay") -> dict[str, Any]:
    """The daemon's EVE record of the test rule firing on the GET."""
    return {
        "timestamp": ts,
        "event_type": "alert",
        "spm": spm,
        "community_id": HTTP_CID,
        "src_ip": CLIENT,
        "src_port": 40000,
        "dest_ip": SERVER,
        "dest_port": 80,
        "proto": "TCP",
        "ip_v": 4,
        "alert": {
            "action": "allowed",
            "gid": 1,
            "signature_id": 1000001,
            "rev": 1,
            "signature": "test uri",
            "category": "",
            "severity": 3,
            "source": "ips",
        },
    }


# --- the built-in engine ------------------------------------------------------------------------


def test_http_request_in_an_ethernet_capture_gives_the_daemons_alert_record(
    tmp_path: Path,
) -> None:
    pcap = tmp_path / "http.pcap"
    frames = [_ether(r, ts) for r, ts in _timed(_http())]
    frames.append(Ether() / ARP())  # not IPv4: counted and skipped
    frames[-1].time = T0 + 5
    wrpcap(str(pcap), frames)
    records, stats = _replay(tmp_path, pcap)
    assert records == [_http_alert()]
    assert (stats.packets, stats.inspected, dict(stats.skipped)) == (8, 7, {"arp": 1})
    assert (stats.alerts, stats.flows, stats.incomplete) == (1, 1, None)


def test_benign_traffic_does_not_alert(tmp_path: Path) -> None:
    pcap = tmp_path / "benign.pcap"
    raws = [*_http("/index.html"), udp(CLIENT, "192.0.2.53", 5353, 53, b"\x12\x34goodname")]
    wrpcap(str(pcap), [_ether(r, ts) for r, ts in _timed(raws)])
    records, stats = _replay(tmp_path, pcap)
    assert records == []
    assert (stats.inspected, stats.alerts, stats.flows) == (8, 0, 2)


@pytest.mark.parametrize("linktype", [101, 228])
def test_udp_rule_fires_in_a_raw_ip_capture(tmp_path: Path, linktype: int) -> None:
    pcap = tmp_path / "dns.pcap"
    query = udp(CLIENT, "192.0.2.53", 5353, 53, b"\x12\x34badname")
    wrpcap(str(pcap), [_raw(query, T0 + 1.5)], linktype=linktype)
    records, stats = _replay(tmp_path, pcap)
    assert records == [
        {
            "timestamp": "2023-11-14T22:13:21.500000+0000",
            "event_type": "alert",
            "spm": "replay",
            "community_id": community_id_str(17, CLIENT, "192.0.2.53", 5353, 53),
            "src_ip": CLIENT,
            "src_port": 5353,
            "dest_ip": "192.0.2.53",
            "dest_port": 53,
            "proto": "UDP",
            "ip_v": 4,
            "alert": {
                "action": "allowed",
                "gid": 1,
                "signature_id": 1000002,
                "rev": 3,
                "signature": "test udp",
                "category": "",
                "severity": 3,
                "source": "ips",
            },
        }
    ]
    assert (stats.packets, stats.inspected, stats.alerts) == (1, 1, 1)


def test_one_vlan_tag_is_stripped_and_a_stack_of_two_is_skipped(tmp_path: Path) -> None:
    pcap = tmp_path / "vlan.pcap"
    frames = [_ether(r, ts, vlans=(42,)) for r, ts in _timed(_http())]
    frames.append(_ether(udp(CLIENT, "192.0.2.53", 1, 53, b"badname"), T0 + 9, vlans=(1, 2)))
    wrpcap(str(pcap), frames)
    records, stats = _replay(tmp_path, pcap)
    assert records == [_http_alert()]
    assert dict(stats.skipped) == {"vlan stack": 1}


def test_pcapng_with_nanosecond_timestamps(tmp_path: Path) -> None:
    pcap = tmp_path / "http.pcapng"
    writer = PcapNgWriter(str(pcap))
    for raw, ts in _timed(_http(), start=T0 + 0.000001):
        writer.write(_ether(raw, ts))
    writer.close()
    records, stats = _replay(tmp_path, pcap)
    assert records == [_http_alert("2023-11-14T22:13:20.750001+0000")]
    assert stats.format == "pcapng"
    nano = tmp_path / "nano.pcap"
    with PcapWriter(str(nano), nano=True) as w:
        for raw, ts in _timed(_http(), start=T0 + 0.000002):
            w.write(_ether(raw, ts))
    records, _stats = _replay(tmp_path, nano)
    assert records == [_http_alert("2023-11-14T22:13:20.750002+0000")]


def test_flows_time_out_on_capture_time(tmp_path: Path) -> None:
    pcap = tmp_path / "idle.pcap"
    dns = udp(CLIENT, "192.0.2.53", 5353, 53, b"\x12\x34goodname")
    wrpcap(str(pcap), [_raw(dns, T0), _raw(dns, T0 + 60), _raw(dns, T0 + 60 + 121)], linktype=101)
    _records, stats = _replay(tmp_path, pcap)
    assert stats.flows == 2  # the default flow_timeout is 120 s


def test_configuration_supplies_rules_variables_and_name(tmp_path: Path) -> None:
    rules = tmp_path / "home.rules"
    rules.write_text(
        'alert tcp $HOME_NET any -> any 80 (msg:"home"; http_uri; content:"evil"; sid:7;)\n'
    )
    config = tmp_path / "spm.yaml"
    config.write_text(
        f"name: edge1\ninterface: eth0\ntags: [1]\n"
        f"ips: {{rules: [{rules}], variables: {{HOME_NET: 192.168.0.0/16}}}}\n"
        "av: {enabled: yes}\n"
    )
    pcap = tmp_path / "http.pcap"
    wrpcap(str(pcap), [_ether(r, ts) for r, ts in _timed(_http())])
    records, _stats = _replay(tmp_path, pcap, config=config)
    assert [r["alert"]["signature_id"] for r in records] == [1000001]  # 10.0.0.1 is not home
    assert records[0]["spm"] == "edge1"
    records, _stats = _replay(tmp_path, pcap, config=config, variables={"HOME_NET": "10.0.0.0/8"})
    assert sorted(r["alert"]["signature_id"] for r in records) == [7, 1000001]
    assert not replay_config(config, [], {}).av.enabled


# --- IPv6 ---------------------------------------------------------------------------------------

CLIENT6, SERVER6 = "2001:db8:1::10", "2001:db8:2::80"
RULES6 = (
    'alert tcp $HOME_NET any -> [10.9.9.9,2001:db8:2::/64] 80 (msg:"v6 uri"; http_uri; '
    'content:"/evil"; sid:1000006; rev:2;)\n'
)


def test_ipv6_http_capture_gives_the_alert_with_the_ipv6_addresses(tmp_path: Path) -> None:
    """An IPv6 HTTP flow in an Ethernet capture, beside an IPv4 one: the IPv6 rule (its header
    a mixed list, HOME_NET of both families) fires on the IPv6 flow only, its record written
    with the addresses as Suricata writes them and the flow's Community ID."""
    pcap = tmp_path / "v6.pcap"
    raws = _http(client=CLIENT6, server=SERVER6) + _http()
    wrpcap(str(pcap), [_ether(r, T0 + i * 0.25) for i, r in enumerate(raws)])
    rules = tmp_path / "v6.rules"
    rules.write_text(RULES6)
    out = io.StringIO()
    home = {"HOME_NET": "[10.0.0.0/8,2001:db8:1::/48]"}
    stats = replay(pcap, replay_config(None, [rules], home), EveLog("-", "replay", stream=out))
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert records == [
        {
            "timestamp": "2023-11-14T22:13:20.750000+0000",
            "event_type": "alert",
            "spm": "replay",
            "community_id": community_id_str(6, CLIENT6, SERVER6, 40000, 80),
            "src_ip": "2001:0db8:0001:0000:0000:0000:0000:0010",
            "src_port": 40000,
            "dest_ip": "2001:0db8:0002:0000:0000:0000:0000:0080",
            "dest_port": 80,
            "proto": "TCP",
            "ip_v": 6,
            "alert": {
                "action": "allowed",
                "gid": 1,
                "signature_id": 1000006,
                "rev": 2,
                "signature": "v6 uri",
                "category": "",
                "severity": 3,
                "source": "ips",
            },
        }
    ]
    assert (stats.packets, stats.ip, stats.ipv6, stats.inspected) == (14, 14, 7, 14)
    assert (stats.alerts, stats.flows, dict(stats.skipped)) == (1, 2, {})
    assert "14 IP packets inspected (7 IPv6), 0 skipped, 1 alerts, 2 flows" in stats.summary()


@pytest.mark.parametrize(("linktype", "family"), [(101, 4), (101, 6), (228, 4), (229, 6)])
def test_raw_ip_link_types_carry_their_family(tmp_path: Path, linktype: int, family: int) -> None:
    """Link type 101 (raw IP) carries both families; 228 only IPv4, 229 only IPv6: a packet of
    the other family there is skipped."""
    client, resolver = ("10.0.0.1", "192.0.2.53") if family == 4 else (CLIENT6, "2001:db8::53")
    other = ("10.0.0.1", "192.0.2.53") if family == 6 else (CLIENT6, "2001:db8::53")
    query = udp(client, resolver, 5353, 53, b"\x12\x34badname")
    wrong = udp(*other, 5353, 53, b"\x12\x34badname")
    pcap = tmp_path / "dns.pcap"
    wrpcap(str(pcap), [_raw(query, T0), _raw(wrong, T0 + 1)], linktype=linktype)
    records, stats = _replay(tmp_path, pcap)
    expected_ids = [community_id_str(17, client, resolver, 5353, 53)]
    if linktype == 101:
        expected_ids.append(community_id_str(17, *other, 5353, 53))
    assert [r["community_id"] for r in records] == expected_ids
    assert records[0]["ip_v"] == family
    assert dict(stats.skipped) == ({} if linktype == 101 else {"not ip": 1})


def test_ipv6_extension_headers_and_a_vlan_tag_are_walked(tmp_path: Path) -> None:
    from scapy.layers.inet import TCP, UDP
    from scapy.layers.inet6 import IPv6ExtHdrDestOpt, IPv6ExtHdrHopByHop, IPv6ExtHdrRouting
    from scapy.packet import Raw

    query = (
        IPv6(src=CLIENT6, dst="2001:db8::53")
        / IPv6ExtHdrHopByHop()
        / IPv6ExtHdrRouting(addresses=["2001:db8::53"], segleft=0)
        / IPv6ExtHdrDestOpt()
        / UDP(sport=5353, dport=53)
        / Raw(b"\x12\x34badname")
    )
    probe = IPv6(src=CLIENT6, dst="2001:db8::80") / TCP(sport=1, dport=80, flags="S")
    pcap = tmp_path / "ext.pcap"
    wrpcap(str(pcap), [_ether(bytes(query), T0, vlans=(7,)), _ether(bytes(probe), T0 + 1)])
    records, stats = _replay(tmp_path, pcap)
    assert [r["alert"]["signature_id"] for r in records] == [1000002]
    assert records[0]["dest_ip"] == "2001:0db8:0000:0000:0000:0000:0000:0053"
    assert (stats.inspected, stats.ipv6, stats.flows) == (2, 2, 2)


# --- bad input ----------------------------------------------------------------------------------


def test_truncated_capture_keeps_the_alerts_before_the_cut(tmp_path: Path) -> None:
    pcap = tmp_path / "cut.pcap"
    wrpcap(str(pcap), [_ether(r, ts) for r, ts in _timed(_http())])
    data = pcap.read_bytes()
    pcap.write_bytes(data[:-10])  # the last record (the server's FIN) loses its end
    records, stats = _replay(tmp_path, pcap)
    assert records == [_http_alert()]
    assert stats.packets == 6
    assert stats.incomplete is not None
    assert "truncated packet record" in stats.incomplete and "after 6 packets" in stats.incomplete


def test_files_that_are_not_captures_are_refused(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello, not a capture\n")
    with pytest.raises(ConfigError, match=r"notes.txt: not a pcap or pcapng file"):
        CaptureReader(text)
    with pytest.raises(ConfigError, match=r"missing.pcap: cannot read the capture"):
        CaptureReader(tmp_path / "missing.pcap")
    sll = tmp_path / "sll.pcap"
    wrpcap(str(sll), [_raw(udp(CLIENT, SERVER, 1, 2, b"x"), T0)], linktype=113)
    with pytest.raises(ConfigError, match=r"link type 113 \(LINUX_SLL\) is not supported"):
        _replay(tmp_path, sll)
    with pytest.raises(ConfigError, match=r"nope.rules: no such rules file"):
        replay(
            sll, replay_config(None, [tmp_path / "nope.rules"], {}), EveLog("-", "r", io.StringIO())
        )


# --- the CLI ------------------------------------------------------------------------------------


def _spm(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spm", "--log-level", "warning", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def test_cli_writes_eve_to_stdout_or_a_file_and_a_summary_to_stderr(tmp_path: Path) -> None:
    pcap = tmp_path / "http.pcap"
    frames = [_ether(r, ts) for r, ts in _timed(_http())]
    frames.append(Ether() / ARP())
    wrpcap(str(pcap), frames)
    rules = _rules(tmp_path)
    out = _spm("replay", str(pcap), "--rules", str(rules), "--var", "HOME_NET=10.0.0.0/8")
    assert out.returncode == 0, out.stderr
    assert [json.loads(line) for line in out.stdout.splitlines()] == [_http_alert()]
    assert (
        f"replay {pcap} (pcap, engine builtin): 8 packets read, 7 IP packets inspected, "
        "1 skipped (arp 1), 1 alerts, 1 flows"
    ) in out.stderr
    eve = tmp_path / "eve.json"
    eve.write_text("old\n")
    out = _spm("replay", str(pcap), "--rules", str(rules), "--eve", str(eve))
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""
    assert [json.loads(line) for line in eve.read_text().splitlines()] == [_http_alert()]


def test_cli_exit_status_for_bad_input(tmp_path: Path) -> None:
    pcap = tmp_path / "http.pcap"
    wrpcap(str(pcap), [_ether(r, ts) for r, ts in _timed(_http())])
    rules = _rules(tmp_path)
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(pcap.read_bytes()[:-10])
    out = _spm("replay", str(cut), "--rules", str(rules))
    assert out.returncode == 1
    assert [json.loads(line)["alert"]["signature_id"] for line in out.stdout.splitlines()] == [
        1000001
    ]
    assert "spm: replay incomplete: " in out.stderr and "truncated packet record" in out.stderr
    for args, message in (
        ([str(tmp_path / "none.pcap")], "none.pcap: cannot read the capture"),
        ([str(rules)], "test.rules: not a pcap or pcapng file"),
        ([str(pcap), "--rules", str(tmp_path / "x.rules")], "x.rules: no such rules file"),
        ([str(pcap), "--var", "HOME_NET"], "expected NAME=VALUE"),
    ):
        out = _spm("replay", *args)
        assert out.returncode == 2, args
        assert "spm: error: " in out.stderr and message in out.stderr
        assert "Traceback" not in out.stderr


def test_engine_snort_without_snort_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pcap = tmp_path / "http.pcap"
    wrpcap(str(pcap), [_ether(r, ts) for r, ts in _timed(_http())])
    monkeypatch.setattr(cli, "find_snort_binary", lambda: None)
    assert cli.main(["replay", str(pcap), "--engine", "snort"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("spm: error: --engine snort: snort (Snort 3)")


# --- Snort --------------------------------------------------------------------------------------


def test_snort_pcap_command_and_lua(tmp_path: Path) -> None:
    cfg = replay_config(None, [_rules(tmp_path)], {"HOME_NET": "10.0.0.0/8"})
    lua = snort_lua(cfg, tmp_path)
    assert "mode = inline" in lua and f"include {tmp_path}/test.rules" in lua
    assert "seconds" in lua and 'HOME_NET = "10.0.0.0/8"' in lua
    argv = snort_pcap_command("/nowhere/bin/snort", tmp_path / "s.lua", tmp_path, Path("/c.pcap"))
    assert argv[:5] == ["/nowhere/bin/snort", "-c", str(tmp_path / "s.lua"), "-r", "/c.pcap"]
    joined = " ".join(argv)
    assert " -A alert_json " in joined and " -k none" in joined
    assert "-q" not in argv  # its closing statistics carry the processing time
    assert " -Q --daq dump --daq-var output=none " in joined  # inline, as the daemon's Snort
    assert "nfq" not in joined


def test_alert_json_with_capture_time() -> None:
    line = json.dumps(
        {
            "timestamp": "11/14-23:13:20.750000",  # Snort's local time: only the fraction counts
            "seconds": T0,
            "proto": "TCP",
            "src_addr": CLIENT,
            "src_port": 40000,
            "dst_addr": SERVER,
            "dst_port": 80,
            "gid": 1,
            "sid": 1000001,
            "rev": 1,
            "msg": "test uri",
            "class": "none",
            "priority": 3,
            "action": "allow",
        }
    )
    alert = parse_alert_json(line, capture_time=True)
    assert alert is not None
    assert alert["ts"] == T0 + 0.75 and alert["classtype"] == "" and alert["action"] == "alert"
    before = time.time()
    live = parse_alert_json(line)
    assert live is not None and live["ts"] >= before  # live: the time it is read


STAND_IN_SNORT = """#!/bin/sh
# stands in for snort -r: one alert_json line where -l says
while [ $# -gt 0 ]; do
  case "$1" in -l) dir="$2";; -r) pcap="$2";; esac
  shift
done
test -f "$pcap" || exit 3
printf '%s\\n' '{line}' > "$dir/alert_json.txt"
"""


def test_engine_snort_turns_snorts_alerts_into_the_same_records(tmp_path: Path) -> None:
    line = json.dumps(
        {
            "timestamp": "11/14-22:13:20.750000",
            "seconds": T0,
            "proto": "TCP",
            "src_addr": CLIENT,
            "src_port": 40000,
            "dst_addr": SERVER,
            "dst_port": 80,
            "gid": 1,
            "sid": 1000001,
            "rev": 1,
            "msg": "test uri",
            "class": "none",
            "priority": 3,
            "action": "allow",
        }
    )
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "snort"
    fake.write_text(STAND_IN_SNORT.format(line=line))
    fake.chmod(0o755)
    pcap = tmp_path / "http.pcap"
    wrpcap(str(pcap), [_ether(r, ts) for r, ts in _timed(_http())])
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    out = _spm("replay", str(pcap), "--rules", str(_rules(tmp_path)), "--engine", "snort", env=env)
    assert out.returncode == 0, out.stderr
    expected = _http_alert()
    expected["alert"]["source"] = "snort"
    assert [json.loads(x) for x in out.stdout.splitlines()] == [expected]
    assert "engine snort): 7 packets read, 7 IP packets, 0 others, 1 alerts" in out.stderr


@pytest.mark.parametrize("family", [4, 6])
def test_real_snort_and_the_builtin_engine_agree(tmp_path: Path, family: int) -> None:
    snort = find_snort_binary()
    if snort is None:
        pytest.skip("Snort 3 is not installed (no snort on PATH, no /opt/snort/bin/snort)")
    pcap = tmp_path / "mixed.pcap"
    client, server, resolver = (
        (CLIENT, SERVER, "192.0.2.53") if family == 4 else (CLIENT6, SERVER6, "2001:db8::53")
    )
    raws = [
        *_http(client=client, server=server),
        udp(client, resolver, 5353, 53, b"\x12\x34badname"),
    ]
    wrpcap(str(pcap), [_ether(r, ts) for r, ts in _timed(raws)])
    builtin, _stats = _replay(tmp_path, pcap)
    snorted, stats = _replay(tmp_path, pcap, engine="snort", snort=snort)
    assert stats.incomplete is None, stats.incomplete

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        a = r["alert"]
        fields = ("timestamp", "community_id", "src_ip", "src_port", "dest_ip", "dest_port")
        return (*(r[f] for f in fields), r["proto"], a["gid"], a["signature_id"], a["rev"])

    assert sorted(map(key, snorted)) == sorted(map(key, builtin))
    assert len(builtin) == 2 and {r["alert"]["source"] for r in snorted} == {"snort"}


def test_ethernet_padding_is_not_taken_for_tcp_payload() -> None:
    ack = TcpConversation(client=CLIENT, server=SERVER).handshake()[2]
    padded = bytes(_ether(ack, T0))[14:]
    assert len(padded) == 46 and len(ack) == 40
    pkt = decode(padded)
    assert pkt.error is None and pkt.payload == b""
