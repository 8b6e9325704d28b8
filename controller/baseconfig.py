"""What one NPM's tables must hold, apart from sessions and classification: the base configuration.

`desired_base(policy, tag_base, weights)` is a pure function of the policy, the NPM's tag block
and the SPM weights of the moment. `diff_base(current, desired)` says what to write, in an order
that never leaves a table pointing at something missing: new members, then removed selector
entries, then groups, then table entries, and deletions last.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from controller import acl6
from controller.ipsec import ipsec_routes
from controller.policy import Nat64Spec, Nptv6Mapping, Policy
from opengate import nptv6
from opengate import p4constants as pc
from opengate.entries import Exact, Lpm, MatchValue, TableEntry, Ternary

# Tables whose entries the base configuration owns entirely (the CPM deletes strays there).
BASE_TABLES = (
    pc.T_PORT_ROLE,
    pc.T_ROUTER_MAC,
    pc.T_SPM_RETURN,
    pc.T_ARP_RESPONDER,
    pc.T_ROUTING,
    pc.T_SNAT_RULE,
    pc.T_DNAT_RULE,
    pc.T_CLASS_POLICY,
    pc.T_FLOW_AGEING,
    pc.T_NAT_DP_REVERSE,
    pc.T_DNAT_DP_REVERSE,
    pc.T_ND_RESPONDER,
    pc.T_ROUTING_V6,
    pc.T_IPV6_ACL,
    pc.T_NPTV6_INBOUND,
    pc.T_NPTV6_OUTBOUND,
)
# Tables whose default action the base configuration sets (the keyless ones, and ipv6_acl's: the
# policy's default verdict).
BASE_DEFAULTS = (pc.T_NPM_IDENTITY, pc.T_ACL_VERDICT, pc.T_IPV6_ACL)
METERS = (pc.M_CLASS_METER, pc.M_CPU_METER, pc.M_CPU_SOURCE_METER, pc.M_NEW_FLOW_METER)
# Protocols whose data-plane session lifetimes the policy sets (flow_ageing; other protocols take
# the program's default, which the "other" timeout replaces through the table's default entry).
_AGEING_PROTOCOLS = (pc.IP_PROTO_TCP, pc.IP_PROTO_UDP, pc.IP_PROTO_ICMP)


def flow_ticks(seconds: float) -> int:
    """Seconds as data-plane ticks (FLOW_TICK_US microseconds each), at least one."""
    return max(1, round(seconds * 1_000_000 / pc.FLOW_TICK_US))


@dataclass(frozen=True, slots=True)
class Member:
    member_id: int
    port: int
    mac: int


@dataclass(frozen=True, slots=True)
class Group:
    group_id: int
    members: tuple[tuple[int, int], ...]  # (member_id, weight), sorted
    max_size: int


@dataclass(frozen=True, slots=True)
class GroupEntry:
    """An spm_select entry: pool -> group."""

    pool: int
    group_id: int


@dataclass(frozen=True, slots=True)
class MeterCell:
    meter: str
    index: int
    config: tuple[int, int, int, int] | None  # cir, cburst, pir, pburst; None: unmetered


@dataclass(slots=True)
class BaseConfig:
    entries: dict[tuple[object, ...], TableEntry] = field(default_factory=dict)
    members: dict[int, Member] = field(default_factory=dict)
    groups: dict[int, Group] = field(default_factory=dict)
    group_entries: dict[int, GroupEntry] = field(default_factory=dict)
    meters: dict[tuple[str, int], MeterCell] = field(default_factory=dict)

    def add(self, entry: TableEntry) -> None:
        self.entries[entry_key(entry)] = entry

    def count(self) -> int:
        return (
            len(self.entries)
            + len(self.members)
            + len(self.groups)
            + len(self.group_entries)
            + sum(1 for c in self.meters.values() if c.config is not None)
        )


def entry_key(entry: TableEntry) -> tuple[object, ...]:
    return (entry.table, entry.is_default, entry.match, entry.priority)


def acl_default_entry(policy: Policy) -> TableEntry:
    return TableEntry.make(
        pc.T_ACL_VERDICT,
        {},
        policy.acl_default.p4_action,
        {"rule_id": pc.RULE_NONE},
        is_default=True,
    )


def route6_entry(prefix_value: int, prefix_len: int, params: dict[str, int]) -> TableEntry:
    """A routing_v6 entry: the prefix as ternary matches on the destination's two halves, at
    priority prefix length + 1, so that the longest prefix wins (p4src/include/control/ipv6.p4)."""
    hi, lo = acl6.Prefix6(prefix_value, prefix_len).halves()
    return TableEntry.make(
        pc.T_ROUTING_V6,
        {"ipv6_dst_hi": hi, "ipv6_dst_lo": lo},
        pc.A_ROUTE_V6_TO,
        params,
        priority=prefix_len + 1,
    )


# A /128 of the gateway's own (no_route_v6): above every route, as long as a neighbour's.
OWN_ADDRESS_PRIORITY = 128 + 1


def own_address6_entry(address: int) -> TableEntry:
    """A routing_v6 entry that routes one of the gateway's own addresses nowhere (no_route_v6),
    so that no route, not even ::/0, takes a packet for it out of a port: the NPM sends a
    permitted one from inside to the CPM (NO_ROUTE), which answers an echo request."""
    hi, lo = acl6.Prefix6(address, 128).halves()
    return TableEntry.make(
        pc.T_ROUTING_V6,
        {"ipv6_dst_hi": hi, "ipv6_dst_lo": lo},
        pc.A_NO_ROUTE_V6,
        {},
        priority=OWN_ADDRESS_PRIORITY,
    )


def nat64_route_entry(nat64: Nat64Spec) -> TableEntry:
    """A NAT64 prefix in routing_v6 (route_v6_nat64): its flows open at the CPM, which makes
    their NAT64 sessions; at the prefix's priority, as a route of its length would be."""
    prefix = nat64.prefix
    hi, lo = acl6.Prefix6(int(prefix.network_address), prefix.prefixlen).halves()
    return TableEntry.make(
        pc.T_ROUTING_V6,
        {"ipv6_dst_hi": hi, "ipv6_dst_lo": lo},
        pc.A_ROUTE_V6_NAT64,
        {},
        priority=prefix.prefixlen + 1,
    )


