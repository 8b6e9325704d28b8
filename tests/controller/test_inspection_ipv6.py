"""IPv6 flows inspected as IPv4's: the class the CPM gives an IPv6 flow at set-up (first match
over the IDS rules' IPv6 headers, held to the SPM's own matcher by a property), the SPM it pins
both directions to (the pool's weights, the same member both ways, only members that are up, the
chain's on_failure when none is), re-steering when that SPM goes down, and the SPMs' verdicts on
IPv6 flows (alerts stored with IPv6 addresses, a drop verdict blocks both session_v6 entries, a
bypass takes their SPM away and keeps their class), on the switch double (the built-in switch's
P4Runtime server)."""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import TCP, UDP
from scapy.layers.inet6 import ICMPv6EchoRequest, IPv6
from scapy.layers.l2 import Ether

from controller import events as ev
from controller import ids6
from controller.api import ApiServer
from controller.hsm.snort_header import ClassMap
from controller.policy import load_policy
from controller.runtime import Controller
from controller.session_encoding import FlowKey
from controller.spm_pool import SpmPool
from opengate import p4constants as pc
from opengate.snort.header import SERVICE_TRANSPORTS, SnortVariables
from opengate.snort.rules import parse_rules_text
from spm.ips.header import compile_header
from tests.controller.conftest import DATA, ControllerFactory, wait_until
from tests.controller.flows import GW_IN_MAC, packet_in_meta
from tests.controller.test_runtime import apply
from tests.controller.test_sessions import db_sessions
from tests.switch_double import SwitchDouble

H1_6, H2_6, OUT1_6 = "2001:db8:1::10", "2001:db8:1::11", "2001:db8:2::20"
H1_MAC = "00:00:00:00:01:10"
SPM1 = (3, 0x000000000333)
SPM2 = (4, 0x000000000444)
TOKEN = "t0ken-for-the-tests"


def ip6(text: str) -> int:
    return int(ipaddress.IPv6Address(text))


def key6(src: str, dst: str, proto: int, sport: int, dport: int) -> FlowKey:
    return (ip6(src), ip6(dst), proto, sport, dport)


def reverse(flow: FlowKey) -> FlowKey:
    src, dst, proto, sport, dport = flow
    return (dst, src, proto, dport, sport)


# -- the class: first match over the IDS rules' IPv6 headers -----------------------------------

ADDRESS_ITEMS = (
    "any",
    "$HOME_NET",
    "!$HOME_NET",
    "$EXTERNAL_NET",
    "2001:db8:1::/64",
    "2001:db8::/32",
    "2001:db8:2::20",
    "[2001:db8:1::/64,10.0.0.0/8]",
    "[!2001:db8:1::/64]",
    "!2001:db8:2::/64",
    "10.0.1.0/24",
    "[10.0.0.0/8,2001:db8:3::/48]",
    "[2001:db8::/32,!2001:db8:1::10]",
)
PORT_ITEMS = ("any", "80", "22", "1:1024", "[80,443]", "!80", "$HTTP_PORTS", "5000:")
PROTOS = ("tcp", "udp", "icmp", "ip", "http", "dns")
ADDRESSES = (
    "2001:db8:1::10",
    "2001:db8:1::11",
    "2001:db8:2::20",
    "2001:db8:3::1",
    "2001:db8:ff::1",
    "2a00::1",
    "fd00::5",
)
VARIABLES = {"HOME_NET": "[10.0.1.0/24,2001:db8:1::/64]", "EXTERNAL_NET": "!$HOME_NET"}


@st.composite
def rule_texts(draw: st.DrawFn) -> str:
    lines = []
    for sid in range(1, draw(st.integers(1, 12)) + 1):
        proto = draw(st.sampled_from(PROTOS))
        src, dst = draw(st.sampled_from(ADDRESS_ITEMS)), draw(st.sampled_from(ADDRESS_ITEMS))
        sport, dport = draw(st.sampled_from(PORT_ITEMS)), draw(st.sampled_from(PORT_ITEMS))
        arrow = draw(st.sampled_from(("->", "<>")))
        classtype = draw(st.sampled_from(("a", "b", "c", "unmapped")))
        header = f"{proto} {src} {sport} {arrow} {dst} {dport}"
        if draw(st.booleans()) and proto in ("http", "dns"):
            header = proto  # a service rule: no header
        lines.append(f'alert {header} (msg:"r{sid}"; classtype:{classtype}; sid:{sid};)')
    return "\n".join(lines) + "\n"


