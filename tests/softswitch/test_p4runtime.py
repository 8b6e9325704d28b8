"""The P4Runtime service, in process, through a real gRPC channel."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import grpc
import pytest
from finsy.proto import p4i, p4r, p4r_grpc, rpc_code, rpc_status
from google.protobuf import text_format
from scapy.compat import raw
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from opengate.p4rt import P4RuntimeClient
from softswitch import p4rt_common, p4runtime_server
from softswitch.p4runtime_server import P4RuntimeServer
from softswitch.switch import Switch
from tests.softswitch.conftest import FIXTURES
from tests.softswitch.p4runtime_target import ids

DEVICE = 1
CPU = 255


def load_p4info(name: str) -> Any:
    info = p4i.P4Info()
    text_format.Parse((FIXTURES / f"{name}.p4info.txtpb").read_text(), info)
    return info


@dataclass
class Client:
    stub: Any
    election: int
    responses: queue.Queue[Any] = field(default_factory=queue.Queue)
    requests: queue.Queue[Any] = field(default_factory=queue.Queue)
    call: Any = None

    def open(self) -> Any:
        def gen() -> Iterator[Any]:
            while True:
                item = self.requests.get()
                if item is None:
                    return
                yield item

        self.call = self.stub.StreamChannel(gen())

        def pump() -> None:
            try:
                for r in self.call:
                    self.responses.put(r)
            except grpc.RpcError as exc:
                self.responses.put(exc)

        threading.Thread(target=pump, daemon=True).start()
        self.arbitrate(self.election)
        return self.next("arbitration")

    def arbitrate(self, election: int) -> None:
        msg = p4r.StreamMessageRequest()
        msg.arbitration.device_id = DEVICE
        msg.arbitration.election_id.low = election
        self.election = election
        self.requests.put(msg)

    def next(self, kind: str, timeout: float = 5.0) -> Any:
        while True:
            r = self.responses.get(timeout=timeout)
            if isinstance(r, Exception):
                raise r
            if r.WhichOneof("update") == kind:
                return getattr(r, kind)

    def close(self) -> None:
        self.requests.put(None)

    def write(self, *updates: Any) -> None:
        req = p4r.WriteRequest(device_id=DEVICE, updates=list(updates))
        req.election_id.low = self.election
        self.stub.Write(req)

    def read(self, *entities: Any) -> list[Any]:
        out: list[Any] = []
        for resp in self.stub.Read(p4r.ReadRequest(device_id=DEVICE, entities=list(entities))):
            out.extend(resp.entities)
        return out


@pytest.fixture
def switch_server() -> Iterator[tuple[Switch, P4RuntimeServer, list[tuple[int, bytes]]]]:
    sw = Switch(device_id=DEVICE, cpu_port=CPU)
    sent: list[tuple[int, bytes]] = []
    sw.transmit = lambda port, frame: sent.append((port, frame))
    server = P4RuntimeServer(sw, "127.0.0.1:0")
    server.start()
    try:
        yield sw, server, sent
    finally:
        server.stop()


@pytest.fixture
def client(switch_server: tuple[Switch, P4RuntimeServer, Any]) -> Iterator[Client]:
    _, server, _ = switch_server
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    c = Client(p4r_grpc.P4RuntimeStub(channel), election=10)
    arb = c.open()
    assert arb.status.code == rpc_code.OK
    try:
        yield c
    finally:
        c.close()
        channel.close()


def set_pipeline(c: Client, name: str = "l3") -> Any:
    info = load_p4info(name)
    req = p4r.SetForwardingPipelineConfigRequest(
        device_id=DEVICE, action=p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
    )
    req.election_id.low = c.election
    req.config.p4info.CopyFrom(info)
    req.config.p4_device_config = (FIXTURES / f"{name}.json").read_bytes()
    req.config.cookie.cookie = 42
    c.stub.SetForwardingPipelineConfig(req)
    return info


def route_entry(i: dict[str, int], prefix: bytes, plen: int, port: int) -> Any:
    te = p4r.TableEntry(table_id=i["MyIngress.routes"])
    fm = te.match.add(field_id=1)
    fm.lpm.value = prefix
    fm.lpm.prefix_len = plen
    te.action.action.action_id = i["MyIngress.set_nexthop"]
    te.action.action.params.add(param_id=1, value=b"\x02\x00\x00\x00\x00\x02")
    te.action.action.params.add(param_id=2, value=port.to_bytes(2, "big"))
    return te


def insert(entity: Any) -> Any:
    return p4r.Update(type=p4r.Update.INSERT, entity=entity)


def frame(dport: int = 80, sport: int = 1234) -> bytes:
    return raw(Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=sport, dport=dport) / b"x")


def write_errors(exc: grpc.RpcError) -> list[Any]:
    # the stubs type RpcError's metadata as objects; the raised error is also a grpc.Call
    for key, value in cast(grpc.Call, exc).trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            assert isinstance(value, bytes)  # a -bin key's value
            status = rpc_status.Status()
            status.ParseFromString(value)
            out = []
            for d in status.details:
                err = p4r.Error()
                d.Unpack(err)
                out.append(err)
            return out
    return []


def test_pipeline_config_round_trips_with_cookie(client: Client) -> None:
    info = set_pipeline(client)
    resp = client.stub.GetForwardingPipelineConfig(
        p4r.GetForwardingPipelineConfigRequest(device_id=DEVICE)
    )
    assert resp.config.cookie.cookie == 42
    assert resp.config.p4info == info
    assert resp.config.p4_device_config == (FIXTURES / "l3.json").read_bytes()


def test_unsupported_json_is_refused_naming_the_construct(client: Client) -> None:
    req = p4r.SetForwardingPipelineConfigRequest(
        device_id=DEVICE, action=p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
    )
    req.election_id.low = client.election
    req.config.p4info.CopyFrom(load_p4info("l3"))
    req.config.p4_device_config = (
        (FIXTURES / "l3.json").read_bytes().replace(b'"op" : "mark_to_drop"', b'"op" : "teleport"')
    )
    with pytest.raises(grpc.RpcError) as err:
        client.stub.SetForwardingPipelineConfig(req)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = err.value.details()
    assert details is not None and "teleport" in details


def test_table_write_read_and_forwarding(client: Client, switch_server: Any) -> None:
    sw, _, sent = switch_server
    i = ids(set_pipeline(client))
    client.write(insert(p4r.Entity(table_entry=route_entry(i, b"\x0a\x00\x00\x00", 8, 3))))
    sw.receive(1, frame())
    assert [p for p, _ in sent] == [3]
    entities = client.read(p4r.Entity(table_entry=p4r.TableEntry(table_id=i["MyIngress.routes"])))
    assert len(entities) == 1
    got = entities[0].table_entry
    assert got.match[0].lpm.value == b"\x0a\x00\x00\x00" and got.match[0].lpm.prefix_len == 8
    assert got.action.action.params[1].value == b"\x03"  # canonical bytestring
    everything = client.read(p4r.Entity(table_entry=p4r.TableEntry()))
    assert sorted(e.table_entry.table_id for e in everything) == sorted(
        [i["MyIngress.routes"]] + [i["MyIngress.const_ports"]] * 2  # const entries are read too
    )


def test_write_errors_name_the_field_and_keep_going(client: Client) -> None:
    i = ids(set_pipeline(client))
    good = route_entry(i, b"\x0a\x00\x00\x00", 8, 3)
    too_wide = route_entry(i, b"\x0b\x00\x00\x00", 8, 3)
    too_wide.action.action.params[1].value = b"\x04\x00"  # 1024 does not fit bit<9>
    wrong_kind = route_entry(i, b"\x0c\x00\x00\x00", 8, 3)
    wrong_kind.match[0].ClearField("lpm")
    wrong_kind.match[0].exact.value = b"\x0c\x00\x00\x00"
    bad_table = p4r.TableEntry(table_id=12345)
    with pytest.raises(grpc.RpcError) as err:
        client.write(
            *(
                insert(p4r.Entity(table_entry=e))
                for e in (good, too_wide, wrong_kind, bad_table, good)
            )
        )
    errors = write_errors(err.value)
    codes = [e.canonical_code for e in errors]
    assert codes == [
        rpc_code.OK,
        rpc_code.INVALID_ARGUMENT,
        rpc_code.INVALID_ARGUMENT,
        rpc_code.NOT_FOUND,
        rpc_code.ALREADY_EXISTS,
    ]
    assert "port" in errors[1].message and "9 bits" in errors[1].message
    assert "dst" in errors[2].message and "lpm" in errors[2].message


def test_ternary_entries_need_a_priority_and_default_can_be_modified(
    client: Client, switch_server: Any
) -> None:
    sw, _, sent = switch_server
    i = ids(set_pipeline(client))
    te = p4r.TableEntry(table_id=i["MyIngress.acl"])
    fm = te.match.add(field_id=1)
    fm.ternary.value = b"\x0a\x00\x00\x01"
    fm.ternary.mask = b"\xff\xff\xff\xff"
    te.action.action.action_id = i["MyIngress.to_cpu"]
    with pytest.raises(grpc.RpcError) as err:
        client.write(insert(p4r.Entity(table_entry=te)))
    assert "priority" in write_errors(err.value)[0].message
    default = p4r.TableEntry(table_id=i["MyIngress.routes"], is_default_action=True)
    default.action.action.action_id = i["MyIngress.set_nexthop"]
    default.action.action.params.add(param_id=1, value=b"\x01")
    default.action.action.params.add(param_id=2, value=b"\x06")
    client.write(p4r.Update(type=p4r.Update.MODIFY, entity=p4r.Entity(table_entry=default)))
    sw.receive(1, frame())
    assert [p for p, _ in sent] == [6]
    [read] = client.read(
        p4r.Entity(
            table_entry=p4r.TableEntry(table_id=i["MyIngress.routes"], is_default_action=True)
        )
    )
    assert (
        read.table_entry.is_default_action
        and read.table_entry.action.action.params[1].value == b"\x06"
    )


def test_packet_out_and_packet_in_use_controller_headers(
    client: Client, switch_server: Any
) -> None:
    sw, _, sent = switch_server
    set_pipeline(client)
    out = p4r.StreamMessageRequest()
    out.packet.payload = frame()
    out.packet.metadata.add(metadata_id=1, value=b"\x05")
    client.requests.put(out)
    # no IPv4 route needed: the packet_out path sets egress_spec and exits
    deadline = threading.Event()
    for _ in range(100):
        if sent:
            break
        deadline.wait(0.02)
    assert sent == [(5, frame())]
    sw.receive(7, raw(Ether(type=0x88CC) / b"lldp"))  # not IPv4: to the CPU
    pin = client.next("packet")
    assert pin.payload == raw(Ether(type=0x88CC) / b"lldp")
    assert [(m.metadata_id, m.value) for m in pin.metadata] == [(1, b"\x07"), (2, b"\x00")]


def test_backup_controller_cannot_write_and_primary_moves(
    switch_server: Any, client: Client
) -> None:
    """A backup cannot write; a higher election id takes the primary role; when that primary
    goes, nobody is primary (P4Runtime: the others are told NOT_FOUND with the highest
    election id seen) until a controller arbitrates with at least that id."""
    _, server, _ = switch_server
    set_pipeline(client)
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    backup = Client(p4r_grpc.P4RuntimeStub(channel), election=5)
    arb = backup.open()
    assert arb.status.code == rpc_code.ALREADY_EXISTS and arb.election_id.low == 10
    with pytest.raises(grpc.RpcError) as err:
        backup.write()
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    backup.arbitrate(20)
    assert backup.next("arbitration").status.code == rpc_code.OK
    assert client.next("arbitration").status.code == rpc_code.ALREADY_EXISTS
    backup.close()
    arb = client.next("arbitration")
    assert arb.status.code == rpc_code.NOT_FOUND and arb.election_id.low == 20
    client.arbitrate(21)
    assert client.next("arbitration").status.code == rpc_code.OK
    channel.close()


def learning_pipeline(
    client: Client,
    ack_timeout_ns: int = 10_000_000_000,
    max_list_size: int = 1,
    max_timeout_ns: int = 0,
) -> dict[str, int]:
    """The l3 program, every packet learnt (acl -> learn), digest lists of `max_list_size`
    samples (sent when full or `max_timeout_ns` after the first) whose suppression lasts
    `ack_timeout_ns` unless acked; its ids."""
    i = ids(set_pipeline(client))
    de = p4r.DigestEntry(digest_id=i["learn_t"])
    de.config.max_list_size = max_list_size
    de.config.max_timeout_ns = max_timeout_ns
    de.config.ack_timeout_ns = ack_timeout_ns
    client.write(insert(p4r.Entity(digest_entry=de)))
    te = p4r.TableEntry(table_id=i["MyIngress.acl"], priority=1)
    te.action.action.action_id = i["MyIngress.learn"]
    client.write(insert(p4r.Entity(table_entry=te)))
    return i


def test_digest_list_ack_and_suppression(client: Client, switch_server: Any) -> None:
    sw, _, _ = switch_server
    i = learning_pipeline(client)
    sw.receive(4, frame(sport=999))
    dl = client.next("digest")
    assert dl.digest_id == i["learn_t"]
    members = [m.bitstring for m in dl.data[0].struct.members]
    assert members == [b"\x0a\x00\x00\x01", b"\x03\xe7", b"\x04"]
    sw.receive(4, frame(sport=999))  # same sample: suppressed until acked
    sw.receive(4, frame(sport=998))
    assert [m.bitstring for m in client.next("digest").data[0].struct.members][1] == b"\x03\xe6"
    ack = p4r.StreamMessageRequest()
    ack.digest_ack.digest_id = dl.digest_id
    ack.digest_ack.list_id = dl.list_id
    client.requests.put(ack)
    for _ in range(100):
        sw.receive(4, frame(sport=999))
        try:
            again = client.next("digest", timeout=0.05)
            break
        except queue.Empty:
            continue
    assert [m.bitstring for m in again.data[0].struct.members][1] == b"\x03\xe7"


def test_a_list_not_full_is_sent_at_its_max_timeout_not_the_timer_period(
    client: Client, switch_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A list of up to 128 samples with one sample goes out once its max_timeout_ns (5 ms)
    passes: the timer's period is made an hour here, so only the list's own wake-up sends it."""
    sw, _, _ = switch_server
    monkeypatch.setattr(p4runtime_server, "TIMER_TICK_SECONDS", 3600.0)
    learning_pipeline(client, max_list_size=128, max_timeout_ns=5_000_000)
    sw.receive(4, frame(sport=999))
    dl = client.next("digest", timeout=10)
    assert [m.bitstring for m in dl.data[0].struct.members][1] == b"\x03\xe7"
    assert len(dl.data) == 1


