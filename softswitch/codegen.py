"""Compiles the BMv2 JSON's parsers, actions, controls and deparsers into Python functions.

Each JSON object becomes Python source text built only from our own identifiers and integer
literals (names and strings from the JSON never enter the source; objects such as tables and
format strings are bound into the module's namespace under generated names), compiled once with
`compile()`. At run time a packet then costs plain list indexing, integer arithmetic and dict
lookups: no interpretation of the JSON is left.
"""

from __future__ import annotations

import itertools
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from softswitch import hashes
from softswitch.errors import AssertionFailed, LoadError, ParserError
from softswitch.layout import FieldInfo, HeaderInfo, Layout

LOG = logging.getLogger(__name__)
P4_LOG = logging.getLogger("softswitch.p4")

DROP_PORT = 511

# v1model standard error codes, used when the JSON's `errors` does not list them.
CORE_ERRORS = (
    "NoError",
    "PacketTooShort",
    "NoMatch",
    "StackOutOfBounds",
    "HeaderTooShort",
    "ParserTimeout",
    "ParserInvalidArgument",
)


def parse_hex(text: Any, where: str) -> int:
    if isinstance(text, bool):
        return int(text)
    if isinstance(text, int):
        return text
    if not isinstance(text, str):
        raise LoadError(f"{where}: expected a hexstring, got {text!r}")
    try:
        return int(text, 16)
    except ValueError:
        raise LoadError(f"{where}: bad hexstring {text!r}") from None


def tdiv(a: int, b: int) -> int:
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def tmod(a: int, b: int) -> int:
    if b == 0:
        return 0
    return a - b * tdiv(a, b)


def two_comp_mod(v: int, w: int) -> int:
    half = 1 << (w - 1)
    return ((v + half) & ((1 << w) - 1)) - half


def sat_cast(v: int, w: int) -> int:
    hi = (1 << (w - 1)) - 1
    lo = -(1 << (w - 1))
    return hi if v > hi else lo if v < lo else v


def usat_cast(v: int, w: int) -> int:
    hi = (1 << w) - 1
    return hi if v > hi else 0 if v < 0 else v


@dataclass(slots=True)
class E:
    """A compiled expression: Python source and what it denotes."""

    code: str
    kind: str  # d data, b bool, h header, s stack, u union, us union stack, o object name
    width: int = 0
    signed: bool = False
    lv: bool = False  # `code` is an assignable f[...] expression
    bound: int | None = None  # the value is known to be in [0, 2**bound)
    hid: int = -1  # header id when statically known
    htype: str = ""
    name: str = ""  # JSON name of a stack/union/object
    vlen: str = ""  # for a varbit field: the code of its length slot
    fld: FieldInfo | None = None


