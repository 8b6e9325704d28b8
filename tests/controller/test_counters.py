"""Reading the NPM's counters: only those its program has, names from the P4 constants."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from finsy.proto import p4r
from prometheus_client import CollectorRegistry

from controller.counters import NpmCounterCollector, read_counters
from opengate import p4constants as pc
from opengate.p4info import P4Schema

ROOT = Path(__file__).parents[2]


def test_a_build_without_data_plane_sessions_is_read_without_their_counter() -> None:
    schema = P4Schema.load(ROOT / "p4src/build/tofino/tofino-default.p4info.txtpb")
    asked: list[int] = []
    drop_id = schema.counters.get(pc.C_DROP_COUNTER).preamble.id

    def read(entities: Iterable[p4r.Entity]) -> list[p4r.Entity]:
        asked.extend(e.counter_entry.counter_id for e in entities)
        cell = p4r.CounterEntry(counter_id=drop_id)
        cell.index.index = next(i for i, n in pc.DROP_NAMES.items() if n == "NO_SESSION")
        cell.data.packet_count, cell.data.byte_count = 5, 300
        return [p4r.Entity(counter_entry=cell)]

    counters = read_counters(schema, read)
    names = {schema.counters.get_id(i).preamble.name.removeprefix("pipe.") for i in asked}
    assert names == {pc.C_DROP_COUNTER, pc.C_PORT_RX_COUNTER, pc.C_PORT_TX_COUNTER}
    assert counters.view()["drops"] == {"NO_SESSION": {"packets": 5, "bytes": 300}}
    assert counters.flow_events == {}


def test_the_ipv6_drop_reasons_are_named_in_the_view_and_in_prometheus() -> None:
    """DROP_BAD_IPV6_HEADER and DROP_IPV6_EXT_HEADERS come with their names from the P4
    constants: in the API's view and in the Prometheus families."""
    schema = P4Schema.load(ROOT / "p4src/build/opengate.p4info.txtpb")
    drop_id = schema.counters.get(pc.C_DROP_COUNTER).preamble.id

    def read(entities: Iterable[p4r.Entity]) -> list[p4r.Entity]:
        out = []
        for index, packets in ((pc.DROP_BAD_IPV6_HEADER, 3), (pc.DROP_IPV6_EXT_HEADERS, 4)):
            cell = p4r.CounterEntry(counter_id=drop_id)
            cell.index.index = index
            cell.data.packet_count, cell.data.byte_count = packets, packets * 100
            out.append(p4r.Entity(counter_entry=cell))
        return out

    counters = read_counters(schema, read)
    assert counters.view()["drops"] == {
        "BAD_IPV6_HEADER": {"packets": 3, "bytes": 300},
        "IPV6_EXT_HEADERS": {"packets": 4, "bytes": 400},
    }
    registry = CollectorRegistry()
    registry.register(NpmCounterCollector(lambda: {"npm1": counters}))
    for reason, packets in (("BAD_IPV6_HEADER", 3), ("IPV6_EXT_HEADERS", 4)):
        labels = {"npm": "npm1", "reason": reason}
        assert registry.get_sample_value("opengate_npm_drops_total", labels) == packets
