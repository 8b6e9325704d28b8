"""End to end: `python -m spm run` (what `opengate spm run` runs) in its own network namespace,
with real nftables, NFQUEUE and clamd; a fake NPM in another namespace sends tagged packets and
checks what comes back; a fake CPM (a small HTTP server) takes the SPM's reports."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from opengate.netutil import stop_process
from spm.community_id import community_id_str
from spm.config import tag_mac
from spm.daemon import NFQUEUE_PROC
from tests.helpers import skip_unless_root, skip_unless_tool
from tests.spm.spm_netns import netns, raw_socket, sh, wait_for

pytestmark = [pytest.mark.needs_root]

REPO = Path(__file__).resolve().parents[2]
SPM_MAC = "02:00:00:5b:00:01"
NPM_MAC = "02:00:00:5b:00:02"
TAGS = (0x0101, 7)
TOKEN = "e2e-token"
IPS_RULE = (
    'alert tcp $EXTERNAL_NET any -> $HOME_NET $HTTP_PORTS ( msg:"BLACKLIST User-Agent ASafaWeb '
    'Scan"; flow:to_server,established; http_header; content:"User-Agent|3A| asafaweb.com",'
    "fast_pattern,nocase; metadata:policy balanced-ips alert,policy security-ips drop,ruleset "
    "community; service:http; reference:url,asafaweb.com; classtype:network-scan; sid:21327; "
    "rev:6; )"
)


@dataclass
class FakeCpm:
    requests: list[tuple[str, str, Any]] = field(default_factory=list)  # path, auth, body
    lock: threading.Lock = field(default_factory=threading.Lock)

    def bodies(self, suffix: str) -> list[Any]:
        with self.lock:
            return [b for p, _a, b in self.requests if p.endswith(suffix)]


def _cpm_server(cpm: FakeCpm, host: str) -> http.server.ThreadingHTTPServer:
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

    return http.server.ThreadingHTTPServer((host, 0), Handler)


@dataclass
class Rig:
    npm: socket.socket
    eve: Path
    cpm: FakeCpm
    spm_ns: str
    proc: subprocess.Popen[bytes]
    log: Path
    config: Path
    returned: dict[int, bytes] = field(default_factory=dict)  # IP id -> frame
    next_id: int = 1
    next_port: int = 41000

    def send(self, tag: int, packets: list[Any]) -> list[int]:
        """Send IP packets from the NPM side with the tag; returns their IP ids."""
        ids = []
        for pkt in packets:
            pkt[IP].id = self.next_id
            ids.append(self.next_id)
            self.next_id += 1
            frame = Ether(src=tag_mac(tag), dst=SPM_MAC) / pkt
            self.npm.send(bytes(frame))
        return ids

    def collect(self) -> None:
        """Read what came back so far (frames from the SPM to a tag MAC)."""
        while True:
            try:
                frame = self.npm.recv(65535)
            except TimeoutError:
                return
            eth = Ether(frame)
            if eth.src == SPM_MAC and IP in eth:
                self.returned[eth[IP].id] = frame

    def wait_returned(self, ids: list[int], timeout: float = 15.0) -> None:
        def done() -> bool:
            self.collect()
            return all(i in self.returned for i in ids)

        wait_for(f"packets {ids} to come back (log: {self.log})", done, timeout)

    def eve_events(self, kind: str) -> list[dict[str, Any]]:
        if not self.eve.exists():
            return []
        lines = self.eve.read_text().splitlines()
        return [e for e in map(json.loads, lines) if e["event_type"] == kind]

    def conversation(self, port: int = 80) -> TcpFlow:
        self.next_port += 1
        return TcpFlow(self.next_port, port=port)


@dataclass
class TcpFlow:
    cport: int
    client: str = "10.1.0.10"
    server: str = "10.2.0.80"
    cseq: int = 100
    sseq: int = 9000
    port: int = 80

    def pkt(self, to_server: bool, flags: str, data: bytes = b"") -> Any:
        if to_server:
            p = IP(src=self.client, dst=self.server) / TCP(
                sport=self.cport, dport=self.port, flags=flags, seq=self.cseq, ack=self.sseq
            )
            self.cseq += len(data) + (1 if "S" in flags or "F" in flags else 0)
        else:
            p = IP(src=self.server, dst=self.client) / TCP(
                sport=self.port, dport=self.cport, flags=flags, seq=self.sseq, ack=self.cseq
            )
            self.sseq += len(data) + (1 if "S" in flags or "F" in flags else 0)
        return p / Raw(data) if data else p

    def handshake(self) -> list[Any]:
        return [self.pkt(True, "S"), self.pkt(False, "SA"), self.pkt(True, "A")]

    def data(self, to_server: bool, payload: bytes, mss: int = 1000) -> list[Any]:
        return [
            self.pkt(to_server, "PA", payload[i : i + mss]) for i in range(0, len(payload), mss)
        ]

    @property
    def community_id(self) -> str:
        return community_id_str(6, self.client, self.server, self.cport, self.port)


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory, clamd_socket: str) -> Iterator[Rig]:
    av = f"av: {{enabled: yes, clamd_socket: {clamd_socket}, on_clamd_down: drop}}\n"
    # the built-in engine (auto would pick Snort where it is installed)
    with spm_rig(tmp_path_factory.mktemp("spm-e2e"), ips_extra="engine: builtin, ", av=av) as r:
        yield r


@contextlib.contextmanager
def spm_rig(
    tmp: Path, ips_extra: str, av: str, workers: int = 2, offset: int = 0, share: int = 600
) -> Iterator[Rig]:
    """`python -m spm run` in its namespace, a fake NPM and a fake CPM around it. `ips_extra`:
    more keys of the `ips` mapping (e.g. `engine: snort, `); `av`: the `av` line; `offset`:
    another rig's names (namespaces, links, addresses), to run beside one; `share`: the queue's
    `per_source`."""
    skip_unless_root("the SPM end-to-end test")
    skip_unless_tool("nft", "the SPM installs nftables rules")
    skip_unless_tool("iptables-nft", "the SPM's xt queue backend (kernels without nft_queue)")
    pid = (os.getpid() + offset) % 100000
    npm_if, spm_if, mgmt_root, mgmt_spm = f"ogn{pid}", f"ogs{pid}", f"ogm{pid}", f"ogc{pid}"
    mgmt_net = f"10.{231 + pid % 20}.{pid % 250}"
    cpm = FakeCpm()
    with netns(f"ogspm-npm-{pid}") as npm_ns, netns(f"ogspm-spm-{pid}") as spm_ns:
        server: http.server.ThreadingHTTPServer | None = None
        proc: subprocess.Popen[bytes] | None = None
        try:
            sh(
                "ip",
                "link",
                "add",
                npm_if,
                "netns",
                npm_ns,
                "type",
                "veth",
                "peer",
                "name",
                spm_if,
                "netns",
                spm_ns,
            )
            sh("ip", "-n", npm_ns, "link", "set", npm_if, "address", NPM_MAC, "up")
            sh("ip", "-n", spm_ns, "link", "set", spm_if, "address", SPM_MAC, "up")
            for ns, dev in ((npm_ns, npm_if), (spm_ns, spm_if)):
                sh(
                    "nsenter",
                    f"--net=/run/netns/{ns}",
                    "sysctl",
                    "-qw",
                    f"net.ipv6.conf.{dev}.disable_ipv6=1",
                )
                sh(
                    "nsenter",
                    f"--net=/run/netns/{ns}",
                    "ethtool",
                    "-K",
                    dev,
                    "tx",
                    "off",
                    "rx",
                    "off",
                    "gro",
                    "off",
                    "gso",
                    "off",
                    "tso",
                    "off",
                    check=False,
                )
            # management link: the fake CPM listens on the root side
            sh(
                "ip",
                "link",
                "add",
                mgmt_root,
                "type",
                "veth",
                "peer",
                "name",
                mgmt_spm,
                "netns",
                spm_ns,
            )
            sh("ip", "addr", "add", f"{mgmt_net}.1/30", "dev", mgmt_root)
            sh("ip", "link", "set", mgmt_root, "up")
            sh("ip", "-n", spm_ns, "addr", "add", f"{mgmt_net}.2/30", "dev", mgmt_spm)
            sh("ip", "-n", spm_ns, "link", "set", mgmt_spm, "up")
            server = _cpm_server(cpm, f"{mgmt_net}.1")
            threading.Thread(target=server.serve_forever, daemon=True).start()
            rules = tmp / "e2e.rules"
            rules.write_text(IPS_RULE + "\n")
            ips = f"ips: {{{ips_extra}rules: [{rules}], alert_action: drop}}\n"
            config = tmp / "spm.yaml"
            config.write_text(
                f"name: e2e{pid}\ninterface: {spm_if}\ntags: [{TAGS[0]}, {TAGS[1]}]\n"
                f"queue: {{num: 3, length: 1024, fail_open: no, per_source: {share}, window: 32}}\n"
                f"workers: {workers}\ndispatch: jsq\n"
                + ips
                + av
                + "bypass: {classes: [tls], after_bytes: 3000}\n"
                f"cpm_url: http://{mgmt_net}.1:{server.server_address[1]}\ntoken: {TOKEN}\n"
                f"eve_log: {tmp / 'eve.json'}\n"
            )
            log = tmp / "spm.log"
            proc = _start(spm_ns, config, log)
            npm = raw_socket(npm_ns, npm_if)
            r = Rig(npm, tmp / "eve.json", cpm, spm_ns, proc, log, config)
            wait_for("the SPM to start", lambda: bool(r.eve_events("spm")), 30)
            yield r
            npm.close()
        finally:
            if proc is not None:
                stop_process(proc)
            if server is not None:
                server.shutdown()
                server.server_close()
            sh("ip", "link", "del", mgmt_root, check=False)
            Path(f"/run/opengate/spm-opengate_spm_e2e{pid}.json").unlink(missing_ok=True)
            shutil.rmtree(f"/run/opengate/snort-e2e{pid}", ignore_errors=True)  # Snort's run dir


def _start(spm_ns: str, config: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                "nsenter",
                f"--net=/run/netns/{spm_ns}",
                sys.executable,
                "-m",
                "spm",
                "--log-level",
                "info",
                "run",
                "--config",
                str(config),
            ],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _eicar() -> bytes:
    return b"X5O!P%@AP[4\\PZX54(P^)7CC)7}$" + b"EICAR-STANDARD-ANTIVIRUS-" + b"TEST-FILE!$H+H*"


def test_clean_http_comes_back_to_its_tag(rig: Rig) -> None:
    check_clean_http_comes_back(rig)


def check_clean_http_comes_back(rig: Rig) -> None:
    """Clean HTTP both ways on each tag: every packet comes back to its tag, forwarded."""
    for tag in TAGS:
        flow = rig.conversation()
        body = b"hello, clean world\n" * 200
        pkts = flow.handshake() + flow.data(True, b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        pkts += flow.data(
            False, b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        )
        ids = rig.send(tag, pkts)
        rig.wait_returned(ids)
        for i in ids:
            eth = Ether(rig.returned[i])
            assert eth.dst == tag_mac(tag)
            assert eth[IP].ttl == 63  # forwarded by the SPM's stack: one hop


def test_eicar_download_is_dropped_from_its_last_packet_and_alerted(rig: Rig) -> None:
    check_eicar_download_dropped_and_alerted(rig)


def check_eicar_download_dropped_and_alerted(rig: Rig) -> TcpFlow:
    """An HTTP download of EICAR: the AV's alert (blocked) reaches the EVE log and the CPM; the
    response comes back but for its last packet, which completes the body, and the flow's next
    packet is dropped too."""
    flow = rig.conversation()
    body = _eicar() + b"\r\n" + b"." * 1500
    pkts = flow.handshake() + flow.data(True, b"GET /eicar.com HTTP/1.1\r\nHost: t\r\n\r\n")
    resp = flow.data(False, b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    ids = rig.send(TAGS[0], pkts + resp)
    later = rig.send(TAGS[0], [flow.pkt(True, "A")])  # the rest of the flow
    alerts: Callable[[], list[dict[str, Any]]] = lambda: [  # noqa: E731
        e for e in rig.eve_events("alert") if e["community_id"] == flow.community_id
    ]
    wait_for("the AV alert in the EVE log", lambda: bool(alerts()), 15)
    rig.wait_returned(ids[:-1])
    rig.collect()
    assert ids[-1] not in rig.returned and later[0] not in rig.returned
    [alert] = alerts()
    assert "Eicar" in alert["alert"]["signature"] and alert["alert"]["action"] == "blocked"
    assert alert["alert"]["source"] == "av"
    wait_for(
        "the alert at the CPM",
        lambda: any(b["community_id"] == flow.community_id for b in rig.cpm.bodies("/alerts")),
        10,
    )
    body_at_cpm = next(
        b for b in rig.cpm.bodies("/alerts") if b["community_id"] == flow.community_id
    )
    assert set(body_at_cpm) == {
        "ts",
        "sid",
        "gid",
        "rev",
        "msg",
        "classtype",
        "action",
        "flow",
        "community_id",
    }
    assert body_at_cpm["flow"] == {
        "proto": "tcp",
        "src": flow.server,
        "dst": flow.client,
        "sport": 80,
        "dport": flow.cport,
    }
    return flow


def test_community_rule_match_is_dropped_and_alerted(rig: Rig) -> None:
    check_rule_match_dropped_and_alerted(rig)


def check_rule_match_dropped_and_alerted(rig: Rig) -> None:
    """A request that fires the community rule (alert_action drop): the alert reaches the EVE
    log and the CPM, the request does not come back, the handshake did."""
    flow = rig.conversation()
    hs = rig.send(TAGS[1], flow.handshake())
    req = rig.send(
        TAGS[1], flow.data(True, b"GET / HTTP/1.1\r\nHost: t\r\nUser-Agent: asafaweb.com\r\n\r\n")
    )
    wait_for(
        "the IPS alert",
        lambda: any(
            e["alert"]["signature_id"] == 21327 and e["community_id"] == flow.community_id
            for e in rig.eve_events("alert")
        ),
        15,
    )
    rig.wait_returned(hs)
    rig.collect()
    assert req[0] not in rig.returned
    assert any(b["sid"] == 21327 for b in rig.cpm.bodies("/alerts"))


def test_clean_tls_flow_is_bypassed_in_the_kernel_and_offered_to_the_cpm(rig: Rig) -> None:
    flow = rig.conversation(port=443)
    hello = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(500)
    pkts = (
        flow.handshake() + flow.data(True, hello) + flow.data(False, b"\x17\x03\x03" + bytes(4000))
    )
    ids = rig.send(TAGS[0], pkts)
    rig.wait_returned(ids)
    wait_for(
        "the bypass request at the CPM",
        lambda: any(b["community_id"] == flow.community_id for b in rig.cpm.bodies("/bypass")),
        10,
    )
    name = rig.config.read_text().split("\n")[0].split(": ")[1]
    listing = sh(
        "nsenter",
        f"--net=/run/netns/{rig.spm_ns}",
        "nft",
        "list",
        "set",
        "inet",
        f"opengate_spm_{name}",
        "bypassed4",
    ).stdout
    assert f"{flow.client} . tcp . {flow.cport} . {flow.server} . 443" in listing
    assert f"{flow.server} . tcp . 443 . {flow.client} . {flow.cport}" in listing
    later = rig.send(TAGS[0], flow.data(False, bytes(1000)))  # passes in the kernel
    rig.wait_returned(later)
    assert any(e["community_id"] == flow.community_id for e in rig.eve_events("bypass"))


def test_load_reports_reach_the_cpm_with_the_token(rig: Rig) -> None:
    wait_for("two load reports", lambda: len(rig.cpm.bodies("/load")) >= 2, 10)
    report = rig.cpm.bodies("/load")[-1]
    assert set(report) == {
        "ts",
        "cpu",
        "queue_depth",
        "queue_held",
        "queue_dropped",
        "pps",
        "bps",
        "mem_bytes",
        "workers",
        "flows",
    }
    assert report["workers"] == 2 and report["mem_bytes"] > 0
    with rig.cpm.lock:
        paths_auth = {(p, a) for p, a, _b in rig.cpm.requests}
    name = rig.config.read_text().split("\n")[0].split(": ")[1]
    assert (f"/api/v1/spm/{name}/load", f"Bearer {TOKEN}") in paths_auth


def test_packets_the_kernel_queue_drops_are_counted_and_reported(rig: Rig) -> None:
    """With the SPM stopped, the kernel queue (1,024 packets) fills and drops the rest: the
    drops reach the CPM in the load reports and the SPM's log says so once it runs again."""
    flow = rig.conversation()
    sent = 1024 + 40
    os.kill(rig.proc.pid, signal.SIGSTOP)
    try:
        rig.send(TAGS[0], [flow.pkt(True, "PA", b"x") for _ in range(sent)])
    finally:
        os.kill(rig.proc.pid, signal.SIGCONT)

    def reported() -> int:
        return max((b.get("queue_dropped", 0) for b in rig.cpm.bodies("/load")), default=0)

    def drained() -> bool:  # the queued packets handled, so the tests after start afresh
        rig.collect()
        report = rig.cpm.bodies("/load")[-1]
        return bool(report.get("queue_dropped", 0) >= 40 and report["queue_depth"] == 0)

    wait_for("a load report with the drops", lambda: reported() >= 40, 15)
    wait_for("the warning", lambda: "the kernel dropped" in rig.log.read_text(), 15)
    wait_for("the queue to drain", drained, 30)
    assert 40 <= reported() <= sent


