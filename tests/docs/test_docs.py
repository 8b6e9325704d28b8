"""The README and docs/ as a newcomer meets them: the site builds with `mkdocs build --strict` (a
broken link, a missing page or a page left out of the nav fails), the README is short and leads
to the pages a newcomer looks for, no page carries a date or a commit id (history is git's; only
docs/benchmarks.md's result lines say when and at which commit a figure was measured), and what the
pages tell a user to type exists: `make` targets, `opengate` commands, and the policy the policy
guide builds."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from controller.policy import load_policy
from opengate.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
README = REPO / "README.md"
# The one page whose tables carry the machine, date and commit of each result.
DATED = {DOCS / "benchmarks.md"}

DATE = re.compile(r"\b(?:19|20)\d\d-[01]\d-[0-3]\d\b")
HEX = re.compile(r"\b[0-9a-f]{7,40}\b")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def split_code(text: str) -> tuple[str, str]:
    """(prose, code) of a Markdown page: fenced and indented blocks and `spans` are code."""
    prose: list[str] = []
    code: list[str] = []
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            code.append(line)
            continue
        spans = re.findall(r"`[^`]*`", line)
        code.extend(spans)
        prose.append(re.sub(r"`[^`]*`", " ", line))
    return "\n".join(prose), "\n".join(code)


def is_commit_of_this_repository(token: str) -> bool:
    result = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{token}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    return result.returncode == 0


def test_the_site_builds_with_mkdocs_strict(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "s")],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert (tmp_path / "s" / "index.html").is_file()


def test_the_readme_is_short_and_names_the_two_commands() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) < 250, f"README.md has {len(lines)} lines; the rest belongs in docs/"
    text = "\n".join(lines)
    for command in ("make run", "make test"):
        assert command in text


def test_the_readme_leads_to_what_a_newcomer_looks_for() -> None:
    """How to write a policy, every CLI command, what happens to a packet, the current figures:
    one click from the README (its links), so two from a code host's front page."""
    links = set(LINK.findall(README.read_text()))
    for page in (
        "docs/howto/policy.md",
        "docs/reference/cli.md",
        "docs/explanation/architecture.md",
        "docs/benchmarks.md",
        "docs/tutorial.md",
        "docs/limitations.md",
    ):
        assert page in links, f"the README does not link to {page}"


def test_the_readme_links_to_files_that_exist() -> None:
    for target in LINK.findall(README.read_text()):
        if target.startswith(("http://", "https://", "#")):
            continue
        path = target.split("#", 1)[0]
        assert (REPO / path).exists(), f"README links to {target}, which does not exist"


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_page_carries_a_date_or_a_commit_id(page: Path) -> None:
    if page in DATED:
        return
    text = page.read_text()
    dates = DATE.findall(text)
    assert not dates, f"{page.relative_to(REPO)} has dates {dates}: history belongs in git"
    prose, code = split_code(text)
    # In prose any long hex token with a digit and a letter reads as a commit id; in code (SPIs,
    # hashes a command prints) only one that is a commit of this repository.
    ids = [t for t in HEX.findall(prose) if re.search(r"\d", t) and re.search(r"[a-f]", t)]
    ids += [t for t in HEX.findall(code) if is_commit_of_this_repository(t)]
    assert not ids, f"{page.relative_to(REPO)} names commits {ids}: history belongs in git"


def _make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([a-z0-9-]+):", text, re.MULTILINE))


def test_the_make_targets_the_docs_name_exist() -> None:
    targets = _make_targets()
    for page in pages():
        if page == DOCS / "howto" / "toolchain.md":
            continue  # its `make`s build p4c, BMv2 and Snort, in their own trees
        _, code = split_code(page.read_text())
        for target in re.findall(r"\bmake ([a-z][a-z0-9-]*)", code):
            assert target in targets, f"{page.relative_to(REPO)} names `make {target}`"


def _subcommands(parser: object) -> dict[str, object]:
    for action in getattr(parser, "_actions", []):
        choices = getattr(action, "choices", None)
        if isinstance(choices, dict) and action.__class__.__name__ == "_SubParsersAction":
            return choices
    return {}


def test_the_opengate_commands_the_docs_name_exist() -> None:
    parser: object = build_parser()
    seen = 0
    for page in pages():
        _, code = split_code(page.read_text())
        for match in re.finditer(r"\bopengate((?: [a-z][a-z0-9-]*)+)", code):
            node = parser
            for word in match.group(1).split():
                choices = _subcommands(node)
                if not choices:
                    break  # an argument of a leaf command
                assert word in choices, (
                    f"{page.relative_to(REPO)}: `opengate{match.group(1)}`: no command {word!r} "
                    f"(have: {', '.join(sorted(choices))})"
                )
                node = choices[word]
                seen += 1
    assert seen > 20  # the pages do name commands; a broken pattern would find none


def _indented_blocks(text: str) -> list[str]:
    blocks: list[list[str]] = []
    current: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("    "):
            current.append(line[4:])
        elif line.strip() or not current:
            if current:
                blocks.append(current)
            current = []
        else:
            current.append("")
    return ["\n".join(b).rstrip() for b in blocks if b]


def test_the_policy_guide_builds_a_policy_that_loads(tmp_path: Path) -> None:
    """The YAML blocks of docs/howto/policy.md, in order, are one policy the controller accepts."""
    text = (DOCS / "howto" / "policy.md").read_text()
    blocks = [b for b in _indented_blocks(text) if not b.startswith("opengate ")]
    assert len(blocks) >= 5
    policy = tmp_path / "policy.yaml"
    policy.write_text("\n".join(blocks) + "\n")
    shutil.copy(REPO / "controller" / "examples" / "gateway.rules", tmp_path / "gateway.rules")
    loaded = load_policy(policy)
    assert loaded.acl_rules[0].name == "no-telnet"
    assert loaded.nat.port_forwards and loaded.classes
