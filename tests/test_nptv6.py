"""NPTv6's arithmetic (opengate.nptv6) against RFC 6296: its worked example, checksum
neutrality and the round trip for any address and prefix pair."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from opengate import nptv6
from opengate.inet import internet_checksum


def test_the_rfc_example() -> None:
    """RFC 6296 appendix B: fd01:203:405:1::1234 behind fd01:203:405::/48 leaves as
    2001:db8:1:d550::1234 from 2001:db8:1::/48."""
    inside = ipaddress.IPv6Network("fd01:203:405::/48")
    outside = ipaddress.IPv6Network("2001:db8:1::/48")
    out = nptv6.translate(ipaddress.IPv6Address("fd01:203:405:1::1234"), inside, outside)
    assert out == ipaddress.IPv6Address("2001:db8:1:d550::1234")


def _network(value: int, length: int) -> ipaddress.IPv6Network:
    mask = ((1 << 128) - 1) ^ ((1 << (128 - length)) - 1)
    return ipaddress.IPv6Network((value & mask, length))


@given(
    st.integers(0, (1 << 128) - 1),
    st.integers(0, (1 << 128) - 1),
    st.integers(0, (1 << 128) - 1),
    st.integers(1, 48),
)
def test_translation_is_checksum_neutral_and_reversible(a: int, b: int, host: int, n: int) -> None:
    inside, outside = _network(a, n), _network(b, n)
    host_bits = host & ((1 << (128 - n)) - 1)
    if (int(inside.network_address) | host_bits) >> 64 & 0xFFFF == 0xFFFF:
        return  # the subnet word 0xffff is the one value the mapping folds (to 0)
    address = ipaddress.IPv6Address(int(inside.network_address) | host_bits)
    out = nptv6.translate(address, inside, outside)
    assert out in outside
    assert nptv6.word_sum(int(out)) % 0xFFFF == nptv6.word_sum(int(address)) % 0xFFFF
    pseudo = address.packed + b"\x00\x06" + b"payload!"
    assert internet_checksum(out.packed + pseudo[16:]) == internet_checksum(pseudo)
    assert nptv6.translate(out, outside, inside) == address


def test_mappings_are_refused_unless_of_one_length_and_at_most_48() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        nptv6.action_params(
            ipaddress.IPv6Network("fd00::/48"), ipaddress.IPv6Network("2001:db8::/32")
        )
    with pytest.raises(ValueError, match="longer than /48"):
        nptv6.action_params(
            ipaddress.IPv6Network("fd00::/56"), ipaddress.IPv6Network("2001:db8::/56")
        )
