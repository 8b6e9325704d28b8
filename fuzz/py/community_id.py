"""Community ID v1 (spm/community_id.py, https://github.com/corelight/community-id-spec): any
protocol number, addresses and ports of their domain give an id, the same for both directions of
a flow with ports (an ICMP type without a counterpart is one-way, as the spec says); addresses of
another length are refused with ValueError, the function's documented error."""

from __future__ import annotations

from fuzz.py.reader import Reader
from spm.community_id import PROTO_ICMP, PROTO_ICMP6, community_id

ERRORS: tuple[type[BaseException], ...] = (ValueError,)


def one_input(data: bytes) -> None:
    r = Reader(data)
    proto, shape = r.u8(), r.u8()
    size = (4, 16)[shape & 1]
    if shape & 0x80:  # a malformed length now and then: ValueError, nothing else
        size = shape & 0x1F
    saddr, daddr = r.take(size).ljust(size, b"\0"), r.take(size).ljust(size, b"\0")
    seed = r.u16()
    if shape & 2:
        ids = community_id(proto, saddr, daddr, seed=seed)
        back = community_id(proto, daddr, saddr, seed=seed)
    else:
        sport, dport = r.u16(), r.u16()
        if proto in (PROTO_ICMP, PROTO_ICMP6):
            sport, dport = sport & 0xFF, dport & 0xFF  # type and code
        ids = community_id(proto, saddr, daddr, sport, dport, seed=seed)
        back = community_id(proto, daddr, saddr, dport, sport, seed=seed)
        if proto in (PROTO_ICMP, PROTO_ICMP6):
            return  # the reverse of an ICMP message is its counterpart type, not swapped ports
    assert ids.startswith("1:") and ids == back, (ids, back)
