"""bench_newflows reads the software switch's losses from its log. The lines it parses here are
made by the switch's own code (its loss report and its stream's backlog warning), so a change of
their wording fails this test rather than leaving the bench to count nothing (the way its
measurement policy silently kept the CPU meters once the example's block spanned lines)."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.bench_newflows import npm_port, switch_losses
from opengate.target import repo_root
from softswitch.native.dataplane import LossReport
from softswitch.p4runtime_server import P4RuntimeService
from topo.model import load_topology


def _stream_warning(caplog: pytest.LogCaptureFixture, digests: int, packet_ins: int) -> str:
    fake = SimpleNamespace(
        streams=[SimpleNamespace(dropped={"digest samples": digests, "packet-ins": packet_ins})],
        _drops_reported=(0, 0),
        _drops_reported_at=float("-inf"),
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="softswitch.p4runtime_server"):
        P4RuntimeService._report_backlog_drops(fake)  # type: ignore[arg-type]
    (record,) = caplog.records
    return record.getMessage()


def test_the_bench_reads_the_lines_the_switch_writes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = tmp_path / "npm1.log"
    assert switch_losses(log) == (0, 0, 0, 0)  # no log: nothing lost (BMv2 writes none)
    ring = LossReport(every=0).check(
        {"rx_ring_drops": 54055, "upcall_drops": 7, "tx_errors": 1, "digest_drops": 12}, now=1.0
    )
    assert ring is not None
    lines = [f"WARNING softswitch.native.dataplane: {ring}"]
    lines.append(f"WARNING softswitch.p4runtime_server: {_stream_warning(caplog, 3, 8)}")
    lines.append(f"WARNING softswitch.p4runtime_server: {_stream_warning(caplog, 16392, 193904)}")
    log.write_text("\n".join(lines) + "\n")
    # the last report of each kind: they are totals so far
    assert switch_losses(log) == (54055, 12, 16392, 193904)


def test_the_port_counters_read_are_the_flooding_hosts_and_the_receivers() -> None:
    """The NPM in / out columns read h2's segment's port and out1's (gateway.yaml: 1 and 2)."""
    root = repo_root()
    spec = load_topology(root / "topo" / "gateway.yaml", root=root)
    assert (npm_port(spec, "h2"), npm_port(spec, "out1")) == (1, 2)
    assert npm_port(spec, "h1") == npm_port(spec, "h2")
