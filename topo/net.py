"""Build the gateway network in Mininet from a TopologySpec, start the controller and services,
run commands on named hosts, and take everything down again (also after errors and Ctrl-C)."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from mininet.log import setLogLevel
from mininet.net import Mininet

from opengate.errors import ConfigError
from opengate.netutil import delete_link, free_tcp_port, stop_process, wait_for_port
from opengate.p4info import P4Schema
from opengate.p4rt import P4RuntimeClient
from opengate.target import (
    TargetChoice,
    p4_program_dir,
    repo_root,
    select_target,
    shared_data_dir,
)
from topo.model import HostSpec, TopologySpec, spm_engine
from topo.nodes import LanBridge, NetnsHost, P4Npm

LOG = logging.getLogger(__name__)


EICAR = b"X5O!P%@AP[4\\PZX54(P^)7CC)7}$" + b"EICAR-STANDARD-ANTIVIRUS-" + b"TEST-FILE!$H+H*"
CLAMAV_TESTFILES = Path("/usr/share/clamav-testfiles")


def _fill_www(www: Path, host: str) -> None:
    """What the test web servers serve: a page, the EICAR test file and a ClamAV test sample."""
    (www / "index.html").write_text(f"<h1>OpenGate test server {host}</h1>\n")
    (www / "eicar.com").write_bytes(EICAR)
    sample = CLAMAV_TESTFILES / "clam.exe"
    if sample.exists():
        shutil.copyfile(sample, www / "clam.exe")


def _spm_started(eve_log: Path) -> bool:
    """The SPM daemon writes an `spm` event to its EVE log once it inspects its queue."""
    if not eve_log.exists():
        return False
    for line in eve_log.read_text().splitlines():
        try:
            if json.loads(line).get("event_type") == "spm":
                return True
        except json.JSONDecodeError:
            continue  # a line still being written
    return False


def descendants(pid: int) -> list[int]:
    """Child processes of `pid`, recursively (from /proc)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            out += [child, *descendants(child)]
    return out


