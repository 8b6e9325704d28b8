"""Reading the NPM's counters: only those its program has, names from the P4 constants."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from finsy.proto import p4r

from controller.counters import read_counters
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
