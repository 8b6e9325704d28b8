"""NPTv6 (RFC 6296) in the policy: `nat.nptv6` mappings load, each mistake is reported with the
file, line, field and exact message, a mapping becomes its two entries (held to RFC 6296's worked
example by the data plane's arithmetic done here by hand), and on a real data plane an outbound
packet leaves with its source translated exactly as opengate.nptv6.translate says and its
checksum unchanged, and the reply finds the inside host."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from scapy.layers.inet import TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from controller.baseconfig import desired_base
from controller.policy import Policy, load_policy
from opengate import nptv6
from opengate import p4constants as pc
from opengate.entries import Exact, TableEntry, Ternary
from opengate.errors import ConfigError
from tests.controller.flows import GW_IN_MAC, GW_OUT_MAC
from tests.controller.real_switch import H1_MAC, OUT1_MAC, Lab

POLICY = """\
version: 1
ports:
  - {port: 1, role: inside, mac: "02:00:00:00:00:01", addresses: ["fd01:203:405:1::1/64"]}
  - {port: 2, role: outside, mac: "02:00:00:00:00:02", addresses: ["2001:db8:2::1/64"]}
  - {port: 5, role: outside, mac: "02:00:00:00:00:05", addresses: ["2001:db8:5::1/64"]}
neighbours:
  - {address: "2001:db8:2::20", mac: "00:00:00:00:02:20"}
nat:
  nptv6:
    - {port: 2, inside: "fd01:203:405::/48", outside: "2001:db8:1::/48"}
