"""NAT64 (RFC 6146) in the CPM: `nat.nat64` loads with its defaults and each mistake is reported
with the file, line, field and message; its prefix becomes a route_v6_nat64 entry; an opening
packet-in to the prefix becomes a NAT64 session (the original direction in session_v6, the reply
in the IPv4 table, with the public port, the routes and the addresses RFC 6052 says) on the
switch double, in the database and the API's view; refused destinations are counted; FIN digests
of both families end it; a restart adopts it from the database and from the switch; and on a real
data plane an IPv6 SYN leaves as IPv4 and its SYN-ACK comes back as IPv6 (checksums verified)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from finsy.proto import p4r
from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import ICMPv6EchoRequest, IPv6
from scapy.layers.l2 import Ether

from controller.api import session_view
from controller.baseconfig import desired_base
from controller.policy import Policy, load_policy
from controller.runtime import Controller
from controller.session_encoding import FlowKey
from opengate import p4constants as pc
from opengate.entries import Exact, TableEntry, Ternary
from opengate.errors import ConfigError
from tests.controller.conftest import ControllerFactory, wait_until
from tests.controller.flows import GW_IN_MAC, GW_OUT_MAC, packet_in_meta
from tests.controller.real_switch import H1_MAC, OUT1_MAC, Lab
from tests.controller.test_sessions import db_sessions, normalized
from tests.switch_double import SwitchDouble

H1_6 = "2001:db8:1::10"
OUT1 = "198.51.100.20"
OUT1_64 = "64:ff9b::c633:6414"  # RFC 6052: 198.51.100.20 in the well-known prefix
PUBLIC = "198.51.100.1"  # port 2's first address
HALF = (1 << 64) - 1
NAT64_LINE = "  nat64:\n    - {port: 2}\n"


def with_nat64(lab: Path, entry: str = NAT64_LINE) -> Path:
    text = lab.read_text()
    lab.write_text(
        text.replace("nat:\n  ports: 20000-20009\n", "nat:\n  ports: 20000-20009\n" + entry)
    )
    return lab


def ip6(text: str) -> int:
    return int(ipaddress.IPv6Address(text))


def ip4(text: str) -> int:
    return int(ipaddress.IPv4Address(text))


def syn64(sport: int, dport: int = 80, dst: str = OUT1_64, flags: str = "S") -> bytes:
    return bytes(
        Ether(src=H1_MAC, dst=GW_IN_MAC)
        / IPv6(src=H1_6, dst=dst)
        / TCP(sport=sport, dport=dport, flags=flags)
    )


# -- the policy ------------------------------------------------------------------------------


def test_a_translation_loads_with_its_defaults(lab: Path) -> None:
    policy = load_policy(with_nat64(lab))
    (nat64,) = policy.nat.nat64
    assert (nat64.port, str(nat64.prefix), str(nat64.address), nat64.well_known) == (
        2,
        "64:ff9b::/96",
        PUBLIC,
        True,
    )
    assert policy.nat64_for(ipaddress.IPv6Address(OUT1_64)) is nat64
    assert nat64.embeds(ipaddress.IPv6Address(OUT1_64)) == ipaddress.IPv4Address(OUT1)
    assert policy.nat64_for(ipaddress.IPv6Address("2001:db8:2::20")) is None
    assert policy.gateway_addresses()[ipaddress.IPv4Address(PUBLIC)] == 2


@pytest.mark.parametrize(
    ("entry", "line", "field", "message"),
    [
        ("    - {port: 1}\n", 71, "port", "port 1 is not an outside port"),
        ("    - {port: 3}\n", 71, "port", "port 3 is not an outside port"),
        (
            '    - {port: 2, prefix: "64:ff9b::/64"}\n',
            71,
            "prefix",
            "64:ff9b::/64 is a /64: NAT64 takes a /96 here (the IPv4 address in the last 32 "
            "bits, RFC 6052)",
        ),
        (
            '    - {port: 2, prefix: "2001:db8:2::/96"}\n',
            71,
            "prefix",
            "2001:db8:2::/96 overlaps port 2's 2001:db8:2::/64",
        ),
        (
            "    - {port: 2}\n    - {port: 2}\n",
            72,
            "prefix",
            "64:ff9b::/96 overlaps 64:ff9b::/96 of line 71",
        ),
        ('    - {port: 2, address: "2001:db8::1"}\n', 71, "address", "not an IPv4 address"),
        ("    - {port: 2, pool: x}\n", 71, "pool", "unknown field"),
    ],
)
def test_each_mistake_names_its_line_and_field(
    lab: Path, entry: str, line: int, field: str, message: str
) -> None:
    with_nat64(lab, "  nat64:\n" + entry)
    with pytest.raises(ConfigError) as raised:
        load_policy(lab)
    text = str(raised.value)
    index = line - 71
    assert f"lab.yaml:{line}: nat.nat64[{index}].{field}: " in text, text
    assert message in text, text


def test_the_prefix_is_routed_to_the_cpm(lab: Path) -> None:
    """routing_v6 gets route_v6_nat64 for the prefix at a /96's priority (97)."""
    policy: Policy = load_policy(with_nat64(lab))
    base = desired_base(policy, tag_base=0x100, weights={})
    (entry,) = [e for e in base.entries.values() if e.action == pc.A_ROUTE_V6_NAT64]
    expected = TableEntry.make(
        pc.T_ROUTING_V6,
        {
            "ipv6_dst_hi": Ternary(0x0064FF9B00000000, HALF),
            "ipv6_dst_lo": Ternary(0, 0xFFFFFFFF00000000),
        },
        pc.A_ROUTE_V6_NAT64,
        {},
        priority=97,
    )
    assert entry == expected


