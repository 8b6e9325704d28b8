"""The topology as data (topo/*.yaml), validated with errors that name file, line and field."""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from opengate.errors import ConfigError
from opengate.yamlconf import (
    Reader,
    as_int,
    as_ipv4,
    as_ipv4_interface,
    as_ipv6,
    as_ipv6_interface,
    as_mac,
    as_str,
    load_yaml,
    one_of,
)

ROLES = ("inside", "outside", "spm", "ipsec")  # ipsec: an IPsec SPM host (spm/ipsec)
SPM_ROLES = ("spm", "ipsec")  # hosts attached to an NPM port or a shared segment
SERVICES = ("http", "iperf3", "udp-echo")


@dataclass(frozen=True, slots=True)
class NpmSpec:
    name: str
    device_id: int
    ports: dict[int, str]  # NPM port number -> LAN name or SPM host name
    policy: Path | None = None  # this NPM's own policy (and controller): a site of its own


@dataclass(frozen=True, slots=True)
class LanSpec:
    name: str
    gateway_mac: str | None  # None: a segment with no gateway address (SPMs shared by NPMs)


@dataclass(frozen=True, slots=True)
class HostSpec:
    name: str
    role: str
    mac: str
    lan: str | None = None
    ip: ipaddress.IPv4Interface | None = None
    gateway: ipaddress.IPv4Address | None = None
    ip6: ipaddress.IPv6Interface | None = None  # None: IPv6 is off on the host
    gateway6: ipaddress.IPv6Address | None = None
    npm_port: int | None = None
    services: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SpmSpec:
    rules: tuple[Path, ...] = ()
    shared_rules: tuple[str, ...] = ()
    home_net: str = "any"
    workers: int = 1
    engine: str = "auto"  # the SPMs' IPS: auto (Snort 3 where installed) | builtin | snort


@dataclass(frozen=True, slots=True)
class TopologySpec:
    name: str
    path: Path
    policy: Path
    npms: tuple[NpmSpec, ...]
    lans: tuple[LanSpec, ...]
    hosts: tuple[HostSpec, ...]
    spm: SpmSpec = SpmSpec()

    def host(self, name: str) -> HostSpec:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def hosts_with_role(self, role: str) -> list[HostSpec]:
        return [h for h in self.hosts if h.role == role]

    def policy_of(self, npm: NpmSpec) -> Path:
        return npm.policy or self.policy

    def npm_of(self, host: HostSpec) -> NpmSpec:
        """The (first) NPM that reaches SPM host `host`."""
        for npm in self.npms:
            if self.host_port(npm, host) is not None:
                return npm
        return self.npms[0]

    def host_port(self, npm: NpmSpec, host: HostSpec) -> int | None:
        """The port of `npm` that reaches `host` (an SPM's own port, or its segment's)."""
        for port, peer in npm.ports.items():
            if peer == host.name or (host.lan is not None and peer == host.lan):
                return port
        return None


