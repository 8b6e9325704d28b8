"""The Snort adapter: its snort.lua and command line, alert_json lines to CPM alerts, when it is
chosen, and a run with a stand-in `snort` (a script) in a network namespace."""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from opengate.errors import ConfigError
from opengate.netutil import stop_process
from spm.capture import NF_DROP, QueuedPacket
from spm.community_id import community_id_str
from spm.config import AvConfig, BypassConfig, IpsConfig, QueueConfig, SpmConfig
from spm.daemon import SpmDaemon
from spm.ips.snort import (
    SnortDaemon,
    av_beside_snort_config,
    find_snort,
    parse_alert_json,
    snort_command,
    snort_lua,
)
from tests.helpers import skip_unless_root, skip_unless_tool
from tests.spm.spm_netns import netns, sh, wait_for

REPO = Path(__file__).resolve().parents[2]


def _cfg(**kw: object) -> SpmConfig:
    base: dict[str, object] = {
        "name": "sn",
        "interface": "ogsn0",
        "tags": (5,),
        "workers": 3,
        "queue": QueueConfig(num=6, length=500, fail_open=True),
        "ips": IpsConfig(
            rules=("/r/a.rules", "/r/b.rules"),
            variables={"HOME_NET": "10.0.0.0/8", "HTTP_PORTS": "[80,8080]"},
        ),
    }
    base.update(kw)
    return SpmConfig(**base)  # type: ignore[arg-type]


def test_snort_lua_carries_rules_variables_and_inline_mode(tmp_path: Path) -> None:
    lua = snort_lua(_cfg(), tmp_path)
    assert 'HOME_NET = "10.0.0.0/8"' in lua and 'EXTERNAL_NET = "any"' in lua
    assert 'default_variables.ports.HTTP_PORTS = "[80,8080]"' in lua
    assert "include /r/a.rules" in lua and "include /r/b.rules" in lua
    assert "mode = inline" in lua and "alert_json" in lua
    assert lua.index("HOME_NET") < lua.index("include 'snort_defaults.lua'")


def test_snort_command_reads_the_queue_through_daq_nfq(tmp_path: Path) -> None:
    argv = snort_command("/usr/bin/snort", _cfg(), tmp_path / "s.lua", tmp_path)
    assert argv[:2] == ["/usr/bin/snort", "-c"]
    joined = " ".join(argv)
    assert "-Q --daq nfq -i 6" in joined and "-z 3" in joined
    assert "queue_maxlen=500" in joined and "fail_open" in joined


def test_alert_json_line_becomes_a_cpm_alert() -> None:
    line = json.dumps(
        {
            "timestamp": "11/22-07:30:00.1",
            "proto": "TCP",
            "src_addr": "10.0.0.1",
            "src_port": 40000,
            "dst_addr": "192.0.2.80",
            "dst_port": 80,
            "gid": 1,
            "sid": 21327,
            "rev": 6,
            "msg": "BLACKLIST User-Agent",
            "class": "network-scan",
            "action": "would_drop",
        }
    )
    alert = parse_alert_json(line)
    assert alert is not None
    assert (alert["sid"], alert["gid"], alert["rev"], alert["action"]) == (21327, 1, 6, "block")
    assert alert["community_id"] == community_id_str(6, "10.0.0.1", "192.0.2.80", 40000, 80)
    assert alert["flow"] == {
        "proto": "tcp",
        "src": "10.0.0.1",
        "dst": "192.0.2.80",
        "sport": 40000,
        "dport": 80,
    }
    assert parse_alert_json("{not json") is None


def test_engine_choice() -> None:
    def have(_name: str) -> str:
        return "/usr/bin/snort"

    def none(_name: str) -> None:
        return None

    assert find_snort(_cfg(), have) == "/usr/bin/snort"
    assert find_snort(_cfg(), none, prefixes=()) is None
    assert find_snort(_cfg(ips=IpsConfig(rules=("/r",), engine="builtin")), have) is None
    with pytest.raises(ConfigError, match="no snort binary"):
        find_snort(_cfg(ips=IpsConfig(rules=("/r",), engine="snort")), none, prefixes=())
    # with the AV on, Snort still inspects (the AV runs after it, see SnortDaemon)
    snort_av = _cfg(ips=IpsConfig(rules=("/r",), engine="snort"), av=AvConfig(enabled=True))
    assert find_snort(snort_av, have) == "/usr/bin/snort"
    assert find_snort(_cfg(av=AvConfig(enabled=True)), have) == "/usr/bin/snort"
    assert find_snort(_cfg(av=AvConfig(enabled=True)), none, prefixes=()) is None


def test_with_the_av_snort_daemon_plans_a_queue_after_snorts_and_an_av_without_ips() -> None:
    cfg = _cfg(av=AvConfig(enabled=True), bypass=BypassConfig(classes=("tls",)))
    daemon = SnortDaemon(cfg, "/usr/bin/snort", run_dir=Path("/nonexistent"))
    assert daemon.av_queue == 9  # queue.num 6 + 3 workers
    assert daemon.plumbing.plan.all_queues == [6, 7, 8, 9]
    av = av_beside_snort_config(cfg)
    # the AV stage makes the bypass decisions, as the built-in daemon does
    assert not av.ips.enabled and av.bypass.classes == ("tls",) and av.av.enabled
    assert SnortDaemon(_cfg(), "/usr/bin/snort").plumbing.plan.av_queue is None


