"""The CPM's side of the IPsec service against the switch double: the NPM routes each tunnel's
remote subnets and the IPsec address to the active IPsec SPM, the ARP responder answers for the
address on the outside port, only the active SPM is handed the tunnels, an IPsec SPM that goes
down moves the routes to the next one of the pool, and status reports reach the API view and
Prometheus."""

from __future__ import annotations

import ipaddress
import json
import shutil
from pathlib import Path

import pytest

from controller import events as ev
from controller.runtime import Controller
from opengate import p4constants as pc
from tests.controller.conftest import DATA, ControllerFactory, wait_until
from tests.controller.test_spm import report
from tests.switch_double import SwitchDouble

IPSEC = """
ipsec:
  pool: vpn
  address: 198.51.100.2
  tunnels:
    - name: site-b
      local_subnets: [inside]
      remote_subnets: [10.0.2.0/24, 10.0.3.0/24]
      peer: 198.51.100.3
      auth: {psk: "correct horse battery"}
"""

VPN_POOL = """  - name: vpn
    id: 3
    spms:
      - {name: ipsec1, port: 5, mac: "00:00:00:00:05:55"}
      - {name: ipsec2, port: 6, mac: "00:00:00:00:06:66"}
"""


@pytest.fixture
def ipsec_lab(tmp_path: Path) -> Path:
    folder = tmp_path / "ipsec-policy"
    folder.mkdir()
    shutil.copy(DATA / "lab.rules", folder / "lab.rules")
    text = (DATA / "lab.yaml").read_text()
    text = text.replace(
        "  - {port: 4, role: spm}\n",
        "  - {port: 4, role: spm}\n  - {port: 5, role: spm}\n  - {port: 6, role: spm}\n",
    )
    text = text.replace("\nchains:", "\n" + VPN_POOL + "\nchains:", 1)
    path = folder / "lab.yaml"
    path.write_text(text + IPSEC)
    return path


def routes(switch: SwitchDouble) -> dict[str, int]:
    out: dict[str, int] = {}
    for entry in switch.table_entries(pc.T_ROUTING):
        (field,) = entry.match
        prefix = ipaddress.IPv4Network(
            (int.from_bytes(field.lpm.value, "big"), field.lpm.prefix_len)
        )
        params = {p.param_id: int.from_bytes(p.value, "big") for p in entry.action.action.params}
        out[str(prefix)] = params[1]
    return out


def arp_targets(switch: SwitchDouble) -> set[str]:
    return {
        str(ipaddress.IPv4Address(int.from_bytes(e.match[0].exact.value, "big")))
        for e in switch.table_entries(pc.T_ARP_RESPONDER)
    }


def test_tunnel_routes_follow_the_active_ipsec_spm(
    switch: SwitchDouble, make_controller: ControllerFactory, ipsec_lab: Path
) -> None:
    controller: Controller = make_controller(switch, policy=ipsec_lab)
    tunnel_routes = ("10.0.2.0/24", "10.0.3.0/24", "198.51.100.2/32")
    got = routes(switch)
    assert {p: got[p] for p in tunnel_routes} == dict.fromkeys(tunnel_routes, 5)
    assert "198.51.100.2" in arp_targets(switch)

    first = controller.ipsec_spm_config("ipsec1")
    assert first["active"] is True
    assert first["address"] == "198.51.100.2"
    (tunnel,) = first["tunnels"]
    assert tunnel["connection"]["site-b"]["remote_addrs"] == ["198.51.100.3"]
    assert tunnel["secret"]["data"] == "correct horse battery"
    standby = controller.ipsec_spm_config("ipsec2")
    assert standby["active"] is False
    assert standby["tunnels"] == []
    assert controller.ipsec_spm_config("spm1")["ipsec"] is False

    controller.bus.publish(ev.SpmDown("ipsec1", "test")).result(timeout=5)
    wait_until(
        "the routes on ipsec2",
        lambda: (
            {p: routes(switch).get(p) for p in tunnel_routes} == dict.fromkeys(tunnel_routes, 6)
        ),
    )
    assert controller.ipsec_spm_config("ipsec2")["active"] is True
    assert controller.ipsec_spm_config("ipsec1")["active"] is False
    view = controller.ipsec_status()
    assert view["active_spm"] == "ipsec2"
    assert [(s["name"], s["up"], s["active"]) for s in view["spms"]] == [
        ("ipsec1", False, False),
        ("ipsec2", True, True),
    ]

    # ipsec1 comes back: the tunnels stay where they are (moving them would cost new SAs).
    report(controller, "ipsec1")
    wait_until(
        "ipsec1 up again",
        lambda: [s["up"] for s in controller.ipsec_status()["spms"]] == [True, True],
    )
    assert controller.ipsec_status()["active_spm"] == "ipsec2"
    assert controller.ipsec_spm_config("ipsec1")["active"] is False
    assert {p: routes(switch).get(p) for p in tunnel_routes} == dict.fromkeys(tunnel_routes, 6)
    controller.bus.publish(ev.SpmDown("ipsec1", "test")).result(timeout=5)

    # With no IPsec SPM up the routes stay (on the first): tunnel traffic is dropped, not
    # routed out in the clear.
    controller.bus.publish(ev.SpmDown("ipsec2", "test")).result(timeout=5)
    wait_until(
        "the routes back on ipsec1",
        lambda: (
            {p: routes(switch).get(p) for p in tunnel_routes} == dict.fromkeys(tunnel_routes, 5)
        ),
    )
    assert controller.ipsec_status()["active_spm"] is None
    assert controller.ipsec_status()["tunnels"][0]["state"] == "no IPsec SPM up"


