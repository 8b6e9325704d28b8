"""reference/mininet.md: the commands of the Mininet CLI that `make run` opens.

The commands are the `do_*` methods of topo/console.py's GatewayCLI and of the Mininet CLI it
derives from (Mininet as installed: Debian's package), each with its docstring, which is also
what `help COMMAND` prints.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass

from mininet.cli import CLI

from docgen import markdown as md
from topo import console
from topo.console import GatewayCLI

SOURCE = "topo/console.py and Mininet's mininet/cli.py"


@dataclass(frozen=True, slots=True)
class CliCommand:
    name: str
    doc: str
    origin: str  # "OpenGate", "OpenGate, in place of Mininet's", "Mininet"


def _origin(name: str) -> str:
    """Whose the method is: OpenGate's (GatewayCLI's own), Mininet's, or Python's cmd."""
    if name in vars(GatewayCLI):
        return "OpenGate, in place of Mininet's" if hasattr(CLI, name) else "OpenGate"
    owner: type = next(cls for cls in GatewayCLI.__mro__ if name in vars(cls))
    module = str(owner.__module__)
    return "Mininet" if module.startswith("mininet") else f"Python ({module})"


def commands() -> list[CliCommand]:
    """Every command of the CLI, by name."""
    out = []
    for attribute in sorted(dir(GatewayCLI)):
        if not attribute.startswith("do_"):
            continue
        method: Callable[..., object] = getattr(GatewayCLI, attribute)
        out.append(CliCommand(attribute[3:], inspect.getdoc(method) or "", _origin(attribute)))
    return out


def _doc_cell(doc: str) -> str:
    """A docstring in a table cell: its "Usage:" lines on lines of their own."""
    return "<br>".join(md.text(part) for part in re.split(r"\n(?=Usage:)", doc))


def render() -> str:
    found = commands()
    node_doc = inspect.getdoc(GatewayCLI.default) or ""
    lines = [
        md.header(SOURCE),
        "",
        "# Mininet CLI",
        "",
        *md.docstring(console.__doc__ or ""),
        "`make run` (or `opengate topo run`) brings the topology up and opens this CLI at the "
        "`mininet>` prompt; `help` lists the commands, `help COMMAND` prints the text below.",
        "",
        "## Commands",
        "",
        *md.table(
            ["Command", "What it does", "From"],
            [[md.code(c.name), _doc_cell(c.doc), c.origin] for c in found]
            + [[md.code("NODE COMMAND"), _doc_cell(node_doc), _origin("default")]],
        ),
        "",
        "## What `help` adds after the list",
        "",
        "```text",
        *GatewayCLI.helpStr.strip("\n").splitlines(),
        "```",
    ]
    return md.page(lines)
