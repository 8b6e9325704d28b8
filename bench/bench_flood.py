"""A flood of new UDP flows from one inside host, and what the other users of the gateway see.

    sudo .venv/bin/python -m bench.bench_flood [--rates 2000,8000] [--seconds 10]

Needs root (Mininet). h2 sends 18-byte datagrams to out1, each from a new source port (a new flow),
at each rate for `--seconds`; meanwhile h1 runs one iperf3 TCP flow to out1 (its rate is compared
with the same flow alone), opens 20 new TCP connections to out1 (connect times), and the REST API
is asked for its status every 100 ms (response times). Three policies: routed (the example policy
without masquerade) and the example policy (masquerade), whose flows the NPM makes itself, and
the example policy with `data_plane_ports: off`, whose masqueraded flows go to the CPM. The
example policy limits each source to 1,000 new flows a second (2,000 at once).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

from bench.bench_sessions import measure, percentile
from opengate import p4constants as pc
from opengate.target import repo_root, select_target
from topo.model import load_topology, with_controller_nat, without_masquerade
from topo.net import GatewayNetwork

OUT1 = "198.51.100.20"

# Run on h2: `rate` new UDP flows a second for `seconds` (raw UDP socket: one source port each,
# the kernel adds the IP header; the first source port is the 4th argument, default 1024); prints
# how many it sent.
FLOODER = r"""
import socket, struct, sys, time
dst, rate, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
payload = b"x" * 10
sent, port = 0, int(sys.argv[4]) if len(sys.argv) > 4 else 1024
start = time.perf_counter()
while True:
    now = time.perf_counter() - start
    if now >= seconds:
        break
    due = int(now * rate)
    while sent < due:
        s.sendto(struct.pack("!HHHH", port, 9, 8 + len(payload), 0) + payload, (dst, 0))
        sent += 1
        port = port + 1 if port < 65535 else 1024
    time.sleep(0.0005)
print(sent)
"""


def iperf(network: GatewayNetwork, seconds: int) -> float:
    result = network.run("h1", f"iperf3 -c {OUT1} -t {seconds} -J", timeout=seconds + 60)
    if result.returncode != 0:
        return 0.0
    return float(json.loads(result.output)["end"]["sum_received"]["bits_per_second"]) / 1e6


def api_times(network: GatewayNetwork, seconds: float) -> list[float]:
    out: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        network.api("GET", "/api/v1/status")
        out.append((time.perf_counter() - started) * 1000)
        time.sleep(0.1)
    return out


def drops(network: GatewayNetwork) -> dict[str, int]:
    return {
        name: network.counter(pc.C_DROP_COUNTER, reason) for reason, name in pc.DROP_NAMES.items()
    }


def drops_since(network: GatewayNetwork, before: dict[str, int]) -> dict[str, int]:
    """The NPM's drops by reason since `before` (a `drops` reading), reasons that moved only."""
    after = drops(network)
    return {k: after[k] - before[k] for k in after if after[k] != before[k]}


def flood(network: GatewayNetwork, rate: int, seconds: int, alone_mbps: float) -> dict[str, Any]:
    script = repo_root() / "run" / "bench-flood" / "flooder.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(FLOODER)
    before = drops(network)
    results: dict[str, Any] = {}

    def flooder() -> None:
        command = f"{sys.executable} {script} {OUT1} {rate} {seconds}"
        result = network.run("h2", command, timeout=seconds + 60)
        results["sent"] = int(result.output.split()[-1]) if result.returncode == 0 else 0

    def throughput() -> None:
        results["mbps"] = iperf(network, max(2, seconds - 3))

    threads = [threading.Thread(target=flooder), threading.Thread(target=throughput)]
    for thread in threads:
        thread.start()
    time.sleep(1)
    results["connect"] = measure(network, 20, "connect")
    results["api"] = api_times(network, max(1.0, seconds - 3 - 1))
    for thread in threads:
        thread.join()
    results["drops"] = drops_since(network, before)
    results["kept"] = results["mbps"] / alone_mbps if alone_mbps else 0.0
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="2000,8000")
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_flood: skipped, Mininet needs root")
        return 0
    rates = [int(r) for r in args.rates.split(",")]
    root = repo_root()
    spec = load_topology(root / "topo" / "gateway.yaml", root=root)
    choice = select_target()
    rows: list[tuple[str, int, dict[str, Any]]] = []
    with GatewayNetwork(spec, root / "run" / "bench-flood", target=choice) as network:
        running = network.api("GET", "/api/v1/policy")
        path = str(spec.policy)
        for name, text in (
            ("routed (data-plane sessions)", without_masquerade(running["text"])),
            ("masqueraded by the NPM", running["text"]),
            ("masqueraded by the CPM", with_controller_nat(running["text"])),
        ):
            network.api("POST", "/api/v1/policy/apply", json={"path": path, "text": text})
            alone = iperf(network, max(2, args.seconds - 3))
            for rate in rates:
                rows.append((name, rate, flood(network, rate, args.seconds, alone)))
    print(
        f"Command: `{' '.join(['python -m bench.bench_flood', *(argv or sys.argv[1:])])}`, "
        f"target {choice.target.value}, {args.seconds} s per flood\n"
    )
    print(
        "| policy | flood offered (flows/s) | sent | h1 connects ok | connect p50 / p99 ms "
        "| iperf3 kept | API p50 / p99 ms | NPM drops during the flood |"
    )
    print("|---|---:|---:|---:|---|---:|---|---|")
    for name, rate, r in rows:
        c = r["connect"]
        ok = "0/20" if "error" in c else f"{c['n'] - c['failed']}/{c['n']}"
        times = "-" if "error" in c else f"{c['p50']:.1f} / {c['p99']:.1f}"
        api = r["api"]
        dropped = ", ".join(f"{k} {v}" for k, v in sorted(r["drops"].items())) or "none"
        print(
            f"| {name} | {rate} | {r['sent']} | {ok} | {times} | {r['kept'] * 100:.0f} % "
            f"| {percentile(api, 50):.1f} / {percentile(api, 99):.1f} | {dropped} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
