"""Compiles the BMv2 JSON's parsers, actions, controls and deparsers into Python functions.

Each JSON object becomes Python source text built only from our own identifiers and integer
literals (names and strings from the JSON never enter the source; objects such as tables and
format strings are bound into the module's namespace under generated names), compiled once with
`compile()`. At run time a packet then costs plain list indexing, integer arithmetic and dict
lookups: no interpretation of the JSON is left.

The generator is one class built in layers, a module each: this one (the namespace, names and
run-time helpers), `codegen_expr` (expressions and header bits), `codegen_actions` (hashes,
checksums' calculations, primitives and actions) and `codegen` (parsers, checksum units and
deparsers: the `Codegen` the program loader uses).
"""

from __future__ import annotations

import itertools
import logging
import random
import time
from dataclasses import dataclass
from typing import Any

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


STANDARD_METADATA = {
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


def standard_metadata(layout: Layout) -> dict[str, FieldInfo]:
    """The v1model standard and intrinsic metadata fields the program has, by short name."""
    out: dict[str, FieldInfo] = {}
    for key, dotted in STANDARD_METADATA.items():
        fld = layout.find_field(dotted)
        if fld is None and dotted.startswith("intrinsic_metadata."):
            fld = layout.find_field("standard_metadata." + dotted.split(".", 1)[1])
        if fld is not None:
            out[key] = fld
    return out


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


class CodegenBase:
    """What every part of the code generator shares: the program's namespace, generated names, the
    source collected so far, and run-time helpers for headers known only at run time."""

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
        out = standard_metadata(self.layout)
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