def _kernel_queue_depth(rig: Rig) -> int:
    """Packets waiting in the SPM's kernel queue (its namespace's nfnetlink_queue)."""
    text = sh("nsenter", f"--net=/run/netns/{rig.spm_ns}", "cat", str(NFQUEUE_PROC)).stdout
    return sum(int(cols[2]) for cols in map(str.split, text.splitlines()) if cols)


@pytest.fixture(scope="module")
def one_worker_rig(tmp_path_factory: pytest.TempPathFactory, rig: Rig) -> Iterator[Rig]:
    """A rig (beside `rig`) whose SPM has one worker (whose verdicts come back in the order it
    got the packets), without the AV."""
    tmp = tmp_path_factory.mktemp("spm-e2e-one")
    av = "av: {enabled: no}\n"
    with spm_rig(tmp, ips_extra="engine: builtin, ", av=av, workers=1, offset=1, share=200) as r:
        yield r


def test_a_flooding_source_does_not_hold_up_another_and_its_excess_is_counted(
    one_worker_rig: Rig,
) -> None:
    """With the SPM and its worker stopped, 400 packets of 40 flows from one host and then one
    from another wait in the kernel queue (fewer than a CPU's input backlog, 1,000 by default,
    so none is lost on the way). The dispatcher alone runs on and reads them all: it hands the
    worker its window (32), holds the flood's share (200) and drops the rest
    (fail-closed), and holds the other host's packet. Once the worker runs, that packet is
    handed out in the first round after the window, second (in arrival order it came last),
    and the drops are reported with the queue's."""
    rig = one_worker_rig
    flows = [rig.conversation() for _ in range(40)]
    rig.next_port += 1
    other = TcpFlow(rig.next_port, client="10.1.0.11")
    window, share = 32, 200
    workers = Path(f"/proc/{rig.proc.pid}/task/{rig.proc.pid}/children").read_text().split()
    before = max((b.get("queue_dropped", 0) for b in rig.cpm.bodies("/load")), default=0)

    def held() -> int:
        reports = rig.cpm.bodies("/load")
        return int(reports[-1].get("queue_held", 0)) if reports else 0

    for pid in [rig.proc.pid, *map(int, workers)]:
        os.kill(pid, signal.SIGSTOP)
    try:
        flood = rig.send(TAGS[0], [f.pkt(True, "PA", b"x") for _ in range(10) for f in flows])
        late = rig.send(TAGS[0], [other.pkt(True, "PA", b"y")])[0]
        queued = len(flood) + 1
        wait_for("the packets in the kernel queue", lambda: _kernel_queue_depth(rig) == queued, 10)
        os.kill(rig.proc.pid, signal.SIGCONT)
        # all read (the late one too), none answered: a window at the workers, a share held
        wait_for("the dispatcher to read them all", lambda: held() == window + share + 1, 15)
    finally:
        for pid in [rig.proc.pid, *map(int, workers)]:
            os.kill(pid, signal.SIGCONT)

    def dropped() -> int:
        return max((b.get("queue_dropped", 0) for b in rig.cpm.bodies("/load")), default=0)

    def settled() -> bool:  # every flood packet came back or was reported dropped
        rig.collect()
        back = sum(1 for i in flood if i in rig.returned)
        return late in rig.returned and back + dropped() - before == len(flood)

    try:
        wait_for("the flood's packets back or dropped, and the late one back", settled, 30)
    except TimeoutError as error:
        back = sum(1 for i in flood if i in rig.returned)
        raise AssertionError(
            f"{error}: {back} of {len(flood)} back, {dropped() - before} reported dropped, "
            f"the late one {'back' if late in rig.returned else 'not back'}"
        ) from None
    assert dropped() - before == len(flood) - share - window
    order = [i for i in rig.returned if i in set(flood) or i == late]
    # after the window, the first round: one of the flood's, then the late one
    assert order.index(late) <= window + 1, f"the late packet came back {order.index(late) + 1}th"


