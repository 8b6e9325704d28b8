"""`make run`'s Mininet CLI, typed into through a pseudo-terminal as a user would, on each target:
host commands print their output and stop on Ctrl-C, Mininet's commands work on the gateway's
nodes (or say in one line why not), the OpenGate commands print what `opengate` prints, the
README's transcript replays, and `exit` or Ctrl-D stop everything."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from opengate.errors import ConfigError
from opengate.target import TargetError, repo_root, select_target
from tests.e2e.conftest import Topologies
from tests.e2e.mininet_console import (
    PROMPT,
    Console,
    Process,
    matches,
    readme_transcript,
    still_running,
)
from tests.helpers import wait_for
from topo.model import TopologySpec, load_topology
from topo.net import GatewayNetwork, interfaces_in_use

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

OUT1 = "198.51.100.20"
GATEWAY_OUTSIDE = "198.51.100.1"


class Consoles:
    """At most one `make run` session at a time, for one target; a new one after one ended."""

    def __init__(self, target: str, root: Path) -> None:
        self.target = target
        self.root = root
        self.spec: TopologySpec = load_topology(
            repo_root() / "topo" / "gateway.yaml", root=repo_root()
        )
        self.current: Console | None = None
        self.sessions = 0

    def session(self) -> Console:
        if self.current is not None and self.current.exit_status is None:
            return self.current
        self.close()
        self.sessions += 1
        home = self.root / f"session{self.sessions}"
        home.mkdir()
        run_dir = repo_root() / "run" / "e2e" / f"cli-{self.target}"
        self.current = Console(self.target, run_dir, home, self.spec)
        return self.current

    def close(self) -> None:
        if self.current is not None:
            console, self.current = self.current, None
            console.close()


@pytest.fixture(scope="module", params=["soft", "bmv2"])
def consoles(
    request: pytest.FixtureRequest, topologies: Topologies, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Consoles]:
    target: str = request.param
    try:
        select_target({**os.environ, "TARGET": target})
    except TargetError as error:
        pytest.skip(str(error))
    topologies.close()  # the CLI's topology has the same names as the e2e fixtures'
    manager = Consoles(target, tmp_path_factory.mktemp(f"cli-{target}"))
    try:
        yield manager
    finally:
        manager.close()


def lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.split("\n")] if text else []


def _assert_stopped(consoles: Consoles, console: Console, before: dict[int, Process]) -> None:
    assert console.exit_status == 0, "make run did not exit with 0 (was it interrupted?)"
    left = {pid: before[pid].command for pid in still_running(before)}
    assert left == {}, "processes of the session outlived it"
    assert interfaces_in_use(consoles.spec) == [], "links of the topology outlived it"


def test_readme_transcript_replays_and_exit_stops_everything(consoles: Consoles) -> None:
    steps = readme_transcript(repo_root() / "README.md")
    assert steps[-1].command == "exit"
    console = consoles.session()
    for step in steps[:-1]:
        output = lines(console.command(step.command, timeout=180))
        assert matches(step.expected, output), (
            f"mininet> {step.command}\nREADME:\n"
            + "\n".join(step.expected)
            + "\nCLI:\n"
            + "\n".join(output)
        )
    before = console.processes()
    console.finish("exit")
    _assert_stopped(consoles, console, before)


def test_host_commands_print_their_output(consoles: Consoles) -> None:
    console = consoles.session()
    assert lines(console.command("h1 echo hello")) == ["hello"]
    assert lines(console.command(f"h1 curl -s http://{OUT1}/whoami")) == [GATEWAY_OUTSIDE]
    ping = console.command(f"h2 ping -c 2 {OUT1}")
    # The first reply of a new flow may be late or lost while the gateway sets up the session;
    # the second comes back.
    assert re.search(rf"^64 bytes from {re.escape(OUT1)}: icmp_seq=2 ", ping, re.M), ping
    assert "2 packets transmitted" in ping
    # Node names stand for their IP address, as in any Mininet topology; one line says when a
    # node has none.
    assert f"PING {OUT1} ({OUT1})" in console.command("h1 ping -c 1 -W 5 out1")
    assert lines(console.command("h1 echo spm1 out1")) == [
        "*** spm1: no IP address, the name is left as is",
        f"spm1 {OUT1}",
    ]


def test_ctrl_c_stops_a_host_command_and_the_prompt_stays(consoles: Consoles) -> None:
    console = consoles.session()
    console.type(f"h1 ping {OUT1}")
    console.expect(rf"64 bytes from {re.escape(OUT1)}: icmp_seq=\d+ ")
    console.ctrl_c()
    stopped = console.expect(PROMPT)
    assert "ping statistics" in stopped and "packets transmitted" in stopped
    # Ctrl-C at the prompt: Mininet's "Interrupt", and a new prompt.
    console.ctrl_c()
    assert "Interrupt" in console.expect(PROMPT)
    # Nothing else got the Ctrl-C: switch, controller and SPMs still work (make is checked when
    # the session ends: its exit status would say it was interrupted).
    assert lines(console.command(f"h1 curl -s -m 30 http://{OUT1}/whoami")) == [GATEWAY_OUTSIDE]
    assert console.command("status").startswith("policy: version ")


def test_a_command_with_ampersand_runs_in_the_background(consoles: Consoles) -> None:
    console = consoles.session()
    assert lines(console.command("h2 sleep 600 &")) == []  # the prompt is back at once
    assert lines(console.command("h2 ps -o args= -p $!")) == ["sleep 600"]
    assert (
        lines(console.command("h2 kill $!; wait $! 2>/dev/null; ps -p $! >/dev/null; echo $?"))[-1]
        == "1"
    )


def test_mininet_listing_commands_show_the_gateway(consoles: Consoles) -> None:
    console = consoles.session()
    assert lines(console.command("nodes")) == [
        "available nodes are:",
        "h1 h2 h3 lan-in lan-out npm1 out1 spm1 spm2",
    ]
    net = lines(console.command("net"))
    assert "h1 h1-eth0:lan-in-eth1" in net
    assert "spm1 spm1-eth0:npm1-eth3" in net
    assert (
        "npm1 lo:  npm1-eth1:lan-in-eth4 npm1-eth2:lan-out-eth2 npm1-eth3:spm1-eth0 "
        "npm1-eth4:spm2-eth0" in net
    )
    dump = console.command("dump")
    assert re.search(r"<NetnsHost h1: h1-eth0:10\.0\.1\.10 pid=\d+>", dump), dump
    assert re.search(r"<NetnsHost out1: out1-eth0:198\.51\.100\.20 pid=\d+>", dump), dump
    assert re.search(r"<P4Npm npm1: lo:127\.0\.0\.1,npm1-eth1:None,", dump), dump
    links = lines(console.command("links"))
    assert "h1-eth0<->lan-in-eth1 (OK OK)" in links
    assert "npm1-eth3<->spm1-eth0 (OK OK)" in links
    assert len(links) == 8
    intfs = lines(console.command("intfs"))
    assert "npm1: lo,npm1-eth1,npm1-eth2,npm1-eth3,npm1-eth4" in intfs
    ports = lines(console.command("ports"))
    assert "npm1 lo:0 npm1-eth1:1 npm1-eth2:2 npm1-eth3:3 npm1-eth4:4" in ports


def test_py_and_px_see_the_hosts_ip_and_mac(consoles: Consoles) -> None:
    console = consoles.session()
    assert lines(console.command("py h1.IP()")) == ["10.0.1.10"]
    assert lines(console.command("py h1.MAC()")) == ["00:00:00:00:01:10"]
    assert lines(console.command("px print(out1.IP(), out1.MAC())")) == [
        "198.51.100.20 00:00:00:00:02:20"
    ]
    assert lines(console.command("py spm1.IP()")) == []  # no address: py prints nothing
    assert lines(console.command("py gateway.spec.host('spm1').role")) == ["spm"]


def test_pingall_pings_the_hosts_with_an_address(consoles: Consoles) -> None:
    console = consoles.session()
    output = lines(console.command("pingall", timeout=180))
    assert output[0] == "*** Ping: testing ping reachability"
    assert output[1].startswith("*** not pinged: spm1 spm2 (SPM hosts have no IP address")
    # h1 and h2 share their LAN; the gateway passes their pings out (the reply to a first
    # packet may be lost while the session is set up, so either is accepted); nothing from
    # outside reaches an inside address.
    assert re.fullmatch(r"h1 -> h2 (out1|X)", output[2]), output
    assert re.fullmatch(r"h2 -> h1 (out1|X)", output[3]), output
    assert output[4] == "out1 -> X X"
    assert re.fullmatch(r"\*\*\* Results: \d+% dropped \([2-4]/6 received\)", output[5]), output
    assert output[6].startswith("*** outside hosts do not reach inside addresses")
    # Then IPv6, with h3 (IPv6 only): out1 reaches no inside address either (RFC 6092: inbound
    # only for flows opened from inside), and the pings out open sessions through the CPM.
    assert output[7] == "*** Ping: IPv6"
    assert re.fullmatch(r"h1 -> h2 h3 (out1|X)", output[8]), output
    assert re.fullmatch(r"h2 -> h1 h3 (out1|X)", output[9]), output
    assert re.fullmatch(r"h3 -> h1 h2 (out1|X)", output[10]), output
    assert output[11] == "out1 -> X X X"
    assert re.fullmatch(r"\*\*\* Results: \d+% dropped \(([6-9])/12 received\)", output[12]), output
    assert output[13].startswith("*** outside hosts do not reach inside IPv6 addresses")
    assert lines(console.command("pingall soon")) == [
        "*** pingall: the timeout is a number of seconds, not 'soon'"
    ]
    assert lines(console.command("pingpair")) == [
        "h1 -> h2",
        "h2 -> h1",
        "*** Results: 0% dropped (2/2 received)",
    ]


def test_iperf_measures_between_inside_and_outside(consoles: Consoles) -> None:
    console = consoles.session()
    output = lines(console.command("iperf h1 out1", timeout=180))
    assert output[0] == "*** Iperf: testing TCP bandwidth between h1 and out1"
    rate = r"'[\d.]+ [KMG]?bits/sec'"
    assert re.fullmatch(rf"\*\*\* Results: \[{rate}, {rate}\]", output[1]), output
    output = lines(console.command("iperfudp 5M h1 out1", timeout=180))
    assert output[0] == "*** Iperf: testing UDP bandwidth between h1 and out1"
    assert re.fullmatch(rf"\*\*\* Results: \['5M', {rate}, {rate}\]", output[1]), output
    assert lines(console.command("iperf h1 spm1")) == [
        "*** iperf: spm1 has no IP address (only hosts with one can run iperf)"
    ]


def test_link_down_and_up(consoles: Consoles) -> None:
    console = consoles.session()
    curl = f"h1 curl -s -m 20 -o /dev/null -w %{{http_code}} http://{OUT1}/; echo ' exit' $?"
    assert lines(console.command("link h1 lan-in down")) == []
    assert "Network is unreachable" in console.command("h1 ping -c 1 -W 2 10.0.1.11")
    assert lines(console.command("link h1 lan-in up")) == []
    # The host's default route comes back with the link.
    assert lines(console.command(curl)) == ["200 exit 0"]
    # The NPM's side: a port of the P4 switch goes down and comes back.
    assert lines(console.command("link npm1 lan-out down")) == []
    short = curl.replace("-m 20", "-m 3")
    assert lines(console.command(short)) == ["000 exit 28"]
    assert lines(console.command("link npm1 lan-out up")) == []
    assert lines(console.command(curl)) == ["200 exit 0"]
    assert lines(console.command("link h1 npm1 down")) == ["src and dst not connected: h1 npm1"]
    # A LAN bridge stops and starts again.
    assert lines(console.command("switch lan-in stop")) == []
    assert " 0 received" in console.command("h1 ping -c 1 -W 2 10.0.1.11")
    assert lines(console.command("switch lan-in start")) == []
    assert " 0 received" not in console.command("h1 ping -c 3 -i 0.5 -W 2 10.0.1.11")
    for command in ("switch npm1 stop", "dpctl dump-flows"):
        said = lines(console.command(command))
        assert len(said) == 1 and said[0].startswith(f"*** {command.split()[0]}: "), said


def _opengate(console: Console, *args: str) -> str:
    api = re.search(r"controller REST API: (http://[\d.:]+)/", console.banner)
    assert api, console.banner
    token = console.run_dir / "api-token"
    result = subprocess.run(
        [sys.executable, "-m", "opengate.cli", *args, "--api", api[1], "--token-file", str(token)],
        capture_output=True,
        text=True,
        check=True,
        cwd=repo_root(),
    )
    return result.stdout


def test_opengate_commands_print_what_opengate_prints(consoles: Consoles) -> None:
    console = consoles.session()
    console.command(f"h1 curl -s http://{OUT1}/whoami")
    web = re.compile(rf"npm1 +tcp +10\.0\.1\.10:\d+ +{re.escape(OUT1)}:80 .* REWRITE_SRC")

    def listed() -> list[str]:
        # the controller learns of the session from a digest after the flow has passed
        rows = lines(console.command("sessions"))
        return rows if any(web.search(row) for row in rows) else []

    sessions = wait_for("the curl's session in `sessions`", listed)
    assert sessions[0].split() == [
        "ID", "NPM", "PROTO", "SOURCE", "DESTINATION", "CLASS", "SPM", "NAT", "STATE", "IN",
    ]  # fmt: skip
    # a masqueraded session: its exact entries are installed
    assert next(row for row in sessions if web.search(row)).split()[-1] == "exact", sessions
    assert re.fullmatch(r"\(\d+ of \d+\)", sessions[-1]), sessions
    spms = lines(console.command("spms"))
    assert spms[0].split() == [
        "SPM", "PORT", "STATUS", "WEIGHT", "CPU%", "QUEUE", "DROPPED", "FLOWS",
    ]  # fmt: skip
    assert [row.split()[:3] for row in spms[1:]] == [["spm1", "3", "up"], ["spm2", "4", "up"]]
    status = console.command("status")
    assert status.startswith("policy: version ") and "npm1" in status, status
    counters = console.command("counters --all")
    assert counters.startswith("NPM npm1: packets dropped"), counters
    assert "NO_SESSION" in counters and "CREATED" in counters, counters
    # Output that does not change between two calls: the same text as the `opengate` command.
    assert console.command("alerts") == _opengate(console, "alerts").rstrip("\n")
    applied = lines(console.command("policy apply controller/examples/gateway.yaml"))
    assert re.fullmatch(r"policy version \d+ applied \([0-9a-f]{12}\)", applied[0]), applied
    versions = console.command("policy show --versions")
    assert versions == _opengate(console, "policy", "show", "--versions").rstrip("\n")
    assert "cli" in versions.split("\n")[1].split()  # the version just applied
    assert console.command("sessions --bogus").startswith(
        "*** sessions: unrecognized arguments: --bogus"
    )
    help_text = console.command("help")
    for command in ("sessions", "alerts", "spms", "counters", "status", "policy"):
        assert re.search(rf"\b{command}\b", help_text.split("You may also")[0]), command
        assert f"\n  {command}" in help_text.split("OpenGate commands")[1], command


def test_a_second_topology_with_the_same_names_leaves_this_one_alone(
    consoles: Consoles, tmp_path: Path
) -> None:
    console = consoles.session()
    second = GatewayNetwork(consoles.spec, tmp_path)
    try:
        with pytest.raises(ConfigError, match=r"another topology runs with the name \S+ \(pid \d"):
            second.start()
    finally:
        second.stop()
    assert lines(console.command(f"h1 curl -s -m 30 http://{OUT1}/whoami")) == [GATEWAY_OUTSIDE]


def test_ctrl_d_stops_everything(consoles: Consoles) -> None:
    console = consoles.session()
    assert lines(console.command("h1 echo up")) == ["up"]
    before = console.processes()
    console.finish("^D")
    _assert_stopped(consoles, console, before)
