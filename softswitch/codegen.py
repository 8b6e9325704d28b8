"""The code generator's parsers, checksum units and deparsers, and `Codegen`, the whole generator
(layers: `codegen_base`, `codegen_expr`, `codegen_actions`, this module)."""

from __future__ import annotations

from typing import Any

from softswitch.codegen_actions import ActionCodegen
from softswitch.codegen_base import E, parse_hex
from softswitch.errors import LoadError


class Codegen(ActionCodegen):
    # ------------------------------------------------------------------ parser
    def parser(self, parser: dict[str, Any], vsets: dict[str, Any]) -> str:
        """Compile a parser; returns the namespace name of its start state (or None)."""
        states = {s["name"]: self.fresh("_S") for s in parser.get("parse_states", [])}
        for st in parser.get("parse_states", []):
            self.parse_state(st, states, vsets)
        init = parser.get("init_state")
        if init is None:
            return "None"
        if init not in states:
            raise LoadError(f"parser {parser.get('name')!r}: unknown init state {init!r}")
        return states[init]

    def lookahead_code(self, off: int, width: int, out: list[str]) -> str:
        nbytes = (off + width + 7) // 8
        var = self.fresh("_la")
        out.append("d = p.data")
        out.append(f"if p.pos + {nbytes} > len(d): raise _PE({self.errors['PacketTooShort']})")
        shift = nbytes * 8 - off - width
        out.append(
            f"{var} = (_ifb(d[p.pos:p.pos + {nbytes}], 'big') >> {shift}) & {(1 << width) - 1}"
        )
        return var

    def parse_state(
        self, st: dict[str, Any], states: dict[str, str], vsets: dict[str, Any]
    ) -> None:
        where = f"parse state {st.get('name')!r}"
        body: list[str] = []
        for op in st.get("parser_ops", []):
            kind = op.get("op")
            params = op.get("parameters", [])
            if kind in ("extract", "extract_VL"):
                target = params[0]
                vl = None
                if kind == "extract_VL":
                    vl = self.data(self.expr(params[1], where), where)
                ttype = target.get("type")
                if ttype == "regular":
                    info = self.layout.header(target["value"], where)
                    self.extract_lines(info, body, vl)
                elif ttype == "stack":
                    stack = self.layout.stacks.get(target["value"])
                    if stack is None:
                        raise LoadError(f"{where}: unknown header stack {target['value']!r}")
                    self.stack_extract(stack.header_ids, stack.next_slot, body, vl, where)
                elif ttype == "union_stack":
                    us = self.layout.union_stacks.get(target["value"][0])
                    if us is None:
                        raise LoadError(
                            f"{where}: unknown header union stack {target['value'][0]!r}"
                        )
                    member = target["value"][1]
                    ids = []
                    for uid in us.union_ids:
                        un = self.layout.unions_by_id[uid]
                        ids.append(
                            un.header_ids[un.member_names.index(member)]
                            if member in un.member_names
                            else next(
                                h
                                for h in un.header_ids
                                if self.layout.headers_by_id[h].name.endswith("." + member)
                            )
                        )
                    self.stack_extract(tuple(ids), us.next_slot, body, vl, where)
                else:
                    raise LoadError(f"{where}: unsupported extract target {ttype!r}")
            elif kind == "set":
                dst = self.expr(params[0], where)
                src_spec = params[1]
                if src_spec.get("type") == "lookahead":
                    off, width = src_spec["value"]
                    var = self.lookahead_code(int(off), int(width), body)
                    body.append(self.assign(dst, E(var, "d", bound=int(width)), where))
                else:
                    body.append(self.assign(dst, self.expr(src_spec, where), where))
            elif kind == "verify":
                cond = self.boolean(self.expr(params[0], where), where)
                err = self.data(self.expr(params[1], where), where)
                body.append(f"if not {cond}: raise _PE({err})")
            elif kind in ("shift", "advance"):
                amount = self.data(self.expr(params[0], where), where)
                if kind == "shift":
                    body.append(f"_n = {amount}")
                else:
                    body.append(f"_b = {amount}")
                    body.append(f"if _b % 8: raise _PE({self.errors['ParserInvalidArgument']})")
                    body.append("_n = _b // 8")
                body.append(
                    f"if p.pos + _n > len(p.data): raise _PE({self.errors['PacketTooShort']})"
                )
                body.append("p.pos += _n")
            elif kind == "primitive":
                for pr in params:
                    self.primitive(pr, where, None, body, in_parser=True)
            else:
                raise LoadError(f"{where}: unsupported parser operation {kind!r}")
        # transition
        keys = st.get("transition_key", [])
        transitions = st.get("transitions", [])

        def next_state(name: str | None) -> str:
            if name is None:
                return "None"
            if name not in states:
                raise LoadError(f"{where}: unknown next state {name!r}")
            return states[name]

        if keys:
            parts: list[tuple[str, int]] = []
            for k in keys:
                kt = k.get("type")
                if kt == "lookahead":
                    off, width = k["value"]
                    parts.append((self.lookahead_code(int(off), int(width), body), int(width)))
                elif kt in ("field", "stack_field"):
                    e = self.expr(k, where)
                    width = e.width
                    code = f"({e.code} & {(1 << width) - 1})" if e.signed else e.code
                    parts.append((code, width))
                elif kt == "union_stack_field":
                    raise LoadError(
                        f"{where}: union_stack_field in a transition key is not supported"
                    )
                else:
                    raise LoadError(f"{where}: unsupported transition key type {kt!r}")
            total = 0
            pieces = []
            for code, width in reversed(parts):
                nbits = (width + 7) // 8 * 8
                pieces.append(f"({code} << {total})" if total else code)
                total += nbits
            body.append("k = " + " | ".join(reversed(pieces)))
        default = "None"
        has_default = False
        for tr in transitions:
            ttype = tr.get("type", "hexstr")
            nxt = next_state(tr.get("next_state"))
            if ttype == "default":
                if not has_default:
                    default = nxt
                    has_default = True
                break
            if not keys:
                raise LoadError(f"{where}: value transition without a transition key")
            mask = tr.get("mask")
            if ttype == "hexstr":
                value = parse_hex(tr["value"], where)
                if mask is None:
                    body.append(f"if k == {value}: return {nxt}")
                else:
                    m = parse_hex(mask, where)
                    body.append(f"if k & {m} == {value & m}: return {nxt}")
            elif ttype == "parse_vset":
                vs = vsets.get(tr["value"])
                if vs is None:
                    raise LoadError(f"{where}: unknown parse value set {tr['value']!r}")
                name = self.const(vs, "V")
                m = parse_hex(mask, where) if mask is not None else (1 << 4096) - 1
                body.append(f"if {name}.match(k, {m}): return {nxt}")
            else:
                raise LoadError(f"{where}: unsupported transition type {ttype!r}")
        body.append(f"return {default}")
        fname = states[st["name"]]
        self.add_source([f"def {fname}(p, f):"] + ["    " + x for x in body])

    def stack_extract(
        self, ids: tuple[int, ...], next_slot: int, body: list[str], vl: str | None, where: str
    ) -> None:
        fns = []
        for hid in ids:
            info = self.layout.headers_by_id[hid]
            lines: list[str] = []
            self.extract_lines(info, lines, "L0" if info.varbit is not None else None)
            fname = self.fresh("_X")
            self.add_source([f"def {fname}(p, f, L0):"] + ["    " + x for x in lines])
            fns.append(fname)
        table = self.fresh("_XT")
        self.add_source([f"{table} = ({', '.join(fns)},)"])
        body.append(f"_i = f[{next_slot}]")
        body.append(f"if _i >= {len(ids)}: raise _PE({self.errors['StackOutOfBounds']})")
        body.append(f"{table}[_i](p, f, {vl if vl is not None else 0})")
        body.append(f"f[{next_slot}] = _i + 1")

    # ------------------------------------------------------------------ checksums and deparser
    def checksums(self, verify: bool) -> str:
        """`fn(p, f) -> bool` verifying (returns False on a mismatch) or updating checksums."""
        body: list[str] = []
        for ck in self.doc.get("checksums", []):
            where = f"checksum {ck.get('name')!r}"
            if verify and not ck.get("verify", True):
                continue
            if not verify and not ck.get("update", True):
                continue
            ctype = ck.get("type", "generic")
            if ctype not in ("generic", "ipv4"):
                raise LoadError(f"{where}: unsupported checksum type {ctype!r}")
            calc = self.calculation(ck["calculation"], where)
            dst = self.field_ref(ck["target"], where)
            cond = ck.get("if_cond")
            indent = ""
            if cond is not None:
                body.append(f"if {self.boolean(self.expr(cond, where), where)}:")
                indent = "    "
            if verify:
                body.append(
                    f"{indent}if {calc}(p, f) & {(1 << dst.width) - 1} != {dst.code}: ok = False"
                )
            else:
                body.append(f"{indent}{dst.code} = {calc}(p, f) & {(1 << dst.width) - 1}")
        fname = self.fresh("_CK")
        self.add_source(
            [f"def {fname}(p, f):", "    ok = True"]
            + ["    " + x for x in body]
            + ["    return ok"]
        )
        return fname

    def deparser(self, dep: dict[str, Any]) -> str:
        parts = ["    out = []"]
        for name in dep.get("order", []):
            info = self.layout.header(name, f"deparser {dep.get('name')!r}")
            if info.metadata:
                continue
            parts.append(f"    if f[{info.vslot}]: out.append({self.pack_code(info)})")
        parts.append("    return b''.join(out)")
        fname = self.fresh("_D")
        self.add_source([f"def {fname}(p, f):", *parts])
        return fname
