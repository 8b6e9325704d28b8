"""TCP connect time through the gateway in Mininet (h1 -> out1:80, each a new connection), with
sessions made by the data plane (routed: the example policy without masquerade, with its exact
entries always written or on demand, inspected by the SPMs or not; masqueraded: the example
policy) and by the controller (the example policy with `data_plane_ports: off`), beside the
round trips on flows whose sessions already exist (ICMP echo, answered by out1's kernel as a SYN
is, and UDP echo, answered by a process; the same path through the NPM and an SPM), taken in
turn with the connections so that all see the same background work; and connections through
the example policy's port forward (out1 -> 198.51.100.1:8080 -> h1:80), carried by the data
plane or, with `data_plane_ports: off`, by the controller.

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

# Run on h1: N new connections, each timed from connect() to established; or ("paired") a new
# connection, then a round trip on an existing ICMP echo flow and one on an existing UDP echo
# flow (out1's echo service), N times in turn, so that all see the same background: the CPM's
# work for the connections made so far (their digests, entries, closes) runs beside each. An
# ICMP echo is answered by out1's kernel, as a SYN is; the UDP echo by a process there, which
# must first be woken.
CLIENT = r"""
import json, os, socket, struct, sys, time
host, n, mode, port = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])

def connect():
    s = socket.socket()
    s.settimeout(10)
    t = time.perf_counter()
    try:
        s.connect((host, port))
        return time.perf_counter() - t
    except OSError:
        return None
    finally:
        s.close()

def echo_flow():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    s.connect((host, 7))
    s.send(b"first")
    s.recv(2048)
    return s

def round_trip(s):
    t = time.perf_counter()
    s.send(b"ping")
    try:
        s.recv(2048)
        return time.perf_counter() - t
    except OSError:
        return None

def checksum(data):
    total = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    total = (total & 0xFFFF) + (total >> 16)
    return ~((total & 0xFFFF) + (total >> 16)) & 0xFFFF

class Pinger:
    # ICMP echo requests with one identifier: one flow, whose session the first one makes.
    def __init__(self):
        self.s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        self.ident, self.seq = os.getpid() & 0xFFFF, 0
        if self.ping() is None:
            raise SystemExit("no answer to the first ICMP echo request")

    def ping(self, timeout=5.0):
        self.seq = (self.seq + 1) & 0xFFFF
        body = struct.pack("!BBHHH", 8, 0, 0, self.ident, self.seq) + b"opengate-bench!!"
        body = body[:2] + struct.pack("!H", checksum(body)) + body[4:]
        t = time.perf_counter()
        self.s.sendto(body, (host, 0))
        while True:
            left = timeout - (time.perf_counter() - t)
            if left <= 0:
                return None
            self.s.settimeout(left)
            try:
                data = self.s.recv(2048)
            except OSError:
                return None
            icmp = data[(data[0] & 0x0F) * 4:]
            if icmp[0] == 0 and struct.unpack("!HH", icmp[4:8]) == (self.ident, self.seq):
                return time.perf_counter() - t

if mode == "connect":
    out = [connect() for _ in range(n)]
else:
    s, pinger = echo_flow(), Pinger()
    out = {"connect": [], "icmp": [], "udp": []}
    for _ in range(n):
        out["connect"].append(connect())
        out["icmp"].append(pinger.ping())
        out["udp"].append(round_trip(s))
print(json.dumps(out))
"""


def summary(times: list[float | None]) -> dict[str, Any]:
    """p50 / p99 / max in ms of the times (seconds; None: failed), failures and stalls."""
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


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def run_client(
    network: GatewayNetwork, n: int, mode: str, client: str, server: tuple[str, int]
) -> Any:
    """The client's output (its JSON), or a dict with "error"."""
    path = repo_root() / "run" / "bench-sessions" / "client.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(CLIENT)
    host, port = server
    result = network.run(
        client, f"{sys.executable} {path} {host} {n} {mode} {port}", timeout=n * 24 + 60
    )
    if result.returncode != 0:
        return {"error": result.output.strip().splitlines()[-1:] or ["client failed"]}
    return json.loads(result.output.strip().splitlines()[-1])


