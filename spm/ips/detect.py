"""Evaluation of a rule's payload options against the buffers of one inspection event, with
Snort's cursor semantics: each buffer has a cursor (the end of the last match in it, 0 after a
buffer switch); offset/depth are absolute, distance/within relative to the cursor; when a later
option fails, an earlier content is retried at its next occurrence (bounded backtracking).
"""

from __future__ import annotations

from collections.abc import Callable

from spm.ips.option_types import (
    BufferLen,
    ByteJump,
    ByteTest,
    Content,
    IsDataAt,
    PayloadOption,
    Pcre,
)

MAX_STEPS = 256  # backtracking budget per rule evaluation
_DIGITS = {8: b"01234567", 10: b"0123456789", 16: b"0123456789abcdefABCDEF"}

BufferGetter = Callable[[str, str | None], bytes | None]


class Buffers:
    """The buffers of one event, fetched lazily and lower-cased once for nocase contents."""

    __slots__ = ("_cache", "_get", "_lower")

    def __init__(self, get: BufferGetter) -> None:
        self._get = get
        self._cache: dict[tuple[str, str | None], bytes | None] = {}
        self._lower: dict[tuple[str, str | None], bytes] = {}

    def get(self, name: str, fld: str | None) -> bytes | None:
        key = (name, fld)
        try:
            return self._cache[key]
        except KeyError:
            data = self._get(name, fld)
            self._cache[key] = data
            return data

    def lower(self, name: str, fld: str | None) -> bytes:
        key = (name, fld)
        low = self._lower.get(key)
        if low is None:
            low = (self.get(name, fld) or b"").lower()
            self._lower[key] = low
        return low


def match_payload(options: tuple[PayloadOption, ...], bufs: Buffers) -> bool:
    budget = [MAX_STEPS]
    return _eval(options, 0, bufs, {}, budget)


def _window(c: Content, cursor: int, size: int) -> tuple[int, int]:
    if c.relative:
        start = cursor + (c.distance or 0)
        end = start + c.within if c.within is not None else size
    else:
        start = c.offset or 0
        end = start + c.depth if c.depth is not None else size
    return max(0, start), min(size, end)


def _read_number(data: bytes, pos: int, count: int, big: bool, base: int) -> int | None:
    if pos < 0 or pos + count > len(data):
        return None
    raw = data[pos : pos + count]
    if not base:
        return int.from_bytes(raw, "big" if big else "little")
    text = raw.split(b"\0", 1)[0].strip()
    digits = b""
    valid = _DIGITS[base]
    for ch in text:
        if ch not in valid:
            break
        digits += bytes([ch])
    if not digits:
        return None
    return int(digits, base)


def _mask(value: int, bitmask: int | None) -> int:
    if not bitmask:
        return value
    value &= bitmask
    shift = (bitmask & -bitmask).bit_length() - 1
    return value >> shift


def _eval(
    opts: tuple[PayloadOption, ...],
    i: int,
    bufs: Buffers,
    cursors: dict[tuple[str, str | None], int],
    budget: list[int],
) -> bool:
    while i < len(opts):
        budget[0] -= 1
        if budget[0] < 0:
            return False
        opt = opts[i]
        key = (opt.buffer, opt.field)
        data = bufs.get(opt.buffer, opt.field)
        if data is None:
            return False
        cur = cursors.get(key, 0)
        if isinstance(opt, Content):
            hay = bufs.lower(opt.buffer, opt.field) if opt.nocase else data
            pat = opt.pattern.lower() if opt.nocase else opt.pattern
            start, end = _window(opt, cur, len(data))
            pos = hay.find(pat, start, end) if end - start >= len(pat) else -1
            if opt.negated:
                if pos >= 0:
                    return False
                i += 1
                continue
            while pos >= 0:
                nxt = dict(cursors)
                nxt[key] = pos + len(pat)
                if _eval(opts, i + 1, bufs, nxt, budget):
                    return True
                if budget[0] < 0:
                    return False
                pos = hay.find(pat, pos + 1, end)
            return False
        if isinstance(opt, Pcre):
            # relative: the subject starts at the cursor, as Snort hands it to PCRE (^ matches
            # there, and nothing before it is seen)
            pos = cur if opt.relative else 0
            subject = data[pos:] if pos else data
            m = opt.regex.match(subject) if opt.anchored else opt.regex.search(subject)
            if opt.negated:
                if m is not None:
                    return False
            else:
                if m is None:
                    return False
                cursors = dict(cursors)
                cursors[key] = pos + m.end()
            i += 1
            continue
        if isinstance(opt, ByteTest):
            pos = (cur if opt.relative else 0) + opt.offset
            value = _read_number(data, pos, opt.count, opt.big_endian, opt.string_base)
            if value is None:
                return False
            value = _mask(value, opt.bitmask)
            op, v = opt.op, opt.value
            ok = (
                value < v
                if op == "<"
                else value > v
                if op == ">"
                else value <= v
                if op == "<="
                else value >= v
                if op == ">="
                else value == v
                if op == "="
                else bool(value & v)
                if op == "&"
                else bool(value ^ v)
            )
            if ok == opt.negated:
                return False
            i += 1
            continue
        if isinstance(opt, ByteJump):
            pos = (cur if opt.relative else 0) + opt.offset
            if opt.from_end:
                pos = len(data) + opt.offset
            value = _read_number(data, pos, opt.count, opt.big_endian, opt.string_base)
            if value is None:
                return False
            value = _mask(value, opt.bitmask) * opt.multiplier
            if opt.align:
                value = (value + 3) & ~3
            base = 0 if opt.from_beginning else pos + opt.count
            new = base + value + opt.post_offset
            if new < 0 or new > len(data):
                return False
            cursors = dict(cursors)
            cursors[key] = new
            i += 1
            continue
        if isinstance(opt, IsDataAt):
            pos = (cur if opt.relative else 0) + opt.size
            present = 0 <= pos < len(data)
            if present == opt.negated:
                return False
            i += 1
            continue
        if isinstance(opt, BufferLen):
            size = len(data) - cur if opt.relative else len(data)
            if not opt.check(size):
                return False
            i += 1
            continue
        raise AssertionError(f"unknown payload option {opt!r}")
    return True
