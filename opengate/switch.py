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

from opengate.netutil import free_tcp_port, stop_process, wait_for_port
from opengate.target import Target, TargetChoice, select_target

LOG = logging.getLogger(__name__)

CPU_PORT = 255


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
    """Start the switch and return once its gRPC port accepts connections."""
    choice = choice or select_target()
    port = free_tcp_port()
    address = f"127.0.0.1:{port}"
    extra: tuple[str, ...] = ()
    if choice.target is Target.BMV2 and _bmv2_has_thrift(choice.command[0]):
        # A BMv2 built with Thrift also opens port 9090 by default; give each instance its own.
        extra = ("--thrift-port", str(free_tcp_port()))
    argv = switch_command(choice, ports, address, device_id, extra=extra)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    LOG.info("starting %s: %s", choice.target.value, " ".join(argv))
    with log_path.open("wb") as log:
        # Its own session: a Ctrl-C typed at a terminal program (the Mininet CLI) is not for the
        # switch; whoever started it stops it by PID.
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_for_port("127.0.0.1", port, ready_timeout, process)
    except BaseException:
        stop_process(process)
        raise
    return RunningSwitch(choice.target, address, process, log_path)


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
