"""TCP connect time through the gateway in Mininet (h1 -> out1:80, each a new connection), with
sessions made by the data plane (routed: the example policy without masquerade, with its exact
entries always written or on demand, inspected by the SPMs or not; masqueraded: the example
policy) and by the controller (the example policy with `data_plane_ports: off`), beside the
round trip of a datagram on a flow whose session already exists (UDP echo, the same path through
the NPM and an SPM); and connections through the example policy's port forward (out1 ->
198.51.100.1:8080 -> h1:80), carried by the data plane or, with `data_plane_ports: off`, by the
controller.

    sudo .venv/bin/python -m bench.bench_sessions [--connections 200]

Needs root (Mininet). One topology on the selected target; the policies are switched through the
API. Figures: p50 / p99 / max of connect() in milliseconds, and how many took over 900 ms (a
retransmitted SYN: the stall data-plane sessions remove).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from opengate.target import repo_root, select_target
from topo.model import (
    load_topology,
    with_controller_nat,
    with_entries_on_demand,
    without_inspection,
    without_masquerade,
)
from topo.net import GatewayNetwork

OUT1 = "198.51.100.20"
GATEWAY_OUTSIDE = "198.51.100.1"

# Run on h1: N new connections, each timed from connect() to established; or N round trips of
# a UDP datagram to out1's echo service on one flow whose session already exists.
CLIENT = r"""
import json, socket, sys, time
host, n, mode, port = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
out = []
if mode == "connect":
    for _ in range(n):
        s = socket.socket()
        s.settimeout(10)
        t = time.perf_counter()
        try:
            s.connect((host, port))
            out.append(time.perf_counter() - t)
        except OSError:
            out.append(None)
        s.close()
else:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    s.connect((host, 7))
    s.send(b"first")
    s.recv(2048)
    for _ in range(n):
        t = time.perf_counter()
        s.send(b"ping")
        try:
            s.recv(2048)
            out.append(time.perf_counter() - t)
        except OSError:
            out.append(None)
print(json.dumps(out))
"""


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def measure(
    network: GatewayNetwork,
    n: int,
    mode: str,
    client: str = "h1",
    server: tuple[str, int] = (OUT1, 80),
) -> dict[str, Any]:
    path = repo_root() / "run" / "bench-sessions" / "client.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(CLIENT)
    host, port = server
    result = network.run(
        client, f"{sys.executable} {path} {host} {n} {mode} {port}", timeout=n * 12 + 60
    )
    if result.returncode != 0:
        return {"error": result.output.strip().splitlines()[-1:] or ["client failed"]}
    times = json.loads(result.output.strip().splitlines()[-1])
    ok = [t * 1000 for t in times if t is not None]
    if not ok:
        return {"error": ["no connection succeeded"]}
    return {
        "n": len(times),
        "failed": len(times) - len(ok),
        "p50": percentile(ok, 50),
        "p99": percentile(ok, 99),
        "max": max(ok),
        "stalls": sum(1 for t in ok if t > 900),
        "stalled": [i for i, t in enumerate(times) if t is not None and t > 0.9],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=200)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_sessions: skipped, Mininet needs root")
        return 0
    root = repo_root()
    spec = load_topology(root / "topo" / "gateway.yaml", root=root)
    run_dir = root / "run" / "bench-sessions"
    choice = select_target()
    rows: list[tuple[str, dict[str, Any]]] = []
    with GatewayNetwork(spec, run_dir, target=choice) as network:
        running = network.api("GET", "/api/v1/policy")
        path = str(spec.policy)
        policies = (
            ("routed", without_masquerade(running["text"]), "the data plane"),
            (
                "routed, exact entries on demand",
                with_entries_on_demand(without_masquerade(running["text"])),
                "the data plane",
            ),
            (
                "routed, no inspection",
                without_inspection(without_masquerade(running["text"])),
                "the data plane",
            ),
            (
                "routed, no inspection, exact entries on demand",
                with_entries_on_demand(without_inspection(without_masquerade(running["text"]))),
                "the data plane",
            ),
            ("masqueraded", running["text"], "the data plane"),
            ("masqueraded, data_plane_ports off", with_controller_nat(running["text"]), "the CPM"),
        )
        for name, text, maker in policies:
            network.api("POST", "/api/v1/policy/apply", json={"path": path, "text": text})
            for mode, what in (
                ("connect", f"session made by {maker}"),
                ("request", "round trip on an existing session"),
            ):
                rows.append((f"{name}: {what}", measure(network, args.connections, mode)))
            if not name.startswith("routed"):
                # The example policy's port forward, out1 -> 198.51.100.1:8080 -> h1:80.
                forwarded = measure(
                    network, args.connections, "connect", "out1", (GATEWAY_OUTSIDE, 8080)
                )
                rows.append((f"port forward ({name}): session made by {maker}", forwarded))
    print(
        f"Command: `{' '.join(['python -m bench.bench_sessions', *(argv or sys.argv[1:])])}`, "
        f"target {choice.target.value}, h1 -> out1:80, {args.connections} each\n"
    )
    print("| what | n | failed | p50 ms | p99 ms | max ms | over 900 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in rows:
        if "error" in r:
            print(f"| {name} | failed: {r['error'][0]} | | | | | |")
        else:
            print(
                f"| {name} | {r['n']} | {r['failed']} | {r['p50']:.2f} | {r['p99']:.2f} "
                f"| {r['max']:.1f} | {r['stalls']} |"
            )
    for name, r in rows:
        if r.get("stalled"):
            print(f"\n{name}: over 900 ms at attempts {r['stalled']} (0 = the first)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
