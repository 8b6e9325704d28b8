"""The policy as the controller uses it: frozen dataclasses that `controller.policy`'s loader
makes from a policy file (ports, neighbours, routes, ACL rules of both families, meters, SPMs,
pools, chains, classes, NAT, sessions), and the lookups the controller asks of it."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from controller import acl6
from controller import policy_values as pv
from controller.acl6 import Acl6Rule
from controller.hsm.rules import (
    AclAction,
    AclRule,
    IdsRule,
)
from controller.ids6 import Ids6Rule
from opengate import p4constants as pc
from opengate.ipsec import IpsecSpec


def mac_int(text: str) -> int:
    return int(text.replace(":", ""), 16)


def mac_text(value: int) -> str:
    return ":".join(f"{(value >> shift) & 0xFF:02x}" for shift in range(40, -8, -8))


def link_local(mac: int) -> ipaddress.IPv6Address:
    """The link-local address of an interface with this MAC: fe80::/64 and the modified EUI-64
    interface identifier (RFC 4291 section 2.5.1 and appendix A: ff:fe in the middle of the MAC,
    its universal/local bit inverted)."""
    eui64 = ((mac >> 24) << 40) | (0xFFFE << 24) | (mac & 0xFFFFFF)
    return ipaddress.IPv6Address((0xFE80 << 112) | (eui64 ^ (0x02 << 56)))


# -- the model ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RaSettings:
    """`ports[].router_advertisements` (RFC 4861 section 6.2.1): MaxRtrAdvInterval (seconds),
    AdvDefaultLifetime (seconds), whether hosts may form addresses in the port's prefixes
    (SLAAC's autonomous flag), and an MTU option (None: none)."""

    interval: float = 600.0  # RFC 4861's MaxRtrAdvInterval default
    lifetime: int = 1800  # ...and AdvDefaultLifetime's (three intervals)
    autonomous: bool = False
    mtu: int | None = None


@dataclass(frozen=True, slots=True)
class PortSpec:
    number: int
    role: int  # p4constants ROLE_*
    name: str
    mac: int | None  # the gateway's MAC on this port (inside/outside ports)
    addresses: tuple[ipaddress.IPv4Interface, ...]
    line: int
    addresses6: tuple[ipaddress.IPv6Interface, ...] = ()  # global (or unique local) ones
    router_advertisements: RaSettings | None = None  # None: the port sends none

    @property
    def link_local(self) -> ipaddress.IPv6Address | None:
        """The port's link-local address (from its MAC), which it answers neighbour
        solicitations for."""
        return link_local(self.mac) if self.mac is not None else None


@dataclass(frozen=True, slots=True)
class Neighbour:
    """A host the gateway reaches directly: no ARP resolution, the policy gives its MAC."""

    name: str
    address: ipaddress.IPv4Address
    mac: int
    port: int


@dataclass(frozen=True, slots=True)
class Neighbour6:
    """An IPv6 host the gateway reaches directly: no neighbour discovery of its address, the
    policy gives its MAC (a host with both families is listed once per address)."""

    name: str
    address: ipaddress.IPv6Address
    mac: int
    port: int


@dataclass(frozen=True, slots=True)
class Route:
    prefix: ipaddress.IPv4Network
    port: int
    next_hop_mac: int


@dataclass(frozen=True, slots=True)
class Route6:
    prefix: ipaddress.IPv6Network
    port: int
    next_hop_mac: int


@dataclass(frozen=True, slots=True)
class AclRuleSpec:
    name: str
    rule: AclRule  # what the HSM compiler takes (matches nothing for an IPv6-only rule)
    line: int
    rule6: Acl6Rule | None = None  # the rule as it applies to IPv6; None: IPv4 only


@dataclass(frozen=True, slots=True)
class MeterSpec:
    """A two-rate three-colour meter in bytes: rates in bytes/s, bursts in bytes."""

    name: str
    cir: int
    cburst: int
    pir: int
    pburst: int


@dataclass(frozen=True, slots=True)
class SpmSpec:
    name: str
    port: int
    mac: int
    weight: int  # the weight at zero load; the CPM scales it down with the reported load
    member_id: int


@dataclass(frozen=True, slots=True)
class PoolSpec:
    name: str
    pool_id: int
    spms: tuple[str, ...]
    fail_policy: str  # resteer | fail_closed: what happens to flows of an SPM that goes down


@dataclass(frozen=True, slots=True)
class ChainSpec:
    name: str
    pool: str
    services: tuple[str, ...]
    on_failure: str  # open | closed: a new flow when no SPM of the pool is up


@dataclass(frozen=True, slots=True)
class ClassSpec:
    class_id: int
    name: str
    chain: str | None  # None: classified (counted, metered) but not inspected
    bypass: bool  # SPMs may offload clean flows of this class to the fast path
    meter: str | None
    sids: frozenset[int]
    classtypes: frozenset[str]
    services: frozenset[str]
    default: bool  # IDS rules that no class claims map here


@dataclass(frozen=True, slots=True)
class Masquerade:
    port: int  # egress port
    sources: tuple[ipaddress.IPv4Network, ...]
    address: ipaddress.IPv4Address


@dataclass(frozen=True, slots=True)
class PortForward:
    address: ipaddress.IPv4Address
    proto: int
    port: int
    to: ipaddress.IPv4Address
    to_port: int


@dataclass(frozen=True, slots=True)
class Nptv6Mapping:
    """NPTv6 (RFC 6296) on an outside port: sources in `inside` leaving by it take `outside`'s
    prefix, destinations in `outside` arriving on it take `inside`'s (opengate.nptv6)."""

    port: int
    inside: ipaddress.IPv6Network
    outside: ipaddress.IPv6Network
    line: int = 0


@dataclass(frozen=True, slots=True)
class Nat64Spec:
    """Stateful NAT64 (RFC 6146) on an outside port: IPv6 flows from inside to an address in
    `prefix` (a /96: the IPv4 address is its last 32 bits, RFC 6052) leave by the port as IPv4
    from `address`, with a port from nat.ports (p4src/include/control/nat64.p4)."""

    port: int
    prefix: ipaddress.IPv6Network
    address: ipaddress.IPv4Address
    line: int = 0

    @property
    def well_known(self) -> bool:
        return self.prefix == NAT64_WELL_KNOWN

    def embeds(self, address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
        """The IPv4 address an IPv6 one in the prefix stands for (None: not in it)."""
        if address not in self.prefix:
            return None
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)


# RFC 6052 section 2.1; section 3.1: not to be used for non-global IPv4 addresses.
NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
NAT64_NON_GLOBAL = tuple(
    ipaddress.IPv4Network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "224.0.0.0/4",
        "240.0.0.0/4",
    )
)


