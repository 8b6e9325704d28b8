"""The two candidate slots of a flow in the v1model data-plane session slots, as the pipeline
computes them (p4src/include/control/session_setup.p4, `candidate_slots`): the flow's key is its
two ends in order (by address, then port: the lower end first), the same for both directions and
never the same for two flows; slot 0 is crc32 of (lower address, higher address, protocol,
lower port, higher port) modulo the number of slots, slot 1 crc32 of the same fields in the
reverse order. The fields are big-endian, as BMv2 and the software switch concatenate them.

Tests use it to pick flows that meet in a slot (a collision on purpose) and to compare how often
the pair collides with two random choices. Masqueraded flows use only the first NAT_DP_SLOTS of
each (the pipeline masks the index).

Tofino's slots (arch/tna_flow_slots.p4) hash another form of the same key, `tna_flow_key`: the
XORs of the addresses and of the ports and the lower end's address and port, which Steering's
table `flow_lower_end` picks from saturating differences (a Tofino gateway compares a field with
a constant, not with another field). No Tofino model runs here: the tests check this rule,
written as the P4 writes it (the table's entries in order), against the brute-force
reference.
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


# Steering's `flow_lower_end` (Tofino): its constant entries in order, keyed by (src |-| dst,
# src ^ dst, sport |-| dport) with None for "any", and its default action: which end is the lower.
LOWER_END_ENTRIES: tuple[tuple[tuple[int | None, ...], str], ...] = (
    ((0, 0, 0), "src"),
    ((0, 0, None), "dst"),
    ((0, None, None), "src"),
)
LOWER_END_DEFAULT = "dst"


def tna_flow_key(src: int, dst: int, proto: int, sport: int, dport: int) -> tuple[int, ...]:
    """(src ^ dst, lower end's address, protocol, sport ^ dport, lower end's port), as Steering
    computes it on Tofino (p4src/include/control/steering.p4, under OG_FLOW_SLOTS)."""
    addr_mix = src ^ dst
    addr_gap = max(src - dst, 0)  # src |-| dst
    port_gap = max(sport - dport, 0)  # sport |-| dport
    fields = (addr_gap, addr_mix, port_gap)
    lower = next(
        (
            end
            for values, end in LOWER_END_ENTRIES
            if all(v is None or v == f for v, f in zip(values, fields, strict=True))
        ),
        LOWER_END_DEFAULT,
    )
    lo_addr, lo_port = (src, sport) if lower == "src" else (dst, dport)
    return addr_mix, lo_addr, proto, sport ^ dport, lo_port
