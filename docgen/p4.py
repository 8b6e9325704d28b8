"""reference/p4.md: the NPM's P4Runtime objects, from the committed P4Info of every build.

The P4Info is read with opengate.p4info (as the controller reads it); each table's initial
default action where P4Info leaves it open comes from the build's BMv2 JSON. Which controller
modules name each object comes from docgen.refs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from finsy.proto import p4i

from docgen import markdown as md
from docgen.refs import Key, controller_references
from opengate.p4info import PREAMBLE_KINDS, P4Schema
from opengate.target import repo_root

BUILD = Path("p4src") / "build"
MAIN = BUILD / "opengate.p4info.txtpb"
SOURCE = f"{MAIN.as_posix()}, the other builds' P4Info under {BUILD.as_posix()}/ and controller/"
# P4Info repeated fields compared between builds
KINDS = PREAMBLE_KINDS
SIZED = ("tables", "action_profiles", "counters", "meters", "registers", "value_sets")
KIND_WORDS = {
    "tables": "table",
    "actions": "action",
    "action_profiles": "action profile",
    "counters": "counter",
    "direct_counters": "direct counter",
    "meters": "meter",
    "direct_meters": "direct meter",
    "registers": "register",
    "digests": "digest",
    "controller_packet_metadata": "controller header",
    "value_sets": "value set",
}


@dataclass(frozen=True, slots=True)
class Build:
    name: str  # "default", "naive_acl", "tofino/tofino2-default"
    path: Path  # from the repository root
    schema: P4Schema

    @property
    def info(self) -> Any:
        return self.schema.p4info


def load(path: Path, name: str) -> Build:
    return Build(name, path, P4Schema.load(repo_root() / path))


def other_builds() -> list[Build]:
    """Every committed P4Info but the default build's, by path."""
    root = repo_root()
    out = []
    for path in sorted((root / BUILD).glob("*/*.p4info.txtpb")):
        relative = path.relative_to(root)
        folder = relative.parent.name
        stem = relative.name.removesuffix(".p4info.txtpb")
        out.append(load(relative, folder if stem == "opengate" else f"{folder}/{stem}"))
    return out


# -- one object --------------------------------------------------------------------------------


def _enum(enum: Any, value: int) -> str:
    return str(enum.Name(value))


def type_text(spec: Any) -> str:
    """A P4Info type spec: `bit<32>`, `bool`, a struct's or header's name."""
    which = spec.WhichOneof("type_spec")
    if which == "bitstring":
        kind = spec.bitstring.WhichOneof("type_spec")
        inner = getattr(spec.bitstring, kind)
        width = inner.max_bitwidth if kind == "varbit" else inner.bitwidth
        return f"{kind}<{width}>"
    if which in ("struct", "header", "header_union", "serializable_enum", "enum", "new_type"):
        return str(getattr(spec, which).name)
    return str(which)


def _doc(preamble: Any) -> list[str]:
    doc = preamble.doc
    text = " ".join(t for t in (doc.brief, doc.description) if t)
    return [md.text(text, in_table=False), ""] if text else []


def _action_name(schema: P4Schema, ident: int) -> str:
    return schema.actions.get_id(ident).name


def _json_defaults(build: Build) -> dict[str, str]:
    """Table -> its initial default action in the BMv2 JSON beside the P4Info, as text."""
    path = repo_root() / build.path.parent / "opengate.json"
    if not path.exists():
        return {}
    program = json.loads(path.read_text())
    actions = {a["id"]: a["name"] for a in program.get("actions", [])}
    out = {}
    for pipeline in program.get("pipelines", []):
        for table in pipeline.get("tables", []):
            entry = table.get("default_entry")
            if entry is None or entry.get("action_id") not in actions:
                continue
            data = ", ".join(str(int(v, 16)) for v in entry.get("action_data", []))
            out[table["name"]] = actions[entry["action_id"]] + (f"({data})" if data else "()")
    return out


