"""The committed compiled P4 (p4src/build/) is what p4c makes of p4src/ today."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from controller.hsm import schema as hsm_schema
from opengate.p4info import P4Schema
from opengate.target import repo_root
from tests.helpers import skip_unless_tool

PROFILES = {"": "", "naive_acl": "-DWITH_NAIVE_ACL", "compact": "-DWITH_COMPACT_TABLES"}


@pytest.mark.needs_p4c
@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_committed_artifacts_match_a_fresh_compile(tmp_path: Path, profile: str) -> None:
    p4c = skip_unless_tool(
        "p4c-bm2-ss", "recompiling p4src/ to compare with p4src/build/ needs p4c"
    )
    root = repo_root()
    committed = root / "p4src" / "build" / profile
    argv = [
        p4c,
        "--std",
        "p4-16",
        "-I",
        "p4src",
        "-o",
        str(tmp_path / "opengate.json"),
        "--p4runtime-files",
        str(tmp_path / "opengate.p4info.txtpb"),
    ]
    if PROFILES[profile]:
        argv.append(PROFILES[profile])
    subprocess.run([*argv, "p4src/opengate.p4"], cwd=root, check=True, capture_output=True)
    assert (tmp_path / "opengate.p4info.txtpb").read_text() == (
        committed / "opengate.p4info.txtpb"
    ).read_text(), "p4src/build P4Info is stale: run `make p4`"
    fresh = json.loads((tmp_path / "opengate.json").read_text())
    old = json.loads((committed / "opengate.json").read_text())
    # Source file paths inside the JSON depend on where it was compiled; compare the rest.
    assert _strip_sources(fresh) == _strip_sources(old), "p4src/build JSON is stale: run `make p4`"


def _strip_sources(node: object) -> object:
    if isinstance(node, dict):
        return {k: _strip_sources(v) for k, v in node.items() if k != "source_info"}
    if isinstance(node, list):
        return [_strip_sources(v) for v in node]
    return node


def _without_sizes(node: object) -> object:
    if isinstance(node, dict):
        return {
            k: _without_sizes(v) for k, v in node.items() if k not in ("source_info", "max_size")
        }
    if isinstance(node, list):
        return [_without_sizes(v) for v in node]
    return node


def test_the_compact_build_differs_only_in_the_chain_tables_sizes() -> None:
    """`make run BUILD=compact`: the same program, names and ids; only the HSM chains' exact
    tables (addr pair, port pair, final, of every ACL partition and the IDS) are smaller."""
    build = repo_root() / "p4src" / "build"
    default = P4Schema.load(build / "opengate.p4info.txtpb").p4info
    compact = P4Schema.load(build / "compact" / "opengate.p4info.txtpb").p4info
    chains = {*hsm_schema.PARTITION_TABLES, *hsm_schema.HSM_TABLES} - {
        t.name for t in hsm_schema.SEGMENT_TABLES
    }
    assert len(chains) == 21
    sizes = {t.preamble.name: t.size for t in default.tables}
    for table in compact.tables:
        name = table.preamble.name.rpartition(".")[2]
        if name in chains:
            assert (table.size, sizes[table.preamble.name]) == (65536, 1048576), name
        else:
            assert table.size == sizes[table.preamble.name], name
        table.size = sizes[table.preamble.name]
    assert compact == default  # names, ids, keys, actions, everything else
    old, new = (
        json.loads((folder / "opengate.json").read_text()) for folder in (build, build / "compact")
    )
    small = {t["name"] for p in new["pipelines"] for t in p["tables"] if t["max_size"] == 65536}
    assert small >= chains
    assert _without_sizes(new) == _without_sizes(old)


def test_no_p4_control_file_is_written_twice() -> None:
    """Controls are shared between the v1model and TNA shells: one file per control."""
    root = repo_root() / "p4src"
    names: dict[str, Path] = {}
    for path in root.rglob("*.p4"):
        if "build" in path.parts:
            continue
        for line in path.read_text().splitlines():
            stripped = line.strip()
            if stripped.startswith("control ") and "(" in stripped:
                name = stripped.split()[1].split("(")[0]
                assert name not in names, (
                    f"control {name} is defined in {names.get(name)} and {path}"
                )
                names[name] = path
    assert "Session" in names, "the scan found no controls at all"


SHELLS = {"opengate.p4": "v1model_externs.p4", "opengate_tna.p4": "tna_externs.p4"}
_MACRO_USE = re.compile(r"\b(OG_[A-Z0-9_]+)\b")
# A shell defines each hook, or #undefs a feature it does not have (a decision, not an omission).
_MACRO_DEF = re.compile(r"^\s*#\s*(?:define|undef)\s+(OG_[A-Z0-9_]+)", re.MULTILINE)


def test_both_shells_wrap_the_same_shared_pipeline() -> None:
    """Only the architecture glue differs: each shell includes the shared parser and pipeline
    and defines no control or parser of its own other than its architecture blocks."""
    root = repo_root() / "p4src"
    for shell, prefix in (("opengate.p4", "V1"), ("opengate_tna.p4", "Tna")):
        text = (root / shell).read_text()
        for shared in ("include/headers.p4", "include/parser.p4", "include/pipeline.p4"):
            assert f'#include "{shared}"' in text, f"{shell} does not include {shared}"
        blocks = re.findall(r"^(?:control|parser)\s+(\w+)", text, re.MULTILINE)
        assert blocks, f"no architecture blocks found in {shell}"
        strays = [b for b in blocks if not b.startswith(prefix)]
        assert not strays, f"{shell} defines {strays}: shared blocks belong in p4src/include/"


def test_every_architecture_hook_is_defined_by_both_shells() -> None:
    """Each OG_* macro the shared code uses has a definition in both extern files (or, for a
    feature flag such as OG_DP_SESSIONS, an explicit #undef)."""
    root = repo_root() / "p4src" / "include"
    used: dict[str, str] = {}
    for path in root.rglob("*.p4"):
        if path.parent.name == "arch":
            continue
        code = re.sub(r"//[^\n]*", "", path.read_text())
        for name in _MACRO_USE.findall(code):
            used.setdefault(name, path.name)
    assert "OG_SPM_SELECTOR" in used, "the scan found no architecture hooks at all"
    for externs in SHELLS.values():
        defined = set(_MACRO_DEF.findall((root / "arch" / externs).read_text()))
        missing = {name: where for name, where in used.items() if name not in defined}
        assert not missing, (
            f"{externs} lacks {sorted(missing)} (used in {sorted(set(missing.values()))})"
        )


def _p4_macro(text: str, name: str) -> str:
    """The body of a function-like `#define name(...)` in `text`, its continuation lines joined."""
    match = re.search(rf"^#define {name}\([^)]*\) \\\n((?:.*\\\n)*.*)$", text, re.MULTILINE)
    assert match, f"no #define {name} in headers.p4"
    return " ".join(line.rstrip("\\").strip() for line in match.group(1).splitlines())


def _as_python(expr: str) -> str:
    """A P4 boolean expression over `(meta).field` and constants, as Python over `m.field`."""
    expr = expr.replace("(meta).", "m.").replace("&&", " and ").replace("||", " or ")
    expr = re.sub(r"!(?!=)", " not ", expr)
    return re.sub(r"\bog_admitted\(meta\)", "admitted(m)", expr)


def test_session_lookup_test_is_the_admission_and_ttl_tests_it_replaces() -> None:
    """og_session_lookup, written out by port role so that one Tofino gateway tests it, admits
    exactly the packets og_admitted admits, not back from an SPM with NAT done, that do not
    expire here (og_expires_here): every combination of the fields they read, every role."""
    from types import SimpleNamespace

    root = repo_root() / "p4src" / "include"
    headers = (root / "headers.p4").read_text()
    roles = {
        name: int(value)
        for name, value in re.findall(
            r"const port_role_t (ROLE_\w+)\s*=\s*(\d+);", (root / "defines.p4").read_text()
        )
    }
    assert {"ROLE_UNKNOWN", "ROLE_INSIDE", "ROLE_OUTSIDE", "ROLE_SPM", "ROLE_CPU"} <= set(roles)
    scope: dict[str, object] = dict(roles)
    admitted = eval(f"lambda m: {_as_python(_p4_macro(headers, 'og_admitted'))}", scope)
    scope["admitted"] = admitted
    expires = eval(f"lambda m: {_as_python(_p4_macro(headers, 'og_expires_here'))}", scope)
    lookup = eval(f"lambda m: {_as_python(_p4_macro(headers, 'og_session_lookup'))}", scope)
    checked = 0
    for role in sorted(roles.values()):
        for bits in range(64):
            m = SimpleNamespace(
                port_role=role,
                drop_valid=bits & 1,
                drop_tag=(bits >> 1) & 1,
                returned_nat_done=(bits >> 2) & 1,
                tagged=(bits >> 3) & 1,
                last_hop=(bits >> 4) & 1,
                routed=(bits >> 5) & 1,  # read by neither: must not matter
            )
            want = admitted(m) and m.returned_nat_done == 0 and not expires(m)
            assert bool(lookup(m)) == bool(want), vars(m)
            checked += 1
    assert checked == 64 * len(roles)


def _reachable(pipeline: dict[str, Any], session_hit: int | None) -> set[str]:
    """The tables of a BMv2 JSON pipeline that a packet can reach: every branch of every
    conditional, but only the branch a packet with `session_hit` takes of a test of that flag
    alone (`== 0` or `== 1`; None: both branches)."""
    tables = {t["name"]: t for t in pipeline["tables"]}
    conditionals = {c["name"]: c for c in pipeline["conditionals"]}
    seen: set[str] = set()
    todo = [pipeline["init_table"]]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if node in tables:
            todo.extend(tables[node]["next_tables"].values())
            todo.append(tables[node].get("base_default_next"))
            continue
        cond = conditionals[node]
        value = cond["expression"]["value"]
        flag = (value.get("left") or {}).get("value") == ["scalars", "local_metadata_t.session_hit"]
        if session_hit is not None and flag and value["op"] == "==":
            taken = int(value["right"]["value"], 16) == session_hit
            todo.append(cond["true_next"] if taken else cond["false_next"])
        else:
            todo.extend((cond["true_next"], cond["false_next"]))
    return seen & set(tables)


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_a_packet_its_session_carries_skips_the_classifier(profile: str) -> None:
    """v1model (OG_CLASSIFY_ON_MISS): the session is looked up first, and the classifier's tables
    (Classify's, and Steering's, which read its class) are applied only to a packet without a
    session: on a software target every table costs time, and a session's packet never reads
    their results. The session table itself and the rest of the pipeline stay reachable."""
    build = repo_root() / "p4src" / "build" / profile / "opengate.json"
    ingress = next(p for p in json.loads(build.read_text())["pipelines"] if p["name"] == "ingress")
    classifier = {
        t["name"]
        for t in ingress["tables"]
        if re.fullmatch(
            r"tbl_classify\w*|classifier_version|acl\w*|ids_\w*|\w+_segment|class_policy|spm_select",
            t["name"],
        )
    }
    expected = (
        {"acl_naive", "ids_naive"} if profile == "naive_acl" else {"sa_segment", "acl6_verdict"}
    )
    assert {"class_policy", "spm_select", *expected} <= classifier
    on_miss = _reachable(ingress, 0)
    on_hit = _reachable(ingress, 1)
    assert classifier <= on_miss
    assert not classifier & on_hit, sorted(classifier & on_hit)
    assert {"session", "routing", "flow_ageing"} <= on_hit