# Data-plane masquerading: a block of ports (one per cell of the program's flow_nat register) on
# each masquerade address, from which the NPM picks a new flow's port itself.
NAT_DP_PORTS = pv.NAT_DP_PORTS
DEFAULT_DP_BASE = 65536 - NAT_DP_PORTS


@dataclass(frozen=True, slots=True)
class NatSpec:
    ports: tuple[int, int] = (1024, DEFAULT_DP_BASE - 1)  # the CPM's own allocations
    masquerade: tuple[Masquerade, ...] = ()
    port_forwards: tuple[PortForward, ...] = ()
    data_plane_base: int | None = DEFAULT_DP_BASE  # first port of the NPM's block; None: off
    nptv6: tuple[Nptv6Mapping, ...] = ()  # IPv6 prefix translation on outside ports
    nat64: tuple[Nat64Spec, ...] = ()  # stateful NAT64 on outside ports

    @property
    def data_plane_ports(self) -> tuple[int, int] | None:
        if self.data_plane_base is None:
            return None
        return self.data_plane_base, self.data_plane_base + NAT_DP_PORTS - 1


@dataclass(frozen=True, slots=True)
class SessionSettings:
    idle_timeout: Mapping[str, float] = field(
        default_factory=lambda: {"tcp": 300.0, "udp": 60.0, "icmp": 30.0, "other": 60.0}
    )
    closing_linger: float = 2.0  # after FIN in both directions (or RST), before removal
    acl_to_cpu: str = "drop"  # what the CPM does with packets an ACL rule sends to it
    # New flows each source (the low 12 bits of its address) may open, per second, and the burst
    # (flows) it may open at once; None: unlimited. Enforced by the NPM (new_flow_meter).
    new_flows_per_source: tuple[int, int] | None = None
    # "always": the CPM installs a data-plane session's exact entries when its digest comes;
    # "on_demand": a routed flow's slot carries it alone until the data plane reports it again
    # (alive after report_interval) or the CPM must act on it (block, bypass, re-steer).
    data_plane_entries: str = "always"
    # seconds after which the data plane reports again a routed flow its slot carries without
    # exact entries (flow_ageing's report interval)
    report_interval: float = 1.0

    def timeout_for(self, proto: int) -> float:
        """The idle timeout of a session of this protocol (ICMPv6 echo sessions: icmp's)."""
        name = {
            pc.IP_PROTO_TCP: "tcp",
            pc.IP_PROTO_UDP: "udp",
            pc.IP_PROTO_ICMP: "icmp",
            pc.IP_PROTO_ICMPV6: "icmp",
        }
        return self.idle_timeout[name.get(proto, "other")]