def _default_action(build: Build, table: Any, json_defaults: dict[str, str]) -> str:
    started = json_defaults.get(table.preamble.name)
    if table.const_default_action_id:
        name = _action_name(build.schema, table.const_default_action_id)
        if started is not None and started.startswith(f"{name}("):
            name = started  # with its arguments
        return f"{md.code(name, in_table=False)} (const: the controller cannot change it)"
    if table.HasField("initial_default_action"):
        initial = table.initial_default_action
        name = _action_name(build.schema, initial.action_id)
        return f"{md.code(name, in_table=False)} at start; the controller may change it"
    if started is not None:
        return (
            f"{md.code(started, in_table=False)} at start (BMv2 JSON); the controller may change it"
        )
    return "not fixed; the controller may set it"


def _refs(references: dict[Key, list[str]], kind: str, name: str) -> str:
    modules = references.get((kind, name), [])
    return md.codes(modules, in_table=False) if modules else "none"


def table_section(
    build: Build, table: Any, references: dict[Key, list[str]], json_defaults: dict[str, str]
) -> list[str]:
    schema = build.schema
    info = build.info
    name = table.preamble.name
    out = [f"### {md.code(name, in_table=False)}", "", *_doc(table.preamble)]
    if table.match_fields:
        rows = []
        for field in table.match_fields:
            kind = (
                _enum(p4i.MatchField.MatchType, field.match_type).lower()
                if field.HasField("match_type")
                else field.other_match_type
            )
            rows.append([md.code(field.name), kind, str(field.bitwidth)])
        out += md.table(["Key", "Match", "Bits"], rows)
    else:
        out.append("No key: the table holds its default action only.")
    out.append("")
    actions = []
    for ref in table.action_refs:
        scope = _enum(p4i.ActionRef.Scope, ref.scope)
        note = {"DEFAULT_ONLY": " (default only)", "TABLE_ONLY": " (entries only)"}.get(scope, "")
        actions.append(md.code(_action_name(schema, ref.id), in_table=False) + note)
    items = [
        f"- Actions: {', '.join(actions)}",
        f"- Default action: {_default_action(build, table, json_defaults)}",
        f"- Size: {table.size} {'entry' if table.size == 1 else 'entries'}",
    ]
    if table.is_const_table:
        items.append("- Const table: its entries are fixed by the program")
    idle = _enum(p4i.Table.IdleTimeoutBehavior, table.idle_timeout_behavior)
    items.append(
        "- Idle timeout: "
        + ("entries age; the switch notifies the controller" if idle == "NOTIFY_CONTROL" else "no")
    )
    direct = set(table.direct_resource_ids)
    for counter in info.direct_counters:
        if counter.preamble.id in direct:
            unit = _enum(p4i.CounterSpec.Unit, counter.spec.unit).lower()
            items.append(f"- Direct counter: {md.code(counter.preamble.name)} ({unit})")
    for meter in info.direct_meters:
        if meter.preamble.id in direct:
            unit = _enum(p4i.MeterSpec.Unit, meter.spec.unit).lower()
            items.append(f"- Direct meter: {md.code(meter.preamble.name)} ({unit})")
    if table.implementation_id:
        profile = schema.action_profiles.get_id(table.implementation_id)
        selector = "with a selector" if profile.with_selector else "no selector"
        items.append(
            f"- Implementation: action profile {md.code(profile.preamble.name)} ({selector}, "
            f"{profile.size} members)"
        )
    items.append(f"- Written by: {_refs(references, 'tables', name)}")
    return [*out, *items, ""]


# -- the kinds ---------------------------------------------------------------------------------


def _tables_of_action(info: Any) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for table in info.tables:
        for ref in table.action_refs:
            out.setdefault(ref.id, []).append(table.preamble.name)
    return out


def actions_section(build: Build) -> list[str]:
    info = build.info
    used = _tables_of_action(info)
    rows = []
    for action in info.actions:
        params = ", ".join(f"{md.code(p.name)} ({p.bitwidth})" for p in action.params)
        rows.append(
            [
                md.code(action.preamble.name),
                params or "none",
                md.codes(used.get(action.preamble.id, [])) or "none",
            ]
        )
    return [
        f"## Actions ({len(info.actions)})",
        "",
        "Parameters with their widths in bits.",
        "",
        *md.table(["Action", "Parameters", "Tables"], rows),
        "",
    ]


def _section(title: str, count: int, head: Sequence[str], rows: list[list[str]]) -> list[str]:
    if not rows:
        return [f"## {title}", "", "None in this build.", ""]
    return [f"## {title} ({count})", "", *md.table(head, rows), ""]


