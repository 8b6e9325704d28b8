"""Router advertisements (RFC 4861): the frame on exact bytes against one scapy builds (its
checksum computed afresh), the schedule of section 6.2.4, the policy's bounds with file, line and
field, and a controller sending them to the port as packet-outs once it is the primary."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from scapy.layers.inet6 import (
    ICMPv6ND_RA,
    ICMPv6NDOptMTU,
    ICMPv6NDOptPrefixInfo,
    ICMPv6NDOptSrcLLAddr,
    IPv6,
)
from scapy.layers.l2 import Ether

from controller.policy import RaSettings, load_policy
from controller.router_adverts import RaPort, RouterAdvertiser, advertisement, ra_ports
from opengate.errors import ConfigError
from tests.controller.conftest import ControllerFactory, wait_until
from tests.controller.real_switch import Lab
from tests.switch_double import SwitchDouble

PORT1 = RaPort(
    1,
    0x020000000001,
    ipaddress.IPv6Address("fe80::ff:fe00:1"),
    (ipaddress.IPv6Network("2001:db8:1::/64"), ipaddress.IPv6Network("2001:db8:7::/64")),
    RaSettings(interval=30, lifetime=90, autonomous=True, mtu=1500),
)


def test_the_advertisement_is_rfc_4861s() -> None:
    """All nodes from the port's link-local address and MAC, hop limit 255, the router lifetime,
    a current hop limit of 64, the source link-layer option, the MTU and one prefix option per
    network (on-link, autonomous, RFC 4861's default lifetimes)."""
    expected = (
        Ether(src="02:00:00:00:00:01", dst="33:33:00:00:00:01")
        / IPv6(src="fe80::ff:fe00:1", dst="ff02::1", hlim=255)
        / ICMPv6ND_RA(chlim=64, M=0, O=0, prf=0, routerlifetime=90, reachabletime=0, retranstimer=0)
        / ICMPv6NDOptSrcLLAddr(lladdr="02:00:00:00:00:01")
        / ICMPv6NDOptMTU(mtu=1500)
    )
    for prefix in ("2001:db8:1::", "2001:db8:7::"):
        expected = expected / ICMPv6NDOptPrefixInfo(
            prefixlen=64,
            L=1,
            A=1,
            validlifetime=2_592_000,
            preferredlifetime=604_800,
            prefix=prefix,
        )
    assert advertisement(PORT1) == bytes(expected)


def test_without_slaac_or_mtu_the_prefixes_are_on_link_only() -> None:
    plain = RaPort(
        PORT1.port, PORT1.mac, PORT1.link_local, PORT1.prefixes[:1], RaSettings(lifetime=0)
    )
    frame = Ether(advertisement(plain))
    assert frame[ICMPv6ND_RA].routerlifetime == 0
    assert not frame.haslayer(ICMPv6NDOptMTU)
    info = frame[ICMPv6NDOptPrefixInfo]
    assert (info.L, info.A, info.prefix) == (1, 0, "2001:db8:1::")
    copy = Ether(bytes(frame))
    del copy[ICMPv6ND_RA].cksum
    assert Ether(bytes(copy))[ICMPv6ND_RA].cksum == frame[ICMPv6ND_RA].cksum


def test_the_schedule_of_section_6_2_4() -> None:
    """At once, then at random between a third of the interval and the interval, the first
    three at most 16 s apart; a changed port starts again, a removed one stops."""
    draws: list[tuple[float, float]] = []

    def highest(low: float, high: float) -> float:
        draws.append((low, high))
        return high

    advertiser = RouterAdvertiser(highest)
    advertiser.configure([PORT1], 100.0)
    assert [p for p, _ in advertiser.due(100.0)] == [1]
    assert advertiser.due(110.0) == []
    assert advertiser.next_due(1) == 116.0  # min(30, 16): an initial one
    assert len(advertiser.due(116.0)) == 1
    assert advertiser.next_due(1) == 132.0
    assert len(advertiser.due(132.0)) == 1
    assert advertiser.next_due(1) == 162.0  # three sent: the interval itself
    assert draws == [(10.0, 30.0)] * 3
    slower = RaPort(1, PORT1.mac, PORT1.link_local, PORT1.prefixes, RaSettings(interval=60))
    advertiser.configure([slower], 140.0)
    assert len(advertiser.due(140.0)) == 1, "a changed port advertises at once"
    advertiser.configure([], 150.0)
    assert advertiser.due(1000.0) == [] and advertiser.next_due(1) is None


PORT_LINES = (
    "addresses: [10.0.1.1/24, 2001:db8:1::1/64]}",
    "addresses: [198.51.100.1/24, 2001:db8:2::1/64]}",
)


def _load(lab: Path, settings: str, port: int = 0) -> None:
    """The lab policy with `router_advertisements: settings` on its inside (0) or outside (1)
    port."""
    text = lab.read_text()
    anchor = PORT_LINES[port]
    assert anchor in text
    added = anchor[:-1] + f", router_advertisements: {settings}}}"
    lab.write_text(text.replace(anchor, added, 1))


def test_a_port_loads_its_settings_and_defaults(lab: Path) -> None:
    _load(lab, "{}")
    policy = load_policy(lab)
    (port,) = ra_ports(policy)
    assert (port.port, str(port.link_local), [str(p) for p in port.prefixes]) == (
        1,
        "fe80::ff:fe00:1",
        ["2001:db8:1::/64"],
    )
    assert port.settings == RaSettings(interval=600.0, lifetime=1800, autonomous=False, mtu=None)


@pytest.mark.parametrize(
    ("settings", "field", "message"),
    [
        ("{interval: 2}", "router_advertisements.interval", "2 s is not 4..1800"),
        ("{interval: 30, lifetime: 10}", "router_advertisements.lifetime", "neither 0 nor 30"),
        ("{mtu: 1000}", "router_advertisements.mtu", "1000 is not 1280..65535"),
        ("{every: 3}", "router_advertisements.every", "unknown field"),
        ("true", "router_advertisements", "expected a mapping"),
    ],
)
def test_each_mistake_names_its_field(lab: Path, settings: str, field: str, message: str) -> None:
    _load(lab, settings)
    with pytest.raises(ConfigError) as raised:
        load_policy(lab)
    assert f"ports[0].{field}: " in str(raised.value) and message in str(raised.value)


def test_an_outside_port_sends_none(lab: Path) -> None:
    _load(lab, "{}", port=1)
    with pytest.raises(ConfigError) as raised:
        load_policy(lab)
    assert "ports[1].router_advertisements: router advertisements go out of inside ports only" in (
        str(raised.value)
    )


def test_the_controller_sends_them_out_of_the_port(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    """Once primary and reconciled: a packet-out to port 1, not through the pipeline, whose
    bytes are the advertisement; counted per port."""
    _load(lab, "{interval: 4, lifetime: 12}")
    controller = make_controller(switch)
    payload, meta = wait_until("an advertisement", lambda: switch.packet_out(0.05))
    assert (meta["egress_port"], meta["submit_to_ingress"]) == (1, 0)
    assert controller.policy is not None
    (port,) = ra_ports(controller.policy)
    assert payload == advertisement(port)
    assert Ether(payload)[ICMPv6ND_RA].routerlifetime == 12
    sent = controller.metrics.registry.get_sample_value(
        "opengate_router_advertisements_total", {"npm": "npm1", "port": "1"}
    )
    assert sent is not None and sent >= 1


@pytest.mark.needs_root
@pytest.mark.parametrize(
    "real_lab",
    [((PORT_LINES[0], PORT_LINES[0][:-1] + ", router_advertisements: {interval: 4}}"),)],
    indirect=True,
)
def test_an_advertisement_leaves_the_real_switch_by_its_port(real_lab: Lab) -> None:
    """Through a real data plane over veths: the advertisement arrives on port 1's wire as the
    CPM built it, checksum right."""
    seen = real_lab.wires[1].expect(lambda f: bool(f.haslayer(ICMPv6ND_RA)))
    assert (seen[Ether].src, seen[Ether].dst) == ("02:00:00:00:00:01", "33:33:00:00:00:01")
    assert (seen[IPv6].src, seen[IPv6].dst, seen[IPv6].hlim) == ("fe80::ff:fe00:1", "ff02::1", 255)
    assert seen[ICMPv6NDOptPrefixInfo].prefix == "2001:db8:1::"
    copy = Ether(bytes(seen))
    del copy[ICMPv6ND_RA].cksum
    assert Ether(bytes(copy))[ICMPv6ND_RA].cksum == seen[ICMPv6ND_RA].cksum
