"""The topology data file: the default one loads; broken ones fail naming file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from opengate.errors import ConfigError
from opengate.target import repo_root
from topo.model import load_topology, with_source_denied, without_inspection

GOOD = """\
name: t
policy: p.yaml
npms:
  - name: npm1
    ports:
      1: lan-a
      3: spm1
lans:
  - {name: lan-a, gateway_mac: "02:00:00:00:00:01"}
hosts:
  - {name: h1, role: inside, lan: lan-a, ip: 10.0.0.2/24, mac: "00:00:00:00:00:02",
     gateway: 10.0.0.1}
  - {name: spm1, role: spm, npm_port: 3, mac: "00:00:00:00:00:03"}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "topo.yaml"
    path.write_text(text)
    return path


def test_default_topology_loads() -> None:
    spec = load_topology(repo_root() / "topo" / "gateway.yaml", root=repo_root())
    assert [n.name for n in spec.npms] == ["npm1"]
    assert {h.name for h in spec.hosts_with_role("inside")} == {"h1", "h2", "h3"}
    assert spec.npms[0].ports == {1: "lan-in", 2: "lan-out", 3: "spm1", 4: "spm2"}


def test_small_topology_loads(tmp_path: Path) -> None:
    spec = load_topology(_write(tmp_path, GOOD), root=tmp_path)
    assert spec.host("h1").gateway is not None
    assert spec.policy == tmp_path / "p.yaml"


def test_bad_mac_names_file_line_and_field(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD.replace('mac: "00:00:00:00:00:02"', 'mac: "00:00:00:00:02"'))
    with pytest.raises(ConfigError) as caught:
        load_topology(path, root=tmp_path)
    assert str(caught.value) == f"{path}:11: hosts[0].mac: not a MAC address: '00:00:00:00:02'"


def test_unknown_lan_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD.replace("lan: lan-a, ip", "lan: lan-b, ip"))
    with pytest.raises(ConfigError, match=r"topo.yaml:11: hosts\[0\].lan: no LAN named 'lan-b'"):
        load_topology(path, root=tmp_path)


def test_unknown_field_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD.replace("name: t\n", "name: t\ncolour: blue\n"))
    with pytest.raises(ConfigError, match=r"topo.yaml:2: colour: unknown field"):
        load_topology(path, root=tmp_path)


def test_cpu_port_cannot_be_linked(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD.replace("      3: spm1", "      255: spm1"))
    with pytest.raises(ConfigError, match=r"port 255 outside 1\.\.254"):
        load_topology(path, root=tmp_path)


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD + "  - {name: x\n")
    with pytest.raises(ConfigError, match=r"topo.yaml:1[345]: not valid YAML"):
        load_topology(path, root=tmp_path)


def test_two_npm_topology_shares_the_spms_through_segments() -> None:
    spec = load_topology(repo_root() / "topo" / "gateway-2npm.yaml", root=repo_root())
    assert [(n.name, n.device_id) for n in spec.npms] == [("npm1", 1), ("npm2", 2)]
    for npm in spec.npms:
        assert spec.host_port(npm, spec.host("spm1")) == 3
        assert spec.host_port(npm, spec.host("spm2")) == 4


def test_spm_needs_exactly_one_of_npm_port_and_lan(tmp_path: Path) -> None:
    both = GOOD.replace("npm_port: 3,", "npm_port: 3, lan: lan-a,")
    with pytest.raises(ConfigError, match=r"hosts\[1\].npm_port: an SPM host has either"):
        load_topology(_write(tmp_path, both), root=tmp_path)
    neither = GOOD.replace("npm_port: 3, ", "")
    with pytest.raises(ConfigError, match=r"hosts\[1\].npm_port: an SPM host has either"):
        load_topology(_write(tmp_path, neither), root=tmp_path)


def test_two_npms_with_one_device_id_are_refused(tmp_path: Path) -> None:
    text = GOOD.replace(
        "npms:\n", "npms:\n  - name: npm0\n    device_id: 1\n    ports: {2: lan-a}\n"
    )
    with pytest.raises(ConfigError, match="NPM device_ids must differ"):
        load_topology(_write(tmp_path, text), root=tmp_path)


def test_without_inspection_removes_every_chain_and_keeps_the_rest() -> None:
    """The benchmarks' policy without inspection: no class keeps a chain, the rest is as it was;
    a policy with nothing to remove is refused."""
    text = (repo_root() / "controller" / "examples" / "gateway.yaml").read_text()
    original = yaml.safe_load(text)
    plain = yaml.safe_load(without_inspection(text))
    assert any("chain" in c for c in original["classes"]), "nothing to test"
    assert not any("chain" in c for c in plain["classes"])
    for c in original["classes"]:
        c.pop("chain", None)
    assert plain == original
    with pytest.raises(ConfigError, match="no class with a chain"):
        without_inspection(without_inspection(text))


def test_with_source_denied_puts_one_deny_first_and_keeps_the_rest() -> None:
    """The flood bench's policy that denies the flooding host's UDP: one rule first, the rest
    as it was; a policy without ACL rules, or an address that is not one, is refused."""
    text = (repo_root() / "controller" / "examples" / "gateway.yaml").read_text()
    original = yaml.safe_load(text)
    denied = yaml.safe_load(with_source_denied(text, "10.0.1.11", "udp"))
    first = denied["acl"]["rules"].pop(0)
    assert first == {
        "name": "deny-udp-from-10.0.1.11",
        "src": "10.0.1.11/32",
        "proto": "udp",
        "action": "deny",
    }
    assert denied == original
    with pytest.raises(ConfigError, match="no acl rules"):
        with_source_denied("name: p\n", "10.0.1.11", "udp")
    with pytest.raises(ValueError):
        with_source_denied(text, "h2", "udp")
