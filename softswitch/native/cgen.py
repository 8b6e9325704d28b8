"""A BMv2 JSON (v1model) compiled to one C file: parser, controls, deparser, checksums, the v1model
packet walk, and the descriptors the Python side needs to mirror tables and externs into it.

The control graph of each pipeline becomes one C function whose nodes are labels: a conditional is
an `if` with two `goto`s, a table a lookup (softswitch/native/og_table.c), its counters, idle time
stamp and direct meter, the action chosen by a `switch`, and a `goto` to the successor that the
JSON names for that outcome; a keyless table with a constant default action is that action,
called directly. The semantics are the Python engine's (softswitch.engine, softswitch.program);
`tests/softswitch/test_native.py` holds the two to the same frames.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from softswitch.codegen_base import DROP_PORT, parse_hex
from softswitch.layout import FieldInfo, HeaderInfo
from softswitch.native.cgen_expr import CE, MAX_WIDTH, ExprC, UnsupportedError, mask_of
from softswitch.program import Program

KIND_CODES = {"exact": 0, "lpm": 1, "ternary": 2, "range": 3, "optional": 4, "valid": 0}
UNSUPPORTED_PRIMITIVES = {
    "clone_ingress_pkt_to_egress": "clone",
    "clone_egress_pkt_to_egress": "clone",
    "resubmit": "resubmit",
    "recirculate": "recirculate",
    "truncate": "truncate",
    "assert": "assert",
    "assume": "assume",
    "push": "header stacks",
    "pop": "header stacks",
}


def parens(code: str) -> str:
    """`code` in one pair of parentheses: as it is if one pair already encloses all of it, so
    that `if` gets no doubled ones (clang's -Wparentheses-equality)."""
    if code.startswith("(") and code.endswith(")"):
        depth = 0
        for i, ch in enumerate(code):
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if depth == 0:
                if i == len(code) - 1:
                    return code
                break
    return f"({code})"


@dataclass(slots=True)
class CProgram:
    """The C source, and where each table and extern array is in the program's `og_dp`."""

    source: str
    tables: dict[str, int] = field(default_factory=dict)
    registers: dict[str, int] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    meters: dict[str, int] = field(default_factory=dict)


class CGen(ExprC):
    def __init__(self, program: Program) -> None:
        super().__init__(program.doc, program.layout)
        self.program = program
        self._check_program()
        self.table_index = {name: i for i, name in enumerate(program.tables)}

    def _check_program(self) -> None:
        doc = self.doc
        for key, what in (
            ("header_stacks", "header stacks"),
            ("header_unions", "header unions"),
            ("header_union_stacks", "header union stacks"),
            ("parse_vsets", "parser value sets"),
        ):
            if doc.get(key):
                raise UnsupportedError(f"the program uses {what}")
        mcast = self.std.get("mcast_grp")
        for act in doc.get("actions", []):
            where = f"action {act.get('name')!r}"
            if any(int(r["bitwidth"]) > MAX_WIDTH for r in act.get("runtime_data", [])):
                raise UnsupportedError(f"{where}: parameter wider than 64 bits")
            for prim in act.get("primitives", []):
                used = UNSUPPORTED_PRIMITIVES.get(prim.get("op", ""))
                if used:
                    raise UnsupportedError(f"{where} uses {used}")
                dst = (prim.get("parameters") or [{}])[0]
                if (
                    mcast is not None
                    and prim.get("op") in ("assign", "modify_field")
                    and dst.get("type") == "field"
                    and self.layout.find_field(".".join(dst["value"])) is mcast
                ):
                    raise UnsupportedError(f"{where} sets mcast_grp (multicast)")
        for ll in doc.get("learn_lists", []):
            if len(ll.get("elements", [])) > 32:
                raise UnsupportedError(f"learn list {ll.get('name')!r} has more than 32 fields")

    # ------------------------------------------------------------------ header bits
    @staticmethod
    def offsets(info: HeaderInfo) -> Iterator[tuple[FieldInfo, str]]:
        """Each field of a header with its bit offset (C; past a variable-length field, whose
        length in bits is `L`, the offset counts it)."""
        fixed, past_varbit = 0, False
        for fld in info.fields:
            yield fld, f"{fixed} + L" if past_varbit else str(fixed)
            if fld.varbit:
                past_varbit = True
            else:
                fixed += fld.width

    def extract(self, info: HeaderInfo, vl: str | None, out: list[str]) -> None:
        """Extract `info` at the parser's cursor (`vl`: the length expression of extract_VL)."""
        if info.varbit is None:
            out.append(f"{{ const uint64_t nb = {info.fixed_bytes};")
        elif vl is None:
            raise UnsupportedError(
                f"header {info.name!r}: variable-length header without extract_VL"
            )
        else:
            out.append(f"{{ uint64_t L = {vl};")
            out.append(
                f"  if (L % 8) {{ err = {self.errors['ParserInvalidArgument']}; goto done; }}"
            )
            out.append(f"  uint64_t nb = {info.fixed_bytes} + L / 8;")
            too_long = self.errors["HeaderTooShort"]
            out.append(f"  if (nb > {info.max_bytes}) {{ err = {too_long}; goto done; }}")
        out.append(
            f"  if (p->pos + nb > p->len) {{ err = {self.errors['PacketTooShort']}; goto done; }}"
        )
        out.append("  const uint8_t *q = p->data + p->pos;")
        for fld, off in self.offsets(info):
            if fld.varbit:
                out.append(f"  memcpy(vb + {self.vb_offset[info.id]}, q + ({off}) / 8, L / 8);")
                out.append(f"  f[{fld.slot}] = 0;")
            elif fld.width:
                out.append(f"  f[{fld.slot}] = og_get_bits(q, {off}, {fld.width});")
            else:
                out.append(f"  f[{fld.slot}] = 0;")
        length = f" f[{info.vlen_slot}] = L;" if info.varbit is not None else ""
        out.append(f"  p->pos += (uint32_t)nb; f[{info.vslot}] = 1;{length} }}")

    def emit_header(self, info: HeaderInfo, out: list[str]) -> None:
        """Append a valid header's bytes at `o + n` (n counts bytes)."""
        if info.varbit is None:
            out.append(f"  if (f[{info.vslot}]) {{ const uint64_t nb = {info.fixed_bytes};")
        else:
            out.append(f"  if (f[{info.vslot}]) {{ uint64_t L = f[{info.vlen_slot}];")
            out.append(f"    uint64_t nb = {info.fixed_bytes} + L / 8;")
        out.append("    memset(o + n, 0, nb);")
        for fld, off in self.offsets(info):
            if fld.varbit:
                out.append(
                    f"    memcpy(o + n + ({off}) / 8, vb + {self.vb_offset[info.id]}, L / 8);"
                )
            elif fld.width:
                out.append(f"    og_put_bits(o + n, {off}, {fld.width}, f[{fld.slot}]);")
        out.append("    n += (uint32_t)nb; }")

    # ------------------------------------------------------------------ parser
    def parser(self) -> None:
        parsers = self.doc.get("parsers", [])
        parser = parsers[0]
        states = {s["name"]: f"S_{i}" for i, s in enumerate(parser.get("parse_states", []))}
        body: list[str] = []
        init = parser.get("init_state")
        body.append(f"goto {states[init]};" if init else "goto done;")
        for st in parser.get("parse_states", []):
            body.append(f"{states[st['name']]}: {{")
            self.parse_state(st, states, body)
            body.append("}")
        self.src += [
            "static uint64_t og_parse(og_dp *dp, og_pkt *p, uint64_t *f, uint8_t *vb) {",
            "  uint64_t err = 0; (void)dp; (void)vb;",
            *("  " + x for x in body),
            "done:",
            "  return err;",
            "}",
        ]

    def parse_state(self, st: dict[str, Any], states: dict[str, str], out: list[str]) -> None:
        where = f"parse state {st.get('name')!r}"
        for op in st.get("parser_ops", []):
            kind = op.get("op")
            params = op.get("parameters", [])
            if kind in ("extract", "extract_VL"):
                target = params[0]
                if target.get("type") != "regular":
                    raise UnsupportedError(f"{where}: extract into a {target.get('type')!r}")
                info = self.layout.header(target["value"], where)
                vl = None
                if kind == "extract_VL":
                    vl = self.data(self.expr(params[1], where), where)
                self.extract(info, vl, out)
            elif kind == "set":
                dst = self.expr(params[0], where)
                src = params[1]
                if src.get("type") == "lookahead":
                    off, width = (int(x) for x in src["value"])
                    out.append("{ " + self.lookahead(off, width, "la_"))
                    out.append(self.assign(dst, CE("la_", "d"), where) + " }")
                else:
                    out.append(self.assign(dst, self.expr(src, where), where))
            elif kind == "verify":
                cond = self.boolean(self.expr(params[0], where), where)
                err = self.data(self.expr(params[1], where), where)
                out.append(f"if (!{cond}) {{ err = {err}; goto done; }}")
            elif kind in ("shift", "advance"):
                amount = self.data(self.expr(params[0], where), where)
                if kind == "shift":
                    out.append(f"{{ uint64_t n_ = {amount};")
                else:
                    inv = self.errors["ParserInvalidArgument"]
                    out.append(
                        f"{{ uint64_t b_ = {amount}; if (b_ % 8) {{ err = {inv}; goto done; }}"
                    )
                    out.append("  uint64_t n_ = b_ / 8;")
                short = self.errors["PacketTooShort"]
                out.append(f"  if (p->pos + n_ > p->len) {{ err = {short}; goto done; }}")
                out.append("  p->pos += (uint32_t)n_; }")
            elif kind == "primitive":
                for pr in params:
                    out.extend(self.primitive(pr, where, None))
            else:
                raise UnsupportedError(f"{where}: parser operation {kind!r}")
        keys = st.get("transition_key", [])
        if keys:
            parts: list[tuple[str, int]] = []
            for k in keys:
                if k.get("type") == "lookahead":
                    off, width = (int(x) for x in k["value"])
                    var = self.fresh("lk_")
                    out.append(self.lookahead(off, width, var))
                    parts.append((var, width))
                elif k.get("type") == "field":
                    e = self.expr(k, where)
                    parts.append((self.data(e, where), e.width))
                else:
                    raise UnsupportedError(f"{where}: transition key of type {k.get('type')!r}")
            total = 0
            pieces = []
            for code, width in reversed(parts):
                pieces.append(f"og_shl({code}, {total})" if total else code)
                total += (width + 7) // 8 * 8
            if total > 64:
                raise UnsupportedError(f"{where}: transition key wider than 64 bits")
            out.append("{ uint64_t k_ = " + " | ".join(reversed(pieces)) + ";")
        else:
            out.append("{")
        default = "goto done;"
        for tr in st.get("transitions", []):
            ttype = tr.get("type", "hexstr")
            nxt = tr.get("next_state")
            target = f"goto {states[nxt]};" if nxt else "goto done;"
            if ttype == "default":
                default = target
                break
            if ttype != "hexstr":
                raise UnsupportedError(f"{where}: transition of type {ttype!r}")
            value = parse_hex(tr["value"], where)
            mask = tr.get("mask")
            if mask is None:
                out.append(f"  if (k_ == {value}ULL) {target}")
            else:
                m = parse_hex(mask, where)
                out.append(f"  if ((k_ & {m}ULL) == {value & m}ULL) {target}")
        out.append(f"  {default} }}")

    def lookahead(self, off: int, width: int, var: str) -> str:
        if width > MAX_WIDTH:
            raise UnsupportedError(f"lookahead of {width} bits")
        nbytes = (off + width + 7) // 8
        short = self.errors["PacketTooShort"]
        return (
            f"if (p->pos + {nbytes} > p->len) {{ err = {short}; goto done; }} "
            f"uint64_t {var} = og_get_bits(p->data + p->pos, {off}, {width});"
        )

    # ------------------------------------------------------------------ checksums, deparser
    def checksums(self, verify: bool) -> None:
        body: list[str] = []
        for ck in self.doc.get("checksums", []):
            where = f"checksum {ck.get('name')!r}"
            if verify and not ck.get("verify", True):
                continue
            if not verify and not ck.get("update", True):
                continue
            if ck.get("type", "generic") not in ("generic", "ipv4"):
                raise UnsupportedError(f"{where}: checksum type {ck.get('type')!r}")
            calc = self.calculation(ck["calculation"], where)
            dst = self.field_ref(ck["target"], where)
            if dst.kind != "d" or not dst.lv:
                raise UnsupportedError(f"{where}: target is not a field")
            cond = ck.get("if_cond")
            guard = f"if {parens(self.boolean(self.expr(cond, where), where))} " if cond else ""
            value = f"({calc}(dp, p, f, vb) & {mask_of(dst.width)})"
            if verify:
                body.append(f"{guard}{{ if ({value} != {dst.code}) ok = 0; }}")
            else:
                body.append(f"{guard}{{ {dst.code} = {value}; }}")
        name = "og_verify_checksums" if verify else "og_update_checksums"
        self.src += [
            f"static int {name}(og_dp *dp, og_pkt *p, uint64_t *f, uint8_t *vb) {{",
            "  int ok = 1; (void)dp; (void)p; (void)f; (void)vb;",
            *("  " + x for x in body),
            "  return ok;",
            "}",
        ]

    def deparser(self) -> int:
        dep = self.doc.get("deparsers", [])[0]
        body: list[str] = []
        most = 0
        for name in dep.get("order", []):
            info = self.layout.header(name, "deparser")
            if info.metadata:
                continue
            self.emit_header(info, body)
            most += info.fixed_bytes + info.max_bytes
        self.src += [
            "static uint32_t og_deparse(uint64_t *f, uint8_t *vb, uint8_t *o) {",
            "  uint32_t n = 0; (void)vb;",
            *body,
            "  return n;",
            "}",
        ]
        return most

    # ------------------------------------------------------------------ actions
    def actions(self) -> None:
        for act in self.doc.get("actions", []):
            where = f"action {act.get('name')!r}"
            adw = [int(r["bitwidth"]) for r in act.get("runtime_data", [])]
            prims = act.get("primitives", [])
            # a label only where a jump lands (-Wunused-label: the build has warnings as errors)
            targets = {
                parse_hex(pr["parameters"][-1]["value"], where)
                for pr in prims
                if pr.get("op") in ("_jump", "_jump_if_zero")
            }
            body: list[str] = []
            for i, pr in enumerate(prims):
                op = pr.get("op")
                if i in targets:
                    body.append(f"L{i}:;")
                if op == "_jump":
                    target = parse_hex(pr["parameters"][0]["value"], where)
                    body.append(f"goto L{target};")
                elif op == "_jump_if_zero":
                    cond = self.data(self.expr(pr["parameters"][0], where, adw), where)
                    target = parse_hex(pr["parameters"][1]["value"], where)
                    body.append(f"if (!({cond})) goto L{target};")
                else:
                    body.extend(self.primitive(pr, where, adw))
            if len(prims) in targets:
                body.append(f"L{len(prims)}:;")
            self.src += [
                f"static void og_action_{int(act['id'])}(og_dp *dp, og_pkt *p, uint64_t *f, "
                "uint8_t *vb, const uint64_t *ad) {",
                "  (void)dp; (void)p; (void)f; (void)vb; (void)ad;",
                *("  " + x for x in body),
                "}",
            ]

    # ------------------------------------------------------------------ pipelines
    def pipeline(self, pipe: dict[str, Any]) -> None:
        label: dict[str, str] = {}
        for i, node in enumerate(
            pipe.get("tables", []) + pipe.get("conditionals", []) + pipe.get("action_calls", [])
        ):
            label[node["name"]] = f"N_{i}"

        def goto(name: str | None) -> str:
            return f"goto {label[name]};" if name else "return;"

        body: list[str] = [goto(pipe.get("init_table"))]
        selectors: dict[str, str] = {}
        for prof in pipe.get("action_profiles", []):
            sel = prof.get("selector")
            if sel:
                selectors[prof["name"]] = self.hash_function(
                    sel.get("algo"), sel.get("input", []), f"action selector {prof['name']!r}"
                )
        for t in pipe.get("tables", []):
            body += self.table_node(t, label[t["name"]], goto, selectors)
        for c in pipe.get("conditionals", []):
            where = f"conditional {c['name']!r}"
            cond = self.boolean(self.expr(c["expression"], where), where)
            body.append(f"{label[c['name']]}:")
            body.append(
                f"  if {parens(cond)} {goto(c.get('true_next'))} else {goto(c.get('false_next'))}"
            )
        for a in pipe.get("action_calls", []):
            aid = int(a["action_id"])
            body.append(f"{label[a['name']]}:")
            body.append(f"  og_action_{aid}(dp, p, f, vb, NULL);")
            body.append("  if (p->exit_) return;")
            body.append(f"  {goto(a.get('next_node'))}")
        self.src += [
            f"static void og_{pipe['name']}(og_dp *dp, og_pkt *p, uint64_t *f, uint8_t *vb) {{",
            *("  " + x for x in body),
            "}",
        ]

    def table_node(
        self, t: dict[str, Any], lab: str, goto: Any, selectors: dict[str, str]
    ) -> list[str]:
        where = f"table {t['name']!r}"
        table = self.program.tables[t["name"]]
        ti = self.table_index[t["name"]]
        keys: list[str] = []
        for k in t.get("key", []):
            if k.get("match_type") == "valid":
                h = self.layout.header(k["target"], where)
                code = f"f[{h.vslot}]"
            else:
                e = self.field_ref(k["target"], where)
                if e.kind != "d":
                    raise UnsupportedError(f"{where}: key on a variable-length field")
                code = e.code
            if k.get("mask") is not None:
                code = f"({code} & {parse_hex(k['mask'], where)}ULL)"
            keys.append(code)
        nxt = t.get("next_tables", {}) or {}
        hit_miss = "__HIT__" in nxt or "__MISS__" in nxt
        base = t.get("base_default_next")
        none_to = goto(nxt.get("__MISS__") if hit_miss else base)

        def after(action_expr: str, hit: bool) -> list[str]:
            if hit_miss:
                return [goto(nxt.get("__HIT__") if hit else nxt.get("__MISS__"))]
            cases = [
                f"case {aid}: {goto(nxt[a.name])}"
                for aid, a in table.actions.items()
                if a.name in nxt
            ]
            if not cases:
                return [goto(base)]
            return [f"switch ({action_expr}) {{", *cases, f"default: {goto(base)}", "}"]

        def run(action_expr: str, data: str) -> list[str]:
            cases = [
                f"case {aid}: og_action_{aid}(dp, p, f, vb, {data}); break;"
                for aid in table.actions
            ]
            exits = ["if (p->exit_) return;"]
            return [f"switch ({action_expr}) {{", *cases, "default: break;", "}", *exits]

        out = [f"{lab}: {{"]
        if not keys:
            de = t.get("default_entry")
            if de is not None and de.get("action_const"):
                aid = int(de["action_id"])
                data = [parse_hex(x, where) for x in de.get("action_data", [])]
                if any(x >= 1 << 64 for x in data):
                    raise UnsupportedError(f"{where}: action data wider than 64 bits")
                arr = self.fresh("ad_")
                if data:
                    self.src.append(
                        f"static const uint64_t {arr}[] = {{{', '.join(f'{x}ULL' for x in data)}}};"
                    )
                else:
                    arr = "NULL"
                out.append(f"  og_action_{aid}(dp, p, f, vb, {arr});")
                out.append("  if (p->exit_) return;")
                out += ["  " + x for x in after(str(aid), hit=False)]
                out.append("}")
                return out
            out += [
                f"  og_entry *e = dp->def[{ti}];",
                f"  if (!e) {none_to}",
                *("  " + x for x in run("e->action", "e->data")),
                *("  " + x for x in after("e->action", hit=False)),
                "}",
            ]
            return out
        out.append(f"  uint64_t k[{len(keys)}] = {{{', '.join(keys)}}};")
        out.append(f"  og_entry *e = (og_entry *)og_table_lookup(dp->t[{ti}], k);")
        out.append("  if (!e) {")
        out.append(f"    e = dp->def[{ti}];")
        out.append(f"    if (!e) {none_to}")
        out += ["    " + x for x in run("e->action", "e->data")]
        out += ["    " + x for x in after("e->action", hit=False)]
        out.append("  }")
        if table.with_counters:
            out.append("  e->packets += 1; e->bytes += p->ilen;")
        if table.support_timeout:
            out.append("  e->last_hit = p->now;")
        meter = table.direct_meter
        if meter is not None and meter.result_slot >= 0:
            out.append(
                f"  f[{meter.result_slot}] = "
                "e->meter ? og_meter_execute(e->meter, p->ilen, p->now) : 0;"
            )
        if table.impl == "simple":
            out += ["  " + x for x in run("e->action", "e->data")]
            out += ["  " + x for x in after("e->action", hit=True)]
        else:
            sel = selectors.get(t.get("action_profile", ""))
            pick = f"({sel}(dp, p, f, vb) % e->nmembers)" if sel else "0"
            out += [
                "  const uint64_t *m;",
                "  if (!e->is_group) m = e->members;",
                f"  else if (!e->nmembers) {none_to}",
                f"  else m = e->members + {pick} * e->stride;",
                *("  " + x for x in run("(int64_t)m[0]", "m + 1")),
                *("  " + x for x in after("(int64_t)m[0]", hit=True)),
            ]
        out.append("}")
        return out

    # ------------------------------------------------------------------ the whole file
    def build(self) -> CProgram:
        doc = self.doc
        prog = self.program  # load_program checked: one parser, one deparser, both pipelines
        self.actions()
        self.parser()
        self.checksums(verify=True)
        self.checksums(verify=False)
        most = self.deparser()
        pipes = {p["name"]: p for p in doc.get("pipelines", [])}
        self.pipeline(pipes["ingress"])
        self.pipeline(pipes["egress"])
        nslots = len(prog.layout.template)
        template = ", ".join(f"{v}ULL" for v in prog.layout.template)
        std = self.std
        learn = []
        for ll in doc.get("learn_lists", []):
            slots = []
            for el in ll.get("elements", []):
                e = self.field_ref(el["value"], f"learn list {ll.get('name')!r}")
                if e.kind != "d":
                    raise UnsupportedError(
                        f"learn list {ll.get('name')!r}: a variable-length field"
                    )
                slots.append(e.code)
            learn.append(
                f"    case {int(ll['id'])}: {{ uint64_t v_[] = {{{', '.join(slots) or '0'}}}; "
                f"og_digest_push(&dp->digests, {int(ll['id'])}, {len(slots)}, v_); break; }}"
            )
        tables = []
        out = CProgram("")
        for name, i in self.table_index.items():
            t = prog.tables[name]
            if any(w > MAX_WIDTH for w in t.widths):
                raise UnsupportedError(f"table {name!r}: a key field wider than 64 bits")
            kinds = ", ".join(str(KIND_CODES[k]) for k in t.kinds) or "0"
            widths = ", ".join(str(max(1, w)) for w in t.widths) or "1"
            tables.append(
                f"  {{ static const uint8_t k_[] = {{{kinds}}}, w_[] = {{{widths}}}; "
                f"dp->t[{i}] = og_table_new({len(t.kinds)}, k_, w_); }}"
            )
            out.tables[name] = i
        regs = []
        for name, (i, r) in self.registers.items():
            size = max(1, int(r["size"]))
            regs.append(f"  dp->reg[{i}] = calloc({size}, 8); dp->reg_size[{i}] = {size};")
            out.registers[name] = i
        ctrs = []
        for name, (i, c) in self.counters.items():
            ctrs.append(f"  dp->ctr[{i}] = calloc({max(1, int(c.get('size', 0))) * 2}, 8);")
            out.counters[name] = i
        mtrs = []
        for name, (i, m) in self.meters.items():
            packets = 1 if m.get("type", "bytes") == "packets" else 0
            size = max(1, int(m.get("size", 0)))
            mtrs.append(
                f"  dp->mtr[{i}] = calloc({size}, sizeof(og_meter)); "
                f"for (int j = 0; j < {size}; j++) dp->mtr[{i}][j].packets = {packets};"
            )
            out.meters[name] = i

        def slot(key: str) -> int:
            return std[key].slot if key in std else -1

        espec_mask = (1 << std["egress_spec"].width) - 1
        head = [
            '#include "og_rt.h"',
            f"#define OG_NSLOTS {nslots}",
            f"#define OG_VB_BYTES {max(1, self.vb_bytes)}",
            f"#define OG_MAX_HEADERS {most + 64}",
            f"#define OG_NTABLES {max(1, len(self.table_index))}",
            f"#define OG_NREGS {max(1, len(self.registers))}",
            f"#define OG_NCTRS {max(1, len(self.counters))}",
            f"#define OG_NMTRS {max(1, len(self.meters))}",
            '#include "og_dp.h"',
            f"static const uint64_t OG_TEMPLATE[OG_NSLOTS] = {{{template}}};",
        ]
        walk = [
            "static int32_t og_walk(og_dp *dp, uint32_t port, const uint8_t *data, uint32_t len,",
            "                        uint8_t *obuf, uint32_t *out_port) {",
            "  uint64_t f[OG_NSLOTS]; uint8_t vb[OG_VB_BYTES];",
            "  memcpy(f, OG_TEMPLATE, sizeof f);",
            "  og_pkt pk = {data, len, 0, len, len, og_now_ns(), 0, 0}; og_pkt *p = &pk;",
            f"  f[{slot('ingress_port')}] = port;",
        ]
        if slot("packet_length") >= 0:
            walk.append(f"  f[{slot('packet_length')}] = len;")
        if slot("ingress_global_timestamp") >= 0:
            walk.append(
                f"  f[{slot('ingress_global_timestamp')}] = "
                "(uint64_t)(p->now - dp->start_ns) / 1000;"
            )
        walk.append("  uint64_t err = og_parse(dp, p, f, vb);")
        if slot("parser_error") >= 0:
            walk.append(f"  if (err) f[{slot('parser_error')}] = err;")
        else:
            walk.append("  (void)err;")
        walk.append("  int ck = og_verify_checksums(dp, p, f, vb);")
        if slot("checksum_error") >= 0:
            walk.append(f"  if (!ck) f[{slot('checksum_error')}] = 1;")
        else:
            walk.append("  (void)ck;")
        walk += [
            "  og_ingress(dp, p, f, vb);",
            "  p->exit_ = 0;",
            f"  uint64_t espec = f[{slot('egress_spec')}];",
            "  if (p->learn_id > 0) {",
            "    switch (p->learn_id) {",
            *learn,
            "    default: break;",
            "    }",
            "  }",
            f"  if (espec == {DROP_PORT}) return -1;",
            f"  f[{slot('instance_type')}] = 0;",
        ]
        if slot("egress_global_timestamp") >= 0:
            walk.append(
                f"  f[{slot('egress_global_timestamp')}] = "
                "(uint64_t)(p->now - dp->start_ns) / 1000;"
            )
        walk.append(f"  f[{slot('egress_port')}] = espec;")
        walk.append(f"  f[{slot('egress_spec')}] = {(DROP_PORT + 1) & espec_mask};")
        if slot("packet_length") >= 0:
            walk.append(f"  f[{slot('packet_length')}] = (uint64_t)p->length;")
        walk += [
            "  og_egress(dp, p, f, vb);",
            f"  if (f[{slot('egress_spec')}] == {DROP_PORT}) return -1;",
            "  og_update_checksums(dp, p, f, vb);",
            "  uint32_t n = og_deparse(f, vb, obuf);",
            "  uint32_t rest = p->pos < len ? len - p->pos : 0;",
            "  if (n + rest > OG_OBUF) rest = OG_OBUF - n;",
            "  memcpy(obuf + n, data + p->pos, rest);",
            "  *out_port = (uint32_t)espec;",
            "  return (int32_t)(n + rest);",
            "}",
        ]
        init = [
            "static void og_dp_init_objects(og_dp *dp) {",
            *tables,
            *regs,
            *ctrs,
            *mtrs,
            "}",
        ]
        proto = [
            f"static void og_action_{int(a['id'])}(og_dp *dp, og_pkt *p, uint64_t *f, "
            "uint8_t *vb, const uint64_t *ad);"
            for a in doc.get("actions", [])
        ]
        out.source = "\n".join([*head, *proto, *self.src, *walk, *init, '#include "og_dp.c"', ""])
        return out


def generate(program: Program) -> CProgram:
    """The C of a loaded program; raises UnsupportedError naming what the native path cannot run."""
    return CGen(program).build()