def _half_prefix(network: ipaddress.IPv6Network) -> Ternary:
    """An NPTv6 prefix (/48 or shorter) as a ternary match on the address's high half."""
    return Ternary(int(network.network_address) >> 64, int(network.netmask) >> 64)


def nptv6_entries(mapping: Nptv6Mapping) -> list[TableEntry]:
    """An NPTv6 mapping's two entries (p4src/include/control/ipv6.p4, opengate.nptv6): sources
    in the inside prefix leaving by the port take the outside prefix, destinations in the
    outside prefix arriving on it take the inside one. The mappings of a port do not overlap
    (the policy refuses it), so the priority only has to be there: the prefix's length."""
    inside, outside = mapping.inside, mapping.outside
    return [
        TableEntry.make(
            pc.T_NPTV6_OUTBOUND,
            {"egress_port": Exact(mapping.port), "ipv6_src_hi": _half_prefix(inside)},
            pc.A_NPT_REWRITE_SRC,
            nptv6.action_params(inside, outside),
            priority=inside.prefixlen,
        ),
        TableEntry.make(
            pc.T_NPTV6_INBOUND,
            {"ingress_port": Exact(mapping.port), "ipv6_dst_hi": _half_prefix(outside)},
            pc.A_NPT_REWRITE_DST,
            nptv6.action_params(outside, inside),
            priority=outside.prefixlen,
        ),
    ]


def ipv6_entries(policy: Policy, has: Callable[[str], bool]) -> list[TableEntry]:
    """IPv6: neighbour advertisements for the gateway's own addresses (each port's, and its
    link-local one, with the port's MAC), the routes (neighbours' /128s and static ones, each
    rewriting the source MAC to its port's; each of the gateway's own addresses routed nowhere
    above them; the NAT64 prefixes), the ACL's IPv6 rules with the default verdict, and the
    NPTv6 mappings."""
    out: list[TableEntry] = []
    port_macs = {p.number: p.mac for p in policy.ports if p.mac is not None}
    if has(pc.T_ND_RESPONDER):
        for address, port_number in sorted(policy.gateway_addresses6().items()):
            mac = port_macs.get(port_number)
            if mac is None:
                continue
            value = int(address)
            out.append(
                TableEntry.make(
                    pc.T_ND_RESPONDER,
                    {"target_hi": Exact(value >> 64), "target_lo": Exact(value & acl6.HALF_MAX)},
                    pc.A_ND_ADVERTISE,
                    {"mac": mac},
                )
            )
    if has(pc.T_ROUTING_V6):
        for route in policy.routes6:
            params = {
                "port": route.port,
                "next_hop_mac": route.next_hop_mac,
                "router_mac": port_macs.get(route.port, 0),
            }
            prefix = route.prefix
            out.append(route6_entry(int(prefix.network_address), prefix.prefixlen, params))
        own = sorted({int(a.ip) for port in policy.ports for a in port.addresses6})
        out.extend(own_address6_entry(address) for address in own)
        out.extend(nat64_route_entry(n) for n in policy.nat.nat64)
    if has(pc.T_IPV6_ACL):
        out.extend(acl6.entries(policy.acl6))
        out.append(acl6.default_entry(policy.acl_default))
    if has(pc.T_NPTV6_OUTBOUND) and has(pc.T_NPTV6_INBOUND):
        for mapping in policy.nat.nptv6:
            out.extend(nptv6_entries(mapping))
    return out


