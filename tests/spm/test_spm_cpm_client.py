"""The SPM -> CPM sender: JSON POSTs with the token; a CPM that is down does not lose alerts."""

from __future__ import annotations

import http.server
import json
import socketserver
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from opengate.netutil import free_tcp_port
from spm.cpm_client import CpmClient
from tests.spm.spm_netns import wait_for


class _Cpm:
    def __init__(self, port: int) -> None:
        self.received: list[tuple[str, str, Any]] = []
        self.lock = threading.Lock()
        received, lock = self.received, self.lock

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    received.append((self.path, self.headers["Authorization"], body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def paths(self) -> list[str]:
        with self.lock:
            return [p for p, _a, _b in self.received]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def port() -> int:
    return free_tcp_port()


@pytest.fixture
def client(port: int) -> Iterator[CpmClient]:
    c = CpmClient(f"http://127.0.0.1:{port}", "tok", "spm7", timeout=0.5, max_backoff=0.2)
    c.start()
    yield c
    c.stop(drain_timeout=0.5)


def test_alerts_and_load_are_posted_with_the_bearer_token(client: CpmClient, port: int) -> None:
    cpm = _Cpm(port)
    try:
        client.send_alert({"sid": 1})
        client.report_load({"cpu": 1.0})
        wait_for("two posts", lambda: len(cpm.paths()) == 2, 5)
        assert sorted(cpm.paths()) == ["/api/v1/spm/spm7/alerts", "/api/v1/spm/spm7/load"]
        assert {a for _p, a, _b in cpm.received} == {"Bearer tok"}
    finally:
        cpm.close()


def test_alerts_wait_while_the_cpm_is_down_and_loads_are_dropped(
    client: CpmClient, port: int, caplog: pytest.LogCaptureFixture
) -> None:
    for sid in range(3):
        client.send_alert({"sid": sid})
    client.report_load({"cpu": 5.0})
    wait_for("a failed attempt", lambda: client.counters.failed_attempts > 0, 5)
    assert "unreachable" in caplog.text
    assert client.pending == 3
    cpm = _Cpm(port)  # the CPM comes up
    try:
        wait_for("the queued alerts", lambda: client.pending == 0, 10)
        with cpm.lock:
            sids = [b["sid"] for p, _a, b in cpm.received if p.endswith("/alerts")]
        assert sids == [0, 1, 2]  # in order, none lost
        assert "reachable again" in caplog.text
        assert client.counters.loads_dropped >= 1
    finally:
        cpm.close()


def test_alert_queue_is_bounded_and_counts_what_it_drops(port: int) -> None:
    c = CpmClient(f"http://127.0.0.1:{port}", "tok", "s", max_queue=5)  # never started
    for sid in range(8):
        c.send_alert({"sid": sid})
    assert c.pending == 5 and c.counters.queued_dropped == 3
    c.stop(drain_timeout=0)


def test_reports_reach_a_cpm_listening_on_a_unix_socket(tmp_path: Any) -> None:
    """cpm_url 'unix:/PATH': the CPM's API on a Unix socket, as in the Mininet topology."""
    received: list[tuple[str, str]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, self.headers["Authorization"]))
            self.send_response(204)
            self.end_headers()

        def address_string(self) -> str:
            return "unix"

        def log_message(self, *_args: Any) -> None:
            pass

    class UnixHttpServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True

    path = tmp_path / "cpm.sock"
    server = UnixHttpServer(str(path), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    client = CpmClient(f"unix:{path}", "tok", "spm9", timeout=0.5, max_backoff=0.2)
    client.start()
    try:
        client.send_alert({"sid": 5})
        wait_for("the alert over the Unix socket", lambda: len(received) == 1, 5)
        assert received == [("/api/v1/spm/spm9/alerts", "Bearer tok")]
    finally:
        client.stop(drain_timeout=0.5)
        server.shutdown()
        server.server_close()


def test_an_ipv6_flows_alert_and_bypass_request_are_what_the_cpm_api_takes(
    client: CpmClient, port: int
) -> None:
    """A worker's alert and bypass request for IPv6 flows, posted as the daemon posts them: the
    5-tuple carries the addresses as text, and the CPM API's request models (controller.api)
    validate both bodies to the same flow."""
    from controller.api import Alert as ApiAlert
    from controller.api import Bypass as ApiBypass
    from opengate.snort.rules import parse_rule
    from spm.config import BypassConfig, SpmConfig
    from spm.ips.engine import BuiltinEngine, RuleSet
    from spm.pool import event_dict
    from spm.verdict import Alert, BypassRequest
    from spm.worker import Worker
    from tests.spm.spm_packets import TcpConversation

    rule = parse_rule('drop tcp any any -> 2001:db8::/32 80 (msg:"v6"; content:"evil"; sid:61;)')
    cfg = SpmConfig(
        name="spm7",
        interface="eth0",
        tags=(1,),
        bypass=BypassConfig(classes=("tls",), after_bytes=100),
    )
    worker = Worker(cfg, BuiltinEngine(RuleSet([rule], {})))
    bad = TcpConversation(client="2001:db8:1::10", server="2001:db8::80")
    tls = TcpConversation(client="2001:db8:1::10", server="2001:db8::443", sport=443)
    for p in bad.handshake() + bad.send(True, b"an evil request"):
        worker.process(p)
    for p in tls.handshake() + tls.send(True, b"\x16\x03\x01\x00\xc8" + bytes(200)):
        worker.process(p)
    alert = next(e for e in worker.events if isinstance(e, Alert))
    bypass = next(e for e in worker.events if isinstance(e, BypassRequest))
    cpm = _Cpm(port)
    try:
        client.send_alert(event_dict(alert))
        client.request_bypass(event_dict(bypass))
        wait_for("both posts", lambda: len(cpm.paths()) == 2, 5)
        with cpm.lock:
            bodies = {p.rsplit("/", 1)[1]: b for p, _a, b in cpm.received}
    finally:
        cpm.close()
    flow = {"proto": "tcp", "src": "2001:db8:1::10", "dst": "2001:db8::80"}
    assert bodies["alerts"]["flow"] == {**flow, "sport": bad.cport, "dport": 80}
    assert bodies["alerts"]["action"] == "block" and bodies["alerts"]["sid"] == 61
    assert bodies["bypass"]["flow"] == {
        **flow,
        "dst": "2001:db8::443",
        "sport": tls.cport,
        "dport": 443,
    }
    api_alert = ApiAlert.model_validate(bodies["alerts"])
    api_bypass = ApiBypass.model_validate(bodies["bypass"])
    assert api_alert.flow is not None
    assert api_alert.flow.model_dump() == bodies["alerts"]["flow"]
    assert api_bypass.flow.model_dump() == bodies["bypass"]["flow"]
    assert api_alert.community_id == alert.community_id
