"""The packet walk on small p4c-compiled programs: parser, tables, actions, externs, replication."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from scapy.compat import raw
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw

from softswitch import hashes
from softswitch.engine import CloneSession, Dataplane, Replica
from softswitch.externs import RED

MakeDp = Callable[..., Dataplane]


def tcp_frame(
    src: str = "10.0.0.1",
    dst: str = "10.0.0.2",
    sport: int = 1234,
    dport: int = 80,
    ttl: int = 64,
    options: bytes = b"",
) -> bytes:
    ip = (
        IP(src=src, dst=dst, ttl=ttl, options=options) if options else IP(src=src, dst=dst, ttl=ttl)
    )
    return raw(
        Ether(dst="00:00:00:00:00:02", src="00:00:00:00:00:01")
        / ip
        / TCP(sport=sport, dport=dport)
        / b"payload"
    )


def add_route(dp: Dataplane, prefix: int, plen: int, port: int, dmac: int = 0x020000000002) -> None:
    t = dp.program.tables["MyIngress.routes"]
    a = t.actions_by_name("MyIngress.set_nexthop")
    assert a is not None
    t.insert(t.new_entry(((prefix, plen),), 0, a, (dmac, port)))


def test_lpm_route_rewrites_mac_decrements_ttl_and_fixes_checksums(make_dataplane: MakeDp) -> None:
    dp = make_dataplane("l3")
    add_route(dp, 0x0A000000, 8, 3)
    [(port, frame)] = dp.process(1, tcp_frame())
    assert port == 3
    pkt = Ether(frame)
    assert pkt.dst == "02:00:00:00:00:02"
    assert pkt[IP].ttl == 63
    expected = Ether(raw(pkt))
    del expected[IP].chksum
    del expected[TCP].chksum
    expected = Ether(raw(expected))
    assert pkt[IP].chksum == expected[IP].chksum
    assert pkt[TCP].chksum == expected[TCP].chksum


def test_longest_prefix_wins(make_dataplane: MakeDp) -> None:
    dp = make_dataplane("l3")
    add_route(dp, 0x0A000000, 8, 3)
    add_route(dp, 0x0A000000, 24, 4)
    add_route(dp, 0x0A000002, 32, 5)
    assert dp.process(1, tcp_frame(dst="10.0.0.2"))[0][0] == 5
    assert dp.process(1, tcp_frame(dst="10.0.0.3"))[0][0] == 4
    assert dp.process(1, tcp_frame(dst="10.1.0.3"))[0][0] == 3
    assert dp.process(1, tcp_frame(dst="11.1.0.3")) == []  # default action: drop


def test_ipv4_options_are_parsed_as_varbit_and_reemitted(make_dataplane: MakeDp) -> None:
    dp = make_dataplane("l3")
    add_route(dp, 0x0A000000, 8, 3)
    frame = tcp_frame(options=b"\x01\x01\x01\x00")  # NOP NOP NOP EOL: ihl 6
    [(_, out)] = dp.process(1, frame)
    pkt = Ether(out)
    assert pkt[IP].ihl == 6 and raw(pkt[IP])[20:24] == b"\x01\x01\x01\x00"
    assert pkt[TCP].dport == 80 and pkt[Raw].load == b"payload"
    fixed = Ether(raw(pkt))
    del fixed[IP].chksum
    assert Ether(raw(fixed))[IP].chksum == pkt[IP].chksum


def test_bad_ipv4_checksum_is_dropped(make_dataplane: MakeDp) -> None:
    dp = make_dataplane("l3")
    add_route(dp, 0x0A000000, 8, 3)
    frame = bytearray(tcp_frame())
    frame[24] ^= 0xFF  # IPv4 checksum
    assert dp.process(1, bytes(frame)) == []


def test_truncated_ipv4_sets_parser_error_and_is_dropped(make_dataplane: MakeDp) -> None:
    dp = make_dataplane("l3")
    add_route(dp, 0x0A000000, 8, 3)
    assert dp.process(1, tcp_frame()[:30]) == []


def test_exact_session_hit_counts_and_runs_register(make_dataplane: MakeDp) -> None:
    dp = make_dataplane("l3")
    t = dp.program.tables["MyIngress.session"]
    a = t.actions_by_name("MyIngress.session_hit")
    assert a is not None
    entry = t.new_entry((0x0A000001, 0x0A000002, 6, 1234, 80), 0, a, (7,))
    t.insert(entry)
    frame = tcp_frame()
    for _ in range(3):
        assert dp.process(1, frame)[0][0] == 7
    assert entry.ctr == [3, 3 * len(frame)]
    assert dp.program.registers["MyIngress.flow_reg"].cells[3] == 3
    assert dp.program.counters["MyIngress.port_counter"].cells[1] == [3, 3 * len(frame)]


def test_ternary_priority_and_range(make_dataplane: MakeDp) -> None:
    dp = make_dataplane("l3")
    add_route(dp, 0x0A000000, 8, 3)
    t = dp.program.tables["MyIngress.acl"]
    to_cpu = t.actions_by_name("MyIngress.to_cpu")
    drop = t.actions_by_name("MyIngress.drop")
    assert to_cpu is not None and drop is not None
    # Both match 10.0.0.1 dport 80; the higher priority (drop) must win.
    t.insert(t.new_entry(((0x0A000001, 0xFFFFFFFF), (6, 0xFF), (0, 1000)), 10, to_cpu, ()))
    t.insert(t.new_entry(((0x0A000000, 0xFF000000), (0, 0), (80, 80)), 20, drop, ()))
    assert dp.process(1, tcp_frame(dport=80)) == []
    out = dp.process(1, tcp_frame(dport=81))
    assert [p for p, _ in out] == [255]  # to CPU, with the packet_in header
    assert out[0][1][:2] == b"\x00\x80"  # ingress_port 1 in 9 bits, then 7 pad bits
    assert dp.process(1, tcp_frame(dport=1001))[0][0] == 3


def test_range_table_elementary_intervals(make_dataplane: MakeDp) -> None:
    dp = make_dataplane("l3")
    t = dp.program.tables["MyIngress.port_class"]
    a = t.actions_by_name("MyIngress.set_class")
    assert a is not None
    t.insert(t.new_entry(((0, 1023),), 1, a, (1,)))
    t.insert(t.new_entry(((80, 90),), 5, a, (2,)))
    t.insert(t.new_entry(((85, 2000),), 3, a, (3,)))
    st = dp.program.tables["MyIngress.steer"]
    prof = st.profile
    assert prof is not None
    fwd = st.actions_by_name("MyIngress.forward")
    assert fwd is not None
    from softswitch.tables import Member

    for cls, port in ((1, 11), (2, 12), (3, 13)):
        prof.add_member(Member(cls, fwd, (port,)))
        st.insert(st.new_entry((cls,), 0, None, (), member=prof.members[cls]))
    got = {d: dp.process(1, tcp_frame(dport=d))[0][0] for d in (10, 80, 86, 95, 1500)}
    assert got == {10: 11, 80: 12, 86: 12, 95: 13, 1500: 13}


def test_action_selector_spreads_flows_by_weight_and_is_stable(make_dataplane: MakeDp) -> None:
    dp = make_dataplane("l3")
    t = dp.program.tables["MyIngress.port_class"]
    a = t.actions_by_name("MyIngress.set_class")
    assert a is not None
    t.insert(t.new_entry(((0, 65535),), 1, a, (1,)))
    st = dp.program.tables["MyIngress.steer"]
    prof = st.profile
    assert prof is not None
    fwd = st.actions_by_name("MyIngress.forward")
    assert fwd is not None
    from softswitch.tables import Group, Member

    prof.add_member(Member(1, fwd, (21,)))
    prof.add_member(Member(2, fwd, (22,)))
    group = Group(1, 16)
    prof.set_group_members(group, {1: 1, 2: 3})
    st.insert(st.new_entry((1,), 0, None, (), group=group))
    rng = random.Random(7)
    flows = [
        (f"10.0.{rng.randrange(256)}.{rng.randrange(256)}", rng.randrange(1024, 65536))
        for _ in range(400)
    ]
    ports = [dp.process(1, tcp_frame(src=src, sport=sport))[0][0] for src, sport in flows]
    assert set(ports) == {21, 22}
    assert 240 < ports.count(22) < 360  # weight 3 of 4
    assert ports == [dp.process(1, tcp_frame(src=src, sport=sport))[0][0] for src, sport in flows]


def test_digest_is_generated_with_learn_list_values(make_dataplane: MakeDp) -> None:
    seen: list[tuple[int, tuple[int, ...]]] = []
    dp = make_dataplane("l3", digest_sink=lambda i, v: seen.append((i, v)))
    add_route(dp, 0x0A000000, 8, 3)
    t = dp.program.tables["MyIngress.acl"]
    learn = t.actions_by_name("MyIngress.learn")
    assert learn is not None
    t.insert(t.new_entry(((0, 0), (0, 0), (0, 65535)), 1, learn, ()))
    dp.process(4, tcp_frame(sport=4321))
    assert seen == [(1, (0x0A000001, 4321, 4))]


def test_vlan_optional_match_and_egress_table(make_dataplane: MakeDp) -> None:
    dp = make_dataplane("l3")
    add_route(dp, 0x0A000000, 8, 3)
    vf = dp.program.tables["MyIngress.vlan_filter"]
    drop = vf.actions_by_name("MyIngress.drop")
    assert drop is not None
    vf.insert(vf.new_entry(((0, 0), 5), 1, drop, ()))  # any VLAN from port 5 (JSON kind: ternary)
    vf.insert(vf.new_entry(((10, 0xFFF), 1), 2, drop, ()))  # VLAN 10 from port 1
    eg = dp.program.tables["MyEgress.egress_smac"]
    smac = eg.actions_by_name("MyEgress.set_smac")
    assert smac is not None
    eg.insert(eg.new_entry((3,), 0, smac, (0x0A0B0C0D0E0F,)))
    ip = IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1, dport=2)
    frame: Callable[[int], bytes] = lambda vid: raw(Ether() / Dot1Q(vlan=vid) / ip)  # noqa: E731
    assert dp.process(5, frame(20)) == []
    assert dp.process(1, frame(10)) == []
    [(port, out)] = dp.process(1, frame(20))
    assert port == 3 and Ether(out).src == "0a:0b:0c:0d:0e:0f"


def test_const_entries_and_packet_meter_to_cpu(make_dataplane: MakeDp) -> None:
    dp = make_dataplane("l3")
    acl = dp.program.tables["MyIngress.acl"]
    to_cpu = acl.actions_by_name("MyIngress.to_cpu")
    assert to_cpu is not None
    acl.insert(acl.new_entry(((0, 0), (0, 0), (0, 65535)), 1, to_cpu, ()))
    assert len(dp.process(1, tcp_frame(dport=7))) == 1
    meter = dp.program.meters["MyIngress.cpu_meter"].meters[0]
    meter.configure(cir=1, cburst=1, pir=1, pburst=2)
    results = [len(dp.process(1, tcp_frame())) for _ in range(5)]
    assert results[:2] == [1, 1] and results[-1] == 0  # peak burst 2, then red
    assert meter.execute(100) == RED


def test_header_stack_extract_push_and_pop(make_dataplane: MakeDp) -> None:
    dp = make_dataplane("parse")
    eth = bytes.fromhex("000000000001000000000002") + b"\x88\x47"

    def label(v: int, bos: int) -> bytes:
        return ((v << 12) | (bos << 8) | 64).to_bytes(4, "big")

    frame = eth + label(100, 0) + label(200, 1) + b"data"
    [(port, out)] = dp.process(1, frame)
    assert port == 2
    assert out[0] == 2  # two labels parsed (depth in the dst MAC)
    assert out[14:22] == label(100, 0) + label(200, 1)
    t = dp.program.tables["MyIngress.mpls_op"]
    push = t.actions_by_name("MyIngress.push_label")
    pop = t.actions_by_name("MyIngress.pop_label")
    assert push is not None and pop is not None
    t.insert(t.new_entry((100,), 0, push, (300,)))
    t.insert(t.new_entry((200,), 0, pop, ()))
    [(_, out)] = dp.process(1, frame)
    assert out[14:26] == label(300, 0) + label(100, 0) + label(200, 1) and out[26:] == b"data"
    [(_, out)] = dp.process(1, eth + label(200, 1) + b"data")
    assert out[14:] == b"data"
    # four labels do not fit a stack of three: StackOutOfBounds, reported as 3 in the src MAC
    [(_, out)] = dp.process(1, eth + label(1, 0) * 3 + label(2, 1))
    assert out[6:12] == (3).to_bytes(6, "big")


def test_union_lookahead_value_set_and_advance(make_dataplane: MakeDp) -> None:
    dp = make_dataplane("parse")
    base = bytes.fromhex("000000000001000000000002")
    [(_, out)] = dp.process(1, base + b"\x88\xb5" + b"\x01\x05rest")
    assert out[:4] == b"\x00\x00\x01\x01" and out[14:16] == b"\x01\x06"
    [(_, out)] = dp.process(1, base + b"\x88\xb5" + b"\x02\x00\x09rest")
    assert out[:4] == b"\x00\x00\x02\x02" and out[14:17] == b"\x02\x00\x0a"
    vset = dp.program.value_sets["MyParser.special_types"]
    assert dp.process(1, base + b"\x12\x34xx")[0][1][1] == 0
    vset.members = [(0x1234, 0xFFFF)]
    assert dp.process(1, base + b"\x12\x34xx")[0][1][1] == 1
    # probe: advance len bytes; kind 0xff fails verify (error BadProbe -> 2)
    [(_, out)] = dp.process(1, base + b"\x90\x01" + b"\x07\x02ABtail")
    assert out[14:] == b"\x07\x02tail"  # advanced-over bytes are not re-emitted (as in BMv2)
    [(_, out)] = dp.process(1, base + b"\x90\x01" + b"\xff\x02ABtail")
    assert out[6:12] == (2).to_bytes(6, "big")
    [(_, out)] = dp.process(1, base + b"\x90\x01" + b"\x07\x09AB")  # advance past the end
    assert out[6:12] == (1).to_bytes(6, "big")


def ops_frame(op: int, a8: int = 0, b8: int = 0, s8: int = 0, t8: int = 0, x16: int = 0) -> bytes:
    eth = bytes.fromhex("0000000000010000000000020888b6"[2:])
    eth = bytes.fromhex("000000000001000000000002") + b"\x88\xb6"
    body = bytes([op, a8, b8, s8 & 0xFF, t8 & 0xFF]) + x16.to_bytes(2, "big") + bytes(4 + 2 + 1 + 2)
    return eth + body


def ops_fields(frame: bytes) -> dict[str, int]:
    b = frame[14:]
    signed: Callable[[int, int], int] = lambda v, w: v - (1 << w) if v >> (w - 1) else v  # noqa: E731
    return {
        "op": b[0],
        "a8": b[1],
        "b8": b[2],
        "s8": signed(b[3], 8),
        "t8": signed(b[4], 8),
        "x16": int.from_bytes(b[5:7], "big"),
        "r32": int.from_bytes(b[7:11], "big"),
        "r16": int.from_bytes(b[11:13], "big"),
        "r8": b[13],
        "rs16": signed(int.from_bytes(b[14:16], "big"), 16),
    }


def run_ops(dp: Dataplane, frame: bytes) -> dict[str, int]:
    [(_, out)] = dp.process(1, frame)
    return ops_fields(out)


def test_unsigned_arithmetic_wraps_around(make_dataplane: MakeDp) -> None:
    dp = make_dataplane("ops")
    r = run_ops(dp, ops_frame(1, a8=200, b8=100))
    assert r["r8"] == (300 & 0xFF) and r["x16"] == 100 and r["r16"] == (20000 & 0xFF)
    r = run_ops(dp, ops_frame(1, a8=5, b8=10))
    assert r["x16"] == (5 - 10) & 0xFF


def test_signed_arithmetic_and_comparison(make_dataplane: MakeDp) -> None:
    dp = make_dataplane("ops")
    r = run_ops(dp, ops_frame(2, s8=-100, t8=-50))
    assert r["rs16"] == 5000 and r["r8"] == 1
    assert r["s8"] == ((-150 + 128) & 0xFF) - 128 and r["t8"] == -25


def test_slices_concatenation_shift_and_saturation(make_dataplane: MakeDp) -> None:
    dp = make_dataplane("ops")
    r = run_ops(dp, ops_frame(3, a8=0xAB, b8=0x0F, x16=0x1234))
    assert r["r16"] == 0xAB0F and r["r8"] == 0x23 and r["x16"] == 0x123F
    assert r["r32"] == (0xAB << 20) and r["b8"] == 0  # b8 overwritten in egress (instance type)
    assert r["a8"] == 255  # 0xab |+| 200 saturates


def test_hash_algorithms_match_reference_implementations(make_dataplane: MakeDp) -> None:
    dp = make_dataplane("ops")
    r = run_ops(dp, ops_frame(4, a8=1, b8=2, x16=0x0304))
    data = bytes([1, 2, 3, 4])
    assert r["r32"] == hashes.crc32(data)
    assert r["r16"] == hashes.crc16(data)
    assert r["x16"] == hashes.csum16(data)
    assert r["rs16"] == 0x0102
    assert r["r8"] == 10 + (0x0102 ^ hashes.csum16(data)) % 100  # x16 was just overwritten
    assert hashes.crc16(b"123456789") == 0xBB3D  # CRC-16/ARC check value
    assert hashes.crc32(b"123456789") == 0xCBF43926


def test_register_read_modify_write(make_dataplane: MakeDp) -> None:
    dp = make_dataplane("ops")
    assert run_ops(dp, ops_frame(5, a8=3, b8=10))["r32"] == 0
    assert run_ops(dp, ops_frame(5, a8=11, b8=5))["r32"] == 10
    assert dp.program.registers["MyIngress.reg"].cells[3] == 15


def test_ingress_clone_goes_to_the_session_port_as_ingress_clone(make_dataplane: MakeDp) -> None:
    dp = make_dataplane("ops")
    dp.pre.clones[5] = CloneSession([Replica(9, 0)])
    out = dp.process(1, ops_frame(6, a8=5))
    assert sorted(p for p, _ in out) == [2, 9]
    by_port = {p: ops_fields(f) for p, f in out}
    assert by_port[2]["b8"] == 0 and by_port[9]["b8"] == 1
    assert by_port[9]["op"] == 6  # the clone is the original packet, re-parsed
    assert [p for p, _ in dp.process(1, ops_frame(6, a8=6))] == [2]  # no such session


def test_resubmit_preserves_the_field_list(make_dataplane: MakeDp) -> None:
    dp = make_dataplane("ops")
    r = run_ops(dp, ops_frame(7))
    assert (r["r8"], r["r16"], r["r32"]) == (1, 1, 6)


def test_multicast_replicates_with_rid(make_dataplane: MakeDp) -> None:
    dp = make_dataplane("ops")
    dp.pre.groups[3] = [Replica(4, 40), Replica(5, 50)]
    out = dp.process(1, ops_frame(8, a8=3))
    assert sorted((p, ops_fields(f)["r16"], ops_fields(f)["b8"]) for p, f in out) == [
        (4, 40, 5),
        (5, 50, 5),
    ]


def test_recirculate_preserves_the_field_list(make_dataplane: MakeDp) -> None:
    dp = make_dataplane("ops")
    r = run_ops(dp, ops_frame(9))
    assert (r["r8"], r["r32"]) == (5, 4)


def test_exit_and_mark_to_drop(make_dataplane: MakeDp) -> None:
    dp = make_dataplane("ops")
    r = run_ops(dp, ops_frame(10))
    assert r["r8"] == 1 and r["op"] == 10  # exit skipped the final assignment
    assert dp.process(1, ops_frame(11)) == []


@pytest.mark.parametrize(
    ("first_a", "chosen"),
    [(2, "second"), (3, "second"), (4, "first"), (255, "first")],
)
def test_a_header_assigned_from_a_conditional_over_headers(
    make_dataplane: MakeDp, first_a: int, chosen: str
) -> None:
    """`hdr.result = (hdr.first.a <= 3) ? hdr.second : hdr.first;` (headermux.p4): BMv2's JSON
    has an assign_header whose source is a `?` expression over two headers."""
    dp = make_dataplane("headermux")
    first, second = bytes([first_a, 0x11]), bytes([7, 0x22])
    [(port, out)] = dp.process(1, first + second + b"\x00\x00")
    assert port == 2
    assert out == first + second + (second if chosen == "second" else first)
