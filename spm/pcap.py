"""Reading capture files for `opengate spm replay`: classic pcap (microsecond and nanosecond
timestamps, either byte order) and pcapng (sections, interfaces with their link types and
timestamp resolutions, enhanced, simple and obsolete packet blocks; other blocks are skipped).

Errors: a file that cannot be opened, or is neither format, raises `ConfigError` naming it. A
file that stops in the middle of a record (or whose record lengths are impossible) yields the
packets before the damage, then raises `DamagedCapture` saying where: a capture cut short by a
full disk or a killed tcpdump still replays up to that point.

Not supported: compressed files (gzip); link layers (this module gives frames and their link
type; `spm.replay` strips the link layer).

`write_pcap` writes classic pcap (microseconds), as `opengate spm corpus` makes captures.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from opengate.errors import ConfigError

LINKTYPE_ETHERNET = 1
MAX_RECORD = 256 * 1024  # bytes; a larger captured length means the file is damaged

_PCAP_MAGIC = {  # magic as read little-endian -> (byte order, fraction units per second)
    0xA1B2C3D4: ("<", 1_000_000),
    0xD4C3B2A1: (">", 1_000_000),
    0xA1B23C4D: ("<", 1_000_000_000),
    0x4D3CB2A1: (">", 1_000_000_000),
}
_PCAPNG_SHB = 0x0A0D0D0A
_PCAPNG_BOM = 0x1A2B3C4D
_IDB, _PB, _SPB, _EPB = 1, 2, 3, 6
_OPT_TSRESOL, _OPT_TSOFFSET = 9, 14


class DamagedCapture(Exception):  # noqa: N818 (not an "...Error": the packets before it are good)
    """The file stops in the middle of a record, or a record's lengths are impossible."""


@dataclass(frozen=True, slots=True)
class Frame:
    ts: float  # capture time, seconds since the epoch
    linktype: int
    data: bytes
    wirelen: int  # the frame's length on the wire (>= len(data) when the capture was snapped)


