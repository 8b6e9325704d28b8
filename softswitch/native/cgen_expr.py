"""C for the BMv2 JSON's expressions, primitives and calculations (the native path's first layer).

The PHV is the Python engine's (softswitch.layout): one `uint64_t` slot per field, so every field,
key and action parameter must fit 64 bits. Values are computed modulo 2**64 and masked to the
destination's width on assignment, which gives the Python engine's results because p4c masks every
arithmetic result of a bit<W> expression before it is compared or shifted right. Variable-length
fields live as bytes (`vb`), handled where they may appear: extraction, checksums and hashes,
emission. What the native path does not do raises `UnsupportedError` naming the construct; the
switch then runs the program on the Python engine and says why.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from softswitch.codegen_base import CORE_ERRORS, DROP_PORT, parse_hex, standard_metadata
from softswitch.layout import HeaderInfo, Layout

MAX_WIDTH = 64
HASHES = {
    "crc16": "og_crc16",
    "crc16_custom": "og_crc16",
    "crc32": "og_crc32",
    "crc32_custom": "og_crc32",
    "crcCCITT": "og_crc_ccitt",
    "csum16": "og_csum16",
    "cksum16": "og_csum16",
    "identity": "og_identity",
    "xor16": "og_xor16",
    "xor32": "og_xor32",
}


class UnsupportedError(Exception):
    """The program uses something the native path does not compile (the message says what)."""


@dataclass(slots=True)
class CE:
    """A compiled expression: C source and what it denotes (d data, b bool, h header, o name)."""

    code: str
    kind: str  # also v: a variable-length field (its bytes are not a value)
    width: int = 0
    lv: bool = False  # `code` is an assignable PHV slot
    hid: int = -1  # the header's id (kind h)


# C of the BMv2 JSON's binary operators on values (and of the primitives doing the same), all
# modulo 2**64; shifts by 64 or more give 0, as the Python engine's masked results do.
BINARY = {"+": "+", "-": "-", "*": "*", "&": "&", "|": "|", "^": "^", "<<": "og_shl"}
BINARY |= {">>": "og_shr", "/": "og_div", "%": "og_mod"}
PRIMITIVE_BINARY = {"add": "+", "subtract": "-", "bit_and": "&", "bit_or": "|", "bit_xor": "^"}
PRIMITIVE_BINARY |= {"shift_left": "<<", "shift_right": ">>"}


def binary(op: str, a: str, b: str) -> CE:
    """The value `a op b` (op a key of BINARY)."""
    c = BINARY[op]
    return CE(f"{c}({a}, {b})" if c.startswith("og_") else f"({a} {c} {b})", "d")


def mask_of(width: int) -> str:
    return "~0ULL" if width >= 64 else f"{(1 << width) - 1}ULL"


def lit(value: int, where: str) -> str:
    if value < 0 or value >= 1 << 64:
        raise UnsupportedError(f"{where}: constant {value:#x} does not fit 64 bits")
    return f"{value}ULL"


class ExprC:
    def __init__(self, doc: dict[str, Any], layout: Layout) -> None:
        self.doc = doc
        self.layout = layout
        self._ids = itertools.count()
        self.src: list[str] = []
        self.errors: dict[str, int] = {name: int(v) for name, v in doc.get("errors", [])}
        for i, name in enumerate(CORE_ERRORS):
            self.errors.setdefault(name, 1000 + i if name != "NoError" else 0)
        self.calc_specs = {c["name"]: c for c in doc.get("calculations", [])}
        self.calcs: dict[str, str] = {}
        self.registers = {r["name"]: (i, r) for i, r in enumerate(doc.get("register_arrays", []))}
        self.counters = {c["name"]: (i, c) for i, c in enumerate(doc.get("counter_arrays", []))}
        self.meters = {m["name"]: (i, m) for i, m in enumerate(doc.get("meter_arrays", []))}
        self.vb_offset: dict[int, int] = {}  # header id -> offset of its varbit bytes in vb
        self.vb_bytes = 0
        for h in layout.headers.values():
            self._check_header(h)
        self.std = standard_metadata(layout)

    def fresh(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids)}"

    def _check_header(self, h: HeaderInfo) -> None:
        where = f"header {h.name!r}"
        for fld in h.fields:
            if fld.signed:
                raise UnsupportedError(f"{where}: signed field {fld.name!r}")
            if fld.width > MAX_WIDTH:
                raise UnsupportedError(f"{where}: field {fld.name!r} is {fld.width} bits (> 64)")
        if h.varbit is not None:
            before = sum(f.width for f in h.fields[: h.varbit.index])
            if before % 8 or not h.max_bytes:
                raise UnsupportedError(
                    f"{where}: variable-length field not byte-aligned or unbounded"
                )
            self.vb_offset[h.id] = self.vb_bytes
            self.vb_bytes += h.max_bytes

    # ------------------------------------------------------------------ expressions
    def field_ref(self, value: Any, where: str) -> CE:
        h = self.layout.header(value[0], where)
        if value[1] == "$valid$":
            return CE(f"f[{h.vslot}]", "d", 1)
        fld = self.layout.field(value[0], value[1], where)
        if fld.varbit:
            return CE("", "v", 0, hid=h.id)
        return CE(f"f[{fld.slot}]", "d", fld.width, lv=True, hid=h.id)

    def expr(self, v: Any, where: str, adw: list[int] | None = None) -> CE:
        if not isinstance(v, dict):
            raise UnsupportedError(f"{where}: malformed expression {v!r}")
        if "op" in v:
            return self.op(v, where, adw)
        t = v.get("type")
        val: Any = v.get("value")
        if t == "field":
            return self.field_ref(val, where)
        if t == "hexstr":
            return CE(lit(parse_hex(val, where), where), "d")
        if t == "bool":
            return CE("1" if val else "0", "b")
        if t in ("runtime_data", "local"):
            i = int(val)
            width = adw[i] if adw is not None and i < len(adw) else 0
            return CE(f"ad[{i}]", "d", width)
        if t == "header":
            h = self.layout.header(val, where)
            return CE(str(h.id), "h", hid=h.id)
        if t == "register":
            idx, reg = self._register(val[0], where)
            at = self.data(self.expr(val[1], where, adw), where)
            return CE(f"og_reg_read(dp->reg[{idx}], {reg['size']}ULL, {at})", "d")
        if t == "expression":
            return self.expr(val, where, adw)
        if t in ("string", "calculation", "meter_array", "counter_array", "register_array"):
            return CE(str(val), "o")
        raise UnsupportedError(f"{where}: operand type {t!r}")

    def data(self, e: CE, where: str) -> str:
        if e.kind == "d":
            return e.code
        if e.kind == "b":
            return f"(uint64_t)({e.code})"
        raise UnsupportedError(f"{where}: a {e.kind!r} operand used as a value")

    def boolean(self, e: CE, where: str) -> str:
        if e.kind == "b":
            return e.code
        if e.kind == "d":
            return f"({e.code} != 0)"
        raise UnsupportedError(f"{where}: a {e.kind!r} operand used as a condition")

    def op(self, v: dict[str, Any], where: str, adw: list[int] | None) -> CE:
        op = v["op"]

        def sub(x: Any) -> CE:
            return self.expr(x, where, adw)

        def d(x: Any) -> str:
            return self.data(sub(x), where)

        left, right = v.get("left"), v.get("right")
        if op in BINARY:
            return binary(op, d(left), d(right))
        if op in ("==", "!=", ">", "<", ">=", "<="):
            a, b = sub(left), sub(right)
            if a.kind == "h" or b.kind == "h":
                raise UnsupportedError(f"{where}: header comparison")
            if a.kind == "b" or b.kind == "b":
                return CE(f"({self.boolean(a, where)} {op} {self.boolean(b, where)})", "b")
            return CE(f"({self.data(a, where)} {op} {self.data(b, where)})", "b")
        if op in ("==b", "!=b"):
            o = "==" if op == "==b" else "!="
            return CE(
                f"({self.boolean(sub(left), where)} {o} {self.boolean(sub(right), where)})", "b"
            )
        if op == "and":
            return CE(
                f"({self.boolean(sub(left), where)} && {self.boolean(sub(right), where)})", "b"
            )
        if op == "or":
            return CE(
                f"({self.boolean(sub(left), where)} || {self.boolean(sub(right), where)})", "b"
            )
        if op == "not":
            return CE(f"(!{self.boolean(sub(right), where)})", "b")
        if op == "~":
            return CE(f"(~{d(right)})", "d")
        if op == "valid":
            h = sub(right)
            if h.kind != "h":
                raise UnsupportedError(f"{where}: validity of a {h.kind!r} operand")
            return CE(f"(f[{self.layout.headers_by_id[h.hid].vslot}] != 0)", "b")
        if op == "?":
            c = self.boolean(sub(v["cond"]), where)
            a, b = sub(left), sub(right)
            if a.kind == "b" and b.kind == "b":
                return CE(f"({c} ? {a.code} : {b.code})", "b")
            return CE(f"({c} ? {self.data(a, where)} : {self.data(b, where)})", "d")
        if op == "d2b":
            return CE(f"({d(right)} != 0)", "b")
        if op == "b2d":
            return CE(f"(uint64_t)({self.boolean(sub(right), where)})", "d")
        raise UnsupportedError(f"{where}: expression operator {op!r}")

    def assign(self, dst: CE, src: CE, where: str) -> str:
        if not dst.lv:
            raise UnsupportedError(f"{where}: assignment to a {dst.kind!r} operand")
        code = self.data(src, where)
        if dst.width < 64:
            code = f"({code}) & {mask_of(dst.width)}"
        return f"{dst.code} = {code};"

    def _register(self, name: str, where: str) -> tuple[int, dict[str, Any]]:
        item = self.registers.get(name)
        if item is None:
            raise UnsupportedError(f"{where}: unknown register array {name!r}")
        if int(item[1]["bitwidth"]) > MAX_WIDTH:
            raise UnsupportedError(f"{where}: register {name!r} wider than 64 bits")
        return item

    # ------------------------------------------------------------------ calculations
    def calculation(self, name: str, where: str) -> str:
        """The name of `uint64_t fn(og_dp *dp, og_pkt *p, uint64_t *f, uint8_t *vb)`."""
        if name not in self.calcs:
            spec = self.calc_specs.get(name)
            if spec is None:
                raise UnsupportedError(f"{where}: unknown calculation {name!r}")
            self.calcs[name] = self.hash_function(spec["algo"], spec.get("input", []), where)
        return self.calcs[name]

    def hash_function(self, algo: str, inputs: list[dict[str, Any]], where: str) -> str:
        algo_fn = HASHES.get(algo)
        if algo_fn is None:
            raise UnsupportedError(f"{where}: hash algorithm {algo!r}")
        body: list[str] = []
        cap = 0
        payload = False
        for item in inputs:
            t = item.get("type")
            if t == "payload":
                payload = True
                continue
            if payload:
                raise UnsupportedError(f"{where}: hash input after the payload")
            if t == "field":
                h = self.layout.header(item["value"][0], where)
                fld = self.layout.field(item["value"][0], item["value"][1], where)
                guard = "" if h.metadata else f"if (f[{h.vslot}]) "
                if fld.varbit:
                    vo = self.vb_offset[h.id]
                    body.append(
                        f"{guard}{{ for (uint32_t i = 0; i < f[{h.vlen_slot}] / 8; i++) "
                        f"{{ og_put_bits(hb, n, 8, vb[{vo} + i]); n += 8; }} }}"
                    )
                    cap += h.max_bytes * 8
                elif fld.width:
                    body.append(f"{guard}{{ og_put_bits(hb, n, {fld.width}, f[{fld.slot}]); ")
                    body[-1] += f"n += {fld.width}; }}"
                    cap += fld.width
            elif t == "hexstr":
                width = int(item.get("bitwidth", 0))
                if width > MAX_WIDTH:
                    raise UnsupportedError(f"{where}: hash constant wider than 64 bits")
                value = parse_hex(item["value"], where) & ((1 << width) - 1)
                if width:
                    body.append(f"og_put_bits(hb, n, {width}, {value}ULL); n += {width};")
                    cap += width
            elif t == "header":
                h = self.layout.header(item["value"], where)
                if h.varbit is not None:
                    raise UnsupportedError(f"{where}: hashing a whole variable-length header")
                lines = [f"if (f[{h.vslot}]) {{"]
                for fld in h.fields:
                    if fld.width:
                        lines.append(
                            f"  og_put_bits(hb, n, {fld.width}, f[{fld.slot}]); n += {fld.width};"
                        )
                lines.append("}")
                body.extend(lines)
                cap += h.fixed_bits
            else:
                raise UnsupportedError(f"{where}: hash input type {t!r}")
        nbytes = (cap + 7) // 8 + 8
        fname = self.fresh("og_calc")
        lines = [
            f"static uint64_t {fname}(og_dp *dp, og_pkt *p, uint64_t *f, uint8_t *vb) {{",
            "  (void)dp; (void)p; (void)f; (void)vb;",
            f"  uint8_t hb[{nbytes}]; memset(hb, 0, sizeof hb); unsigned n = 0;",
            *("  " + x for x in body),
            "  uint32_t nb = (n + 7) / 8;",
        ]
        if payload:
            lines += [
                "  uint32_t pl = p->len - p->pos;",
                "  if (nb + pl > OG_SCRATCH) pl = OG_SCRATCH - nb;",
                "  memcpy(dp->scratch, hb, nb); memcpy(dp->scratch + nb, p->data + p->pos, pl);",
                f"  return {algo_fn}(dp->scratch, nb + pl);",
            ]
        else:
            lines.append(f"  return {algo_fn}(hb, nb);")
        lines.append("}")
        self.src.extend(lines)
        return fname

    # ------------------------------------------------------------------ primitives
    def primitive(self, prim: dict[str, Any], where: str, adw: list[int] | None) -> list[str]:
        op = prim.get("op")
        params = prim.get("parameters", [])
        where = f"{where}, primitive {op!r}"

        def arg(i: int) -> CE:
            if i >= len(params):
                raise UnsupportedError(f"{where}: missing parameter {i}")
            return self.expr(params[i], where, adw)

        def d(i: int) -> str:
            return self.data(arg(i), where)

        if op in ("assign", "modify_field"):
            return [self.assign(arg(0), arg(1), where)]
        if op in ("assign_header", "copy_header"):
            dst, src = arg(0), arg(1)
            if dst.kind != "h" or src.kind != "h":
                raise UnsupportedError(f"{where}: expects a header")
            hd = self.layout.headers_by_id[dst.hid]
            hs = self.layout.headers_by_id[src.hid]
            if hd.varbit is not None or hs.varbit is not None or hd.nslots != hs.nslots:
                raise UnsupportedError(f"{where}: copy of a variable-length header")
            return [f"memmove(&f[{hd.vslot}], &f[{hs.vslot}], {hd.nslots} * 8);"]
        if op in ("add_header", "add_header_fast", "remove_header"):
            h = arg(0)
            if h.kind != "h":
                raise UnsupportedError(f"{where}: expects a header")
            info = self.layout.headers_by_id[h.hid]
            if info.union >= 0:
                raise UnsupportedError(f"{where}: a header in a union")
            vs = info.vslot
            if op == "remove_header":
                extra = f" + f[{info.vlen_slot}] / 8" if info.varbit else ""
                return [f"if (f[{vs}]) {{ f[{vs}] = 0; p->length -= {info.fixed_bytes}{extra}; }}"]
            zero = f"memset(&f[{vs + 1}], 0, {info.nslots - 1} * 8); " if info.nslots > 1 else ""
            return [f"if (!f[{vs}]) {{ {zero}f[{vs}] = 1; p->length += {info.fixed_bytes}; }}"]
        if op in ("mark_to_drop", "drop"):
            out = [f"f[{self.std['egress_spec'].slot}] = {DROP_PORT};"]
            if "mcast_grp" in self.std:
                out.append(f"f[{self.std['mcast_grp'].slot}] = 0;")
            return out
        if op == "exit":
            return ["p->exit_ = 1;", "return;"]
        if op in ("no_op", "log_msg"):
            return []
        if op in ("add_to_field", "subtract_from_field"):
            dst = arg(0)
            sign = "+" if op == "add_to_field" else "-"
            return [self.assign(dst, binary(sign, dst.code, d(1)), where)]
        if op in PRIMITIVE_BINARY:
            return [self.assign(arg(0), binary(PRIMITIVE_BINARY[op], d(1), d(2)), where)]
        if op == "modify_field_with_hash_based_offset":
            calc = self.calculation(params[2]["value"], where)
            size = d(3)
            code = f"({d(1)} + {calc}(dp, p, f, vb) % ({size} ? {size} : 1))"
            return [self.assign(arg(0), CE(code, "d"), where)]
        if op == "generate_digest":
            return [f"p->learn_id = (int32_t){d(1)};"]
        if op == "count":
            item = self.counters.get(params[0]["value"])
            if item is None:
                raise UnsupportedError(f"{where}: unknown counter {params[0]['value']!r}")
            idx, spec = item
            return [
                f"{{ uint64_t i_ = {d(1)}; if (i_ < {int(spec.get('size', 0))}ULL) "
                f"{{ dp->ctr[{idx}][2 * i_] += 1; dp->ctr[{idx}][2 * i_ + 1] += p->ilen; }} }}"
            ]
        if op == "execute_meter":
            item = self.meters.get(params[0]["value"])
            if item is None:
                raise UnsupportedError(f"{where}: unknown meter {params[0]['value']!r}")
            idx, spec = item
            msize = int(spec.get("size", 0))
            code = (
                f"({{ uint64_t i_ = {d(1)}; i_ < {msize}ULL ? "
                f"og_meter_execute(&dp->mtr[{idx}][i_], p->ilen, p->now) : 0; }})"
            )
            return [self.assign(arg(2), CE(code, "d"), where)]
        if op == "register_read":
            idx, reg = self._register(params[1]["value"], where)
            code = f"og_reg_read(dp->reg[{idx}], {reg['size']}ULL, {d(2)})"
            return [self.assign(arg(0), CE(code, "d"), where)]
        if op == "register_write":
            idx, reg = self._register(params[0]["value"], where)
            width = int(reg["bitwidth"])
            value = f"({d(2)}) & {mask_of(width)}"
            return [f"og_reg_write(dp->reg[{idx}], {reg['size']}ULL, {d(1)}, {value});"]
        if op == "modify_field_rng_uniform":
            lo, hi = d(1), d(2)
            code = f"og_rng_between(dp, {lo}, {hi})"
            return [self.assign(arg(0), CE(code, "d"), where)]
        raise UnsupportedError(f"{where}: primitive {op!r}")