"""
MAPPING = '    - {port: 2, inside: "fd01:203:405::/48", outside: "2001:db8:1::/48"}\n'


def _load(tmp_path: Path, text: str = POLICY) -> Policy:
    path = tmp_path / "npt.yaml"
    path.write_text(text)
    return load_policy(path)


def test_a_mapping_loads(tmp_path: Path) -> None:
    (mapping,) = _load(tmp_path).nat.nptv6
    assert (mapping.port, str(mapping.inside), str(mapping.outside), mapping.line) == (
        2,
        "fd01:203:405::/48",
        "2001:db8:1::/48",
        10,
    )


@pytest.mark.parametrize(
    ("line", "field", "message"),
    [
        (
            '    - {port: 1, inside: "fd01:203:405::/48", outside: "2001:db8:1::/48"}\n',
            "nat.nptv6[0].port",
            "port 1 is not an outside port",
        ),
        (
            '    - {port: 9, inside: "fd01:203:405::/48", outside: "2001:db8:1::/48"}\n',
            "nat.nptv6[0].port",
            "port 9 is not an outside port",
        ),
        (
            '    - {port: 2, inside: "fd01:203:405::/48", outside: "2001:db8:1::/56"}\n',
            "nat.nptv6[0].outside",
            "fd01:203:405::/48 and 2001:db8:1::/56 differ in length: NPTv6 maps a prefix onto "
            "one as long",
        ),
        (
            '    - {port: 2, inside: "fd01:203:405::/56", outside: "2001:db8:1::/56"}\n',
            "nat.nptv6[0].inside",
            "fd01:203:405::/56 is longer than /48: the gateway maps /48 or shorter prefixes (the "
            "checksum adjustment goes in the subnet identifier)",
        ),
        (
            '    - {port: 2, inside: "fd01:203:405::1/48", outside: "2001:db8:1::/48"}\n',
            "nat.nptv6[0].inside",
            "not an IPv6 prefix (host bits must be zero): fd01:203:405::1/48 has host bits set",
        ),
        (
            '    - {port: 2, inside: "10.0.0.0/8", outside: "2001:db8:1::/48"}\n',
            "nat.nptv6[0].inside",
            "10.0.0.0/8 is not an IPv6 prefix",
        ),
        (
            '    - {port: 2, inside: "::/0", outside: "::/0"}\n',
            "nat.nptv6[0].inside",
            "::/0 would map every address",
        ),
        (
            '    - {port: 2, inside: "2001:db8::/32", outside: "2001:db8::/32"}\n',
            "nat.nptv6[0].outside",
            "2001:db8::/32 is the inside prefix: it maps onto another",
        ),
        (
            '    - {port: 2, inside: "fd01:203:405::/48", outside: "2001:db8:2::/48"}\n',
            "nat.nptv6[0].outside",
            "2001:db8:2::/48 holds the gateway's own address 2001:db8:2::1",
        ),
        (
            MAPPING + '    - {port: 2, inside: "fd01:203::/32", outside: "2001:db9::/32"}\n',
            "nat.nptv6[1].inside",
            "fd01:203::/32 overlaps fd01:203:405::/48 of the mapping on line 10",
        ),
        (
            MAPPING + '    - {port: 2, inside: "fd02::/48", outside: "2001:db8:1::/48"}\n',
            "nat.nptv6[1].outside",
            "2001:db8:1::/48 overlaps 2001:db8:1::/48 of the mapping on line 10",
        ),
        (
            '    - {port: 2, inside: "fd01:203:405::/48", outside: "2001:db8:1::/48", x: 1}\n',
            "nat.nptv6[0].x",
            None,
        ),
        (
            '    - {port: 2, outside: "2001:db8:1::/48"}\n',
            "nat.nptv6[0].inside",
            "missing",
        ),
    ],
)
def test_mapping_mistakes_name_file_line_and_field(
    tmp_path: Path, line: str, field: str, message: str | None
) -> None:
    text = POLICY.replace(MAPPING, line)
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text)
    error = caught.value
    last = line.rstrip("\n").splitlines()[-1]
    wanted_line = next(n for n, row in enumerate(text.splitlines(), 1) if row == last)
    assert (error.path, error.line, error.field) == (str(tmp_path / "npt.yaml"), wanted_line, field)
    if message is not None:
        assert error.message == message, str(error)
    assert str(error).startswith(f"{tmp_path / 'npt.yaml'}:{wanted_line}: {field}: ")


def test_the_mapping_is_refused_on_an_ipv4_only_field_and_a_second_port_is_fine(
    tmp_path: Path,
) -> None:
    """Two ports may map the same inside prefix (each its own outside prefix)."""
    text = POLICY.replace(
        MAPPING,
        MAPPING + '    - {port: 5, inside: "fd01:203:405::/48", outside: "2001:db9::/48"}\n',
    )
    assert [m.port for m in _load(tmp_path, text).nat.nptv6] == [2, 5]


def _rewrite(half: int, entry: TableEntry) -> int:
    """npt_rewrite_src/dst on an address's high half, as p4src/include/control/ipv6.p4 does it
    (not opengate.nptv6's code): the prefix's bits replaced, the last word adjusted in one's
    complement, 0xffff folded to 0."""
    params = entry.params_dict
    hi = (half & ~params["mask"] & ((1 << 64) - 1)) | params["prefix"]
    total = (hi & 0xFFFF) + params["adjustment"]
    word = (total & 0xFFFF) + (total >> 16)
    if word == 0xFFFF:
        word = 0
    return (hi & ~0xFFFF) | word


def test_a_mapping_is_two_entries_that_give_rfc_6296s_example(tmp_path: Path) -> None:
    """RFC 6296 section 3.5: fd01:203:405:1::1234 inside fd01:203:405::/48, mapped onto
    2001:db8:1::/48, is 2001:db8:1:d550::1234 outside."""
    base = desired_base(_load(tmp_path), tag_base=0x100, weights={})
    (out,) = [e for e in base.entries.values() if e.table == pc.T_NPTV6_OUTBOUND]
    (back,) = [e for e in base.entries.values() if e.table == pc.T_NPTV6_INBOUND]
    assert (out.action, out.priority) == (pc.A_NPT_REWRITE_SRC, 48)
    assert out.match_dict == {
        "egress_port": Exact(2),
        "ipv6_src_hi": Ternary(0xFD01_0203_0405_0000, 0xFFFF_FFFF_FFFF_0000),
    }
    assert (back.action, back.priority) == (pc.A_NPT_REWRITE_DST, 48)
    assert back.match_dict == {
        "ingress_port": Exact(2),
        "ipv6_dst_hi": Ternary(0x2001_0DB8_0001_0000, 0xFFFF_FFFF_FFFF_0000),
    }
    inside = int(ipaddress.IPv6Address("fd01:203:405:1::1234"))
    outside = int(ipaddress.IPv6Address("2001:db8:1:d550::1234"))
    assert _rewrite(inside >> 64, out) == outside >> 64
    assert _rewrite(outside >> 64, back) == inside >> 64
    # a build without the NPTv6 tables gets none
    without = desired_base(_load(tmp_path), 0x100, {}, available=frozenset({pc.T_ROUTING_V6}))
    assert not [e for e in without.entries.values() if e.table.startswith("nptv6")]


# -- on a real data plane ------------------------------------------------------------------------

H1_6, OUT1_6 = "2001:db8:1::10", "2001:db8:2::20"
INSIDE, OUTSIDE = (
    ipaddress.IPv6Network("2001:db8:1::/48"),
    ipaddress.IPv6Network("2001:db8:ff01::/48"),
)
WITH_NPTV6 = (
    (
        "  port_forwards:\n",
        f'  nptv6:\n    - {{port: 2, inside: "{INSIDE}", outside: "{OUTSIDE}"}}\n'
        "  port_forwards:\n",
    ),
)


@pytest.mark.needs_root
@pytest.mark.slow
@pytest.mark.parametrize("real_lab", [WITH_NPTV6], indirect=True)
def test_an_outbound_packet_leaves_translated_and_its_reply_comes_back(real_lab: Lab) -> None:
    """h1's SYN leaves port 2 from h1's address as opengate.nptv6.translate maps it, with the
    TCP checksum it was sent with (checksum-neutral: scapy finds it right for the new address);
    out1's SYN-ACK to that address reaches h1 at its inside address, checksum unchanged too. The
    session is of the inside address."""
    syn = bytes(
        Ether(src=H1_MAC, dst=GW_IN_MAC)
        / IPv6(src=H1_6, dst=OUT1_6, hlim=64)
        / TCP(sport=40050, dport=22, flags="S", seq=1000)
    )
    sent_checksum = Ether(syn)[TCP].chksum
    real_lab.wires[1].send(syn)
    seen = real_lab.wires[2].expect(lambda f: f.haslayer(TCP) and f[TCP].sport == 40050)
    outside = nptv6.translate(ipaddress.IPv6Address(H1_6), INSIDE, OUTSIDE)
    assert str(outside) != H1_6
    assert (seen[IPv6].src, seen[IPv6].dst, seen[IPv6].hlim) == (str(outside), OUT1_6, 63)
    assert (seen[Ether].src, seen[Ether].dst) == (GW_OUT_MAC, OUT1_MAC)
    assert seen[TCP].chksum == sent_checksum
    recomputed = Ether(bytes(seen))
    del recomputed[TCP].chksum
    assert Ether(bytes(recomputed))[TCP].chksum == sent_checksum, "valid for the new source"
    reply = bytes(
        Ether(src=OUT1_MAC, dst=GW_OUT_MAC)
        / IPv6(src=OUT1_6, dst=str(outside), hlim=64)
        / TCP(sport=22, dport=40050, flags="SA", seq=5000, ack=1001)
    )
    reply_checksum = Ether(reply)[TCP].chksum
    real_lab.wires[2].send(reply)
    back = real_lab.wires[1].expect(lambda f: f.haslayer(TCP) and f[TCP].dport == 40050)
    assert (back[IPv6].src, back[IPv6].dst) == (OUT1_6, H1_6)
    assert back[TCP].chksum == reply_checksum
    real_lab.controller.db_writer.flush()
    (row,) = real_lab.controller.db.sessions()
    assert (row["src6"], row["dst6"]) == (H1_6, OUT1_6)
