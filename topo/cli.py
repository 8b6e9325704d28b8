"""The `topo run` command, shared by `python -m topo` and `opengate topo`."""

from __future__ import annotations

import argparse
import logging
import signal
from pathlib import Path
from types import FrameType

from mininet.cli import CLI

from opengate.errors import ConfigError
from opengate.target import repo_root
from topo.model import load_topology
from topo.net import GatewayNetwork

LOG = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topology", type=Path, default=repo_root() / "topo" / "gateway.yaml")
    parser.add_argument(
        "--run-dir",
        type=Path,
        default=repo_root() / "run" / "topo",
        help="logs, the controller's database and API token",
    )
    parser.add_argument(
        "--exec",
        dest="commands",
        action="append",
        default=[],
        metavar="HOST: COMMAND",
        help="run COMMAND on HOST and exit (repeatable, in order)",
    )
    parser.set_defaults(handler=handle)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("topo", help="the Mininet topology")
    sub = parser.add_subparsers(dest="topo_command", required=True)
    add_arguments(sub.add_parser("run", help="bring up the topology (CLI, or --exec and exit)"))


def _parse_command(text: str) -> tuple[str, str]:
    host, sep, command = text.partition(":")
    if not sep or not host.strip() or not command.strip():
        raise ConfigError(f"--exec {text!r}: expected 'HOST: COMMAND'")
    return host.strip(), command.strip()


def _terminate(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def handle(args: argparse.Namespace) -> int:
    commands = [_parse_command(text) for text in args.commands]
    spec = load_topology(args.topology, root=repo_root())
    signal.signal(signal.SIGTERM, _terminate)
    with GatewayNetwork(spec, args.run_dir) as network:
        print(f"topology {spec.name} is up on {network.target.target.value}")
        token = args.run_dir / "api-token"
        print(f"  controller REST API: http://{network.api_address}/  (token in {token})")
        print(f"  logs: {args.run_dir}/")
        if not commands:
            CLI(network.net)
            return 0
        status = 0
        for host, command in commands:
            result = network.run(host, command)
            print(f"--- {host}$ {command}  (exit {result.returncode})")
            print(result.output, end="" if result.output.endswith("\n") else "\n")
            if result.returncode != 0 and status == 0:
                status = result.returncode
        return status
