"""The Tofino build (`make tofino`): the committed summaries under p4src/build/tofino/ were made
from today's P4 sources and describe the same pipeline, to the control plane, as the v1model
build; without bf-p4c, `make tofino` says so."""

from __future__ import annotations

from pathlib import Path

import pytest
from finsy.proto import p4i
from google.protobuf import text_format

from opengate import tofino
from opengate.target import repo_root

BUILD = repo_root() / "p4src" / "build" / "tofino"
V1MODEL = {
    "default": repo_root() / "p4src" / "build",
    "naive_acl": repo_root() / "p4src" / "build" / "naive_acl",
}


def _p4info(path: Path) -> p4i.P4Info:
    """A P4Info text file; Tofino's extern blocks (barefoot.* types) are left out."""
    lines: list[str] = []
    in_externs = False
    for line in path.read_text().splitlines():
        if line.startswith("externs {"):
            in_externs = True
        elif in_externs:
            in_externs = line != "}"
        else:
            lines.append(line)
    info = p4i.P4Info()
    text_format.Parse("\n".join(lines), info)
    return info


def _tables(info: p4i.P4Info) -> dict[str, tuple[object, ...]]:
    # bf-p4c prefixes table names with the pipeline's name ("pipe.session").
    return {
        t.preamble.name.removeprefix("pipe."): tuple(
            (f.name, f.bitwidth, f.match_type) for f in t.match_fields
        )
        for t in info.tables
    }


def _actions(info: p4i.P4Info) -> dict[str, tuple[tuple[str, int], ...]]:
    return {a.preamble.name: tuple((p.name, p.bitwidth) for p in a.params) for a in info.actions}


def test_summaries_were_made_from_the_current_sources() -> None:
    recorded = (BUILD / "SOURCES.sha256").read_text().split()[0]
    assert recorded == tofino.sources_digest(repo_root()), (
        "p4src/ changed since p4src/build/tofino/ was written: run `make tofino` (needs bf-p4c, "
        "README 'Running on Tofino')"
    )


@pytest.mark.parametrize("build", tofino.BUILDS, ids=lambda b: b.name)
def test_tofino_p4info_offers_the_v1model_tables_and_actions(build: tofino.Build) -> None:
    tna = _p4info(BUILD / f"{build.name}.p4info.txtpb")
    v1 = _p4info(V1MODEL[build.profile] / "opengate.p4info.txtpb")
    assert _tables(tna) == _tables(v1)
    assert _actions(tna) == _actions(v1)


@pytest.mark.parametrize("build", tofino.BUILDS, ids=lambda b: b.name)
def test_summary_gives_stages_and_memories_for_every_table(build: tofino.Build) -> None:
    summary = (BUILD / f"{build.name}.txt").read_text()
    assert "MAU stages used:" in summary
    tna = _p4info(BUILD / f"{build.name}.p4info.txtpb")
    rows = {line.split()[0] for line in summary.splitlines() if line and not line[0].isspace()}
    names = [t.preamble.name.removeprefix("pipe.") for t in tna.tables]
    missing = [name for name in names if name not in rows]
    assert not missing, f"{build.name}.txt has no row for {missing}"


def test_make_tofino_says_that_bf_p4c_is_missing(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "BF_PREFIX": str(tmp_path / "nothing")}
    with pytest.raises(tofino.BfP4cMissingError, match=r"bf-p4c .* is not installed"):
        tofino.find_bf_p4c(env)
