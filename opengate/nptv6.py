"""NPTv6 (RFC 6296): stateless, checksum-neutral IPv6 prefix translation.

The NPM rewrites the prefix and adds an adjustment to the 16-bit word after a /48 (bits 79..64
of the address); this module gives the CPM that adjustment and the action parameters, and the
tests a reference translation to hold the data plane to. Only prefixes of /48 or shorter are
mapped (RFC 6296 section 3.6: the adjusted word is then the subnet identifier, which the prefix
never covers; longer prefixes would have to adjust the interface identifier).
"""

from __future__ import annotations

import ipaddress

HALF = (1 << 64) - 1
MAX_PREFIX = 48


def ones_add(a: int, b: int) -> int:
    """16-bit one's complement addition (end-around carry)."""
    total = a + b
    return (total & 0xFFFF) + (total >> 16)


def word_sum(value: int) -> int:
    """The one's complement sum of the eight 16-bit words of a 128-bit value."""
    total = 0
    for shift in range(0, 128, 16):
        total = ones_add(total, (value >> shift) & 0xFFFF)
    return total


def check_pair(inside: ipaddress.IPv6Network, outside: ipaddress.IPv6Network) -> None:
    """A mapping needs two prefixes of one length, /48 or shorter."""
    if inside.prefixlen != outside.prefixlen:
        raise ValueError(
            f"{inside} and {outside} differ in length: NPTv6 maps a prefix onto one as long"
        )
    if inside.prefixlen > MAX_PREFIX:
        raise ValueError(
            f"{inside} is longer than /{MAX_PREFIX}: the gateway maps /{MAX_PREFIX} or shorter "
            "prefixes (the checksum adjustment goes in the subnet identifier)"
        )


def adjustment(source: ipaddress.IPv6Network, target: ipaddress.IPv6Network) -> int:
    """What to add to the subnet word when `source`'s prefix is replaced by `target`'s, so the
    address's one's complement sum is unchanged: sum(source) - sum(target)."""
    return ones_add(
        word_sum(int(source.network_address)), ~word_sum(int(target.network_address)) & 0xFFFF
    )


def action_params(source: ipaddress.IPv6Network, target: ipaddress.IPv6Network) -> dict[str, int]:
    """npt_rewrite_src/dst's parameters for translating `source` into `target`."""
    check_pair(source, target)
    return {
        "prefix": int(target.network_address) >> 64,
        "mask": int(target.netmask) >> 64,
        "adjustment": adjustment(source, target),
    }


def translate(
    address: ipaddress.IPv6Address, source: ipaddress.IPv6Network, target: ipaddress.IPv6Network
) -> ipaddress.IPv6Address:
    """The reference translation (RFC 6296 section 3.2 and 3.4): `address`, in `source`, with
    `target`'s prefix and the subnet word adjusted; 0xffff becomes 0."""
    check_pair(source, target)
    value = int(address)
    mask = int(target.netmask)
    value = (value & ~mask & ((1 << 128) - 1)) | int(target.network_address)
    word = (value >> 64) & 0xFFFF
    word = ones_add(word, adjustment(source, target))
    if word == 0xFFFF:
        word = 0
    value = (value & ~(0xFFFF << 64)) | (word << 64)
    return ipaddress.IPv6Address(value)
