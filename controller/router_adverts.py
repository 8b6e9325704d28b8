"""Router advertisements (RFC 4861 sections 4.2 and 6.2) the gateway sends on the ports whose
policy asks for them (`ports[].router_advertisements`): unsolicited, to all nodes, from the
port's link-local address and MAC, at random intervals between a third of the configured
interval and the interval (section 6.2.4), the first three at most 16 seconds apart
(MAX_INITIAL_RTR_ADVERT_INTERVAL). Each names the gateway as a default router for `lifetime`
seconds and carries the port's MAC and a prefix information option per IPv6 network of the port:
on-link, and autonomous (SLAAC) only where the policy says so, since the gateway resolves no
neighbours and reaches only the hosts its policy lists.

The CPM sends them through the NPM as packet-outs to the port (`RouterAdvertiser.due`, from the
ticker). Router solicitations are not answered: the NPM keeps multicast on its link
(docs/limitations.md)."""

from __future__ import annotations

import ipaddress
import logging
import random
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controller.npm import NpmConnection
from controller.policy_model import Policy, RaSettings
from opengate import p4constants as pc
from opengate.inet import internet_checksum

LOG = logging.getLogger(__name__)

ALL_NODES = ipaddress.IPv6Address("ff02::1")
ALL_NODES_MAC = bytes.fromhex("333300000001")
ICMPV6_ROUTER_ADVERT = 134
OPT_SOURCE_LL = 1
OPT_PREFIX_INFO = 3
OPT_MTU = 5
CUR_HOP_LIMIT = 64
PREFIX_ON_LINK = 0x80
PREFIX_AUTONOMOUS = 0x40
# RFC 4861 section 6.2.1's defaults for a prefix: valid 30 days, preferred 7 days.
VALID_LIFETIME = 2_592_000
PREFERRED_LIFETIME = 604_800
INITIAL_ADVERTS = 3  # MAX_INITIAL_RTR_ADVERTISEMENTS
INITIAL_INTERVAL = 16.0  # MAX_INITIAL_RTR_ADVERT_INTERVAL, seconds


@dataclass(frozen=True, slots=True)
class RaPort:
    """What one port's advertisements say."""

    port: int
    mac: int
    link_local: ipaddress.IPv6Address
    prefixes: tuple[ipaddress.IPv6Network, ...]
    settings: RaSettings


def ra_ports(policy: Policy) -> list[RaPort]:
    """The ports the policy advertises on, with what they say."""
    out = []
    for port in policy.ports:
        settings = port.router_advertisements
        if settings is None or port.mac is None or port.link_local is None:
            continue
        prefixes = tuple(dict.fromkeys(a.network for a in port.addresses6))
        out.append(RaPort(port.number, port.mac, port.link_local, prefixes, settings))
    return out


def _ipv6_header(src: ipaddress.IPv6Address, dst: ipaddress.IPv6Address, length: int) -> bytes:
    return struct.pack("!IHBB", 6 << 28, length, pc.IP_PROTO_ICMPV6, 255) + src.packed + dst.packed


def advertisement(port: RaPort) -> bytes:
    """The Ethernet frame of one router advertisement (RFC 4861 section 4.2), checksum over the
    pseudo-header (RFC 8200 section 8.1)."""
    settings = port.settings
    mac = port.mac.to_bytes(6, "big")
    options = struct.pack("!BB", OPT_SOURCE_LL, 1) + mac
    if settings.mtu is not None:
        options += struct.pack("!BBHI", OPT_MTU, 1, 0, settings.mtu)
    flags = PREFIX_ON_LINK | (PREFIX_AUTONOMOUS if settings.autonomous else 0)
    for prefix in port.prefixes:
        options += (
            struct.pack(
                "!BBBBIII",
                OPT_PREFIX_INFO,
                4,
                prefix.prefixlen,
                flags,
                VALID_LIFETIME,
                PREFERRED_LIFETIME,
                0,
            )
            + prefix.network_address.packed
        )
    body = (
        struct.pack(
            "!BBHBBHII", ICMPV6_ROUTER_ADVERT, 0, 0, CUR_HOP_LIMIT, 0, settings.lifetime, 0, 0
        )
        + options
    )
    pseudo = (
        port.link_local.packed
        + ALL_NODES.packed
        + struct.pack("!IxxxB", len(body), pc.IP_PROTO_ICMPV6)
    )
    checksum = internet_checksum(pseudo + body)
    body = body[:2] + struct.pack("!H", checksum) + body[4:]
    ethernet = ALL_NODES_MAC + mac + struct.pack("!H", pc.ETHERTYPE_IPV6)
    return ethernet + _ipv6_header(port.link_local, ALL_NODES, len(body)) + body


class RouterAdvertiser:
    """When each port's next advertisement is due (section 6.2.4), from a monotonic clock."""

    def __init__(self, rng: Callable[[float, float], float] | None = None) -> None:
        self._uniform = rng or random.uniform
        self._ports: dict[int, RaPort] = {}
        self._next: dict[int, float] = {}
        self._sent: dict[int, int] = {}

    def configure(self, ports: Iterable[RaPort], now: float) -> None:
        """The ports to advertise on (a new policy); a new or changed port starts again with
        its initial advertisements, at once; a port no longer listed stops."""
        fresh = {p.port: p for p in ports}
        for number, port in fresh.items():
            if self._ports.get(number) != port:
                self._next[number] = now
                self._sent[number] = 0
        for number in set(self._ports) - set(fresh):
            self._next.pop(number, None)
            self._sent.pop(number, None)
        self._ports = fresh

    def due(self, now: float) -> list[tuple[int, bytes]]:
        """(port, frame) of each advertisement due at `now`; schedules the next."""
        out = []
        for number, port in self._ports.items():
            if now < self._next[number]:
                continue
            out.append((number, advertisement(port)))
            self._sent[number] += 1
            interval = port.settings.interval
            wait = self._uniform(interval / 3, interval)
            if self._sent[number] < INITIAL_ADVERTS:
                wait = min(wait, INITIAL_INTERVAL)
            self._next[number] = now + wait
        return out

    def next_due(self, port: int) -> float | None:
        return self._next.get(port)


class Advertisements:
    """The advertisements of every NPM the controller is the primary of (from the ticker): one
    schedule per NPM, started when it becomes the primary (and reconciled), dropped when it no
    longer is; a new policy's ports take over on every schedule."""

    def __init__(self, sent: Any) -> None:
        self._sent = sent  # the counter of advertisements sent, by (npm, port)
        self._policy: Policy | None = None
        self._ports: list[RaPort] = []
        self._schedules: dict[str, RouterAdvertiser] = {}

    def tick(self, policy: Policy, primaries: Mapping[str, NpmConnection], now: float) -> None:
        if policy is not self._policy:
            self._policy = policy
            self._ports = ra_ports(policy)
            for schedule in self._schedules.values():
                schedule.configure(self._ports, now)
        for name in set(self._schedules) - set(primaries):
            del self._schedules[name]  # starts again when it is the primary again
        if not self._ports:
            return
        for name, connection in primaries.items():
            if name not in self._schedules:
                self._schedules[name] = RouterAdvertiser()
                self._schedules[name].configure(self._ports, now)
            for port, frame in self._schedules[name].due(now):
                try:
                    connection.packet_out(frame, submit_to_ingress=False, port=port)
                except Exception as error:  # a stream that broke: the next tick tries again
                    LOG.warning("%s: router advertisement on port %d: %s", name, port, error)
                    continue
                self._sent.labels(name, str(port)).inc()
