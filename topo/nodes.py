"""Mininet node classes: a plain Linux bridge for LANs and the NPM running the P4 switch."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from mininet.node import Host, Switch

from opengate.netutil import stop_process
from opengate.switch import RunningSwitch, start_switch
from opengate.target import TargetChoice

LOG = logging.getLogger(__name__)

# Bash's notice of a job it started in the background ("[1] 12345").
_JOB_NOTICE = re.compile(r"\[\d+\] \d+\r\n")


class NetnsHost(Host):  # type: ignore[misc]
    """A Mininet host in its own network namespace only.

    Stock Mininet (`mnexec -n`) also gives each host a mount namespace and remounts / private,
    which fails where / is not a mount point, as in a chroot. A host needs only its network:
    the shell starts under `unshare --net`, and commands join it with `nsenter --net`.
    """

    def _popen(self, cmd: list[str], **params: Any) -> Any:
        if len(cmd) > 1 and cmd[0] == "mnexec" and cmd[1].startswith("-") and "n" in cmd[1]:
            cmd = ["mnexec", cmd[1].replace("n", ""), "unshare", "--net", *cmd[2:]]
        return super()._popen(cmd, **params)

    def monitor(self, timeoutms: int | None = None, findPid: bool = True) -> str:  # noqa: N803
        # Mininet drops bash's job notice of a backgrounded command only when it reads it in
        # one chunk with the PID marker that follows; read apart (a busy machine), the notice
        # would be printed as the command's output. Until the marker is in, drop it here too.
        waiting_for_pid = (
            findPid and (self.lastCmd or "").rstrip().endswith("&") and self.lastPid is None
        )
        data: str = super().monitor(timeoutms, findPid)
        if waiting_for_pid:
            data = _JOB_NOTICE.sub("", data, count=1)
        return data

    def popen(self, *args: Any, **kwargs: Any) -> Any:
        # In a session of its own, as `mnexec -d` would do: a Ctrl-C typed at the CLI is not for
        # the host's daemons and commands (the CLI passes it to the command it waits for).
        kwargs.setdefault("start_new_session", True)
        kwargs.setdefault("mncmd", ["nsenter", f"--net=/proc/{self.pid}/ns/net"])
        return super().popen(*args, **kwargs)


class RootNamespaceSwitch(Switch):  # type: ignore[misc]
    """A switch node in the root namespaces, whose commands run as they are.

    Stock Mininet runs them with `mnexec -a <pid>`, which joins the shell's mount namespace:
    that puts the command at the namespace's root, outside a chroot, and its working directory
    may not exist there (`links` then reported every switch interface MISSING in a Debian
    chroot). These nodes share the caller's namespaces, so there is nothing to join.
    """

    def popen(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("mncmd", ["mnexec", "-d"])
        return super().popen(*args, **kwargs)


class LanBridge(RootNamespaceSwitch):
    """A LAN segment: a Linux bridge made with iproute2 (no Open vSwitch, no controller)."""

    def __init__(self, name: str, **params: Any) -> None:
        super().__init__(name, **params)
        self.bridge_made = False  # stop() deletes the bridge only if start() made it

    def start(self, controllers: list[Any]) -> None:
        self.cmd(f"ip link add name {self.name} type bridge stp_state 0 mcast_snooping 0")
        self.bridge_made = True
        self.cmd(f"sysctl -qw net.ipv6.conf.{self.name}.disable_ipv6=1")
        for intf in self.intfList():
            if intf.name != "lo":
                self.cmd(f"ip link set dev {intf.name} master {self.name} up")
        self.cmd(f"ip link set dev {self.name} up")

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 - Mininet's signature
        if self.bridge_made:
            self.cmd(f"ip link del {self.name}")
            self.bridge_made = False
        super().stop(deleteIntfs)


class P4Npm(RootNamespaceSwitch):
    """An NPM: the selected P4 target (BMv2 or the built-in switch) on this node's interfaces,
    port numbers as given to addLink, P4Runtime on a free loopback port."""

    def __init__(
        self,
        name: str,
        device_id: int = 1,
        log_dir: Path = Path("run"),
        target: TargetChoice | None = None,
        **params: Any,
    ) -> None:
        super().__init__(name, **params)
        self.device_id = device_id
        self.log_dir = log_dir
        self.target = target
        self.running: RunningSwitch | None = None

    @property
    def grpc_address(self) -> str:
        if self.running is None:
            raise RuntimeError(f"{self.name} is not started")
        return self.running.grpc_address

    def start(self, controllers: list[Any]) -> None:
        ports = {self.ports[intf]: intf.name for intf in self.intfList() if intf.name != "lo"}
        for name in ports.values():
            self.cmd(f"sysctl -qw net.ipv6.conf.{name}.disable_ipv6=1")
            self.cmd(f"ethtool -K {name} tx off rx off tso off gso off gro off")
        self.running = start_switch(
            ports, self.log_dir / f"{self.name}.log", self.target, self.device_id
        )
        LOG.info(
            "%s: %s on %s, P4Runtime at %s",
            self.name,
            self.running.target.value,
            ports,
            self.running.grpc_address,
        )

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 - Mininet's signature
        if self.running is not None:
            stop_process(self.running.process)
            self.running = None
        super().stop(deleteIntfs)
