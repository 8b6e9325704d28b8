"""Where each header, field and stack lives in a packet's PHV.

The PHV of a packet is one flat Python list of ints. Each header instance occupies a contiguous
run of slots: its validity bit, then its fields in declaration order, then (for a header with a
variable-length field) the current bit width of that field. Header stacks and union stacks have
one more slot for their "next index". Everything is resolved once, at load time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from softswitch.errors import LoadError


@dataclass(slots=True)
class FieldInfo:
    name: str
    width: int  # 0 for a variable-length field
    signed: bool
    slot: int
    index: int  # position in the header type
    varbit: bool = False

    @property
    def mask(self) -> int:
        return (1 << self.width) - 1


@dataclass(slots=True)
class HeaderInfo:
    name: str
    id: int
    type_name: str
    metadata: bool
    vslot: int  # validity slot; fields follow
    fields: list[FieldInfo]
    by_name: dict[str, FieldInfo]
    fixed_bits: int  # sum of fixed-width fields
    varbit: FieldInfo | None = None
    vlen_slot: int = -1  # bit width of the varbit field, when there is one
    max_bytes: int = 0
    union: int = -1  # id of the header union holding this header, -1 if none

    @property
    def nslots(self) -> int:
        return 1 + len(self.fields) + (1 if self.varbit else 0)

    @property
    def fixed_bytes(self) -> int:
        return self.fixed_bits // 8


@dataclass(slots=True)
class StackInfo:
    name: str
    id: int
    header_ids: tuple[int, ...]
    next_slot: int
    type_name: str


@dataclass(slots=True)
class UnionInfo:
    name: str
    id: int
    header_ids: tuple[int, ...]
    member_names: tuple[str, ...]


@dataclass(slots=True)
class UnionStackInfo:
    name: str
    id: int
    union_ids: tuple[int, ...]
    next_slot: int


@dataclass(slots=True)
class Layout:
    headers: dict[str, HeaderInfo] = field(default_factory=dict)
    headers_by_id: dict[int, HeaderInfo] = field(default_factory=dict)
    stacks: dict[str, StackInfo] = field(default_factory=dict)
    unions: dict[str, UnionInfo] = field(default_factory=dict)
    unions_by_id: dict[int, UnionInfo] = field(default_factory=dict)
    union_stacks: dict[str, UnionStackInfo] = field(default_factory=dict)
    aliases: dict[str, tuple[str, str]] = field(default_factory=dict)
    template: list[int] = field(default_factory=list)
    metadata_slots: list[tuple[int, int]] = field(default_factory=list)  # [start, end) ranges
    max_header_id: int = 0

    def header(self, name: str, where: str) -> HeaderInfo:
        info = self.headers.get(name)
        if info is None:
            raise LoadError(f"{where}: unknown header instance {name!r}")
        return info

    def field(self, header: str, name: str, where: str) -> FieldInfo:
        info = self.header(header, where)
        fld = info.by_name.get(name)
        if fld is None:
            # Exact names only, as BMv2 does: a JSON naming a field of a copied struct
            # ("struct.field") where the header type has "field" is refused, not guessed at.
            raise LoadError(f"{where}: header {header!r} has no field {name!r}")
        return fld

    def find_field(self, dotted: str) -> FieldInfo | None:
        """A field by "header.field", following the JSON's field aliases."""
        if dotted in self.aliases:
            hdr, name = self.aliases[dotted]
        else:
            hdr, _, name = dotted.partition(".")
        info = self.headers.get(hdr)
        return info.by_name.get(name) if info else None


def build_layout(doc: dict[str, Any]) -> Layout:
    layout = Layout()
    types: dict[str, dict[str, Any]] = {}
    for htype in doc.get("header_types", []):
        types[htype["name"]] = htype
    slot = 0
    for hdr in doc.get("headers", []):
        where = f"header {hdr.get('name')!r}"
        htype = types.get(hdr["header_type"])
        if htype is None:
            raise LoadError(f"{where}: unknown header type {hdr['header_type']!r}")
        if htype.get("length_exp") is not None:
            raise LoadError(
                f"{where}: header type {htype['name']!r} uses 'length_exp' (P4_14 "
                "variable-length header); only extract_VL is supported"
            )
        vslot = slot
        slot += 1
        fields: list[FieldInfo] = []
        varbit: FieldInfo | None = None
        fixed = 0
        for index, spec in enumerate(htype["fields"]):
            name, width = spec[0], spec[1]
            signed = bool(spec[2]) if len(spec) > 2 else False
            if width == "*":
                if varbit is not None:
                    raise LoadError(f"{where}: more than one variable-length field")
                info = FieldInfo(name, 0, False, slot, index, varbit=True)
                varbit = info
            else:
                if not isinstance(width, int) or width < 0:
                    raise LoadError(f"{where}: field {name!r} has bad width {width!r}")
                info = FieldInfo(name, width, signed, slot, index)
                fixed += width
            fields.append(info)
            slot += 1
        vlen_slot = -1
        if varbit is not None:
            vlen_slot = slot
            slot += 1
        metadata = bool(hdr.get("metadata", False))
        if not metadata and fixed % 8 and varbit is None:
            raise LoadError(f"{where}: header width {fixed} bits is not a multiple of 8")
        info_h = HeaderInfo(
            name=hdr["name"],
            id=int(hdr["id"]),
            type_name=htype["name"],
            metadata=metadata,
            vslot=vslot,
            fields=fields,
            by_name={f.name: f for f in fields},
            fixed_bits=fixed,
            varbit=varbit,
            vlen_slot=vlen_slot,
            max_bytes=int(htype.get("max_length") or 0),
        )
        info_h.by_name["$valid$"] = FieldInfo("$valid$", 1, False, vslot, -1)
        layout.headers[info_h.name] = info_h
        layout.headers_by_id[info_h.id] = info_h
        layout.max_header_id = max(layout.max_header_id, info_h.id)
    for stack in doc.get("header_stacks", []):
        ids = tuple(int(i) for i in stack["header_ids"])
        for hid in ids:
            if hid not in layout.headers_by_id:
                raise LoadError(f"header stack {stack['name']!r}: unknown header id {hid}")
        layout.stacks[stack["name"]] = StackInfo(
            stack["name"], int(stack["id"]), ids, slot, stack.get("header_type", "")
        )
        slot += 1
    for union in doc.get("header_unions", []):
        ids = tuple(int(i) for i in union["header_ids"])
        info_u = UnionInfo(
            union["name"],
            int(union["id"]),
            ids,
            tuple(layout.headers_by_id[i].name for i in ids),
        )
        layout.unions[info_u.name] = info_u
        layout.unions_by_id[info_u.id] = info_u
        for hid in ids:
            layout.headers_by_id[hid].union = info_u.id
    for ustack in doc.get("header_union_stacks", []):
        ids = tuple(int(i) for i in ustack["header_union_ids"])
        layout.union_stacks[ustack["name"]] = UnionStackInfo(
            ustack["name"], int(ustack["id"]), ids, slot
        )
        slot += 1
    for alias, target in doc.get("field_aliases", []):
        layout.aliases[alias] = (target[0], target[1])
    template = [0] * slot
    for info_h in layout.headers.values():
        if info_h.metadata:
            template[info_h.vslot] = 1
            layout.metadata_slots.append((info_h.vslot + 1, info_h.vslot + info_h.nslots))
    layout.template = template
    return layout