def test_the_load_report_counts_what_the_forked_av_answered_over_its_share() -> None:
    """With Snort, the AV's daemon is a forked child with its own fair queue: the packets it
    answers by policy because their source is over its share (the built-in daemon's `overflow`)
    reach the adapter's load report as dropped, with the kernel's drops of every queue."""
    cfg = _cfg(
        av=AvConfig(enabled=True),
        queue=QueueConfig(num=6, length=500, fail_open=False, per_source=2),
    )
    daemon = SnortDaemon(cfg, "/usr/bin/snort", run_dir=Path("/nonexistent"))
    before = daemon.load_report(0.0, [])["queue_dropped"]
    av = av_beside_snort_config(cfg)
    pid = os.fork()
    if pid == 0:  # as _start_av's child: the AV's daemon, its fair queue over a source's share
        code = 1
        try:
            child = SpmDaemon(av, None, queue_num=9, overflow_out=daemon.av_overflow)
            verdicts: list[tuple[int, int]] = []
            child.nfq = _Verdicts(verdicts)  # type: ignore[assignment]
            for i in range(5):  # one source, five flows: two held, three over its share
                child._hold(QueuedPacket(i, 0, 0, b"", _udp(1024 + i)))
            code = 0 if verdicts == [(2, NF_DROP), (3, NF_DROP), (4, NF_DROP)] else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert daemon.av_overflow.get() == 3
    assert daemon.load_report(0.0, [])["queue_dropped"] == before + 3


class _Verdicts:
    def __init__(self, out: list[tuple[int, int]]) -> None:
        self.out = out

    def verdict(self, packet_id: int, verdict: int) -> None:
        self.out.append((packet_id, verdict))


def _udp(sport: int) -> bytes:
    """An IPv4 UDP datagram 10.0.0.1:sport -> 10.0.0.2:53 (checksums are not looked at)."""
    ip = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 28, 0, 0, 64, 17, 0, bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    )
    return ip + struct.pack("!HHHH", sport, 53, 8, 0)


FAKE_ALERT = json.dumps(
    {
        "proto": "TCP",
        "src_addr": "10.0.0.1",
        "src_port": 1234,
        "dst_addr": "10.0.0.2",
        "dst_port": 80,
        "gid": 1,
        "sid": 4242,
        "rev": 2,
        "msg": "fake",
        "class": "misc-activity",
        "action": "would_drop",
    }
)
# Stands in for snort: binds the queues its -i options name (as Snort's packet threads do, which
# is how the adapter knows it is ready), writes one alert where -l says, then accepts packets
# until it is stopped.
FAKE_SNORT = f"""#!{sys.executable}
import sys, threading
from netfilterqueue import NetfilterQueue
argv = sys.argv[1:]
queues = [int(argv[i + 1]) for i, a in enumerate(argv) if a == "-i"]
log_dir = argv[argv.index("-l") + 1]
bound = []
for number in queues:
    q = NetfilterQueue()
    q.bind(number, lambda pkt: pkt.accept())
    bound.append(q)
    threading.Thread(target=q.run, daemon=True).start()
with open(log_dir + "/alert_json.txt", "a") as out:
    out.write({FAKE_ALERT!r} + "\\n")
threading.Event().wait()
"""


def test_stand_in_snort_runs_on_the_plumbing_and_its_alerts_reach_the_eve_log(
    tmp_path: Path,
) -> None:
    skip_unless_root("the Snort adapter in a network namespace")
    skip_unless_tool("iptables-nft", "the SPM's xt queue backend")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "snort"
    fake.write_text(FAKE_SNORT)
    fake.chmod(0o755)
    rules = tmp_path / "x.rules"
    rules.write_text('alert tcp any any -> any 80 (msg:"x"; content:"y"; sid:1;)\n')
    eve = tmp_path / "eve.json"
    config = tmp_path / "spm.yaml"
    config.write_text(
        f"name: snorty\ninterface: ogsn0\ntags: [5]\nqueue: {{num: 6}}\n"
        f"ips: {{rules: [{rules}], engine: snort}}\neve_log: {eve}\n"
    )
    with netns(f"ogspm-snort-{os.getpid() % 100000}") as ns:
        sh("ip", "-n", ns, "link", "add", "ogsn0", "type", "veth", "peer", "name", "ogsn1")
        sh("ip", "-n", ns, "link", "set", "ogsn0", "up")
        env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
        proc = subprocess.Popen(
            [
                "nsenter",
                f"--net=/run/netns/{ns}",
                sys.executable,
                "-m",
                "spm",
                "run",
                "--config",
                str(config),
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:

            def alerted() -> bool:
                return eve.exists() and '"signature_id":4242' in eve.read_text()

            wait_for("the stand-in snort's alert in the EVE log", alerted, 20)
            nft = sh(
                "nsenter",
                f"--net=/run/netns/{ns}",
                "nft",
                "list",
                "table",
                "inet",
                "opengate_spm_snorty",
                check=False,
            )
            assert nft.returncode == 0
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0
            nft = sh(
                "nsenter",
                f"--net=/run/netns/{ns}",
                "nft",
                "list",
                "table",
                "inet",
                "opengate_spm_snorty",
                check=False,
            )
            assert nft.returncode != 0
        finally:
            stop_process(proc)
            shutil.rmtree("/run/opengate/snort-snorty", ignore_errors=True)
