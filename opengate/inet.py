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


def ipv4_packet(
    source: int, destination: int, proto: int, payload: bytes, ident: int = 0, tos: int = 0
) -> bytes:
    """An IPv4 packet without options around `payload`: TTL 64, not fragmented, its header
    checksum set."""
    header = struct.pack(
        "!BBHHHBBHII",
        0x45,
        tos,
        20 + len(payload),
        ident & 0xFFFF,
        0,
        64,
        proto,
        0,
        source,
        destination,
    )
    return header[:10] + struct.pack("!H", internet_checksum(header)) + header[12:] + payload
