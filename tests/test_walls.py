"""The walls between the project's rooms (DESIGN.md): the SPM and the software switch share no code
with the CPM but the common package, the CPM reaches switches only through P4Runtime (it imports no
switch), the common package depends on none of them, and no production room imports the tests'
doubles."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# room -> packages it must never import
FORBIDDEN = {
    "controller": {"softswitch", "spm", "tests"},
    "spm": {"controller", "softswitch", "tests"},
    "softswitch": {"controller", "spm", "opengate", "tests"},
    "opengate": {"controller", "spm", "softswitch", "tests"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_room_imports_nothing_beyond_its_walls(room: str) -> None:
    breaches = {
        str(path.relative_to(REPO)): sorted(_imports(path) & FORBIDDEN[room])
        for path in sorted((REPO / room).rglob("*.py"))
    }
    assert {k: v for k, v in breaches.items() if v} == {}
