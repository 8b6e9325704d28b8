"""Loads a BMv2 JSON document into an executable program (tables, externs, compiled code)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from softswitch import fuse
from softswitch import tables as tb
from softswitch.codegen import Codegen
from softswitch.codegen_base import E, parse_hex
from softswitch.errors import LoadError
from softswitch.externs import CounterArray, MeterArray, RegisterArray, ValueSet
from softswitch.layout import FieldInfo, Layout, build_layout

LOG = logging.getLogger(__name__)

SUPPORTED_MAJOR = 2
# Run each pipeline as one fused function (softswitch.fuse) rather than node by node. The node
# functions are always built too (the fused code falls back on them); tests compare both ways.
FUSE = True
CONST_PRIORITY_BASE = 1 << 24  # JSON priorities (smaller wins) -> P4Runtime's (larger wins)


@dataclass(slots=True)
class Pipeline:
    name: str
    init: Any  # first node function, or None
    has_exit: bool


@dataclass(slots=True)
class Program:
    doc: dict[str, Any]
    layout: Layout
    ns: dict[str, Any]
    parser_start: Any
    verify_checksums: Any
    update_checksums: Any
    deparse: Any
    ingress: Pipeline
    egress: Pipeline
    std: dict[str, FieldInfo]
    actions: dict[int, tb.ActionSpec]
    tables: dict[str, tb.Table]
    profiles: dict[str, tb.ActionProfile]
    counters: dict[str, CounterArray]
    meters: dict[str, MeterArray]
    registers: dict[str, RegisterArray]
    value_sets: dict[str, ValueSet]
    field_lists: dict[int, list[int]]  # id -> PHV slots
    learn_lists: dict[int, tuple[str, list[FieldInfo]]]  # id -> (name, fields)
    errors: dict[str, int]
    parser_error_slot: int = -1
    checksum_error_slot: int = -1
    extra: dict[str, Any] = field(default_factory=dict)

    def reset_state(self) -> None:
        """Forget every runtime entry and counter (used when a pipeline is replaced)."""
        for t in self.tables.values():
            t.clear()
        for prof in self.profiles.values():
            prof.clear()


def load_json_bytes(data: bytes) -> Program:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise LoadError(f"the device config is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise LoadError("the device config is not a BMv2 JSON object")
    return load_program(doc)


def load_program(doc: dict[str, Any]) -> Program:
    version = doc.get("__meta__", {}).get("version")
    if version and int(version[0]) != SUPPORTED_MAJOR:
        raise LoadError(f"__meta__.version {version}: only BMv2 JSON format 2.x is supported")
    layout = build_layout(doc)
    gen = Codegen(doc, layout)

    counters: dict[str, CounterArray] = {}
    for c in doc.get("counter_arrays", []):
        counters[c["name"]] = CounterArray(
            c["name"],
            int(c["id"]),
            int(c.get("size", 0)),
            bool(c.get("is_direct")),
            c.get("binding"),
        )
        gen.objects[("counter", c["name"])] = counters[c["name"]]
    meters: dict[str, MeterArray] = {}
    for m in doc.get("meter_arrays", []):
        where = f"meter array {m['name']!r}"
        if int(m.get("rate_count", 2)) != 2:
            raise LoadError(f"{where}: only two-rate three-colour meters are supported")
        result_slot = -1
        if m.get("is_direct") and m.get("result_target"):
            result_slot = gen.field_ref(m["result_target"], where).fld.slot  # type: ignore[union-attr]
        meters[m["name"]] = MeterArray(
            m["name"],
            int(m["id"]),
            int(m.get("size", 0)),
            bool(m.get("is_direct")),
            m.get("type", "bytes") == "packets",
            m.get("binding"),
            result_slot,
        )
        gen.objects[("meter", m["name"])] = meters[m["name"]]
    registers: dict[str, RegisterArray] = {}
    for r in doc.get("register_arrays", []):
        registers[r["name"]] = RegisterArray(
            r["name"], int(r["id"]), int(r["size"]), int(r["bitwidth"])
        )
        gen.objects[("register", r["name"])] = registers[r["name"]]
    vsets: dict[str, ValueSet] = {}
    for v in doc.get("parse_vsets", []):
        vsets[v["name"]] = ValueSet(
            v["name"],
            int(v["id"]),
            int(v.get("compressed_bitwidth", 0)),
            int(v.get("max_size", 0) or 0),
        )
    if doc.get("extern_instances"):
        names = ", ".join(repr(x.get("name")) for x in doc["extern_instances"])
        raise LoadError(f"extern instances are not supported: {names}")

    # actions
    actions: dict[int, tb.ActionSpec] = {}
    for act in doc.get("actions", []):
        fname = gen.action(act)
        params = [(r["name"], int(r["bitwidth"])) for r in act.get("runtime_data", [])]
        actions[int(act["id"])] = tb.ActionSpec(act["name"], int(act["id"]), params, fname)  # type: ignore[arg-type]

    # parser and deparser (v1model: one of each, called "parser" and "deparser")
    parsers = doc.get("parsers", [])
    if len(parsers) != 1:
        raise LoadError(f"expected one parser (v1model), found {len(parsers)}")
    start = gen.parser(parsers[0], vsets)
    deparsers = doc.get("deparsers", [])
    if len(deparsers) != 1:
        raise LoadError(f"expected one deparser (v1model), found {len(deparsers)}")
    deparse = gen.deparser(deparsers[0])
    verify = gen.checksums(verify=True)
    update = gen.checksums(verify=False)

    # pipelines
    pipelines = {p["name"]: p for p in doc.get("pipelines", [])}
    for needed in ("ingress", "egress"):
        if needed not in pipelines:
            raise LoadError(f"no pipeline named {needed!r} (not a v1model program)")
    if set(pipelines) - {"ingress", "egress"}:
        raise LoadError(f"unexpected pipelines: {sorted(set(pipelines) - {'ingress', 'egress'})}")
    profiles: dict[str, tb.ActionProfile] = {}
    tables: dict[str, tb.Table] = {}
    compiled: dict[str, tuple[str, bool]] = {}
    for pname, pipe in pipelines.items():
        compiled[pname] = _compile_pipeline(gen, pipe, actions, tables, profiles, meters, counters)

    ns = gen.build()
    for spec in actions.values():
        spec.fn = ns[spec.fn]  # type: ignore[index]
    for prof in profiles.values():
        if prof.selector_hash is not None:
            prof.selector_hash = ns[prof.selector_hash]  # type: ignore[index]
    for t in tables.values():
        for node_name, fn_name in list(t.nodes.items()):
            t.nodes[node_name] = ns[fn_name] if isinstance(fn_name, str) else fn_name
        if t.initial_default is not None:
            spec, data = t.initial_default
            t.default = tb.Entry((), 0, spec, data, spec.fn, t.next_node(spec.name, hit=False))
    for t in tables.values():
        for e in list(t.entries.values()):
            assert e.action is not None
            e.fn = e.action.fn
            e.nxt = t.next_node(e.action.name, hit=True)

    field_lists: dict[int, list[int]] = {}
    for fl in doc.get("field_lists", []):
        slots = []
        for el in fl.get("elements", []):
            if el.get("type") == "field":
                ref = gen.field_ref(el["value"], f"field list {fl.get('name')!r}")
                if ref.fld is not None:
                    slots.append(ref.fld.slot)
        field_lists[int(fl["id"])] = slots
    learn_lists: dict[int, tuple[str, list[FieldInfo]]] = {}
    for ll in doc.get("learn_lists", []):
        flds = []
        for el in ll.get("elements", []):
            ref = gen.field_ref(el["value"], f"learn list {ll.get('name')!r}")
            if ref.fld is None:
                raise LoadError(f"learn list {ll.get('name')!r}: bad element {el!r}")
            flds.append(ref.fld)
        learn_lists[int(ll["id"])] = (ll["name"], flds)

    std = gen.std
    prog = Program(
        doc=doc,
        layout=layout,
        ns=ns,
        parser_start=ns[start] if start != "None" else None,
        verify_checksums=ns[verify],
        update_checksums=ns[update],
        deparse=ns[deparse],
        ingress=Pipeline(
            "ingress",
            ns[compiled["ingress"][0]] if compiled["ingress"][0] != "None" else None,
            compiled["ingress"][1],
        ),
        egress=Pipeline(
            "egress",
            ns[compiled["egress"][0]] if compiled["egress"][0] != "None" else None,
            compiled["egress"][1],
        ),
        std=std,
        actions=actions,
        tables=tables,
        profiles=profiles,
        counters=counters,
        meters=meters,
        registers=registers,
        value_sets=vsets,
        field_lists=field_lists,
        learn_lists=learn_lists,
        errors=gen.errors,
        parser_error_slot=std["parser_error"].slot if "parser_error" in std else -1,
        checksum_error_slot=std["checksum_error"].slot if "checksum_error" in std else -1,
    )
    fill_indirect_next(prog)
    LOG.info(
        "loaded program: %d headers, %d tables, %d actions",
        len(layout.headers),
        len(tables),
        len(actions),
    )
    return prog


def _key_code(
    gen: Codegen, key: list[dict[str, Any]], where: str
) -> tuple[list[str], list[str], list[int], list[str]]:
    kinds: list[str] = []
    codes: list[str] = []
    widths: list[int] = []
    names: list[str] = []
    for k in key:
        kind = k.get("match_type")
        if kind not in ("exact", "lpm", "ternary", "range", "optional", "valid"):
            raise LoadError(f"{where}: unsupported match kind {kind!r}")
        target: Any = k.get("target")
        if kind == "valid":
            h = gen.layout.header(target, where)
            code, width = f"f[{h.vslot}]", 1
        else:
            e = gen.field_ref(target, where)
            if e.fld is not None and e.fld.varbit:
                raise LoadError(f"{where}: matching on a variable-length field")
            width = e.width
            code = f"({e.code} & {(1 << width) - 1})" if e.signed else e.code
        if k.get("mask") is not None:
            code = f"({code} & {parse_hex(k['mask'], where)})"
        kinds.append(kind)
        codes.append(code)
        widths.append(width)
        default_name = ".".join(target) if isinstance(target, list) else str(target)
        names.append(k.get("name") or default_name)
    return kinds, codes, widths, names


def _compile_pipeline(
    gen: Codegen,
    pipe: dict[str, Any],
    actions: dict[int, tb.ActionSpec],
    tables: dict[str, tb.Table],
    profiles: dict[str, tb.ActionProfile],
    meters: dict[str, MeterArray],
    counters: dict[str, CounterArray],
) -> tuple[str, bool]:
    node_fn: dict[str, str] = {}
    for t in pipe.get("tables", []):
        node_fn[t["name"]] = gen.fresh("_N")
    for c in pipe.get("conditionals", []):
        node_fn[c["name"]] = gen.fresh("_N")
    for a in pipe.get("action_calls", []):
        node_fn[a["name"]] = gen.fresh("_N")

    def ref(name: str | None, where: str) -> str:
        if name is None:
            return "None"
        if name not in node_fn:
            raise LoadError(f"{where}: unknown next node {name!r}")
        return node_fn[name]

    key_codes: dict[str, str] = {}
    exit_actions = {
        int(a["id"])
        for a in gen.doc.get("actions", [])
        if any(p.get("op") == "exit" for p in a.get("primitives", []))
    }
    has_exit = False

    for prof in pipe.get("action_profiles", []):
        sel = prof.get("selector")
        sel_fn = None
        algo = None
        if sel:
            algo = sel.get("algo")
            sel_fn = gen.hash_function(
                algo, sel.get("input", []), f"action selector {prof['name']!r}"
            )
        profiles[prof["name"]] = tb.ActionProfile(
            prof["name"],
            int(prof["id"]),
            int(prof.get("max_size", 0)),
            algo,
            sel_fn,  # type: ignore[arg-type]
        )

    for t in pipe.get("tables", []):
        where = f"table {t['name']!r}"
        kinds, codes, widths, names = _key_code(gen, t.get("key", []), where)
        impl = t.get("type", "simple")
        if impl not in ("simple", "indirect", "indirect_ws"):
            raise LoadError(f"{where}: unsupported table type {impl!r}")
        profile = None
        if impl != "simple":
            profile = profiles.get(t.get("action_profile"))
            if profile is None:
                raise LoadError(f"{where}: unknown action profile {t.get('action_profile')!r}")
        ids = t.get("action_ids")
        if ids is None:
            by_name = {a.name: a for a in actions.values()}
            tacts = {by_name[n].id: by_name[n] for n in t.get("actions", []) if n in by_name}
        else:
            tacts = {int(i): actions[int(i)] for i in ids}
        nxt = t.get("next_tables", {}) or {}
        has_hit_miss = "__HIT__" in nxt or "__MISS__" in nxt
        dmeter = meters.get(t["direct_meters"]) if t.get("direct_meters") else None
        if t.get("direct_meters") and dmeter is None:
            raise LoadError(f"{where}: unknown direct meter {t['direct_meters']!r}")
        with_counters = bool(t.get("with_counters"))
        table = tb.Table(
            name=t["name"],
            id=int(t["id"]),
            kinds=kinds,
            widths=widths,
            key_names=names,
            impl=impl,
            profile=profile,
            actions=tacts,
            max_size=int(t.get("max_size", 0)),
            with_counters=with_counters,
            support_timeout=bool(t.get("support_timeout")),
            direct_meter=dmeter,
            next_by_action={k: v for k, v in nxt.items() if not k.startswith("__")},
            hit_next=nxt.get("__HIT__"),
            miss_next=nxt.get("__MISS__"),
            has_hit_miss=has_hit_miss,
            base_default_next=t.get("base_default_next"),
            index=tb.make_index(kinds, widths),
        )
        for name in [
            *list(table.next_by_action.values()),
            table.hit_next,
            table.miss_next,
            table.base_default_next,
        ]:
            if name is not None:
                table.nodes[name] = ref(name, where)  # type: ignore[assignment]
        de = t.get("default_entry")
        if de is not None:
            spec = actions.get(int(de["action_id"]))
            if spec is None:
                raise LoadError(f"{where}: default action id {de['action_id']} unknown")
            data = tuple(parse_hex(x, where) for x in de.get("action_data", []))
            table.initial_default = (spec, data)
            table.default_const = bool(de.get("action_const"))
        for ce in t.get("entries", []) or []:
            table.immutable = True
            table.insert(_const_entry(table, ce, actions, where))
        tables[table.name] = table
        if any(a in exit_actions for a in tacts):
            has_exit = True
        gen.add_source(_table_node(gen, table, node_fn[t["name"]], codes, tacts, exit_actions))
        style = tb.index_key_style(table.kinds)
        key_codes[t["name"]] = (
            "" if style == "none" else codes[0] if style == "int" else f"({', '.join(codes)},)"
        )
        # direct counters bound to this table
        for c in counters.values():
            if c.is_direct and c.binding == table.name:
                table.with_counters = True

    for c in pipe.get("conditionals", []):
        where = f"conditional {c['name']!r}"
        cond = gen.boolean(gen.expr(c["expression"], where), where)
        t_next = ref(c.get("true_next"), where)
        f_next = ref(c.get("false_next"), where)
        gen.add_source(
            [f"def {node_fn[c['name']]}(p, f):", f"    return {t_next} if {cond} else {f_next}"]
        )

    for a in pipe.get("action_calls", []):
        where = f"action call {a['name']!r}"
        spec = actions.get(int(a["action_id"]))
        if spec is None:
            raise LoadError(f"{where}: unknown action id {a['action_id']}")
        nm = gen.const(spec, "AS")
        lines = [f"def {node_fn[a['name']]}(p, f):", f"    {nm}.fn(p, f, ())"]
        if int(a["action_id"]) in exit_actions:
            has_exit = True
            lines.append("    if p.exit: return None")
        lines.append(f"    return {ref(a.get('next_node'), where)}")
        gen.add_source(lines)

    init = pipe.get("init_table")
    if not init:
        return "None", has_exit
    graph = fuse.graph_of(gen, pipe, tables, key_codes, actions, exit_actions) if FUSE else None
    if graph is None:
        return ref(init, f"pipeline {pipe['name']!r}"), has_exit
    fname = gen.fresh("_P")
    source = fuse.fuse(gen, graph, node_fn, fname)
    if source is None:
        LOG.warning("pipeline %r: its control graph has a cycle; run node by node", pipe["name"])
        return ref(init, f"pipeline {pipe['name']!r}"), has_exit
    gen.add_source(source)
    return fname, has_exit


def _table_node(
    gen: Codegen,
    table: tb.Table,
    fname: str,
    codes: list[str],
    tacts: dict[int, tb.ActionSpec],
    exit_actions: set[int],
) -> list[str]:
    tname = gen.const(table, "T")
    style = tb.index_key_style(table.kinds)
    may_exit = any(a in exit_actions for a in tacts)
    exit_line = ["    if p.exit: return None"] if may_exit else []
    miss_next = "None"
    if table.has_hit_miss:
        miss_next = table.nodes.get(table.miss_next, "None") if table.miss_next else "None"  # type: ignore[assignment]
    elif table.base_default_next:
        miss_next = table.nodes.get(table.base_default_next, "None")  # type: ignore[assignment]
    lines = [f"def {fname}(p, f):"]
    if style == "none":
        lines += [
            f"    e = {tname}.default",
            f"    if e is None: return {miss_next}",
            "    e.fn(p, f, e.data)",
            *exit_line,
            "    return e.nxt",
        ]
        return lines
    key = codes[0] if style == "int" else "(" + ", ".join(codes) + ",)"
    look = gen.const(table.index.lookup, "L")
    lines += [
        f"    e = {look}({key})",
        "    if e is None:",
        f"        e = {tname}.default",
        f"        if e is None: return {miss_next}",
        "        e.fn(p, f, e.data)",
        *["    " + x for x in exit_line],
        "        return e.nxt",
    ]
    if table.with_counters:
        lines.append("    c = e.ctr")
        lines.append("    if c is not None: c[0] += 1; c[1] += p.ilen")
    if table.support_timeout:
        lines.append("    e.last_hit = _mono()")
        lines.append("    e.notified = False")
    if table.direct_meter is not None and table.direct_meter.result_slot >= 0:
        lines.append("    m = e.meter")
        lines.append(
            f"    f[{table.direct_meter.result_slot}] = m.execute(p.ilen) if m is not None else 0"
        )
    if table.impl == "simple":
        lines += ["    e.fn(p, f, e.data)", *exit_line, "    return e.nxt"]
        return lines
    nx = gen.const({}, "NX")
    table.nodes["__indirect_next__"] = nx  # type: ignore[assignment]
    lines += [
        "    mb = e.member",
        "    if mb is None:",
        "        x = e.group.expanded",
        f"        if not x: return {miss_next}",
    ]
    if table.profile is not None and table.profile.selector_hash is not None:
        lines.append(f"        mb = x[{table.profile.selector_hash}(p, f) % len(x)]")
    else:
        lines.append("        mb = x[0]")
    lines += [
        "    a = mb.action",
        "    a.fn(p, f, mb.data)",
        *exit_line,
        f"    return {nx}.get(a.name)",
    ]
    return lines


def fill_indirect_next(prog: Program) -> None:
    """Bind, for indirect tables, the next node of each action (needs compiled nodes)."""
    for t in prog.tables.values():
        nx: Any = t.nodes.get("__indirect_next__")
        if isinstance(nx, dict):
            for spec in t.actions.values():
                nx[spec.name] = t.next_node(spec.name, hit=True)


def _const_entry(
    table: tb.Table, ce: dict[str, Any], actions: dict[int, tb.ActionSpec], where: str
) -> tb.Entry:
    keys: list[Any] = []
    ranges: list[tuple[int, int, int]] = []
    for pos, (mk, kind) in enumerate(zip(ce.get("match_key", []), table.kinds, strict=True)):
        mt = mk.get("match_type")
        if mt in {"exact", "valid"}:
            keys.append(parse_hex(mk["key"], where) if mt == "exact" else int(bool(mk["key"])))
        elif mt == "lpm":
            keys.append((parse_hex(mk["key"], where), int(mk["prefix_length"])))
        elif mt == "ternary":
            keys.append((parse_hex(mk["key"], where), parse_hex(mk["mask"], where)))
        elif mt == "range":
            lo, hi = parse_hex(mk["start"], where), parse_hex(mk["end"], where)
            keys.append((lo, hi))
            ranges.append((pos, lo, hi))
        elif mt == "optional":
            keys.append(parse_hex(mk["key"], where))
        else:
            raise LoadError(f"{where}: const entry with match type {mt!r}")
        if kind == "optional" and mt == "ternary":
            value, mask = keys[-1]
            keys[-1] = value if mask else None
    ae = ce.get("action_entry", {})
    spec = actions.get(int(ae.get("action_id", -1)))
    if spec is None:
        raise LoadError(f"{where}: const entry with unknown action id {ae.get('action_id')}")
    data = tuple(parse_hex(x, where) for x in ae.get("action_data", []))
    prio = CONST_PRIORITY_BASE - int(ce.get("priority", 0)) if table.needs_priority else 0
    entry = tb.Entry(tuple(keys), prio, spec, data, None, is_const=True, ranges=tuple(ranges))
    if table.with_counters:
        entry.ctr = [0, 0]
    return entry


__all__ = ["E", "LoadError", "Program", "fill_indirect_next", "load_json_bytes", "load_program"]