# -- sessions on the switch double -------------------------------------------------------------


def nat64_pair(
    controller: Controller, flow: FlowKey, public_port: int, timeout_s: float = 30.0
) -> tuple[p4r.TableEntry, p4r.TableEntry]:
    """The two entries RFC 6146's binding needs, as the data plane's contract says
    (p4src/include/control/nat64.p4): built here from the flow, not by the controller's code."""
    src, dst, proto, sport, dport = flow
    proto4 = pc.IP_PROTO_ICMP if proto == pc.IP_PROTO_ICMPV6 else proto
    v6_values = (src >> 64, src & HALF, dst >> 64, dst & HALF, proto, sport, dport)
    original = TableEntry.make(
        pc.T_SESSION_V6,
        dict(zip(pc.MATCH_FIELDS[pc.T_SESSION_V6], (Exact(v) for v in v6_values), strict=True)),
        pc.A_SESSION_V6_NAT64,
        {
            "v4_src": ip4(PUBLIC),
            "v4_dst": dst & 0xFFFFFFFF,
            "sport": public_port,
            "port": 2,
            "next_hop_mac": 0x000000000220,
            "router_mac": 0x020000000002,
        },
    )
    v4_values = (dst & 0xFFFFFFFF, ip4(PUBLIC), proto4, dport, public_port)
    reply = TableEntry.make(
        pc.T_SESSION,
        dict(zip(pc.MATCH_FIELDS[pc.T_SESSION], (Exact(v) for v in v4_values), strict=True)),
        pc.A_SESSION_NAT64_REPLY,
        {
            "src_hi": dst >> 64,
            "src_lo": dst & HALF,
            "dst_hi": src >> 64,
            "dst_lo": src & HALF,
            "dport": sport,
            "port": 1,
            "next_hop_mac": 0x000000000110,
            "router_mac": 0x020000000001,
        },
    )
    schema = controller.npms["npm1"].schema
    out = []
    for entry in (original, reply):
        message = schema.encode_entry(entry)
        message.idle_timeout_ns = int(timeout_s * 1e9)
        out.append(normalized(message))
    return out[0], out[1]


def installed(switch: SwitchDouble) -> tuple[list[p4r.TableEntry], list[p4r.TableEntry]]:
    return (
        [normalized(e) for e in switch.table_entries(pc.T_SESSION_V6)],
        [normalized(e) for e in switch.table_entries(pc.T_SESSION)],
    )


def open_nat64(switch: SwitchDouble, frame: bytes) -> tuple[bytes, dict[str, int]]:
    before = len(switch.table_entries(pc.T_SESSION_V6))
    switch.inject_packet_in(frame, packet_in_meta(pc.CPU_REASON_SESSION_V6, acl_rule=1))
    sent: tuple[bytes, dict[str, int]] = wait_until(
        "the packet-out", lambda: switch.packet_out(0.05)
    )
    wait_until("the IPv6 entry", lambda: len(switch.table_entries(pc.T_SESSION_V6)) == before + 1)
    return sent


