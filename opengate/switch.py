"""Start the selected data-plane target (BMv2 or the built-in switch) on given interfaces.

Both take the same command line: `-i N@IFACE ... --no-p4 -- --grpc-server-addr ADDR --cpu-port C`,
and both are ready when their gRPC port accepts connections.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from opengate.netutil import free_tcp_port, listens_on, stop_process, wait_for_port
from opengate.target import Target, TargetChoice, select_target

LOG = logging.getLogger(__name__)

CPU_PORT = 255
PORT_ATTEMPTS = 3  # starts of a switch whose gRPC port another process took first


@dataclass(slots=True)
class RunningSwitch:
    target: Target
    grpc_address: str
    process: subprocess.Popen[bytes]
    log_path: Path


@functools.cache
def _bmv2_has_thrift(binary: str) -> bool:
    result = subprocess.run([binary, "--help"], capture_output=True, text=True, check=False)
    return "--thrift-port" in result.stdout


def switch_command(
    choice: TargetChoice,
    ports: Mapping[int, str],
    grpc_address: str,
    device_id: int = 1,
    cpu_port: int = CPU_PORT,
    extra: tuple[str, ...] = (),
) -> list[str]:
    argv = [*choice.command, "--device-id", str(device_id)]
    for number, iface in sorted(ports.items()):
        argv += ["-i", f"{number}@{iface}"]
    argv += [
        *extra,
        "--no-p4",
        "--",
        "--grpc-server-addr",
        grpc_address,
        "--cpu-port",
        str(cpu_port),
    ]
    return argv


def start_switch(
    ports: Mapping[int, str],
    log_path: Path,
    choice: TargetChoice | None = None,
    device_id: int = 1,
    ready_timeout: float = 60.0,
) -> RunningSwitch:
    """Start the switch and return once its gRPC port accepts connections, its own.

    A free port is picked before the switch binds it, so another process may take it between
    the two: the switch then exits (it could not bind) or, worse, something else answers on the
    port. Either way the switch is started again on another port (PORT_ATTEMPTS in all)."""
    choice = choice or select_target()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, PORT_ATTEMPTS + 1):
        port = free_tcp_port()
        address = f"127.0.0.1:{port}"
        extra: tuple[str, ...] = ()
        if choice.target is Target.BMV2 and _bmv2_has_thrift(choice.command[0]):
            # A BMv2 built with Thrift also opens port 9090 by default; give each its own.
            extra = ("--thrift-port", str(free_tcp_port()))
        argv = switch_command(choice, ports, address, device_id, extra=extra)
        LOG.info("starting %s: %s", choice.target.value, " ".join(argv))
        with log_path.open("wb") as log:
            # Its own session: a Ctrl-C typed at a terminal program (the Mininet CLI) is not for
            # the switch; whoever started it stops it by PID.
            process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            wait_for_port("127.0.0.1", port, ready_timeout, process)
            if listens_on(process.pid, port) is not False:
                return RunningSwitch(choice.target, address, process, log_path)
            error = RuntimeError(f"another process listens on the switch's port {port}")
        except RuntimeError as exited:  # it exited before listening
            error = exited
        except BaseException:
            stop_process(process)
            raise
        stop_process(process)
        if attempt == PORT_ATTEMPTS:
            raise error
        LOG.warning("%s; starting the switch again on another port (see %s)", error, log_path)
    raise AssertionError("unreachable")


@contextlib.contextmanager
def running_switch(
    ports: Mapping[int, str],
    log_path: Path,
    choice: TargetChoice | None = None,
    device_id: int = 1,
    ready_timeout: float = 60.0,
) -> Iterator[RunningSwitch]:
    """Start the switch, wait for its gRPC port, stop it by PID on exit."""
    switch = start_switch(ports, log_path, choice, device_id, ready_timeout)
    try:
        yield switch
    finally:
        stop_process(switch.process)
