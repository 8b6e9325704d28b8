"""Web console benchmark: how long its pages and their data take with 50,000 sessions in the
database (SQLite), served by the controller's own API server.

    python -m bench.bench_console [--sessions 50000] [--runs 20]

The controller drives the built-in switch's P4Runtime server with no ports (the switch double);
the sessions are written to its database directly. Timed over HTTP on loopback: each page's HTML
and the JSON it fetches (sessions: a page in the middle, sorted by a column without an index,
searched by an address). With Debian's chromium and chromedriver installed, also the whole page
in a headless browser: from navigation until the sessions table shows its rows. Prints Markdown.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from controller.api import ApiServer
from controller.npm import NpmAddress
from controller.runtime import Controller, ControllerOptions
from controller.web import Console
from opengate import p4constants as pc
from opengate.target import repo_root
from tests.switch_double import SwitchDouble

POLICY = repo_root() / "controller" / "examples" / "gateway.yaml"
TOKEN = "bench-console-token"


def session_rows(count: int) -> list[dict[str, Any]]:
    """`count` sessions from 10.1.x.y to 198.51.100.20:443, a minute apart in age order."""
    base = int(ipaddress.IPv4Address("10.1.0.0"))
    server = int(ipaddress.IPv4Address("198.51.100.20"))
    now = dt.datetime.now(dt.UTC)
    return [
        {
            "id": i + 1,
            "npm": "npm1",
            "proto": pc.IP_PROTO_TCP,
            "src": base + i // 1000,
            "dst": server,
            "sport": 10_000 + i % 1000,
            "dport": 443,
            "r_src": server,
            "r_dst": base + i // 1000,
            "r_sport": 443,
            "r_dport": 10_000 + i % 1000,
            "class_id": 1,
            "spm_port": 3,
            "spm_mac": 0x333,
            "nat_kind": 0,
            "nat_addr": 0,
            "nat_port": 0,
            "acl_rule": 0,
            "ingress_port": 1,
            "state": "active",
            "idle_timeout": 300.0,
            "created_at": now - dt.timedelta(seconds=i),
        }
        for i in range(count)
    ]


def timed(function: Callable[[], Any], runs: int) -> list[float]:
    function()  # warm up
    out = []
    for _ in range(runs):
        began = time.perf_counter()
        function()
        out.append((time.perf_counter() - began) * 1000)
    return out


def row(what: str, times: list[float]) -> str:
    ordered = sorted(times)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"| {what} | {statistics.median(times):.1f} | {p95:.1f} | {max(times):.1f} |"


def browser_times(base: str, runs: int) -> list[float] | str:
    browser, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if browser is None or driver_path is None:
        return "chromium or chromedriver not installed: no browser figures"
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    try:
        driver.get(f"{base}/console/login")
        driver.find_element("css selector", "#secret").send_keys(TOKEN + "\n")
        wait = "return document.querySelectorAll('#sessions tbody tr').length"
        out = []
        for _ in range(runs + 1):
            began = time.perf_counter()
            driver.get(f"{base}/console/sessions?page=500")
            while not driver.execute_script(wait):
                time.sleep(0.002)
            out.append((time.perf_counter() - began) * 1000)
        return out[1:]
    finally:
        driver.quit()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder, SwitchDouble() as switch:
        options = ControllerOptions(
            npms=(NpmAddress("npm1", switch.address, 1),),
            policy_path=POLICY,
            db_url=f"sqlite:///{Path(folder) / 'bench.db'}",
            state_dir=Path(folder),
        )
        controller = Controller(options)
        controller.start()
        server = None
        try:
            if not controller.wait_synced(60):
                raise RuntimeError("the controller did not take over the switch")
            controller.db.insert_sessions(session_rows(args.sessions))
            console = Console(controller, TOKEN)
            server = ApiServer(controller, "127.0.0.1", 0, TOKEN, console=console)
            server.start()
            base = f"http://127.0.0.1:{server.port}"
            with httpx.Client(base_url=base, timeout=30) as client:
                client.post("/console/login", data={"user": "", "secret": TOKEN})
                data = "/console/data/sessions"
                cases: list[tuple[str, str, dict[str, str | int]]] = [
                    ("sessions page (HTML)", "/console/sessions", {}),
                    ("console.js", "/console/static/console.js", {}),
                    ("sessions data, page 500 of 1,000", data, {"page": 500}),
                    (
                        "sessions data, sorted by source, descending",
                        data,
                        {"sort": "src", "order": "desc"},
                    ),
                    ("sessions data, search 10.1.0.42", data, {"q": "10.1.0.42"}),
                    ("overview data (5 minutes of samples)", "/console/data/overview", {}),
                ]
                print(
                    f"Console requests with {args.sessions:,} sessions in SQLite, "
                    f"{args.runs} runs, milliseconds\n"
                )
                print("| request | median | p95 | max |\n|---|---:|---:|---:|")
                for what, path, params in cases:
                    response = client.get(path, params=params)
                    response.raise_for_status()
                    print(row(what, timed(partial(client.get, path, params=params), args.runs)))
            result = browser_times(base, args.runs)
            if isinstance(result, str):
                print(f"\n{result}")
            else:
                print(row("whole sessions page in headless chromium, until rows show", result))
        finally:
            if server is not None:
                server.stop()
            controller.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