def desired_base(
    policy: Policy,
    tag_base: int,
    weights: Mapping[str, int],
    available: Container[str] | None = None,
    ipsec_holder: str | None = None,
) -> BaseConfig:
    """The base configuration. `weights`: SPM name -> current weight (0 or absent: out).
    `available`: the tables and meters the NPM's program has (None: all of them); the TNA build
    has no data-plane sessions, hence no flow_ageing. `ipsec_holder`: the IPsec SPM that holds
    the tunnels now (`controller.ipsec.active_spm`)."""
    return with_weights(static_base(policy, tag_base, available), policy, weights, ipsec_holder)


def with_weights(
    static: BaseConfig,
    policy: Policy,
    weights: Mapping[str, int],
    ipsec_holder: str | None = None,
) -> BaseConfig:
    """`static` (what `static_base` made) with what the SPMs' weights decide: the selector's
    groups and the routes to the IPsec SPM. A new BaseConfig; its members and meters are
    `static`'s own dicts, shared (nothing changes them once made), so that `diff_base` of two
    made from one static part skips the meters."""
    out = BaseConfig(entries=dict(static.entries), members=static.members, meters=static.meters)
    # IPsec (controller.ipsec): remote subnets and the IKE/ESP address to the active IPsec SPM.
    for ipsec_route in ipsec_routes(policy, weights, ipsec_holder):
        prefix = ipsec_route.prefix
        out.add(
            TableEntry.make(
                pc.T_ROUTING,
                {"ipv4_dst": Lpm(int(prefix.network_address), prefix.prefixlen)},
                pc.A_ROUTE_TO,
                {"port": ipsec_route.port, "next_hop_mac": ipsec_route.mac},
            )
        )
    # SPM selector: one group per pool, weights from the load reports.
    for pool in policy.pools:
        specs = [s for s in policy.spms if s.name in pool.spms]
        members = tuple(
            sorted(
                (s.member_id, min(weights.get(s.name, 0), s.weight))
                for s in specs
                if weights.get(s.name, 0) > 0
            )
        )
        max_size = sum(s.weight for s in specs)
        out.groups[pool.pool_id] = Group(pool.pool_id, members, max_size)
        if members:
            out.group_entries[pool.pool_id] = GroupEntry(pool.pool_id, pool.pool_id)
    return out


