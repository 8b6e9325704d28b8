"""Kernel plumbing: nftables, queue rule, policy routing to the tag, sysctls; idempotent and
cleaned up after a crash."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from spm.nft import Plan, Plumbing, Runner, gateway4, route_table, tag_mark
from tests.helpers import skip_unless_root, skip_unless_tool
from tests.spm.spm_netns import netns, sh


def _plan(**kw: object) -> Plan:
    base: dict[str, object] = {
        "name": "unit",
        "interface": "ogt0",
        "tags": (1, 0x0203),
        "queue_num": 4,
        "fail_open": True,
        "backend": "auto",
    }
    base.update(kw)
    return Plan(**base)  # type: ignore[arg-type]


def test_nft_script_maps_each_tag_mac_to_its_mark_and_queues_only_tagged_packets() -> None:
    script = _plan().nft_script(with_queue=True)
    assert "02:4f:47:00:00:01 : 0x4f000001" in script
    assert "02:4f:47:00:02:03 : 0x4f000203" in script
    assert "meta mark & 0xff010000 == 0x4f000000 counter queue num 4 bypass" in script
    assert "notrack" in script
    # IPv6 has no send_redirects sysctl: the SPM's own ICMPv6 redirects out of it are dropped
    assert 'oifname "ogt0" icmpv6 type nd-redirect counter drop' in script
    assert "@blocked6" in script and "ip6 saddr . meta l4proto . th sport" in script
    fail_closed = _plan(fail_open=False).nft_script(with_queue=True)
    assert "queue num 4\n" in fail_closed
    assert "queue" not in _plan().nft_script(with_queue=False).replace("to_queue", "")


def test_xt_rules_mirror_the_queue_rule() -> None:
    rules = _plan(fail_open=False).xt_rules()
    assert ["-t", "mangle", "-A", "PREROUTING", "-i", "ogt0", "-j", "OG_SPM_unit"] in rules
    assert "--queue-bypass" not in rules[1]


def test_nft_script_with_an_av_queue_queues_again_at_forward_and_saves_its_blocks() -> None:
    plan = _plan(queue_count=2, av_queue=6)
    assert plan.all_queues == [4, 5, 6]
    script = plan.nft_script(with_queue=True)
    assert "counter queue num 4-5 bypass" in script
    to_av = script[script.index("chain to_av_queue") :]
    assert to_av.startswith(
        "chain to_av_queue {\n"
        "    type filter hook forward priority mangle; policy accept;\n"
        '    iifname "ogt0" meta mark & 0xff010000 == 0x4f000000 counter queue num 6 bypass\n'
    )
    save = script[script.index("chain save_av_block") :]
    assert "type filter hook forward priority mangle + 10;" in save
    assert "meta mark & 0x00020000 != 0 add @blocked4" in save
    assert "meta mark & 0x00010000 != 0 add @bypassed4" in save
    assert "meta mark & 0x00020000 != 0 counter drop" in save
    without = plan.nft_script(with_queue=False)  # backend xt: the queue is an iptables rule
    assert "to_av_queue" not in without and "chain save_av_block" in without
    assert "forward" not in _plan().nft_script(with_queue=True)


def test_xt_rules_with_an_av_queue_add_a_chain_jumped_from_forward() -> None:
    rules = _plan(queue_count=2, av_queue=6).xt_rules()
    assert rules[3:] == [
        ["-t", "mangle", "-N", "OG_SPMAV_unit"],
        [
            "-t",
            "mangle",
            "-A",
            "OG_SPMAV_unit",
            "-m",
            "mark",
            "--mark",
            "0x4f000000/0xff010000",
            "-j",
            "NFQUEUE",
            "--queue-num",
            "6",
            "--queue-bypass",
        ],
        ["-t", "mangle", "-A", "FORWARD", "-i", "ogt0", "-j", "OG_SPMAV_unit"],
    ]
    assert "--queue-bypass" not in _plan(fail_open=False, av_queue=6).xt_rules()[4]
    assert len(_plan().xt_rules()) == 3


@pytest.fixture
def spm_ns() -> Iterator[str]:
    skip_unless_root("plumbing in a network namespace")
    skip_unless_tool("nft", "the SPM installs nftables rules")
    with netns(f"ogspm-unit-{os.getpid() % 100000}") as name:
        sh("ip", "-n", name, "link", "add", "ogt0", "type", "veth", "peer", "name", "ogt1")
        sh("ip", "-n", name, "link", "set", "ogt0", "up")
        yield name


def _state(ns: str) -> dict[str, str]:
    def run(*argv: str) -> str:
        return sh("nsenter", f"--net=/run/netns/{ns}", *argv, check=False).stdout

    return {
        "nft": run("nft", "list", "ruleset"),
        "rules": run("ip", "rule", "show"),
        "routes": run("ip", "route", "show", "table", str(route_table(1))),
        "neigh": run("ip", "neigh", "show", "dev", "ogt0"),
        "fwd": run("sysctl", "-n", "net.ipv4.ip_forward").strip(),
        "rp": run("sysctl", "-n", "net.ipv4.conf.ogt0.rp_filter").strip(),
        "mangle": run("iptables-nft", "-t", "mangle", "-S"),
    }


def test_setup_is_idempotent_and_teardown_restores_everything(spm_ns: str, tmp_path: Path) -> None:
    sh("nsenter", f"--net=/run/netns/{spm_ns}", "sysctl", "-qw", "net.ipv4.conf.ogt0.rp_filter=2")
    before = _state(spm_ns)
    p = Plumbing(_plan(), Runner(netns=spm_ns), state_dir=tmp_path)
    p.setup()
    p.setup()  # again: leftovers of the first are replaced, nothing doubled
    up = _state(spm_ns)
    assert up["nft"].count("table inet opengate_spm_unit") == 1
    assert up["rules"].count(f"0x{tag_mark(1):08x}") == 1
    assert f"default via {gateway4(1)} dev ogt0" in up["routes"]
    assert "02:4f:47:00:00:01 PERMANENT" in up["neigh"]
    assert (up["fwd"], up["rp"]) == ("1", "0")
    state = json.loads(p.state_path.read_text())
    assert state["tags"] == [1, 0x0203]
    p.teardown()
    p.teardown()
    down = _state(spm_ns)
    assert "opengate_spm_unit" not in down["nft"]
    assert "0x4f00" not in down["rules"] and not down["routes"].strip()
    assert "OG_SPM" not in down["mangle"]
    assert (down["fwd"], down["rp"]) == (before["fwd"], "2")
    assert not p.state_path.exists()


def test_an_av_queue_is_installed_and_removed_after_a_crash(spm_ns: str, tmp_path: Path) -> None:
    old = Plumbing(_plan(backend="xt", av_queue=6), Runner(netns=spm_ns), state_dir=tmp_path)
    assert old.setup() == "xt"
    up = _state(spm_ns)
    assert "-A FORWARD -i ogt0 -j OG_SPMAV_unit" in up["mangle"]
    assert "--queue-num 6" in up["mangle"] and "chain save_av_block" in up["nft"]
    assert json.loads(old.state_path.read_text())["av_queue"] == 6
    # ... the process dies; the next run, without the AV, removes the AV's chain as well
    new = Plumbing(_plan(backend="xt"), Runner(netns=spm_ns), state_dir=tmp_path)
    assert new.cleanup_stale()
    assert "OG_SPM" not in _state(spm_ns)["mangle"]
    new.setup()
    assert "OG_SPMAV" not in _state(spm_ns)["mangle"]
    new.teardown()
    assert "OG_SPM" not in _state(spm_ns)["mangle"]


def test_leftovers_of_a_crashed_run_with_other_tags_are_removed(
    spm_ns: str, tmp_path: Path
) -> None:
    old = Plumbing(_plan(tags=(9,)), Runner(netns=spm_ns), state_dir=tmp_path)
    old.setup()  # ... and the process dies: no teardown
    new = Plumbing(_plan(tags=(1,)), Runner(netns=spm_ns), state_dir=tmp_path)
    assert new.cleanup_stale()
    new.setup()
    up = _state(spm_ns)
    assert f"0x{tag_mark(9):08x}" not in up["rules"] and f"0x{tag_mark(1):08x}" in up["rules"]
    new.teardown()
    assert "0x4f00" not in _state(spm_ns)["rules"]
