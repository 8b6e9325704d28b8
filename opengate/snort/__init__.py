"""Snort 3 rules: the file parser shared by the controller (IDS headers) and the SPM (IPS)."""

from opengate.snort.rules import (
    ParsedRules,
    RawRule,
    RuleOption,
    parse_rule,
    parse_rules_file,
    parse_rules_text,
    unquote,
)

__all__ = [
    "ParsedRules",
    "RawRule",
    "RuleOption",
    "parse_rule",
    "parse_rules_file",
    "parse_rules_text",
    "unquote",
]
