"""The new-flow rate the gateway sustains with no session lost: sessions made by the NPM (routed,
masqueraded) against sessions made by the CPM (masqueraded, `data_plane_ports: off`).

    sudo .venv/bin/python -m bench.bench_newflows [--rates 1000,2000,4000,8000] [--seconds 2]

Needs root (Mininet). h2 opens `rate` new UDP flows a second (one 18-byte datagram each, a new
source port each) to out1 for `--seconds`; out1 counts what arrives, the CPM's `installed`
counter counts the sessions it installed, the NPM's drop counter says where the rest went. A rate
is sustained when every flow arrived and every flow became a session. The policy is the example
policy without inspection (the SPMs are measured elsewhere), without the CPU meters and the
per-source new-flow limit (they cap the rate on purpose), and with a 2 s UDP idle timeout, so that
each rate starts with empty tables.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import threading
import time
from typing import Any

from bench.bench_flood import FLOODER, OUT1, drops, drops_since
from opengate.target import repo_root, select_target
from topo.model import load_topology, with_controller_nat, without_masquerade
from topo.net import GatewayNetwork

# Run on out1: count UDP datagrams to port 9 until none came for `quiet` s (after the first)
# or `limit` s passed; prints the count.
RECEIVER = r"""
import socket, sys, time
quiet, limit = float(sys.argv[1]), float(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
s.bind(("0.0.0.0", 9))
print("ready", flush=True)
count, start = 0, time.monotonic()
s.settimeout(limit)
while time.monotonic() - start < limit:
    try:
        s.recv(2048)
    except socket.timeout:
        break
    count += 1
    s.settimeout(quiet)
print(count, flush=True)
"""


def measurement_policy(text: str) -> str:
    """No inspection, no CPU meters, no new-flow limit, UDP sessions idle after 2 s."""
    out = re.sub(r"chain: [\w-]+, ", "", text)
    out = re.sub(r"bypass: (true|false), ", "", out)
    out = re.sub(r"\ncpu_meters: [^\n]*\n", "\n", out)
    out = re.sub(r"\n  new_flows_per_source: [^\n]*\n", "\n", out)
    out = re.sub(r"udp: \d+", "udp: 2", out)
    return out


def installed(network: GatewayNetwork) -> int:
    return int(network.api("GET", "/api/v1/status")["sessions"]["installed"])


def active(network: GatewayNetwork) -> int:
    return int(network.api("GET", "/api/v1/status")["sessions"]["active"])


def settle(read: Any, quiet: float = 1.0, limit: float = 60.0) -> int:
    """Poll `read` until its value has not changed for `quiet` s."""
    value, since, deadline = read(), time.monotonic(), time.monotonic() + limit
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = read()
        if now != value:
            value, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return int(value)


def one_rate(network: GatewayNetwork, rate: int, seconds: int, port: int) -> dict[str, Any]:
    run = repo_root() / "run" / "bench-newflows"
    run.mkdir(parents=True, exist_ok=True)
    (run / "flooder.py").write_text(FLOODER)
    (run / "receiver.py").write_text(RECEIVER)
    before_drops, before_installed = drops(network), installed(network)
    out: dict[str, Any] = {}

    def receive() -> None:
        result = network.run("out1", f"{sys.executable} {run / 'receiver.py'} 2 {seconds + 30}")
        out["received"] = int(result.output.split()[-1]) if result.returncode == 0 else 0

    receiver = threading.Thread(target=receive)
    receiver.start()
    time.sleep(1.0)  # the receiver binds its socket (it prints "ready" into the same output)
    result = network.run(
        "h2", f"{sys.executable} {run / 'flooder.py'} {OUT1} {rate} {seconds} {port}"
    )
    out["sent"] = int(result.output.split()[-1]) if result.returncode == 0 else 0
    receiver.join()
    out["installed"] = settle(lambda: installed(network)) - before_installed
    out["drops"] = drops_since(network, before_drops)
    settle(lambda: active(network), quiet=2.0)  # the 2 s idle timeout empties the tables
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1000,2000,4000,8000")
    parser.add_argument("--seconds", type=int, default=2)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_newflows: skipped, Mininet needs root")
        return 0
    rates = [int(r) for r in args.rates.split(",")]
    root = repo_root()
    spec = load_topology(root / "topo" / "gateway.yaml", root=root)
    choice = select_target()
    rows: list[tuple[str, int, dict[str, Any]]] = []
    with GatewayNetwork(spec, root / "run" / "bench-newflows", target=choice) as network:
        running = network.api("GET", "/api/v1/policy")
        path = str(spec.policy)
        base = measurement_policy(running["text"])
        port = 1024
        for name, text in (
            ("routed: sessions made by the NPM", without_masquerade(base)),
            ("masqueraded by the NPM", base),
            ("masqueraded by the CPM", with_controller_nat(base)),
        ):
            network.api("POST", "/api/v1/policy/apply", json={"path": path, "text": text})
            settle(lambda: active(network), quiet=2.0)
            for rate in rates:
                rows.append((name, rate, one_rate(network, rate, args.seconds, port)))
                port = 1024 + (port - 1024 + rate * args.seconds) % 60000
    print(
        f"Command: `{' '.join(['python -m bench.bench_newflows', *(argv or sys.argv[1:])])}`, "
        f"target {choice.target.value}, {args.seconds} s per rate\n"
    )
    print(
        "| sessions made by | offered flows/s | sent | arrived | sessions installed | lost "
        "| NPM drops |"
    )
    print("|---|---:|---:|---:|---:|---:|---|")
    for name, rate, r in rows:
        lost = r["sent"] - min(r["received"], r["installed"])
        dropped = ", ".join(f"{k} {v}" for k, v in sorted(r["drops"].items())) or "none"
        print(
            f"| {name} | {rate} | {r['sent']} | {r['received']} | {r['installed']} | {lost} "
            f"| {dropped} |"
        )
    for name in dict.fromkeys(n for n, _, _ in rows):
        kept = [
            rate
            for n, rate, r in rows
            if n == name and r["sent"] == r["received"] == r["installed"]
        ]
        print(
            f"\n{name}: highest rate with no session lost: {max(kept) if kept else 'none'} flows/s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
