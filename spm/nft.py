"""The SPM's packet plumbing in the kernel: marks, NFQUEUE, policy routing back to the tag.

For each next-hop tag T the SPM serves:

* nftables: a map from source MAC 02:4f:47:00:TT:TT to the mark 0x4f00TTTT, set in a prerouting
  chain on the SPM interface; packets from other MACs are left alone (management traffic);
* a queue rule (priority mangle) sends marked packets to NFQUEUE `num`; a worker's verdict that
  blocks or bypasses a flow comes back as a flag in the packet mark, and a chain after the queue
  adds the flow (both directions of its 5-tuple) to a dynamic nftables set with a timeout: later
  packets of blocked flows are dropped, and of bypassed flows accepted, before the queue, without
  reaching user space;
* conntrack is kept off these packets (`notrack` at priority raw): the SPM needs no connection
  tracking, and tracking queued packets makes conntrack drop some of them (an unconfirmed entry
  clashes with the one the other direction created meanwhile, "insert_failed");
* `ip rule fwmark 0x4f00TTTT/0xff00ffff table 0x4f00TTTT` and in that table a default route via
  a gateway address (169.254.TT.TT, fe80::4f47:TTTT) whose neighbour entry is the tag MAC,
  permanent: accepted packets leave by the same interface with the tag as destination MAC;
* sysctls: forwarding on (IPv4 and IPv6), rp_filter and ICMP redirects off on the interface (the
  packets are not addressed to the SPM and leave where they came in); IPv6 has no sysctl for
  redirects, so an output chain drops the ICMPv6 redirects the SPM would send out of it.

Both families are handled alike: the table is `inet`, the flow sets come in pairs (`blocked4`,
`blocked6`, ...), the queue rule and the marks do not look at the family, and the routes back to
the tag are installed for IPv6 too where the interface has IPv6 on.

The queue rule is an nftables `queue` statement when the kernel has it (nft_queue), otherwise the
xtables NFQUEUE target in the mangle table through iptables-nft ("backend xt"); some kernels
(this project's CI included) ship without nft_queue.

With an AV queue (`av_queue`: Snort inspects at prerouting, the built-in AV after it), the packets
Snort accepts go on to the forward hook, where a second queue rule (priority mangle; nft `queue`,
or an iptables-nft chain jumped from the mangle FORWARD chain) sends the marked ones to NFQUEUE
`av_queue`; a chain after it (priority mangle + 10) adds a flow the AV blocks to the blocked sets
and drops the packet. Bypass flags are not saved there: a bypass by the AV alone would take the
flow away from Snort too.

`setup()` first removes whatever a previous run under the same SPM name left (it keeps a state
file under /run/opengate), so a crash is cleaned up at the next start; `teardown()` removes all
of it and restores the sysctls. Both are idempotent.

Not supported: VLAN sub-interfaces (use one on the host and name it as `interface`), more than one
SPM name sharing a tag in one network namespace.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spm.config import SpmConfig, tag_mac

LOG = logging.getLogger(__name__)

MARK_MAGIC = 0x4F000000
MARK_MAGIC_MASK = 0xFF000000
MARK_TAG_MASK = 0x0000FFFF
FLAG_BYPASS = 0x00010000
FLAG_BLOCK = 0x00020000
RULE_MASK = 0xFF00FFFF  # fwmark mask: magic + tag, flags ignored
RULE_PRIORITY = 100
BLOCK_TIMEOUT = 3600  # seconds a blocked flow stays in the kernel's drop set
FLOW_SET_SIZE = 262144
STATE_DIR = Path("/run/opengate")


def tag_mark(tag: int) -> int:
    return MARK_MAGIC | tag


def route_table(tag: int) -> int:
    return MARK_MAGIC | tag


def gateway4(tag: int) -> str:
    return f"169.254.{tag >> 8}.{tag & 0xFF}"


def gateway6(tag: int) -> str:
    return f"fe80::4f47:{tag:x}"


class PlumbingError(RuntimeError):
    """A command that sets up the kernel side failed."""


@dataclass(slots=True)
class Runner:
    """Runs the commands, optionally inside a named network namespace (tests, Mininet)."""

    netns: str | None = None
    log: list[str] = field(default_factory=list)

    def argv(self, argv: Sequence[str]) -> list[str]:
        # nsenter joins only the network namespace; `ip netns exec` also remounts / and /sys,
        # which fails where / is not a mount point (a chroot).
        prefix = ["nsenter", f"--net=/run/netns/{self.netns}"] if self.netns else []
        return prefix + list(argv)

    def run(
        self, argv: Sequence[str], stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        full = self.argv(argv)
        self.log.append(" ".join(full))
        proc = subprocess.run(full, input=stdin, capture_output=True, text=True, check=False)
        if check and proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip()
            raise PlumbingError(f"{' '.join(full)} failed ({proc.returncode}): {detail}")
        return proc


@dataclass(frozen=True, slots=True)
class Plan:
    """What `setup()` installs, derived from the configuration."""

    name: str
    interface: str
    tags: tuple[int, ...]
    queue_num: int
    fail_open: bool
    backend: str  # auto | nft | xt
    bypass_timeout: int = 120  # idle seconds a bypassed flow stays in the kernel's pass set
    queue_count: int = 1  # queues num .. num+count-1, flows spread by hash (Snort: one a thread)
    av_queue: int | None = None  # a second queue at the forward hook (the AV beside Snort)

    @classmethod
    def from_config(cls, cfg: SpmConfig, queue_count: int = 1, av_queue: int | None = None) -> Plan:
        return cls(
            cfg.name,
            cfg.interface,
            cfg.tags,
            cfg.queue.num,
            cfg.queue.fail_open,
            cfg.queue.backend,
            int(cfg.limits.flow_timeout),
            queue_count,
            av_queue,
        )

    @property
    def queues(self) -> range:
        return range(self.queue_num, self.queue_num + self.queue_count)

    @property
    def table(self) -> str:
        return "opengate_spm_" + re.sub(r"[^A-Za-z0-9_]", "_", self.name)

    @property
    def xt_chain(self) -> str:
        return ("OG_SPM_" + re.sub(r"[^A-Za-z0-9_]", "_", self.name))[:28]

    @property
    def xt_av_chain(self) -> str:
        """The xt backend's chain for the AV queue (jumped from mangle FORWARD)."""
        return ("OG_SPMAV_" + re.sub(r"[^A-Za-z0-9_]", "_", self.name))[:28]

    @property
    def all_queues(self) -> list[int]:
        """Every queue a listener must bind: the inspection queues, then the AV queue."""
        return [*self.queues, *([] if self.av_queue is None else [self.av_queue])]

    def nft_script(self, with_queue: bool) -> str:
        elements = ", ".join(f"{tag_mac(t)} : 0x{tag_mark(t):08x}" for t in self.tags)
        macs = ", ".join(tag_mac(t) for t in self.tags)
        iface = json.dumps(self.interface)
        m = f"0x{MARK_MAGIC:08x}"
        lines = [
            f"table inet {self.table} {{",
            "  map tag_marks {",
            "    type ether_addr : mark",
            f"    elements = {{ {elements} }}",
            "  }",
            "  set tag_macs {",
            "    type ether_addr",
            f"    elements = {{ {macs} }}",
            "  }",
        ]
        for name, timeout in (("blocked", BLOCK_TIMEOUT), ("bypassed", self.bypass_timeout)):
            for fam, addr in (("4", "ipv4_addr"), ("6", "ipv6_addr")):
                lines += [
                    f"  set {name}{fam} {{",
                    f"    type {addr} . inet_proto . inet_service . {addr} . inet_service",
                    f"    flags dynamic, timeout; timeout {timeout}s; size {FLOW_SET_SIZE}",
                    "  }",
                ]
        lines += [
            "  chain no_conntrack {",
            "    type filter hook prerouting priority raw; policy accept;",
            f"    iifname {iface} ether saddr @tag_macs notrack",
            "  }",
            "  chain no_redirects {",
            "    type filter hook output priority filter; policy accept;",
            f"    oifname {iface} icmpv6 type nd-redirect counter drop",
            "  }",
            "  chain classify {",
            "    type filter hook prerouting priority mangle - 10; policy accept;",
            f"    iifname != {iface} return",
            "    meta mark set ether saddr map @tag_marks",
            f"    meta mark & 0x{MARK_MAGIC_MASK:08x} != {m} return",
        ]
        for fam, ip in (("4", "ip"), ("6", "ip6")):
            key = f"{ip} saddr . meta l4proto . th sport . {ip} daddr . th dport"
            lines += [
                f"    {key} @blocked{fam} counter drop",
                f"    {key} @bypassed{fam} update @bypassed{fam} {{ {key} }} "
                f"meta mark set meta mark | 0x{FLAG_BYPASS:08x}",
            ]
        lines.append("  }")
        if with_queue:
            bypass = " bypass" if self.fail_open else ""
            lines += [
                "  chain to_queue {",
                "    type filter hook prerouting priority mangle; policy accept;",
                f"    meta mark & 0x{MARK_MAGIC_MASK | FLAG_BYPASS:08x} == {m} "
                f"counter queue num {self._nft_queues}{bypass}",
                "  }",
            ]
        lines += [
            "  chain save_flags {",
            "    type filter hook prerouting priority mangle + 10; policy accept;",
            f"    meta mark & 0x{MARK_MAGIC_MASK:08x} != {m} return",
        ]
        for flag, name in ((FLAG_BLOCK, "blocked"), (FLAG_BYPASS, "bypassed")):
            for fam, ip in (("4", "ip"), ("6", "ip6")):
                fwd = f"{ip} saddr . meta l4proto . th sport . {ip} daddr . th dport"
                rev = f"{ip} daddr . meta l4proto . th dport . {ip} saddr . th sport"
                lines.append(
                    f"    meta mark & 0x{flag:08x} != 0 add @{name}{fam} {{ {fwd} }} "
                    f"add @{name}{fam} {{ {rev} }}"
                )
        lines += [
            f"    meta mark & 0x{FLAG_BLOCK:08x} != 0 counter drop",
            "  }",
        ]
        if self.av_queue is not None:
            lines += self._nft_av_chains(with_queue)
        lines.append("}")
        return "\n".join(lines) + "\n"

    def _nft_av_chains(self, with_queue: bool) -> list[str]:
        """At the forward hook, after the inspection queues: the AV queue, then its blocks."""
        iface = json.dumps(self.interface)
        m = f"0x{MARK_MAGIC:08x}"
        lines: list[str] = []
        if with_queue:
            bypass = " bypass" if self.fail_open else ""
            lines += [
                "  chain to_av_queue {",
                "    type filter hook forward priority mangle; policy accept;",
                f"    iifname {iface} meta mark & 0x{MARK_MAGIC_MASK | FLAG_BYPASS:08x} == {m} "
                f"counter queue num {self.av_queue}{bypass}",
                "  }",
            ]
        lines += [
            "  chain save_av_block {",
            "    type filter hook forward priority mangle + 10; policy accept;",
            f"    iifname != {iface} return",
            f"    meta mark & 0x{MARK_MAGIC_MASK:08x} != {m} return",
        ]
        for fam, ip in (("4", "ip"), ("6", "ip6")):
            fwd = f"{ip} saddr . meta l4proto . th sport . {ip} daddr . th dport"
            rev = f"{ip} daddr . meta l4proto . th dport . {ip} saddr . th sport"
            for flag, name in ((FLAG_BLOCK, "blocked"), (FLAG_BYPASS, "bypassed")):
                lines.append(
                    f"    meta mark & 0x{flag:08x} != 0 add @{name}{fam} {{ {fwd} }} "
                    f"add @{name}{fam} {{ {rev} }}"
                )
        lines += [f"    meta mark & 0x{FLAG_BLOCK:08x} != 0 counter drop", "  }"]
        return lines

    @property
    def _nft_queues(self) -> str:
        last = self.queues[-1]
        return str(self.queue_num) if last == self.queue_num else f"{self.queue_num}-{last}"

    def xt_rules(self) -> list[list[str]]:
        """iptables arguments (without the binary) for the xt backend, in order."""
        target = ["-j", "NFQUEUE", "--queue-num", str(self.queue_num)]
        if self.queue_count > 1:  # by a hash of the flow, so that a flow stays on its queue
            target = ["-j", "NFQUEUE", "--queue-balance", f"{self.queue_num}:{self.queues[-1]}"]
        if self.fail_open:
            target.append("--queue-bypass")
        mark = f"0x{MARK_MAGIC:08x}/0x{MARK_MAGIC_MASK | FLAG_BYPASS:08x}"
        rules = [
            ["-t", "mangle", "-N", self.xt_chain],
            ["-t", "mangle", "-A", self.xt_chain, "-m", "mark", "--mark", mark, *target],
            ["-t", "mangle", "-A", "PREROUTING", "-i", self.interface, "-j", self.xt_chain],
        ]
        if self.av_queue is not None:
            av_target = ["-j", "NFQUEUE", "--queue-num", str(self.av_queue)]
            if self.fail_open:
                av_target.append("--queue-bypass")
            chain = self.xt_av_chain
            rules += [
                ["-t", "mangle", "-N", chain],
                ["-t", "mangle", "-A", chain, "-m", "mark", "--mark", mark, *av_target],
                ["-t", "mangle", "-A", "FORWARD", "-i", self.interface, "-j", chain],
            ]
        return rules

    def xt_jumps(self) -> list[tuple[str, str]]:
        """(built-in chain, our chain) pairs the xt backend may have installed; cleanup removes
        all of them whatever this plan says, so that a crashed run's are found too."""
        return [("PREROUTING", self.xt_chain), ("FORWARD", self.xt_av_chain)]


