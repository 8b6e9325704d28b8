"""P4Runtime conformance: the stream's "Packet I/O", "Stream Error Reporting" and the
digests of "DigestEntry" with their acknowledgements. These play the data plane (frames into
the switch), so they run on the built-in switch in this process only
(tests/softswitch/p4runtime_target.py)."""

from __future__ import annotations

import pytest
from finsy.proto import p4r, rpc_code
from scapy.compat import raw
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from softswitch.switch import Switch
from tests.softswitch.p4runtime_target import Controller, Target, ids, target, wait_until

__all__ = ["target"]  # the fixture

I = ids()  # noqa: E741
LLDP = raw(Ether(type=0x88CC) / b"lldp")  # not IPv4: l3 sends it to the CPU


def frame(sport: int) -> bytes:
    return raw(Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=sport, dport=80) / b"x")


def out_of(target: Target, port: int) -> list[bytes]:
    """The frames the switch sent out of `port`."""
    return [f for p, f in target.sent if p == port]


def packet_out(payload: bytes, *metadata: tuple[int, bytes]) -> p4r.StreamMessageRequest:
    msg = p4r.StreamMessageRequest()
    msg.packet.payload = payload
    for mid, value in metadata:
        msg.packet.metadata.add(metadata_id=mid, value=value)
    return msg


def learning(c: Controller, ack_timeout_ns: int) -> None:
    """Every IPv4 packet learnt (acl -> learn), digest lists of one sample."""
    de = p4r.DigestEntry(digest_id=I["learn_t"])
    de.config.max_list_size = 1
    de.config.ack_timeout_ns = ack_timeout_ns
    te = p4r.TableEntry(table_id=I["MyIngress.acl"], priority=1)
    te.action.action.action_id = I["MyIngress.learn"]
    c.write(
        p4r.Update(type=p4r.Update.INSERT, entity=p4r.Entity(digest_entry=de)),
        p4r.Update(type=p4r.Update.INSERT, entity=p4r.Entity(table_entry=te)),
    )


def sport_of(digest: p4r.DigestList) -> int:
    return int.from_bytes(digest.data[0].struct.members[1].bitstring, "big")


@pytest.fixture
def switch(target: Target) -> Switch:
    return target.require_in_process()


def test_packet_ins_go_to_the_primary_only_with_their_metadata(
    target: Target, switch: Switch
) -> None:
    """ "Note that unless specified otherwise by the role definitions, only the primary
    controller can participate in packet I/O"; the server "must populate precisely one
    `metadata` field for each `metadata` field in the `ControllerPacketMetadata` for
    packet-in.\""""
    primary = target.primary(10)
    backup = target.controller(5)
    switch.receive(7, LLDP)
    pin = primary.next("packet")
    assert pin.payload == LLDP
    assert sorted((m.metadata_id, m.value) for m in pin.metadata) == [(1, b"\x07"), (2, b"\x00")]
    assert backup.nothing_more("packet")


def test_a_packet_out_from_a_backup_is_dropped_with_permission_denied(
    target: Target, switch: Switch
) -> None:
    """ "Any `PacketOut` message received by the server from a client which is not allowed to
    send such messages based on its current role definition must be dropped"; "if a controller
    is not allowed to send a `PacketOut` message under its current role definition, the code
    should be set to `PERMISSION_DENIED`.\""""
    target.primary(10)
    backup = target.controller(5)
    backup.send(packet_out(b"\x00" * 20, (1, b"\x05")))
    error = backup.next("error")
    assert error.canonical_code == rpc_code.PERMISSION_DENIED
    assert error.WhichOneof("details") == "packet_out"
    assert target.sent == []


def test_a_packet_out_with_unknown_metadata_is_dropped_with_invalid_argument(
    target: Target, switch: Switch
) -> None:
    """ "If a `metadata` field does not match the P4Info specification, the server must drop the
    `PacketOut` message"; "if the `metadata` repeated field in `PacketOut` does not match the
    P4Info definition, the code should be set to `INVALID_ARGUMENT`. It may be useful for the
    server to set the `packet_out` field in this case.\""""
    c = target.primary(10)
    bad = packet_out(b"\x00" * 20, (1, b"\x05"), (7, b"\x01"))
    c.send(bad)
    error = c.next("error")
    assert error.canonical_code == rpc_code.INVALID_ARGUMENT
    assert error.packet_out.packet_out == bad.packet
    c.send(packet_out(frame(1), (1, b"\x05")))  # a good one goes out: the bad one did not
    wait_until("the good packet-out", lambda: out_of(target, 5))
    assert out_of(target, 5) == [frame(1)]


def test_an_ack_of_an_unknown_digest_is_invalid_argument(target: Target, switch: Switch) -> None:
    """ "if the `digest_id` field in `DigestListAck` does not match any `Digest` entry in P4Info,
    the code should be set to `INVALID_ARGUMENT`"; the server "is required to set the
    appropriate field in the `oneof` so that the client can identify which type of stream
    message is responsible for the error.\""""
    c = target.primary(10)
    ack = p4r.StreamMessageRequest()
    ack.digest_ack.digest_id = 12345
    ack.digest_ack.list_id = 1
    c.send(ack)
    error = c.next("error")
    assert error.canonical_code == rpc_code.INVALID_ARGUMENT
    assert error.digest_list_ack.digest_list_ack == ack.digest_ack


def test_a_digest_is_suppressed_until_acked(target: Target, switch: Switch) -> None:
    """ "The server must keep a "cache" containing the set of all digest messages that have been
    sent, but not acknowledged yet by the primary client ... The server must delete all cache
    entries for a given digest list when they are at least `ack_timeout_ns` old or when a
    matching `DigestListAck` message ... is received.\""""
    c = target.primary(10)
    learning(c, ack_timeout_ns=60_000_000_000)
    switch.receive(4, frame(999))
    first = c.next("digest")
    assert first.digest_id == I["learn_t"] and sport_of(first) == 999
    switch.receive(4, frame(999))  # in the cache: not sent again
    switch.receive(4, frame(998))
    assert sport_of(c.next("digest")) == 998
    ack = p4r.StreamMessageRequest()
    ack.digest_ack.digest_id, ack.digest_ack.list_id = first.digest_id, first.list_id
    c.send(ack)
    c.send(packet_out(LLDP, (1, b"\x05")))  # the stream is in order: once it is out,
    wait_until("the packet-out after the ack", lambda: out_of(target, 5))  # the ack was taken
    switch.receive(4, frame(999))
    assert sport_of(c.next("digest")) == 999


def test_with_no_ack_timeout_every_digest_is_sent(target: Target, switch: Switch) -> None:
    """ "If `ack_timeout_ns` is set to 0, the cache must always be an empty set.\""""
    c = target.primary(10)
    learning(c, ack_timeout_ns=0)
    for _ in range(3):
        switch.receive(4, frame(999))
        assert sport_of(c.next("digest")) == 999


def test_digests_go_to_the_primary_only(target: Target, switch: Switch) -> None:
    """The server "should, with best effort, generate a `DigestList` stream message with the
    buffer contents and send it to the primary client.\""""
    c = target.primary(10)
    backup = target.controller(5)
    learning(c, ack_timeout_ns=0)
    switch.receive(4, frame(999))
    assert sport_of(c.next("digest")) == 999
    assert backup.nothing_more("digest")