flows6 = st.tuples(
    st.sampled_from(ADDRESSES).map(ip6),
    st.sampled_from(ADDRESSES).map(ip6),
    st.sampled_from((pc.IP_PROTO_TCP, pc.IP_PROTO_UDP, pc.IP_PROTO_ICMPV6, 47)),
    st.sampled_from((0, 22, 80, 443, 1024, 5000, 40000)),
    st.sampled_from((0, 22, 80, 443, 1024, 5000, 40000)),
)

ENGINE_PROTOS = {"tcp": (6,), "udp": (17,), "icmp": (1, 58)}  # spm/ips/engine.py's


def spm_first_match(text: str, classes: ClassMap, flow: FlowKey) -> int:
    """The class of the first rule (of a class) that the SPM's own header matcher
    (spm.ips.header) says matches the flow's opening packet: the brute-force reference."""
    values = SnortVariables().with_values(VARIABLES).values
    src, dst, proto, sport, dport = flow
    for raw in parse_rules_text(text).rules:
        class_id = classes.class_of(raw)
        if class_id == 0:
            continue
        if raw.proto in ENGINE_PROTOS:
            protos: tuple[int, ...] | None = ENGINE_PROTOS[raw.proto]
        elif raw.proto is not None and raw.proto in SERVICE_TRANSPORTS:
            protos = tuple(m.value for m in SERVICE_TRANSPORTS[raw.proto])
        else:
            protos = None
        if protos is not None and proto not in protos:
            continue
        header = compile_header(
            raw.proto, raw.src, raw.src_ports, raw.direction, raw.dst, raw.dst_ports, values
        )
        ports_too = raw.proto not in ("ip", "icmp")
        a, b = src.to_bytes(16, "big"), dst.to_bytes(16, "big")
        if header.matches(a, sport, b, dport, ports_too) or (
            header.bidirectional and header.matches(b, dport, a, sport, ports_too)
        ):
            return class_id
    return 0


@settings(max_examples=300, deadline=None)
@given(rule_texts(), st.lists(flows6, min_size=1, max_size=20))
def test_the_class_is_the_first_match_the_spm_would_find(text: str, flows: list[FlowKey]) -> None:
    classes = ClassMap(default=0, by_classtype={"a": 1, "b": 2, "c": 3})
    values = SnortVariables().with_values(VARIABLES).values
    rules = ids6.rules_from_raw(parse_rules_text(text).rules, values, classes)
    classifier = ids6.Ids6Classifier(rules)
    for flow in flows:
        wanted = spm_first_match(text, classes, flow)
        found = classifier.classify(flow)
        assert (found.class_id if found else 0) == wanted
        plain = ids6.first_match(rules, flow)
        assert (plain.class_id if plain else 0) == wanted


def test_the_lab_policy_classifies_ipv6_flows_as_its_rules_say() -> None:
    """HOME_NET is `inside`, of both families: outbound web is class 1 (web), and so is inbound
    web to port 80 (rule 2), iperf3 class 2 (bulk), DNS class 3 (dns); ssh, a ping, and web
    between two outside hosts match no rule."""
    policy = load_policy(DATA / "lab.yaml")
    classify = ids6.Ids6Classifier(policy.ids6_rules).classify

    def class_of(flow: FlowKey) -> int:
        rule = classify(flow)
        return rule.class_id if rule is not None else 0

    assert class_of(key6(H1_6, OUT1_6, 6, 40000, 80)) == 1
    assert class_of(key6(H1_6, OUT1_6, 6, 40000, 5201)) == 2
    assert class_of(key6(H1_6, OUT1_6, 17, 5353, 53)) == 3
    assert class_of(key6(H1_6, OUT1_6, 6, 40000, 22)) == 0
    assert class_of(key6(H1_6, OUT1_6, 58, 7, 0)) == 0
    assert class_of(key6(OUT1_6, H1_6, 6, 40000, 80)) == 1
    assert class_of(key6(OUT1_6, "2001:db8:3::1", 6, 40000, 80)) == 0


