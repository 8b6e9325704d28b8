"""The SPM's packet decoder (spm/packet.py) and its dispatcher's fast path: `decode` and
`flow_id` never raise (a packet that cannot be decoded comes back with `error` set), whatever the
bytes; a decoded packet's flow key and Community ID are computable."""

from __future__ import annotations

from spm.packet import decode, flow_id, flow_key

ERRORS: tuple[type[BaseException], ...] = ()  # none: "decoding never raises on bad input"


def one_input(data: bytes) -> None:
    pkt = decode(data)
    if pkt.version:
        assert pkt.version in (4, 6), pkt.version
        assert len(pkt.src) == len(pkt.dst) == (4 if pkt.version == 4 else 16)
        flow_key(pkt)
        assert pkt.community_id().startswith("1:")
    cid, src, dst = flow_id(data)
    assert cid == "" or cid.startswith("1:"), cid
    assert len(src) == len(dst)
