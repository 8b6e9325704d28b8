"""The policy's `ipsec` section: a good one loads into tunnels with strongSwan's proposal keywords,
and each kind of mistake is refused naming the file, the line and the field."""

from __future__ import annotations

import ipaddress
import shutil
from pathlib import Path

import pytest

from controller.policy import load_policy
from opengate.errors import ConfigError
from opengate.ipsec import (
    PskAuth,
    duration,
    tunnels_from_yaml,
    vici_connection,
    vici_key,
    vici_secret,
)
from opengate.target import repo_root
from opengate.yamlconf import load_yaml_text

EXAMPLES = repo_root() / "controller" / "examples"

IPSEC = """
ipsec:
  pool: vpn
  address: 198.51.100.2
  tunnels:
    - name: site-b
      local_subnets: [inside]
      remote_subnets: [10.0.2.0/24]
      peer: 198.51.100.3
      auth: {psk: "correct horse battery"}
      proposals:
        ike: {encryption: [aes-gcm-256], prf: [sha384], dh: [x25519]}
        esp: {encryption: [aes-gcm-128], dh: [x25519]}
      lifetimes: {ike: 4h, child: 30m}
      dpd: 5s
"""

VPN_POOL = """
  - name: vpn
    id: 2
    spms:
      - {name: ipsec1, port: 5, mac: "00:00:00:00:05:55"}
"""


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    folder = tmp_path / "policy"
    folder.mkdir()
    shutil.copy(EXAMPLES / "gateway.rules", folder / "gateway.rules")
    text = (EXAMPLES / "gateway.yaml").read_text()
    text = text.replace(
        "  - {port: 4, name: spm2, role: spm}\n",
        "  - {port: 4, name: spm2, role: spm}\n  - {port: 5, name: ipsec1, role: spm}\n",
    )
    marker = "\nchains:"
    text = text.replace(marker, VPN_POOL.rstrip("\n") + "\n" + marker, 1)
    path = folder / "gateway.yaml"
    path.write_text(text + IPSEC)
    return path


def _line_of(text: str, needle: str) -> int:
    """The line on which `needle` (which may span lines) starts."""
    index = text.find(needle)
    assert index >= 0, f"{needle!r} not in the policy"
    return text.count("\n", 0, index) + 1


def _break(path: Path, old: str, new: str) -> int:
    text = path.read_text()
    assert old in text, old
    line = _line_of(text, old)
    path.write_text(text.replace(old, new, 1))
    return line


def test_tunnel_loads_with_strongswan_keywords(policy_file: Path) -> None:
    policy = load_policy(policy_file)
    assert policy.ipsec is not None
    assert policy.ipsec.pool == "vpn"
    assert policy.ipsec.address == ipaddress.IPv4Address("198.51.100.2")
    (tunnel,) = policy.ipsec.tunnels
    assert tunnel.local_subnets == (ipaddress.IPv4Network("10.0.1.0/24"),)
    assert tunnel.remote_subnets == (ipaddress.IPv4Network("10.0.2.0/24"),)
    assert tunnel.ike.keywords() == "aes256gcm16-prfsha384-curve25519"
    assert tunnel.esp.keywords() == "aes128gcm16-curve25519"
    assert (tunnel.ike_lifetime, tunnel.child_lifetime, tunnel.dpd) == (14400, 1800, 5)
    assert isinstance(tunnel.auth, PskAuth)
    assert "correct horse" not in repr(tunnel)
    assert "correct horse" not in str(tunnel.summary())


def test_policy_without_ipsec_has_none() -> None:
    assert load_policy(EXAMPLES / "gateway.yaml").ipsec is None


def test_vici_messages_of_a_psk_tunnel(policy_file: Path) -> None:
    policy = load_policy(policy_file)
    assert policy.ipsec is not None
    tunnel = policy.ipsec.tunnels[0]
    conn = vici_connection(tunnel, policy.ipsec.address)["site-b"]
    assert conn["version"] == "2"
    assert conn["local_addrs"] == ["198.51.100.2"]
    assert conn["remote_addrs"] == ["198.51.100.3"]
    assert conn["proposals"] == ["aes256gcm16-prfsha384-curve25519"]
    assert conn["local-1"] == {"auth": "psk", "id": "198.51.100.2"}
    child = conn["children"]["site-b"]
    assert child["local_ts"] == ["10.0.1.0/24"]
    assert child["remote_ts"] == ["10.0.2.0/24"]
    assert child["esp_proposals"] == ["aes128gcm16-curve25519"]
    assert child["rekey_time"] == "1800"
    secret = vici_secret(tunnel, policy.ipsec.address)
    assert secret == {
        "id": "psk-site-b",
        "type": "IKE",
        "data": "correct horse battery",
        "owners": ["198.51.100.2", "198.51.100.3"],
    }


