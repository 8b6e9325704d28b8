"""Hash and checksum algorithms of the BMv2 JSON format, computed over a byte string.

Each algorithm reproduces BMv2's definition (parameters, reflection, final xor, output width:
bm_sim/calculations.cpp) so that the same input gives the same output on both targets, and the set
of names is BMv2's: a JSON naming another algorithm (p4c's `random`, for one) is refused at load,
as BMv2 refuses it. The names are the ones the JSON uses in `algo`.
"""

from __future__ import annotations

import binascii
import itertools
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


def csum16_of_int(value: int, nbits: int) -> int:
    """csum16 of the `nbits`-bit string `value` (what `csum16` gives for its bytes, the last
    byte padded with zero bits and an odd byte count with a zero byte)."""
    x = value << (-nbits % 16)
    s = x % 0xFFFF  # 2**16 = 1 (mod 0xffff): the sum of the 16-bit words, end-around carry
    if s == 0 and x:
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


_P1, _P2, _P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
_P4, _P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5
_M64 = (1 << 64) - 1


def _rotl64(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _xxh_round(acc: int, lane: int) -> int:
    return (_rotl64((acc + lane * _P2) & _M64, 31) * _P1) & _M64


def _xxh_merge(acc: int, val: int) -> int:
    return ((acc ^ _xxh_round(0, val)) * _P1 + _P4) & _M64


def xxh64(data: bytes) -> int:
    """XXH64 with seed 0 (BMv2's `xxh64`, from libxxhash)."""
    n = len(data)
    i = 0
    if n >= 32:
        v1, v2, v3, v4 = (_P1 + _P2) & _M64, _P2, 0, (-_P1) & _M64
        while i + 32 <= n:
            v1 = _xxh_round(v1, int.from_bytes(data[i : i + 8], "little"))
            v2 = _xxh_round(v2, int.from_bytes(data[i + 8 : i + 16], "little"))
            v3 = _xxh_round(v3, int.from_bytes(data[i + 16 : i + 24], "little"))
            v4 = _xxh_round(v4, int.from_bytes(data[i + 24 : i + 32], "little"))
            i += 32
        h = (_rotl64(v1, 1) + _rotl64(v2, 7) + _rotl64(v3, 12) + _rotl64(v4, 18)) & _M64
        for v in (v1, v2, v3, v4):
            h = _xxh_merge(h, v)
    else:
        h = _P5
    h = (h + n) & _M64
    while i + 8 <= n:
        h ^= _xxh_round(0, int.from_bytes(data[i : i + 8], "little"))
        h = (_rotl64(h, 27) * _P1 + _P4) & _M64
        i += 8
    if i + 4 <= n:
        h ^= (int.from_bytes(data[i : i + 4], "little") * _P1) & _M64
        h = (_rotl64(h, 23) * _P2 + _P3) & _M64
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _M64
        h = (_rotl64(h, 11) * _P1) & _M64
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M64
    h ^= h >> 29
    h = (h * _P3) & _M64
    h ^= h >> 32
    return h


def toeplitz_zero_key(data: bytes) -> int:
    """BMv2's `toeplitz` with its initial key (four zero bytes): always 0. (The key can only be
    changed through BMv2's Thrift runtime, not through P4Runtime.)"""
    del data
    return 0


crc16 = make_crc(16, 0x8005, 0x0000, 0x0000, True)

_FACTORIES: dict[str, Callable[[], HashFn]] = {
    "crc16": lambda: crc16,
    "crc16_custom": lambda: make_crc(16, 0x8005, 0x0000, 0x0000, True),
    "crc32": lambda: crc32,
    "crc32_custom": lambda: crc32,
    "crc8_custom": lambda: make_crc(8, 0x07, 0x00, 0x00, False),
    "crc64_custom": lambda: make_crc(64, 0x1B, 0x00, 0x00, True),
    "crcCCITT": lambda: crc_ccitt,
    "csum16": lambda: csum16,
    "cksum16": lambda: csum16,
    "identity": lambda: identity,
    "xor16": lambda: _xor_words(2),
    "xor32": lambda: _xor_words(4),
    "xxh64": lambda: xxh64,
    "toeplitz": lambda: toeplitz_zero_key,
    "round_robin": _make_round_robin,
    "round_robin_consistent": _make_round_robin_consistent,
}

SUPPORTED = frozenset(_FACTORIES)


def get(name: str) -> HashFn | None:
    """The hash function called `name` in the JSON (a fresh state for stateful ones), or None."""
    factory = _FACTORIES.get(name)
    return factory() if factory else None
