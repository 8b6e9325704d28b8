"""TCP reassembly (spm/reassembly.py). With segments cut from one sender's stream (out of order,
overlapping, retransmitted, across the 32-bit wrap of the sequence numbers, beyond the limits),
the bytes handed on are the stream's, in order, each once. With arbitrary segments (any sequence
number, any bytes) nothing raises. Always: the memory charged to the stream and to the worker's
budget stays within their limits, and is all given back when the stream is released."""

from __future__ import annotations

from fuzz.py.reader import Reader
from spm.reassembly import StreamBudget, TcpStream

ERRORS: tuple[type[BaseException], ...] = ()
MAX_SEGMENTS = 64
STREAM_BYTES = 4096


def one_input(data: bytes) -> None:
    r = Reader(data)
    consistent = not r.u8() & 1
    isn = r.u32()
    max_bytes = 64 + r.u16() % 8192
    max_segments = 1 + r.u8() % 32
    budget = StreamBudget(limit=64 + r.u16() % 16384)
    stream = TcpStream(budget, max_bytes, max_segments)
    truth = bytes((isn + i * 7) & 0xFF for i in range(STREAM_BYTES))  # the sender's bytes
    delivered = bytearray()
    if consistent:
        stream.start(isn)  # the SYN was seen: offset 0 is the stream's first byte
    for _ in range(MAX_SEGMENTS):
        if not len(r):
            break
        if consistent:
            offset, size, fin = r.u16() % STREAM_BYTES, r.u8(), r.u8() & 1
            seq, chunk = (isn + offset) % (1 << 32), truth[offset : offset + size]
        else:
            seq, size, fin = r.u32(), r.u8(), r.u8() & 1
            chunk = r.take(size)
        _seg, out = stream.add(seq, chunk, fin=bool(fin))
        delivered += out
        if consistent:
            assert bytes(delivered) == truth[: len(delivered)], "bytes out of order or changed"
            assert len(delivered) == stream.next_offset
        assert 0 <= stream.buffered_bytes <= max_bytes
        assert 0 <= budget.used <= budget.limit
        assert budget.used == stream.buffered_bytes  # the only stream of this budget
    stream.release()
    assert stream.buffered_bytes == 0 and budget.used == 0