def static_base(
    policy: Policy, tag_base: int, available: Container[str] | None = None
) -> BaseConfig:
    """The base configuration but for what the SPMs' weights decide (`with_weights`)."""
    out = BaseConfig()

    def has(name: str) -> bool:
        return available is None or name in available

    for port in policy.ports:
        out.add(
            TableEntry.make(
                pc.T_PORT_ROLE,
                {"ingress_port": Exact(port.number)},
                pc.A_SET_PORT_ROLE,
                {"role": port.role},
            )
        )
        if port.mac is not None:
            out.add(
                TableEntry.make(
                    pc.T_ROUTER_MAC,
                    {"egress_port": Exact(port.number)},
                    pc.A_SET_SOURCE_MAC,
                    {"mac": port.mac},
                )
            )
    out.add(
        TableEntry.make(
            pc.T_NPM_IDENTITY, {}, pc.A_SET_NPM_IDENTITY, {"tag_base": tag_base}, is_default=True
        )
    )
    for nat_done in (0, 1):
        out.add(
            TableEntry.make(
                pc.T_SPM_RETURN,
                {"tag": Exact(tag_base | nat_done)},
                pc.A_RESUME_AFTER_SPM,
                {"nat_done": nat_done},
            )
        )
    port_macs = {p.number: p.mac for p in policy.ports if p.mac is not None}
    for address, port_number in sorted(policy.gateway_addresses().items()):
        mac = port_macs.get(port_number)
        if mac is None:
            continue
        out.add(
            TableEntry.make(
                pc.T_ARP_RESPONDER,
                {"target_ip": Exact(int(address))},
                pc.A_ARP_REPLY,
                {"mac": mac},
            )
        )
    for route in policy.routes:
        out.add(
            TableEntry.make(
                pc.T_ROUTING,
                {"ipv4_dst": Lpm(int(route.prefix.network_address), route.prefix.prefixlen)},
                pc.A_ROUTE_TO,
                {"port": route.port, "next_hop_mac": route.next_hop_mac},
            )
        )
    # Masquerading: by the NPM itself from its block of ports where the program and the policy
    # allow it (replies found by address in nat_dp_reverse), else by the CPM (packet-in).
    dp_base = policy.nat.data_plane_base if has(pc.T_NAT_DP_REVERSE) else None
    for rule in policy.nat.masquerade:
        for net in rule.sources:
            match: dict[str, MatchValue] = {
                "egress_port": Exact(rule.port),
                "ipv4_src": Lpm(int(net.network_address), net.prefixlen),
            }
            if dp_base is None:
                out.add(TableEntry.make(pc.T_SNAT_RULE, match, pc.A_MASQUERADE))
            else:
                params = {"address": int(rule.address), "port_base": dp_base}
                out.add(TableEntry.make(pc.T_SNAT_RULE, match, pc.A_MASQUERADE_DP, params))
    if dp_base is not None:
        for public in sorted({int(rule.address) for rule in policy.nat.masquerade}):
            out.add(
                TableEntry.make(
                    pc.T_NAT_DP_REVERSE,
                    {"ipv4_addr": Exact(public)},
                    pc.A_DP_UNMASQUERADE,
                    {"port_base": dp_base},
                )
            )
    # Port forwards: carried by the NPM (its flows rewritten from the rule, their replies known
    # by their source in dnat_dp_reverse) where the program and the policy allow it and the
    # forward's target is no other forward's (else a reply could not tell its public end); the
    # others set up by the CPM (packet-in).
    targets = Counter((int(f.to), f.proto, f.to_port) for f in policy.nat.port_forwards)
    for forward in policy.nat.port_forwards:
        match = {
            "ipv4_dst": Exact(int(forward.address)),
            "ip_proto": Exact(forward.proto),
            "l4_dport": Exact(forward.port),
        }
        target = (int(forward.to), forward.proto, forward.to_port)
        if dp_base is None or not has(pc.T_DNAT_DP_REVERSE) or targets[target] > 1:
            out.add(TableEntry.make(pc.T_DNAT_RULE, match, pc.A_PORT_FORWARD))
            continue
        params = {"to_addr": target[0], "to_port": forward.to_port}
        out.add(TableEntry.make(pc.T_DNAT_RULE, match, pc.A_PORT_FORWARD_DP, params))
        out.add(
            TableEntry.make(
                pc.T_DNAT_DP_REVERSE,
                {
                    "ipv4_src": Exact(target[0]),
                    "ip_proto": Exact(forward.proto),
                    "l4_sport": Exact(forward.to_port),
                },
                pc.A_FORWARDED_REPLY,
                {"public_addr": int(forward.address), "public_port": forward.port},
            )
        )
    for spec in policy.classes:
        if spec.chain is None:
            continue
        chain = policy.chain(spec.chain)
        pool = policy.pool(chain.pool)
        out.add(
            TableEntry.make(
                pc.T_CLASS_POLICY,
                {"class_id": Exact(spec.class_id)},
                pc.A_INSPECT,
                {"pool": pool.pool_id, "open_on_failure": int(chain.on_failure == "open")},
            )
        )
    out.add(acl_default_entry(policy))
    for entry in ipv6_entries(policy, has):
        out.add(entry)
    # SPM selector: one member per SPM (the groups: `with_weights`).
    for spm in policy.spms:
        out.members[spm.member_id] = Member(spm.member_id, spm.port, spm.mac)
    # Meters: every cell the policy sets; the others are reset (unmetered).
    for spec in policy.classes:
        if spec.meter is not None:
            meter = policy.meter(spec.meter)
            config = (meter.cir, meter.cburst, meter.pir, meter.pburst)
            out.meters[(pc.M_CLASS_METER, spec.class_id)] = MeterCell(
                pc.M_CLASS_METER, spec.class_id, config
            )
    for reason, name in policy.cpu_meters.items():
        meter = policy.meter(name)
        config = (meter.cir, meter.cburst, meter.pir, meter.pburst)
        out.meters[(pc.M_CPU_METER, reason)] = MeterCell(pc.M_CPU_METER, reason, config)
    if policy.cpu_source_meter is not None and has(pc.M_CPU_SOURCE_METER):
        meter = policy.meter(policy.cpu_source_meter)
        config = (meter.cir, meter.cburst, meter.pir, meter.pburst)
        for index in range(pc.METER_SIZES[pc.M_CPU_SOURCE_METER]):
            out.meters[(pc.M_CPU_SOURCE_METER, index)] = MeterCell(
                pc.M_CPU_SOURCE_METER, index, config
            )
    # New flows per source, in packets (opening packets): every cell alike.
    new_flows = policy.sessions.new_flows_per_source
    if new_flows is not None and has(pc.M_NEW_FLOW_METER):
        rate, burst = new_flows
        for index in range(pc.METER_SIZES[pc.M_NEW_FLOW_METER]):
            out.meters[(pc.M_NEW_FLOW_METER, index)] = MeterCell(
                pc.M_NEW_FLOW_METER, index, (rate, burst, rate, burst)
            )
    # Data-plane session lifetimes: the policy's idle timeouts and closing linger.
    if has(pc.T_FLOW_AGEING):
        settings = policy.sessions
        linger = flow_ticks(settings.closing_linger)
        report = flow_ticks(settings.report_interval)
        for proto in _AGEING_PROTOCOLS:
            out.add(
                TableEntry.make(
                    pc.T_FLOW_AGEING,
                    {"ip_proto": Exact(proto)},
                    pc.A_SET_FLOW_TIMEOUT,
                    {
                        "idle": flow_ticks(settings.timeout_for(proto)),
                        "closing": linger,
                        "report": report,
                    },
                )
            )
    return out