def test_a_worker_that_dies_is_restarted_and_traffic_still_flows(rig: Rig) -> None:
    children = Path(f"/proc/{rig.proc.pid}/task/{rig.proc.pid}/children").read_text().split()
    assert len(children) == 2  # the two workers
    before = len(rig.log.read_text())
    os.kill(int(children[0]), signal.SIGKILL)
    wait_for("the restart", lambda: "died; restarting it" in rig.log.read_text()[before:], 10)
    for tag in TAGS:
        flow = rig.conversation()
        ids = rig.send(tag, flow.handshake() + flow.data(True, b"GET / HTTP/1.1\r\n\r\n"))
        rig.wait_returned(ids)


def test_crash_leftovers_are_removed_at_the_next_start_and_stop_cleans_up(rig: Rig) -> None:
    name = rig.config.read_text().split("\n")[0].split(": ")[1]
    table = f"opengate_spm_{name}"

    def has_table() -> bool:
        return (
            sh(
                "nsenter",
                f"--net=/run/netns/{rig.spm_ns}",
                "nft",
                "list",
                "table",
                "inet",
                table,
                check=False,
            ).returncode
            == 0
        )

    assert has_table()
    rig.proc.send_signal(signal.SIGKILL)  # a crash: nothing is cleaned up
    rig.proc.wait(10)
    assert has_table()
    before = len(rig.log.read_text())
    rig.proc = _start(rig.spm_ns, rig.config, rig.log)
    wait_for("the restarted SPM", lambda: "inspecting queue" in rig.log.read_text()[before:], 30)
    assert "removing leftovers of a previous run" in rig.log.read_text()[before:]
    flow = rig.conversation()
    ids = rig.send(TAGS[0], flow.handshake())
    rig.wait_returned(ids)
    rig.proc.send_signal(signal.SIGTERM)
    assert rig.proc.wait(15) == 0
    assert not has_table()
    rules = sh("nsenter", f"--net=/run/netns/{rig.spm_ns}", "ip", "rule", "show").stdout
    assert "0x4f00" not in rules
    mangle = sh(
        "nsenter", f"--net=/run/netns/{rig.spm_ns}", "iptables-nft", "-t", "mangle", "-S"
    ).stdout
    assert "OG_SPM" not in mangle
