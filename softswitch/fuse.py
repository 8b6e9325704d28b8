"""One Python function per pipeline: the control graph turned back into nested ifs.

The BMv2 JSON gives a control as a graph of nodes (tables, conditionals, action calls), each
naming its successors; run node by node, a packet costs one function call per node, and p4c makes
a keyless table with a constant action of every statement outside a table (`tbl_*`), so most
nodes do very little. Here the graph, which comes from structured P4 (if/else, apply/switch), is
structured again: a branch runs until its immediate post-dominator (where its paths meet), and
the code continues there. Constant default actions of keyless tables are inlined, action data
included. What cannot be structured within the budgets below (nesting, size) ends with a jump
back to the node functions, so the result is always correct and at worst as fast as before.

The semantics are the node functions' own (program._table_node): same lookups, counters, idle
time stamps, meters, selector choice, hit/miss and per-action successors, `exit`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from softswitch import tables as tb
from softswitch.codegen import Codegen

MAX_DEPTH = 40  # nested ifs in one function (CPython allows about 100 indentation levels)
MAX_NODES = 4000  # node emissions per pipeline (code duplication bound)
EXIT = "<exit>"  # the sink after the last node


@dataclass(slots=True)
class Node:
    kind: str  # "table" | "cond" | "call"
    succ: list[str]  # distinct successors (EXIT for None)
    cond: str = ""  # conditional: Python boolean expression
    true_next: str = EXIT
    false_next: str = EXIT
    table: tb.Table | None = None
    key_code: str = ""  # table: the key expression presented to its index ("" if keyless)
    actions: dict[int, tb.ActionSpec] = field(default_factory=dict)
    action: tb.ActionSpec | None = None  # action call
    next_node: str = EXIT


@dataclass(slots=True)
class Graph:
    nodes: dict[str, Node]
    init: str
    exit_actions: set[int]
    inline: Callable[[tb.ActionSpec], list[str] | None]


class CyclicGraphError(ValueError):
    """The control graph has a cycle (BMv2 JSON controls do not): run it node by node."""


def post_dominators(nodes: dict[str, Node], init: str) -> dict[str, str]:
    """Immediate post-dominator of every node reachable from `init` (EXIT for the sink)."""
    order: list[str] = []
    seen: set[str] = set()
    open_: set[str] = set()  # on the DFS stack

    def visit(n: str) -> None:  # iterative DFS post-order
        stack: list[tuple[str, int]] = [(n, 0)]
        seen.add(n)
        open_.add(n)
        while stack:
            name, i = stack[-1]
            succ = nodes[name].succ
            if i < len(succ):
                stack[-1] = (name, i + 1)
                s = succ[i]
                if s in open_:
                    raise CyclicGraphError(f"control node {s!r} is reached from itself")
                if s != EXIT and s not in seen:
                    seen.add(s)
                    open_.add(s)
                    stack.append((s, 0))
            else:
                stack.pop()
                open_.discard(name)
                order.append(name)

    visit(init)
    ipdom: dict[str, str] = {EXIT: EXIT}
    depth: dict[str, int] = {EXIT: 0}

    def meet(a: str, b: str) -> str:
        while a != b:
            if depth[a] >= depth[b]:
                a = ipdom[a]
            else:
                b = ipdom[b]
        return a

    for name in order:  # post-order: successors first (the graph is a DAG)
        succ = nodes[name].succ
        j = succ[0]
        for s in succ[1:]:
            j = meet(j, s)
        ipdom[name] = j
        depth[name] = depth[j] + 1
    return ipdom


class Fuser:
    def __init__(self, gen: Codegen, graph: Graph, node_fn: dict[str, str]) -> None:
        self.gen = gen
        self.g = graph
        self.node_fn = node_fn
        self.ipdom = post_dominators(graph.nodes, graph.init)
        self.budget = MAX_NODES

    def build(self, fname: str) -> list[str]:
        body: list[str] = []
        self.emit(self.g.init, EXIT, 1, body)
        return [f"def {fname}(p, f):", *body, "    return None"]

    def emit(self, name: str, stop: str, depth: int, out: list[str]) -> None:
        pad = "    " * depth
        while name not in (stop, EXIT):
            if self.budget <= 0 or depth > MAX_DEPTH:
                out.append(f"{pad}return {self.node_fn[name]}")
                return
            self.budget -= 1
            node = self.g.nodes[name]
            if node.kind == "cond":
                join = self.ipdom[name]
                out.append(f"{pad}if {node.cond}:")
                self.block(node.true_next, join, depth + 1, out)
                out.append(f"{pad}else:")
                self.block(node.false_next, join, depth + 1, out)
                name = join
            elif node.kind == "call":
                assert node.action is not None
                self.call(node.action, (), depth, out)
                name = node.next_node
            else:
                name = self.table(name, node, depth, out)

    def block(self, name: str, stop: str, depth: int, out: list[str]) -> None:
        start = len(out)
        self.emit(name, stop, depth, out)
        if len(out) == start:
            out.append("    " * depth + "pass")

    def call(self, spec: tb.ActionSpec, data: tuple[int, ...], depth: int, out: list[str]) -> None:
        """Run a constant action: inlined when its body is known, else called."""
        pad = "    " * depth
        body = self.g.inline(spec)
        if body is not None:
            if any("ad[" in line for line in body):
                out.append(f"{pad}ad = {self.gen.const(data, 'AD')}")
            out.extend(pad + line for line in body)
            return
        out.append(f"{pad}{self.gen.const(spec, 'AS')}.fn(p, f, {self.gen.const(data, 'AD')})")
        if spec.id in self.g.exit_actions:
            out.append(f"{pad}if p.exit: return None")

    def table(self, name: str, node: Node, depth: int, out: list[str]) -> str:
        """Emit one table application; returns where the code continues."""
        t = node.table
        assert t is not None
        pad = "    " * depth
        exits = any(a in self.g.exit_actions for a in node.actions)
        exit_line = ["if p.exit: return None"] if exits else []
        # Successor of each outcome: "hit"/"miss" for hit-miss tables, else per action id, and
        # "none" when there is no action to run (no default action, or an empty group).
        if t.has_hit_miss:
            hit_to, miss_to = t.hit_next or EXIT, t.miss_next or EXIT
            by_action: dict[int, str] = {}
        else:
            hit_to = miss_to = ""
            by_action = {}
            for aid, a in node.actions.items():  # as tb.Table.next_node
                if a.name in t.next_by_action:
                    by_action[aid] = t.next_by_action[a.name] or EXIT
                else:
                    by_action[aid] = t.base_default_next or EXIT
        none_to = (t.miss_next if t.has_hit_miss else t.base_default_next) or EXIT
        targets = sorted({hit_to, miss_to, none_to, *by_action.values()} - {""})
        index = {s: i for i, s in enumerate(targets)}
        single = len(targets) == 1
        branch_map = self.gen.const({aid: index[s] for aid, s in by_action.items()}, "BR")

        def br(outcome: str, action_expr: str = "") -> list[str]:
            if single:
                return []
            if outcome == "hit" and t.has_hit_miss:
                return [f"BR_ = {index[hit_to]}"]
            if outcome == "miss" and t.has_hit_miss:
                return [f"BR_ = {index[miss_to]}"]
            if outcome == "none":
                return [f"BR_ = {index[none_to]}"]
            return [f"BR_ = {branch_map}[{action_expr}.id]"]

        lines: list[str] = []
        tname = self.gen.const(t, "T")
        default = [
            f"E_ = {tname}.default",
            "if E_ is None:",
            *["    " + x for x in br("none") or ["pass"]],
            "else:",
            "    E_.fn(p, f, E_.data)",
            *["    " + x for x in exit_line],
            *["    " + x for x in br("miss", "E_.action")],
        ]
        if not node.key_code:
            spec_data = t.initial_default
            if t.default_const and spec_data is not None:
                spec, data = spec_data  # a constant default action: its code, inlined
                self.call(spec, data, 0, lines)
                if not single:
                    to = miss_to if t.has_hit_miss else by_action[spec.id]
                    lines.append(f"BR_ = {index[to]}")
            else:
                lines += default
        else:
            look = self.gen.const(t.index.lookup, "L")
            lines += [f"E_ = {look}({node.key_code})", "if E_ is None:"]
            lines += ["    " + x for x in default]
            lines.append("else:")
            hit: list[str] = []
            if t.with_counters:
                hit += ["c = E_.ctr", "if c is not None: c[0] += 1; c[1] += p.ilen"]
            if t.support_timeout:
                hit += ["E_.last_hit = _mono()", "E_.notified = False"]
            meter = t.direct_meter
            if meter is not None and meter.result_slot >= 0:
                hit += [
                    "m = E_.meter",
                    f"f[{meter.result_slot}] = m.execute(p.ilen) if m is not None else 0",
                ]
            if t.impl == "simple":
                hit += ["E_.fn(p, f, E_.data)", *exit_line, *br("hit", "E_.action")]
            else:
                prof = t.profile
                pick = "X_[0]"
                if prof is not None and prof.selector_hash is not None:
                    pick = f"X_[{prof.selector_hash}(p, f) % len(X_)]"
                hit += [
                    "MB_ = E_.member",
                    "if MB_ is None:",
                    "    X_ = E_.group.expanded",
                    f"    if X_: MB_ = {pick}",
                    "if MB_ is None:",
                    *["    " + x for x in br("none") or ["pass"]],
                    "else:",
                    "    A_ = MB_.action",
                    "    A_.fn(p, f, MB_.data)",
                    *["    " + x for x in exit_line],
                    *["    " + x for x in br("hit", "A_")],
                ]
            lines += ["    " + x for x in hit]
        out.extend(pad + x for x in lines)
        if single:
            return targets[0]
        join = self.ipdom[name]
        for i, target in enumerate(targets):
            out.append(f"{pad}{'if' if i == 0 else 'elif'} BR_ == {i}:")
            self.block(target, join, depth + 1, out)
        return join


def graph_of(
    gen: Codegen,
    pipe: dict[str, Any],
    tables: dict[str, tb.Table],
    key_codes: dict[str, str],
    actions: dict[int, tb.ActionSpec],
    exit_actions: set[int],
) -> Graph | None:
    """The control graph of a pipeline, or None if it has no nodes."""
    init = pipe.get("init_table")
    if not init:
        return None
    nodes: dict[str, Node] = {}

    def nxt(name: str | None) -> str:
        return name if name else EXIT

    def distinct(items: list[str]) -> list[str]:
        return list(dict.fromkeys(items))

    for t in pipe.get("tables", []):
        table = tables[t["name"]]
        ids = t.get("action_ids")
        if ids is None:
            by_name = {a.name: a for a in actions.values()}
            tacts = {by_name[n].id: by_name[n] for n in t.get("actions", []) if n in by_name}
        else:
            tacts = {int(i): actions[int(i)] for i in ids}
        if table.has_hit_miss:
            succ = [nxt(table.hit_next), nxt(table.miss_next)]
        else:
            succ = [nxt(table.base_default_next)]
            succ += [
                nxt(table.next_by_action.get(a.name))
                for a in tacts.values()
                if a.name in table.next_by_action
            ]
        nodes[t["name"]] = Node(
            "table", distinct(succ), table=table, key_code=key_codes[t["name"]], actions=tacts
        )
    for c in pipe.get("conditionals", []):
        where = f"conditional {c['name']!r}"
        cond = gen.boolean(gen.expr(c["expression"], where), where)
        tn, fn_ = nxt(c.get("true_next")), nxt(c.get("false_next"))
        nodes[c["name"]] = Node(
            "cond", distinct([tn, fn_]), cond=cond, true_next=tn, false_next=fn_
        )
    for a in pipe.get("action_calls", []):
        spec = actions[int(a["action_id"])]
        n = nxt(a.get("next_node"))
        nodes[a["name"]] = Node("call", [n], action=spec, next_node=n)

    def inline(spec: tb.ActionSpec) -> list[str] | None:
        fn_name = spec.fn if isinstance(spec.fn, str) else None
        return gen.action_bodies.get(fn_name) if fn_name else None

    return Graph(nodes, init, exit_actions, inline)


def fuse(gen: Codegen, graph: Graph, node_fn: dict[str, str], fname: str) -> list[str] | None:
    """Source of `fname(p, f)`, the whole pipeline, which returns None, or the node function to
    go on with where a budget ran out; None if the graph cannot be fused."""
    try:
        return Fuser(gen, graph, node_fn).build(fname)
    except CyclicGraphError:
        return None
