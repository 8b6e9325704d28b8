"""A topology's switch names: held by the process that runs it, so that a second one fails
naming it, and what a killed run left behind (interfaces, processes) is removed by the next
start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from opengate.errors import ConfigError
from opengate.netutil import delete_link
from tests.helpers import skip_unless_root, skip_unless_tool
from topo.net import (
    TOPOLOGY_ENV,
    claim_names,
    interfaces_named,
    release_names,
    remove_leftovers,
    stop_leftover_processes,
)

# Names no topology file of the project uses, so that a topology up in this run is not touched.
NAMES = ["ogclm-lan", "ogclm-npm"]

HOLD = """
import sys
from pathlib import Path
from topo.net import claim_names
claim_names(sys.argv[2:], Path(sys.argv[1]))
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def leftovers() -> Iterator[list[str]]:
    """What a killed topology leaves: a bridge and a port of the NPM linked to the bridge's."""
    skip_unless_root("interfaces in the root namespace")
    skip_unless_tool("ip", "iproute2 creates the interfaces")
    made = ["ogclm-lan", "ogclm-npm-eth1"]
    try:
        subprocess.run(["ip", "link", "add", "ogclm-lan", "type", "bridge"], check=True)
        subprocess.run(
            ["ip", "link", "add", "ogclm-npm-eth1", "type", "veth", "peer", "ogclm-lan-eth2"],
            check=True,
        )
        yield made
    finally:
        for name in made:
            delete_link(name)


def test_a_second_claim_fails_naming_the_process_that_holds_the_name(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path), *NAMES],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"  # it holds both names now
        with pytest.raises(ConfigError, match=rf"name ogclm-lan \(pid {holder.pid}\)"):
            claim_names(NAMES, tmp_path)
    finally:
        holder.communicate("")  # its end lets the names go
    fds = claim_names(NAMES, tmp_path)
    assert len(fds) == 2
    release_names(fds)
    assert fds == []


def test_a_claim_held_in_this_process_is_not_claimed_twice(tmp_path: Path) -> None:
    fds = claim_names(NAMES, tmp_path)
    try:
        with pytest.raises(ConfigError, match="another topology runs"):
            claim_names(NAMES[1:], tmp_path)
    finally:
        release_names(fds)


def test_leftovers_of_a_killed_run_are_removed(leftovers: list[str]) -> None:
    assert interfaces_named(NAMES) == ["ogclm-lan", "ogclm-lan-eth2", "ogclm-npm-eth1"]
    assert remove_leftovers(NAMES) == ["ogclm-lan", "ogclm-lan-eth2", "ogclm-npm-eth1"]
    assert interfaces_named(NAMES) == []
    assert remove_leftovers(NAMES) == []


def _dead_pid() -> int:
    """The PID of a process that has ended (reaped)."""
    ended = subprocess.Popen(["true"])
    ended.wait()
    return ended.pid


def test_processes_of_a_killed_run_are_stopped_and_no_others() -> None:
    """A process a killed topology left (its owner gone) is stopped; one whose owner lives, one
    of a topology with other names, and one without the mark are left alone."""
    skip_unless_root("reading other processes' environments")
    dead = _dead_pid()
    marks = {
        "orphan": f"{dead}:ogclm-lan,ogclm-npm",
        "owner alive": f"{os.getpid()}:ogclm-npm",
        "other names": f"{dead}:ogclm-elsewhere",
        "unmarked": None,
    }
    processes: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for what, mark in marks.items():
            env = {k: v for k, v in os.environ.items() if k != TOPOLOGY_ENV}
            if mark is not None:
                env[TOPOLOGY_ENV] = mark
            processes[what] = subprocess.Popen(["sleep", "60"], env=env)
        stopped = stop_leftover_processes(NAMES, timeout=5.0)
        assert stopped == [processes["orphan"].pid]
        assert processes["orphan"].wait(timeout=5) == -signal.SIGTERM
        assert all(p.poll() is None for w, p in processes.items() if w != "orphan")
    finally:
        for process in processes.values():
            process.kill()
            process.wait()


def test_a_start_that_fails_says_what_the_topology_looked_like(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The error of a failed start carries the diagnosis (controllers' views, ports, the logs'
    last lines), taken before the topology is stopped and its processes' state is gone."""
    from opengate.target import repo_root
    from topo.model import load_topology
    from topo.net import GatewayNetwork

    spec = load_topology(repo_root() / "topo" / "gateway.yaml", root=repo_root())
    network = GatewayNetwork(spec, tmp_path)
    (tmp_path / "npm1.log").write_text("first line\nthe switch's last words\n")
    stopped: list[bool] = []

    def start(_self: GatewayNetwork) -> None:
        raise TimeoutError("npm1 never connected")

    monkeypatch.setattr(GatewayNetwork, "start", start)
    monkeypatch.setattr(GatewayNetwork, "stop", lambda _self: stopped.append(True))
    with pytest.raises(TimeoutError, match="npm1 never connected") as caught:
        network.__enter__()
    notes = "\n".join(caught.value.__notes__)
    assert "the topology when it failed to start" in notes
    assert "the switch's last words" in notes and "npm1 ports:" in notes
    assert stopped == [True]