@pytest.mark.parametrize(
    ("old", "new", "field", "message"),
    [
        ("pool: vpn", "pool: vpm", "ipsec.pool", "no SPM pool named 'vpm'"),
        ("pool: vpn", "pool: main", "ipsec.pool", "inspects for chain 'ips-av'"),
        ("address: 198.51.100.2\n", "address: 10.9.9.9\n", "ipsec.address", "no outside port"),
        (
            "remote_subnets: [10.0.2.0/24]",
            "remote_subnets: [10.0.1.128/25]",
            "ipsec.tunnels[0].remote_subnets",
            "overlaps local subnet 10.0.1.0/24",
        ),
        (
            "remote_subnets: [10.0.2.0/24]",
            "remote_subnets: any",
            "ipsec.tunnels[0].remote_subnets",
            "must be given",
        ),
        (
            "peer: 198.51.100.3",
            "peer: 198.51.100.2",
            "ipsec.tunnels[0].peer",
            "the gateway's own IPsec address",
        ),
        ("peer: 198.51.100.3", "peer: 198.51.100", "ipsec.tunnels[0].peer", "not an IPv4"),
        (
            'auth: {psk: "correct horse battery"}',
            "auth: {psk: short}",
            "ipsec.tunnels[0].auth.psk",
            "needs 8 characters",
        ),
        (
            'auth: {psk: "correct horse battery"}',
            "auth: {}",
            "ipsec.tunnels[0].auth.psk",
            "exactly one of psk, psk_file or certificate",
        ),
        (
            'auth: {psk: "correct horse battery"}',
            "auth: {psk_file: nowhere.key}",
            "ipsec.tunnels[0].auth.psk_file",
            "cannot read",
        ),
        (
            "encryption: [aes-gcm-128]",
            "encryption: [aes-gcm-129]",
            "ipsec.tunnels[0].proposals.esp.encryption",
            "unknown encryption 'aes-gcm-129'",
        ),
        (
            "dh: [x25519]}\n      lifetimes",
            "dh: [x25518]}\n      lifetimes",
            "ipsec.tunnels[0].proposals.esp.dh",
            "unknown DH group 'x25518'",
        ),
        (
            "esp: {encryption: [aes-gcm-128], dh: [x25519]}",
            "esp: {encryption: [aes-gcm-128], integrity: [sha256]}",
            "ipsec.tunnels[0].proposals.esp.integrity",
            "AEAD cipher",
        ),
        (
            "esp: {encryption: [aes-gcm-128], dh: [x25519]}",
            "esp: {encryption: [aes-cbc-128]}",
            "ipsec.tunnels[0].proposals.esp.integrity",
            "needs an integrity algorithm",
        ),
        (
            "ike: {encryption: [aes-gcm-256], prf: [sha384], dh: [x25519]}",
            "ike: {encryption: [aes-gcm-256], prf: [sha384]}",
            "ipsec.tunnels[0].proposals.ike.dh",
            "missing",
        ),
        (
            "lifetimes: {ike: 4h, child: 30m}",
            "lifetimes: {ike: 4h, child: 30 minutes}",
            "ipsec.tunnels[0].lifetimes.child",
            "expected a duration",
        ),
        (
            "lifetimes: {ike: 4h, child: 30m}",
            "lifetimes: {ike: 4h, child: 5s}",
            "ipsec.tunnels[0].lifetimes.child",
            "too short",
        ),
        ("dpd: 5s", "dpd: 5s\n      ike_version: 1", "ipsec.tunnels[0].ike_version", "IKEv1"),
        ("dpd: 5s", "dpd: 5s\n      pfs: yes", "ipsec.tunnels[0].pfs", "unknown field"),
        ("name: site-b", "name: 2site", "ipsec.tunnels[0].name", "a letter"),
    ],
)
def test_mistakes_name_file_line_and_field(
    policy_file: Path, old: str, new: str, field: str, message: str
) -> None:
    line = _break(policy_file, old, new)
    with pytest.raises(ConfigError) as caught:
        load_policy(policy_file)
    error = caught.value
    assert error.path == str(policy_file)
    assert error.field == field
    assert message in error.message
    if field.endswith(("pfs", "ike_version")):
        line += 1  # the inserted line
    assert error.line == line, str(error)


