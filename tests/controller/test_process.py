"""`opengate controller run` as a process: it pushes the build it is given, serves the API with
its token, and SIGTERM stops it cleanly without touching the switch's tables."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx

from opengate import p4constants as pc
from opengate.netutil import free_tcp_port, wait_for_port
from opengate.target import repo_root
from tests.controller.conftest import wait_until
from tests.switch_double import SwitchDouble

# Until opengate/cli.py lists the controller module, register it here (harmless afterwards).
LAUNCH = (
    "import sys, opengate.cli as cli\n"
    "if ('controller', 'controller.cli') not in cli._MODULES:\n"
    "    cli._MODULES += (('controller', 'controller.cli'),)\n"
    "raise SystemExit(cli.main(sys.argv[1:]))\n"
)


def test_controller_process_serves_the_api_and_stops_on_sigterm(
    switch: SwitchDouble, lab: Path, tmp_path: Path
) -> None:
    port = free_tcp_port()
    token_file = tmp_path / "token"
    argv = [
        sys.executable, "-c", LAUNCH, "--log-level", "info", "controller", "run",
        "--policy", str(lab), "--npm", f"npm1={switch.address},1", "--api", f"127.0.0.1:{port}",
        "--token-file", str(token_file), "--state-dir", str(tmp_path / "state"),
        "--build", "compact",
    ]  # fmt: skip
    log = tmp_path / "controller.log"
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=repo_root())
    try:
        wait_for_port("127.0.0.1", port, 30, process)
        token = token_file.read_text().strip()
        assert len(token) == 32 and (token_file.stat().st_mode & 0o777) == 0o600
        headers = {"Authorization": f"Bearer {token}"}
        url = f"http://127.0.0.1:{port}/api/v1/status"

        def role() -> str:
            return str(httpx.get(url, headers=headers, timeout=10).json()["npms"]["npm1"]["role"])

        wait_until("the controller to be the primary", lambda: role() == "primary", timeout=20)
        pushed = f"pushed the pipeline {repo_root() / 'p4src/build/compact/opengate.json'}"
        wait_until("the compact build pushed", lambda: pushed in log.read_text(), timeout=20)
        assert httpx.get(url, timeout=10).status_code == 401
        entries = len(switch.table_entries(pc.T_PORT_ROLE))
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0, log.read_text()[-3000:]
        assert len(switch.table_entries(pc.T_PORT_ROLE)) == entries == 4
        assert (tmp_path / "state" / "opengate.db").exists()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
