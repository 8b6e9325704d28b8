"""reference/metrics.md: the Prometheus metrics of the controller, from its own registry.

The registry is the one a Controller builds (`Controller.__init__`: `Metrics()` and the NPM
counter collector), on a Controller that is never started. Its metric objects give name, type,
help and labels; a custom collector gives its families through `describe()`, which reads no NPM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from controller.metrics import Metrics
from controller.runtime import Controller, ControllerOptions
from docgen import markdown as md

SOURCE = "controller/metrics.py and controller/counters.py"
# the series a family of each type exports (prometheus_client; `_created` aside)
SERIES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("", "_sum", "_count"),
    "info": ("_info",),
    "stateset": ("",),
    "unknown": ("",),
}


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    type: str
    help: str
    labels: tuple[str, ...]
    module: str  # where it is defined
    order: int  # its collector's place in the registry
    buckets: tuple[float, ...] = ()

    @property
    def series(self) -> tuple[str, ...]:
        return tuple(self.name + suffix for suffix in SERIES.get(self.type, ("",)))


def controller_metrics() -> Metrics:
    """The metrics of a Controller that is never started (nothing connects anywhere)."""
    controller = Controller(ControllerOptions(npms=(), db_url="sqlite://"))
    controller.db.close()
    return controller.metrics


def _collectors(registry: CollectorRegistry) -> list[Collector]:
    # prometheus_client has no public list of a registry's collectors
    return list(registry._collector_to_names)


def families(metrics: Metrics | None = None) -> list[Family]:
    """Every family the controller's registry exports, with its labels, sorted by name."""
    metrics = metrics or controller_metrics()
    own = {id(value) for value in vars(metrics).values()}  # Metrics' attributes
    out: list[Family] = []
    for order, collector in enumerate(_collectors(metrics.registry)):
        if isinstance(collector, MetricWrapperBase):
            module = Metrics.__module__ if id(collector) in own else type(collector).__module__
            # a metric object keeps its label names and buckets in attributes only
            labels = tuple(collector._labelnames)
            buckets: tuple[float, ...] = tuple(getattr(collector, "_upper_bounds", ()))
            for family in collector.describe():
                out.append(
                    Family(
                        family.name,
                        family.type,
                        family.documentation,
                        labels,
                        module,
                        order,
                        buckets,
                    )
                )
            continue
        module = type(collector).__module__
        # describe() gives the families without collecting (reading the NPMs)
        describe = getattr(collector, "describe", collector.collect)
        for family in describe():
            described: Any = family  # a CounterMetricFamily etc.: it keeps its label names
            labels = tuple(getattr(described, "_labelnames", ()))
            out.append(
                Family(family.name, family.type, family.documentation, labels, module, order)
            )
    return sorted(out, key=lambda f: f.name)


def _buckets(values: tuple[float, ...]) -> str:
    return ", ".join("+Inf" if v == float("inf") else f"{v:g}" for v in values)


def render() -> str:
    found = families()
    modules = list(dict.fromkeys(f.module for f in sorted(found, key=lambda f: f.order)))
    lines = [
        md.header(SOURCE),
        "",
        "# Prometheus metrics",
        "",
        "The controller serves these at `GET /metrics` on its REST API (with the API token, as "
        "every request: see [the REST API](api.md)). A family's series are named after it: "
        "a counter's `NAME_total`, a histogram's `NAME_bucket`, `NAME_sum` and `NAME_count`; "
        "counters and histograms also export `NAME_created` unless the controller runs with "
        "`PROMETHEUS_DISABLE_CREATED_SERIES` set.",
        "",
    ]
    for module in modules:
        group = [f for f in found if f.module == module]
        path = module.replace(".", "/") + ".py"
        lines += [f"## From {md.code(path, in_table=False)}", ""]
        lines += md.table(
            ["Family", "Type", "Series", "Labels", "Help"],
            [
                [
                    md.code(f.name),
                    f.type,
                    md.codes(f.series),
                    md.codes(f.labels),
                    md.text(f.help),
                ]
                for f in group
            ],
        )
        lines.append("")
        histograms = [f for f in group if f.buckets]
        for f in histograms:
            lines += [f"Buckets of {md.code(f.name, in_table=False)}: {_buckets(f.buckets)}.", ""]
    return md.page(lines)
