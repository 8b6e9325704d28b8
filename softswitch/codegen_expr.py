"""The code generator's expressions: header and field references, operators, assignments, and
the code that reads and writes a header's bits."""

from __future__ import annotations

from typing import Any

from softswitch.codegen_base import CodegenBase, E, parse_hex
from softswitch.errors import LoadError
from softswitch.layout import HeaderInfo


class ExprCodegen(CodegenBase):
    # ------------------------------------------------------------------ expressions
    def header_ref(self, e: E, where: str) -> E:
        if e.kind != "h":
            raise LoadError(f"{where}: expected a header, got {e.kind}")
        return e

    def valid_code(self, h: E) -> str:
        if h.hid >= 0:
            return f"f[{self.layout.headers_by_id[h.hid].vslot}]"
        return f"f[_HV[{h.code}]]"

    def field_of(self, h: E, index: int, where: str) -> E:
        proto = self.types.get(h.htype) if h.hid < 0 else self.layout.headers_by_id[h.hid]
        if proto is None or not 0 <= index < len(proto.fields):
            raise LoadError(f"{where}: bad field offset {index}")
        fld = proto.fields[index]
        if h.hid >= 0:
            code = f"f[{fld.slot}]"
            vlen = f"f[{proto.vlen_slot}]" if fld.varbit else ""
        else:
            code = f"f[_HV[{h.code}] + {index + 1}]"
            vlen = f"f[_HV[{h.code}] + {len(proto.fields) + 1}]" if fld.varbit else ""
        return E(
            code,
            "d",
            fld.width,
            fld.signed,
            lv=True,
            bound=None if fld.signed or fld.varbit else fld.width,
            vlen=vlen,
            fld=fld,
        )

    def static_header(self, name: str, where: str) -> E:
        h = self.layout.header(name, where)
        return E(str(h.id), "h", hid=h.id, htype=h.type_name, name=name)

    def field_ref(self, value: Any, where: str) -> E:
        hname, fname = value[0], value[1]
        h = self.layout.header(hname, where)
        if fname == "$valid$":
            return E(f"f[{h.vslot}]", "d", 1, bound=1)
        fld = self.layout.field(hname, fname, where)
        return self.field_of(E(str(h.id), "h", hid=h.id, htype=h.type_name), fld.index, where)

    def expr(self, v: Any, where: str, ad_widths: list[int] | None = None) -> E:
        if not isinstance(v, dict):
            raise LoadError(f"{where}: malformed expression {v!r}")
        if "op" in v:
            return self.op(v, where, ad_widths)
        t = v.get("type")
        val: Any = v.get("value")
        if t == "field":
            return self.field_ref(val, where)
        if t == "hexstr":
            n = parse_hex(val, where)
            return E(str(n), "d", bound=n.bit_length() if n >= 0 else None)
        if t == "bool":
            return E("True" if val else "False", "b")
        if t in ("runtime_data", "local"):
            i = int(val)
            width = ad_widths[i] if ad_widths is not None and i < len(ad_widths) else 0
            if ad_widths is not None and i >= len(ad_widths):
                raise LoadError(f"{where}: action data index {i} out of range")
            return E(f"ad[{i}]", "d", width, bound=width or None)
        if t == "header":
            return self.static_header(val, where)
        if t == "header_stack":
            st = self.layout.stacks.get(val)
            if st is None:
                raise LoadError(f"{where}: unknown header stack {val!r}")
            return E(val, "s", name=val)
        if t == "header_union":
            if val not in self.layout.unions:
                raise LoadError(f"{where}: unknown header union {val!r}")
            return E(str(self.layout.unions[val].id), "u", name=val)
        if t == "header_union_stack":
            if val not in self.layout.union_stacks:
                raise LoadError(f"{where}: unknown header union stack {val!r}")
            return E(val, "us", name=val)
        if t == "stack_field":
            st = self.layout.stacks.get(val[0])
            if st is None:
                raise LoadError(f"{where}: unknown header stack {val[0]!r}")
            ids = self.const(st.header_ids, "S")
            proto = self.layout.headers_by_id[st.header_ids[0]]
            h = E(f"{ids}[f[{st.next_slot}] - 1]", "h", htype=proto.type_name)
            fld = proto.by_name.get(val[1])
            if fld is None:
                raise LoadError(f"{where}: stack {val[0]!r} has no field {val[1]!r}")
            return self.field_of(h, fld.index, where)
        if t == "register":
            reg = self.objects.get(("register", val[0]))
            if reg is None:
                raise LoadError(f"{where}: unknown register array {val[0]!r}")
            idx = self.expr(val[1], where, ad_widths)
            name = self.const(reg, "R")
            return E(f"{name}.read({idx.code})", "d", bound=reg.bitwidth)
        if t == "expression":
            return self.expr(val, where, ad_widths)
        if t in (
            "string",
            "calculation",
            "meter_array",
            "counter_array",
            "register_array",
            "extern",
        ):
            return E(str(val), "o", name=str(val))
        if t == "parameters_vector":
            return E("", "o", name="")
        raise LoadError(f"{where}: unsupported operand type {t!r}")

    def data(self, e: E, where: str) -> str:
        if e.kind == "d":
            return e.code
        if e.kind == "b":
            return f"(1 if {e.code} else 0)"
        raise LoadError(f"{where}: expected a value, got {e.kind}")

    def boolean(self, e: E, where: str) -> str:
        if e.kind == "b":
            return e.code
        if e.kind == "d":
            return f"({e.code} != 0)"
        raise LoadError(f"{where}: expected a boolean, got {e.kind}")

    def op(self, v: dict[str, Any], where: str, adw: list[int] | None) -> E:
        op = v["op"]
        left: Any = v.get("left")
        right: Any = v.get("right")

        def sub(x: Any) -> E:
            return self.expr(x, where, adw)

        arith = {"+": "+", "-": "-", "*": "*", "<<": "<<", ">>": ">>", "&": "&", "|": "|", "^": "^"}
        if op in arith:
            a, b = sub(left), sub(right)
            code = f"({self.data(a, where)} {arith[op]} {self.data(b, where)})"
            bound: int | None = None
            if op == "&" and (a.bound is not None or b.bound is not None):
                bound = min(x for x in (a.bound, b.bound) if x is not None)
            elif op in ("|", "^") and a.bound is not None and b.bound is not None:
                bound = max(a.bound, b.bound)
            elif op == ">>" and a.bound is not None:
                bound = a.bound
            return E(code, "d", bound=bound)
        if op == "/":
            return E(f"_tdiv({self.data(sub(left), where)}, {self.data(sub(right), where)})", "d")
        if op == "%":
            return E(f"_tmod({self.data(sub(left), where)}, {self.data(sub(right), where)})", "d")
        cmp = {"==": "==", "!=": "!=", ">": ">", "<": "<", ">=": ">=", "<=": "<="}
        if op in cmp:
            a, b = sub(left), sub(right)
            if a.kind == "b" or b.kind == "b":
                return E(f"({self.boolean(a, where)} {cmp[op]} {self.boolean(b, where)})", "b")
            if a.kind == "h" or b.kind == "h":
                return self.header_eq(a, b, op == "!=", where)
            return E(f"({self.data(a, where)} {cmp[op]} {self.data(b, where)})", "b")
        if op in ("==b", "!=b"):
            a, b = sub(left), sub(right)
            o = "==" if op == "==b" else "!="
            return E(f"({self.boolean(a, where)} {o} {self.boolean(b, where)})", "b")
        if op in ("==h", "!=h"):
            return self.header_eq(sub(left), sub(right), op == "!=h", where)
        if op in ("==u", "!=u"):
            a, b = sub(left), sub(right)
            ua = self.layout.unions[a.name]
            ub = self.layout.unions[b.name]
            parts = [
                self.header_eq(
                    self.static_header(self.layout.headers_by_id[x].name, where),
                    self.static_header(self.layout.headers_by_id[y].name, where),
                    False,
                    where,
                ).code
                for x, y in zip(ua.header_ids, ub.header_ids, strict=True)
            ]
            code = "(" + " and ".join(parts or ["True"]) + ")"
            return E(f"(not {code})" if op == "!=u" else code, "b")
        if op == "and":
            return E(
                f"({self.boolean(sub(left), where)} and {self.boolean(sub(right), where)})", "b"
            )
        if op == "or":
            return E(
                f"({self.boolean(sub(left), where)} or {self.boolean(sub(right), where)})", "b"
            )
        if op == "not":
            return E(f"(not {self.boolean(sub(right), where)})", "b")
        if op == "~":
            return E(f"(~{self.data(sub(right), where)})", "d")
        if op == "valid":
            h = sub(right)
            if h.kind == "u":
                return self.union_valid(h)
            return E(f"({self.valid_code(self.header_ref(h, where))} != 0)", "b")
        if op == "valid_union":
            return self.union_valid(sub(right))
        if op == "?":
            c = self.boolean(sub(v["cond"]), where)
            a, b = sub(left), sub(right)
            if a.kind == "b" and b.kind == "b":
                return E(f"({a.code} if {c} else {b.code})", "b")
            if a.kind == "h" and b.kind == "h":  # a header chosen at run time (its id)
                if a.htype != b.htype:
                    raise LoadError(f"{where}: '?' between headers of {a.htype} and {b.htype}")
                return E(f"({a.code} if {c} else {b.code})", "h", htype=a.htype)
            return E(f"({self.data(a, where)} if {c} else {self.data(b, where)})", "d")
        if op == "two_comp_mod":
            return E(f"_tcm({self.data(sub(left), where)}, {self.data(sub(right), where)})", "d")
        if op == "sat_cast":
            return E(f"_sat({self.data(sub(left), where)}, {self.data(sub(right), where)})", "d")
        if op == "usat_cast":
            return E(f"_usat({self.data(sub(left), where)}, {self.data(sub(right), where)})", "d")
        if op == "d2b":
            return E(f"({self.data(sub(right), where)} != 0)", "b")
        if op == "b2d":
            return E(f"(1 if {self.boolean(sub(right), where)} else 0)", "d", bound=1)
        if op in ("dereference_header_stack", "dereference_stack"):
            st_e = sub(left)
            st = self.layout.stacks[st_e.name]
            ids = self.const(st.header_ids, "S")
            idx = self.data(sub(right), where)
            proto = self.layout.headers_by_id[st.header_ids[0]]
            return E(f"{ids}[{idx}]", "h", htype=proto.type_name)
        if op == "last_stack_index":
            st = self.layout.stacks[sub(right).name]
            return E(f"(f[{st.next_slot}] - 1)", "d")
        if op == "size_stack":
            st = self.layout.stacks[sub(right).name]
            return E(f"f[{st.next_slot}]", "d")
        if op == "access_field":
            h = self.header_ref(sub(left), where)
            return self.field_of(h, int(right), where)
        if op == "dereference_union_stack":
            us = self.layout.union_stacks[sub(left).name]
            ids = self.const(us.union_ids, "S")
            return E(f"{ids}[{self.data(sub(right), where)}]", "u", name="")
        if op == "access_union_header":
            u = sub(left)
            member = int(right)
            if u.name:
                hid = self.layout.unions[u.name].header_ids[member]
                return self.static_header(self.layout.headers_by_id[hid].name, where)
            table = {
                uid: un.header_ids[member]
                for uid, un in self.layout.unions_by_id.items()
                if member < len(un.header_ids)
            }
            tname = self.const(table, "U")
            any_hid = next(iter(table.values()))
            return E(f"{tname}[{u.code}]", "h", htype=self.layout.headers_by_id[any_hid].type_name)
        raise LoadError(f"{where}: unsupported expression operator {op!r}")

    def union_valid(self, u: E) -> E:
        if u.name:
            un = self.layout.unions[u.name]
            vs = [f"f[{self.layout.headers_by_id[h].vslot}]" for h in un.header_ids]
            return E("(" + " or ".join(vs or ["False"]) + ")", "b")
        table = {
            uid: tuple(self.layout.headers_by_id[h].vslot for h in un.header_ids)
            for uid, un in self.layout.unions_by_id.items()
        }
        tname = self.const(table, "U")
        return E(f"any(f[s] for s in {tname}[{u.code}])", "b")

    def header_eq(self, a: E, b: E, negate: bool, where: str) -> E:
        a = self.header_ref(a, where)
        b = self.header_ref(b, where)
        if a.hid < 0 or b.hid < 0:
            raise LoadError(f"{where}: header comparison needs static headers")
        ha = self.layout.headers_by_id[a.hid]
        hb = self.layout.headers_by_id[b.hid]
        code = (
            f"(f[{ha.vslot}:{ha.vslot + ha.nslots}] == f[{hb.vslot}:{hb.vslot + hb.nslots}]"
            f" if f[{ha.vslot}] else f[{ha.vslot}] == f[{hb.vslot}])"
        )
        return E(f"(not {code})" if negate else code, "b")

    # ------------------------------------------------------------------ assignment
    def wrap(self, src: E, width: int, signed: bool, where: str) -> str:
        code = self.data(src, where)
        if signed:
            half = 1 << (width - 1)
            return f"((({code}) + {half}) & {(1 << width) - 1}) - {half}"
        if src.bound is not None and src.bound <= width:
            return code
        return f"({code}) & {(1 << width) - 1}"

    def assign(self, dst: E, src: E, where: str) -> str:
        if not dst.lv:
            raise LoadError(f"{where}: cannot assign to this operand")
        if dst.fld is not None and dst.fld.varbit:
            raise LoadError(f"{where}: plain assignment to a variable-length field")
        return f"{dst.code} = {self.wrap(src, dst.width, dst.signed, where)}"

    # ------------------------------------------------------------------ header operations
    def set_valid_lines(self, h: E, out: list[str]) -> None:
        if h.hid < 0:
            out.append(f"_setvalid(p, f, {h.code})")
            return
        info = self.layout.headers_by_id[h.hid]
        vs = info.vslot
        body = (
            [f"f[{vs + 1}:{vs + info.nslots}] = {[0] * (info.nslots - 1)!r}"]
            if info.nslots > 1
            else []
        )
        body.append(f"f[{vs}] = 1")
        body.append(f"p.length += {info.fixed_bytes}")
        body.extend(f"f[{o}] = 0" for o in self.union_siblings[h.hid])
        out.append(f"if not f[{vs}]:")
        out.extend("    " + line for line in body)

    def set_invalid_lines(self, h: E, out: list[str]) -> None:
        if h.hid < 0:
            out.append(f"_setinvalid(p, f, {h.code})")
            return
        info = self.layout.headers_by_id[h.hid]
        vs = info.vslot
        extra = f" + f[{info.vlen_slot}] // 8" if info.varbit else ""
        out.append(f"if f[{vs}]:")
        out.append(f"    f[{vs}] = 0")
        out.append(f"    p.length -= {info.fixed_bytes}{extra}")

    def copy_header_line(self, dst: E, src: E) -> str:
        if dst.hid >= 0 and src.hid >= 0:
            hd = self.layout.headers_by_id[dst.hid]
            hs = self.layout.headers_by_id[src.hid]
            return f"f[{hd.vslot}:{hd.vslot + hd.nslots}] = f[{hs.vslot}:{hs.vslot + hs.nslots}]"
        return f"_copyhdr(f, {dst.code}, {src.code})"

    def extract_lines(self, info: HeaderInfo, out: list[str], vl_code: str | None = None) -> None:
        """Extract header `info` at p.pos from p.data; raises ParserError like BMv2."""
        too_short = self.errors["PacketTooShort"]
        vs = info.vslot
        if info.varbit is None:
            nbytes = info.fixed_bytes
            out.append("o = p.pos")
            out.append(f"e = o + {nbytes}")
            out.append("d = p.data")
            out.append(f"if e > len(d): raise _PE({too_short})")
            if nbytes:
                out.append("v = _ifb(d[o:e], 'big')")
            out.append("p.pos = e")
            out.append(f"f[{vs}] = 1")
            out.extend(f"f[{o}] = 0" for o in self.union_siblings[info.id])
            shift = info.fixed_bits
            for fld in info.fields:
                shift -= fld.width
                if fld.width == 0:
                    out.append(f"f[{fld.slot}] = 0")
                    continue
                val = f"(v >> {shift})" if shift else "v"
                if shift + fld.width < info.fixed_bits:
                    val = f"({val} & {fld.mask})"
                if fld.signed:
                    half = 1 << (fld.width - 1)
                    val = f"(({val} ^ {half}) - {half})"
                out.append(f"f[{fld.slot}] = {val}")
            return
        if vl_code is None:
            raise LoadError(f"header {info.name!r} has a variable-length field: use extract_VL")
        out.append(f"L = int({vl_code})")
        out.append(f"if L % 8: raise _PE({self.errors['ParserInvalidArgument']})")
        out.append(f"nb = {info.fixed_bytes} + L // 8")
        out.append("o = p.pos")
        out.append("d = p.data")
        out.append(f"if o + nb > len(d): raise _PE({too_short})")
        if info.max_bytes:
            out.append(f"if nb > {info.max_bytes}: raise _PE({self.errors['HeaderTooShort']})")
        out.append("v = _ifb(d[o:o + nb], 'big')")
        out.append("p.pos = o + nb")
        out.append(f"f[{vs}] = 1")
        out.append(f"f[{info.vlen_slot}] = L")
        out.extend(f"f[{o}] = 0" for o in self.union_siblings[info.id])
        after = 0
        seen_varbit = False
        for fld in reversed(info.fields):
            if fld.varbit:
                out.append(f"f[{fld.slot}] = (v >> {after}) & ((1 << L) - 1)")
                seen_varbit = True
                continue
            vshift = f"(L + {after})" if seen_varbit else str(after)
            val = f"((v >> {vshift}) & {fld.mask})"
            if fld.signed:
                half = 1 << (fld.width - 1)
                val = f"(({val} ^ {half}) - {half})"
            out.append(f"f[{fld.slot}] = {val}")
            after += fld.width

    def pack_code(self, info: HeaderInfo) -> str:
        """An expression giving the header's bytes (header valid)."""
        if info.varbit is None:
            parts = []
            shift = info.fixed_bits
            for fld in info.fields:
                shift -= fld.width
                if fld.width == 0:
                    continue
                val = f"f[{fld.slot}]"
                if fld.signed:
                    val = f"({val} & {fld.mask})"
                parts.append(f"({val} << {shift})" if shift else val)
            value = " | ".join(parts) if parts else "0"
            return f"({value}).to_bytes({info.fixed_bytes}, 'big')"
        parts = []
        after = 0
        seen_varbit = False
        length = f"f[{info.vlen_slot}]"
        for fld in reversed(info.fields):
            if fld.varbit:
                parts.append(f"(f[{fld.slot}] << {after})")
                seen_varbit = True
                continue
            val = f"(f[{fld.slot}] & {fld.mask})"
            pshift = f"({length} + {after})" if seen_varbit else str(after)
            parts.append(f"({val} << {pshift})")
            after += fld.width
        return f"({' | '.join(parts)}).to_bytes({info.fixed_bytes} + {length} // 8, 'big')"

    def header_bits_code(self, info: HeaderInfo) -> tuple[str, str]:
        """(value, bit count) of a whole header for hashing."""
        if info.varbit is None:
            pk = self.pack_code(info)
            return f"_ifb({pk}, 'big')", str(info.fixed_bits)
        pk = self.pack_code(info)
        return f"_ifb({pk}, 'big')", f"({info.fixed_bits} + f[{info.vlen_slot}])"
