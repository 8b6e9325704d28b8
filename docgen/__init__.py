"""The reference pages of docs/reference/, generated from the code so that they cannot drift.

`python -m docgen` (re)writes every page; `python -m docgen --check` writes nothing and fails
when a committed page differs from what the code makes now (tests/docs checks the same).
`pages()` maps each page, relative to docs/, to the function that makes its text.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from opengate.target import repo_root

DOCS = "docs"

# page under docs/ -> the module whose render() makes it (imported when the page is made)
_PAGES: dict[str, str] = {
    "reference/cli.md": "docgen.cli",
    "reference/api.md": "docgen.api",
    "reference/p4.md": "docgen.p4",
    "reference/metrics.md": "docgen.metrics",
    "reference/mininet.md": "docgen.mininet",
    "reference/policy.md": "docgen.policy",
}


def _renderer(module_name: str) -> Callable[[], str]:
    def render() -> str:
        module = importlib.import_module(module_name)
        make: Callable[[], str] = module.render
        return make()

    render.__qualname__ = render.__name__ = f"{module_name}.render"
    return render


def pages() -> dict[str, Callable[[], str]]:
    """Every generated page: its path under docs/ -> the function that makes its text."""
    return {page: _renderer(module) for page, module in _PAGES.items()}


def docs_dir() -> Path:
    return repo_root() / DOCS
