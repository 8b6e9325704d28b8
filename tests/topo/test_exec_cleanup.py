"""`topo run --exec`: a command that runs too long is stopped after --exec-timeout (none by
default), and SIGTERM to `topo run` stops the command still running with everything it started.

The real `topo run` (topo.cli.handle: its signal handlers, GatewayNetwork.run and stop) runs in a
process of its own, on a GatewayNetwork whose bring-up is left out: its hosts run commands as
Mininet's do (node.popen, in a session of their own), in this machine's namespaces. A bring-up
needs root and a minute; what is tested here is what happens to the command's processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from opengate.target import repo_root

# topo run with a network whose hosts run commands here (no Mininet, no root)
RUNNER = textwrap.dedent(
    """
    import subprocess, sys
    import topo.cli
    from topo.net import GatewayNetwork

    class Host:
        def popen(self, argv, **kwargs):
            kwargs.setdefault("start_new_session", True)  # as topo.nodes.NetnsHost.popen
            return subprocess.Popen(argv, **kwargs)

    class Net:
        def get(self, name):
            return Host()

        def stop(self):
            pass

    class Unbuilt(GatewayNetwork):
        def start(self):
            self.net = Net()

    topo.cli.GatewayNetwork = Unbuilt
    parser = topo.cli.argparse.ArgumentParser()
    topo.cli.add_arguments(parser)
    args = parser.parse_args(sys.argv[1:])
    sys.exit(topo.cli.handle(args))
    """
)


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_for(what: str, condition: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def started() -> Iterator[list[int]]:
    """PIDs the test's commands report; whatever is left of them is killed at the end."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if running(pid):
            os.kill(pid, signal.SIGKILL)


def topo_run(tmp_path: Path, *argv: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(repo_root())}
    return subprocess.Popen(
        [sys.executable, "-c", RUNNER, "--run-dir", str(tmp_path / "run"), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=tmp_path,
    )


# a shell that puts a sleep in the background (it leaves the shell's children when the shell
# goes) and waits on another, writing both PIDs
COMMAND = "sleep 300 & echo $! > {d}/background; sleep 301 & echo $! > {d}/foreground; wait"


def read_pids(folder: Path) -> list[int]:
    return [int((folder / name).read_text()) for name in ("background", "foreground")]


def test_sigterm_stops_the_exec_command_and_what_it_started(
    tmp_path: Path, started: list[int]
) -> None:
    process = topo_run(tmp_path, "--exec", f"h1: {COMMAND.format(d=tmp_path)}")
    try:
        wait_for(
            "the command's processes",
            lambda: (
                all((tmp_path / n).stat().st_size for n in ("background", "foreground"))
                if (tmp_path / "foreground").exists() and (tmp_path / "background").exists()
                else False
            ),
        )
        pids = read_pids(tmp_path)
        started.extend(pids)
        assert all(running(pid) for pid in pids)
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 128 + signal.SIGTERM, output
    wait_for("the command's processes to end", lambda: not any(running(p) for p in pids), 10.0)


def test_exec_timeout_stops_the_command_and_exits_124(tmp_path: Path, started: list[int]) -> None:
    process = topo_run(
        tmp_path, "--exec-timeout", "0.5", "--exec", f"h1: {COMMAND.format(d=tmp_path)}"
    )
    try:
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    pids = read_pids(tmp_path)
    started.extend(pids)
    assert process.returncode == 124, output
    assert "timed out after 0.5s" in output
    assert not any(running(pid) for pid in pids)


def test_exec_timeout_is_an_option_without_a_default_limit() -> None:
    import argparse

    from topo.cli import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args([]).exec_timeout is None
    assert parser.parse_args(["--exec-timeout", "30"]).exec_timeout == 30.0
    with pytest.raises(SystemExit):
        parser.parse_args(["--exec-timeout", "0"])
    assert "--exec-timeout SECONDS" in parser.format_help()
