"""The gateway policy: one YAML file, validated on load, errors naming file, line and field.

A policy says what the gateway is (ports and their roles, its addresses, the hosts it talks to
directly), what it lets through (ACL rules, inline or a ClassBench file), what it inspects and
where (IDS rules from a Snort rules file mapped to classes, classes to service chains, chains to
SPM pools), how it translates (masquerade, port forwards), and how fast (meters). The format's
reference is docs/reference/policy.md, generated from `controller/policy_schema.py` (which
tests/controller/test_policy_schema.py holds to this parser: a key added here goes there too);
`controller/examples/gateway.yaml` is an example.

The policy is dual-stack in the same sections: networks, port addresses, neighbours and routes of
either family (each family's in its own fields of `Policy`: `networks` and `networks6`,
`neighbours` and `neighbours6`...), and ACL rules that apply to the families their fields name
(`AclRuleSpec.rule` for the HSM classifier, `.rule6` for `ipv6_acl`, `controller.acl6`).

Loading never touches a switch: `load_policy` returns a frozen `Policy` or raises `ConfigError`.
Files the policy names (ClassBench, Snort rules) are read relative to the policy file and checked
on load too, so that a policy that loads is one the compiler accepts.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from controller import acl6, ids6
from controller import policy_values as pv
from controller.acl6 import Acl6Rule, Prefix6
from controller.hsm.rules import (
    PROTOCOL_NUMBERS,
    AclAction,
    AclRule,
    Origin,
    parse_classbench,
)
from controller.hsm.snort_header import ClassMap, IdsHeaders, ids_rules_from_raw
from controller.ids6 import Ids6Rule
from controller.policy_ipv6 import nat64_of, nptv6_mappings_of, router_advertisements
from controller.policy_model import (
    DEFAULT_DP_BASE,
    NAT64_NON_GLOBAL,
    NAT64_WELL_KNOWN,
    NAT_DP_PORTS,
    AclRuleSpec,
    ChainSpec,
    ClassSpec,
    Masquerade,
    MeterSpec,
    Nat64Spec,
    NatSpec,
    Neighbour,
    Neighbour6,
    Nptv6Mapping,
    Policy,
    PoolSpec,
    PortForward,
    PortSpec,
    RaSettings,
    Route,
    Route6,
    SessionSettings,
    SpmSettings,
    SpmSpec,
    link_local,
    mac_int,
    mac_text,
)
from opengate import p4constants as pc
from opengate import yamlconf
from opengate.errors import ConfigError
from opengate.fields import ANY_PORT, ProtoMatch
from opengate.ipsec import IpsecSpec, parse_ipsec
from opengate.snort.header import SnortVariables
from opengate.snort.rules import parse_rules_file
from opengate.yamlconf import (
    LineDict,
    Reader,
    as_bool,
    as_int,
    as_ipv4,
    as_mac,
    as_str,
    one_of,
)

# The model lives in controller.policy_model; its names are this module's too.
__all__ = [
    "DEFAULT_DP_BASE",
    "NAT64_NON_GLOBAL",
    "NAT64_WELL_KNOWN",
    "NAT_DP_PORTS",
    "AclRuleSpec",
    "ChainSpec",
    "ClassSpec",
    "Masquerade",
    "MeterSpec",
    "Nat64Spec",
    "NatSpec",
    "Neighbour",
    "Neighbour6",
    "Nptv6Mapping",
    "Policy",
    "PoolSpec",
    "PortForward",
    "PortSpec",
    "RaSettings",
    "Route",
    "Route6",
    "SessionSettings",
    "SpmSettings",
    "SpmSpec",
    "link_local",
    "load_policy",
    "mac_int",
    "mac_text",
]

T = TypeVar("T")

FORMAT_VERSION = 1
ROLES = {"inside": pc.ROLE_INSIDE, "outside": pc.ROLE_OUTSIDE, "spm": pc.ROLE_SPM}
FAIL_POLICIES = ("resteer", "fail_closed")
ON_FAILURE = ("open", "closed")
SERVICES = ("ips", "av")
TO_CPU_ACTIONS = ("drop", "permit")
# When the CPM installs the exact entries of a session the data plane made (a routed flow in a
# slot): at once, or once the data plane reports the flow again, i.e. once it lives on
# (sessions.data_plane_entries).
DATA_PLANE_ENTRIES = ("always", "on_demand")
# cpu_meters' keys: the P4 program's CPU reasons (session_nat, acl, ttl_expired, no_route,
# session_collision, session_v6), by their names in lower case.
CPU_REASONS = {name.lower(): reason for reason, name in sorted(pc.CPU_REASON_NAMES.items())}
MAX_CLASS_ID = (1 << 8) - 1
MAX_PORT_NUMBER = (1 << 9) - 2  # 9-bit ports; 511 is unused, 255 is the CPU port
MAX_POOL_ID = (1 << 16) - 1


# -- loading -----------------------------------------------------------------------------------


def load_policy(path: str | Path, text: str | None = None) -> Policy:
    """Read and validate a policy file. `text`: the file's content if already read (the REST API
    receives it); files it names are still read relative to `path`."""
    path = Path(path)
    if text is None:
        try:
            text = yamlconf.read_text(path)  # a regular UTF-8 file of bounded size only
        except OSError as error:
            raise ConfigError(f"cannot read: {error.strerror}", path=str(path)) from None
    data = yamlconf.load_yaml_text(text, path)
    return _Loader(path, text, data).load()


@dataclass(frozen=True, slots=True)
class _DualPrefixes:
    """An ACL rule's `src` or `dst` for each family (None: any), and its literal prefixes'
    families (version -> the first one, as written)."""

    v4: tuple[ipaddress.IPv4Network, ...] | None
    v6: tuple[ipaddress.IPv6Network, ...] | None
    literal: dict[int, str]


class _Loader:
    def __init__(self, path: Path, text: str, data: Any) -> None:
        self.path = path
        self.text = text
        self.data = data if data is not None else LineDict()
        self.digest = hashlib.sha256(text.encode())
        self.networks: dict[str, tuple[ipaddress.IPv4Network, ...]] = {}
        self.networks6: dict[str, tuple[ipaddress.IPv6Network, ...]] = {}

    def load(self) -> Policy:
        top = Reader(self.path, self.data)
        version = top.get("version", as_int, FORMAT_VERSION)
        if version != FORMAT_VERSION:
            raise top.error("version", f"policy format {version} unknown; this is {FORMAT_VERSION}")
        name = top.get("name", as_str, "opengate")
        self.networks, self.networks6 = self._networks(top)
        ports = self._ports(top)
        neighbours, neighbours6 = self._neighbours(top, ports)
        routes, routes6 = self._routes(top, ports, neighbours, neighbours6)
        meters = self._meters(top)
        spm = self._spm_settings(top)
        spms, pools = self._spms(top, ports)
        chains = self._chains(top, pools)
        classes = self._classes(top, chains, meters)
        cpu_meters, cpu_source_meter = self._cpu_meters(top, meters)
        acl_default, acl_rules, icmpv6_errors = self._acl(top)
        acl6_rules = [spec.rule6 for spec in acl_rules if spec.rule6 is not None]
        if icmpv6_errors == "permit":
            acl6_rules.append(acl6.icmpv6_errors_rule(len(acl_rules)))
        ids_file, ids_headers, ids6_rules = self._ids(top, classes)
        nat = self._nat(top, ports, routes)
        sessions = self._sessions(top)
        ipsec = self._ipsec(top, ports, pools, chains)
        top.reject_unknown()
        return Policy(
            path=str(self.path),
            name=name,
            text=self.text,
            sha256=self.digest.hexdigest(),
            ports=ports,
            networks=dict(self.networks),
            neighbours=neighbours,
            routes=routes,
            acl_default=acl_default,
            acl_rules=acl_rules,
            ids_rules=ids_headers.rules,
            ids_notes=tuple(str(n) for n in ids_headers.notes),
            ids_file=ids_file,
            classes=classes,
            chains=chains,
            pools=pools,
            spms=spms,
            nat=nat,
            meters=meters,
            cpu_meters=cpu_meters,
            sessions=sessions,
            spm=spm,
            cpu_source_meter=cpu_source_meter,
            ipsec=ipsec,
            networks6=dict(self.networks6),
            neighbours6=neighbours6,
            routes6=routes6,
            acl6=tuple(acl6_rules),
            icmpv6_errors=icmpv6_errors,
            ids6_rules=ids6_rules,
        )

    # -- helpers -------------------------------------------------------------------------------

    def _file(self, reader: Reader, key: str) -> Path:
        name = reader.get(key, as_str)
        target = Path(name)
        if not target.is_absolute():
            target = self.path.parent / target
        try:
            content = yamlconf.read_file(target)
        except OSError as error:
            raise reader.error(key, f"cannot read {target}: {error.strerror}") from None
        self.digest.update(b"\0" + str(target).encode() + b"\0" + content)
        return target

    def _prefixes(self, value: Any) -> tuple[ipaddress.IPv4Network, ...] | None:
        """Network names, prefixes or addresses, one or a list; None for `any`. IPv4 only (the
        fields that take this are: masquerade sources, IPsec subnets); a network stands for its
        IPv4 prefixes. `_dual_prefixes` reads the field; this refuses what is not IPv4."""
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and item in self.networks and not self.networks[item]:
                raise ValueError(f"network {item!r} has no IPv4 prefix (this field is IPv4's)")
        both = self._dual_prefixes(value)
        if 6 in both.literal:
            raise ValueError(f"{both.literal[6]!r} is an IPv6 prefix; this field takes IPv4 only")
        return both.v4

    def _literal_prefix(self, item: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        try:
            return ipaddress.ip_network(item, strict=False)
        except ValueError:
            known = ", ".join(sorted(self.networks)) or "none defined"
            raise ValueError(
                f"{item!r} is neither a prefix nor a network name (networks: {known})"
            ) from None

    def _dual_prefixes(self, value: Any) -> _DualPrefixes:
        """An ACL rule's `src` or `dst`: network names (each family's prefixes), literal
        prefixes or addresses (of one family: the rule's), one or a list, or `any`."""
        items = value if isinstance(value, list) else [value]
        if not items:
            raise ValueError("an empty list matches nothing; leave the field out for any")
        v4: list[ipaddress.IPv4Network] = []
        v6: list[ipaddress.IPv6Network] = []
        literal: dict[int, str] = {}
        for item in items:
            if not isinstance(item, str):
                raise ValueError(f"expected a network name or prefix, got {item!r}")
            if item == "any":
                return _DualPrefixes(None, None, {})
            if item in self.networks:
                v4.extend(self.networks[item])
                v6.extend(self.networks6[item])
                continue
            network = self._literal_prefix(item)
            literal.setdefault(network.version, item)
            if isinstance(network, ipaddress.IPv4Network):
                v4.append(network)
            else:
                v6.append(network)
        if len(literal) > 1:
            raise ValueError(
                f"mixes IPv4 ({literal[4]}) and IPv6 ({literal[6]}) addresses: a rule with "
                "literal addresses is of one family; write one rule for each"
            )
        return _DualPrefixes(tuple(v4), tuple(v6), literal)

    # -- sections ------------------------------------------------------------------------------

    def _networks(
        self, top: Reader
    ) -> tuple[
        dict[str, tuple[ipaddress.IPv4Network, ...]], dict[str, tuple[ipaddress.IPv6Network, ...]]
    ]:
        """Each network's IPv4 prefixes and its IPv6 prefixes (a network may mix them)."""
        out: dict[str, tuple[ipaddress.IPv4Network, ...]] = {}
        out6: dict[str, tuple[ipaddress.IPv6Network, ...]] = {}
        if not top.has("networks"):
            return out, out6
        section = top.sub("networks")
        for key in list(section.data):
            if key == "any":
                raise section.error(key, "'any' is reserved")

            def convert(
                value: Any,
            ) -> tuple[tuple[ipaddress.IPv4Network, ...], tuple[ipaddress.IPv6Network, ...]]:
                items = value if isinstance(value, list) else [value]
                nets: list[ipaddress.IPv4Network] = []
                nets6: list[ipaddress.IPv6Network] = []
                for item in items:
                    if isinstance(item, str) and item in out:
                        nets.extend(out[item])
                        nets6.extend(out6[item])
                        continue
                    try:
                        network = ipaddress.ip_network(as_str(item), strict=False)
                    except ValueError:
                        raise ValueError(f"not an IPv4 or IPv6 prefix: {item!r}") from None
                    if isinstance(network, ipaddress.IPv4Network):
                        nets.append(network)
                    else:
                        nets6.append(network)
                if not nets and not nets6:
                    raise ValueError("a network needs at least one prefix")
                return tuple(nets), tuple(nets6)

            out[key], out6[key] = section.get(key, convert)
        return out, out6

    def _ports(self, top: Reader) -> tuple[PortSpec, ...]:
        ports: list[PortSpec] = []
        seen: set[int] = set()
        for item in top.items("ports"):
            number = item.get("port", as_int)
            if not 1 <= number <= MAX_PORT_NUMBER or number == pc.CPU_PORT:
                raise item.error(
                    "port", f"port {number} is not 1..{MAX_PORT_NUMBER} (255 is the CPU port)"
                )
            if number in seen:
                raise item.error("port", f"port {number} is listed twice")
            seen.add(number)
            role = item.get("role", one_of(*ROLES))
            name = item.get("name", as_str, f"port{number}")
            mac = pv.opt(item, "mac", as_mac)
            both = tuple(pv.opt(item, "addresses", pv.list_of(pv.interface_any)) or ())
            addresses = tuple(a for a in both if isinstance(a, ipaddress.IPv4Interface))
            addresses6 = tuple(a for a in both if isinstance(a, ipaddress.IPv6Interface))
            if role in ("inside", "outside") and mac is None:
                raise item.error("mac", f"an {role} port needs the gateway's MAC on it")
            if role == "spm" and both:
                raise item.error("addresses", "an SPM port has no gateway addresses")
            ra = router_advertisements(item, role, addresses6)
            ports.append(
                PortSpec(
                    number,
                    ROLES[role],
                    name,
                    mac_int(mac) if mac else None,
                    addresses,
                    item.line,
                    addresses6,
                    ra,
                )
            )
            item.reject_unknown()
        if not any(p.role == pc.ROLE_INSIDE for p in ports):
            raise top.error("ports", "no inside port")
        return tuple(ports)

    def _neighbours(
        self, top: Reader, ports: Sequence[PortSpec]
    ) -> tuple[tuple[Neighbour, ...], tuple[Neighbour6, ...]]:
        out: list[Neighbour] = []
        out6: list[Neighbour6] = []
        seen: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = set()
        for item in top.items("neighbours", required=False):
            address = item.get("address", pv.address_any)
            mac = item.get("mac", as_mac)
            name = item.get("name", as_str, str(address))
            if address in seen:
                raise item.error("address", f"{address} is listed twice")
            seen.add(address)
            if isinstance(address, ipaddress.IPv6Address):
                problem = pv.unicast6_problem(address)
                if problem is not None:
                    raise item.error("address", f"{address} is {problem}")
            if item.has("port"):
                port = item.get("port", as_int)
                if not any(p.number == port for p in ports):
                    raise item.error("port", f"port {port} is not in ports")
            else:
                found = [
                    p.number
                    for p in ports
                    if any(
                        address in a.network
                        for a in (p.addresses if address.version == 4 else p.addresses6)
                    )
                ]
                if not found:
                    raise item.error(
                        "address",
                        f"{address} is in no port's subnet; give its port with 'port:'",
                    )
                port = found[0]
            if isinstance(address, ipaddress.IPv4Address):
                out.append(Neighbour(name, address, mac_int(mac), port))
            else:
                out6.append(Neighbour6(name, address, mac_int(mac), port))
            item.reject_unknown()
        return tuple(out), tuple(out6)

    def _routes(
        self,
        top: Reader,
        ports: Sequence[PortSpec],
        neighbours: Sequence[Neighbour],
        neighbours6: Sequence[Neighbour6],
    ) -> tuple[tuple[Route, ...], tuple[Route6, ...]]:
        routes = [
            Route(ipaddress.IPv4Network(f"{n.address}/32"), n.port, n.mac) for n in neighbours
        ]
        routes6 = [
            Route6(ipaddress.IPv6Network(f"{n.address}/128"), n.port, n.mac) for n in neighbours6
        ]
        by_address: dict[ipaddress.IPv4Address | ipaddress.IPv6Address, Neighbour | Neighbour6]
        by_address = {n.address: n for n in neighbours}
        by_address.update({n.address: n for n in neighbours6})
        prefixes: set[ipaddress.IPv4Network | ipaddress.IPv6Network] = {r.prefix for r in routes}
        prefixes.update(r.prefix for r in routes6)
        for item in top.items("routes", required=False):
            prefix = item.get("prefix", pv.network_any)
            via = item.get("via", pv.address_any)
            neighbour = by_address.get(via)
            if neighbour is None:
                raise item.error(
                    "via", f"next hop {via} is not a neighbour (list it under 'neighbours')"
                )
            if via.version != prefix.version:
                raise item.error(
                    "via",
                    f"next hop {via} is an IPv{via.version} neighbour; a route to an "
                    f"IPv{prefix.version} prefix goes via an IPv{prefix.version} one",
                )
            if prefix in prefixes:
                raise item.error("prefix", f"{prefix} has a route already")
            prefixes.add(prefix)
            if isinstance(prefix, ipaddress.IPv4Network):
                routes.append(Route(prefix, neighbour.port, neighbour.mac))
            else:
                routes6.append(Route6(prefix, neighbour.port, neighbour.mac))
            item.reject_unknown()
        del ports
        return tuple(routes), tuple(routes6)

    def _meters(self, top: Reader) -> tuple[MeterSpec, ...]:
        out: list[MeterSpec] = []
        for item in top.items("meters", required=False):
            name = item.get("name", as_str)
            if any(m.name == name for m in out):
                raise item.error("name", f"meter {name!r} is defined twice")
            cir = item.get("cir", pv.positive)
            pir = item.get("pir", pv.positive, cir)
            if pir < cir:
                raise item.error("pir", f"peak rate {pir} is below the committed rate {cir}")
            cburst = item.get("cburst", pv.positive)
            pburst = item.get("pburst", pv.positive, cburst)
            out.append(MeterSpec(name, cir, cburst, pir, pburst))
            item.reject_unknown()
        return tuple(out)

    def _cpu_meters(
        self, top: Reader, meters: Sequence[MeterSpec]
    ) -> tuple[dict[int, str], str | None]:
        """Meters on the path to the CPU: per reason, and `per_source` (each source address has
        its own cell of that rate, so that one host's flood leaves the others their share)."""
        out: dict[int, str] = {}
        per_source: str | None = None
        if not top.has("cpu_meters"):
            return out, per_source
        section = top.sub("cpu_meters")
        names = {m.name for m in meters}
        known = [*CPU_REASONS, "per_source"]
        for key in list(section.data):
            if key not in known:
                raise section.error(key, f"unknown CPU reason (known: {', '.join(known)})")
            meter = section.get(key, as_str)
            if meter not in names:
                raise section.error(key, f"no meter named {meter!r}")
            if key == "per_source":
                per_source = meter
            else:
                out[CPU_REASONS[key]] = meter
        return out, per_source

    def _spm_settings(self, top: Reader) -> SpmSettings:
        if not top.has("spm"):
            return SpmSettings()
        section = top.sub("spm")
        down_after = section.get("down_after", pv.non_negative_float, 2.5)
        queue_limit = section.get("queue_limit", pv.positive, 4096)
        min_change = section.get("min_weight_change", pv.positive, 1)
        grace = section.get("startup_grace", pv.non_negative_float, 30.0)
        section.reject_unknown()
        return SpmSettings(down_after, queue_limit, min_change, grace)

    def _spms(
        self, top: Reader, ports: Sequence[PortSpec]
    ) -> tuple[tuple[SpmSpec, ...], tuple[PoolSpec, ...]]:
        spms: list[SpmSpec] = []
        pools: list[PoolSpec] = []
        member_ids: dict[int, str] = {}
        spm_ports = {p.number for p in ports if p.role == pc.ROLE_SPM}
        for pool_item in top.items("spm_pools", required=False):
            pool_name = pool_item.get("name", as_str)
            if any(p.name == pool_name for p in pools):
                raise pool_item.error("name", f"pool {pool_name!r} is defined twice")
            pool_id = pool_item.get("id", as_int, len(pools) + 1)
            if not 1 <= pool_id <= MAX_POOL_ID or any(p.pool_id == pool_id for p in pools):
                raise pool_item.error("id", f"pool id {pool_id} is taken or not 1..{MAX_POOL_ID}")
            fail_policy = pool_item.get("fail_policy", one_of(*FAIL_POLICIES), "resteer")
            names: list[str] = []
            for item in pool_item.items("spms"):
                name = item.get("name", as_str)
                existing = next((s for s in spms if s.name == name), None)
                if existing is not None and len(item.data) == 1:
                    names.append(name)  # an SPM defined in another pool, named again
                    item.reject_unknown()
                    continue
                if existing is not None:
                    raise item.error("name", f"SPM {name!r} is defined twice")
                port = item.get("port", as_int)
                if port not in spm_ports:
                    raise item.error("port", f"port {port} is not a port with role spm")
                mac = mac_int(item.get("mac", as_mac))
                weight = item.get("weight", pv.positive, 8)
                if weight > 64:
                    raise item.error("weight", "weights go up to 64")
                member_id = pv.member_id(name)
                if member_id in member_ids:
                    raise item.error(
                        "name", f"SPM names {name!r} and {member_ids[member_id]!r} collide; rename"
                    )
                member_ids[member_id] = name
                spms.append(SpmSpec(name, port, mac, weight, member_id))
                names.append(name)
                item.reject_unknown()
            if not names:
                raise pool_item.error("spms", "a pool needs at least one SPM")
            pools.append(PoolSpec(pool_name, pool_id, tuple(names), fail_policy))
            pool_item.reject_unknown()
        return tuple(spms), tuple(pools)

    def _chains(self, top: Reader, pools: Sequence[PoolSpec]) -> tuple[ChainSpec, ...]:
        out: list[ChainSpec] = []
        pool_names = {p.name for p in pools}
        for item in top.items("chains", required=False):
            name = item.get("name", as_str)
            if any(c.name == name for c in out):
                raise item.error("name", f"chain {name!r} is defined twice")
            pool = item.get("pool", as_str)
            if pool not in pool_names:
                raise item.error("pool", f"no SPM pool named {pool!r}")
            services = tuple(item.get("services", pv.list_of(one_of(*SERVICES)), ["ips"]))
            on_failure = item.get("on_failure", one_of(*ON_FAILURE), "open")
            out.append(ChainSpec(name, pool, services, on_failure))
            item.reject_unknown()
        return tuple(out)

    def _classes(
        self, top: Reader, chains: Sequence[ChainSpec], meters: Sequence[MeterSpec]
    ) -> tuple[ClassSpec, ...]:
        out: list[ClassSpec] = []
        chain_names = {c.name for c in chains}
        meter_names = {m.name for m in meters}
        for item in top.items("classes", required=False):
            class_id = item.get("id", as_int)
            if not 1 <= class_id <= MAX_CLASS_ID:
                raise item.error("id", f"class ids are 1..{MAX_CLASS_ID} (0 is 'no class')")
            if any(c.class_id == class_id for c in out):
                raise item.error("id", f"class id {class_id} is used twice")
            name = item.get("name", as_str)
            if any(c.name == name for c in out):
                raise item.error("name", f"class {name!r} is defined twice")
            chain = pv.opt(item, "chain", as_str)
            if chain is not None and chain not in chain_names:
                raise item.error("chain", f"no chain named {chain!r}")
            meter = pv.opt(item, "meter", as_str)
            if meter is not None and meter not in meter_names:
                raise item.error("meter", f"no meter named {meter!r}")
            bypass = item.get("bypass", as_bool, False)
            sids = frozenset(pv.opt(item, "sids", pv.list_of(as_int)) or ())
            classtypes = frozenset(pv.opt(item, "classtypes", pv.list_of(as_str)) or ())
            services = frozenset(pv.opt(item, "services", pv.list_of(as_str)) or ())
            for what, mine in (("sids", sids), ("classtypes", classtypes), ("services", services)):
                for other in out:
                    taken = mine & getattr(other, what)
                    if taken:
                        raise item.error(
                            what, f"{sorted(taken)[0]} already maps to class {other.name!r}"
                        )
            default = item.get("default", as_bool, False)
            if default and any(c.default for c in out):
                raise item.error("default", "only one class can be the default")
            out.append(
                ClassSpec(class_id, name, chain, bypass, meter, sids, classtypes, services, default)
            )
            item.reject_unknown()
        return tuple(out)

    def _acl(self, top: Reader) -> tuple[AclAction, tuple[AclRuleSpec, ...], str]:
        if not top.has("acl"):
            return AclAction.DENY, (), "permit"
        section = top.sub("acl")
        default = AclAction(section.get("default", one_of("permit", "deny", "to_cpu"), "deny"))
        icmpv6_errors = section.get(
            "icmpv6_errors", one_of(*acl6.ICMPV6_ERROR_MODES), acl6.ICMPV6_ERROR_MODES[0]
        )
        rules: list[AclRuleSpec] = []
        for index, item in enumerate(section.items("rules", required=False)):
            name = item.get("name", as_str, f"rule{index}")
            rules.append(self._acl_rule(item, name, index))
            item.reject_unknown()
        if section.has("classbench"):
            bench = section.sub("classbench")
            target = self._file(bench, "file")
            action = AclAction(bench.get("action", one_of("permit", "deny", "to_cpu"), "permit"))
            limit = pv.opt(bench, "limit", pv.positive)
            for rule in parse_classbench(target, action, limit):
                line = rule.origin.line if rule.origin else 0
                rules.append(AclRuleSpec(f"{target.name}:{line}", rule, line))
            bench.reject_unknown()
        section.reject_unknown()
        return default, tuple(rules), icmpv6_errors

    def _acl_rule(self, item: Reader, name: str, index: int) -> AclRuleSpec:
        """One rule of `acl.rules`, for each family it applies to: literal addresses make it
        their family's, protocol names icmp (IPv4) and icmpv6 (IPv6) too; network names stand
        for each family's prefixes (a family they have none of gets nothing to match)."""
        action = AclAction(item.get("action", one_of("permit", "deny", "to_cpu")))
        src = pv.opt(item, "src", self._dual_prefixes) or _DualPrefixes(None, None, {})
        dst = pv.opt(item, "dst", self._dual_prefixes) or _DualPrefixes(None, None, {})
        literal = {**src.literal}
        for version, text in dst.literal.items():
            if literal and version not in literal:
                other = next(iter(literal.values()))
                raise item.error(
                    "dst",
                    f"dst {text} is IPv{version} and src {other} is not: a rule with literal "
                    "addresses is of one family; write one rule for each",
                )
            literal.setdefault(version, text)
        families = set(literal) or {4, 6}
        protos = pv.opt(item, "proto", pv.protocol_items)
        protos4 = protos6 = None
        if protos is not None:
            protos4 = tuple(p.match for p in protos if p.family != 6)
            protos6 = tuple(p.match for p in protos if p.family != 4)
            names = {p.family for p in protos}
            if not protos4:
                families.discard(4)
            if not protos6:
                families.discard(6)
            if not families:
                (version,) = literal
                proto = "icmp is IPv4's (ICMPv6 is icmpv6)" if 4 in names else "icmpv6 is IPv6's"
                raise item.error(
                    "proto",
                    f"{proto}, and the rule's addresses are IPv{version} ({literal[version]})",
                )
        types = pv.opt(item, "icmp_type", pv.icmp_types)
        if types is not None and (
            protos is None or any(p.match.value != pc.IP_PROTO_ICMPV6 for p in protos)
        ):
            raise item.error("icmp_type", "icmp_type needs proto icmpv6 (alone)")
        sport = pv.opt(item, "sport", pv.ports)
        dport = pv.opt(item, "dport", pv.ports)
        has_ports = sport is not None or dport is not None
        if (
            has_ports
            and protos is not None
            and not all(p.match.value in (pc.IP_PROTO_TCP, pc.IP_PROTO_UDP) for p in protos)
        ):
            raise item.error(
                "sport" if sport is not None else "dport", "ports need proto tcp and/or udp"
            )
        # The IPv4 side, for the HSM classifier: one rule per policy rule (its position is the
        # id both families report), matching nothing where the rule is IPv6's alone.
        rule = AclRule(
            src=pv.to_prefixes(src.v4) if 4 in families else (),
            dst=pv.to_prefixes(dst.v4),
            sport=sport or ANY_PORT,
            dport=dport or ANY_PORT,
            proto=protos4 or (ProtoMatch(0, 0),),
            action=action,
            origin=Origin(str(self.path), item.line),
        )
        rule6 = None
        if 6 in families:
            rule6 = Acl6Rule(
                rule_id=index,
                action=action,
                src=acl6.ANY6 if src.v6 is None else tuple(Prefix6.of(n) for n in src.v6),
                dst=acl6.ANY6 if dst.v6 is None else tuple(Prefix6.of(n) for n in dst.v6),
                proto=protos6 or (ProtoMatch(0, 0),),
                sport=sport or ANY_PORT,
                dport=dport or ANY_PORT,
                icmp_types=types,
            )
        return AclRuleSpec(name, rule, item.line, rule6)

    def _ids(
        self, top: Reader, classes: Sequence[ClassSpec]
    ) -> tuple[str | None, IdsHeaders, tuple[Ids6Rule, ...]]:
        if not top.has("ids"):
            return None, IdsHeaders((), (), 0), ()
        section = top.sub("ids")
        target = self._file(section, "rules")
        # The policy's networks are Snort variables too ($inside); ids.variables override.
        values: dict[str, str] = {
            name: pv.snort_value([str(n) for n in (*nets, *self.networks6[name])])
            for name, nets in self.networks.items()
        }
        if section.has("variables"):
            var_section = section.sub("variables")
            for key in list(var_section.data):
                items = var_section.get(key, pv.str_or_list)
                expanded: list[str] = []
                for item in items:
                    if item in self.networks:
                        expanded.extend(str(n) for n in self.networks[item])
                        expanded.extend(str(n) for n in self.networks6[item])
                    else:
                        expanded.append(item)
                values[key] = pv.snort_value(expanded)
        default = next((c.class_id for c in classes if c.default), 0)
        class_map = ClassMap(
            default=default,
            by_sid={sid: c.class_id for c in classes for sid in c.sids},
            by_service={name: c.class_id for c in classes for name in c.services},
            by_classtype={name: c.class_id for c in classes for name in c.classtypes},
        )
        raw_rules = parse_rules_file(target).rules
        variables = SnortVariables().with_values(values, str(self.path))
        headers = ids_rules_from_raw(raw_rules, variables, class_map)
        # Rules no class claims (class 0) are not classified: they must not shadow later ones.
        kept = tuple(r for r in headers.rules if r.class_id != 0)
        # The same rules for IPv6 flows, which the CPM classifies (controller.ids6).
        rules6 = ids6.rules_from_raw(raw_rules, variables.values, class_map)
        section.reject_unknown()
        return str(target), IdsHeaders(kept, headers.notes, headers.total), rules6

    def _nat(self, top: Reader, ports: Sequence[PortSpec], routes: Sequence[Route]) -> NatSpec:
        if not top.has("nat"):
            return NatSpec()
        section = top.sub("nat")
        dp_base: int | None = DEFAULT_DP_BASE
        if section.has("data_plane_ports"):
            dp_base = section.get("data_plane_ports", pv.dp_block)
        default_ports = (1024, 65535) if dp_base is None else (1024, dp_base - 1)
        if dp_base is not None and dp_base <= 1024:
            default_ports = (dp_base + NAT_DP_PORTS, 65535)
        port_range = section.get("ports", pv.port_range, default_ports)
        if (
            dp_base is not None
            and port_range[0] <= dp_base + NAT_DP_PORTS - 1
            and dp_base <= port_range[1]
        ):
            raise section.error(
                "ports",
                f"{port_range[0]}-{port_range[1]} overlaps the data plane's block "
                f"{dp_base}-{dp_base + NAT_DP_PORTS - 1} (data_plane_ports)",
            )
        masquerade: list[Masquerade] = []
        for item in section.items("masquerade", required=False):
            port = item.get("port", as_int)
            spec = next((p for p in ports if p.number == port), None)
            if spec is None or spec.role == pc.ROLE_SPM:
                raise item.error("port", f"port {port} is not an inside or outside port")
            sources = item.get("sources", self._prefixes)
            if sources is None:
                sources = (ipaddress.IPv4Network("0.0.0.0/0"),)
            address = pv.opt(item, "address", as_ipv4)
            if address is None:
                if not spec.addresses:
                    raise item.error("address", f"port {port} has no address to masquerade as")
                address = spec.addresses[0].ip
            masquerade.append(Masquerade(port, sources, address))
            item.reject_unknown()
        forwards: list[PortForward] = []
        for item in section.items("port_forwards", required=False):
            address = item.get("address", as_ipv4)
            proto_name = item.get("proto", one_of("tcp", "udp"))
            proto = PROTOCOL_NUMBERS[proto_name]
            port = item.get("port", pv.port_number)
            to = item.get("to", as_ipv4)
            to_port = item.get("to_port", pv.port_number, port)
            if any((f.address, f.proto, f.port) == (address, proto, port) for f in forwards):
                raise item.error("port", f"{address} {proto_name}/{port} is forwarded twice")
            if not any(to in r.prefix for r in routes):
                raise item.error("to", f"no route to {to}: list it under 'neighbours'")
            if (
                dp_base is not None
                and dp_base <= port < dp_base + NAT_DP_PORTS
                and any(m.address == address for m in masquerade)
            ):
                raise item.error(
                    "port",
                    f"port {port} of {address} is in the data plane's masquerade block "
                    f"{dp_base}-{dp_base + NAT_DP_PORTS - 1} (data_plane_ports)",
                )
            forwards.append(PortForward(address, proto, port, to, to_port))
            item.reject_unknown()
        nptv6_mappings = nptv6_mappings_of(section, ports)
        nat64 = nat64_of(section, ports, nptv6_mappings)
        section.reject_unknown()
        return NatSpec(
            port_range, tuple(masquerade), tuple(forwards), dp_base, nptv6_mappings, nat64
        )

    def _ipsec(
        self,
        top: Reader,
        ports: Sequence[PortSpec],
        pools: Sequence[PoolSpec],
        chains: Sequence[ChainSpec],
    ) -> IpsecSpec | None:
        if not top.has("ipsec"):
            return None
        section = top.sub("ipsec")
        # The IPsec SPMs route; they are no inspection chain's pool (they would not return the
        # packets they are sent).
        pool = section.data.get("pool")
        for chain in chains:
            if chain.pool == pool:
                raise section.error(
                    "pool", f"pool {pool!r} inspects for chain {chain.name!r}; IPsec needs its own"
                )
        return parse_ipsec(
            section,
            self._prefixes,
            self._file,
            [p.name for p in pools],
            [a for p in ports if p.role == pc.ROLE_OUTSIDE for a in p.addresses],
            [a.network for p in ports if p.role == pc.ROLE_INSIDE for a in p.addresses],
        )

    def _sessions(self, top: Reader) -> SessionSettings:
        if not top.has("sessions"):
            return SessionSettings()
        section = top.sub("sessions")
        timeouts = dict(SessionSettings().idle_timeout)
        if section.has("idle_timeout"):
            sub = section.sub("idle_timeout")
            for key in ("tcp", "udp", "icmp", "other"):
                if sub.has(key):
                    timeouts[key] = sub.get(key, pv.positive_float)
            sub.reject_unknown()
        linger = section.get("closing_linger", pv.non_negative_float, 2.0)
        to_cpu = section.get("acl_to_cpu", one_of(*TO_CPU_ACTIONS), "drop")
        new_flows = None
        if section.has("new_flows_per_source"):
            sub = section.sub("new_flows_per_source")
            rate = sub.get("rate", pv.positive)
            burst = sub.get("burst", pv.positive, rate)
            sub.reject_unknown()
            new_flows = (rate, burst)
        entries = section.get("data_plane_entries", one_of(*DATA_PLANE_ENTRIES), "always")
        report = section.get("report_interval", pv.positive_float, 1.0)
        section.reject_unknown()
        return SessionSettings(timeouts, linger, to_cpu, new_flows, entries, report)
