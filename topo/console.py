"""The Mininet CLI of the gateway topology (`make run`).

Mininet's own CLI, with what the gateway's nodes need: the SPM hosts have no IP address (the NPM
steers traffic to them by MAC), the NPM is a P4 switch driven by the controller (not OpenFlow), and
the LANs are Linux bridges. Where a Mininet command cannot apply to such a node it says so in one
line. The `opengate` client commands (sessions, alerts, spms, counters, status, policy) run in the
same CLI against this topology's controller, with the same output as `opengate COMMAND`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from mininet.cli import CLI
from mininet.log import error, lg, output, setLogLevel
from mininet.net import Mininet

import controller.cli
from opengate.errors import ConfigError
from opengate.netutil import stop_process
from topo.net import GatewayNetwork
from topo.nodes import P4Npm

PING_TIMEOUT = "2"  # seconds each `pingall` ping waits for its reply (`pingall N` overrides)
IPERF_PORT = 5001  # Mininet's iperf port; out1's iperf3 service keeps 5201
IPERF_SECONDS = 5

OPENGATE_HELP = """
OpenGate commands, run against this topology's controller (the output of `opengate COMMAND`):
  sessions [--npm NPM] [--limit N] [--delete ID]   installed sessions
  alerts [--limit N]                              the latest SPM alerts
  spms                                            SPMs: status, weight, load
  counters [--all]                                NPM drops by reason, flow events, ports
  ipsec [NPM] [--sas]                             IPsec tunnels (NPM: that site's controller)
  status [--hsm]                                  NPMs, sessions, SPMs, policy version
  policy apply|diff FILE, policy show [--versions], policy validate FILE
Each takes --json (the API's JSON) and -h (its options).

SPM hosts have no IP address: pingall, iperf and name substitution skip them.
LAN names are nodes too:  mininet> link h1 lan-in down
py and px also see `gateway`:  mininet> py gateway.api('GET', '/api/v1/status')

"""


def client_parser(api_url: str, token_file: Path) -> argparse.ArgumentParser:
    """The `opengate` client commands' parser, aimed at this topology's controller: the options
    default to $OPENGATE_API and $OPENGATE_TOKEN_FILE when the parser is built."""
    saved = {name: os.environ.get(name) for name in ("OPENGATE_API", "OPENGATE_TOKEN_FILE")}
    os.environ["OPENGATE_API"] = api_url
    os.environ["OPENGATE_TOKEN_FILE"] = str(token_file)
    try:
        parser = argparse.ArgumentParser(prog="opengate")
        controller.cli.register(parser.add_subparsers(dest="command", required=True))
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return parser


def _rate(bits_per_second: float) -> str:
    """A rate as iperf prints it: '941 Mbits/sec'."""
    for unit, scale in (("Gbits", 1e9), ("Mbits", 1e6), ("Kbits", 1e3)):
        if bits_per_second >= scale:
            return f"{bits_per_second / scale:.3g} {unit}/sec"
    return f"{bits_per_second:.3g} bits/sec"


def _listening(pid: int, port: int) -> bool:
    """Whether a TCP socket listens on `port` in the network namespace of process `pid`."""
    try:
        lines = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return False
    for line in lines:
        fields = line.split()
        if fields[3] == "0A" and int(fields[1].rpartition(":")[2], 16) == port:
            return True
    return False


class GatewayCLI(CLI):  # type: ignore[misc]
    """Mininet's CLI on a GatewayNetwork. Like Mininet's, it runs its loop when created."""

    identchars = CLI.identchars + "-"  # node names such as lan-in
    helpStr = CLI.helpStr + OPENGATE_HELP  # noqa: N815 - Mininet's attribute

    def __init__(
        self, network: GatewayNetwork, stdin: TextIO = sys.stdin, script: str | None = None
    ) -> None:
        self.network = network
        self.opengate = client_parser(
            f"http://{network.api_address}", network.run_dir / "api-token"
        )
        # Mininet prints its CLI's output at level 'output'; it also logs to the root logger
        # if nothing stops it, which would print every line twice under `opengate topo run`.
        setLogLevel("output")
        lg.propagate = False
        super().__init__(network.net, stdin=stdin, script=script)

    def getLocals(self) -> dict[str, Any]:  # noqa: N802 - Mininet's method
        """`py` and `px` see the nodes, `net` (Mininet) and `gateway` (the GatewayNetwork)."""
        names: dict[str, Any] = super().getLocals()
        names.setdefault("gateway", self.network)
        return names

    def default(self, line: str) -> None:
        """`NODE COMMAND`, as in Mininet; a node name in COMMAND stands for its IP address, and
        one line says so when that node has none (an SPM host, a switch)."""
        first, args, _ = self.parseline(line)
        if first in self.mn and args:
            unaddressed = sorted(
                {w for w in args.split(" ") if w in self.mn and w != first and not self.mn[w].IP()}
            )
            if unaddressed:
                output(f"*** {', '.join(unaddressed)}: no IP address, the name is left as is\n")
        super().default(line)

    # -- hosts with and without an address ----------------------------------------------------

    def _addressed(self, hosts: list[Any], say: bool = True) -> list[Any]:
        """The hosts among `hosts` that have an IPv4 address; one line names those with no
        address of either family (an IPv6-only host is pinged over IPv6 only)."""
        skipped = [h.name for h in hosts if not h.IP() and not self._ip6(h)]
        if skipped and say:
            output(
                f"*** not pinged: {' '.join(skipped)} (SPM hosts have no IP address: the NPM "
                "steers traffic to them by MAC)\n"
            )
        return [h for h in hosts if h.IP()]

    def _role(self, name: str) -> str:
        try:
            return self.network.spec.host(name).role
        except KeyError:
            return ""

    def _ip6(self, host: Any) -> str | None:
        """The host's IPv6 address from the topology (None: IPv6 is off on it)."""
        try:
            spec = self.network.spec.host(host.name)
        except KeyError:
            return None
        return str(spec.ip6.ip) if spec.ip6 is not None else None

    def _ping(self, hosts: list[Any], timeout: str, family: int = 4) -> None:
        """Mininet's ping matrix (one ping per pair) over IPv4 or IPv6, and a note when outside
        hosts got no reply from inside addresses, as the gateway intends."""
        if family == 6:
            hosts = [h for h in hosts if self._ip6(h)]
            if len(hosts) < 2:
                return
            output("*** Ping: IPv6\n")
        sent = received = 0
        expected_losses = 0
        for source in hosts:
            output(f"{source.name} -> ")
            for dest in hosts:
                if dest is source:
                    continue
                target = self._ip6(dest) if family == 6 else dest.IP()
                reply = source.cmd(f"ping -{family} -c1 -W {timeout} {target}")
                count, answered = Mininet._parsePing(reply)
                sent += count
                received += answered
                output(f"{dest.name} " if answered else "X ")
                roles = (self._role(source.name), self._role(dest.name))
                if not answered and roles == ("outside", "inside"):
                    expected_losses += 1
            output("\n")
        if sent:
            output(
                f"*** Results: {100 * (sent - received) // sent}% dropped "
                f"({received}/{sent} received)\n"
            )
        if expected_losses and family == 4:
            output(
                "*** outside hosts do not reach inside addresses: the gateway masquerades them "
                "(port forwards aside)\n"
            )
        elif expected_losses:
            output(
                "*** outside hosts do not reach inside IPv6 addresses: the gateway admits "
                "inbound IPv6 only for flows opened from inside (RFC 6092)\n"
            )

    def do_pingall(self, line: str) -> None:
        """Ping between all hosts that have an IP address, over IPv4 and then IPv6 (an
        IPv6-only host in the second round only).
        Usage: pingall [TIMEOUT]  (seconds per ping, default 2)"""
        timeout = line.strip() or PING_TIMEOUT
        try:
            float(timeout)
        except ValueError:
            error(f"*** pingall: the timeout is a number of seconds, not {timeout!r}\n")
            return
        output("*** Ping: testing ping reachability\n")
        self._ping(self._addressed(self.mn.hosts), timeout)
        self._ping(list(self.mn.hosts), timeout, family=6)

    def do_pingpair(self, _line: str) -> None:
        """Ping between the first two hosts that have an IP address."""
        self._ping(self._addressed(self.mn.hosts, say=False)[:2], PING_TIMEOUT)

    def do_pingallfull(self, _line: str) -> None:
        """Ping between all hosts that have an IP address; all ping results."""
        output("*** Ping: testing ping reachability\n")
        self.mn.pingFull(hosts=self._addressed(self.mn.hosts), timeout=PING_TIMEOUT)

    def do_pingpairfull(self, _line: str) -> None:
        """Ping between the first two hosts that have an IP address; all ping results."""
        self.mn.pingFull(hosts=self._addressed(self.mn.hosts, say=False)[:2], timeout=PING_TIMEOUT)

    # -- iperf (iperf3, its server started and stopped by PID) ---------------------------------

    def _iperf_hosts(self, names: list[str]) -> list[Any] | None:
        if not names:
            inside = [h for h in self.mn.hosts if self._role(h.name) == "inside" and h.IP()]
            outside = [h for h in self.mn.hosts if self._role(h.name) == "outside" and h.IP()]
            if inside and outside:
                return [inside[0], outside[0]]
            return self._addressed(self.mn.hosts, say=False)[:2]
        hosts = []
        for name in names:
            if name not in self.mn:
                error(f"node '{name}' not in network\n")
                return None
            node = self.mn[name]
            if node not in self.mn.hosts or not node.IP():
                error(f"*** iperf: {name} has no IP address (only hosts with one can run iperf)\n")
                return None
            hosts.append(node)
        return hosts

    def _iperf(self, client: Any, server: Any, udp_bandwidth: str | None = None) -> None:
        kind = "UDP" if udp_bandwidth else "TCP"
        output(f"*** Iperf: testing {kind} bandwidth between {client.name} and {server.name}\n")
        listener = server.popen(
            ["iperf3", "-s", "-1", "-B", server.IP(), "-p", str(IPERF_PORT)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        sender: subprocess.Popen[bytes] | None = None
        try:
            deadline = time.monotonic() + 20.0
            while not _listening(listener.pid, IPERF_PORT):
                if listener.poll() is not None or time.monotonic() > deadline:
                    error(f"*** iperf: iperf3 did not start listening on {server.name}\n")
                    return
                time.sleep(0.05)
            argv = ["iperf3", "-c", server.IP(), "-p", str(IPERF_PORT), "-J"]
            argv += ["-t", str(IPERF_SECONDS), "--connect-timeout", "10000"]
            if udp_bandwidth:
                argv += ["-u", "-b", udp_bandwidth]
            sender = client.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            text, _ = sender.communicate(timeout=IPERF_SECONDS + 60)
            try:
                report = json.loads(text)
            except ValueError:
                error(f"*** iperf: {client.name}: {text.decode(errors='replace').strip()}\n")
                return
            if report.get("error"):
                error(f"*** iperf: {client.name} -> {server.name}: {report['error']}\n")
                return
            end = report["end"]
            result = [
                _rate(end["sum_received"]["bits_per_second"]),
                _rate(end["sum_sent"]["bits_per_second"]),
            ]
            if udp_bandwidth:
                result.insert(0, udp_bandwidth)
            output(f"*** Results: {result}\n")
        except subprocess.TimeoutExpired:
            error(f"*** iperf: {client.name} -> {server.name} did not finish\n")
        finally:
            if sender is not None:
                stop_process(sender)
            stop_process(listener)

    def do_iperf(self, line: str) -> None:
        """TCP bandwidth between two hosts (iperf3; server and client rates).
        Usage: iperf [CLIENT SERVER]  (default: the first inside and outside hosts)"""
        args = line.split()
        if len(args) not in (0, 2):
            error("invalid number of args: iperf src dst\n")
            return
        hosts = self._iperf_hosts(args)
        if hosts:
            self._iperf(hosts[0], hosts[1])

    def do_iperfudp(self, line: str) -> None:
        """UDP bandwidth between two hosts (iperf3).
        Usage: iperfudp BW [CLIENT SERVER]  (BW e.g. 10M)"""
        args = line.split()
        if len(args) not in (1, 3):
            error("invalid number of args: iperfudp bw src dst\nbw examples: 10M\n")
            return
        hosts = self._iperf_hosts(args[1:])
        if hosts:
            self._iperf(hosts[0], hosts[1], udp_bandwidth=args[0])

    # -- links, switches ------------------------------------------------------------------------

    def do_link(self, line: str) -> None:
        """Bring the link(s) between two nodes up or down.
        Usage: link NODE1 NODE2 up|down  (e.g. link h1 lan-in down)"""
        super().do_link(line)
        args = line.split()
        if len(args) != 3 or args[2] != "up":
            return
        # An interface that went down lost its routes: give hosts back their default route.
        for name in args[:2]:
            with contextlib.suppress(KeyError):
                spec = self.network.spec.host(name)
                if spec.gateway is not None:
                    self.mn[name].cmd(f"ip route replace default via {spec.gateway}")

    def do_switch(self, line: str) -> None:
        """Start or stop a switch. Usage: switch NAME start|stop  (LAN bridges only)"""
        args = line.split()
        if args and args[0] in self.mn and isinstance(self.mn[args[0]], P4Npm):
            error(
                f"*** switch: {args[0]} is the P4 switch that the controller drives; it is not "
                "stopped or started from here (use link NODE1 NODE2 down|up)\n"
            )
            return
        super().do_switch(line)

    def do_dpctl(self, _line: str) -> None:
        """Not OpenFlow: says where to look instead."""
        error(
            "*** dpctl: there is no OpenFlow switch here: the NPMs run P4 over P4Runtime (see "
            "'status' and 'sessions'), the LANs are Linux bridges\n"
        )

    # -- OpenGate commands ----------------------------------------------------------------------

    def _opengate(self, command: str, line: str) -> None:
        try:
            words = shlex.split(line)
        except ValueError as exc:
            error(f"*** {command}: {exc}\n")
            return
        try:
            args, extra = self.opengate.parse_known_args([command, *words])
        except SystemExit:  # argparse printed the usage, the error or -h's help
            return
        if extra:
            error(f"*** {command}: unrecognized arguments: {' '.join(extra)} (see {command} -h)\n")
            return
        try:
            args.handler(args)
        except ConfigError as exc:
            print(f"opengate: error: {exc}", file=sys.stderr)
        except Exception as exc:  # one command's failure must not end the CLI
            print(f"opengate: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()

    def do_sessions(self, line: str) -> None:
        """Installed sessions (opengate sessions).
        Usage: sessions [--npm NPM] [--limit N] [--delete ID] [--json]"""
        self._opengate("sessions", line)

    def do_alerts(self, line: str) -> None:
        """The latest alerts from the SPMs (opengate alerts). Usage: alerts [--limit N] [--json]"""
        self._opengate("alerts", line)

    def do_spms(self, line: str) -> None:
        """SPMs: status, weight, load (opengate spms). Usage: spms [--json]"""
        self._opengate("spms", line)

    def do_counters(self, line: str) -> None:
        """What the NPM counted: drops by reason, data-plane session events, ports
        (opengate counters). Usage: counters [--all] [--json]"""
        self._opengate("counters", line)

    def do_ipsec(self, line: str) -> None:
        """IPsec tunnels: state, SAs, counters, last error (opengate ipsec).
        Usage: ipsec [NPM] [--sas] [--json]; NPM picks that NPM's controller (a site of its own)"""
        words = line.split(maxsplit=1)
        if words and words[0] in {npm.name for npm in self.network.spec.npms}:
            api = self.network.cpm_for(words[0]).api_address
            line = f"--api http://{api} " + (words[1] if len(words) > 1 else "")
        self._opengate("ipsec", line)

    def do_status(self, line: str) -> None:
        """The controller's status: NPMs, sessions, SPMs, policy (opengate status).
        Usage: status [--hsm] [--json]"""
        self._opengate("status", line)

    def do_policy(self, line: str) -> None:
        """Policy versions (opengate policy).
        Usage: policy apply|diff FILE, policy show [--versions], policy validate FILE"""
        self._opengate("policy", line)


@contextlib.contextmanager
def foreground_group(terminal: TextIO) -> Iterator[None]:
    """Run the CLI in a process group of its own, in the terminal's foreground.

    Ctrl-C then interrupts the CLI (which passes it on to the host command it waits for), and
    not the process that started it (make, a shell script) and waits for it. Nothing to do where
    the CLI leads its group already (an interactive shell's job, sudo's pty) or has no terminal.
    """
    try:
        fd = terminal.fileno()
        previous = os.tcgetpgrp(fd)
    except (OSError, ValueError):
        yield
        return
    if os.getpgrp() == os.getpid() or previous != os.getpgrp():
        yield
        return
    os.setpgid(0, 0)
    with _ignoring_ttou():
        os.tcsetpgrp(fd, os.getpgrp())
    try:
        yield
    finally:
        with _ignoring_ttou(), contextlib.suppress(OSError):
            os.tcsetpgrp(fd, previous)


@contextlib.contextmanager
def _ignoring_ttou() -> Iterator[None]:
    """A background process that hands over the terminal gets SIGTTOU: ignore it meanwhile."""
    handler = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGTTOU, handler)
