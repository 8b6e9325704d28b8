"""`opengate spm ...`: run the SPM daemon and check its inputs.

    opengate spm run --config spm.yaml       the daemon (until SIGTERM/SIGINT)
    opengate spm ipsec --config ipsec.yaml   the IPsec SPM daemon (spm/ipsec/service.py)
    opengate spm check-config spm.yaml       validate a configuration file
    opengate spm rules-check RULES...        load Snort rules; list those the built-in engine
                                             cannot run, with the option and place
    opengate spm cleanup --config spm.yaml   remove the kernel plumbing a crashed run left
    opengate spm replay FILE.pcap [--rules RULES ...] [--var NAME=VALUE ...] [--config spm.yaml]
                        [--engine builtin|snort] [--eve OUT.json]
                                             inspect a capture offline; alerts as EVE JSON
                                             (stdout by default), a summary on stderr
    opengate spm corpus RULES... --out FILE.pcap [--seed N] [--benign N] [--ipv6] [--compare]
                                             a capture with a flow that should fire each rule;
                                             --compare replays it with both engines (Snort 3
                                             needed) and lists where they differ

Also `python -m spm ...`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from opengate.errors import ConfigError
from spm.config import load_config
from spm.corpus import compare, flow_ids, generate
from spm.daemon import SpmDaemon
from spm.eve import EveLog
from spm.ips.loader import build_detector, load_ruleset
from spm.ips.snort import SnortDaemon, find_snort
from spm.nft import Plan, Plumbing
from spm.replay import ENGINES, find_snort_binary, replay, replay_config

LOG = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("spm", help="the SPM inspection daemon")
    sub = parser.add_subparsers(dest="spm_command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run the SPM daemon")
    run.add_argument("--config", type=Path, required=True, help="the SPM's YAML configuration")
    run.set_defaults(handler=_run)

    ipsec = sub.add_parser("ipsec", help="run the IPsec SPM daemon (charon over VICI)")
    ipsec.add_argument("--config", type=Path, required=True, help="the IPsec SPM's YAML")
    ipsec.set_defaults(handler=_ipsec)

    check = sub.add_parser("check-config", help="validate a configuration file")
    check.add_argument("config", type=Path, help="the SPM's YAML configuration")
    check.set_defaults(handler=_check_config)

    rules = sub.add_parser("rules-check", help="load Snort rules and report unsupported ones")
    rules.add_argument("rules", type=Path, nargs="+", help="Snort 3 rule files")
    rules.add_argument(
        "--var", action="append", default=[], metavar="NAME=VALUE", help="a rule variable"
    )
    rules.add_argument("--all", action="store_true", help="also rules commented out with '#'")
    rules.add_argument("--verbose", "-v", action="store_true", help="list every unsupported rule")
    rules.set_defaults(handler=_rules_check)

    cleanup = sub.add_parser("cleanup", help="remove plumbing left by a crashed run")
    cleanup.add_argument(
        "--config", type=Path, required=True, help="the configuration of the run that crashed"
    )
    cleanup.set_defaults(handler=_cleanup)

    rep = sub.add_parser(
        "replay",
        help="inspect a capture file offline; alerts as EVE JSON",
        description="Run the SPM's inspection over a capture file (pcap or pcapng; Ethernet, "
        "one 802.1Q tag, or raw IP; IPv4 and IPv6), one worker, the packets' capture times "
        "as its clock. "
        "Alerts are written as the daemon's EVE records; a summary goes to stderr. The AV is "
        "off, even when the configuration enables it (no clamd offline). Exit status: 0 done; "
        "1 the file is damaged (the alerts up to the damage are written) or Snort failed; 2 bad "
        "input (no such file, not a capture, unknown link type or rules file).",
    )
    rep.add_argument("pcap", type=Path, metavar="FILE", help="the capture (pcap or pcapng)")
    rep.add_argument(
        "--rules", type=Path, nargs="+", action="extend", default=[], help="Snort 3 rule files"
    )
    rep.add_argument(
        "--var",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a rule variable (HOME_NET and EXTERNAL_NET default to any)",
    )
    rep.add_argument(
        "--config",
        type=Path,
        metavar="SPM.YAML",
        help="an SPM configuration: its rules, variables and limits",
    )
    rep.add_argument(
        "--engine",
        choices=ENGINES,
        default="builtin",
        help="builtin (default), or snort: Snort 3 reads the file (snort on PATH, else under "
        "$SNORT_PREFIX or /opt/snort)",
    )
    rep.add_argument(
        "--eve",
        type=Path,
        metavar="OUT.JSON",
        help="write the EVE records to this file (replaced; default stdout)",
    )
    rep.set_defaults(handler=_replay)

    corpus = sub.add_parser(
        "corpus",
        help="write a capture that should fire each rule; compare the engines on it",
        description="Write a capture with one flow per rule the generator can satisfy (its "
        "contents, pcres, lengths placed in the buffers they name, HTTP rules as well-formed "
        "requests and responses), then benign web flows; with --ipv6 every flow is IPv6. "
        "With --compare, replay it with the "
        "built-in engine and with Snort 3 and print the (flow, sid) alerts only one raised. "
        "Exit status: 0 done (with --compare: the engines agree); 1 they differ; 2 bad input.",
    )
    corpus.add_argument("rules", type=Path, nargs="+", help="Snort 3 rule files")
    corpus.add_argument(
        "--out", type=Path, required=True, metavar="FILE.pcap", help="the capture to write"
    )
    corpus.add_argument("--seed", type=int, default=0, help="varies what the rules leave open")
    corpus.add_argument("--benign", type=int, default=50, help="benign flows (default 50)")
    corpus.add_argument(
        "--ipv6", action="store_true", help="IPv6 flows (2001:db8::/32) instead of IPv4"
    )
    corpus.add_argument("--compare", action="store_true", help="replay with both engines")
    corpus.set_defaults(handler=_corpus)


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


def _variables(items: list[str]) -> dict[str, str]:
    variables: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--var {item!r}: expected NAME=VALUE")
        variables[name] = value
    return variables


def _rules_check(args: argparse.Namespace) -> int:

    variables = _variables(args.var)
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


def _replay(args: argparse.Namespace) -> int:
    cfg = replay_config(args.config, args.rules, _variables(args.var))
    snort = ""
    if args.engine == "snort":
        snort = find_snort_binary() or ""
        if not snort:
            raise ConfigError(
                "--engine snort: snort (Snort 3) is not installed (not on PATH, nor under "
                "$SNORT_PREFIX or /opt/snort)"
            )
    if args.eve is None:
        eve = EveLog("<stdout>", cfg.name, stream=sys.stdout)
    else:
        try:
            out = args.eve.open("w", encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"cannot write the EVE file: {exc.strerror}", path=str(args.eve)
            ) from None
        eve = EveLog(args.eve, cfg.name, stream=out)
    try:
        stats = replay(args.pcap, cfg, eve, args.engine, snort)
    finally:
        eve.close()
        if args.eve is not None:
            out.close()
    print(stats.summary(), file=sys.stderr)
    if stats.incomplete is not None:
        print(f"spm: replay incomplete: {stats.incomplete}", file=sys.stderr)
        return 1
    return 0


def _corpus(args: argparse.Namespace) -> int:
    snort = ""
    if args.compare:
        snort = find_snort_binary() or ""
        if not snort:
            raise ConfigError("--compare: snort (Snort 3) is not installed")
    ruleset = load_ruleset([str(p) for p in args.rules], {})
    made = generate(ruleset, args.seed, args.benign, family=6 if args.ipv6 else 4)
    size = made.write_pcap(args.out)
    skipped = ", ".join(f"{why} {n}" for why, n in made.skipped.most_common())
    benign = len(made.flows) - len(made.rule_flows)
    print(
        f"{args.out}: {len(made.rule_flows)} rule flows and {benign} benign, {size} bytes of "
        f"IP; rules not generated: {sum(made.skipped.values())}"
        + (f" ({skipped})" if skipped else "")
    )
    if not args.compare:
        return 0
    result = compare(made, args.out, args.rules, snort)
    print(result.summary())
    flows = flow_ids(made)
    for label, items in (
        ("built-in only", result.builtin_only),
        ("Snort only", result.snort_only),
        ("neither", result.neither),
    ):
        for cid, sid in sorted(items, key=lambda x: x[1]):
            f = flows.get(cid)
            where = f"flow of sid {f.sid}" if f and f.sid else "benign flow" if f else "?"
            print(f"  {label}: sid {sid} on {where} {cid}")
    return 0 if not (result.builtin_only or result.snort_only) else 1


def _ipsec(args: argparse.Namespace) -> int:
    from spm.ipsec.service import run  # noqa: PLC0415 (vici only where the IPsec SPM runs)

    return run(args.config)


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
