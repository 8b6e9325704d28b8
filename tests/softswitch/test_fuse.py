"""A pipeline fused into one function behaves exactly like the same pipeline run node by node."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from opengate.p4info import P4Schema
from opengate.p4rt import P4RuntimeClient
from opengate.target import p4_build_dir
from softswitch import fuse, program
from softswitch.p4runtime_server import P4RuntimeServer
from softswitch.switch import Switch
from tests.softswitch import test_differential_bmv2 as gw
from tests.softswitch.conftest import fixture_program

Result = tuple[list[tuple[int, bytes]], list[tuple[int, int]]]


@contextlib.contextmanager
def gateway(fused: bool, monkeypatch: pytest.MonkeyPatch) -> Iterator[Switch]:
    """An in-process switch running the OpenGate program with the differential test's entries."""
    monkeypatch.setattr(program, "FUSE", fused)
    switch = Switch(device_id=1, cpu_port=255)
    server = P4RuntimeServer(switch, "127.0.0.1:0")
    server.start()
    try:
        schema = P4Schema.load(p4_build_dir() / "opengate.p4info.txtpb")
        with P4RuntimeClient(f"127.0.0.1:{server.port}", 1, 10).connect() as client:
            gw._install(client, schema)
        yield switch
    finally:
        server.stop()


def run(switch: Switch, stimuli: list[gw.Stimulus]) -> Result:
    dp = switch.dataplane
    assert dp is not None
    out: list[tuple[int, bytes]] = []
    for s in stimuli:
        if isinstance(s, gw.Frame):
            out += dp.process(s.port, s.data)
    counters = [tuple(c) for arr in dp.program.counters.values() for c in arr.cells]
    return out, counters


def stimuli() -> list[gw.Stimulus]:
    originals, reverses = gw.selector_flows(60)
    return gw.well_formed() + originals + reverses + gw.fuzz_frames(300, seed=5)


def outcome(fused: bool, monkeypatch: pytest.MonkeyPatch) -> Result:
    with gateway(fused, monkeypatch) as switch:
        assert switch.dataplane is not None
        init = switch.dataplane.program.ingress.init
        assert init.__name__.startswith("_P" if fused else "_N")
        return run(switch, stimuli())


def test_fused_opengate_pipeline_gives_the_same_frames_and_counters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    by_nodes = outcome(False, monkeypatch)
    fused = outcome(True, monkeypatch)
    assert len(by_nodes[0]) > 100
    assert fused == by_nodes


def test_when_the_nesting_budget_runs_out_the_fused_code_goes_on_node_by_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    by_nodes = outcome(False, monkeypatch)
    monkeypatch.setattr(fuse, "MAX_DEPTH", 2)
    monkeypatch.setattr(fuse, "MAX_NODES", 30)
    assert outcome(True, monkeypatch) == by_nodes


@pytest.mark.parametrize("name", ["l3", "parse", "ops"])
def test_every_fixture_program_is_fused(name: str) -> None:
    prog = fixture_program(name)
    for pipe in (prog.ingress, prog.egress):
        if pipe.init is not None:
            assert pipe.init.__name__.startswith("_P")


def test_post_dominators_of_an_if_else_diamond_and_a_switch() -> None:
    nodes = {
        "c": fuse.Node("cond", ["t1", "f1"]),
        "t1": fuse.Node("table", ["j"]),
        "f1": fuse.Node("table", ["f2"]),
        "f2": fuse.Node("table", ["j", fuse.EXIT]),  # a switch whose one case ends the control
        "j": fuse.Node("table", [fuse.EXIT]),
    }
    ipdom = fuse.post_dominators(nodes, "c")
    assert ipdom["c"] == fuse.EXIT  # f2 may leave without passing j
    assert ipdom["t1"] == "j" and ipdom["f1"] == "f2" and ipdom["f2"] == fuse.EXIT
    nodes["f2"] = fuse.Node("table", ["j"])
    assert fuse.post_dominators(nodes, "c")["c"] == "j"


def test_a_cyclic_control_graph_is_not_fused() -> None:
    nodes = {"a": fuse.Node("table", ["b"]), "b": fuse.Node("cond", ["a", fuse.EXIT])}
    with pytest.raises(fuse.CyclicGraphError):
        fuse.post_dominators(nodes, "a")
