"""`python -m topo` / `opengate topo`: bring up the gateway topology.

    python -m topo run                  # the Mininet CLI on the default topology
    python -m topo run --exec 'h1: curl -s http://198.51.100.20/' \\
                       --exec 'h2: ping -c1 198.51.100.20'

With --exec, each command runs on its host in order, its output is printed, and the exit status is
that of the first command that failed (0 if none did); --exec-timeout SECONDS stops a command that
runs longer (exit 124; no limit by default). Everything started is stopped on exit, SIGTERM too:
the command still running, with its process group, and what the commands left in the background.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from topo.cli import add_arguments, handle


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m topo", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    add_arguments(sub.add_parser("run", help="bring up the topology"))
    args = parser.parse_args(argv)
    try:
        return handle(args)
    except KeyboardInterrupt:  # Ctrl-C during bring-up: everything is stopped already
        return 130


if __name__ == "__main__":
    sys.exit(main())
