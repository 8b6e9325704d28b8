"""Snort 3 rules files: read rules into frozen records without interpreting their options.

Shared by the controller's IDS header compiler and the SPM's IPS engine. What it does:

* comments (`#` lines, blank lines); rules commented out with a leading `#` are parsed only when
  asked (`include_commented=True`) and flagged `enabled=False`;
* rules over several lines: a line ending in `\\` continues, and a rule whose option list is
  still open (no closing `)` outside quotes) continues on the next line, as Snort 3 allows;
* the header: `action proto src src_ports direction dst dst_ports`, bracketed lists kept whole
  (`[$HTTP_PORTS, 443]`); service rules (`alert http ( ... )`, `alert file ( ... )`) and
  protocol-less rules (`alert ( ... )`) have no addresses, ports or direction (None);
* the options: split on `;` outside double quotes, `\\;` and `\\"` being escapes; each option is
  a name and its raw value (None for a bare keyword such as `nocase`), quotes and escapes kept;
* `include FILE` lines (relative to the including file);
* every rule and every error carries its file and line (the rule's first line).

What it does not do: check option names or values, resolve variables, or know which options
exist. That is the business of the users (the IDS header compiler, the IPS).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from opengate.errors import ConfigError

LOG = logging.getLogger(__name__)

ACTIONS = frozenset(
    {"alert", "block", "drop", "log", "pass", "react", "reject", "rewrite", "sdrop"}
)
DIRECTIONS = frozenset({"->", "<>"})
_OPTION_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_ErrorFactory = Callable[..., ConfigError]
_COMMENTED_RULE = re.compile(r"^#+\s*(?P<body>(?P<action>[a-z]+)\s+\S.*)$")


@dataclass(frozen=True, slots=True)
class RuleOption:
    name: str
    value: str | None  # raw text after the ':', stripped; None for a bare keyword

    def __str__(self) -> str:
        return self.name if self.value is None else f"{self.name}:{self.value}"


@dataclass(frozen=True, slots=True)
class RawRule:
    path: str
    line: int
    enabled: bool
    action: str
    proto: str | None  # tcp/udp/icmp/ip, a service name (service rule), or None
    src: str | None
    src_ports: str | None
    direction: str | None
    dst: str | None
    dst_ports: str | None
    options: tuple[RuleOption, ...]
    text: str

    @property
    def has_header(self) -> bool:
        return self.src is not None

    def option(self, name: str) -> RuleOption | None:
        """The first option called `name`, if any."""
        for option in self.options:
            if option.name == name:
                return option
        return None

    def options_named(self, name: str) -> tuple[RuleOption, ...]:
        return tuple(o for o in self.options if o.name == name)


@dataclass(frozen=True, slots=True)
class ParsedRules:
    rules: tuple[RawRule, ...]
    errors: tuple[ConfigError, ...]

    @property
    def enabled(self) -> tuple[RawRule, ...]:
        return tuple(r for r in self.rules if r.enabled)


def unquote(value: str) -> str:
    """A quoted option value without its quotes and escapes (`"a\\"b"` -> `a"b`); for users of
    the records (this module never unquotes by itself)."""
    text = value.strip()
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        text = text[1:-1]
    return re.sub(r"\\(.)", r"\1", text)


def parse_rules_file(
    path: str | Path, *, include_commented: bool = False, strict: bool = True
) -> ParsedRules:
    """Parse a rules file. `strict`: raise the first error (a ConfigError naming file and line);
    otherwise skip bad rules and return their errors."""
    return _Parser(include_commented, strict).parse_file(Path(path), ())


def parse_rules_text(
    text: str, *, path: str = "<rules>", include_commented: bool = False, strict: bool = True
) -> ParsedRules:
    return _Parser(include_commented, strict).parse_text(text, path, ())


# -- implementation ----------------------------------------------------------------------------


@dataclass(slots=True)
class _Pending:
    line: int
    enabled: bool
    parts: list[str]
    continued: bool  # the last physical line ended with a backslash


class _Parser:
    def __init__(self, include_commented: bool, strict: bool) -> None:
        self.include_commented = include_commented
        self.strict = strict
        self.rules: list[RawRule] = []
        self.errors: list[ConfigError] = []

    def fail(self, error: ConfigError) -> None:
        if self.strict:
            raise error
        LOG.warning("%s", error)
        self.errors.append(error)

    def parse_file(self, path: Path, stack: tuple[Path, ...]) -> ParsedRules:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise ConfigError(f"cannot read rules file: {exc.strerror}", path=str(path)) from None
        return self.parse_text(text, str(path), (*stack, path.resolve()))

    def parse_text(self, text: str, path: str, stack: tuple[Path, ...]) -> ParsedRules:
        pending: _Pending | None = None
        for number, physical in enumerate(text.splitlines(), start=1):
            line = physical.rstrip()
            stripped = line.strip()
            if pending is not None:
                body = stripped
                if not pending.enabled:
                    # A commented-out rule continues on commented lines only.
                    if not body.startswith("#"):
                        self.fail(_unclosed(path, pending))
                        pending = None
                    else:
                        body = body.lstrip("#").strip()
                if pending is not None:
                    if not pending.continued and _starts_rule(body):
                        self.fail(_unclosed(path, pending))
                        pending = None
                    else:
                        pending = self._extend(pending, body, path)
                        continue
            if not stripped:
                continue
            enabled = True
            body = stripped
            if stripped.startswith("#"):
                match = _COMMENTED_RULE.match(stripped)
                if not (
                    self.include_commented
                    and match
                    and match.group("action") in ACTIONS
                    and "(" in match.group("body")
                ):
                    continue
                enabled = False
                body = match.group("body")
            elif stripped.startswith("include ") or stripped == "include":
                self._include(stripped, path, number, stack)
                continue
            pending = self._extend(_Pending(number, enabled, [], False), body, path)
        if pending is not None:
            self.fail(_unclosed(path, pending))
        return ParsedRules(tuple(self.rules), tuple(self.errors))

    def _extend(self, pending: _Pending, body: str, path: str) -> _Pending | None:
        continued = body.endswith("\\")
        if continued:
            body = body[:-1].rstrip()
        pending.parts.append(body)
        pending.continued = continued
        text = " ".join(p for p in pending.parts if p)
        if continued or not _closed(text):
            return pending
        try:
            self.rules.append(
                parse_rule(text, path=path, line=pending.line, enabled=pending.enabled)
            )
        except ConfigError as error:
            self.fail(error)
        return None

    def _include(self, stripped: str, path: str, number: int, stack: tuple[Path, ...]) -> None:
        target_text = stripped[len("include") :].strip()
        if not target_text:
            self.fail(ConfigError("include needs a file name", path=path, line=number))
            return
        base = Path(path).parent if not path.startswith("<") else Path.cwd()
        target = (base / target_text).resolve()
        if target in stack:
            self.fail(ConfigError(f"include cycle through {target}", path=path, line=number))
            return
        if not target.is_file():
            self.fail(ConfigError(f"included file {target} not found", path=path, line=number))
            return
        self.parse_file(target, stack)


def _starts_rule(body: str) -> bool:
    word = body.split(None, 1)[0] if body.split() else ""
    return word in ACTIONS


def _unclosed(path: str, pending: _Pending) -> ConfigError:
    return ConfigError(
        "rule is not closed: its option list needs a ')' outside quotes",
        path=path,
        line=pending.line,
    )


def _scan(text: str) -> Iterator[tuple[int, str, bool]]:
    """(index, char, inside_quotes) for characters that are not escaped."""
    quoted = False
    escaped = False
    for index, char in enumerate(text):
        if escaped:
            escaped = False
            continue
        if char == "\\":
            escaped = True
            continue
        if char == '"':
            quoted = not quoted
            yield index, char, True
            continue
        yield index, char, quoted


def _closed(text: str) -> bool:
    """True once the option list opened by the first '(' is closed (quote-aware)."""
    depth = 0
    opened = False
    last_close = -1
    for index, char, quoted in _scan(text):
        if quoted:
            continue
        if char == "(":
            depth += 1
            opened = True
        elif char == ")" and opened:
            depth -= 1
            if depth == 0:
                last_close = index
    if not opened or last_close < 0 or depth > 0:
        return False
    return text[last_close + 1 :].strip() == ""


def parse_rule(text: str, *, path: str = "<rule>", line: int = 1, enabled: bool = True) -> RawRule:
    """Parse one complete rule (a single logical line)."""

    def error(message: str, field: str | None = None) -> ConfigError:
        return ConfigError(message, path=path, line=line, field=field)

    open_at = _first_open_paren(text)
    if open_at < 0:
        if "(" in text:
            raise error("unbalanced '[' in the rule header", "header")
        raise error("rule has no option list '( ... )'")
    close_at = text.rstrip().rfind(")")
    if close_at < open_at:
        raise error("rule is not closed: missing ')'")
    header = _split_header(text[:open_at], error)
    body = text[open_at + 1 : close_at]
    if not header:
        raise error("rule has no action")
    action = header[0]
    if action not in ACTIONS:
        known = ", ".join(sorted(ACTIONS))
        raise error(f"unknown rule action {action!r} (known: {known})", "action")
    proto = src = src_ports = direction = dst = dst_ports = None
    if len(header) == 1:
        pass  # `alert ( ... )`: no protocol (builtin/decoder-style rule)
    elif len(header) == 2:
        proto = header[1]  # service rule: `alert http ( ... )`
    elif len(header) == 7:
        proto, src, src_ports, direction, dst, dst_ports = header[1:]
        if direction not in DIRECTIONS:
            raise error(f"unknown direction {direction!r} (use -> or <>)", "direction")
    else:
        raise error(
            f"malformed rule header {' '.join(header)!r}: expected 'action proto src sports "
            "-> dst dports', 'action service' or 'action'",
            "header",
        )
    options = _split_options(body, error)
    return RawRule(
        path=path,
        line=line,
        enabled=enabled,
        action=action,
        proto=proto,
        src=src,
        src_ports=src_ports,
        direction=direction,
        dst=dst,
        dst_ports=dst_ports,
        options=options,
        text=text.strip(),
    )


def _first_open_paren(text: str) -> int:
    depth = 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "(" and depth == 0:
            return index
    return -1


def _split_header(text: str, error: _ErrorFactory) -> list[str]:
    tokens: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise error("unbalanced ']' in the rule header", "header")
        if char.isspace() and depth == 0:
            if current:
                tokens.append("".join(current))
                current = []
            continue
        current.append(char)
    if depth != 0:
        raise error("unbalanced '[' in the rule header", "header")
    if current:
        tokens.append("".join(current))
    return tokens


def _split_options(body: str, error: _ErrorFactory) -> tuple[RuleOption, ...]:
    options: list[RuleOption] = []
    start = 0
    quoted_open = False
    for index, char, quoted in _scan(body):
        if char == '"':
            quoted_open = not quoted_open
            continue
        if char == ";" and not quoted:
            options.append(_option(body[start:index], error))
            start = index + 1
    if quoted_open:
        raise error("unterminated quoted string in the options", "options")
    rest = body[start:].strip()
    if rest:
        options.append(_option(rest, error))  # tolerate a missing final ';'
    return tuple(o for o in options if o.name)


def _option(text: str, error: _ErrorFactory) -> RuleOption:
    text = text.strip()
    if not text:
        return RuleOption("", None)
    colon = -1
    for index, char, quoted in _scan(text):
        if char == ":" and not quoted:
            colon = index
            break
    if colon < 0:
        name, value = text, None
    else:
        name, value = text[:colon].strip(), text[colon + 1 :].strip()
    if not _OPTION_NAME.match(name):
        raise error(f"malformed rule option {text[:40]!r}", "options")
    return RuleOption(name, value)