# -- the SPM: the pool's weights, both directions alike, members that are up ------------------


def test_the_member_is_the_same_both_ways_follows_weights_and_avoids_a_down_one(
    lab: Path,
) -> None:
    lab.write_text(
        lab.read_text().replace(
            '{name: spm2, port: 4, mac: "00:00:00:00:04:44", weight: 8}',
            '{name: spm2, port: 4, mac: "00:00:00:00:04:44", weight: 2}',
        )
    )
    policy = load_policy(lab)
    pool = SpmPool(policy, time.monotonic())
    counts = {"spm1": 0, "spm2": 0}
    flows = [key6(H1_6, OUT1_6, 6, 10000 + i, 80) for i in range(4000)]
    flows += [(ip6(H1_6) + i, ip6(OUT1_6), 17, 5353, 53) for i in range(1000)]
    for flow in flows:
        chosen = pool.choose("main", flow)
        assert chosen is not None
        assert pool.choose("main", reverse(flow)) == chosen, "the same member both ways"
        counts[chosen.name] += 1
    share = counts["spm1"] / len(flows)
    assert abs(share - 0.8) < 0.03, counts  # weights 8 : 2
    pool.mark_down("spm1")
    assert {pool.choose("main", flow).name for flow in flows[:200]} == {"spm2"}  # type: ignore[union-attr]
    assert pool.choose("strict", flows[0]) is None


# -- set-up on the switch ----------------------------------------------------------------------


def syn6(src: str, dst: str, sport: int, dport: int) -> bytes:
    return bytes(
        Ether(src=H1_MAC, dst=GW_IN_MAC) / IPv6(src=src, dst=dst) / TCP(sport=sport, dport=dport)
    )


def udp6(src: str, dst: str, sport: int, dport: int) -> bytes:
    return bytes(
        Ether(src=H1_MAC, dst=GW_IN_MAC) / IPv6(src=src, dst=dst) / UDP(sport=sport, dport=dport)
    )


def entries6(controller: Controller, switch: SwitchDouble) -> dict[FlowKey, tuple[int, ...] | None]:
    """session_v6 on the switch: key -> (class, SPM port, SPM MAC), None for a block."""
    assert controller.sessions is not None
    encoder = controller.sessions.encoder("npm1")
    out: dict[FlowKey, tuple[int, ...] | None] = {}
    for entry in switch.table_entries(pc.T_SESSION_V6):
        params = encoder.decode_params(entry)
        out[encoder.decode_key(entry)] = (
            None if params is None else (params["class_id"], params["spm_port"], params["spm_mac"])
        )
    return out


def open6(switch: SwitchDouble, frame: bytes, packet_out: bool = True) -> None:
    before = len(switch.table_entries(pc.T_SESSION_V6))
    switch.inject_packet_in(frame, packet_in_meta(pc.CPU_REASON_SESSION_V6, acl_rule=1))
    wait_until("two entries", lambda: len(switch.table_entries(pc.T_SESSION_V6)) == before + 2)
    sent = switch.packet_out(0.2 if not packet_out else 5)
    assert (sent is not None) == packet_out
    if sent is not None:
        assert sent[0] == frame


def spm_down(controller: Controller, name: str) -> Any:
    return controller.bus.publish(ev.SpmDown(name, "test")).result(timeout=10)


