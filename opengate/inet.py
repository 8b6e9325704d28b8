"""Internet header arithmetic shared by the CPM and the SPM tools."""

from __future__ import annotations

import struct


def internet_checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071) of `data`, an odd tail padded with a zero byte."""
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF
