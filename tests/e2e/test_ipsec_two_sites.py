"""End to end across the two-site VPN (topo/gateway-2site.yaml): site A's host fetches a page and
a file from site B's host through the IPsec tunnel, and the outside LAN carries only ESP for it
(no inner address, no cleartext) while traffic outside the SPD stays clear; the state shows in
`opengate ipsec`, the API and Prometheus; a rekey during a transfer loses nothing; a wrong PSK
or a mismatched ESP proposal is explained; the decrypted flows are inspected at site B; killing
the active IPsec SPM moves the tunnel to the standby one within seconds. Real charon, real
Mininet hosts, either switch."""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, cast

import pytest
import vici

from opengate.target import repo_root
from tests.helpers import skip_unless_tool, wait_for
from tests.ipsec.netns import tcpdump
from topo.net import GatewayNetwork

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

HB = "10.0.2.10"
OUT1 = "198.51.100.20"
MARKER = b"OPENGATE-IPSEC-CLEARTEXT-MARKER-"
LANS = (ipaddress.IPv4Network("10.0.1.0/24"), ipaddress.IPv4Network("10.0.2.0/24"))
VPN = {"198.51.100.2", "198.51.100.12"}


def _tunnel(net: GatewayNetwork, npm: str) -> dict[str, Any]:
    view: dict[str, Any] = net.api("GET", "/api/v1/ipsec", npm=npm)
    return view


def _up(net: GatewayNetwork, timeout: float = 60.0) -> None:
    """Both ends report the tunnel up, and a ping crosses it."""
    wait_for(
        "the tunnel up at both sites",
        lambda: all(_tunnel(net, n)["tunnels"][0]["state"] == "up" for n in ("npma", "npmb")),
        timeout,
    )
    wait_for(
        "a ping from site A to site B",
        lambda: net.run("ha", f"ping -c 1 -W 1 {HB}").returncode == 0,
        30.0,
    )


@pytest.fixture
def vpn(two_sites: GatewayNetwork) -> GatewayNetwork:
    _up(two_sites)
    return two_sites


def capture(interface: str, path: Path) -> contextlib.AbstractContextManager[Path]:
    """tcpdump on a root-namespace interface (an NPM's port), ready before the body runs."""
    skip_unless_tool("tcpdump", "the outside LAN is captured with tcpdump")
    return tcpdump((), interface, path)


def _wire(path: Path) -> dict[str, int]:
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.utils import rdpcap

    counts = {"vpn_esp": 0, "vpn_ike": 0, "vpn_other": 0, "inner": 0, "marker": 0, "clear_http": 0}
    for packet in rdpcap(str(path)):
        if MARKER in bytes(packet):
            counts["marker"] += 1
        if IP not in packet:
            continue
        ip = packet[IP]
        if any(ipaddress.IPv4Address(a) in n for a in (ip.src, ip.dst) for n in LANS):
            counts["inner"] += 1
        if {ip.src, ip.dst} == VPN:
            if ip.proto == 50:
                counts["vpn_esp"] += 1
            elif UDP in packet and 4500 in (ip.sport, ip.dport):
                head = bytes(packet[UDP].payload)[:4]
                counts["vpn_ike" if head == b"\0\0\0\0" else "vpn_esp"] += 1
            elif UDP in packet and 500 in (ip.sport, ip.dport):
                counts["vpn_ike"] += 1
            else:
                counts["vpn_other"] += 1
        elif TCP in packet and b"GET /whoami" in bytes(packet[TCP].payload):
            counts["clear_http"] += 1
    return counts


def _file_on_b(net: GatewayNetwork, size: int) -> tuple[str, str]:
    """A file on site B's web server with the marker all through it: (URL path, sha256)."""
    rng = random.Random(20)
    body = b"".join(MARKER + rng.randbytes(992) for _ in range(size // 1024))
    path = net.run_dir / "www" / "hb" / "transfer.bin"
    path.write_bytes(body)
    return "/transfer.bin", hashlib.sha256(body).hexdigest()


def _fetch(net: GatewayNetwork, url_path: str, timeout: float = 120, rate: str = "") -> str:
    limit = f"--limit-rate {rate} " if rate else ""
    result = net.run(
        "ha",
        f"curl -sS {limit}--max-time {timeout:g} http://{HB}{url_path} | sha256sum",
        timeout + 10,
    )
    assert result.returncode == 0, result.output
    return result.output.split()[0]


def test_site_a_fetches_a_page_and_a_file_and_the_wire_carries_only_esp(
    vpn: GatewayNetwork, tmp_path: Path
) -> None:
    url, digest = _file_on_b(vpn, 2 << 20)
    pcap = tmp_path / "wan.pcap"
    with capture("npma-eth2", pcap):
        page = vpn.run("ha", f"curl -sS --max-time 20 http://{HB}/index.html")
        assert "OpenGate test server hb" in page.output, page.output
        assert _fetch(vpn, url) == digest
        # Outside the SPD: to out1, masqueraded and in the clear.
        seen = vpn.run("ha", f"curl -sS --max-time 20 http://{OUT1}/whoami")
        assert seen.output.strip() == "198.51.100.1", seen.output
    counts = _wire(pcap)
    assert counts["vpn_esp"] > 1000, counts
    assert counts["inner"] == 0, counts
    assert counts["marker"] == 0, counts
    assert counts["vpn_other"] == 0, counts
    assert counts["clear_http"] >= 1, counts  # the request outside the SPD, readable
    tunnel = wait_for(
        "the transfer in the tunnel's counters",
        lambda: (t := _tunnel(vpn, "npmb")["tunnels"][0])["bytes_out"] >= 2 << 20 and t,
    )
    assert tunnel["packets_in"] > 0


def test_state_in_opengate_ipsec_and_prometheus(vpn: GatewayNetwork) -> None:
    cpm = vpn.cpm_for("npma")
    command = [sys.executable, "-m", "opengate.cli", "ipsec", "--sas"]
    command += [
        "--api",
        f"http://{cpm.api_address}",
        "--token-file",
        str(vpn.run_dir / "api-token"),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    assert "IPsec address 198.51.100.2, pool vpn: ipseca1 (active" in result.stdout
    line = next(x for x in result.stdout.splitlines() if x.startswith("site-b "))
    assert line.split()[1:5] == ["198.51.100.12", "10.0.2.0/24", "up", "ipseca1"]
    assert "AES_GCM_16-256/PRF_HMAC_SHA2_384/CURVE_25519" in result.stdout
    assert "CHILD SA" in result.stdout and "AES_GCM_16-128" in result.stdout
    metrics = httpx_get(vpn, "/metrics")
    assert 'opengate_ipsec_tunnel_up{tunnel="site-b"} 1.0' in metrics


def httpx_get(net: GatewayNetwork, path: str) -> str:
    import httpx

    token = (net.run_dir / "api-token").read_text().strip()
    response = httpx.get(
        f"http://{net.cpm_for('npma').api_address}{path}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    response.raise_for_status()
    return response.text


def _rekey(net: GatewayNetwork, spm: str, tunnel: str) -> None:
    """Rekey the tunnel's CHILD SA through the SPM's own charon (its VICI socket)."""
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(10)
    try:
        sock.connect(str(net.run_dir / spm / "charon" / "charon.vici"))
        vici.Session(sock).rekey({"child": tunnel})
    finally:
        sock.close()


def _child_spis(net: GatewayNetwork) -> set[str]:
    sas = _tunnel(net, "npma")["tunnels"][0]["sas"]
    return {c["spi_out"] for sa in sas for c in sa["children"] if c["state"] == "INSTALLED"}


def _new_spis(net: GatewayNetwork, old: set[str]) -> set[str]:
    """The installed CHILD SAs' outbound SPIs when none of them is in `old` (else none)."""
    spis = _child_spis(net)
    return spis if not spis & old else set()


def test_rekey_during_a_transfer_loses_nothing(vpn: GatewayNetwork) -> None:
    # Paced (1 MiB/s for 8 s), so that the switch's queues never overflow: a lost ping is then
    # the rekey's doing, not congestion's.
    url, digest = _file_on_b(vpn, 8 << 20)
    before = wait_for("the CHILD SA's SPI", lambda: _child_spis(vpn))
    results: dict[str, Any] = {}

    def ping() -> None:
        results["ping"] = vpn.run("ha", f"ping -q -c 150 -i 0.05 -W 2 {HB}", 60).output

    def fetch() -> None:
        results["fetch"] = _fetch(vpn, url, rate="1M")

    threads = [threading.Thread(target=ping), threading.Thread(target=fetch)]
    for thread in threads:
        thread.start()
    sent = _tunnel(vpn, "npma")["tunnels"][0]["packets_out"]
    wait_for(
        "the transfer and the pings under way in the tunnel",
        lambda: _tunnel(vpn, "npma")["tunnels"][0]["packets_out"] > sent + 200,
    )
    # From each end in turn, the second once the first is done: asked at once, the two rekeys
    # collide (RFC 7296 2.8.1), and the peers then delete the redundant CHILD SA, where a packet
    # already sent on it may be lost, which is charon's business, not the gateway's.
    _rekey(vpn, "ipseca1", "site-b")
    middle = wait_for(
        "site A's rekey done: new CHILD SAs, the old ones gone", lambda: _new_spis(vpn, before)
    )
    _rekey(vpn, "ipsecb1", "site-a")
    for thread in threads:
        thread.join(timeout=150)
    assert " 0% packet loss" in results["ping"], results["ping"]
    assert results["fetch"] == digest
    after = wait_for(
        "site B's rekey done: new CHILD SAs again", lambda: _new_spis(vpn, before | middle)
    )
    assert after
    assert _tunnel(vpn, "npma")["tunnels"][0]["rekeys"] >= 1


def _apply(net: GatewayNetwork, npm: str, text: str) -> None:
    policy = repo_root() / "controller" / "examples" / "site-b.yaml"
    net.api("POST", "/api/v1/policy/apply", npm=npm, json={"path": str(policy), "text": text})


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        (
            "auth: {psk_file: site-ab.psk}",
            'auth: {psk: "not the shared secret"}',
            "authentication failed",
        ),
        (
            "esp: {encryption: [aes-gcm-128], dh: [x25519]}",
            "esp: {encryption: [aes-gcm-256], dh: [ecp384]}",
            "no common ESP proposal",
        ),
    ],
)
def test_a_broken_peer_is_explained_at_both_sites(
    vpn: GatewayNetwork, old: str, new: str, reason: str
) -> None:
    good = (repo_root() / "controller" / "examples" / "site-b.yaml").read_text()
    assert old in good
    _apply(vpn, "npmb", good.replace(old, new))
    try:
        # wait_for returns the lambda's truthy result: the error text `e`
        error_a = cast(
            str,
            wait_for(
                f"site A's diagnosis ({reason})",
                lambda: (
                    (e := _tunnel(vpn, "npma")["tunnels"][0]["last_error"]) and reason in e and e
                ),
                60.0,
            ),
        )
        wait_for(
            f"site B's diagnosis ({reason})",
            lambda: reason in (_tunnel(vpn, "npmb")["tunnels"][0]["last_error"] or ""),
            60.0,
        )
        assert _tunnel(vpn, "npma")["tunnels"][0]["state"] != "up"
        assert vpn.run("ha", f"ping -c 1 -W 1 {HB}").returncode != 0
        log = (vpn.run_dir / "ipseca1" / "ipsec.log").read_text()
        assert error_a in log  # the SPM's log says it too
    finally:
        _apply(vpn, "npmb", good)
    _up(vpn)


def test_inner_flows_are_inspected_at_site_b(vpn: GatewayNetwork) -> None:
    """Decrypted, site A's web flow to site B is a flow like any at site B: its class sends it
    to the inspection SPM spmb, whose ClamAV stops the EICAR test file (a clean page passes)."""

    def av_alerts() -> int:
        alerts = vpn.api("GET", "/api/v1/alerts", npm="npmb")["alerts"]
        return sum(1 for a in alerts if str(a.get("msg", "")).startswith("AV:"))

    before = av_alerts()
    page = vpn.run("ha", f"curl -sS --max-time 20 http://{HB}/index.html")
    assert "OpenGate test server hb" in page.output, page.output
    blocked = vpn.run("ha", f"curl -sS --max-time 8 http://{HB}/eicar.com -o /dev/null")
    assert blocked.returncode != 0, "the EICAR file crossed the tunnel uninspected"
    wait_for("site B's AV alert for the EICAR download", lambda: av_alerts() > before)
    sessions = vpn.api("GET", "/api/v1/sessions", npm="npmb", params={"limit": 1000})
    inspected = [s for s in sessions["sessions"] if s["src"] == "10.0.1.10" and s["dport"] == 80]
    assert inspected and all(s["spm_port"] == 4 for s in inspected), inspected


def test_killing_the_ipsec_spm_moves_the_tunnel(vpn: GatewayNetwork) -> None:
    killed_at = vpn.kill_spm("ipseca1")
    wait_for(
        "site A's tunnel up again on ipseca2",
        lambda: (
            (v := _tunnel(vpn, "npma"))["active_spm"] == "ipseca2"
            and v["tunnels"][0]["state"] == "up"
        ),
        30.0,
    )
    wait_for(
        "a ping across the moved tunnel",
        lambda: vpn.run("ha", f"ping -c 1 -W 1 {HB}").returncode == 0,
        30.0,
    )
    moved = time.time() - killed_at
    assert moved < 15.0, f"the tunnel took {moved:.1f} s to move"
    page = vpn.run("ha", f"curl -sS --max-time 20 http://{HB}/index.html")
    assert "OpenGate test server hb" in page.output
    print(f"tunnel moved to ipseca2 in {moved:.1f} s")
