"""The code generator's actions: calculations (hashes over fields), the v1model primitives, and
action functions."""

from __future__ import annotations

from typing import Any

from softswitch import hashes
from softswitch.codegen_base import DROP_PORT, E, parse_hex
from softswitch.codegen_expr import ExprCodegen
from softswitch.errors import LoadError


class ActionCodegen(ExprCodegen):
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


def _format_log(fmt: str, values: list[int]) -> str:
    out = []
    it = iter(values)
    pieces = fmt.split("{}")
    for i, piece in enumerate(pieces):
        out.append(piece)
        if i < len(pieces) - 1:
            out.append(str(next(it, "?")))
    return "".join(out)
