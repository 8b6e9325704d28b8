"""The `topo run` command, shared by `python -m topo` and `opengate topo`."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
from pathlib import Path
from types import FrameType

from opengate.errors import ConfigError
from opengate.target import P4_BUILDS, repo_root
from topo.console import GatewayCLI, foreground_group
from topo.model import load_topology
from topo.net import GatewayNetwork

LOG = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--topology",
        type=Path,
        default=repo_root() / "topo" / "gateway.yaml",
        help="the topology file (YAML)",
    )
    parser.add_argument(
        "--run-dir",
        type=Path,
        default=repo_root() / "run" / "topo",
        help="logs, the controller's database and API token",
    )
    parser.add_argument(
        "--build",
        default="default",
        choices=sorted(P4_BUILDS),
        help="the P4 build to run: compact gives the classifier's chain tables a sixteenth of "
        "the entries (BMv2 takes 0.8 GB a switch instead of 3.8; docs/howto/bmv2.md)",
    )
    parser.add_argument(
        "--exec",
        dest="commands",
        action="append",
        default=[],
        metavar="HOST: COMMAND",
        help="run COMMAND on HOST and exit (repeatable, in order)",
    )
    parser.add_argument(
        "--exec-timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="stop an --exec command (and what it started) after SECONDS; it then exits 124, "
        "as with timeout(1) (default: no limit)",
    )
    parser.set_defaults(handler=handle)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("topo", help="the Mininet topology")
    sub = parser.add_subparsers(dest="topo_command", required=True)
    add_arguments(sub.add_parser("run", help="bring up the topology (CLI, or --exec and exit)"))


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"a number of seconds above 0, not {text!r}")
    return value


def _parse_command(text: str) -> tuple[str, str]:
    host, sep, command = text.partition(":")
    if not sep or not host.strip() or not command.strip():
        raise ConfigError(f"--exec {text!r}: expected 'HOST: COMMAND'")
    return host.strip(), command.strip()


def _terminate(signum: int, _frame: FrameType | None) -> None:
    """SIGTERM, or SIGHUP (the terminal went away): stop everything (the --exec command still
    running too, with its process group), exit 128 + the signal."""
    raise SystemExit(128 + signum)


def handle(args: argparse.Namespace) -> int:
    commands = [_parse_command(text) for text in args.commands]
    spec = load_topology(args.topology, root=repo_root())
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _terminate)
    interactive = not commands
    if interactive:
        # Ctrl-C belongs to the CLI (it passes it on to the host command it waits for), even when
        # the parent started it with SIGINT ignored (a background job of a script, as a CI job
        # may be): Python leaves an ignored SIGINT ignored, and the host shells would inherit it.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    network = GatewayNetwork(spec, args.run_dir, p4_build=args.build)
    # The CLI owns the terminal's Ctrl-C from bring-up to the end of the clean-up.
    with foreground_group(sys.stdin) if interactive else contextlib.nullcontext():
        try:
            network.start()
            build = "" if args.build == "default" else f", {args.build} build"
            print(f"topology {spec.name} is up on {network.target.target.value}{build}")
            token = args.run_dir / "api-token"
            print(f"  controller REST API: http://{network.api_address}/  (token in {token})")
            print(f"  web console: http://{network.api_address}/console/  (log in with the token)")
            print(f"  logs: {args.run_dir}/")
            if interactive:
                print("  Mininet CLI: 'help' lists the commands, 'exit' or Ctrl-D stops everything")
                sys.stdout.flush()
                GatewayCLI(network)
                return 0
            status = 0
            for host, command in commands:
                result = network.run(host, command, timeout=args.exec_timeout)
                print(f"--- {host}$ {command}  (exit {result.returncode})")
                print(result.output, end="" if result.output.endswith("\n") else "\n")
                if result.returncode != 0 and status == 0:
                    status = result.returncode
            return status
        finally:
            # A second Ctrl-C or signal must not cut the clean-up short.
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(signum, signal.SIG_IGN)
            network.stop()
