"""The `opengate` command: one entry point, one subcommand per module.

Each module contributes its subcommands through a `register(subparsers)` function; this file only
wires them, so that adding a module does not change the others.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable, Sequence

from opengate.errors import ConfigError

# (subcommand, module that provides `register(subparsers)`)
_MODULES: tuple[tuple[str, str], ...] = (
    ("hsm", "controller.hsm.cli"),
    ("controller", "controller.cli"),
    ("spm", "spm.cli"),
    ("topo", "topo.cli"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="opengate", description=__doc__.splitlines()[0])
    parser.add_argument("--log-level", default="warning", help="debug, info, warning, error")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for _name, module_name in _MODULES:
        module = importlib.import_module(module_name)
        register: Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]
        register = module.register
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except ConfigError as exc:
        print(f"opengate: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
