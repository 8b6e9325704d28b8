"""Hash and checksum algorithms of the BMv2 JSON format, computed over a byte string.

Each algorithm reproduces BMv2's definition (parameters, reflection, final xor) so that the same
input gives the same output on both targets. The names are the ones the JSON uses in `algo`.
"""

from __future__ import annotations

import binascii
import itertools
import random
from collections.abc import Callable

HashFn = Callable[[bytes], int]


def _reflect(value: int, width: int) -> int:
    out = 0
    for _ in range(width):
        out = (out << 1) | (value & 1)
        value >>= 1
    return out


def _crc_table(poly: int, width: int) -> list[int]:
    top = 1 << (width - 1)
    mask = (1 << width) - 1
    table = []
    for byte in range(256):
        rem = byte << (width - 8)
        for _ in range(8):
            rem = ((rem << 1) ^ poly) if rem & top else (rem << 1)
        table.append(rem & mask)
    return table


def make_crc(width: int, poly: int, init: int, xor_out: int, reflected: bool) -> HashFn:
    """A table-driven CRC with BMv2's custom-CRC parameters (data and remainder reflected alike)."""
    mask = (1 << width) - 1
    if reflected:
        # The reflected algorithm runs on the reflected polynomial, bytes taken LSB first.
        rpoly = _reflect(poly, width)
        rtable = []
        for byte in range(256):
            rem = byte
            for _ in range(8):
                rem = (rem >> 1) ^ rpoly if rem & 1 else rem >> 1
            rtable.append(rem)
        rinit = _reflect(init, width)

        def crc_reflected(data: bytes) -> int:
            rem = rinit
            for byte in data:
                rem = rtable[(rem ^ byte) & 0xFF] ^ (rem >> 8)
            return (rem ^ xor_out) & mask

        return crc_reflected

    table = _crc_table(poly, width)
    shift = width - 8

    def crc_plain(data: bytes) -> int:
        rem = init
        for byte in data:
            rem = table[((rem >> shift) ^ byte) & 0xFF] ^ ((rem << 8) & mask)
        return (rem ^ xor_out) & mask

    return crc_plain


def crc32(data: bytes) -> int:
    return binascii.crc32(data)


def crc_ccitt(data: bytes) -> int:
    return binascii.crc_hqx(data, 0xFFFF)


def csum16(data: bytes) -> int:
    """The Internet checksum (RFC 1071) of the data, odd tail padded with a zero byte."""
    if len(data) & 1:
        data = data + b"\x00"
    total = int.from_bytes(data, "big")
    # Fold the big integer 16 bits at a time: sum of all words modulo 0xffff (end-around carry).
    s = 0
    nbytes = len(data)
    if nbytes:
        s = total % 0xFFFF
        if s == 0 and total != 0:
            s = 0xFFFF
    return (~s) & 0xFFFF


def _xor_words(width_bytes: int) -> HashFn:
    def xor_hash(data: bytes) -> int:
        out = 0
        n = len(data)
        full = n - n % width_bytes
        for i in range(0, full, width_bytes):
            out ^= int.from_bytes(data[i : i + width_bytes], "big")
        tail = data[full:]
        if tail:
            out ^= int.from_bytes(tail, "big") << (8 * (width_bytes - len(tail)))
        return out

    return xor_hash


def identity(data: bytes) -> int:
    return int.from_bytes(data[:8], "big")


def _make_round_robin() -> HashFn:
    counter = itertools.count()

    def round_robin(data: bytes) -> int:
        del data
        return next(counter)

    return round_robin


def _make_round_robin_consistent() -> HashFn:
    seen: dict[bytes, int] = {}

    def round_robin_consistent(data: bytes) -> int:
        return seen.setdefault(bytes(data), len(seen))

    return round_robin_consistent


def _random_hash(data: bytes) -> int:
    del data
    return random.getrandbits(64)


crc16 = make_crc(16, 0x8005, 0x0000, 0x0000, True)

_FACTORIES: dict[str, Callable[[], HashFn]] = {
    "crc16": lambda: crc16,
    "crc16_custom": lambda: make_crc(16, 0x8005, 0x0000, 0x0000, True),
    "crc32": lambda: crc32,
    "crc32_custom": lambda: crc32,
    "crc8_custom": lambda: make_crc(8, 0x07, 0x00, 0x00, False),
    "crcCCITT": lambda: crc_ccitt,
    "csum16": lambda: csum16,
    "cksum16": lambda: csum16,
    "identity": lambda: identity,
    "xor16": lambda: _xor_words(2),
    "xor32": lambda: _xor_words(4),
    "random": lambda: _random_hash,
    "round_robin": _make_round_robin,
    "round_robin_consistent": _make_round_robin_consistent,
}

SUPPORTED = frozenset(_FACTORIES)


def get(name: str) -> HashFn | None:
    """The hash function called `name` in the JSON (a fresh state for stateful ones), or None."""
    factory = _FACTORIES.get(name)
    return factory() if factory else None
