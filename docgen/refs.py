"""Which controller modules name a P4 object, found in their syntax trees.

A module names a P4 object by its constant in opengate/p4constants.py (`pc.T_SESSION`, however
the module imports it). A table may also be named, as the HSM compiler's schema does, by its name
as a string (`"acl_verdict"`) or by an f-string that makes it (`f"{side}_verdict"`); docstrings,
dict keys and subscripts are not table names (`{"session": ...}` is a JSON field), so they are
skipped. Strings are not matched against the other kinds: action names double as policy-file
keys (`masquerade`), which would be false hits.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Mapping

from opengate import p4constants
from opengate.target import repo_root

CONSTANTS_MODULE = "opengate.p4constants"
# constant prefix in p4constants -> P4Info kind
PREFIXES = {
    "T_": "tables",
    "A_": "actions",
    "C_": "counters",
    "DC_": "direct_counters",
    "M_": "meters",
    "AP_": "action_profiles",
    "D_": "digests",
    "R_": "registers",
}

LITERAL_KINDS = ("tables",)  # the kinds also matched as strings
Key = tuple[str, str]  # (kind, name)


def constants() -> dict[str, Key]:
    """p4constants' object constants: constant name -> (kind, P4 name)."""
    out: dict[str, Key] = {}
    for name, value in vars(p4constants).items():
        if not isinstance(value, str):
            continue
        for prefix, kind in PREFIXES.items():
            if name.startswith(prefix):
                out[name] = (kind, value)
    return out


def _aliases(tree: ast.Module) -> tuple[set[str], dict[str, str]]:
    """Names bound to the p4constants module, and names imported from it (local -> constant)."""
    modules: set[str] = set()
    direct: dict[str, str] = {}
    package, _, leaf = CONSTANTS_MODULE.rpartition(".")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == package:
            modules.update(a.asname or a.name for a in node.names if a.name == leaf)
        elif isinstance(node, ast.ImportFrom) and node.module == CONSTANTS_MODULE:
            direct.update({a.asname or a.name: a.name for a in node.names})
        elif isinstance(node, ast.Import):
            modules.update(a.asname for a in node.names if a.name == CONSTANTS_MODULE and a.asname)
    return modules, direct


def _not_names(tree: ast.Module) -> set[int]:
    """ids of the string nodes that are no P4 names: docstrings, dict keys, subscripts."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skipped.add(id(node.value))
        elif isinstance(node, ast.Dict):
            skipped.update(id(key) for key in node.keys if key is not None)
        elif isinstance(node, ast.Subscript):
            skipped.add(id(node.slice))
    return skipped


def _template(node: ast.JoinedStr) -> re.Pattern[str] | None:
    """An f-string as a pattern (each placeholder: a word without `_`); None unless its literal
    text has a `_`, as the names it could make have."""
    parts = []
    literal = ""
    for value in node.values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            parts.append(re.escape(value.value))
            literal += value.value
        else:
            parts.append("[A-Za-z0-9]+")
    return re.compile("".join(parts)) if "_" in literal else None


def names_in(source: str, objects: Mapping[str, Iterable[str]]) -> Iterator[Key]:
    """The P4 objects that module `source` names; `objects`: kind -> names in the P4Info (the
    names to look for as strings)."""
    tree = ast.parse(source)
    known = constants()
    modules, direct = _aliases(tree)
    by_name: dict[str, list[str]] = {}
    for kind, names in objects.items():
        if kind not in LITERAL_KINDS:
            continue
        for name in names:
            by_name.setdefault(name, []).append(kind)
    skipped = _not_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in modules and node.attr in known:
                yield known[node.attr]
        elif isinstance(node, ast.Name) and node.id in direct and direct[node.id] in known:
            yield known[direct[node.id]]
        elif isinstance(node, ast.JoinedStr):
            skipped.update(id(v) for v in node.values)
            pattern = _template(node)
            if pattern is not None:
                for name, kinds in by_name.items():
                    if pattern.fullmatch(name):
                        yield from ((kind, name) for kind in kinds)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value in by_name
            and id(node) not in skipped
        ):
            yield from ((kind, node.value) for kind in by_name[node.value])


def controller_references(objects: Mapping[str, Iterable[str]]) -> dict[Key, list[str]]:
    """(kind, name) -> the controller modules (paths from the repository root) naming it."""
    root = repo_root()
    found: dict[Key, set[str]] = {}
    listed = {kind: tuple(names) for kind, names in objects.items()}
    for path in sorted((root / "controller").rglob("*.py")):
        module = path.relative_to(root).as_posix()
        for key in names_in(path.read_text(), listed):
            found.setdefault(key, set()).add(module)
    return {key: sorted(modules) for key, modules in found.items()}