def test_an_unacked_sample_is_sent_again_once_its_ack_timeout_passes(
    client: Client, switch_server: Any
) -> None:
    """Suppression ends with the ack timeout, in the order the samples went out: three samples
    sent 0.3 s apart, none acked; each comes again only once its own timeout (0.5 s) passed."""
    sw, _, _ = switch_server
    learning_pipeline(client, ack_timeout_ns=500_000_000)
    sent_at = {}
    for sport in (1000, 1001, 1002):
        sent_at[sport] = time.monotonic()  # before the switch sends it
        sw.receive(4, frame(sport=sport))
        client.next("digest")
        time.sleep(0.3)  # the condition under test is time itself
    again: dict[int, float] = {}
    deadline = time.monotonic() + 5
    while len(again) < 3 and time.monotonic() < deadline:
        for sport in sent_at.keys() - again.keys():
            sw.receive(4, frame(sport=sport))
        try:
            dl = client.next("digest", timeout=0.02)
        except queue.Empty:
            continue
        sport = int.from_bytes(dl.data[0].struct.members[1].bitstring, "big")
        again.setdefault(sport, time.monotonic())
    assert sorted(again) == [1000, 1001, 1002], again
    for sport, at in again.items():
        assert at - sent_at[sport] >= 0.5, (sport, at - sent_at[sport])


def test_a_stalled_controller_s_stream_holds_a_bounded_backlog(
    client: Client, switch_server: Any, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """A primary that reads nothing: its stream keeps STREAM_BACKLOG messages; further digest
    lists and packet-ins are dropped, counted and warned of; a dropped sample is not
    suppressed (it is sent when it comes again and there is room)."""
    sw, server, _ = switch_server
    monkeypatch.setattr(p4rt_common, "STREAM_BACKLOG", 8)
    # every change warned of: the timer may see the drops part way, and then the final count
    # would come only DROP_REPORT_SECONDS later
    monkeypatch.setattr(p4runtime_server, "DROP_REPORT_SECONDS", 0.0)
    learning_pipeline(client)
    stalled = p4rt_common.Stream(election_id=1 << 60)  # the primary now; nobody reads it
    with server.service.lock:
        server.service.streams.append(stalled)
        server.service.primary = stalled
    for sport in range(1000, 1012):
        sw.receive(4, frame(sport=sport))
    for _ in range(3):
        sw.packet_in(b"\x00" * 64)
    assert stalled.out.qsize() == 8
    assert stalled.dropped == {"digest samples": 4, "packet-ins": 3}
    stalled.out.get_nowait()
    sw.receive(4, frame(sport=1011))  # dropped before, not suppressed: queued now
    assert stalled.out.qsize() == 8 and stalled.dropped["digest samples"] == 4
    with caplog.at_level("WARNING", logger="softswitch.p4runtime_server"):
        for _ in range(200):
            if "dropped so far 4 digest samples, 3 packet-ins" in caplog.text:
                break
            threading.Event().wait(0.02)
    assert "dropped so far 4 digest samples, 3 packet-ins" in caplog.text
    with server.service.lock:
        server.service.streams.remove(stalled)
        server.service.primary = None


def test_idle_timeout_notification_and_counters(client: Client, switch_server: Any) -> None:
    sw, _, _ = switch_server
    i = ids(set_pipeline(client))
    te = p4r.TableEntry(table_id=i["MyIngress.session"], idle_timeout_ns=200_000_000)
    for fid, value in enumerate(
        (b"\x0a\x00\x00\x01", b"\x0a\x00\x00\x02", b"\x06", b"\x04\xd2", b"\x50"), 1
    ):
        te.match.add(field_id=fid).exact.value = value
    te.action.action.action_id = i["MyIngress.session_hit"]
    te.action.action.params.add(param_id=1, value=b"\x02")
    client.write(insert(p4r.Entity(table_entry=te)))
    sw.receive(1, frame())
    dce = p4r.DirectCounterEntry(table_entry=p4r.TableEntry(table_id=i["MyIngress.session"]))
    [got] = client.read(p4r.Entity(direct_counter_entry=dce))
    assert got.direct_counter_entry.data.packet_count == 1
    note = client.next("idle_timeout_notification", timeout=5)
    assert note.table_entry[0].table_id == i["MyIngress.session"]
    ce = p4r.CounterEntry(counter_id=i["MyIngress.port_counter"])
    ce.index.index = 1
    [port1] = client.read(p4r.Entity(counter_entry=ce))
    assert port1.counter_entry.data.packet_count == 1


def test_registers_can_be_written_and_read(client: Client) -> None:
    i = ids(set_pipeline(client))
    re_ = p4r.RegisterEntry(register_id=i["MyIngress.flow_reg"])
    re_.index.index = 3
    re_.data.bitstring = b"\x12\x34"
    client.write(p4r.Update(type=p4r.Update.MODIFY, entity=p4r.Entity(register_entry=re_)))
    q = p4r.RegisterEntry(register_id=i["MyIngress.flow_reg"])
    q.index.index = 3
    [got] = client.read(p4r.Entity(register_entry=q))
    assert got.register_entry.data.bitstring == b"\x12\x34"


def test_action_profile_members_groups_and_multicast(client: Client, switch_server: Any) -> None:
    sw, _, sent = switch_server
    i = ids(set_pipeline(client))
    prof = i["MyIngress.spm_selector"]
    for mid, port in ((1, 11), (2, 12)):
        m = p4r.ActionProfileMember(action_profile_id=prof, member_id=mid)
        m.action.action_id = i["MyIngress.forward"]
        m.action.params.add(param_id=1, value=bytes([port]))
        client.write(insert(p4r.Entity(action_profile_member=m)))
    g = p4r.ActionProfileGroup(action_profile_id=prof, group_id=1)
    g.members.add(member_id=1, weight=1)
    g.members.add(member_id=2, weight=2)
    client.write(insert(p4r.Entity(action_profile_group=g)))
    pc = p4r.TableEntry(table_id=i["MyIngress.port_class"], priority=1)
    fm = pc.match.add(field_id=1)
    fm.range.low = b"\x00"
    fm.range.high = b"\x03\xe8"
    pc.action.action.action_id = i["MyIngress.set_class"]
    pc.action.action.params.add(param_id=1, value=b"\x01")
    st = p4r.TableEntry(table_id=i["MyIngress.steer"])
    st.match.add(field_id=1).exact.value = b"\x01"
    st.action.action_profile_group_id = 1
    client.write(insert(p4r.Entity(table_entry=pc)), insert(p4r.Entity(table_entry=st)))
    for sport in range(1000, 1100, 7):
        sw.receive(1, frame(sport=sport * 37))
    assert {p for p, _ in sent} <= {11, 12} and sent
    with pytest.raises(grpc.RpcError) as err:
        client.write(
            p4r.Update(
                type=p4r.Update.DELETE,
                entity=p4r.Entity(
                    action_profile_member=p4r.ActionProfileMember(
                        action_profile_id=prof, member_id=1
                    )
                ),
            )
        )
    assert write_errors(err.value)[0].canonical_code == rpc_code.FAILED_PRECONDITION
    [grp] = client.read(
        p4r.Entity(action_profile_group=p4r.ActionProfileGroup(action_profile_id=prof))
    )
    assert [(m.member_id, m.weight) for m in grp.action_profile_group.members] == [(1, 1), (2, 2)]
    mg = p4r.MulticastGroupEntry(multicast_group_id=7)
    mg.replicas.add(egress_port=1, instance=1)
    mg.replicas.add(egress_port=2, instance=1)
    client.write(
        insert(
            p4r.Entity(
                packet_replication_engine_entry=p4r.PacketReplicationEngineEntry(
                    multicast_group_entry=mg
                )
            )
        )
    )
    [got] = client.read(
        p4r.Entity(
            packet_replication_engine_entry=p4r.PacketReplicationEngineEntry(
                multicast_group_entry=p4r.MulticastGroupEntry()
            )
        )
    )
    assert got.packet_replication_engine_entry.multicast_group_entry == mg


def test_group_weights_must_be_positive_and_fit_the_group_size(client: Client) -> None:
    i = ids(set_pipeline(client))
    prof = i["MyIngress.spm_selector"]
    for mid in (1, 2):
        m = p4r.ActionProfileMember(action_profile_id=prof, member_id=mid)
        m.action.action_id = i["MyIngress.forward"]
        m.action.params.add(param_id=1, value=bytes([10 + mid]))
        client.write(insert(p4r.Entity(action_profile_member=m)))
    cases = (
        (0, [(1, 0)], rpc_code.INVALID_ARGUMENT),  # PI: no default weight
        (2, [(1, 2), (2, 1)], rpc_code.RESOURCE_EXHAUSTED),  # sum of weights > max_size
    )
    for max_size, members, code in cases:
        g = p4r.ActionProfileGroup(action_profile_id=prof, group_id=1, max_size=max_size)
        for mid, weight in members:
            g.members.add(member_id=mid, weight=weight)
        with pytest.raises(grpc.RpcError) as err:
            client.write(insert(p4r.Entity(action_profile_group=g)))
        assert write_errors(err.value)[0].canonical_code == code
    g = p4r.ActionProfileGroup(action_profile_id=prof, group_id=1, max_size=3)
    g.members.add(member_id=1, weight=2)
    g.members.add(member_id=2, weight=1)
    client.write(insert(p4r.Entity(action_profile_group=g)))
    g.max_size = 4
    with pytest.raises(grpc.RpcError) as err:
        client.write(p4r.Update(type=p4r.Update.MODIFY, entity=p4r.Entity(action_profile_group=g)))
    assert write_errors(err.value)[0].canonical_code == rpc_code.INVALID_ARGUMENT


def test_a_table_the_compiler_removed_is_accepted_and_writes_to_it_refused(
    client: Client, switch_server: tuple[Switch, P4RuntimeServer, list[tuple[int, bytes]]]
) -> None:
    """headermux.p4's `never_applied` is dead code: p4c keeps it in the P4Info and leaves it out
    of the BMv2 JSON. BMv2 takes such a program; so does the switch, and it forwards."""
    sw, _, sent = switch_server
    info = set_pipeline(client, "headermux")
    i = ids(info)
    te = p4r.TableEntry(table_id=i["MuxIngress.never_applied"])
    fm = te.match.add(field_id=1)
    fm.exact.value = b"\x01"
    te.action.action.action_id = i["MuxIngress.mark"]
    with pytest.raises(grpc.RpcError) as err:
        client.write(insert(p4r.Entity(table_entry=te)))
    [detail] = write_errors(err.value)
    assert detail.canonical_code == rpc_code.NOT_FOUND
    assert "never_applied" in detail.message and "removed" in detail.message
    sw.receive(1, bytes([1, 0x11, 2, 0x22, 3, 0x33]))
    assert sent == [(2, bytes([1, 0x11, 2, 0x22, 2, 0x22]))]


def test_a_reader_without_a_stream_reads_and_takes_no_part_in_arbitration(
    client: Client, switch_server: Any
) -> None:
    """opengate.p4rt's `connect(stream=False)` (how the topology's helpers read counters beside
    a running controller): reads answer, and the primary hears of no other controller."""
    _, server, _ = switch_server
    i = ids(set_pipeline(client))
    re_ = p4r.RegisterEntry(register_id=i["MyIngress.flow_reg"])
    re_.index.index = 3
    re_.data.bitstring = b"\x56"
    client.write(p4r.Update(type=p4r.Update.MODIFY, entity=p4r.Entity(register_entry=re_)))
    with P4RuntimeClient(f"127.0.0.1:{server.port}", DEVICE, 10).connect(stream=False) as reader:
        q = p4r.RegisterEntry(register_id=i["MyIngress.flow_reg"])
        q.index.index = 3
        [got] = reader.read([p4r.Entity(register_entry=q)])
        assert got.register_entry.data.bitstring == b"\x56"
        assert not reader.is_primary
    # the primary is still the primary, and was told nothing: its next write succeeds and no
    # arbitration update waits on its stream
    client.write(p4r.Update(type=p4r.Update.MODIFY, entity=p4r.Entity(register_entry=re_)))
    assert client.responses.empty()