def test_status_reports_reach_the_view_and_prometheus(
    switch: SwitchDouble, make_controller: ControllerFactory, ipsec_lab: Path
) -> None:
    controller: Controller = make_controller(switch, policy=ipsec_lab)
    report = {
        "esp": "userspace",
        "tunnels": [
            {
                "name": "site-b",
                "state": "up",
                "last_error": None,
                "bytes_in": 1000,
                "bytes_out": 2000,
                "packets_in": 10,
                "packets_out": 20,
                "rekeys": 1,
                "sas": [],
            }
        ],
    }
    assert controller.ipsec_report("ipsec1", report)["active"] is True
    (tunnel,) = controller.ipsec_status()["tunnels"]
    assert (tunnel["state"], tunnel["bytes_out"], tunnel["rekeys"]) == ("up", 2000, 1)
    assert controller.ipsec_status()["spms"][0]["esp"] == "userspace"
    text = controller.metrics.render().decode()
    assert 'opengate_ipsec_tunnel_up{tunnel="site-b"} 1.0' in text
    assert 'opengate_ipsec_bytes{direction="out",tunnel="site-b"} 2000.0' in text
    # A standby's report is kept but sets no metric.
    report["tunnels"][0]["bytes_out"] = 5  # type: ignore[index]
    assert controller.ipsec_report("ipsec2", report)["active"] is False
    assert 'opengate_ipsec_bytes{direction="out",tunnel="site-b"} 2000.0' in (
        controller.metrics.render().decode()
    )


def test_policy_without_ipsec_has_no_view(
    switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    controller: Controller = make_controller(switch)
    assert controller.ipsec_status() == {"enabled": False, "tunnels": [], "spms": []}


def test_api_and_cli(
    switch: SwitchDouble,
    make_controller: ControllerFactory,
    ipsec_lab: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import argparse

    import httpx

    from controller.api import ApiServer
    from controller.cli import register

    controller: Controller = make_controller(switch, policy=ipsec_lab)
    api = ApiServer(controller, "127.0.0.1", 0, "t0ken")
    api.start()
    try:
        auth = {"Authorization": "Bearer t0ken"}
        base = f"http://127.0.0.1:{api.port}/api/v1"
        with httpx.Client(headers=auth, timeout=30) as client:
            assert client.get(f"{base}/ipsec/spm/ipsec1/config").json()["active"] is True
            assert client.get(f"{base}/ipsec/spm/nobody/config").status_code == 404
            bad = client.post(f"{base}/ipsec/spm/ipsec1/status", json={"tunnels": 3})
            assert bad.status_code == 422
            report = {
                "esp": "kernel",
                "tunnels": [
                    {
                        "name": "site-b",
                        "state": "down",
                        "last_error": "authentication failed: the two gateways' pre-shared "
                        "keys (or certificates) differ",
                        "sas": [],
                    }
                ],
            }
            status = client.post(f"{base}/ipsec/spm/ipsec1/status", json=report)
            assert status.json()["active"] is True
            view = client.get(f"{base}/ipsec").json()
            assert view["tunnels"][0]["last_error"].startswith("authentication failed")
            assert "correct horse" not in json.dumps(view)
        token = tmp_path / "token"
        token.write_text("t0ken\n")
        parser = argparse.ArgumentParser(prog="opengate")
        register(parser.add_subparsers(dest="command", required=True))
        args = parser.parse_args(
            ["ipsec", "--api", f"http://127.0.0.1:{api.port}", "--token-file", str(token)]
        )
        assert args.handler(args) == 0
        out = capsys.readouterr().out
        assert "IPsec address 198.51.100.2, pool vpn: ipsec1 (active, ESP in kernel)" in out
        assert "site-b: error: authentication failed" in out
        row = next(line.split() for line in out.splitlines() if line.startswith("site-b "))
        assert row[:5] == ["site-b", "198.51.100.3", "10.0.2.0/24,10.0.3.0/24", "down", "ipsec1"]
    finally:
        api.stop()
