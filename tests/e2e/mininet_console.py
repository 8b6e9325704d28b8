"""Drive `make run`'s Mininet CLI through a pseudo-terminal, as a user types into it, and read the
README's transcript of it.

A Console is make running the `make run` recipe (`python -m topo run`) on a pty: typed lines,
Ctrl-C and Ctrl-D reach the CLI as from a keyboard, and make's exit status tells whether the
Ctrl-C typed meanwhile reached make too. Console.close() stops what is left by PID and deletes
the topology's links, whatever happened before.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pexpect  # type: ignore[import-untyped]

from opengate.netutil import delete_link
from opengate.target import repo_root
from topo.model import TopologySpec
from topo.net import descendants, interfaces_in_use

PROMPT = r"\r?\nmininet> "
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
BRING_UP_TIMEOUT = 420.0  # a loaded 2-core machine: switch, controller, clamd and SPMs
COMMAND_TIMEOUT = 120.0
STOP_TIMEOUT = 180.0


def _start_time(pid: int) -> str | None:
    """The start time of process `pid` (to tell it from a later process with its PID)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


@dataclass(frozen=True, slots=True)
class Process:
    started: str | None  # the start time in /proc/PID/stat
    command: str


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


class Console:
    """`make run` on a pseudo-terminal."""

    def __init__(self, target: str, run_dir: Path, home: Path, spec: TopologySpec) -> None:
        self.spec = spec
        self.run_dir = run_dir
        makefile = home / "Makefile"
        # The recipe of `make run` (without its `setup` prerequisite), with a run folder apart.
        makefile.write_text(".PHONY: run\nrun:\n\t$(PY) -m topo run --run-dir $(RUN_DIR)\n")
        env = {**os.environ, "TARGET": target, "TERM": "dumb", "HOME": str(home)}
        self.child = pexpect.spawn(
            "make",
            ["-s", "-f", str(makefile), "run", f"PY={sys.executable}", f"RUN_DIR={run_dir}"],
            cwd=str(repo_root()),
            env=env,
            encoding="utf-8",
            codec_errors="replace",
            dimensions=(50, 250),
            timeout=COMMAND_TIMEOUT,
            # Started as a script's background job is (a CI job, say): with SIGINT ignored,
            # which the CLI must take back for Ctrl-C to reach the host commands.
            preexec_fn=_ignore_sigint,
        )
        self.log = (home / "console.log").open("a")
        self.child.logfile_read = self.log
        self.banner = self.expect(PROMPT, BRING_UP_TIMEOUT)
        self.exit_status: int | None = None

    # -- typing -------------------------------------------------------------------------------

    def expect(self, pattern: str | Sequence[str], timeout: float = COMMAND_TIMEOUT) -> str:
        """Wait for `pattern` (a regex); the output before it, with plain newlines."""
        self.child.expect(pattern, timeout=timeout)
        return ANSI.sub("", str(self.child.before)).replace("\r\n", "\n")

    def command(self, line: str, timeout: float = COMMAND_TIMEOUT) -> str:
        """Type `line`, wait for the next prompt; what the command printed (without the echo)."""
        self.child.sendline(line)
        text = self.expect(PROMPT, timeout)
        echo, _, printed = text.partition("\n")
        assert echo.strip() == line, f"expected the echo of {line!r}, got {echo!r}"
        return printed

    def type(self, line: str) -> None:
        """Type `line` without waiting for anything."""
        self.child.sendline(line)

    def ctrl_c(self) -> None:
        self.child.sendcontrol("c")

    # -- the end ------------------------------------------------------------------------------

    def processes(self) -> dict[int, Process]:
        """Every process of the session now (make, the topology and all they started)."""
        pids = [self.child.pid, *descendants(self.child.pid)]
        return {pid: Process(_start_time(pid), _command_line(pid)) for pid in pids}

    def finish(self, keys: str) -> int:
        """Type `keys` (a line, or '^D' for Ctrl-D) that should end the session; wait for make
        to exit and return its exit status."""
        if keys == "^D":
            self.child.sendeof()
        else:
            self.child.sendline(keys)
        self.child.expect(pexpect.EOF, timeout=STOP_TIMEOUT)
        self.child.close()
        assert self.child.signalstatus is None, (
            f"make was killed by signal {self.child.signalstatus}"
        )
        self.exit_status = self.child.exitstatus
        return int(self.exit_status or 0)

    def close(self) -> None:
        """Stop whatever is left, by PID: the topology with SIGTERM (it cleans up), then SIGKILL
        for anything still there after STOP_TIMEOUT; then delete leftover links."""
        if self.child.isalive():
            left = self.processes()
            for pid in _children(self.child.pid):  # python -m topo (make runs it directly)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            with contextlib.suppress(pexpect.TIMEOUT, pexpect.EOF):
                self.child.expect(pexpect.EOF, timeout=STOP_TIMEOUT)
            for pid in still_running(left):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.child.close(force=True)
        for name in interfaces_in_use(self.spec):
            delete_link(name)
        self.log.close()