def _running(pid: int) -> bool:
    """Whether process `pid` runs (a zombie waiting for its new parent to reap it does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def stop_family(process: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """Stop `process` by PID, then what it started (an SPM's workers, say), by PID: they get
    `timeout` to end on their own, as they do when their parent goes, then SIGTERM, SIGKILL."""
    family = descendants(process.pid)
    stop_process(process, timeout)
    for sig in (0, signal.SIGTERM, signal.SIGKILL):
        for pid in family if sig else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while family and time.monotonic() < deadline:
            family = [pid for pid in family if _running(pid)]
            if family:
                time.sleep(0.05)
        if not family:
            return
        LOG.warning("pids %s outlived their parent %d", family, process.pid)


def switch_names(spec: TopologySpec) -> list[str]:
    """The names in the root namespace that `spec` creates interfaces under: its LAN bridges'
    and its NPMs' (a port is NAME-ethN); the hosts' ends live in their namespaces."""
    return [lan.name for lan in spec.lans] + [npm.name for npm in spec.npms]


def interfaces_named(names: list[str]) -> list[str]:
    """The interfaces that exist now and are one of `names` or a port of one (NAME-ethN)."""
    return sorted(
        path.name
        for path in Path("/sys/class/net").iterdir()
        if path.name in names or any(path.name.startswith(f"{n}-eth") for n in names)
    )


def interfaces_in_use(spec: TopologySpec) -> list[str]:
    """The interfaces of `spec` in the root namespace (LAN bridges, the switches' ports) that
    exist now."""
    return interfaces_named(switch_names(spec))


# A running topology holds a lock on each of its switch names here (the file holds its PID),
# for as long as it runs: the kernel lets it go when the process ends, however it ends.
NAME_LOCKS = Path("/run/opengate/names")


def claim_names(names: list[str], lock_dir: Path = NAME_LOCKS) -> list[int]:
    """Lock each of `names` for this process, or raise ConfigError naming the process that
    runs a topology with one of them. Returns the lock files' descriptors (release_names)."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    fds: list[int] = []
    try:
        for name in names:
            fd = os.open(lock_dir / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
            fds.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 16, 0).decode(errors="replace").strip() or "unknown"
                raise ConfigError(
                    f"another topology runs with the name {name} (pid {holder}): stop it first"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except BaseException:
        release_names(fds)
        raise
    return fds


def release_names(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)  # closing the only descriptor of the open file lets the lock go
    fds.clear()


# Every process a topology starts (switches, controller, SPMs, clamd, host shells, services)
# inherits this variable, "OWNER_PID:NAME,NAME...", so that the processes of a run that was
# killed, which its end did not stop, can be found and stopped by the next run with its names.
TOPOLOGY_ENV = "OPENGATE_TOPOLOGY"


# A process as /proc names it once: (pid, start time in clock ticks since boot), so that a PID
# the kernel gave to another process since is never signalled.
ProcessId = tuple[int, int]


def group_members(pgid: int) -> list[ProcessId]:
    """The processes (not zombies) of process group `pgid`."""
    out: list[ProcessId] = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        # after the command: state, ppid, pgrp, ...; field 22 of stat (starttime) is [19]
        if len(fields) > 19 and int(fields[2]) == pgid and fields[0] != "Z":
            out.append((int(stat_file.parent.name), int(fields[19])))
    return out


def _still(member: ProcessId) -> bool:
    try:
        fields = Path(f"/proc/{member[0]}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return False
    return fields[0] != "Z" and int(fields[19]) == member[1]


def stop_members(members: list[ProcessId], timeout: float = 5.0) -> None:
    """SIGTERM to each of `members` still running, then SIGKILL after `timeout`, by PID."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid, _ in (m for m in members if _still(m)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(_still(m) for m in members):
            time.sleep(0.02)
        if not any(_still(m) for m in members):
            return
    LOG.warning("pids %s outlived SIGKILL", [m[0] for m in members if _still(m)])


def stop_group(process: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """Stop `process`, the leader of a process group of its own (a session, as `node.popen`
    makes it), with everything in the group, what it put in the background too: SIGTERM to the
    group, then SIGKILL to what is left after `timeout`. The leader is reaped only at the end,
    so the group's id is not given to another process meanwhile."""
    pgid = process.pid
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and group_members(pgid):
            time.sleep(0.02)
        if not group_members(pgid):
            break
    else:
        LOG.warning("process group %d outlived SIGKILL", pgid)
    process.wait(timeout)


def topology_token(names: list[str]) -> str:
    return f"{os.getpid()}:{','.join(names)}"


def _topology_of(pid: int) -> tuple[int, set[str]] | None:
    """The owner PID and names a process's OPENGATE_TOPOLOGY gives, if it has one."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    prefix = f"{TOPOLOGY_ENV}=".encode()
    for item in environ.split(b"\0"):
        if item.startswith(prefix):
            owner, _, names = item[len(prefix) :].decode(errors="replace").partition(":")
            if owner.isdigit():
                return int(owner), set(names.split(","))
    return None


def stop_leftover_processes(names: list[str], timeout: float = 5.0) -> list[int]:
    """Stop, by PID, the processes a topology with any of `names` started whose owner (the
    process that ran that topology) is gone: a killed run's. SIGTERM, then SIGKILL after
    `timeout`. Returns their PIDs."""
    wanted = set(names)
    left = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        found = _topology_of(int(entry.name))
        if found is not None and found[1] & wanted and not _running(found[0]):
            left.append(int(entry.name))
    if left:
        LOG.warning("stopping processes a killed topology left: pids %s", left)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while any(_running(pid) for pid in left) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not any(_running(pid) for pid in left):
            break
    return left


def remove_leftovers(names: list[str]) -> list[str]:
    """Delete the interfaces under `names` that exist although no topology holds the names
    (claim_names succeeded): a killed run left them. Returns what it deleted; raises
    ConfigError if some would not go."""
    left = interfaces_named(names)
    if left:
        LOG.warning("removing interfaces a killed topology left: %s", ", ".join(left))
        for name in left:
            delete_link(name)  # a veth's peer goes with it; delete_link skips it then
        still = interfaces_named(names)
        if still:
            raise ConfigError(
                f"interfaces a killed topology left would not go ({', '.join(still)}): remove "
                "them with `ip link del NAME`"
            )
    return left


def _wait_until(
    what: str,
    condition: Callable[[], bool],
    timeout: float,
    process: subprocess.Popen[bytes],
    interval: float = 0.05,
) -> None:
    """Poll `condition` until true; fail early if `process` exits, or after `timeout`."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            raise RuntimeError(f"gave up waiting for {what}: it exited with {process.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what} after {timeout:g}s")
        time.sleep(interval)


@dataclass(frozen=True, slots=True)
class Cpm:
    """One controller of the topology: the NPMs it runs (one policy), its API and socket."""

    npms: tuple[str, ...]
    policy: Path
    api_address: str
    socket: Path
    suffix: str  # "" for the first controller; "-NPM" for the others (file names)


@dataclass(frozen=True, slots=True)
class CommandResult:
    host: str
    command: str
    returncode: int
    output: str


@dataclass(slots=True)
class GatewayNetwork:
    """One running topology. Use as a context manager: stop() always runs."""

    spec: TopologySpec
    run_dir: Path
    target: TargetChoice = field(default_factory=select_target)
    # The SPMs' bypass settings, e.g. {"classes": ["other"], "after_bytes": 1048576}; None: off.
    spm_bypass: dict[str, Any] | None = None
    # the committed P4 build the controllers push (opengate.target.P4_BUILDS)
    p4_build: str = "default"
    net: Any = None
    api_address: str = ""
    api_token: str = ""
    cpms: list[Cpm] = field(default_factory=list)  # one per distinct policy (site)
    _processes: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    _commands: set[subprocess.Popen[bytes]] = field(default_factory=set)  # `run` commands
    _background: list[ProcessId] = field(default_factory=list)  # what they left running
    # one HTTP client for every API call: a new one each call costs an SSL context (about 15 ms
    # of CPU), which a bench polling the API 10 times a second paid as 15 % of a core
    _http: httpx.Client | None = None
    _name_locks: list[int] = field(default_factory=list)  # claim_names: held while it runs

    def __post_init__(self) -> None:
        try:  # an unknown build, before anything starts
            p4_program_dir(self.p4_build)
        except ValueError as error:
            raise ConfigError(str(error)) from None

    @property
    def program_dir(self) -> Path:
        """Where the BMv2 JSON and P4Info the controllers push are (the `p4_build`)."""
        return p4_program_dir(self.p4_build)

    def __enter__(self) -> GatewayNetwork:
        try:
            self.start()
        except BaseException as error:
            if isinstance(error, Exception):  # what the logs say, before stop() ends it all
                try:
                    error.add_note(f"the topology when it failed to start:\n{self.diagnosis()}")
                except Exception as failed:  # the diagnosis must not hide the error
                    error.add_note(f"(no diagnosis: {failed!r})")
            self.stop()
            raise
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # -- bring-up ------------------------------------------------------------------------

    def start(self) -> None:
        if os.geteuid() != 0:
            raise ConfigError("the topology needs root (Mininet creates namespaces and links)")
        names = switch_names(self.spec)
        self._name_locks = claim_names(names)
        stop_leftover_processes(names)
        remove_leftovers(names)
        os.environ[TOPOLOGY_ENV] = topology_token(
            names
        )  # for all it starts (stop_leftover_processes)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        setLogLevel("warning")
        net = Mininet(controller=None, build=False, autoSetMacs=False, autoStaticArp=False)
        self.net = net
        # Mininet wants a datapath id for names that are not like "s1"; ours are only labels.
        dpids = iter(range(1, 1 << 16))
        for lan in self.spec.lans:
            net.addSwitch(lan.name, cls=LanBridge, dpid=f"{next(dpids):016x}")
        for npm in self.spec.npms:
            net.addSwitch(
                npm.name,
                dpid=f"{next(dpids):016x}",
                cls=P4Npm,
                device_id=npm.device_id,
                log_dir=self.run_dir,
                target=self.target,
            )
        for host in self.spec.hosts:
            params: dict[str, Any] = {"mac": host.mac}
            if host.ip is not None:
                params["ip"] = host.ip.with_prefixlen
            else:
                params["ip"] = None
            net.addHost(host.name, cls=NetnsHost, **params)
        for host in self.spec.hosts:
            if host.lan is not None:
                net.addLink(host.name, host.lan)
        for npm in self.spec.npms:
            for port, peer in sorted(npm.ports.items()):
                net.addLink(npm.name, peer, port1=port, intfName1=f"{npm.name}-eth{port}")
        net.build()
        for host in self.spec.hosts:
            node = net.get(host.name)
            node.setMAC(host.mac, node.defaultIntf())
            self._configure_ipv6(node, host)
            # veths hand partial checksums to whoever reads them raw (the P4 switch): the hosts
            # must compute them in software, or NAT's incremental updates start from garbage.
            node.cmd(f"ethtool -K {node.defaultIntf()} tx off rx off tso off gso off gro off")
            if host.gateway is not None:
                node.cmd(f"ip route replace default via {host.gateway}")
        for switch in net.switches:
            switch.start([])
        self._start_controller()
        self._start_spms()
        self._start_services()
        self._wait_npms_synced()

    @staticmethod
    def _configure_ipv6(node: Any, host: HostSpec) -> None:
        """IPv6 on a host that has an address (static, as its IPv4 one) and on SPM hosts (no
        address: they forward what they inspect), off on the others. No duplicate address
        detection (an address is usable at once: no tentative state to wait for), no router
        advertisements taken (routes are static), no router solicitations."""
        inspects = host.role == "spm"  # an SPM forwards the IPv6 flows it inspects
        if host.ip6 is None and not inspects:
            node.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1")
            return
        intf = node.defaultIntf()
        for key, value in (
            ("disable_ipv6", 0),
            ("accept_dad", 0),
            ("accept_ra", 0),
            ("router_solicitations", 0),
        ):
            for scope in ("all", "default", str(intf)):
                node.cmd(f"sysctl -qw net.ipv6.conf.{scope}.{key}={value}")
        if host.ip6 is None:
            return
        node.cmd(f"ip -6 addr replace {host.ip6.with_prefixlen} dev {intf} nodad")
        if host.gateway6 is not None:
            node.cmd(f"ip -6 route replace default via {host.gateway6} dev {intf}")

    def _start_controller(self) -> None:
        """One controller per policy: the topology's for the NPMs without their own, and one
        for each NPM that names its own (a site of its own, e.g. the two-site VPN)."""
        groups: dict[Path, list[str]] = {}
        for npm in self.spec.npms:
            groups.setdefault(self.spec.policy_of(npm), []).append(npm.name)
        self.api_token = secrets.token_hex(16)
        token_file = self.run_dir / "api-token"
        token_file.write_text(self.api_token + "\n")
        token_file.chmod(0o600)
        self.cpms = []
        for index, (policy, names) in enumerate(groups.items()):
            suffix = "" if index == 0 else f"-{names[0]}"
            self._start_one_controller(policy, tuple(names), suffix, token_file)
        self.api_address = self.cpms[0].api_address

    def _start_one_controller(
        self, policy: Path, names: tuple[str, ...], suffix: str, token_file: Path
    ) -> None:
        npm_args = []
        for npm in self.spec.npms:
            if npm.name in names:
                node = self.net.get(npm.name)
                npm_args += ["--npm", f"{npm.name}={node.grpc_address},{npm.device_id}"]
        port = free_tcp_port()
        api_address = f"127.0.0.1:{port}"
        state_dir = self.run_dir / f"cpm{suffix}" if suffix else self.run_dir
        state_dir.mkdir(parents=True, exist_ok=True)
        # Every run of the topology is a new gateway: a new switch, so a new database too.
        database = self.run_dir / f"opengate{suffix}.db"
        database.unlink(missing_ok=True)
        socket_path = self.run_dir / f"cpm{suffix}.sock"
        argv = [
            sys.executable,
            "-m",
            "opengate.cli",
            # what it did when (a take-over, a reconnection): read when a test fails
            "--log-level",
            "info",
            "controller",
            "run",
            "--policy",
            str(policy),
            *npm_args,
            "--api",
            api_address,
            "--token-file",
            str(token_file),
            "--db",
            f"sqlite:///{database}",
            "--state-dir",
            str(state_dir),
            "--build",
            self.p4_build,
            "--api-socket",
            str(socket_path),
            # the rules the SPMs run, where the web console finds an alert's rule text
            *(arg for path in self.spm_rule_files() for arg in ("--rules-file", path)),
        ]
        process = self._spawn(f"controller{suffix}", argv, self.run_dir / f"controller{suffix}.log")
        wait_for_port("127.0.0.1", port, 60.0, process)
        self.cpms.append(Cpm(names, policy, api_address, socket_path, suffix))

    def _wait_npms_synced(self, timeout: float = 120.0) -> None:
        """Return once each controller is the primary of each of its NPMs and has reconciled
        it (pipeline, base tables, classifier): until then a site's hosts get no ARP answer."""
        processes = dict(self._processes)
        for cpm in self.cpms:
            seen: dict[str, Any] = {}

            def synced(cpm: Cpm = cpm, seen: dict[str, Any] = seen) -> bool:
                seen.update(self._npm_states(cpm))
                return all(
                    seen[name]["role"] == "primary" and seen[name]["synced"] for name in cpm.npms
                )

            what = f"the controller{cpm.suffix} to reconcile {', '.join(cpm.npms)}"
            try:
                _wait_until(what, synced, timeout, processes[f"controller{cpm.suffix}"], 0.2)
            except TimeoutError as error:
                raise TimeoutError(f"{error}: {seen}") from None

    def _npm_states(self, cpm: Cpm) -> dict[str, dict[str, Any]]:
        """A controller's view of its NPMs: each one's role, whether reconciled, its last
        take-over error and its session count."""
        npms = self.api("GET", "/api/v1/status", npm=cpm.npms[0])["npms"]
        keys = ("role", "synced", "error", "sessions")
        return {name: {k: state.get(k) for k in keys} for name, state in npms.items()}

    def diagnosis(self, lines: int = 40) -> str:
        """What a failed test's report shows of the topology: each controller's view of its
        NPMs, the state of the NPMs' ports, and the last lines of the controllers' and switches'
        logs."""
        out: list[str] = []
        for cpm in self.cpms:
            try:
                out.append(f"controller{cpm.suffix} status: {self._npm_states(cpm)}")
            except (httpx.HTTPError, OSError) as error:
                out.append(f"controller{cpm.suffix} status: unavailable ({error})")
        for npm in self.spec.npms:
            states = []
            for port in sorted(npm.ports):
                name = f"{npm.name}-eth{port}"
                try:
                    state = Path(f"/sys/class/net/{name}/operstate").read_text().strip()
                except OSError:
                    state = "missing"
                states.append(f"{name} {state}")
            out.append(f"{npm.name} ports: {', '.join(states)}")
        logs = sorted(self.run_dir.glob("controller*.log"))
        logs += [self.run_dir / f"{npm.name}.log" for npm in self.spec.npms]
        for path in logs:
            try:
                tail = path.read_text(errors="replace").splitlines()[-lines:]
            except OSError as error:
                tail = [f"(unreadable: {error})"]
            out.append(f"--- last {len(tail)} lines of {path}")
            out.extend(tail)
        return "\n".join(out)

    def cpm_for(self, npm: str | None) -> Cpm:
        """The controller of NPM `npm` (None: the first controller)."""
        for cpm in self.cpms:
            if npm is None or npm in cpm.npms:
                return cpm
        raise ConfigError(f"no NPM named {npm!r}")

    def spm_rule_files(self) -> list[str]:
        """The rule files the SPM daemons run: the topology's own and the shared ones found."""
        rules = [str(r) for r in self.spec.spm.rules]
        shared = shared_data_dir()
        rules += [str(shared / r) for r in self.spec.spm.shared_rules if (shared / r).exists()]
        return rules

    @property
    def cpm_socket(self) -> Path:
        """The controller's API on a Unix socket: the SPM hosts share the filesystem, not the
        network namespace, of the controller."""
        return self.run_dir / "cpm.sock"

    def api(self, method: str, path: str, npm: str | None = None, **kwargs: Any) -> Any:
        """Call the REST API (JSON in, JSON out) of the controller of `npm` (None: the first)."""
        return self._api_response(method, path, npm, **kwargs).json()

    def api_text(self, path: str, npm: str | None = None) -> str:
        """GET a text resource of the REST API (`/metrics`: Prometheus' text format)."""
        return self._api_response("GET", path, npm).text

    def _api_response(
        self, method: str, path: str, npm: str | None = None, **kwargs: Any
    ) -> httpx.Response:
        if self._http is None:
            self._http = httpx.Client(timeout=10.0)
        address = self.cpm_for(npm).api_address if npm is not None else self.api_address
        response = self._http.request(
            method,
            f"http://{address}{path}",
            headers={"Authorization": f"Bearer {self.api_token}"},
            **kwargs,
        )
        response.raise_for_status()
        return response

    def counter(self, name: str, index: int, npm: str = "npm1") -> int:
        """Packets counted by cell `index` of the NPM's indirect counter `name`, read over
        P4Runtime (reads need no primary role)."""
        return self.counter_cells(name, npm, index)[index]

    def counter_cells(
        self, name: str, npm: str = "npm1", index: int | None = None
    ) -> dict[int, int]:
        """Packets per cell of the NPM's indirect counter `name` (every cell in one read, or
        cell `index` alone)."""
        schema = P4Schema.load(self.program_dir / "opengate.p4info.txtpb")
        address = self.net.get(npm).grpc_address
        with P4RuntimeClient(address).connect(stream=False) as client:
            entries = client.read_counter(schema.counters.get(name).preamble.id, index)
            return {int(e.index.index): int(e.data.packet_count) for e in entries}

    def _start_spms(self) -> None:
        for host in self.spec.hosts_with_role("spm"):
            self.start_spm(host.name)
        for host in self.spec.hosts_with_role("ipsec"):
            self.start_ipsec_spm(host.name)

    def start_ipsec_spm(self, name: str) -> None:
        """Start IPsec SPM host `name`'s daemon (spm/ipsec: charon over VICI); returns when its
        controller has its first status report."""
        host = self.spec.host(name)
        node = self.net.get(host.name)
        npm = self.spec.npm_of(host).name
        cpm = self.cpm_for(npm)
        work = self.run_dir / host.name
        work.mkdir(parents=True, exist_ok=True)
        config = {
            "name": host.name,
            "interface": f"{host.name}-eth0",
            "cpm_url": f"unix:{cpm.socket}",
            "token": self.api_token,
            "run_dir": str(work / "charon"),
            "esp": os.environ.get("OPENGATE_IPSEC_ESP", "auto"),
        }
        config_path = work / "ipsec.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        argv = [sys.executable, "-m", "spm", "--log-level", "info", "ipsec"]
        argv += ["--config", str(config_path)]
        with (work / "ipsec.log").open("ab") as log:
            process = node.popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=str(repo_root()))
        self._processes.append((f"{host.name}:spm", process))

        def reported() -> bool:
            view = self.api("GET", "/api/v1/ipsec", npm=npm)
            return any(
                s["name"] == name and s["report_age_s"] is not None for s in view.get("spms", [])
            )

        _wait_until(
            f"{host.name}: the IPsec SPM to report (log {work / 'ipsec.log'})",
            reported,
            60.0,
            process,
        )

    def start_spm(self, name: str) -> None:
        """Start SPM host `name`'s clamd and SPM daemon (again, after kill_spm); returns when the
        daemon has logged its start."""
        host = self.spec.host(name)
        node = self.net.get(host.name)
        work = self.run_dir / host.name
        work.mkdir(parents=True, exist_ok=True)
        clamd_socket = self._clamd_for(host.name, node, work)
        npm = self.spec.npm_of(host).name
        tags = self.api("GET", f"/api/v1/spm/{host.name}/config", npm=npm)["tags"]
        rules = self.spm_rule_files()
        eve = work / "eve.json"
        eve.unlink(missing_ok=True)
        config = {
            "name": host.name,
            "interface": f"{host.name}-eth0",
            "tags": tags,
            "queue": {"num": 0, "length": 4096, "fail_open": False},
            "workers": self.spec.spm.workers,
            "dispatch": "jsq",
            "ips": {
                "engine": spm_engine(self.spec.spm),
                "rules": rules,
                "variables": {"HOME_NET": self.spec.spm.home_net, "EXTERNAL_NET": "!$HOME_NET"},
                "alert_action": "drop",
            },
            "av": {"enabled": True, "clamd_socket": str(clamd_socket), "on_clamd_down": "drop"},
            **({"bypass": self.spm_bypass} if self.spm_bypass else {}),
            "cpm_url": f"unix:{self.cpm_for(npm).socket}",
            "token": self.api_token,
            "eve_log": str(eve),
        }
        config_path = work / "spm.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        argv = [
            sys.executable,
            "-m",
            "spm",
            "--log-level",
            "info",
            "run",
            "--config",
            str(config_path),
        ]
        with (work / "spm.log").open("ab") as log:
            process = node.popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=str(repo_root()))
        self._processes.append((f"{host.name}:spm", process))
        _wait_until(
            f"{host.name}: opengate spm to start (log {work / 'spm.log'})",
            functools.partial(_spm_started, eve),
            60.0,
            process,
        )

    def kill_spm(self, name: str) -> float:
        """Kill SPM host `name`'s daemon and its workers with SIGKILL, as a crash of the host's
        inspection would (clamd stays up); returns the time.time() of the kill."""
        for index, (label, process) in enumerate(self._processes):
            if label == f"{name}:spm" and process.poll() is None:
                family = [process.pid, *descendants(process.pid)]
                killed_at = time.time()
                for pid in family:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                process.wait(timeout=10)
                del self._processes[index]
                return killed_at
        raise ConfigError(f"no running SPM daemon on host {name!r}")

    def spm_running(self, name: str) -> bool:
        return any(
            label == f"{name}:spm" and process.poll() is None for label, process in self._processes
        )

    def _clamd_for(self, name: str, node: Any, work: Path) -> Path:
        """The host's clamd socket, starting clamd unless it runs."""
        for label, process in self._processes:
            if label == f"{name}:clamd" and process.poll() is None:
                return work / "clamd.sock"
        return self._start_clamd(name, node, work)

    def _start_clamd(self, name: str, node: Any, work: Path) -> Path:
        database = work / "clamav-db"
        shutil.rmtree(database, ignore_errors=True)
        shutil.copytree(repo_root() / "spm" / "signatures", database)
        socket_path = work / "clamd.sock"
        socket_path.unlink(missing_ok=True)
        conf = work / "clamd.conf"
        conf.write_text(
            f"LocalSocket {socket_path}\nDatabaseDirectory {database}\nForeground yes\n"
            f"LogFile {work / 'clamd.log'}\nBytecode no\nStreamMaxLength 16M\nMaxThreads 4\n"
        )
        binary = shutil.which("clamd") or "/usr/sbin/clamd"
        process = node.popen(
            [binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self._processes.append((f"{name}:clamd", process))
        _wait_until(f"{name}: clamd to open {socket_path}", socket_path.exists, 60.0, process)
        return socket_path

    def _start_services(self) -> None:
        """Each host's services, on its IPv4 address and, where it has one, its IPv6 address."""
        for host in self.spec.hosts:
            if host.ip is None or not host.services:
                continue
            node = self.net.get(host.name)
            addresses = [str(host.ip.ip)] + ([str(host.ip6.ip)] if host.ip6 is not None else [])
            for address in addresses:
                self._start_host_services(node, host, address)

    def _start_host_services(self, node: Any, host: HostSpec, address: str) -> None:
        family = "6" if ":" in address else "4"
        if "http" in host.services:
            www = self.run_dir / "www" / host.name
            www.mkdir(parents=True, exist_ok=True)
            _fill_www(www, host.name)
            argv = [sys.executable, "-m", "topo.services", "http", "--bind", address]
            argv += ["--root", str(www)]
            with (self.run_dir / f"{host.name}-http{family}.log").open("wb") as log:
                process = node.popen(argv, stdout=log, stderr=subprocess.STDOUT)
            self._processes.append((f"{host.name}:http{family}", process))
            self._wait_in(node, process, address, 80)
        if "udp-echo" in host.services:
            argv = [sys.executable, "-m", "topo.services", "udp-echo", "--bind", address]
            process = node.popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self._processes.append((f"{host.name}:udp-echo{family}", process))
            probe = "from topo.services import wait_udp_echo; "
            probe += f"wait_udp_echo('{address}', 7, 20.0)"
            if node.popen([sys.executable, "-c", probe]).wait() != 0 or process.poll() is not None:
                raise RuntimeError(f"{host.name}: the UDP echo service did not start on {address}")
        if "iperf3" in host.services:
            process = node.popen(
                ["iperf3", "-s", "-B", address],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            self._processes.append((f"{host.name}:iperf3-{family}", process))
            self._wait_in(node, process, address, 5201)

    def _wait_in(
        self, node: Any, process: subprocess.Popen[bytes], address: str, port: int
    ) -> None:
        """Wait until `process` listens on address:port inside the host's namespace."""
        probe = (
            "from opengate.netutil import wait_for_port\n"
            f"wait_for_port('{address}', {port}, 20.0)\n"
        )
        result = node.popen([sys.executable, "-c", probe]).wait()
        if result != 0 or process.poll() is not None:
            raise RuntimeError(f"{node.name}: service on {address} port {port} did not start")

    def _spawn(self, name: str, argv: list[str], log_path: Path) -> subprocess.Popen[bytes]:
        with log_path.open("wb") as log:
            # Its own session: a Ctrl-C typed at the Mininet CLI is not meant for the controller.
            process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._processes.append((name, process))
        LOG.info("started %s (pid %d), log %s", name, process.pid, log_path)
        return process

    # -- use -----------------------------------------------------------------------------

    def run(self, host: str, command: str, timeout: float | None = None) -> CommandResult:
        """Run a shell command on a named host; its exit status and output. After `timeout`
        seconds (None: no limit) it is stopped, with whatever it started, and answers 124 as
        timeout(1) does. If the wait is cut short (SIGTERM to `topo run`, Ctrl-C), the command
        stays in `_commands` for stop() to end."""
        try:
            node = self.net.get(host)
        except KeyError:
            names = ", ".join(sorted(h.name for h in self.spec.hosts))
            raise ConfigError(f"no host named {host!r} (hosts: {names})") from None
        process = node.popen(
            ["/bin/sh", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        self._commands.add(process)
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_group(process)
            self._commands.discard(process)
            if process.stdout is not None:
                process.stdout.close()
            return CommandResult(host, command, 124, f"timed out after {timeout:g}s\n")
        # What it left running in the background (a server for the next command) runs on until
        # the topology stops.
        self._background += group_members(process.pid)
        self._commands.discard(process)
        return CommandResult(host, command, process.returncode, output.decode(errors="replace"))

    # -- tear-down -----------------------------------------------------------------------

    def stop(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None
        # commands still running: in other threads, or whose wait a signal cut short
        for process in list(self._commands):
            LOG.info("stopping a command still running (pid %d) and its process group", process.pid)
            stop_group(process)
        self._commands.clear()
        stop_members(self._background)
        self._background.clear()
        for name, process in reversed(self._processes):
            LOG.info("stopping %s (pid %d)", name, process.pid)
            stop_family(process)
        self._processes.clear()
        try:
            if self.net is not None:
                self.net.stop()
                self.net = None
        finally:
            if self._name_locks and os.environ.get(TOPOLOGY_ENV) == topology_token(
                switch_names(self.spec)
            ):
                del os.environ[TOPOLOGY_ENV]
            release_names(self._name_locks)
