"""The Tofino build (`make tofino`): the committed summaries under p4src/build/tofino/ were made
from today's P4 sources and describe the same pipeline, to the control plane, as the v1model
build; without bf-p4c, `make tofino` says so."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from finsy.proto import p4i
from google.protobuf import text_format

from opengate import p4constants as pc
from opengate import tofino
from opengate.p4info import P4InfoError, P4Schema
from opengate.target import repo_root
from tests.helpers import skip_unless_tool

BUILD = repo_root() / "p4src" / "build" / "tofino"
V1MODEL = {
    "default": repo_root() / "p4src" / "build",
    "naive_acl": repo_root() / "p4src" / "build" / "naive_acl",
    "dp_sessions": repo_root() / "p4src" / "build",  # (v1model always has its slots)
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


# Objects of the v1model build that the TNA build does not have, by design: data-plane sessions
# are register arrays read and written in one pass (OG_DP_SESSIONS), which Tofino's
# RegisterActions cannot express; Tofino's own slots (OG_FLOW_SLOTS, -DOG_TNA_DP_SESSIONS, flows
# without NAT) are in a build of their own; the default builds keep the controller path
# (docs/explanation/tofino.md). Of the hybrid's tables, Tofino 2's builds have the ACL spill
# table (OG_HSM_SPILL);
# the IDS spill table, the second and third ACL partitions (whose indexes the segment actions also
# return) and, on Tofino 1, the ACL spill table too have not been fitted into Tofino's stages.
V1MODEL_ONLY = {
    pc.T_FLOW_AGEING,
    pc.A_SET_FLOW_TIMEOUT,
    pc.C_FLOW_EVENT_COUNTER,
    pc.T_NAT_DP_REVERSE,
    pc.A_DP_UNMASQUERADE,
    pc.A_MASQUERADE_DP,
    pc.A_PORT_FORWARD_DP,
    pc.T_DNAT_DP_REVERSE,
    pc.A_FORWARDED_REPLY,
    pc.M_NEW_FLOW_METER,
    pc.T_ACL_SPILL,
    pc.T_IDS_SPILL,
    # the hybrid's extra ACL partitions (acl2 to acl6)
    *(
        getattr(pc, f"{kind}_ACL{n}_{name}")
        for n in range(2, 7)
        for kind, name in (
            ("T", "ADDR_PAIR"),
            ("T", "PORT_PAIR"),
            ("T", "VERDICT"),
            ("A_SET", "ADDR_INDEX"),
            ("A_SET", "PORT_INDEX"),
        )
    ),
    # IPv6 (control/ipv6.p4, OG_IPV6): not in the TNA shell until bf-p4c has placed it
    pc.T_ND_RESPONDER,
    pc.A_ND_ADVERTISE,
    pc.A_ND_IGNORE,
    pc.T_SESSION_V6,
    pc.A_SESSION_V6_FORWARD,
    pc.A_SESSION_V6_BLOCK,
    pc.A_SESSION_V6_MISS,
    pc.DC_SESSION_V6_COUNTER,
    pc.T_IPV6_ACL,
    pc.A_IPV6_ACL_PERMIT,
    pc.A_IPV6_ACL_DENY,
    pc.A_IPV6_ACL_TO_CPU,
    pc.T_ROUTING_V6,
    pc.A_ROUTE_V6_TO,
    pc.A_NO_ROUTE_V6,
    pc.D_SESSION_CLOSE_V6_T,
    pc.T_NPTV6_INBOUND,
    pc.T_NPTV6_OUTBOUND,
    pc.A_NPT_REWRITE_DST,
    pc.A_NPT_REWRITE_SRC,
    # NAT64 (control/nat64.p4, OG_IPV6): the IPv4 session table's reply action too
    pc.A_SESSION_V6_NAT64,
    pc.A_SESSION_NAT64_REPLY,
    pc.A_ROUTE_V6_NAT64,
}
V1MODEL_ONLY_PARAMS = {f"acl{n}_index" for n in range(2, 7)}
TOFINO2_HAS = {pc.T_ACL_SPILL}
# What Tofino's slots share with v1model's: the event counter and the new flows' meter.
TNA_SLOTS_HAVE = {pc.C_FLOW_EVENT_COUNTER, pc.M_NEW_FLOW_METER}
# ...and their own tables: one per way's register (arch/tna_flow_slots.p4), constant entries.
TNA_SLOTS_ONLY_TABLES = {
    "TnaIngress.pipeline.flow_slot_ways.way0_op",
    "TnaIngress.pipeline.flow_slot_ways.way1_op",
}


def _v1model_only(build: tofino.Build) -> set[str]:
    out = V1MODEL_ONLY - TOFINO2_HAS if build.target == "tofino2" else V1MODEL_ONLY
    return out - TNA_SLOTS_HAVE if _slots(build) else out


def _slots(build: tofino.Build) -> bool:
    return build.profile == "dp_sessions"


# Objects added to the shared code after the committed Tofino build was made (bf-p4c was not at
# hand): empty again once `make tofino` has run, which the freshness test checks.
ADDED_SINCE_TOFINO_BUILD: set[str] = set()


def _summaries_fresh() -> bool:
    recorded = (BUILD / "SOURCES.sha256").read_text().split()[0]
    try:
        return recorded == tofino.sources_digest(repo_root())
    except tofino.PreprocessorMissingError as exc:
        pytest.skip(str(exc))


def test_summaries_were_made_from_the_current_sources() -> None:
    if _summaries_fresh():
        assert not ADDED_SINCE_TOFINO_BUILD, "the Tofino build is fresh: empty the list"
        return
    try:
        tofino.find_bf_p4c()
    except tofino.BfP4cMissingError:
        pytest.skip(
            "p4src/ changed since p4src/build/tofino/ was written and bf-p4c is not installed: "
            f"the Tofino summaries are stale (they lack {sorted(ADDED_SINCE_TOFINO_BUILD)}); "
            "`make tofino` on a machine with bf-p4c refreshes them"
        )
    pytest.fail(
        "p4src/ changed since p4src/build/tofino/ was written: run `make tofino` "
        "(docs/howto/tofino.md)"
    )


def _edited_copy(tmp_path: Path, relative: str, old: str, new: str) -> Path:
    """A copy of p4src/ with `old` replaced by `new` (once) in `relative`."""
    shutil.copytree(
        repo_root() / "p4src", tmp_path / "p4src", ignore=shutil.ignore_patterns("build")
    )
    path = tmp_path / "p4src" / relative
    text = path.read_text()
    assert old in text, f"{relative} no longer has {old!r}: change this test"
    path.write_text(text.replace(old, new, 1))
    return tmp_path


def test_the_freshness_digest_follows_what_bf_p4c_reads(tmp_path: Path) -> None:
    """A change only the v1model builds see (a v1model size) leaves the Tofino summaries fresh;
    one the TNA shell sees (a Tofino size, a line more in a shared control) does not."""
    skip_unless_tool("cpp", "the digest is what cpp makes of the TNA shell for each build")
    today = tofino.sources_digest(repo_root())
    v1model_only = _edited_copy(
        tmp_path / "a",
        "include/sizes.p4",
        "#define FLOW_SLOTS                524288",
        "#define FLOW_SLOTS                262144",
    )
    assert tofino.sources_digest(v1model_only) == today
    tna_size = _edited_copy(
        tmp_path / "b",
        "include/arch/tna_sizes.p4",
        "#define PORT_TABLE_SIZE           512",
        "#define PORT_TABLE_SIZE           256",
    )
    assert tofino.sources_digest(tna_size) != today
    shared = _edited_copy(tmp_path / "c", "include/control/routing.p4", "control", "\ncontrol")
    assert tofino.sources_digest(shared) != today


@pytest.mark.parametrize("build", tofino.BUILDS, ids=lambda b: b.name)
def test_tofino_p4info_offers_the_v1model_tables_and_actions(build: tofino.Build) -> None:
    tna = _p4info(BUILD / f"{build.name}.p4info.txtpb")
    v1 = _p4info(V1MODEL[build.profile] / "opengate.p4info.txtpb")
    skip = _v1model_only(build) | ADDED_SINCE_TOFINO_BUILD
    own = TNA_SLOTS_ONLY_TABLES if _slots(build) else set()
    assert set(own) <= set(_tables(tna)), f"{build.name}: no {sorted(own)}"
    tna_tables = {k: v for k, v in _tables(tna).items() if k not in own}
    assert tna_tables == {k: v for k, v in _tables(v1).items() if k not in skip}
    v1_actions = {
        k: tuple(p for p in v if p[0] not in V1MODEL_ONLY_PARAMS)
        for k, v in _actions(v1).items()
        if k not in skip
    }
    # (and the actions only the slots' own tables use: wayN_do_lookup, _claim, _end)
    tna_actions = {k: v for k, v in _actions(tna).items() if k not in _own_actions(tna, own)}
    assert tna_actions == v1_actions


def _own_actions(info: p4i.P4Info, tables: set[str]) -> set[str]:
    """The actions that only `tables` refer to."""
    names = {a.preamble.id: a.preamble.name for a in info.actions}
    refs: dict[bool, set[str]] = {True: set(), False: set()}
    for t in info.tables:
        own = t.preamble.name.removeprefix("pipe.") in tables
        refs[own] |= {names[r.id] for r in t.action_refs}
    return refs[True] - refs[False]


# What the controller looks up by name, per kind of P4Info object.
KINDS = ("tables", "actions", "counters", "direct_counters", "meters", "digests", "action_profiles")


@pytest.mark.parametrize("build", tofino.BUILDS, ids=lambda b: b.name)
def test_the_controller_finds_its_names_in_the_tofino_p4info(build: tofino.Build) -> None:
    """bf-p4c names objects `pipe.<name>` with `<name>` as the alias; the controller's schema
    resolves the v1model names to them, and the counters, meters, digests and the selector are
    standard P4Runtime objects (--p4runtime-force-std-externs), as a Tofino P4Runtime agent
    (Stratum) expects."""
    tna = P4Schema.load(BUILD / f"{build.name}.p4info.txtpb")
    v1 = P4Schema.load(V1MODEL[build.profile] / "opengate.p4info.txtpb")
    for kind in KINDS:
        index = getattr(tna, kind)
        for obj in getattr(v1.p4info, kind):
            name = obj.preamble.name
            if name in _v1model_only(build) | ADDED_SINCE_TOFINO_BUILD:
                continue
            try:
                index.get(name)
            except P4InfoError as exc:
                pytest.fail(f"{build.name}: {exc}")
    v1_only = set() if _slots(build) else V1MODEL_ONLY_PACKET_FIELDS
    assert _packet_fields(tna) == _packet_fields(v1, skip=v1_only)


# Controller header fields of the v1model builds alone (data-plane sessions).
V1MODEL_ONLY_PACKET_FIELDS = {("packet_out", "end_flow")}


def _packet_fields(
    schema: P4Schema, skip: set[tuple[str, str]] | None = None
) -> dict[str, list[tuple[str, int]]]:
    """Each controller header's fields (name, width), padding and `skip` left out."""
    return {
        kind: [
            (m.name, m.bitwidth)
            for m in fields
            if not m.name.startswith("_") and (kind, m.name) not in (skip or set())
        ]
        for kind, fields in schema.packet_metadata.items()
    }