def still_running(processes: dict[int, Process]) -> list[int]:
    """The PIDs among a Console.processes() snapshot that still run the same process."""
    return [
        pid
        for pid, process in processes.items()
        if process.started is not None and _start_time(pid) == process.started
    ]


# -- the README's transcript --------------------------------------------------------------------

TRANSCRIPT_MARK = "<!-- transcript: tests/e2e/test_mininet_cli.py replays it -->"
ELISION = "..."


@dataclass(frozen=True, slots=True)
class Step:
    command: str
    expected: tuple[str, ...]  # output lines; "..." stands for any number of lines


def readme_transcript(readme: Path) -> list[Step]:
    """The indented block that follows TRANSCRIPT_MARK in the README, as commands and outputs."""
    lines = readme.read_text().splitlines()
    start = lines.index(TRANSCRIPT_MARK) + 1
    while not lines[start].strip():
        start += 1
    block: list[str] = []
    for line in lines[start:]:
        if line.strip() and not line.startswith("    "):
            break
        block.append(line[4:])
    while block and not block[-1].strip():
        block.pop()
    steps: list[Step] = []
    for line in block:
        if line.startswith("mininet> "):
            steps.append(Step(line.removeprefix("mininet> "), ()))
        elif steps:
            steps[-1] = Step(steps[-1].command, (*steps[-1].expected, line))
        else:
            raise ValueError(f"the transcript must start with a command, not {line!r}")
    return steps


_TOKENS = re.compile(r"(\d{1,3}(?:\.\d{1,3}){3})|(\d+(?:\.\d+)?)|(\s+)|(.)")


def line_pattern(expected: str) -> re.Pattern[str]:
    """A transcript line as a regex: numbers (times, counts, ports, ids) stand for any number,
    IPv4 addresses and everything else for themselves; runs of spaces for any run of spaces."""
    parts = []
    for address, number, space, other in _TOKENS.findall(expected.rstrip()):
        if address:
            parts.append(re.escape(address))
        elif number:
            parts.append(r"\d+(?:\.\d+)?")
        elif space:
            parts.append(r"\s+")
        else:
            parts.append(re.escape(other))
    return re.compile("".join(parts))


def matches(expected: Sequence[str], actual: Sequence[str]) -> bool:
    """Whether the output lines `actual` are the transcript lines `expected`, line by line, an
    ELISION line standing for any number of lines."""
    if not expected:
        return not actual
    if expected[0].strip() == ELISION:
        return any(matches(expected[1:], actual[i:]) for i in range(len(actual) + 1))
    return (
        bool(actual)
        and line_pattern(expected[0]).fullmatch(actual[0].rstrip()) is not None
        and matches(expected[1:], actual[1:])
    )