def _table_name(info: Any, ident: int) -> str:
    for table in info.tables:
        if table.preamble.id == ident:
            return str(table.preamble.name)
    return f"{ident:#x}"


def others_sections(build: Build, references: dict[Key, list[str]]) -> list[str]:
    info = build.info

    def named(kind: str, name: str) -> str:
        return md.codes(references.get((kind, name), []))

    out: list[str] = []
    out += _section(
        "Action profiles",
        len(info.action_profiles),
        ["Profile", "Tables", "Selector", "Size", "Max group size"],
        [
            [
                md.code(p.preamble.name),
                md.codes(_table_name(info, t) for t in p.table_ids),
                "yes" if p.with_selector else "no",
                str(p.size),
                str(p.max_group_size) if p.max_group_size else "no limit given",
            ]
            for p in info.action_profiles
        ],
    )
    out += _section(
        "Counters",
        len(info.counters),
        ["Counter", "Unit", "Cells", "Named in"],
        [
            [
                md.code(c.preamble.name),
                _enum(p4i.CounterSpec.Unit, c.spec.unit).lower(),
                str(c.size),
                named("counters", c.preamble.name),
            ]
            for c in info.counters
        ],
    )
    out += _section(
        "Direct counters",
        len(info.direct_counters),
        ["Counter", "Unit", "Table", "Named in"],
        [
            [
                md.code(c.preamble.name),
                _enum(p4i.CounterSpec.Unit, c.spec.unit).lower(),
                md.code(_table_name(info, c.direct_table_id)),
                named("direct_counters", c.preamble.name),
            ]
            for c in info.direct_counters
        ],
    )
    out += _section(
        "Meters",
        len(info.meters),
        ["Meter", "Unit", "Cells", "Named in"],
        [
            [
                md.code(m.preamble.name),
                _enum(p4i.MeterSpec.Unit, m.spec.unit).lower(),
                str(m.size),
                named("meters", m.preamble.name),
            ]
            for m in info.meters
        ],
    )
    out += _section(
        "Direct meters",
        len(info.direct_meters),
        ["Meter", "Unit", "Table"],
        [
            [
                md.code(m.preamble.name),
                _enum(p4i.MeterSpec.Unit, m.spec.unit).lower(),
                md.code(_table_name(info, m.direct_table_id)),
            ]
            for m in info.direct_meters
        ],
    )
    out += _section(
        "Registers",
        len(info.registers),
        ["Register", "Cell type", "Cells", "Named in"],
        [
            [
                md.code(r.preamble.name),
                md.code(type_text(r.type_spec)),
                str(r.size),
                named("registers", r.preamble.name),
            ]
            for r in info.registers
        ],
    )
    out += [f"## Digests ({len(info.digests)})", ""]
    for digest in info.digests:
        name = digest.preamble.name
        out += [f"### {md.code(name, in_table=False)}", "", *_doc(digest.preamble)]
        spec = digest.type_spec
        struct = info.type_info.structs.get(spec.struct.name) if spec.HasField("struct") else None
        if struct is None:
            out += [f"Type: {md.code(type_text(spec), in_table=False)}", ""]
        else:
            out += [f"Fields of {md.code(spec.struct.name, in_table=False)}, in order:", ""]
            out += md.table(
                ["Field", "Type"],
                [[md.code(m.name), md.code(type_text(m.type_spec))] for m in struct.members],
            )
            out.append("")
        out += [f"Named in: {_refs(references, 'digests', name)}", ""]
    out += [
        "## Controller packet metadata",
        "",
        "The headers that packet-ins carry from the NPM (`packet_in`) and packet-outs to it "
        "(`packet_out`), fields in order, widths in bits.",
        "",
    ]
    for header in info.controller_packet_metadata:
        out += [f"### {md.code(header.preamble.name, in_table=False)}", ""]
        out += md.table(
            ["Field", "Bits"], [[md.code(m.name), str(m.bitwidth)] for m in header.metadata]
        )
        out.append("")
    out += _section(
        "Value sets",
        len(info.value_sets),
        ["Value set", "Size", "Match fields"],
        [
            [
                md.code(v.preamble.name),
                str(v.size),
                ", ".join(f"{md.code(f.name)} ({f.bitwidth})" for f in v.match),
            ]
            for v in info.value_sets
        ],
    )
    return out