class CaptureReader:
    """`for frame in CaptureReader(path)`: the frames in file order."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        try:
            self._f: BinaryIO = Path(path).open("rb")  # noqa: SIM115 (closed by close())
        except OSError as exc:
            raise ConfigError(f"cannot read the capture: {exc.strerror}", path=self.path) from None
        head = self._f.read(4)
        magic = int.from_bytes(head, "little") if len(head) == 4 else -1
        if magic in _PCAP_MAGIC:
            self.format = "pcap"
        elif magic == _PCAPNG_SHB:
            self.format = "pcapng"
        else:
            self._f.close()
            raise ConfigError(
                f"not a pcap or pcapng file (it starts with {head.hex() or 'nothing'})",
                path=self.path,
            )
        self._magic = magic
        self.frames = 0  # records read so far
        self.linktype: int | None = None  # a classic pcap's one link type

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> CaptureReader:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Frame]:
        self._f.seek(4 if self.format == "pcap" else 0)
        frames = self._pcap() if self.format == "pcap" else self._pcapng()
        for frame in frames:
            self.frames += 1
            yield frame

    def _damaged(self, what: str) -> DamagedCapture:
        return DamagedCapture(
            f"{self.path}: {what} at byte {self._f.tell()}, after {self.frames} packets"
        )

    def _read(self, n: int, what: str) -> bytes:
        data = self._f.read(n)
        if len(data) < n:
            raise self._damaged(f"truncated {what} ({len(data)} of {n} bytes)")
        return data

    # --- classic pcap ---------------------------------------------------------------------------

    def _pcap(self) -> Iterator[Frame]:
        order, units = _PCAP_MAGIC[self._magic]
        rest = self._read(20, "file header")
        _major, _minor, _zone, _sigfigs, _snaplen, linktype = struct.unpack(order + "HHiIII", rest)
        self.linktype = linktype & 0xFFFF  # the upper bits may carry FCS flags
        record = struct.Struct(order + "IIII")
        while True:
            hdr = self._f.read(record.size)
            if not hdr:
                return
            if len(hdr) < record.size:
                raise self._damaged(f"truncated record header ({len(hdr)} of 16 bytes)")
            sec, frac, caplen, wirelen = record.unpack(hdr)
            if caplen > MAX_RECORD:
                raise self._damaged(f"impossible record length {caplen}")
            data = self._read(caplen, "packet record")
            yield Frame(sec + frac / units, self.linktype, data, wirelen)

    # --- pcapng ---------------------------------------------------------------------------------

    def _pcapng(self) -> Iterator[Frame]:
        order = "<"
        interfaces: list[tuple[int, int, int]] = []  # (linktype, units per second, offset)
        while True:
            head = self._f.read(8)
            if not head:
                return
            if len(head) < 8:
                raise self._damaged(f"truncated block header ({len(head)} of 8 bytes)")
            btype = struct.unpack(order + "I", head[:4])[0]
            if btype == _PCAPNG_SHB:  # a new section: its own byte order and interfaces
                bom = self._read(4, "section header")
                order = "<" if int.from_bytes(bom, "little") == _PCAPNG_BOM else ">"
                if struct.unpack(order + "I", bom)[0] != _PCAPNG_BOM:
                    raise self._damaged("section header without its byte-order magic")
                interfaces = []
                length = struct.unpack(order + "I", head[4:])[0]
                body = bom + self._block_body(length, order, 4)
            else:
                length = struct.unpack(order + "I", head[4:])[0]
                body = self._block_body(length, order, 0)
            if btype == _IDB:
                interfaces.append(_interface(body, order))
            elif btype in (_EPB, _PB, _SPB):
                frame = self._packet(btype, body, order, interfaces)
                if frame is not None:
                    yield frame

    def _block_body(self, length: int, order: str, already: int) -> bytes:
        if length < 12 or length % 4 or length > MAX_RECORD + 64:
            raise self._damaged(f"impossible block length {length}")
        body = self._read(length - 12 - already, "block")
        trailer = struct.unpack(order + "I", self._read(4, "block"))[0]
        if trailer != length:
            raise self._damaged(f"block length {length} and trailer {trailer} differ")
        return body

    def _packet(
        self, btype: int, body: bytes, order: str, interfaces: list[tuple[int, int, int]]
    ) -> Frame | None:
        if btype == _SPB:  # no interface id (always the first) and no timestamp
            if len(body) < 4 or not interfaces:
                raise self._damaged("simple packet block without an interface")
            wirelen = struct.unpack(order + "I", body[:4])[0]
            return Frame(0.0, interfaces[0][0], body[4 : 4 + wirelen], wirelen)
        if btype == _EPB:
            if len(body) < 20:
                raise self._damaged("short enhanced packet block")
            iface, high, low, caplen, wirelen = struct.unpack(order + "IIIII", body[:20])
            data_at = 20
        else:
            if len(body) < 20:
                raise self._damaged("short packet block")
            iface, _drops, high, low, caplen, wirelen = struct.unpack(order + "HHIIII", body[:20])
            data_at = 20
        if iface >= len(interfaces):
            raise self._damaged(f"packet on interface {iface}, which was not described")
        if data_at + caplen > len(body):
            raise self._damaged(f"captured length {caplen} beyond its block")
        linktype, per_second, offset = interfaces[iface]
        units = (high << 32) | low
        ts = offset + units // per_second + units % per_second / per_second
        return Frame(ts, linktype, body[data_at : data_at + caplen], wirelen)


def _interface(body: bytes, order: str) -> tuple[int, int, int]:
    """An interface description block -> (link type, timestamp units per second, offset)."""
    linktype = struct.unpack(order + "H", body[:2])[0] if len(body) >= 2 else -1
    per_second, offset = 1_000_000, 0
    at = 8
    while at + 4 <= len(body):
        code, size = struct.unpack(order + "HH", body[at : at + 4])
        value = body[at + 4 : at + 4 + size]
        if code == 0:
            break
        if code == _OPT_TSRESOL and size >= 1:
            r = value[0]
            per_second = 2 ** (r & 0x7F) if r & 0x80 else 10**r
        elif code == _OPT_TSOFFSET and size >= 8:
            offset = struct.unpack(order + "q", value[:8])[0]
        at += 4 + (size + 3) // 4 * 4
    return linktype, per_second, offset


def write_pcap(
    path: str | Path, frames: Iterable[tuple[float, bytes]], linktype: int = LINKTYPE_ETHERNET
) -> None:
    """A classic pcap file (little-endian, microseconds, snap length 65,535) of (capture time,
    frame) pairs."""
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype))
        for ts, frame in frames:
            seconds, micros = divmod(round(ts * 1e6), 1_000_000)
            out.write(struct.pack("<IIII", seconds, micros, len(frame), len(frame)) + frame)
