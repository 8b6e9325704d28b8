"""Which IPS runs, built once in the dispatcher before the workers are forked; and loading rule
files into a `RuleSet`.

Rule files are split into raw rules by `opengate.snort.rules` (the project's one Snort rule file
parser, which names file and line on errors); the built-in engine interprets the options.
`include_disabled` also loads the rules commented out with a leading '#' (the community file
has 829 enabled and 2,659 commented out).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

from opengate.snort.rules import RawRule, parse_rules_file
from spm.config import SpmConfig
from spm.ips.base import Detector
from spm.ips.engine import BuiltinEngine, RuleSet
from spm.ips.options import LoadReport

LOG = logging.getLogger(__name__)


def read_raw_rules(paths: Iterable[str], include_disabled: bool = False) -> list[RawRule]:
    """All rules of the files (a broken file raises ConfigError naming file and line)."""
    rules: list[RawRule] = []
    for path in paths:
        rules.extend(parse_rules_file(path, include_commented=include_disabled).rules)
    return rules


def load_ruleset(
    paths: Sequence[str], variables: Mapping[str, str], include_disabled: bool = False
) -> RuleSet:
    raw = read_raw_rules(paths, include_disabled)
    report = LoadReport(disabled=sum(not r.enabled for r in raw))
    ruleset = RuleSet(raw, variables, report)
    for item in report.unsupported:
        LOG.debug(
            "%s:%d: sid %d not loaded: %s: %s",
            item.path,
            item.line,
            item.sid,
            item.option,
            item.reason,
        )
    if report.unsupported:
        by_option = ", ".join(f"{o} {n}" for o, n in report.unsupported_by_option().most_common())
        LOG.warning(
            "IPS: %d rules not supported and not loaded (by option: %s); "
            "`opengate spm rules-check -v` lists them",
            len(report.unsupported),
            by_option,
        )
    return ruleset


def build_detector(cfg: SpmConfig) -> Detector | None:
    """The built-in engine with the configured rules (None: no IPS). Whether Snort runs instead
    is decided before, by `spm.ips.snort.find_snort`."""
    if not cfg.ips.enabled or not cfg.ips.rules:
        LOG.info("spm %s: no IPS rules configured; IPS off", cfg.name)
        return None
    return BuiltinEngine(load_ruleset(cfg.ips.rules, cfg.ips.variables))