@pytest.mark.parametrize("build", tofino.BUILDS, ids=lambda b: b.name)
def test_summary_gives_stages_and_memories_for_every_table(build: tofino.Build) -> None:
    summary = (BUILD / f"{build.name}.txt").read_text()
    assert "MAU stages used:" in summary
    tna = _p4info(BUILD / f"{build.name}.p4info.txtpb")
    rows = {line.split()[0] for line in summary.splitlines() if line and not line[0].isspace()}
    names = [t.preamble.name.removeprefix("pipe.") for t in tna.tables]
    missing = [name for name in names if name not in rows]
    assert not missing, f"{build.name}.txt has no row for {missing}"


@pytest.mark.parametrize("build", tofino.BUILDS, ids=lambda b: b.name)
def test_the_pipeline_fits_the_device(build: tofino.Build) -> None:
    """bf-p4c produced a binary: every table placed within the device's MAU stages."""
    summary = (BUILD / f"{build.name}.txt").read_text()
    assert "bf-p4c exit status: 0\n" in summary, f"{build.name}: bf-p4c failed (see the summary)"
    used = re.search(r"^MAU stages used: (\d+) \(device: (\d+)\)$", summary, re.MULTILINE)
    assert used is not None, f"{build.name}.txt reports no stage count"
    assert int(used[1]) <= int(used[2]), f"{build.name}: {used[1]} stages of {used[2]}"


