"""End to end over IPv6: `python -m spm run` in its namespace (real nftables, NFQUEUE, clamd)
between a client that runs curl -6 and an HTTP server, with a router namespace standing in for
the NPM: it sends every packet between client and server to the SPM from the tag's MAC, and
forwards what comes back. The SPM reports to a fake CPM over IPv6 too. Documentation addresses
(2001:db8::/32) throughout.

    client (2001:db8:1::10) -- router -- server (2001:db8:2::80)
                                 |  (its port towards the SPM has the tag's MAC)
                                SPM

Run with the built-in engine, and with Snort 3 inline where it is installed (the AV after it)."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from opengate.netutil import stop_process
from spm.community_id import community_id_str
from spm.config import tag_mac
from spm.eve import eve_address
from spm.ips.snort import snort_binary
from tests.helpers import skip_unless_root, skip_unless_tool
from tests.spm.conftest import eicar
from tests.spm.spm_netns import in_netns, netns, sh, wait_for
from tests.spm.test_spm_e2e import IPS_RULE, TOKEN, FakeCpm

pytestmark = [pytest.mark.needs_root]

REPO = Path(__file__).resolve().parents[2]
TAG = 0x0105
CLIENT, SERVER = "2001:db8:1::10", "2001:db8:2::80"
ROUTER_C, ROUTER_S = "2001:db8:1::1", "2001:db8:2::1"
TRANSIT_ROUTER, TRANSIT_SPM = "2001:db8:ff::1", "2001:db8:ff::2"  # the router-SPM link
MGMT_ROOT, MGMT_SPM = "2001:db8:ff00::1", "2001:db8:ff00::2"  # the SPM's link to the CPM
SPM_MAC = "02:00:00:5b:06:01"
HOME_NET = "[10.0.0.0/8,2001:db8:2::/64]"  # both families: the server's side is home
PAGE = b"<html><body>hello over IPv6</body></html>\n" * 50


class _Cpm6(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6


def _cpm_server(cpm: FakeCpm) -> _Cpm6:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"null")
            with cpm.lock:
                cpm.requests.append((self.path, self.headers.get("Authorization", ""), body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: Any) -> None:
            pass

    return _Cpm6((MGMT_ROOT, 0), Handler)


@dataclass
class Rig6:
    client_ns: str
    spm_ns: str
    spm_name: str
    eve: Path
    log: Path
    cpm: FakeCpm
    engine: str

    def curl(
        self, path: str, *extra: str, timeout: float = 4.0
    ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [
                "nsenter",
                f"--net=/run/netns/{self.client_ns}",
                "curl",
                "-6",
                "-sS",
                "--max-time",
                str(timeout),
                *extra,
                f"http://[{SERVER}]{path}",
            ],
            capture_output=True,
            check=False,
            timeout=timeout + 10,
        )

    def eve_events(self, kind: str) -> list[dict[str, Any]]:
        if not self.eve.exists():
            return []
        records = [json.loads(line) for line in self.eve.read_text().splitlines()]
        return [e for e in records if e["event_type"] == kind]

    def nft(self, *args: str) -> str:
        return sh("nsenter", f"--net=/run/netns/{self.spm_ns}", "nft", *args).stdout


def _veth(a: str, a_ns: str, b: str, b_ns: str) -> None:
    sh("ip", "link", "add", a, "netns", a_ns, "type", "veth", "peer", "name", b, "netns", b_ns)
    for ns, dev in ((a_ns, a), (b_ns, b)):
        # checksums filled in, whole segments: what a real NIC hands the SPM
        sh("nsenter", f"--net=/run/netns/{ns}", "ethtool", "-K", dev, "tx", "off", "rx", "off",
           "gro", "off", "gso", "off", "tso", "off", check=False)  # fmt: skip


def _ip(ns: str, *args: str) -> None:
    sh("ip", "-n", ns, *args)


def _listening(ns: str) -> bool:
    def connect() -> socket.socket:
        return socket.create_connection((SERVER, 80), timeout=1)

    try:
        in_netns(ns, connect).close()
    except OSError:
        return False
    return True


@contextlib.contextmanager
def ipv6_rig(tmp: Path, engine: str, clamd_socket: str) -> Iterator[Rig6]:
    skip_unless_root("the SPM's IPv6 end-to-end test")
    skip_unless_tool("nft", "the SPM installs nftables rules")
    skip_unless_tool("ip6tables-nft", "the SPM's xt queue backend (kernels without nft_queue)")
    skip_unless_tool("curl", "the client fetches over HTTP with curl -6")
    pid = os.getpid() % 100000
    name = f"v6e{pid}"
    cpm = FakeCpm()
    mgmt_root, mgmt_spm = f"og6m{pid}", f"og6c{pid}"
    with (
        netns(f"og6-cli-{pid}") as cli_ns,
        netns(f"og6-rtr-{pid}") as rtr_ns,
        netns(f"og6-srv-{pid}") as srv_ns,
        netns(f"og6-spm-{pid}") as spm_ns,
    ):
        server: _Cpm6 | None = None
        procs: list[subprocess.Popen[bytes]] = []
        try:
            _veth("c0", cli_ns, "rc", rtr_ns)
            _veth("s0", srv_ns, "rs", rtr_ns)
            _veth("rp", rtr_ns, "p0", spm_ns)
            _ip(rtr_ns, "link", "set", "rp", "address", tag_mac(TAG))  # the NPM's tag MAC
            _ip(spm_ns, "link", "set", "p0", "address", SPM_MAC)
            for ns, dev, addr in (
                (cli_ns, "c0", f"{CLIENT}/64"),
                (rtr_ns, "rc", f"{ROUTER_C}/64"),
                (rtr_ns, "rs", f"{ROUTER_S}/64"),
                (srv_ns, "s0", f"{SERVER}/64"),
                (rtr_ns, "rp", f"{TRANSIT_ROUTER}/64"),
                (spm_ns, "p0", f"{TRANSIT_SPM}/64"),
            ):
                _ip(ns, "addr", "add", addr, "dev", dev, "nodad")
                _ip(ns, "link", "set", dev, "up")
            _ip(cli_ns, "-6", "route", "add", "default", "via", ROUTER_C)
            _ip(srv_ns, "-6", "route", "add", "default", "via", ROUTER_S)
            sh("nsenter", f"--net=/run/netns/{rtr_ns}", "sysctl", "-qw",
               "net.ipv6.conf.all.forwarding=1")  # fmt: skip
            # the NPM's steering: what comes from the hosts goes to the SPM, what comes back
            # from it goes on by the main table
            _ip(rtr_ns, "-6", "neigh", "replace", TRANSIT_SPM, "lladdr", SPM_MAC, "dev", "rp",
                "nud", "permanent")  # fmt: skip
            _ip(rtr_ns, "-6", "route", "add", "default", "via", TRANSIT_SPM, "dev", "rp",
                "table", "100")  # fmt: skip
            for dev in ("rc", "rs"):
                _ip(rtr_ns, "-6", "rule", "add", "iif", dev, "table", "100", "priority", "10")
            # the management link to the fake CPM in the root namespace, over IPv6 too
            sh("ip", "link", "add", mgmt_root, "type", "veth", "peer", "name", mgmt_spm,
               "netns", spm_ns)  # fmt: skip
            sh("ip", "addr", "add", f"{MGMT_ROOT}/64", "dev", mgmt_root, "nodad")
            sh("ip", "link", "set", mgmt_root, "up")
            _ip(spm_ns, "addr", "add", f"{MGMT_SPM}/64", "dev", mgmt_spm, "nodad")
            _ip(spm_ns, "link", "set", mgmt_spm, "up")
            server = _cpm_server(cpm)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            # the web server
            www = tmp / "www"
            www.mkdir()
            (www / "index.html").write_bytes(PAGE)
            (www / "eicar.com").write_bytes(eicar() + b"\r\n" + b"." * 3000)
            web_log = tmp / "web.log"
            with web_log.open("wb") as out:
                web = subprocess.Popen(
                    ["nsenter", f"--net=/run/netns/{srv_ns}", sys.executable, "-m",
                     "http.server", "80", "--bind", SERVER, "--directory", str(www)],
                    stdout=out, stderr=subprocess.STDOUT,
                )  # fmt: skip
            procs.append(web)
            wait_for("the web server", lambda: _listening(srv_ns), 15)
            # the SPM
            rules = tmp / "e2e6.rules"
            rules.write_text(IPS_RULE + "\n")
            eve = tmp / "eve.json"
            config = tmp / "spm.yaml"
            config.write_text(
                f"name: {name}\ninterface: p0\ntags: [{TAG}]\n"
                "queue: {num: 5, length: 1024, fail_open: no}\n"
                "workers: 2\ndispatch: jsq\n"
                f"ips: {{engine: {engine}, rules: [{rules}], alert_action: drop,\n"
                f'       variables: {{HOME_NET: "{HOME_NET}", EXTERNAL_NET: "!$HOME_NET"}}}}\n'
                f"av: {{enabled: yes, clamd_socket: {clamd_socket}, on_clamd_down: drop}}\n"
                f"cpm_url: http://[{MGMT_ROOT}]:{server.server_address[1]}\ntoken: {TOKEN}\n"
                f"eve_log: {eve}\n"
            )
            log = tmp / "spm.log"
            with log.open("ab") as out:
                spm = subprocess.Popen(
                    ["nsenter", f"--net=/run/netns/{spm_ns}", sys.executable, "-m", "spm",
                     "--log-level", "info", "run", "--config", str(config)],
                    cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                )  # fmt: skip
            procs.append(spm)
            rig = Rig6(cli_ns, spm_ns, name, eve, log, cpm, engine)
            wait_for(f"the SPM to start (log: {log})", lambda: bool(rig.eve_events("spm")), 120)
            yield rig
        finally:
            for proc in reversed(procs):
                stop_process(proc)
            if server is not None:
                server.shutdown()
                server.server_close()
            sh("ip", "link", "del", mgmt_root, check=False)
            Path(f"/run/opengate/spm-opengate_spm_{name}.json").unlink(missing_ok=True)
            shutil.rmtree(f"/run/opengate/snort-{name}", ignore_errors=True)


@pytest.fixture(scope="module", params=["builtin", "snort"])
def rig6(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, clamd_socket: str
) -> Iterator[Rig6]:
    engine = str(request.param)
    if engine == "snort" and snort_binary() is None:
        pytest.skip("Snort 3 is not installed (no snort on PATH, $SNORT_PREFIX or /opt/snort)")
    with ipv6_rig(tmp_path_factory.mktemp(f"spm-v6-{engine}"), engine, clamd_socket) as r:
        yield r


def test_clean_http_over_ipv6_goes_through_the_spm(rig6: Rig6) -> None:
    got = rig6.curl("/index.html")
    assert got.returncode == 0, got.stderr.decode()
    assert got.stdout == PAGE


def test_ipv6_http_request_matching_an_ips_rule_is_blocked_and_alerted(rig6: Rig6) -> None:
    """curl -6 with the User-Agent of the community rule (alert_action drop): curl gets no
    answer; the alert names the IPv6 addresses (EVE in full, the CPM's in short form) and the
    flow's Community ID; the kernel's blocked6 set holds the flow."""
    got = rig6.curl("/", "-A", "asafaweb.com")
    assert got.returncode != 0 and PAGE not in got.stdout

    def alerts() -> list[dict[str, Any]]:
        return [e for e in rig6.eve_events("alert") if e["alert"]["signature_id"] == 21327]

    wait_for("the IPS alert in the EVE log", lambda: bool(alerts()), 15)
    [alert] = alerts()
    assert (alert["src_ip"], alert["dest_ip"]) == (eve_address(CLIENT), eve_address(SERVER))
    assert alert["src_ip"] == "2001:0db8:0001:0000:0000:0000:0000:0010"
    assert (alert["dest_port"], alert["proto"], alert["ip_v"]) == (80, "TCP", 6)
    assert alert["alert"]["action"] == "blocked"
    assert alert["community_id"] == community_id_str(6, CLIENT, SERVER, alert["src_port"], 80)
    wait_for(
        "the alert at the CPM",
        lambda: any(b.get("sid") == 21327 for b in rig6.cpm.bodies("/alerts")),
        10,
    )
    body = next(b for b in rig6.cpm.bodies("/alerts") if b.get("sid") == 21327)
    assert body["flow"]["src"] == CLIENT and body["flow"]["dst"] == SERVER
    assert body["community_id"] == alert["community_id"]
    if rig6.engine == "builtin":  # Snort drops the flow itself
        blocked = rig6.nft("list", "set", "inet", f"opengate_spm_{rig6.spm_name}", "blocked6")
        assert f"{CLIENT} . tcp . {alert['src_port']} . {SERVER} . 80" in blocked
    again = rig6.curl("/index.html")  # another flow between the same hosts still works
    assert again.returncode == 0 and again.stdout == PAGE


def test_eicar_over_ipv6_is_stopped_by_clamav(rig6: Rig6) -> None:
    """The download stops short of its last packet (the one that completes the body, which the
    AV scans), curl times out; the AV's alert names the IPv6 addresses."""
    got = rig6.curl("/eicar.com")
    assert got.returncode != 0
    assert len(got.stdout) < len(eicar()) + 3002

    def alerts() -> list[dict[str, Any]]:
        return [e for e in rig6.eve_events("alert") if e["alert"]["source"] == "av"]

    wait_for("the AV alert in the EVE log", lambda: bool(alerts()), 15)
    [alert] = alerts()
    assert "Eicar" in alert["alert"]["signature"] and alert["alert"]["action"] == "blocked"
    assert (alert["src_ip"], alert["dest_ip"], alert["ip_v"]) == (
        eve_address(SERVER),
        eve_address(CLIENT),
        6,
    )
    wait_for(
        "the AV alert at the CPM",
        lambda: any(b.get("gid") == 3000 for b in rig6.cpm.bodies("/alerts")),
        10,
    )


def test_load_reports_reach_the_cpm_over_ipv6(rig6: Rig6) -> None:
    wait_for("a load report", lambda: bool(rig6.cpm.bodies("/load")), 10)
    with rig6.cpm.lock:
        auth = {(p, a) for p, a, _b in rig6.cpm.requests}
    assert (f"/api/v1/spm/{rig6.spm_name}/load", f"Bearer {TOKEN}") in auth