def test_a_classified_flow_is_pinned_to_an_spm_both_ways_and_shown(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    controller = make_controller(switch)
    web = key6(H1_6, OUT1_6, pc.IP_PROTO_TCP, 40000, 80)
    dns = key6(H2_6, OUT1_6, pc.IP_PROTO_UDP, 5353, 53)
    ssh = key6(H1_6, OUT1_6, pc.IP_PROTO_TCP, 40001, 22)
    open6(switch, syn6(H1_6, OUT1_6, 40000, 80))
    open6(switch, udp6(H2_6, OUT1_6, 5353, 53))
    open6(switch, syn6(H1_6, OUT1_6, 40001, 22))
    entries = entries6(controller, switch)
    assert entries[web] == entries[reverse(web)]
    assert entries[web] in {(1, *SPM1), (1, *SPM2)}, "class web, a member of pool main"
    assert entries[dns] == entries[reverse(dns)] == (3, *SPM1), "class dns, pool strict"
    assert entries[ssh] == entries[reverse(ssh)] == (0, 0, 0), "no rule: not inspected"
    rows = {row["dport"]: row for row in db_sessions(controller)}
    web_spm = entries[web]
    assert web_spm is not None
    assert (rows[80]["class_id"], rows[80]["spm_port"], rows[80]["spm_mac"]) == web_spm
    assert (rows[53]["class_id"], rows[53]["spm_port"]) == (3, 3)
    api = ApiServer(controller, "127.0.0.1", 0, TOKEN)
    api.start()
    try:
        with httpx.Client(
            base_url=f"http://127.0.0.1:{api.port}",
            headers={"Authorization": f"Bearer {TOKEN}"},
        ) as client:
            shown = {s["dport"]: s for s in client.get("/api/v1/sessions").json()["sessions"]}
    finally:
        api.stop()
    assert (shown[53]["class_id"], shown[53]["spm_port"], shown[53]["spm_mac"]) == (
        3,
        3,
        "00:00:00:00:03:33",
    )
    assert (shown[22]["class_id"], shown[22]["spm_mac"]) == (0, None)


def test_with_no_member_up_the_chain_fails_open_or_closed(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    """spm1 down: web flows go to spm2; DNS (strict pool: spm1 alone, its chain fails closed)
    is blocked, both entries session_v6_block and the packet not sent on; spm2 down too: web
    (chain ips-av fails open) is routed uninspected, class kept."""
    controller = make_controller(switch)
    spm_down(controller, "spm1")
    for port in range(40000, 40020):
        open6(switch, syn6(H1_6, OUT1_6, port, 80))
    entries = entries6(controller, switch)
    assert set(entries.values()) == {(1, *SPM2)}
    dns = key6(H2_6, OUT1_6, pc.IP_PROTO_UDP, 5353, 53)
    open6(switch, udp6(H2_6, OUT1_6, 5353, 53), packet_out=False)
    entries = entries6(controller, switch)
    assert entries[dns] is None and entries[reverse(dns)] is None
    rows = {row["dport"]: row for row in db_sessions(controller)}
    assert (rows[53]["state"], rows[53]["class_id"]) == ("blocked", 3)
    spm_down(controller, "spm2")
    late = key6(H2_6, OUT1_6, pc.IP_PROTO_TCP, 41000, 80)
    open6(switch, syn6(H2_6, OUT1_6, 41000, 80))
    entries = entries6(controller, switch)
    assert entries[late] == entries[reverse(late)] == (1, 0, 0)


def test_flows_of_an_spm_that_goes_down_follow_the_pool_fail_policy(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    """On spm1: a DNS flow (pool strict, fail_closed) and the web flows that went to spm1
    (pool main, resteer). spm1 goes down: the web flows move to spm2 in both entries, the DNS
    flow is blocked in both."""
    controller = make_controller(switch)
    for port in range(40000, 40016):
        open6(switch, syn6(H1_6, OUT1_6, port, 80))
    open6(switch, udp6(H2_6, OUT1_6, 5353, 53))
    before = entries6(controller, switch)
    on_spm1 = [k for k, v in before.items() if v == (1, *SPM1) and k[0] == ip6(H1_6)]
    assert on_spm1, "some web flow went to spm1 (16 flows, equal weights)"
    outcome = spm_down(controller, "spm1")
    assert {"resteered": len(on_spm1), "blocked": 1, "uninspected": 0} in outcome
    after = entries6(controller, switch)
    for flow in on_spm1:
        assert after[flow] == after[reverse(flow)] == (1, *SPM2)
    dns = key6(H2_6, OUT1_6, pc.IP_PROTO_UDP, 5353, 53)
    assert after[dns] is None and after[reverse(dns)] is None
    untouched = {k: v for k, v in before.items() if v == (1, *SPM2)}
    assert all(after[k] == v for k, v in untouched.items())


def test_a_policy_that_changes_the_class_resteers_ipv6_sessions(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    """ssh becomes inspected (class dns, spm1's strict pool) by a rule added to the rules file:
    the open ssh session's entries take the class and the SPM at the apply."""
    controller = make_controller(switch)
    open6(switch, syn6(H1_6, OUT1_6, 40001, 22))
    rules = lab.parent / "lab.rules"
    rules.write_text(
        rules.read_text()
        + 'alert tcp $HOME_NET any -> any 22 (msg:"ssh"; classtype:misc-activity; sid:1000005;)\n'
    )
    lab.write_text(lab.read_text().replace("sids: [1000004]", "sids: [1000004, 1000005]"))
    rematched = apply(controller, lab)["rematched"]
    assert isinstance(rematched, dict) and rematched["inspected"] == 1
    ssh = key6(H1_6, OUT1_6, pc.IP_PROTO_TCP, 40001, 22)
    entries = entries6(controller, switch)
    assert entries[ssh] == entries[reverse(ssh)] == (3, *SPM1)


# -- verdicts ----------------------------------------------------------------------------------


@pytest.fixture
def served(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> Iterator[tuple[Controller, httpx.Client]]:
    controller = make_controller(switch)
    api = ApiServer(controller, "127.0.0.1", 0, TOKEN)
    api.start()
    try:
        with httpx.Client(
            base_url=f"http://127.0.0.1:{api.port}",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=30,
        ) as client:
            yield controller, client
    finally:
        api.stop()


def test_an_ipv6_drop_alert_is_stored_and_blocks_both_entries(
    served: tuple[Controller, httpx.Client], switch: SwitchDouble
) -> None:
    controller, client = served
    flow = key6(H1_6, OUT1_6, pc.IP_PROTO_TCP, 40000, 80)
    open6(switch, syn6(H1_6, OUT1_6, 40000, 80))
    alert = {
        "sid": 1000001,
        "gid": 1,
        "rev": 1,
        "msg": "OPENGATE example outbound web",
        "classtype": "policy-violation",
        "action": "drop",
        # the reply direction, as an SPM may name it
        "flow": {"proto": "tcp", "src": OUT1_6, "dst": H1_6, "sport": 80, "dport": 40000},
    }
    result = client.post("/api/v1/spm/spm1/alerts", json=alert)
    assert result.status_code == 200, result.text
    assert result.json()["blocked"] is True
    entries = entries6(controller, switch)
    assert entries == {flow: None, reverse(flow): None}
    (stored,) = client.get("/api/v1/alerts").json()["alerts"]
    assert (stored["src"], stored["dst"], stored["proto"], stored["session_id"]) == (
        OUT1_6,
        H1_6,
        "tcp",
        result.json()["session"],
    )
    (session,) = client.get("/api/v1/sessions").json()["sessions"]
    assert (session["state"], session["src"]) == ("blocked", H1_6)


def test_an_icmpv6_alert_finds_its_echo_session_by_addresses(
    served: tuple[Controller, httpx.Client], switch: SwitchDouble
) -> None:
    """An SPM names an ICMPv6 flow `ipv6-icmp` with its type and code; the session is keyed by
    the echo identifier: found by its addresses. An alert that only alerts blocks nothing."""
    controller, client = served
    ping = bytes(
        Ether(src=H1_MAC, dst=GW_IN_MAC)
        / IPv6(src=H1_6, dst=OUT1_6)
        / ICMPv6EchoRequest(id=0x4242, seq=1)
    )
    open6(switch, ping)
    named = {"proto": "ipv6-icmp", "src": H1_6, "dst": OUT1_6, "sport": 128, "dport": 0}
    alert = {"sid": 7, "gid": 1, "rev": 1, "msg": "ping", "action": "alert", "flow": named}
    result = client.post("/api/v1/spm/spm1/alerts", json=alert).json()
    assert result["session"] is not None and result["blocked"] is False
    echo = key6(H1_6, OUT1_6, pc.IP_PROTO_ICMPV6, 0x4242, 0)
    assert entries6(controller, switch)[echo] == (0, 0, 0)
    alert["action"] = "drop"
    assert client.post("/api/v1/spm/spm1/alerts", json=alert).json()["blocked"] is True
    assert entries6(controller, switch) == {echo: None, reverse(echo): None}


def test_an_ipv6_bypass_takes_the_spm_away_and_keeps_the_class(
    served: tuple[Controller, httpx.Client], switch: SwitchDouble
) -> None:
    """iperf3 (class bulk, bypass allowed): both entries keep class 2 and lose their SPM; web
    (class web) may not be bypassed (409)."""
    controller, client = served
    bulk = key6(H1_6, OUT1_6, pc.IP_PROTO_TCP, 40000, 5201)
    open6(switch, syn6(H1_6, OUT1_6, 40000, 5201))
    open6(switch, syn6(H2_6, OUT1_6, 40001, 80))
    assert entries6(controller, switch)[bulk] in {(2, *SPM1), (2, *SPM2)}
    named = {"proto": "tcp", "src": H1_6, "dst": OUT1_6, "sport": 40000, "dport": 5201}
    answer = client.post("/api/v1/spm/spm1/bypass", json={"flow": named, "clean_bytes": 10**6})
    assert answer.json()["bypassed"] is True
    entries = entries6(controller, switch)
    assert entries[bulk] == entries[reverse(bulk)] == (2, 0, 0)
    web = {"proto": "tcp", "src": H2_6, "dst": OUT1_6, "sport": 40001, "dport": 80}
    refused = client.post("/api/v1/spm/spm1/bypass", json={"flow": web, "clean_bytes": 10})
    assert refused.status_code == 409
    state = {s["dport"]: s["state"] for s in client.get("/api/v1/sessions").json()["sessions"]}
    assert state == {5201: "bypassed", 80: "active"}


def test_an_early_ipv6_drop_alert_blocks_the_session_when_it_is_set_up(
    served: tuple[Controller, httpx.Client], switch: SwitchDouble
) -> None:
    controller, client = served
    named = {"proto": "tcp", "src": H1_6, "dst": OUT1_6, "sport": 40030, "dport": 80}
    alert = {"sid": 1, "gid": 1, "rev": 1, "msg": "early", "action": "drop", "flow": named}
    result = client.post("/api/v1/spm/spm1/alerts", json=alert).json()
    assert (result["session"], result["blocked"]) == (None, False)
    open6(switch, syn6(H1_6, OUT1_6, 40030, 80))
    flow = key6(H1_6, OUT1_6, pc.IP_PROTO_TCP, 40030, 80)
    wait_until(
        "both entries blocking",
        lambda: entries6(controller, switch) == {flow: None, reverse(flow): None},
    )


@pytest.mark.parametrize(
    ("flow", "why"),
    [
        ({"proto": "tcp", "src": H1_6, "dst": "198.51.100.20"}, "different address families"),
        ({"proto": "tcp", "src": "::10.0.1.10", "dst": "::1.2.3.4"}, "::/96"),
        ({"proto": "ipv6-icmpx", "src": H1_6, "dst": OUT1_6}, "ipv6-icmpx"),
    ],
)
def test_a_flow_that_names_no_session_of_either_family_is_refused(
    served: tuple[Controller, httpx.Client], flow: dict[str, Any], why: str
) -> None:
    _, client = served
    alert = {"sid": 1, "gid": 1, "rev": 1, "msg": "x", "action": "alert", "flow": flow}
    answer = client.post("/api/v1/spm/spm1/alerts", json=alert)
    assert answer.status_code == 422 and why in answer.text, answer.text