@dataclass(slots=True)
class BaseDiff:
    """Writes that turn `current` into `desired`, grouped by the order they must be applied in."""

    insert_members: list[Member] = field(default_factory=list)
    delete_group_entries: list[GroupEntry] = field(default_factory=list)
    insert_groups: list[Group] = field(default_factory=list)
    modify_groups: list[Group] = field(default_factory=list)
    insert_group_entries: list[GroupEntry] = field(default_factory=list)
    modify_group_entries: list[GroupEntry] = field(default_factory=list)
    insert_entries: list[TableEntry] = field(default_factory=list)
    modify_entries: list[TableEntry] = field(default_factory=list)
    meters: list[MeterCell] = field(default_factory=list)
    delete_entries: list[TableEntry] = field(default_factory=list)
    delete_groups: list[Group] = field(default_factory=list)
    modify_members: list[Member] = field(default_factory=list)
    delete_members: list[Member] = field(default_factory=list)

    def count(self) -> int:
        return sum(len(getattr(self, name)) for name in self.__slots__)

    def summary(self) -> dict[str, int]:
        return {name: len(getattr(self, name)) for name in self.__slots__ if getattr(self, name)}


K = TypeVar("K")
V = TypeVar("V")


def _split(current: Mapping[K, V], desired: Mapping[K, V]) -> tuple[list[V], list[V], list[V]]:
    inserts = [v for k, v in desired.items() if k not in current]
    modifies = [v for k, v in desired.items() if k in current and current[k] != v]
    deletes = [v for k, v in current.items() if k not in desired]
    return inserts, modifies, deletes


def diff_base(current: BaseConfig, desired: BaseConfig) -> BaseDiff:
    out = BaseDiff()
    out.insert_members, out.modify_members, out.delete_members = _split(
        current.members, desired.members
    )
    out.insert_groups, out.modify_groups, out.delete_groups = _split(current.groups, desired.groups)
    out.insert_group_entries, out.modify_group_entries, out.delete_group_entries = _split(
        current.group_entries, desired.group_entries
    )
    inserts, modifies, deletes = _split(current.entries, desired.entries)
    # Default entries cannot be inserted or deleted, only modified.
    out.insert_entries = [e for e in inserts if not e.is_default]
    out.modify_entries = [e for e in inserts if e.is_default] + modifies
    out.delete_entries = [e for e in deletes if not e.is_default]
    if current.meters is desired.meters:  # one static part's (`with_weights`): tens of thousands
        return out
    for key, cell in desired.meters.items():
        have = current.meters.get(key)
        if have is None or have.config != cell.config:
            out.meters.append(cell)
    for key, cell in current.meters.items():
        if key not in desired.meters and cell.config is not None:
            out.meters.append(MeterCell(cell.meter, cell.index, None))
    return out
