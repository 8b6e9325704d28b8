"""Counters of the topology's NPM, read over P4Runtime (reads need no primary role)."""

from __future__ import annotations

from opengate.p4info import P4Schema
from opengate.p4rt import P4RuntimeClient
from opengate.target import p4_build_dir
from topo.net import GatewayNetwork


def npm_counter(gateway: GatewayNetwork, name: str, index: int, npm: str = "npm1") -> int:
    """Packets counted by cell `index` of the indirect counter `name`."""
    schema = P4Schema.load(p4_build_dir() / "opengate.p4info.txtpb")
    address = gateway.net.get(npm).grpc_address
    with P4RuntimeClient(address, election_id=1).connect() as client:
        counter_id = schema.counters.get(name).preamble.id
        (entry,) = client.read_counter(counter_id, index)
        return int(entry.data.packet_count)
