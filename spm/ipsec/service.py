"""The IPsec SPM daemon: `opengate spm ipsec --config ipsec.yaml` on an SPM host behind the NPM.

Configuration (YAML):

    name: ipsec1                 # the SPM's name in the policy (spm_pools)
    interface: ipsec1-eth0       # the interface towards the NPM
    cpm_url: unix:/run/og/cpm.sock   # or http://host:port
    token: ...                   # the CPM API's bearer token
    run_dir: /run/og/ipsec1      # charon's configuration, VICI socket and log
    esp: auto                    # kernel (XFRM) | userspace (libipsec) | auto (probe)

Every second it sends the CPM a load report (so that the CPM sees it up or down like any SPM),
asks whether it is the active IPsec SPM (GET /api/v1/ipsec/spm/NAME/config) and sends the state
of its tunnels (POST .../status). Active, it holds the gateway's IPsec address on its interface,
routes everything else back to the NPM (a default route through a static neighbour with the
NPM's MAC; the NPM does not check destination MACs that carry no tag), forwards between the NPM
and its tunnels, and has charon hold the tunnels the CPM gave it; standby, it holds nothing. A
change of policy (the CPM's hash) reloads the tunnels.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from opengate.errors import ConfigError
from opengate.yamlconf import Reader, as_str, load_yaml, one_of
from spm.ipsec.charon import ESP_MODES, Charon
from spm.ipsec.control import IpsecControl, IpsecError

LOG = logging.getLogger(__name__)

RETRY_S = 5.0  # a tunnel that should be up and has no SA is started again this often
NEXT_HOP = "169.254.79.71"
# TCP through a tunnel must fit what is left of a 1,500-byte frame after ESP (in UDP): the inner
# MTU is 1,400 with libipsec's TUN device, a little more with XFRM. A host behind the NPM cannot
# learn it by path MTU discovery (the NPM does not pass ICMP errors from the IPsec SPM to it), so
# the IPsec SPM clamps the MSS of the TCP connections it forwards.
MSS_CLAMP = 1360
NFT_TABLE = "opengate_ipsec"
NFT_RULES = f"""table ip {NFT_TABLE} {{
  chain forward {{
    type filter hook forward priority mangle; policy accept;
    tcp flags syn tcp option maxseg size > {MSS_CLAMP} tcp option maxseg size set {MSS_CLAMP}
  }}
}}
"""  # the NPM as this host's next hop (a static neighbour entry)


@dataclass(frozen=True, slots=True)
class IpsecSpmConfig:
    name: str
    interface: str
    cpm_url: str
    token: str
    run_dir: Path
    esp: str = "auto"


def _drop_nft_table() -> None:
    subprocess.run(["nft", "delete", "table", "ip", NFT_TABLE], capture_output=True, check=False)


def load_config(path: str | Path) -> IpsecSpmConfig:
    reader = Reader(path, load_yaml(path))
    config = IpsecSpmConfig(
        name=reader.get("name", as_str),
        interface=reader.get("interface", as_str),
        cpm_url=reader.get("cpm_url", as_str),
        token=reader.get("token", as_str),
        run_dir=Path(reader.get("run_dir", as_str)),
        esp=reader.get("esp", one_of(*ESP_MODES), "auto"),
    )
    reader.reject_unknown()
    return config


def _ip(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *argv], check=check, capture_output=True, text=True)


class IpsecService:
    """One IPsec SPM: charon, its tunnels, and the conversation with the CPM."""

    def __init__(self, config: IpsecSpmConfig) -> None:
        self.config = config
        self.charon = Charon(config.run_dir, esp=config.esp)
        self.control = IpsecControl(self.charon)
        self.active = False
        self.policy: str | None = None
        self.address: str | None = None
        self.lan_addresses: set[str] = set()  # on lo, for libipsec's routes (see _activate)
        self.starts: dict[str, float] = {}  # tunnels we bring up -> when we last tried
        self._stop = threading.Event()
        transport = None
        base = config.cpm_url
        if base.startswith("unix:"):
            transport = httpx.HTTPTransport(uds=base.removeprefix("unix:"))
            base = "http://cpm"
        self.http = httpx.Client(
            base_url=base.rstrip("/"),
            transport=transport,
            timeout=3.0,
            headers={"Authorization": f"Bearer {config.token}"},
        )
        self._cpu: tuple[float, float] | None = None

    # -- life cycle ----------------------------------------------------------------------------

    def run(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self._stop.set())
        self.start()
        try:
            while not self._stop.is_set():
                self.step()
                self._stop.wait(1.0)
        finally:
            self.stop()

    def start(self) -> None:
        self.config.run_dir.mkdir(parents=True, exist_ok=True)
        for key in ("net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0"):
            subprocess.run(["sysctl", "-qw", key], check=False)
        subprocess.run(
            ["sysctl", "-qw", f"net.ipv4.conf.{self.config.interface}.rp_filter=0"], check=False
        )
        subprocess.run(
            ["nft", "delete", "table", "ip", NFT_TABLE], capture_output=True, check=False
        )
        clamp = subprocess.run(
            ["nft", "-f", "-"], input=NFT_RULES, capture_output=True, text=True, check=False
        )
        if clamp.returncode != 0:
            LOG.warning("ipsec spm: no MSS clamping (nft: %s)", clamp.stderr.strip())
        self.charon.start()
        self.control.watch()
        LOG.info(
            "ipsec spm %s: charon pid %s ready, ESP in %s (%s)",
            self.config.name,
            self.charon.pid,
            self.charon.esp,
            self.charon.esp_reason,
        )

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._standby()
        self.control.close()
        self.charon.stop()
        self.http.close()
        subprocess.run(
            ["nft", "delete", "table", "ip", NFT_TABLE], capture_output=True, check=False
        )

    # -- one round: report, learn the role, act, report the tunnels -------------------------------

    def step(self) -> None:
        self._report_load()
        try:
            response = self.http.get(f"/api/v1/ipsec/spm/{self.config.name}/config")
            response.raise_for_status()
            config: dict[str, Any] = response.json()
        except (httpx.HTTPError, ValueError) as error:
            LOG.warning("ipsec spm %s: no configuration from the CPM: %s", self.config.name, error)
            return
        if config.get("active"):
            if not self.active or config.get("policy") != self.policy:
                self._activate(config)
        elif self.active:
            self._standby()
        self._report_status()

    def _report_status(self) -> None:
        status = self.control.status()
        body = {"esp": self.charon.esp, "active": self.active, "tunnels": status}
        try:
            self.http.post(f"/api/v1/ipsec/spm/{self.config.name}/status", json=body)
        except httpx.HTTPError as error:
            LOG.warning("ipsec spm %s: status report failed: %s", self.config.name, error)
        # Tunnels that should be up and have no SA at all (the peer refused, or was away):
        # try again, every RETRY_S seconds (charon does not retry a refused IKE_SA by itself).
        now = time.monotonic()
        for tunnel in status:
            name = tunnel["name"]
            due = name in self.starts and now - self.starts[name] >= RETRY_S
            if due and tunnel["state"] == "down":
                self.starts[name] = now
                self.control.initiate_async(name)

    def _activate(self, config: dict[str, Any]) -> None:
        interface = self.config.interface
        address = str(config["address"])
        if self.address != address:
            if self.address is not None:
                _ip("addr", "del", f"{self.address}/32", "dev", interface, check=False)
            _ip("addr", "replace", f"{address}/32", "dev", interface)
            self.address = address
        _ip("neigh", "replace", NEXT_HOP, "lladdr", str(config["npm_mac"]), "dev", interface,
            "nud", "permanent")  # fmt: skip
        _ip("route", "replace", "default", "via", NEXT_HOP, "dev", interface, "onlink")
        if self.charon.esp == "userspace":
            self._hold_lan_addresses(config)
        wanted = {str(t["name"]) for t in config.get("tunnels", [])}
        # A new policy: tunnels gone are unloaded; the others are loaded again (replacing their
        # configuration and secret) and then their SAs closed, so that new keys, proposals and
        # subnets take effect at once, not at the next rekey, and a peer that starts again at
        # once meets the new configuration.
        before = set(self.control.tunnels)
        for name in before - wanted:
            self.control.unload(name)
        for tunnel in config.get("tunnels", []):
            name = str(tunnel["name"])
            try:
                self.control.load_messages(
                    name, tunnel["connection"], tunnel.get("secret"), key=tunnel.get("key")
                )
            except IpsecError as error:
                LOG.error("ipsec spm %s: %s", self.config.name, error)
                continue
            if name in before:
                self.control.close_sas(name)
            if tunnel.get("start", True):
                self.control.initiate_async(name)
                self.starts[name] = time.monotonic()
        self.starts = {n: t for n, t in self.starts.items() if n in wanted}
        self.active = True
        self.policy = config.get("policy")
        LOG.info(
            "ipsec spm %s: active, holding %s with %d tunnel(s)",
            self.config.name,
            address,
            len(wanted),
        )

    def _hold_lan_addresses(self, config: dict[str, Any]) -> None:
        """libipsec routes a remote subnet into its TUN device only with a source address in the
        tunnel's local subnet on this host (strongSwan 5.9 refuses the route otherwise): hold
        each local subnet's network address on lo. Nothing sends to it; nothing else uses it."""
        wanted: set[str] = set()
        for tunnel in config.get("tunnels", []):
            for conn in tunnel["connection"].values():
                for child in conn.get("children", {}).values():
                    for net in child.get("local_ts", []):
                        wanted.add(str(ipaddress.IPv4Network(net, strict=False).network_address))
        for address in self.lan_addresses - wanted:
            _ip("addr", "del", f"{address}/32", "dev", "lo", check=False)
        for address in wanted - self.lan_addresses:
            _ip("addr", "replace", f"{address}/32", "dev", "lo")
        self.lan_addresses = wanted

    def _standby(self) -> None:
        for name in list(self.control.tunnels):
            self.control.unload(name)
        for address in self.lan_addresses:
            _ip("addr", "del", f"{address}/32", "dev", "lo", check=False)
        self.lan_addresses = set()
        if self.address is not None:
            _ip("addr", "del", f"{self.address}/32", "dev", self.config.interface, check=False)
            self.address = None
        if self.active:
            LOG.info("ipsec spm %s: standby", self.config.name)
        self.active = False
        self.policy = None
        self.starts = {}

    def _report_load(self) -> None:
        load = {"ts": time.time(), "cpu": self._charon_cpu(), "queue_depth": 0, "workers": 1}
        try:
            self.http.post(f"/api/v1/spm/{self.config.name}/load", json=load).raise_for_status()
        except httpx.HTTPError as error:
            LOG.warning("ipsec spm %s: load report failed: %s", self.config.name, error)

    def _charon_cpu(self) -> float:
        """charon's CPU use since the last report, in percent of one core."""
        pid = self.charon.pid
        if pid is None:
            return 0.0
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            return 0.0
        ticks = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        now = time.monotonic()
        last, self._cpu = self._cpu, (now, ticks)
        if last is None or now <= last[0]:
            return 0.0
        return round(min(100.0, 100.0 * (ticks - last[1]) / (now - last[0])), 1)


def run(config_path: Path) -> int:
    try:
        config = load_config(config_path)
    except ConfigError as error:
        LOG.error("%s", error)
        return 2
    IpsecService(config).run()
    return 0