def _services(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ValueError(f"expected a list of services, got {value!r}")
    for item in value:
        if item not in SERVICES:
            raise ValueError(f"unknown service {item!r} (known: {', '.join(SERVICES)})")
    return tuple(str(v) for v in value)


def load_topology(path: str | Path, root: Path | None = None) -> TopologySpec:
    """Load and cross-check a topology file. Relative paths in it are relative to `root`."""
    path = Path(path)
    root = root or Path.cwd()
    top = Reader(path, load_yaml(path))
    name = top.get("name", as_str)
    policy = root / top.get("policy", as_str)
    lans = []
    for item in top.items("lans"):
        lans.append(
            LanSpec(item.get("name", as_str), item.get("gateway_mac", as_mac, required=False))
        )
        item.reject_unknown()
    hosts = []
    host_readers: dict[str, Reader] = {}
    for item in top.items("hosts"):
        role = item.get("role", one_of(*ROLES))
        host = HostSpec(
            name=item.get("name", as_str),
            role=role,
            mac=item.get("mac", as_mac),
            lan=item.get("lan", as_str, required=role not in SPM_ROLES),
            # An inside or outside host has an IPv4 address, an IPv6 one, or both.
            ip=item.get(
                "ip", as_ipv4_interface, required=role not in SPM_ROLES and not item.has("ip6")
            ),
            gateway=item.get("gateway", as_ipv4, required=False),
            ip6=item.get("ip6", as_ipv6_interface, required=False),
            gateway6=item.get("gateway6", as_ipv6, required=False),
            npm_port=item.get("npm_port", as_int, required=False),
            services=item.get("services", _services, default=()),
        )
        item.reject_unknown()
        if role in SPM_ROLES and (host.lan is None) == (host.npm_port is None):
            raise item.error(
                "npm_port",
                "an SPM host has either npm_port (one NPM port) or lan (a segment shared by NPMs)",
            )
        if host.name in host_readers:
            raise item.error("name", f"host {host.name!r} is defined twice")
        host_readers[host.name] = item
        hosts.append(host)
    lan_names = {lan.name for lan in lans}
    for host in hosts:
        if host.lan is not None and host.lan not in lan_names:
            raise host_readers[host.name].error("lan", f"no LAN named {host.lan!r}")
    npms = []
    spm_names = {h.name for h in hosts if h.role in SPM_ROLES}
    for item in top.items("npms"):
        ports_reader = item.sub("ports")
        ports: dict[int, str] = {}
        for key, value in ports_reader.data.items():
            try:
                number = int(key)
            except ValueError:
                raise ports_reader.error(key, "port numbers are integers") from None
            if not 1 <= number <= 254:
                raise ports_reader.error(key, f"port {number} outside 1..254 (255 is the CPU port)")
            if value not in lan_names and value not in spm_names:
                raise ports_reader.error(key, f"{value!r} is neither a LAN nor an SPM host")
            ports[number] = str(value)
        own_policy = item.get("policy", as_str, required=False)
        npms.append(
            NpmSpec(
                item.get("name", as_str),
                item.get("device_id", as_int, default=1),
                ports,
                root / own_policy if own_policy else None,
            )
        )
        item.reject_unknown()
    if not npms:
        raise ConfigError("a topology needs at least one NPM", path=str(path), field="npms")
    if len({n.device_id for n in npms}) != len(npms):
        raise ConfigError("NPM device_ids must differ", path=str(path), field="npms")
    spm = SpmSpec()
    if top.has("spm"):
        item = top.sub("spm")
        spm = SpmSpec(
            rules=tuple(root / r for r in item.get("rules", _str_list, required=False) or []),
            shared_rules=tuple(item.get("shared_rules", _str_list, required=False) or []),
            home_net=item.get("home_net", as_str, default="any"),
            workers=item.get("workers", as_int, default=1),
            engine=item.get("engine", one_of(*SPM_ENGINES), default="auto"),
        )
        item.reject_unknown()
    top.reject_unknown()
    return TopologySpec(name, path, policy, tuple(npms), tuple(lans), tuple(hosts), spm)


SPM_ENGINES = ("auto", "builtin", "snort")
ENGINE_ENV = "OPENGATE_SPM_ENGINE"  # overrides the topology's spm.engine (tests run both)


def spm_engine(spec: SpmSpec) -> str:
    """The engine the SPMs run: $OPENGATE_SPM_ENGINE if set, else the topology's."""
    chosen = os.environ.get(ENGINE_ENV, "") or spec.engine
    if chosen not in SPM_ENGINES:
        raise ConfigError(f"{ENGINE_ENV}={chosen!r}: expected one of {', '.join(SPM_ENGINES)}")
    return chosen


def _str_list(value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"expected a list of strings, got {value!r}")
    return [str(v) for v in value]


def with_controller_nat(policy_text: str) -> str:
    """A policy's text with data-plane masquerading turned off (`nat.data_plane_ports: off`):
    every masqueraded flow goes through the CPM, as before the NPM picked ports itself."""
    off = re.sub(r"\n  data_plane_ports: [^\n]*\n", "\n  data_plane_ports: off\n", policy_text)
    if off == policy_text:
        raise ConfigError("the policy does not name nat.data_plane_ports")
    return off


def with_entries_on_demand(policy_text: str) -> str:
    """A policy's text with `sessions.data_plane_entries: on_demand`: the CPM writes no entries
    for the routed flows a data-plane slot carries until they live on (the benchmarks use it)."""
    added = "\nsessions:\n  data_plane_entries: on_demand\n"
    out, count = re.subn(r"\nsessions:\n", added, policy_text)
    if count != 1:
        raise ConfigError("the policy has no sessions section to add data_plane_entries to")
    return out


def without_masquerade(policy_text: str) -> str:
    """A policy's text with its `nat: masquerade:` block removed: the inside hosts are routed,
    not translated (the benchmarks and tests of sessions made by the data plane use it)."""
    routed = re.sub(r"\n  masquerade:\n(    - [^\n]*\n)+", "\n", policy_text)
    if routed == policy_text:
        raise ConfigError("the policy has no masquerade block to remove")
    return routed


def with_first_acl_rule(policy_text: str, rule: dict[str, object]) -> str:
    """A policy's text with `rule` (as the policy file writes one) before its other ACL rules."""
    data = yaml.safe_load(policy_text)
    acl = data.get("acl") if isinstance(data, dict) else None
    rules = acl.get("rules") if isinstance(acl, dict) else None
    if not isinstance(rules, list):
        raise ConfigError("the policy has no acl rules to put a rule before")
    rules.insert(0, rule)
    return str(yaml.safe_dump(data, sort_keys=False))


def with_source_denied(policy_text: str, source: str, proto: str) -> str:
    """A policy's text with a first ACL rule that denies `proto` from the host `source`: what
    the host sends that way ends at the NPM's ACL, with no session, SPM or CPM work (the flood
    bench compares it with the flood admitted)."""
    address = ipaddress.IPv4Address(source)
    return with_first_acl_rule(
        policy_text,
        {
            "name": f"deny-{proto}-from-{address}",
            "src": f"{address}/32",
            "proto": proto,
            "action": "deny",
        },
    )


def without_inspection(policy_text: str) -> str:
    """A policy's text with no chain on any class: nothing goes to an SPM (the benchmarks
    compare it with the inspected policy)."""
    data = yaml.safe_load(policy_text)
    classes = data.get("classes") if isinstance(data, dict) else None
    if not isinstance(classes, list) or not any(
        isinstance(c, dict) and "chain" in c for c in classes
    ):
        raise ConfigError("the policy has no class with a chain to remove")
    for item in classes:
        if isinstance(item, dict):
            item.pop("chain", None)
    return str(yaml.safe_dump(data, sort_keys=False))
