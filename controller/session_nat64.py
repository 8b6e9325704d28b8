"""A NAT64 session (RFC 6146) from an IPv6 flow's opening packet to a NAT64 prefix
(SessionManager.on_packet_ins): the translation's IPv4 address and a port for it from nat.ports
(the flow's own when free, like masquerading; an echo's identifier likewise), the routes of both
families from the policy, no SPM."""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Mapping
from typing import TYPE_CHECKING

from controller.policy import NAT64_NON_GLOBAL, Policy
from controller.session_encoding import FlowKey
from controller.session_model import Nat64Routes, Session, flow_text, proto4, reply_key
from opengate import p4constants as pc

if TYPE_CHECKING:
    from controller.sessions import SessionManager

IPV4_MAX = 0xFFFFFFFF


def nat64_routes(policy: Policy, key: FlowKey) -> Nat64Routes | None:
    """Where a NAT64 session's translated packets leave, by `policy`: the IPv4 server's route
    (by the translation's port) and the inside host's IPv6 route, with the ports' MACs (None:
    one of them is missing)."""
    src, dst = key[0], key[1]
    nat64 = policy.nat64_for(ipaddress.IPv6Address(dst))
    route4 = policy.route_for(ipaddress.IPv4Address(dst & IPV4_MAX))
    route6 = policy.route6_for(ipaddress.IPv6Address(src))
    if nat64 is None or route4 is None or route6 is None or route4.port != nat64.port:
        return None
    port4, port6 = policy.port(route4.port), policy.port(route6.port)
    return Nat64Routes(
        route4.port,
        route4.next_hop_mac,
        port4.mac if port4 is not None and port4.mac is not None else 0,
        route6.port,
        route6.next_hop_mac,
        port6.mac if port6 is not None and port6.mac is not None else 0,
    )


def nat64_session(
    manager: SessionManager, npm: str, key: FlowKey, meta: Mapping[str, int], now: dt.datetime
) -> Session | None:
    """The flow's NAT64 session; refused (None, counted, the packet dropped) for a destination
    the well-known prefix must not reach (RFC 6052 section 3.1), a protocol not translated, a
    route that does not leave by the translation's port, or no free port."""
    policy = manager.policy
    _src, dst, proto, sport, dport = key
    nat64 = policy.nat64_for(ipaddress.IPv6Address(dst))
    assert nat64 is not None
    server = int(dst) & IPV4_MAX
    address = int(nat64.address)
    routes = nat64_routes(policy, key)
    port = None
    if nat64.well_known and any(ipaddress.IPv4Address(server) in n for n in NAT64_NON_GLOBAL):
        refused = "non_global"
    elif proto not in (pc.IP_PROTO_TCP, pc.IP_PROTO_UDP, pc.IP_PROTO_ICMPV6):
        refused = "protocol"
    elif routes is None:
        refused = "no_route"
    else:
        port = manager.allocate_port(npm, address, (0, server, proto4(proto), sport, dport))
        refused = "nat_ports_exhausted" if port is None else ""
    if port is None:
        manager.stats.failed += 1
        manager.metrics.session_failures.labels(npm, f"nat64_{refused}").inc()
        manager.nat64_refused.warning(npm, f"{flow_text(key)}: {refused}")
        return None
    return Session(
        id=manager.new_id(),
        npm=npm,
        key=key,
        reply=reply_key(key, pc.NAT_64, address, port),
        class_id=0,
        spm_port=0,
        spm_mac=0,
        nat_kind=pc.NAT_64,
        nat_addr=address,
        nat_port=port,
        acl_rule=meta.get("acl_rule", pc.RULE_NONE),
        ingress_port=meta.get("ingress_port", 0),
        idle_timeout=manager.timeout_of(proto),
        created_at=now,
        nat64=routes,
    )