# -- other builds ------------------------------------------------------------------------------


def _names(info: Any, kind: str) -> dict[str, Any]:
    return {obj.preamble.name: obj for obj in getattr(info, kind)}


@dataclass(frozen=True, slots=True)
class Difference:
    missing: list[Key]  # in the default build, not in this one
    extra: list[Key]  # in this build only
    sizes: list[tuple[str, str, int, int]]  # (kind, name, default size, this build's)


def compare(main: Any, other: Any) -> Difference:
    missing: list[Key] = []
    extra: list[Key] = []
    sizes: list[tuple[str, str, int, int]] = []
    for kind in KINDS:
        ours, theirs = _names(main, kind), _names(other, kind)
        missing += [(kind, n) for n in ours if n not in theirs]
        extra += [(kind, n) for n in theirs if n not in ours]
        if kind in SIZED:
            sizes += [
                (kind, n, ours[n].size, theirs[n].size)
                for n in ours
                if n in theirs and ours[n].size != theirs[n].size
            ]
    return Difference(missing, extra, sizes)


def _by_kind(keys: Iterable[Key]) -> list[str]:
    grouped: dict[str, list[str]] = {}
    for kind, name in keys:
        grouped.setdefault(kind, []).append(name)
    return [
        f"    - {KIND_WORDS[kind]}s: {md.codes(sorted(names), in_table=False)}"
        for kind, names in grouped.items()
    ]


def builds_section(main: Build, others: list[Build]) -> list[str]:
    out = [
        "## Other builds",
        "",
        f"What the other committed builds' P4Info has that {md.code(main.path.as_posix())} "
        "has not, and the reverse, and the sizes that differ (the `make p4` and `make tofino` "
        "profiles).",
        "",
    ]
    for build in others:
        diff = compare(main.info, build.info)
        arch = build.info.pkg_info.arch or "unknown"
        out += [
            f"### {md.code(build.name, in_table=False)}",
            "",
            f"{md.code(build.path.as_posix(), in_table=False)}, architecture {md.code(arch)}.",
            "",
        ]
        if not (diff.missing or diff.extra or diff.sizes):
            out += ["The same objects and sizes as the default build.", ""]
            continue
        if diff.missing:
            out += ["- Not in this build:", *_by_kind(diff.missing)]
        if diff.extra:
            out += ["- Only in this build:", *_by_kind(diff.extra)]
        out.append("")
        if diff.sizes:
            out += md.table(
                ["Object", "Kind", "Default build", "This build"],
                [
                    [md.code(name), KIND_WORDS[kind], str(ours), str(theirs)]
                    for kind, name, ours, theirs in diff.sizes
                ],
            )
            out.append("")
    return out


# -- the page ----------------------------------------------------------------------------------


def objects(info: Any) -> dict[str, list[str]]:
    """kind -> names of the P4Info's objects of that kind."""
    return {kind: list(_names(info, kind)) for kind in KINDS}


def render() -> str:
    main = load(MAIN, "default")
    info = main.info
    references = controller_references(objects(info))
    counts = [[KIND_WORDS[k] + "s", str(len(getattr(info, k)))] for k in KINDS]
    lines = [
        md.header(SOURCE),
        "",
        "# P4Runtime objects of the NPM",
        "",
        f"What the controller finds in {md.code(MAIN.as_posix(), in_table=False)}, the "
        f"P4Info of the default build (architecture {md.code(info.pkg_info.arch)}), "
        "in P4Info order. The controller and the tests name these objects through "
        '`opengate/p4constants.py` (`make constants`). "Written by" and "Named in" list the '
        "controller modules that name an object: by its constant there, or, for a table, by its "
        "name as a string (the HSM compiler's tables). The last section compares the other "
        "builds.",
        "",
        *md.table(["Kind", "Count"], counts),
        "",
        f"## Tables ({len(info.tables)})",
        "",
    ]
    json_defaults = _json_defaults(main)
    for table in info.tables:
        lines += table_section(main, table, references, json_defaults)
    lines += actions_section(main)
    lines += others_sections(main, references)
    lines += builds_section(main, other_builds())
    return md.page(lines)