def test_second_tunnel_must_not_overlap_the_first(policy_file: Path) -> None:
    text = policy_file.read_text()
    second = """    - name: site-c
      local_subnets: [inside]
      remote_subnets: [10.0.2.128/25]
      peer: 198.51.100.4
      auth: {psk: "another long secret"}
"""
    policy_file.write_text(text + second)
    with pytest.raises(ConfigError) as caught:
        load_policy(policy_file)
    assert caught.value.field == "ipsec.tunnels[1].remote_subnets"
    assert "overlaps 10.0.2.0/24 of tunnel 'site-b'" in caught.value.message
    assert caught.value.line == _line_of(policy_file.read_text(), "remote_subnets: [10.0.2.128")


def test_remote_subnet_may_not_be_an_inside_subnet(policy_file: Path) -> None:
    _break(policy_file, "local_subnets: [inside]", "local_subnets: [10.0.3.0/24]")
    line = _break(policy_file, "remote_subnets: [10.0.2.0/24]", "remote_subnets: [10.0.1.0/25]")
    with pytest.raises(ConfigError) as caught:
        load_policy(policy_file)
    assert caught.value.field == "ipsec.tunnels[0].remote_subnets"
    assert "inside subnet 10.0.1.0/24" in caught.value.message
    assert caught.value.line == line


def test_psk_file_is_read_relative_to_the_policy(policy_file: Path) -> None:
    (policy_file.parent / "site-b.psk").write_text("a secret from a file\n")
    _break(policy_file, 'auth: {psk: "correct horse battery"}', "auth: {psk_file: site-b.psk}")
    policy = load_policy(policy_file)
    assert policy.ipsec is not None
    auth = policy.ipsec.tunnels[0].auth
    assert isinstance(auth, PskAuth)
    assert auth.secret == "a secret from a file"


def test_certificate_auth_needs_its_files(tmp_path: Path) -> None:
    for name in ("me.pem", "me.key", "ca.pem"):
        (tmp_path / name).write_text(f"-----BEGIN {name}-----\n")
    text = """
- name: cert
  local_subnets: 10.1.0.0/16
  remote_subnets: 10.2.0.0/16
  peer: 192.0.2.2
  auth: {certificate: me.pem, private_key: me.key, ca: ca.pem, remote_id: "CN=peer"}
"""
    path = tmp_path / "tunnels.yaml"
    (tunnel,) = tunnels_from_yaml(load_yaml_text(text, path), str(path))
    conn = vici_connection(tunnel, ipaddress.IPv4Address("192.0.2.1"))["cert"]
    assert conn["local-1"] == {"auth": "pubkey", "certs": ["-----BEGIN me.pem-----\n"]}
    assert conn["remote-1"] == {
        "auth": "pubkey",
        "cacerts": ["-----BEGIN ca.pem-----\n"],
        "id": "CN=peer",
    }
    assert vici_key(tunnel) == {"type": "any", "data": "-----BEGIN me.key-----\n"}
    assert vici_secret(tunnel, ipaddress.IPv4Address("192.0.2.1")) is None
    with pytest.raises(ConfigError) as caught:
        tunnels_from_yaml(load_yaml_text(text.replace("ca.pem", "nope.pem"), path), str(path))
    assert caught.value.field == "tunnels[0].auth.ca"
    assert caught.value.line == 6


@pytest.mark.parametrize(
    ("text", "seconds"), [(30, 30), ("30s", 30), ("15m", 900), ("4h", 14400), ("1d", 86400)]
)
def test_durations(text: object, seconds: int) -> None:
    assert duration(text) == seconds