_SYSCTLS_ALL = (
    "net.ipv4.ip_forward",
    "net.ipv6.conf.all.forwarding",
    "net.ipv4.conf.all.rp_filter",
    "net.ipv4.conf.all.send_redirects",
)


def _sysctl_values(iface: str) -> dict[str, str]:
    return {
        "net.ipv4.ip_forward": "1",
        "net.ipv6.conf.all.forwarding": "1",
        "net.ipv4.conf.all.rp_filter": "0",
        "net.ipv4.conf.all.send_redirects": "0",
        f"net.ipv4.conf.{iface}.rp_filter": "0",
        f"net.ipv4.conf.{iface}.send_redirects": "0",
        f"net.ipv4.conf.{iface}.forwarding": "1",
    }


class Plumbing:
    """Installs and removes a `Plan` (idempotent; remembers enough in a state file to clean up
    after a crash)."""

    def __init__(
        self, plan: Plan, runner: Runner | None = None, state_dir: Path = STATE_DIR
    ) -> None:
        self.plan = plan
        self.runner = runner or Runner()
        suffix = f"-{self.runner.netns}" if self.runner.netns else ""
        self.state_path = state_dir / f"spm-{plan.table}{suffix}.json"
        self.backend: str | None = None

    # --- public ---------------------------------------------------------------------------------

    def setup(self) -> str:
        """Clean up leftovers, then install everything. Returns the queue backend used."""
        self.cleanup_stale()
        # Ask the kernel over netlink, not /sys: /sys shows the namespace it was mounted in,
        # which need not be ours (e.g. under nsenter, or in a chroot without a remounted /sys).
        if self.runner.run(
            ["ip", "link", "show", "dev", self.plan.interface], check=False
        ).returncode:
            raise PlumbingError(f"interface {self.plan.interface!r} does not exist")
        saved = self._apply_sysctls()
        state: dict[str, object] = {
            "sysctl": saved,
            "tags": list(self.plan.tags),
            "queues": self.plan.all_queues,
            "av_queue": self.plan.av_queue,
            "backend": None,
        }
        self._write_state(state)
        backend = self._install_filter()
        self._write_state({**state, "backend": backend})
        self._install_routes()
        self.backend = backend
        LOG.info(
            "spm %s: plumbing up on %s (tags %d, queue %d, backend %s, fail-open %s%s)",
            self.plan.name,
            self.plan.interface,
            len(self.plan.tags),
            self.plan.queue_num,
            backend,
            self.plan.fail_open,
            "" if self.plan.av_queue is None else f", AV queue {self.plan.av_queue} at forward",
        )
        return backend

    def teardown(self) -> None:
        state = self._read_state()
        self._remove_filter()
        self._remove_routes(self.plan.tags)
        if state is not None:
            old = state.get("tags")
            old_tags = [int(t) for t in old] if isinstance(old, list) else []
            self._remove_routes([t for t in old_tags if t not in self.plan.tags])
            saved = state.get("sysctl")
            if isinstance(saved, dict):
                self._restore_sysctls({str(k): str(v) for k, v in saved.items()})
        self.state_path.unlink(missing_ok=True)
        LOG.info("spm %s: plumbing removed", self.plan.name)

    def cleanup_stale(self) -> bool:
        """Remove what a previous (crashed) run left; True if there was something."""
        state = self._read_state()
        found = state is not None or self._table_exists() or self._xt_chain_exists()
        if found:
            LOG.warning("spm %s: removing leftovers of a previous run", self.plan.name)
            self.teardown()
        return found

    # --- sysctl ---------------------------------------------------------------------------------

    def _apply_sysctls(self) -> dict[str, str]:
        saved: dict[str, str] = {}
        for key, value in _sysctl_values(self.plan.interface).items():
            proc = self.runner.run(["sysctl", "-n", key], check=False)
            if proc.returncode != 0:
                raise PlumbingError(f"cannot read sysctl {key}: {proc.stderr.strip()}")
            saved[key] = proc.stdout.strip()
            self.runner.run(["sysctl", "-q", "-w", f"{key}={value}"])
        return saved

    def _restore_sysctls(self, saved: dict[str, str]) -> None:
        for key, value in saved.items():
            self.runner.run(["sysctl", "-q", "-w", f"{key}={value}"], check=False)

    # --- filter (nftables + queue rule) ---------------------------------------------------------

    def _table_exists(self) -> bool:
        proc = self.runner.run(["nft", "list", "table", "inet", self.plan.table], check=False)
        return proc.returncode == 0

    def _iptables(self, family: int) -> str:
        names = ("iptables-nft", "iptables") if family == 4 else ("ip6tables-nft", "ip6tables")
        for name in names:
            if shutil.which(name):
                return name
        raise PlumbingError(f"backend xt needs {names[0]} (Debian package iptables)")

    def _xt_chain_exists(self) -> bool:
        for family in (4, 6):
            try:
                binary = self._iptables(family)
            except PlumbingError:
                return False
            for _hook, chain in self.plan.xt_jumps():
                proc = self.runner.run(
                    ["nft", "list", "chain", "ip" if family == 4 else "ip6", "mangle", chain],
                    check=False,
                )
                if proc.returncode == 0:
                    return True
                proc = self.runner.run([binary, "-t", "mangle", "-S", chain], check=False)
                if proc.returncode == 0:
                    return True
        return False

    def _install_filter(self) -> str:
        backend = self.plan.backend
        if backend in ("auto", "nft"):
            proc = self.runner.run(
                ["nft", "-f", "-"], stdin=self.plan.nft_script(True), check=False
            )
            if proc.returncode == 0:
                return "nft"
            if backend == "nft":
                raise PlumbingError(f"nft could not install the queue rule: {proc.stderr.strip()}")
            LOG.info(
                "spm %s: nftables has no queue statement here (%s); using xtables NFQUEUE",
                self.plan.name,
                proc.stderr.strip().splitlines()[0] if proc.stderr.strip() else "?",
            )
        self.runner.run(["nft", "-f", "-"], stdin=self.plan.nft_script(False))
        for family in (4, 6):
            binary = self._iptables(family)
            for args in self.plan.xt_rules():
                self.runner.run([binary, *args])
        return "xt"

    def _remove_filter(self) -> None:
        self.runner.run(["nft", "delete", "table", "inet", self.plan.table], check=False)
        for family in (4, 6):
            try:
                binary = self._iptables(family)
            except PlumbingError:
                continue
            for hook, chain in self.plan.xt_jumps():
                # delete every jump to our chain, then the chain
                for _ in range(64):
                    listing = self.runner.run([binary, "-t", "mangle", "-S", hook], check=False)
                    jumps = [
                        line.split()[2:]
                        for line in listing.stdout.splitlines()
                        if line.startswith(f"-A {hook} ") and line.split()[-1] == chain
                    ]
                    if not jumps:
                        break
                    self.runner.run([binary, "-t", "mangle", "-D", hook, *jumps[0]], check=False)
                self.runner.run([binary, "-t", "mangle", "-F", chain], check=False)
                self.runner.run([binary, "-t", "mangle", "-X", chain], check=False)

    # --- routing --------------------------------------------------------------------------------

    def _install_routes(self) -> None:
        iface = self.plan.interface
        cmds: list[str] = []
        cmds6: list[str] = []
        for tag in self.plan.tags:
            mark = f"0x{tag_mark(tag):08x}/0x{RULE_MASK:08x}"
            table = str(route_table(tag))
            mac = tag_mac(tag)
            cmds.append(f"neigh replace {gateway4(tag)} lladdr {mac} dev {iface} nud permanent")
            cmds.append(
                f"route replace default via {gateway4(tag)} dev {iface} onlink table {table}"
            )
            cmds.append(f"rule add fwmark {mark} table {table} priority {RULE_PRIORITY}")
            cmds6.append(f"neigh replace {gateway6(tag)} lladdr {mac} dev {iface} nud permanent")
            cmds6.append(f"route replace default via {gateway6(tag)} dev {iface} table {table}")
            cmds6.append(f"rule add fwmark {mark} table {table} priority {RULE_PRIORITY}")
        self.runner.run(["ip", "-batch", "-"], stdin="\n".join(cmds) + "\n")
        if self._ipv6_enabled():
            self.runner.run(["ip", "-6", "-batch", "-"], stdin="\n".join(cmds6) + "\n")

    def _ipv6_enabled(self) -> bool:
        key = f"net.ipv6.conf.{self.plan.interface}.disable_ipv6"
        proc = self.runner.run(["sysctl", "-n", key], check=False)
        return proc.returncode == 0 and proc.stdout.strip() == "0"

    def _remove_routes(self, tags: Sequence[int]) -> None:
        if not tags:
            return
        iface = self.plan.interface
        wanted = {route_table(t) for t in tags}
        for family in ("-4", "-6"):
            proc = self.runner.run(["ip", family, "-j", "rule", "show"], check=False)
            try:
                rules = json.loads(proc.stdout or "[]")
            except json.JSONDecodeError:
                rules = []
            cmds: list[str] = []
            for rule in rules:
                table = rule.get("table")
                if (
                    rule.get("priority") == RULE_PRIORITY
                    and str(table).isdigit()
                    and int(table) in wanted
                ):
                    mark = rule.get("fwmark", "")
                    mask = rule.get("fwmask", "")
                    spec = f"{mark}/{mask}" if mask else mark
                    cmds.append(f"rule del fwmark {spec} table {table} priority {RULE_PRIORITY}")
            for tag in tags:
                cmds.append(f"route flush table {route_table(tag)}")
                gw = gateway4(tag) if family == "-4" else gateway6(tag)
                cmds.append(f"neigh del {gw} dev {iface}")
            self.runner.run(
                ["ip", family, "-force", "-batch", "-"], stdin="\n".join(cmds) + "\n", check=False
            )

    # --- state file -----------------------------------------------------------------------------

    def _read_state(self) -> dict[str, object] | None:
        try:
            data = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError) as exc:
            LOG.warning(
                "spm %s: unreadable state file %s: %s", self.plan.name, self.state_path, exc
            )
            return {}
        return data if isinstance(data, dict) else {}

    def _write_state(self, state: dict[str, object]) -> None:
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self.state_path)