def measure(
    network: GatewayNetwork,
    n: int,
    client: str = "h1",
    server: tuple[str, int] = (OUT1, 80),
) -> dict[str, Any]:
    """`n` new connections from `client` to `server`."""
    out = run_client(network, n, "connect", client, server)
    return out if isinstance(out, dict) else summary(out)


def measure_paired(network: GatewayNetwork, n: int) -> dict[str, dict[str, Any]]:
    """`n` new connections from h1 to out1:80, each followed by a round trip on one existing
    ICMP echo flow and one on one existing UDP echo flow: their summaries, by "connect", "icmp"
    and "udp"."""
    out = run_client(network, n, "paired", "h1", (OUT1, 80))
    if "error" in out:
        return {"connect": out, "icmp": out, "udp": out}
    return {k: summary(v) for k, v in out.items()}


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
    pairs: list[tuple[str, dict[str, dict[str, Any]]]] = []
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
            paired = measure_paired(network, args.connections)
            pairs.append((name, paired))
            rows.append((f"{name}: session made by {maker}", paired["connect"]))
            rows.append((f"{name}: ICMP echo on an existing session", paired["icmp"]))
            rows.append((f"{name}: UDP echo on an existing session", paired["udp"]))
            if not name.startswith("routed"):
                # The example policy's port forward, out1 -> 198.51.100.1:8080 -> h1:80.
                forwarded = measure(network, args.connections, "out1", (GATEWAY_OUTSIDE, 8080))
                rows.append((f"port forward ({name}): session made by {maker}", forwarded))
    print(
        f"TCP connect times h1 -> out1:80, {args.connections} each, target "
        f"{choice.target.value}: sessions made by the data plane against the CPM\n"
    )
    print("| what | n | failed | p50 ms | p99 ms | max ms | over 900 ms | p50 / p99 vs the CPM's |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    made_by_cpm = {
        name.startswith("port forward"): r
        for name, r in rows
        if name.endswith("session made by the CPM") and "error" not in r
    }
    for name, r in rows:
        if "error" in r:
            print(f"| {name} | failed: {r['error'][0]} | | | | | | |")
            continue
        peer = made_by_cpm.get(name.startswith("port forward"))
        vs_cpm = "-"
        if peer is not None and "session made by" in name:
            vs_cpm = f"{r['p50'] / peer['p50']:.2f}x / {r['p99'] / peer['p99']:.2f}x"
        print(
            f"| {name} | {r['n']} | {r['failed']} | {r['p50']:.2f} | {r['p99']:.2f} "
            f"| {r['max']:.1f} | {r['stalls']} | {vs_cpm} |"
        )
    print(
        "\nA new connection's p99 against the round trips on existing sessions taken in turn "
        "with it\n"
    )
    print(
        "| policy | new connection p99 ms | ICMP echo p99 ms | UDP echo p99 ms "
        "| new / ICMP echo | new / UDP echo |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, paired in pairs:
        new, icmp, udp = paired["connect"], paired["icmp"], paired["udp"]
        if any("error" in r for r in (new, icmp, udp)):
            print(f"| {name} | failed | | | | |")
            continue
        print(
            f"| {name} | {new['p99']:.2f} | {icmp['p99']:.2f} | {udp['p99']:.2f} "
            f"| {new['p99'] / icmp['p99']:.1f}x | {new['p99'] / udp['p99']:.1f}x |"
        )
    print(
        "\nAn ICMP echo flow is not inspected by the example policy's SPMs, the UDP echo flow is."
    )
    for name, r in rows:
        if r.get("stalled"):
            print(f"\n{name}: over 900 ms at attempts {r['stalled']} (0 = the first)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
