"""What the NPM counted: drops by reason, data-plane session events, packets per port.

The NPM counts every packet it drops in `drop_counter` (one cell per reason), every data-plane
session event in `flow_event_counter` (created, collision with the controller's path as the
fallback, NAT port block full, ...) and what each port receives and sends. The CPM reads them
when asked (the API's `GET /api/v1/counters`, `opengate counters`, a Prometheus scrape, the
web console's charts once a second), by P4Runtime: the counts stay on the switch. Reason and
event names come from the P4 program's constants (`opengate.p4constants`, generated from the P4
source), and a counter the NPM's program lacks (the TNA build has no data-plane sessions) is
left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from finsy.proto import p4r
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from opengate import p4constants as pc
from opengate.p4info import P4InfoError, P4Schema


@dataclass(frozen=True, slots=True)
class Cell:
    packets: int
    bytes: int


@dataclass(slots=True)
class NpmCounters:
    """One NPM's counts: name -> cell (drops by reason, flow events), port -> cell."""

    drops: dict[str, Cell] = field(default_factory=dict)
    flow_events: dict[str, Cell] = field(default_factory=dict)
    rx: dict[int, Cell] = field(default_factory=dict)
    tx: dict[int, Cell] = field(default_factory=dict)

    def view(self) -> dict[str, object]:
        """The API's form: every reason and event (zeros too), ports that saw packets."""

        def cells(source: Mapping[str, Cell]) -> dict[str, dict[str, int]]:
            return {str(k): {"packets": c.packets, "bytes": c.bytes} for k, c in source.items()}

        ports = sorted(set(self.rx) | set(self.tx))
        zero = Cell(0, 0)
        return {
            "drops": cells(self.drops),
            "flow_events": {k: c.packets for k, c in self.flow_events.items()},
            "ports": {
                str(p): {
                    "rx_packets": self.rx.get(p, zero).packets,
                    "rx_bytes": self.rx.get(p, zero).bytes,
                    "tx_packets": self.tx.get(p, zero).packets,
                    "tx_bytes": self.tx.get(p, zero).bytes,
                }
                for p in ports
            },
        }


Reader = Callable[[Iterable[p4r.Entity]], Iterable[p4r.Entity]]


def read_counters(
    schema: P4Schema, read: Reader, ports: Sequence[int] | None = None
) -> NpmCounters:
    """Read the NPM's indirect counters in one Read: every cell of each, or of the port
    counters only the cells of `ports` (zeros kept: a port that saw nothing reads 0)."""
    wanted: dict[int, str] = {}
    for name in (
        pc.C_DROP_COUNTER,
        pc.C_FLOW_EVENT_COUNTER,
        pc.C_PORT_RX_COUNTER,
        pc.C_PORT_TX_COUNTER,
    ):
        try:
            wanted[schema.counters.get(name).preamble.id] = name
        except P4InfoError:
            continue  # not in this build
    out = NpmCounters()
    if not wanted:
        return out
    query: list[p4r.Entity] = []
    for cid, name in wanted.items():
        if ports is not None and name in (pc.C_PORT_RX_COUNTER, pc.C_PORT_TX_COUNTER):
            query.extend(
                p4r.Entity(counter_entry=p4r.CounterEntry(counter_id=cid, index=p4r.Index(index=p)))
                for p in ports
            )
        else:
            query.append(p4r.Entity(counter_entry=p4r.CounterEntry(counter_id=cid)))
    for entity in read(query):
        entry = entity.counter_entry
        counter = wanted.get(entry.counter_id)
        if counter is None:
            continue
        index = entry.index.index
        cell = Cell(entry.data.packet_count, entry.data.byte_count)
        if counter == pc.C_DROP_COUNTER:
            reason = pc.DROP_NAMES.get(index)
            if reason is not None and reason != "NONE":
                out.drops[reason] = cell
        elif counter == pc.C_FLOW_EVENT_COUNTER:
            event = pc.FLOW_EVENT_NAMES.get(index)
            if event is not None:
                out.flow_events[event] = cell
        elif ports is not None or cell.packets or cell.bytes:
            (out.rx if counter == pc.C_PORT_RX_COUNTER else out.tx)[index] = cell
    return out


class NpmCounterCollector(Collector):
    """Prometheus: the NPMs' counters, read at scrape time (`source` gives NPM -> counters;
    an NPM that cannot be read is left out of that scrape)."""

    def __init__(self, source: Callable[[], Mapping[str, NpmCounters]]) -> None:
        self.source = source

    def describe(self) -> Iterator[CounterMetricFamily]:
        """The families, without reading the NPMs (the registry asks at registration)."""
        return self._families({})

    def collect(self) -> Iterator[CounterMetricFamily]:
        return self._families(self.source())

    def _families(self, npms: Mapping[str, NpmCounters]) -> Iterator[CounterMetricFamily]:
        drops = CounterMetricFamily(
            "opengate_npm_drops", "Packets the NPM dropped, by reason", labels=["npm", "reason"]
        )
        events = CounterMetricFamily(
            "opengate_npm_flow_events",
            "Data-plane session events (COLLISION, NAT_FULL: the controller's path instead)",
            labels=["npm", "event"],
        )
        ports = CounterMetricFamily(
            "opengate_npm_port_packets", "Packets per port", labels=["npm", "port", "direction"]
        )
        for npm, counters in sorted(npms.items()):
            for reason, cell in sorted(counters.drops.items()):
                drops.add_metric([npm, reason], cell.packets)
            for event, cell in sorted(counters.flow_events.items()):
                events.add_metric([npm, event], cell.packets)
            for direction, cells in (("rx", counters.rx), ("tx", counters.tx)):
                for port, cell in sorted(cells.items()):
                    ports.add_metric([npm, str(port), direction], cell.packets)
        yield drops
        yield events
        yield ports