def test_make_tofino_says_that_bf_p4c_is_missing(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "BF_PREFIX": str(tmp_path / "nothing")}
    with pytest.raises(tofino.BfP4cMissingError, match=r"bf-p4c .* is not installed"):
        tofino.find_bf_p4c(env)


def _tna_includes() -> Path | None:
    """Where Tofino's architecture files (tna.p4, t2na.p4) are: TNA_P4INCLUDE, else where a
    bf-p4c installation puts them."""
    explicit = os.environ.get("TNA_P4INCLUDE")
    candidates = [Path(explicit)] if explicit else []
    candidates.append(tofino.DEFAULT_PREFIX / "share" / "p4c" / "p4include")
    return next((c for c in candidates if (c / "tna.p4").is_file()), None)


# The builds `make tofino` makes, and Tofino 1 with the data-plane session slots, which do not
# fit its twelve stages (docs/explanation/tofino.md).
P4TEST_BUILDS = (
    *tofino.BUILDS,
    tofino.Build("tofino", "tna", "dp_sessions", ("-DOG_TNA_DP_SESSIONS",)),
)


@pytest.mark.parametrize("build", P4TEST_BUILDS, ids=lambda b: b.name)
def test_p4test_accepts_the_tna_shell(build: tofino.Build) -> None:
    """Without bf-p4c, p4c's own front and middle ends (p4test) still type-check the TNA shell
    against Tofino's architecture files, when they are at hand (a bf-p4c installation, or
    TNA_P4INCLUDE naming p4c's backends/tofino/bf-p4c/p4include): a change to the shared P4 that
    breaks the TNA build shows here before anyone runs bf-p4c."""
    p4test = skip_unless_tool("p4test", "p4c's p4test type-checks the TNA shell")
    includes = _tna_includes()
    if includes is None:
        pytest.skip(
            "tna.p4 is not at hand (a bf-p4c installation's share/p4c/p4include, or "
            "TNA_P4INCLUDE): the TNA shell is not type-checked"
        )
    generation = "2" if build.arch == "t2na" else "1"
    argv = [p4test, "--std", "p4-16", "-I", str(includes), "-I", "p4src"]
    argv += [f"-D__TARGET_TOFINO__={generation}", *build.defines, "p4src/opengate_tna.p4"]
    result = subprocess.run(argv, check=False, cwd=repo_root(), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
