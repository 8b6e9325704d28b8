"""The Snort 3 rules-file parser: records, comments, multi-line rules, quoting, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from opengate.errors import ConfigError
from opengate.snort.rules import RuleOption, parse_rule, parse_rules_file, parse_rules_text, unquote


@pytest.fixture(scope="module")
def community(shared_data: Path) -> Path:
    path = shared_data / "snort" / "snort3-community.rules"
    if not path.is_file():
        pytest.skip(f"Snort community rules missing: {path}")
    return path


def test_community_rules_parse_completely(community: Path) -> None:
    enabled = parse_rules_file(community)
    everything = parse_rules_file(community, include_commented=True)
    assert len(enabled.rules) == 829
    assert all(rule.enabled for rule in enabled.rules)
    assert len(everything.rules) == 3488
    assert sum(not rule.enabled for rule in everything.rules) == 2659
    assert not everything.errors
    assert all(rule.option("sid") is not None for rule in everything.rules)


def test_rule_records_file_line_header_and_options(community: Path) -> None:
    first = parse_rules_file(community, include_commented=True).rules[0]
    assert (first.path, first.line, first.enabled) == (str(community), 18, False)
    assert (first.action, first.proto, first.src, first.src_ports) == (
        "alert", "tcp", "$HOME_NET", "2589",
    )  # fmt: skip
    assert (first.direction, first.dst, first.dst_ports) == ("->", "$EXTERNAL_NET", "any")
    assert first.options[0] == RuleOption("msg", '"MALWARE-BACKDOOR - Dagger_1.4.0"')
    assert first.option("sid") == RuleOption("sid", "105")
    assert first.text.startswith("alert tcp $HOME_NET 2589")


def test_commented_rules_are_skipped_unless_asked() -> None:
    text = (
        "# a comment\n#alert tcp any any -> any any (sid:1;)\n"
        "alert udp any any -> any 53 (sid:2;)\n"
    )
    assert [r.option("sid") for r in parse_rules_text(text).rules] == [RuleOption("sid", "2")]
    both = parse_rules_text(text, include_commented=True).rules
    assert [(r.line, r.enabled) for r in both] == [(2, False), (3, True)]


def test_prose_comments_that_start_with_an_action_word_are_not_rules() -> None:
    text = "# alert on everything below\n# drop me a line\nalert ip any any -> any any (sid:1;)\n"
    assert len(parse_rules_text(text, include_commented=True).rules) == 1


def test_quoted_semicolons_quotes_and_escapes_stay_in_option_values() -> None:
    rule = parse_rule(
        r'alert tcp any any -> any 80 (msg:"a; b \"c\""; content:"x\;y"; pcre:"/a\)b/"; sid:9;)'
    )
    assert [o.name for o in rule.options] == ["msg", "content", "pcre", "sid"]
    assert rule.options[0].value == r'"a; b \"c\""'
    assert rule.options[1].value == r'"x\;y"'
    assert unquote(rule.options[0].value or "") == 'a; b "c"'


def test_bare_keywords_have_no_value() -> None:
    rule = parse_rule('alert tcp any any -> any any (content:"a"; nocase; sid:1;)')
    assert rule.options[1] == RuleOption("nocase", None)


def test_rules_continue_over_lines_with_backslash_or_open_option_list() -> None:
    text = (
        "alert tcp any any -> any 80 ( \\\n"
        '    msg:"two"; \\\n'
        "    sid:1; )\n"
        "alert tcp any any -> any 81 (\n"
        '    msg:"open paren";\n'
        "    sid:2;\n"
        ")\n"
        "# alert tcp any any -> any 82 (\n"
        "#    sid:3; )\n"
    )
    rules = parse_rules_text(text, include_commented=True).rules
    assert [(r.line, r.dst_ports, r.enabled) for r in rules] == [
        (1, "80", True), (4, "81", True), (8, "82", False),
    ]  # fmt: skip
    assert rules[1].option("msg") == RuleOption("msg", '"open paren"')


def test_header_lists_with_spaces_stay_one_field() -> None:
    rule = parse_rule(
        "alert tcp [10.0.0.0/8, 192.168.0.0/16] any <> any [$HTTP_PORTS, 443] (sid:1;)"
    )
    assert rule.src == "[10.0.0.0/8, 192.168.0.0/16]"
    assert rule.direction == "<>"
    assert rule.dst_ports == "[$HTTP_PORTS, 443]"


def test_service_and_protocol_less_rules_have_no_header() -> None:
    service = parse_rule('alert http (msg:"x"; sid:1;)')
    assert (service.proto, service.src, service.direction, service.has_header) == (
        "http", None, None, False,
    )  # fmt: skip
    bare = parse_rule("alert (gid:116; sid:1;)")
    assert bare.proto is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("alrt tcp any any -> any any (sid:1;)", "unknown rule action"),
        ("alert tcp any any => any any (sid:1;)", "unknown direction"),
        ("alert tcp any any any any (sid:1;)", "malformed rule header"),
        ('alert tcp any any -> any any (msg:"open; sid:1;)', "not closed"),
        ("alert tcp any any -> any any sid:1;", "not closed"),
        ("alert tcp any any -> any any (bad name:1;)", "malformed rule option"),
    ],
)
def test_errors_name_file_and_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_rules_text("\n\n" + text + "\n", path="local.rules")
    assert message in str(info.value)
    assert str(info.value).startswith("local.rules:3:")


def test_lenient_parsing_reports_bad_rules_and_keeps_the_good_ones() -> None:
    text = "alert tcp any any -> any any (sid:1;)\nalrt x\nalert udp any any -> any any (sid:2;)\n"
    parsed = parse_rules_text(text, path="x.rules", strict=False)
    assert len(parsed.rules) == 2
    assert [(e.path, e.line) for e in parsed.errors] == [("x.rules", 2)]


def test_an_unclosed_rule_does_not_swallow_the_next_one() -> None:
    text = 'alert tcp any any -> any any (msg:"x";\nalert udp any any -> any any (sid:2;)\n'
    parsed = parse_rules_text(text, path="x.rules", strict=False)
    assert [r.line for r in parsed.rules] == [2]
    assert [e.line for e in parsed.errors] == [1]


def test_include_reads_files_relative_to_the_including_one(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "more.rules").write_text("alert udp any any -> any 53 (sid:2;)\n")
    main = tmp_path / "main.rules"
    main.write_text("alert tcp any any -> any 80 (sid:1;)\ninclude sub/more.rules\n")
    rules = parse_rules_file(main).rules
    assert [(Path(r.path).name, r.line) for r in rules] == [("main.rules", 1), ("more.rules", 1)]


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read rules file"):
        parse_rules_file(tmp_path / "nope.rules")