class Emitter:
    """Collects generated source lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)


class Codegen:
    def __init__(self, doc: dict[str, Any], layout: Layout) -> None:
        self.doc = doc
        self.layout = layout
        self.ns: dict[str, Any] = {}
        self.src: list[str] = []
        self._ids = itertools.count()
        self.errors: dict[str, int] = {}
        for name, value in doc.get("errors", []):
            self.errors[name] = int(value)
        for i, name in enumerate(CORE_ERRORS):
            self.errors.setdefault(name, 1000 + i if name != "NoError" else 0)
        self.types: dict[str, HeaderInfo] = {}
        for h in layout.headers.values():
            self.types.setdefault(h.type_name, h)
        self.calcs: dict[str, str] = {}  # calculation name -> namespace name of its hash fn
        self.calc_specs = {c["name"]: c for c in doc.get("calculations", [])}
        self.learn_lists = {int(x["id"]): x for x in doc.get("learn_lists", [])}
        self.objects: dict[
            tuple[str, str], Any
        ] = {}  # set by Program: counters, meters, registers, vsets
        self.std = self._standard_metadata()
        # action function name -> its body (jump-free actions), for inlining in fused pipelines
        self.action_bodies: dict[str, list[str]] = {}
        self._init_namespace()

    # ------------------------------------------------------------------ utilities
    def const(self, obj: Any, prefix: str = "K") -> str:
        name = f"_{prefix}{next(self._ids)}"
        self.ns[name] = obj
        return name

    def fresh(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids)}"

    def add_source(self, lines: list[str]) -> None:
        self.src.extend(lines)
        self.src.append("")

    def build(self) -> dict[str, Any]:
        text = "\n".join(self.src)
        try:
            code = compile(text, "<softswitch-program>", "exec")
        except SyntaxError as exc:  # a bug of ours, not of the JSON
            LOG.error("generated code does not compile: %s\n%s", exc, text)
            raise LoadError(f"internal error compiling the program: {exc}") from exc
        exec(code, self.ns)
        return self.ns

    def _standard_metadata(self) -> dict[str, FieldInfo]:
        wanted = {
            "ingress_port": "standard_metadata.ingress_port",
            "egress_spec": "standard_metadata.egress_spec",
            "egress_port": "standard_metadata.egress_port",
            "instance_type": "standard_metadata.instance_type",
            "packet_length": "standard_metadata.packet_length",
            "mcast_grp": "intrinsic_metadata.mcast_grp",
            "egress_rid": "intrinsic_metadata.egress_rid",
            "parser_error": "standard_metadata.parser_error",
            "checksum_error": "standard_metadata.checksum_error",
            "ingress_global_timestamp": "intrinsic_metadata.ingress_global_timestamp",
            "egress_global_timestamp": "intrinsic_metadata.egress_global_timestamp",
            "priority": "intrinsic_metadata.priority",
        }
        out: dict[str, FieldInfo] = {}
        for key, dotted in wanted.items():
            fld = self.layout.find_field(dotted)
            if fld is None and dotted.startswith("intrinsic_metadata."):
                fld = self.layout.find_field("standard_metadata." + dotted.split(".", 1)[1])
            if fld is not None:
                out[key] = fld
        for required in ("ingress_port", "egress_spec", "egress_port", "instance_type"):
            if required not in out:
                raise LoadError(
                    f"the JSON has no standard_metadata.{required}: not a v1model program"
                )
        return out

    def _init_namespace(self) -> None:
        lay = self.layout
        size = lay.max_header_id + 1
        hv = [-1] * size
        hinfo: list[HeaderInfo | None] = [None] * size
        for h in lay.headers.values():
            hv[h.id] = h.vslot
            hinfo[h.id] = h
        union_siblings: list[tuple[int, ...]] = [()] * size
        for u in lay.unions.values():
            for hid in u.header_ids:
                union_siblings[hid] = tuple(
                    lay.headers_by_id[o].vslot for o in u.header_ids if o != hid
                )
        self.union_siblings = union_siblings
        self.ns.update(
            {
                "__builtins__": __builtins__,
                "_PE": ParserError,
                "_AF": AssertionFailed,
                "_mono": time.monotonic_ns,
                "_tdiv": tdiv,
                "_tmod": tmod,
                "_tcm": two_comp_mod,
                "_sat": sat_cast,
                "_usat": usat_cast,
                "_HV": hv,
                "_HI": hinfo,
                "_US": union_siblings,
                "_rand": random.randint,
                "_P4LOG": P4_LOG,
                "_ifb": int.from_bytes,
            }
        )
        self.ns["_setvalid"] = self._rt_setvalid
        self.ns["_setinvalid"] = self._rt_setinvalid
        self.ns["_copyhdr"] = self._rt_copyhdr
        self.ns["_push"] = self._rt_push
        self.ns["_pop"] = self._rt_pop

    # runtime helpers for headers known only at run time (stack elements)
    def _rt_setvalid(self, p: Any, f: list[int], hid: int) -> None:
        h = self.layout.headers_by_id[hid]
        if not f[h.vslot]:
            vs = h.vslot
            for i in range(vs + 1, vs + h.nslots):
                f[i] = 0
            f[vs] = 1
            p.length += h.fixed_bytes
            for other in self.union_siblings[hid]:
                f[other] = 0

    def _rt_setinvalid(self, p: Any, f: list[int], hid: int) -> None:
        h = self.layout.headers_by_id[hid]
        if f[h.vslot]:
            f[h.vslot] = 0
            p.length -= h.fixed_bytes + (f[h.vlen_slot] // 8 if h.varbit else 0)

    def _rt_copyhdr(self, f: list[int], dst: int, src: int) -> None:
        hd = self.layout.headers_by_id[dst]
        hs = self.layout.headers_by_id[src]
        f[hd.vslot : hd.vslot + hd.nslots] = f[hs.vslot : hs.vslot + hs.nslots]

    def _rt_push(self, f: list[int], ids: tuple[int, ...], next_slot: int, n: int) -> None:
        hs = [self.layout.headers_by_id[i] for i in ids]
        size = len(hs)
        for i in range(size - 1, -1, -1):
            if i >= n:
                src, dst = hs[i - n], hs[i]
                f[dst.vslot : dst.vslot + dst.nslots] = f[src.vslot : src.vslot + src.nslots]
            else:
                f[hs[i].vslot] = 0
        f[next_slot] = min(size, f[next_slot] + n)

    def _rt_pop(self, f: list[int], ids: tuple[int, ...], next_slot: int, n: int) -> None:
        hs = [self.layout.headers_by_id[i] for i in ids]
        size = len(hs)
        for i in range(size):
            if i + n < size:
                src, dst = hs[i + n], hs[i]
                f[dst.vslot : dst.vslot + dst.nslots] = f[src.vslot : src.vslot + src.nslots]
            else:
                f[hs[i].vslot] = 0
        f[next_slot] = max(0, f[next_slot] - n)

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

    # ------------------------------------------------------------------ calculations
    def calculation(self, name: str, where: str) -> str:
        """The namespace name of `fn(p, f) -> int` computing the named calculation."""
        if name in self.calcs:
            return self.calcs[name]
        spec = self.calc_specs.get(name)
        if spec is None:
            raise LoadError(f"{where}: unknown calculation {name!r}")
        fn = self.hash_function(spec["algo"], spec.get("input", []), f"calculation {name!r}")
        self.calcs[name] = fn
        return fn

    def hash_function(self, algo: str, inputs: list[dict[str, Any]], where: str) -> str:
        algo_fn = hashes.get(algo)
        if algo_fn is None:
            raise LoadError(
                f"{where}: unsupported hash algorithm {algo!r} (supported: "
                f"{', '.join(sorted(hashes.SUPPORTED))})"
            )
        lines, payload = self.hash_input_lines(inputs, where)
        fname = self.fresh("_C")
        if algo in ("csum16", "cksum16") and not payload:
            # The one's complement sum straight from the integer: no bytes in between.
            self.ns["_csi"] = hashes.csum16_of_int
            self.add_source([f"def {fname}(p, f):", *lines, "    return _csi(v, n)"])
            return fname
        algo_name = self.const(algo_fn, "H")
        bytes_fn = self.fresh("_B")
        body = ["    b = (v << (-n % 8)).to_bytes((n + 7) // 8, 'big')"]
        if payload:
            body.append("    b += p.data[p.pos:]")
        self.add_source([f"def {bytes_fn}(p, f):", *lines, *body, "    return b"])
        self.add_source([f"def {fname}(p, f):", f"    return {algo_name}({bytes_fn}(p, f))"])
        return fname

    def hash_input_lines(self, inputs: list[dict[str, Any]], where: str) -> tuple[list[str], bool]:
        """Lines that put the inputs' bits in `v` (`n` of them), fields of invalid headers left
        out as BMv2 does; and whether the payload follows. Consecutive inputs under the same
        validity bit are shifted in by one statement."""
        runs: list[tuple[int, list[tuple[str, str]]]] = []  # (validity slot or -1, parts)
        payload = False
        for item in inputs:
            t = item.get("type")
            if t == "field":
                h = self.layout.header(item["value"][0], where)
                fld = self.layout.field(item["value"][0], item["value"][1], where)
                if fld.varbit:
                    part = (f"f[{fld.slot}]", f"f[{h.vlen_slot}]")
                else:
                    val = f"(f[{fld.slot}] & {fld.mask})" if fld.signed else f"f[{fld.slot}]"
                    part = (val, str(fld.width))
                guard = -1 if h.metadata else h.vslot
            elif t == "hexstr":
                width = int(item.get("bitwidth", 0))
                part = (str(parse_hex(item["value"], where) & ((1 << width) - 1)), str(width))
                guard = -1
            elif t == "header":
                h = self.layout.header(item["value"], where)
                part = self.header_bits_code(h)
                guard = h.vslot
            elif t == "payload":
                payload = True
                continue
            else:
                raise LoadError(f"{where}: unsupported hash input type {t!r}")
            if runs and runs[-1][0] == guard:
                runs[-1][1].append(part)
            else:
                runs.append((guard, [part]))
        lines = ["    v = 0", "    n = 0"]
        for guard, parts in runs:
            pad = "    " if guard < 0 else "        "
            if guard >= 0:
                lines.append(f"    if f[{guard}]:")
            if all(w.isdigit() for _, w in parts):
                total = sum(int(w) for _, w in parts)
                terms = ["(v << " + str(total) + ")"]
                shift = total
                for val, w in parts:
                    shift -= int(w)
                    terms.append(f"({val} << {shift})" if shift else val)
                lines.append(f"{pad}v = {' | '.join(terms)}")
                lines.append(f"{pad}n += {total}")
            else:
                for val, w in parts:
                    lines.append(f"{pad}v = (v << {w}) | {val}")
                    lines.append(f"{pad}n += {w}")
        return lines, payload

    # ------------------------------------------------------------------ primitives
    def primitive(
        self,
        prim: dict[str, Any],
        where: str,
        adw: list[int] | None,
        out: list[str],
        in_parser: bool = False,
    ) -> None:
        op = prim.get("op")
        params = prim.get("parameters", [])
        where = f"{where}, primitive {op!r}"

        def arg(i: int) -> E:
            if i >= len(params):
                raise LoadError(f"{where}: missing parameter {i}")
            return self.expr(params[i], where, adw)

        if op in ("assign", "modify_field"):
            dst, src = arg(0), arg(1)
            if dst.fld is not None and dst.fld.varbit:
                out.append(f"{dst.code} = {self.data(src, where)}")
                if src.vlen:
                    out.append(f"{dst.vlen} = {src.vlen}")
                return
            out.append(self.assign(dst, src, where))
        elif op == "assign_VL":
            dst, src = arg(0), arg(1)
            out.append(f"{dst.code} = {src.code}")
            if dst.vlen and src.vlen:
                out.append(f"{dst.vlen} = {src.vlen}")
        elif op in ("assign_header", "copy_header"):
            out.append(
                self.copy_header_line(
                    self.header_ref(arg(0), where), self.header_ref(arg(1), where)
                )
            )
        elif op == "assign_union":
            du = self.layout.unions[arg(0).name]
            su = self.layout.unions[arg(1).name]
            for dh, sh in zip(du.header_ids, su.header_ids, strict=True):
                out.append(
                    self.copy_header_line(
                        self.static_header(self.layout.headers_by_id[dh].name, where),
                        self.static_header(self.layout.headers_by_id[sh].name, where),
                    )
                )
        elif op == "assign_header_stack":
            ds = self.layout.stacks[arg(0).name]
            ss = self.layout.stacks[arg(1).name]
            for dh, sh in zip(ds.header_ids, ss.header_ids, strict=True):
                out.append(
                    self.copy_header_line(
                        self.static_header(self.layout.headers_by_id[dh].name, where),
                        self.static_header(self.layout.headers_by_id[sh].name, where),
                    )
                )
            out.append(f"f[{ds.next_slot}] = f[{ss.next_slot}]")
        elif op == "assign_union_stack":
            dus = self.layout.union_stacks[arg(0).name]
            sus = self.layout.union_stacks[arg(1).name]
            for du_id, su_id in zip(dus.union_ids, sus.union_ids, strict=True):
                du = self.layout.unions_by_id[du_id]
                su = self.layout.unions_by_id[su_id]
                for dh, sh in zip(du.header_ids, su.header_ids, strict=True):
                    out.append(
                        self.copy_header_line(
                            self.static_header(self.layout.headers_by_id[dh].name, where),
                            self.static_header(self.layout.headers_by_id[sh].name, where),
                        )
                    )
            out.append(f"f[{dus.next_slot}] = f[{sus.next_slot}]")
        elif op in ("push", "pop"):
            target = arg(0)
            count = self.data(arg(1), where)
            if target.kind == "s":
                st = self.layout.stacks[target.name]
                ids, nslot = st.header_ids, st.next_slot
            elif target.kind == "us":
                us = self.layout.union_stacks[target.name]
                ids = tuple(h for u in us.union_ids for h in self.layout.unions_by_id[u].header_ids)
                nslot = us.next_slot
                raise LoadError(f"{where}: push/pop on header union stacks is not supported")
            else:
                raise LoadError(f"{where}: push/pop needs a header stack")
            helper = "_push" if op == "push" else "_pop"
            out.append(f"{helper}(f, {self.const(ids, 'S')}, {nslot}, {count})")
        elif op in ("add_header", "add_header_fast"):
            self.set_valid_lines(self.header_ref(arg(0), where), out)
        elif op == "remove_header":
            self.set_invalid_lines(self.header_ref(arg(0), where), out)
        elif op in ("mark_to_drop", "drop"):
            out.append(f"f[{self.std['egress_spec'].slot}] = {DROP_PORT}")
            if "mcast_grp" in self.std:
                out.append(f"f[{self.std['mcast_grp'].slot}] = 0")
        elif op == "exit":
            out.append("p.exit = True")
            out.append("return")
        elif op == "no_op":
            out.append("pass")
        elif op in ("add_to_field", "subtract_from_field"):
            dst, val = arg(0), arg(1)
            sign = "+" if op == "add_to_field" else "-"
            out.append(
                self.assign(dst, E(f"({dst.code} {sign} {self.data(val, where)})", "d"), where)
            )
        elif op in ("add", "subtract", "bit_and", "bit_or", "bit_xor", "shift_left", "shift_right"):
            sym = {
                "add": "+",
                "subtract": "-",
                "bit_and": "&",
                "bit_or": "|",
                "bit_xor": "^",
                "shift_left": "<<",
                "shift_right": ">>",
            }[op]
            dst, a, b = arg(0), arg(1), arg(2)
            out.append(
                self.assign(
                    dst, E(f"({self.data(a, where)} {sym} {self.data(b, where)})", "d"), where
                )
            )
        elif op == "modify_field_with_hash_based_offset":
            dst, base = arg(0), arg(1)
            calc = self.calculation(params[2]["value"], where)
            size = self.data(arg(3), where)
            out.append("_sz = " + size)
            out.append(
                self.assign(
                    dst, E(f"({self.data(base, where)} + {calc}(p, f) % (_sz or 1))", "d"), where
                )
            )
        elif op == "modify_field_rng_uniform":
            dst, lo, hi = arg(0), arg(1), arg(2)
            out.append(
                self.assign(
                    dst,
                    E(
                        f"_rand({self.data(lo, where)}, "
                        f"max({self.data(lo, where)}, {self.data(hi, where)}))",
                        "d",
                    ),
                    where,
                )
            )
        elif op == "generate_digest":
            out.append(f"p.learn_id = {self.data(arg(1), where)}")
        elif op in ("clone_ingress_pkt_to_egress", "clone_egress_pkt_to_egress"):
            out.append(f"p.clone_sid = {self.data(arg(0), where)}")
            out.append(
                f"p.clone_fl = {self.data(arg(1), where)}" if len(params) > 1 else "p.clone_fl = 0"
            )
        elif op == "resubmit":
            out.append(
                f"p.resubmit_fl = {self.data(arg(0), where)}" if params else "p.resubmit_fl = 0"
            )
        elif op == "recirculate":
            out.append(f"p.recirc_fl = {self.data(arg(0), where)}" if params else "p.recirc_fl = 0")
        elif op == "count":
            ctr = self.objects.get(("counter", params[0]["value"]))
            if ctr is None:
                raise LoadError(f"{where}: unknown counter array {params[0]['value']!r}")
            cells = self.const(ctr.cells, "Q")
            out.append(f"_i = {self.data(arg(1), where)}")
            out.append(f"if 0 <= _i < {ctr.size}:")
            out.append(f"    _c = {cells}[_i]; _c[0] += 1; _c[1] += p.ilen")
        elif op == "execute_meter":
            mtr = self.objects.get(("meter", params[0]["value"]))
            if mtr is None:
                raise LoadError(f"{where}: unknown meter array {params[0]['value']!r}")
            name = self.const(mtr, "M")
            dst = arg(2)
            out.append(
                self.assign(
                    dst,
                    E(f"{name}.execute({self.data(arg(1), where)}, p.ilen)", "d", bound=2),
                    where,
                )
            )
        elif op == "register_read":
            reg = self.objects.get(("register", params[1]["value"]))
            if reg is None:
                raise LoadError(f"{where}: unknown register array {params[1]['value']!r}")
            name = self.const(reg, "R")
            out.append(
                self.assign(
                    arg(0),
                    E(f"{name}.read({self.data(arg(2), where)})", "d", bound=reg.bitwidth),
                    where,
                )
            )
        elif op == "register_write":
            reg = self.objects.get(("register", params[0]["value"]))
            if reg is None:
                raise LoadError(f"{where}: unknown register array {params[0]['value']!r}")
            name = self.const(reg, "R")
            out.append(f"{name}.write({self.data(arg(1), where)}, {self.data(arg(2), where)})")
        elif op == "truncate":
            out.append(f"p.trunc = {self.data(arg(0), where)}")
        elif op == "log_msg":
            fmt = (
                self.const(str(params[0].get("value", "")), "F") if params else self.const("", "F")
            )
            values: list[str] = []
            if len(params) > 1 and params[1].get("type") == "parameters_vector":
                values = [self.data(self.expr(x, where, adw), where) for x in params[1]["value"]]
            out.append(f"_P4LOG.info(_fmt({fmt}, [{', '.join(values)}]))")
            self.ns["_fmt"] = _format_log
        elif op in ("assert", "assume"):
            out.append(f"if not {self.boolean(arg(0), where)}: raise _AF({op!r})")
        else:
            raise LoadError(f"{where}: unsupported primitive {op!r}")

    # ------------------------------------------------------------------ actions
    def action(self, act: dict[str, Any]) -> str:
        """Compile one action; returns the namespace name of `fn(p, f, ad)`."""
        where = f"action {act.get('name')!r}"
        adw = [int(r["bitwidth"]) for r in act.get("runtime_data", [])]
        prims = act.get("primitives", [])
        fname = self.fresh("_A")
        has_jumps = any(pr.get("op") in ("_jump", "_jump_if_zero") for pr in prims)
        lines = [f"def {fname}(p, f, ad):"]
        if not has_jumps:
            body: list[str] = []
            for pr in prims:
                self.primitive(pr, where, adw, body)
            lines.extend("    " + x for x in (body or ["pass"]))
            self.action_bodies[fname] = body
        else:
            lines.append("    pc = 0")
            lines.append(f"    while pc < {len(prims)}:")
            for i, pr in enumerate(prims):
                lines.append(f"        if pc == {i}:")
                op = pr.get("op")
                if op == "_jump":
                    target = self.data(self.expr(pr["parameters"][0], where, adw), where)
                    lines.append(f"            pc = {target}")
                    lines.append("            continue")
                elif op == "_jump_if_zero":
                    cond = self.data(self.expr(pr["parameters"][0], where, adw), where)
                    target = self.data(self.expr(pr["parameters"][1], where, adw), where)
                    lines.append(f"            pc = {target} if not {cond} else {i + 1}")
                    lines.append("            continue")
                else:
                    body = []
                    self.primitive(pr, where, adw, body)
                    lines.extend("            " + x for x in body)
                    lines.append(f"            pc = {i + 1}")
                    lines.append("            continue")
            lines.append("        break")
        self.add_source(lines)
        return fname

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


def _format_log(fmt: str, values: list[int]) -> str:
    out = []
    it = iter(values)
    pieces = fmt.split("{}")
    for i, piece in enumerate(pieces):
        out.append(piece)
        if i < len(pieces) - 1:
            out.append(str(next(it, "?")))
    return "".join(out)


CompiledFn = Callable[..., Any]