def test_an_opening_packet_to_the_prefix_becomes_a_nat64_session(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    """The first free port of nat.ports (40000 is outside it), both entries, the SYN sent back
    through the pipeline, the row and the API's view (IPv6 original, IPv4 reply)."""
    controller = make_controller(switch, policy=with_nat64(lab))
    frame = syn64(40000)
    payload, meta = open_nat64(switch, frame)
    assert (payload, meta["submit_to_ingress"]) == (frame, 1)
    flow = (ip6(H1_6), ip6(OUT1_64), pc.IP_PROTO_TCP, 40000, 80)
    original, reply = nat64_pair(controller, flow, 20000)
    assert installed(switch) == ([original], [reply])
    (row,) = db_sessions(controller)
    view = session_view(row)
    assert (view["family"], view["src"], view["dst"], view["r_src"], view["r_dst"]) == (
        6,
        H1_6,
        OUT1_64,
        OUT1,
        PUBLIC,
    )
    assert (view["nat"], view["nat_addr"], view["nat_port"], view["r_sport"]) == (
        "64",
        PUBLIC,
        20000,
        80,
    )
    # A second flow from the same port to the same server takes the next port.
    open_nat64(switch, bytes(Ether(bytes(syn64(40000, dport=443)))))
    second = (ip6(H1_6), ip6(OUT1_64), pc.IP_PROTO_TCP, 40000, 443)
    assert nat64_pair(controller, second, 20001)[1] in installed(switch)[1]


def test_an_echo_keeps_its_identifier_when_it_is_free(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    """An echo request's identifier in nat.ports is kept (as masquerading keeps a port)."""
    controller = make_controller(switch, policy=with_nat64(lab))
    ping = bytes(
        Ether(src=H1_MAC, dst=GW_IN_MAC)
        / IPv6(src=H1_6, dst=OUT1_64)
        / ICMPv6EchoRequest(id=20005, seq=1)
    )
    open_nat64(switch, ping)
    flow = (ip6(H1_6), ip6(OUT1_64), pc.IP_PROTO_ICMPV6, 20005, 0)
    original, reply = nat64_pair(controller, flow, 20005)
    assert installed(switch) == ([original], [reply])


def test_refused_destinations_are_counted_and_get_nothing(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    """RFC 6052 section 3.1: the well-known prefix does not reach RFC 1918 space; an IPv4
    server no route reaches (by the translation's port) gets nothing either."""
    controller = make_controller(switch, policy=with_nat64(lab))
    for dst, reason in (
        ("64:ff9b::a00:1", "nat64_non_global"),
        ("64:ff9b::808:808", "nat64_no_route"),
    ):
        switch.inject_packet_in(syn64(40001, dst=dst), packet_in_meta(pc.CPU_REASON_SESSION_V6))

        def counted(reason: str = reason) -> bool:
            value = controller.metrics.registry.get_sample_value(
                "opengate_session_failures_total", {"npm": "npm1", "why": reason}
            )
            return value == 1

        wait_until(f"{reason} counted", counted)
    assert installed(switch) == ([], [])
    assert switch.packet_out(0.2) is None, "the refused packets are not sent on"


def test_fin_digests_of_both_families_end_it_and_a_restart_adopts_it(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path, tmp_path: Path
) -> None:
    """The FIN from inside comes as session_close_v6_t (its IPv6 key), the server's as
    session_close_t (the IPv4 reply key); before that, a restart adopts the session from the
    database, and a controller with another database pairs the two entries into it."""
    policy = with_nat64(lab)
    first = make_controller(switch, policy=policy)
    open_nat64(switch, syn64(40002))
    flow = (ip6(H1_6), ip6(OUT1_64), pc.IP_PROTO_TCP, 40002, 80)
    pair = nat64_pair(first, flow, 20000)
    first.stop()
    again = make_controller(switch, policy=policy)
    assert again.states["npm1"].last_sync["sessions"]["adopted"] == 1
    again.stop()
    other = make_controller(switch, policy=policy, db_url=f"sqlite:///{tmp_path / 'other.db'}")
    assert other.states["npm1"].last_sync["sessions"]["adopted_from_switch"] == 1
    assert other.states["npm1"].last_sync["sessions"]["deleted_orphans"] == 0
    (row,) = db_sessions(other)
    assert (row["src6"], row["dst6"], row["nat_kind"], row["nat_port"]) == (
        H1_6,
        OUT1_64,
        pc.NAT_64,
        20000,
    )
    assert installed(switch) == ([pair[0]], [pair[1]])
    fin = pc.TCP_FLAG_FIN | pc.TCP_FLAG_ACK
    src, dst = flow[0], flow[1]
    switch.inject_digest(
        pc.D_SESSION_CLOSE_V6_T,
        [
            {
                "ipv6_src_hi": src >> 64,
                "ipv6_src_lo": src & HALF,
                "ipv6_dst_hi": dst >> 64,
                "ipv6_dst_lo": dst & HALF,
                "ip_proto": 6,
                "l4_sport": 40002,
                "l4_dport": 80,
                "tcp_flags": fin,
            }
        ],
    )
    other.bus.call(lambda: None)
    assert len(switch.table_entries(pc.T_SESSION_V6)) == 1, "one FIN is a half-close"
    switch.inject_digest(
        pc.D_SESSION_CLOSE_T,
        [
            {
                "ipv4_src": ip4(OUT1),
                "ipv4_dst": ip4(PUBLIC),
                "ip_proto": 6,
                "l4_sport": 80,
                "l4_dport": 20000,
                "tcp_flags": fin,
            }
        ],
    )
    wait_until("both entries removed", lambda: installed(switch) == ([], []))
    wait_until("the row deleted", lambda: db_sessions(other) == [])


# -- a real data plane -----------------------------------------------------------------------


@pytest.mark.needs_root
@pytest.mark.parametrize(
    "real_lab",
    [(("nat:\n  ports: 20000-20009\n", "nat:\n  ports: 20000-20009\n" + NAT64_LINE),)],
    indirect=True,
)
def test_an_ipv6_syn_leaves_as_ipv4_and_its_answer_comes_back_as_ipv6(real_lab: Lab) -> None:
    """h1's SYN to 64:ff9b::198.51.100.20 goes to the CPM, which installs the NAT64 session and
    sends it back: it leaves port 2 as IPv4 from 198.51.100.1:20000 (TTL 63, DF, checksums
    right); the SYN-ACK to that port comes back to h1 as IPv6 from the synthesized address."""
    real_lab.wires[1].send(syn64(40003))

    def is_syn4(frame: Ether) -> bool:
        return bool(frame.haslayer(IP) and frame.haslayer(TCP) and frame[TCP].dport == 80)

    seen = real_lab.wires[2].expect(is_syn4)
    assert (seen[Ether].src, seen[Ether].dst) == (GW_OUT_MAC, OUT1_MAC)
    assert (seen[IP].src, seen[IP].dst, seen[IP].ttl, int(seen[IP].flags)) == (PUBLIC, OUT1, 63, 2)
    assert (seen[TCP].sport, seen[TCP].flags) == (20000, "S")
    copy = Ether(bytes(seen))
    del copy[IP].chksum
    del copy[TCP].chksum
    rebuilt = Ether(bytes(copy))
    assert (rebuilt[IP].chksum, rebuilt[TCP].chksum) == (seen[IP].chksum, seen[TCP].chksum)
    answer = bytes(
        Ether(src=OUT1_MAC, dst=GW_OUT_MAC)
        / IP(src=OUT1, dst=PUBLIC, ttl=64)
        / TCP(sport=80, dport=20000, flags="SA", seq=77, ack=1)
    )
    real_lab.wires[2].send(answer)

    def is_synack6(frame: Ether) -> bool:
        return bool(frame.haslayer(IPv6) and frame.haslayer(TCP) and frame[TCP].dport == 40003)

    back = real_lab.wires[1].expect(is_synack6)
    assert (back[Ether].src, back[Ether].dst) == (GW_IN_MAC, H1_MAC)
    assert (back[IPv6].src, back[IPv6].dst, back[IPv6].hlim) == (OUT1_64, H1_6, 63)
    assert (back[TCP].sport, back[TCP].flags) == (80, "SA")
    copy6 = Ether(bytes(back))
    del copy6[TCP].chksum
    assert Ether(bytes(copy6))[TCP].chksum == back[TCP].chksum
