"""reference/cli.md: the `opengate` command and `python -m softswitch`, from their argparse trees.

The parsers are built here as the commands build them, with the terminal width fixed and the
environment variables that change option defaults ($OPENGATE_*) unset, so that the page is the
same on every machine.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import softswitch.__main__ as softswitch_main
from docgen import markdown as md
from opengate import cli as opengate_cli
from opengate.target import repo_root

SOURCE = (
    "opengate/cli.py (with controller/cli.py, controller/hsm/cli.py, spm/cli.py, topo/cli.py) "
    "and softswitch/__main__.py"
)
WIDTH = 100  # columns of the usage lines, whatever the terminal
ENV_PREFIXES = ("OPENGATE_",)


@contextlib.contextmanager
def fixed_environment() -> Iterator[None]:
    """COLUMNS fixed and $OPENGATE_* unset while the parsers are built and formatted."""
    saved = {name: value for name, value in os.environ.items() if name.startswith(ENV_PREFIXES)}
    saved_columns = os.environ.get("COLUMNS")
    for name in saved:
        del os.environ[name]
    os.environ["COLUMNS"] = str(WIDTH)
    try:
        yield
    finally:
        os.environ.update(saved)
        if saved_columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved_columns


@dataclass(frozen=True, slots=True)
class Command:
    words: tuple[str, ...]  # ("opengate", "policy", "apply")
    parser: argparse.ArgumentParser
    help: str | None  # what the parent's list of subcommands says of it

    @property
    def name(self) -> str:
        return " ".join(self.words)


def subcommands(
    parser: argparse.ArgumentParser,
) -> list[tuple[str, argparse.ArgumentParser, str | None]]:
    """(name, parser, help) of the parser's subcommands, in the order argparse has them."""
    out: list[tuple[str, argparse.ArgumentParser, str | None]] = []
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help for choice in action._choices_actions}
        seen: set[int] = set()
        for name, sub in action.choices.items():
            if id(sub) in seen:  # an alias
                continue
            seen.add(id(sub))
            out.append((name, sub, helps.get(name)))
    return out


def walk(
    parser: argparse.ArgumentParser, words: tuple[str, ...], help_text: str | None = None
) -> Iterator[Command]:
    """The command and its subcommands, depth first."""
    yield Command(words, parser, help_text)
    for name, sub, sub_help in subcommands(parser):
        yield from walk(sub, (*words, name), sub_help)


def opengate_commands() -> list[Command]:
    with fixed_environment():
        return list(walk(opengate_cli.build_parser(), ("opengate",)))


def _shown(action: argparse.Action) -> bool:
    return not isinstance(action, argparse._SubParsersAction | argparse._HelpAction) and (
        action.help is not argparse.SUPPRESS
    )


def _value_text(value: object) -> str:
    if isinstance(value, Path):
        root = repo_root()
        if value.is_absolute() and value.is_relative_to(root):
            return value.relative_to(root).as_posix()
        return value.as_posix()
    if isinstance(value, list | tuple):
        return " ".join(_value_text(v) for v in value)
    return str(value)


def _default(action: argparse.Action) -> str:
    if action.required:
        return "required"
    value = action.default
    if value is None or value is argparse.SUPPRESS or action.nargs == 0:
        return ""
    if isinstance(value, list | tuple) and not value:
        return ""
    return md.code(_value_text(value))


def _value(action: argparse.Action, formatter: argparse.HelpFormatter) -> str:
    if action.nargs == 0:
        return ""
    if action.choices is not None and action.metavar is None:
        return "one of " + md.codes(str(c) for c in action.choices)
    if action.option_strings:
        default = formatter._get_default_metavar_for_optional(action)
    else:
        default = formatter._get_default_metavar_for_positional(action)
    shown = formatter._format_args(action, default)
    if not action.option_strings and shown == (action.metavar or action.dest):
        return ""  # a positional's plain name: the first column has it
    return md.code(shown)


def argument_rows(parser: argparse.ArgumentParser) -> list[list[str]]:
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if not _shown(action):
            continue
        if action.option_strings:
            name = md.codes(action.option_strings)
        else:
            name = md.code(str(action.metavar or action.dest))
        help_text = formatter._expand_help(action) if action.help else ""
        rows.append([name, _value(action, formatter), _default(action), md.text(help_text)])
    return rows


def section(command: Command, level: int | None, list_subcommands: bool = True) -> list[str]:
    """The command's heading (none with `level` None), help, usage, arguments and
    subcommands."""
    parser = command.parser
    out = [] if level is None else [f"{'#' * level} {md.code(command.name, in_table=False)}", ""]
    paragraphs = dict.fromkeys(p for p in (command.help, parser.description) if p)
    for paragraph in paragraphs:
        out += [md.text(paragraph, in_table=False), ""]
    out += ["```text", parser.format_usage().strip(), "```", ""]
    rows = argument_rows(parser)
    if rows:
        out += md.table(["Argument", "Value", "Default", "Description"], rows)
        out.append("")
    subs = subcommands(parser)
    if subs and list_subcommands:
        out += md.table(
            ["Subcommand", "Description"],
            [[md.code(f"{command.name} {name}"), md.text(h or "")] for name, _, h in subs],
        )
        out.append("")
    return out


def render() -> str:
    commands = opengate_commands()
    with fixed_environment():
        lines = [
            md.header(SOURCE),
            "",
            "# Command line",
            "",
            "The `opengate` command (installed with the package, or `.venv/bin/opengate`) has one "
            "subcommand per job. Every command prints the same usage and options with `-h`, "
            "e.g. `opengate policy apply -h`. Options of `opengate` itself (`--log-level`) come "
            "before the subcommand.",
            "",
            "## Commands",
            "",
            *md.table(
                ["Command", "Description"],
                [[md.code(c.name), md.text(c.help or "")] for c in commands[1:]],
            ),
            "",
        ]
        # the overview lists the subcommands of `opengate` itself
        lines += section(commands[0], 2, list_subcommands=False)
        for command in commands[1:]:
            lines += section(command, len(command.words))  # `opengate hsm`: ##
        switch = softswitch_main.build_parser()
        lines += [
            "## The built-in switch: `python -m softswitch`",
            "",
            *md.docstring(softswitch_main.__doc__ or ""),
            *section(Command(("python -m softswitch",), switch, None), None),
        ]
        return md.page(lines)
