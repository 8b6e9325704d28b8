"""The EVE log on disk: whole lines appended, even by two processes at once (with Snort, the
adapter and the AV beside it share the file)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from spm.eve import EveLog


def test_two_processes_append_whole_lines_to_one_file(tmp_path: Path) -> None:
    path = tmp_path / "eve.json"
    path.write_text('{"event_type":"before"}\n')  # appended to, not replaced
    filler = "x" * 20000  # larger than a stdio buffer
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            child = EveLog(path, "child")
            for i in range(300):
                child.write("stats", 0.0, n=i, filler=filler)
            child.close()
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    parent = EveLog(path, "parent")
    for i in range(300):
        parent.write("stats", 0.0, n=i, filler=filler)
    parent.close()
    _pid, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert records[0] == {"event_type": "before"}
    for name in ("parent", "child"):
        assert [r["n"] for r in records[1:] if r["spm"] == name] == list(range(300))


def _records(log: EveLog, path: Path) -> list[dict[str, object]]:
    log.close()
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_ipv6_alerts_and_bypasses_are_written_as_suricata_writes_them(tmp_path: Path) -> None:
    """IPv6 addresses in full (Suricata's PrintInet: eight groups of four hex digits), `ip_v`,
    Suricata's protocol names, ports for TCP and `icmp_type`/`icmp_code` for ICMPv6."""
    from spm.community_id import community_id_str

    path = tmp_path / "eve.json"
    log = EveLog(path, "s1")
    cid = community_id_str(6, "2001:db8::1", "2001:db8:0:1::80", 40000, 80)
    tcp = {"proto": "tcp", "src": "2001:db8::1", "dst": "2001:db8:0:1::80", "sport": 40000}
    alert = {
        "ts": 0.5,
        "sid": 1,
        "gid": 1,
        "rev": 1,
        "msg": "m",
        "classtype": "c",
        "action": "block",
        "flow": {**tcp, "dport": 80},
        "community_id": cid,
    }
    log.alert(alert)
    ping = {"proto": "ipv6-icmp", "src": "fe80::1", "dst": "ff02::1", "sport": 128, "dport": 0}
    log.alert(
        {**alert, "flow": ping, "community_id": community_id_str(58, "fe80::1", "ff02::1", 128, 0)}
    )
    log.bypass({"flow": {**tcp, "dport": 80}, "community_id": cid, "clean_bytes": 9}, 1.0)
    log.alert({**alert, "flow": {**tcp, "src": "10.0.0.1", "dst": "192.0.2.80", "dport": 80}})
    first, icmp, bypass, v4 = _records(log, path)
    assert {
        k: first[k] for k in ("src_ip", "src_port", "dest_ip", "dest_port", "proto", "ip_v")
    } == {
        "src_ip": "2001:0db8:0000:0000:0000:0000:0000:0001",
        "src_port": 40000,
        "dest_ip": "2001:0db8:0000:0001:0000:0000:0000:0080",
        "dest_port": 80,
        "proto": "TCP",
        "ip_v": 6,
    }
    assert first["community_id"] == cid == bypass["community_id"]
    assert bypass["src_ip"] == first["src_ip"] and bypass["event_type"] == "bypass"
    assert "src_port" not in icmp and "dest_port" not in icmp
    assert (icmp["proto"], icmp["icmp_type"], icmp["icmp_code"]) == ("IPv6-ICMP", 128, 0)
    assert (icmp["src_ip"], icmp["dest_ip"]) == (
        "fe80:0000:0000:0000:0000:0000:0000:0001",
        "ff02:0000:0000:0000:0000:0000:0000:0001",
    )
    assert (v4["src_ip"], v4["dest_ip"], v4["ip_v"]) == ("10.0.0.1", "192.0.2.80", 4)
