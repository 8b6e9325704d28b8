"""`opengate spm ...`: run the SPM daemon and check its inputs.

    opengate spm run --config spm.yaml       the daemon (until SIGTERM/SIGINT)
    opengate spm check-config spm.yaml       validate a configuration file
    opengate spm rules-check RULES...        load Snort rules; list those the built-in engine
                                             cannot run, with the option and place
    opengate spm cleanup --config spm.yaml   remove the kernel plumbing a crashed run left

Also `python -m spm ...`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from opengate.errors import ConfigError
from spm.config import load_config
from spm.daemon import SpmDaemon
from spm.ips.loader import build_detector, load_ruleset
from spm.ips.snort import SnortDaemon, find_snort
from spm.nft import Plan, Plumbing

LOG = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("spm", help="the SPM inspection daemon")
    sub = parser.add_subparsers(dest="spm_command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run the SPM daemon")
    run.add_argument("--config", type=Path, required=True, help="the SPM's YAML configuration")
    run.set_defaults(handler=_run)

    check = sub.add_parser("check-config", help="validate a configuration file")
    check.add_argument("config", type=Path)
    check.set_defaults(handler=_check_config)

    rules = sub.add_parser("rules-check", help="load Snort rules and report unsupported ones")
    rules.add_argument("rules", type=Path, nargs="+")
    rules.add_argument(
        "--var", action="append", default=[], metavar="NAME=VALUE", help="a rule variable"
    )
    rules.add_argument("--all", action="store_true", help="also rules commented out with '#'")
    rules.add_argument("--verbose", "-v", action="store_true", help="list every unsupported rule")
    rules.set_defaults(handler=_rules_check)

    cleanup = sub.add_parser("cleanup", help="remove plumbing left by a crashed run")
    cleanup.add_argument("--config", type=Path, required=True)
    cleanup.set_defaults(handler=_cleanup)


def _run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    snort = find_snort(cfg)
    if snort is not None:
        return SnortDaemon(cfg, snort).run()
    return SpmDaemon(cfg, build_detector(cfg)).run()


def _check_config(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    print(
        f"{args.config}: ok (spm {cfg.name} on {cfg.interface}, {len(cfg.tags)} tags, "
        f"{cfg.workers} workers, dispatch {cfg.dispatch})"
    )
    return 0


def _rules_check(args: argparse.Namespace) -> int:

    variables: dict[str, str] = {}
    for item in args.var:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--var {item!r}: expected NAME=VALUE")
        variables[name] = value
    ruleset = load_ruleset([str(p) for p in args.rules], variables, include_disabled=args.all)
    report = ruleset.report
    commented = (
        f"{report.disabled} of them commented out in the file"
        if args.all
        else "rules commented out in the file not read (--all reads them)"
    )
    print(f"{report.loaded} rules loaded, {len(report.unsupported)} not supported; {commented}")
    for option, count in report.unsupported_by_option().most_common():
        print(f"  {count:5d}  {option}")
    if args.verbose:
        for item in report.unsupported:
            print(f"{item.path}:{item.line}: sid {item.sid}: {item.option}: {item.reason}")
    return 0


def _cleanup(args: argparse.Namespace) -> int:

    cfg = load_config(args.config)
    found = Plumbing(Plan.from_config(cfg)).cleanup_stale()
    print("removed leftovers" if found else "nothing to remove")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m spm`: the same subcommands without the rest of `opengate`."""

    parser = argparse.ArgumentParser(prog="python -m")  # usage: "python -m spm run ..."
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    argv = list(sys.argv[1:] if argv is None else argv)
    level = "info"
    if "--log-level" in argv:  # accepted anywhere on the line
        i = argv.index("--log-level")
        level = argv[i + 1] if i + 1 < len(argv) else level
        del argv[i : i + 2]
    args = parser.parse_args(["spm", *argv])
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        code: int = args.handler(args)
    except ConfigError as exc:
        print(f"spm: error: {exc}", file=sys.stderr)
        return 2
    return code