@dataclass(frozen=True, slots=True)
class SpmSettings:
    down_after: float = 2.5  # seconds without a load report; 0 disables liveness checks
    queue_limit: int = 4096  # queue depth that counts as fully loaded
    min_weight_change: int = 1  # rewrite a group only when a weight moves at least this much
    # seconds an SPM that has never reported (starting: clamd loading its signatures) has for its
    # first report before it is down; never less than down_after
    startup_grace: float = 30.0


@dataclass(frozen=True, slots=True)
class Policy:
    path: str
    name: str
    text: str
    sha256: str  # of the policy file and every file it names
    ports: tuple[PortSpec, ...]
    networks: Mapping[str, tuple[ipaddress.IPv4Network, ...]]
    neighbours: tuple[Neighbour, ...]
    routes: tuple[Route, ...]
    acl_default: AclAction
    acl_rules: tuple[AclRuleSpec, ...]
    ids_rules: tuple[IdsRule, ...]  # in matching order, each mapped to its class
    ids_notes: tuple[str, ...]  # rules whose header the fast path cannot express as written
    ids_file: str | None
    classes: tuple[ClassSpec, ...]
    chains: tuple[ChainSpec, ...]
    pools: tuple[PoolSpec, ...]
    spms: tuple[SpmSpec, ...]
    nat: NatSpec
    meters: tuple[MeterSpec, ...]
    cpu_meters: Mapping[int, str]  # CPU reason -> meter name
    sessions: SessionSettings
    spm: SpmSettings
    cpu_source_meter: str | None = None  # every source's own share of the path to the CPU
    ipsec: IpsecSpec | None = None  # site-to-site tunnels (opengate.ipsec)
    # IPv6: each network's IPv6 prefixes (`networks` holds the IPv4 ones), the IPv6 neighbours
    # and routes, the ACL's IPv6 rules in order (with RFC 4890's ICMPv6 errors, controller.acl6)
    networks6: Mapping[str, tuple[ipaddress.IPv6Network, ...]] = field(default_factory=dict)
    neighbours6: tuple[Neighbour6, ...] = ()
    routes6: tuple[Route6, ...] = ()
    acl6: tuple[Acl6Rule, ...] = ()
    icmpv6_errors: str = "permit"  # acl.icmpv6_errors: permit (RFC 4890) | policy
    # the IDS rules' headers for IPv6, in matching order (the CPM classifies IPv6 flows itself)
    ids6_rules: tuple[Ids6Rule, ...] = ()

    # -- lookups the controller needs ---------------------------------------------------------

    def port(self, number: int) -> PortSpec | None:
        for port in self.ports:
            if port.number == number:
                return port
        return None

    def spm_by_name(self, name: str) -> SpmSpec | None:
        for spm in self.spms:
            if spm.name == name:
                return spm
        return None

    def spm_by_port(self, port: int) -> SpmSpec | None:
        for spm in self.spms:
            if spm.port == port:
                return spm
        return None

    def class_by_id(self, class_id: int) -> ClassSpec | None:
        for spec in self.classes:
            if spec.class_id == class_id:
                return spec
        return None

    def chain(self, name: str) -> ChainSpec:
        return next(c for c in self.chains if c.name == name)

    def pool(self, name: str) -> PoolSpec:
        return next(p for p in self.pools if p.name == name)

    def meter(self, name: str) -> MeterSpec:
        return next(m for m in self.meters if m.name == name)

    def pools_of_spm(self, name: str) -> tuple[PoolSpec, ...]:
        return tuple(p for p in self.pools if name in p.spms)

    def rule_name(self, rule_id: int) -> str | None:
        """The name of the ACL rule with this id (what the NPM reports), or None."""
        if 0 <= rule_id < len(self.acl_rules):
            return self.acl_rules[rule_id].name
        if rule_id == len(self.acl_rules) and self.icmpv6_errors == "permit":
            return acl6.ICMPV6_ERRORS_NAME
        return None

    def gateway_addresses6(self) -> dict[ipaddress.IPv6Address, int]:
        """The gateway's own IPv6 addresses (each port's, and its link-local one), with the port
        whose MAC answers neighbour solicitations for them."""
        out: dict[ipaddress.IPv6Address, int] = {}
        for port in self.ports:
            for iface in port.addresses6:
                out.setdefault(iface.ip, port.number)
            local = port.link_local
            if local is not None:
                out.setdefault(local, port.number)
        return out

    def route6_for(self, address: ipaddress.IPv6Address) -> Route6 | None:
        """Longest-prefix match over the IPv6 routes (neighbours and static)."""
        return _longest_match(self.routes6, address)

    def route_for(self, address: ipaddress.IPv4Address) -> Route | None:
        """Longest-prefix match over the routes the CPM installs (neighbours and static)."""
        return _longest_match(self.routes, address)

    def nat64_for(self, address: ipaddress.IPv6Address) -> Nat64Spec | None:
        """The NAT64 translation whose prefix holds `address` (prefixes do not overlap)."""
        return next((n for n in self.nat.nat64 if address in n.prefix), None)

    def masquerade_for(self, egress_port: int, source: ipaddress.IPv4Address) -> Masquerade | None:
        best: tuple[int, Masquerade] | None = None
        for rule in self.nat.masquerade:
            if rule.port != egress_port:
                continue
            for net in rule.sources:
                if source in net and (best is None or net.prefixlen > best[0]):
                    best = (net.prefixlen, rule)
        return best[1] if best else None

    def port_forward_for(
        self, address: ipaddress.IPv4Address, proto: int, port: int
    ) -> PortForward | None:
        for rule in self.nat.port_forwards:
            if (rule.address, rule.proto, rule.port) == (address, proto, port):
                return rule
        return None

    def gateway_addresses(self) -> dict[ipaddress.IPv4Address, int]:
        """Every address the gateway answers ARP for, with the port whose MAC answers."""
        out: dict[ipaddress.IPv4Address, int] = {}
        for port in self.ports:
            for iface in port.addresses:
                out.setdefault(iface.ip, port.number)
        for rule in self.nat.masquerade:
            out.setdefault(rule.address, rule.port)
        for nat64 in self.nat.nat64:
            out.setdefault(nat64.address, nat64.port)
        if self.ipsec is not None:  # the IPsec SPM's address, answered on its outside port
            for port in self.ports:
                if any(self.ipsec.address in iface.network for iface in port.addresses):
                    out.setdefault(self.ipsec.address, port.number)
                    break
        for forward in self.nat.port_forwards:
            route = self.route_for(forward.address)
            for port in self.ports:
                if any(forward.address in iface.network for iface in port.addresses):
                    out.setdefault(forward.address, port.number)
                    break
            else:
                if route is not None:
                    out.setdefault(forward.address, route.port)
        return out

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": self.path,
            "sha256": self.sha256,
            "ports": len(self.ports),
            "neighbours": len(self.neighbours),
            "routes": len(self.routes),
            "neighbours6": len(self.neighbours6),
            "routes6": len(self.routes6),
            "acl_rules": len(self.acl_rules),
            "acl6_rules": len(self.acl6),
            "acl_default": self.acl_default.value,
            "ids_rules": len(self.ids_rules),
            "classes": len(self.classes),
            "chains": len(self.chains),
            "spms": len(self.spms),
            "masquerade": len(self.nat.masquerade),
            "port_forwards": len(self.nat.port_forwards),
        }


R = TypeVar("R", Route, Route6)


def _longest_match(
    routes: Sequence[R], address: ipaddress.IPv4Address | ipaddress.IPv6Address
) -> R | None:
    """The route with the longest prefix that holds `address` (the first of equals)."""
    best: R | None = None
    for route in routes:
        if address in route.prefix and (
            best is None or route.prefix.prefixlen > best.prefix.prefixlen
        ):
            best = route
    return best
