"""Real Snort 3 inline in the SPM (`ips.engine: snort`) with the AV after it: `python -m spm run`
starts Snort on the SPM's NFQUEUEs (DAQ nfq) and the built-in daemon, IPS off, as the AV on the
queue after them at the forward hook, in its own network namespace, with the same fake NPM and
CPM as the built-in engine's end-to-end test, and the same checks: clean traffic comes back to its
tag, a request that fires a community rule is dropped by Snort and its alert reaches the EVE log
and the CPM, an EICAR download is dropped by the AV and alerted. Skipped where Snort 3 is not
installed (`snort` on PATH, $SNORT_PREFIX or /opt/snort)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from spm.ips.snort import snort_binary
from tests.spm.spm_netns import sh
from tests.spm.test_spm_e2e import (
    Rig,
    check_clean_http_comes_back,
    check_eicar_download_dropped_and_alerted,
    check_rule_match_dropped_and_alerted,
    spm_rig,
)

pytestmark = [pytest.mark.needs_root]


@pytest.fixture(scope="module")
def snort_rig(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Rig]:
    if snort_binary() is None:
        pytest.skip("Snort 3 is not installed (no snort on PATH, $SNORT_PREFIX or /opt/snort)")
    clamd_socket = request.getfixturevalue("clamd_socket")  # after Snort: skips name Snort first
    tmp = tmp_path_factory.mktemp("spm-snort")
    av = f"av: {{enabled: yes, clamd_socket: {clamd_socket}, on_clamd_down: drop}}\n"
    with spm_rig(tmp, ips_extra="engine: snort, ", av=av) as rig:
        yield rig


def _in_ns(rig: Rig, *argv: str) -> str:
    return sh("nsenter", f"--net=/run/netns/{rig.spm_ns}", *argv, check=False).stdout


def _name(rig: Rig) -> str:
    return rig.config.read_text().split("\n")[0].split(": ")[1]


def test_snort_and_the_av_are_up_before_the_start_record(snort_rig: Rig) -> None:
    [start] = snort_rig.eve_events("spm")
    assert start["spm_event"] == "start" and start["engine"] == "snort" and start["av"]
    bound = _in_ns(snort_rig, "cat", "/proc/net/netfilter/nfnetlink_queue").split("\n")
    assert sorted(int(line.split()[0]) for line in bound if line.strip()) == [3, 4, 5]


def test_snort_inline_returns_clean_http_to_its_tag(snort_rig: Rig) -> None:
    check_clean_http_comes_back(snort_rig)


def test_snort_inline_drops_a_rule_match_and_alerts(snort_rig: Rig) -> None:
    check_rule_match_dropped_and_alerted(snort_rig)
    sources = {
        e["alert"]["source"]
        for e in snort_rig.eve_events("alert")
        if e["alert"]["signature_id"] == 21327
    }
    assert sources == {"snort"}


def test_the_av_after_snort_drops_an_eicar_download_and_blocks_the_flow(snort_rig: Rig) -> None:
    flow = check_eicar_download_dropped_and_alerted(snort_rig)
    # the AV's block reaches the kernel's drop set at the forward hook (both directions)
    blocked = _in_ns(
        snort_rig, "nft", "list", "set", "inet", f"opengate_spm_{_name(snort_rig)}", "blocked4"
    )
    assert f"{flow.server} . tcp . 80 . {flow.client} . {flow.cport}" in blocked
    assert f"{flow.client} . tcp . {flow.cport} . {flow.server} . 80" in blocked


def test_sigterm_stops_snort_and_the_av_and_removes_the_plumbing(snort_rig: Rig) -> None:
    pid = snort_rig.proc.pid
    children = [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    assert len(children) == 2  # snort and the AV's daemon
    assert "OG_SPMAV_" in _in_ns(snort_rig, "iptables-nft", "-t", "mangle", "-S", "FORWARD")
    snort_rig.proc.send_signal(signal.SIGTERM)
    assert snort_rig.proc.wait(30) == 0
    assert not any(Path(f"/proc/{child}").exists() for child in children)
    assert "0x4f00" not in _in_ns(snort_rig, "ip", "rule", "show")
    assert "OG_SPM" not in _in_ns(snort_rig, "iptables-nft", "-t", "mangle", "-S")
    assert f"opengate_spm_{_name(snort_rig)}" not in _in_ns(snort_rig, "nft", "list", "tables")
