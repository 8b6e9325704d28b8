"""The two candidate slots of a flow in the v1model data-plane session slots, as the pipeline
computes them (p4src/include/control/session_setup.p4, `candidate_slots`): the flow's key is its
two ends in order (by address, then port: the lower end first), the same for both directions and
never the same for two flows; slot 0 is crc32 of (lower address, higher address, protocol,
lower port, higher port) modulo the number of slots, slot 1 crc32 of the same fields in the
reverse order. The fields are big-endian, as BMv2 and the software switch concatenate them.

Tests use it to pick flows that meet in a slot (a collision on purpose) and to compare how often
the pair collides with two random choices. Masqueraded flows use only the first NAT_DP_SLOTS of
each (the pipeline masks the index); Tofino's slots (arch/tna_flow_slots.p4) hash another key.
"""

from __future__ import annotations

import struct
import zlib


def flow_key(src: int, dst: int, proto: int, sport: int, dport: int) -> tuple[int, ...]:
    """(lower address, higher address, protocol, lower port, higher port) of the flow's ends."""
    if src < dst or (src == dst and sport <= dport):
        return src, dst, proto, sport, dport
    return dst, src, proto, dport, sport


def candidate_slots(
    src: int, dst: int, proto: int, sport: int, dport: int, slots: int
) -> tuple[int, int]:
    """The flow's two candidate slots among `slots` (the flow registers' size, from P4Info)."""
    lo_addr, hi_addr, proto, lo_port, hi_port = flow_key(src, dst, proto, sport, dport)
    first = struct.pack("!IIBHH", lo_addr, hi_addr, proto, lo_port, hi_port)
    second = struct.pack("!HHBII", hi_port, lo_port, proto, hi_addr, lo_addr)
    return zlib.crc32(first) % slots, zlib.crc32(second) % slots
