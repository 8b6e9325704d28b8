"""Fuzz bytes read as structured values: what a harness decodes its input with (the same in the
atheris run and in the regression tests that replay the corpus)."""

from __future__ import annotations


class Reader:
    """Big-endian values taken from the front of `data`; past its end, zeros and b""."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def __len__(self) -> int:
        return len(self.data) - self.pos

    def take(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + max(0, n)]
        self.pos += len(out)
        return out

    def uint(self, nbytes: int) -> int:
        return int.from_bytes(self.take(nbytes).ljust(nbytes, b"\0"), "big")

    def u8(self) -> int:
        return self.uint(1)

    def u16(self) -> int:
        return self.uint(2)

    def u32(self) -> int:
        return self.uint(4)

    def rest(self) -> bytes:
        return self.take(len(self))
