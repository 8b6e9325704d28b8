"""Rule sets as Python integers used as bitsets (bit i = the i-th match term, in match order)."""

from __future__ import annotations

from collections.abc import Iterator

# Sets of at most this many bits are walked bit by bit (cheaper than text for wide sets).
SPARSE = 8


def iter_bits(value: int) -> Iterator[int]:
    """Positions of the set bits, lowest first."""
    if value.bit_count() <= SPARSE:
        # a few bits of a wide set: peel them off rather than write the whole set out as text
        while value:
            low = value & -value
            yield low.bit_length() - 1
            value ^= low
        return
    text = bin(value)[:1:-1]  # least significant bit first, without '0b'
    pos = text.find("1")
    while pos >= 0:
        yield pos
        pos = text.find("1", pos + 1)


def lowest_bit(value: int) -> int:
    """Position of the lowest set bit (value must be non-zero): the first matching term."""
    return (value & -value).bit_length() - 1


def truncate(value: int, stoppers: int) -> int:
    """Drop every term after the first one in `stoppers`.

    `stoppers` are the terms that match whatever the fields not yet looked at hold; once such a
    term is in the set, no later term can be the first match, so keeping them only splits
    equivalence classes (and grows the cross products) for nothing.
    """
    hit = value & stoppers
    if not hit:
        return value
    return value & (((hit & -hit) << 1) - 1)
