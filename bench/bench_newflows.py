"""The new-flow rate the gateway sustains with no session lost: sessions made by the NPM (routed;
routed with the CPM's exact entries on demand; masqueraded) against sessions made by the CPM
(masqueraded, `data_plane_ports: off`).

    sudo .venv/bin/python -m bench.bench_newflows [--rates 2000,8000,16000] [--seconds 4]
        [--policies routed,ondemand,npm,cpm]

Needs root (Mininet). h2 opens `rate` new UDP flows a second (one 18-byte datagram each, each flow
new to the run) to out1 for `--seconds`, sent by bench.csender (the paced C sender) on h2's
interface, so that the sender is not what limits the rate. out1 counts what arrives in its kernel
(an nftables counter that drops them before any socket, so no receiving program and no ICMP
errors); the CPM's `installed` and `slot_only` counters count the sessions it installed or recorded
without entries (`ondemand`: `sessions.data_plane_entries: on_demand`); the NPM's drop counter says
where the rest went, and its port counters (`NPM in / out`: taken in by its ingress pipeline from
h2's port, sent by its egress pipeline out of out1's) whether a packet was lost between its
pipelines (BMv2's 64-packet egress queue drops uncounted) or after them. A rate is sustained when
every flow arrived and every flow became a session. The policy is the example policy without
inspection (the SPMs are measured elsewhere), without the CPU meters and the per-source new-flow
limit (they cap the rate on purpose), and with a 2 s UDP idle timeout (`--udp-idle`), so that each
rate starts with empty tables. A rate can be sustained only if the session table holds the flows of
one idle timeout (about rate x timeout sessions at once): the bench prints that bound. Each rate
lasts 4 s by default: 2 s of flows fit in the switch's digest ring (65,536) and in the session
table without the CPM removing any session, so they measured how much a burst the gateway absorbs,
not the rate it sustains (64,000 flows/s lossless for 2 s, 32,000 for 4 s, on 2026-11-27).

The reference row, "one flow (the switch's own rate)", sends the same datagram of one flow at
each rate through the routed policy: every packet but the first hits an existing session, so it
is the packet rate the switch forwards when no packet opens a flow, the ceiling the issue sets
for opening packets. The software switch's own losses (frames its receive rings could not hold,
digests its digest ring could not hold) come from its log, which it writes when they grow.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import httpx

from bench.bench_flood import (
    chosen_policies,
    drops,
    drops_since,
    flood_frames,
    flooder,
    policy_variants,
)
from bench.csender import MAX_FRAMES, binary, write_frames
from opengate import p4constants as pc
from opengate.p4info import P4Schema
from opengate.target import p4_build_dir, repo_root, select_target
from softswitch.native.dataplane import LOSS_REPORT_SECONDS
from topo.model import TopologySpec, load_topology
from topo.net import GatewayNetwork

# out1's kernel counts (and drops, before routing) the datagrams to the flood's ports.
COUNTER_TABLE = "ogbench"
COUNTER_RULES = f"""table ip {COUNTER_TABLE} {{
    counter flood {{}}
    chain pre {{
        type filter hook prerouting priority raw; policy accept;
        udp dport 20000-29999 counter name flood drop
    }}
}}
"""


def _nft(network: GatewayNetwork, command: str) -> str:
    result = network.run("out1", command, timeout=30)
    if result.returncode != 0:
        raise RuntimeError(f"nft on out1: {result.output.strip()}")
    return result.output


def arrived(network: GatewayNetwork) -> int:
    text = _nft(network, f"nft -j list counter ip {COUNTER_TABLE} flood")
    for item in json.loads(text[text.index("{") :])["nftables"]:
        if "counter" in item:
            return int(item["counter"]["packets"])
    raise RuntimeError("nft on out1: no counter in its output")


def measurement_policy(text: str, udp_idle: int = 2) -> str:
    """No inspection, no CPU meters, no new-flow limit, UDP sessions idle after `udp_idle` s."""
    out = re.sub(r"chain: [\w-]+, ", "", text)
    out = re.sub(r"bypass: (true|false), ", "", out)
    # the block on one line, or on lines of its own indented below it
    out = re.sub(r"\ncpu_meters:(?: [^\n]*)?\n(?:[ \t]+[^\n]*\n)*", "\n", out)
    out = re.sub(r"\n  new_flows_per_source: [^\n]*\n", "\n", out)
    out = re.sub(r"udp: \d+", f"udp: {udp_idle}", out)
    return out


def session_counts(network: GatewayNetwork) -> tuple[int, int]:
    """Sessions the CPM made: (installed with exact entries, recorded without them: a slot
    carries them)."""
    sessions = network.api("GET", "/api/v1/status")["sessions"]
    return int(sessions["installed"]), int(sessions["slot_only"])


def installed(network: GatewayNetwork) -> int:
    return sum(session_counts(network))


def active(network: GatewayNetwork) -> int:
    return int(network.api("GET", "/api/v1/status")["sessions"]["active"])


def pending(network: GatewayNetwork) -> int:
    return int(network.api("GET", "/api/v1/status")["events_pending"])


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


def packet_ins(network: GatewayNetwork) -> int:
    """Packet-ins the CPM has taken (all NPMs, all reasons), from its Prometheus metrics."""
    response = httpx.get(
        f"http://{network.api_address}/metrics",
        headers={"Authorization": f"Bearer {network.api_token}"},
        timeout=10.0,
    )
    response.raise_for_status()
    return int(
        sum(
            float(line.rsplit(" ", 1)[1])
            for line in response.text.splitlines()
            if line.startswith("opengate_packet_ins_total{")
        )
    )


POLICIES = {
    "routed": "routed: sessions made by the NPM",
    "ondemand": "routed, exact entries on demand",
    "npm": "masqueraded by the NPM",
    "cpm": "masqueraded by the CPM",
}
REFERENCE = "one flow (the switch's own rate)"
LOSS_LINE = re.compile(
    r"lost so far: (\d+) frames the receive rings could not hold, .* "
    r"(\d+) digests the digest ring could not hold"
)
# the P4Runtime server's bound on what waits for the controller's stream
STREAM_LINE = re.compile(
    r"stream held \d+ messages: dropped so far (\d+) digest samples, (\d+) packet-ins"
)


def switch_losses(log: Path) -> tuple[int, int, int, int]:
    """The software switch's losses so far, from its last reports in `log`: frames its receive
    rings and digests its digest ring could not hold, digest samples and packet-ins its stream
    to the controller could not hold (zeros when it reported none, or for BMv2, which writes no
    such lines)."""
    rings, stream = (0, 0), (0, 0)
    if log.exists():
        for line in log.read_text(errors="replace").splitlines():
            if m := LOSS_LINE.search(line):
                rings = (int(m.group(1)), int(m.group(2)))
            if m := STREAM_LINE.search(line):
                stream = (int(m.group(1)), int(m.group(2)))
    return (*rings, *stream)


def npm_port(spec: TopologySpec, host: str) -> int:
    """The first NPM's port that reaches `host`."""
    port = spec.host_port(spec.npms[0], spec.host(host))
    if port is None:
        raise RuntimeError(f"{spec.npms[0].name} has no port to {host}")
    return port


def port_counts(network: GatewayNetwork) -> tuple[int, int]:
    """Packets the NPM took in from h2's port (its ingress pipeline) and sent out of out1's
    (its egress pipeline), from its port counters: what left the egress pipeline but did not
    arrive was lost after the switch's pipelines; what the ingress pipeline forwarded (taken in,
    less its counted drops) but the egress pipeline never saw, between them, in the switch's
    queues."""
    rx = network.counter_cells(pc.C_PORT_RX_COUNTER, index=npm_port(network.spec, "h2"))
    tx = network.counter_cells(pc.C_PORT_TX_COUNTER, index=npm_port(network.spec, "out1"))
    return sum(rx.values()), sum(tx.values())


def lost(r: dict[str, Any]) -> int:
    """Flows (packets, for the one-flow row) sent but not both arrived and made a session; the
    one-flow row expects one session for all its packets."""
    if r["one_flow"]:
        return int(r["sent"] - r["received"] if r["installed"] == 1 else r["sent"])
    return int(r["sent"] - min(r["received"], r["installed"]))


def one_rate(
    network: GatewayNetwork, rate: int, seconds: int, phase: int, one_flow: bool = False
) -> dict[str, Any]:
    frames = repo_root() / "run" / "bench-newflows" / "flows.frames"
    frames.parent.mkdir(parents=True, exist_ok=True)
    # more frames than the sender can send in time, so that none is sent twice; or one frame
    # sent again and again
    count = 1 if one_flow else rate * seconds + 4096
    write_frames(frames, flood_frames(network.spec, count, phase))
    log = repo_root() / "run" / "bench-newflows" / "npm1.log"
    before_losses = switch_losses(log)
    before_drops, before_counts = drops(network), session_counts(network)
    before_installed = sum(before_counts)
    before_arrived, before_packet_ins = arrived(network), packet_ins(network)
    before_ports = port_counts(network)
    result = network.run(
        "h2", f"{binary()} h2-eth0 {frames} {rate} {seconds}", timeout=seconds + 60
    )
    if result.returncode != 0:
        raise RuntimeError(f"sender on h2: {result.output.strip()}")
    out: dict[str, Any] = {"sent": int(result.output.split()[-2])}
    # The sessions first: a packet the CPM sets up arrives only after its Write (a quiet second
    # of arrivals while the CPM works through a backlog is not the end).
    out["installed"] = settle(lambda: installed(network), quiet=2.0) - before_installed
    out["with_entries"] = session_counts(network)[0] - before_counts[0]
    out["received"] = settle(lambda: arrived(network), quiet=1.0) - before_arrived
    out["drops"] = drops_since(network, before_drops)
    after_ports = port_counts(network)
    out["npm_in"] = after_ports[0] - before_ports[0]
    out["npm_out"] = after_ports[1] - before_ports[1]
    out["packet_ins"] = packet_ins(network) - before_packet_ins
    out["one_flow"] = one_flow
    settle(lambda: active(network), quiet=2.0)  # the 2 s idle timeout empties the tables
    deadline = time.monotonic() + 300
    while pending(network) and time.monotonic() < deadline:  # the CPM catches up
        time.sleep(0.2)
    # the switch reports a loss at most LOSS_REPORT_SECONDS (+ its 1 s wake-up) after the last
    # report: wait that long for the last of this rate
    time.sleep(LOSS_REPORT_SECONDS + 1)
    after = switch_losses(log)
    out["ring"] = after[0] - before_losses[0]
    out["digests"] = after[1] - before_losses[1]
    out["stream"] = (after[2] - before_losses[2], after[3] - before_losses[3])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="2000,8000,16000,32000,64000")
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument("--policies", default=",".join(POLICIES), help=",".join(POLICIES))
    parser.add_argument(
        "--udp-idle",
        type=int,
        default=2,
        help="UDP idle timeout, s: the sessions a rate needs at once are about rate x this",
    )
    args = parser.parse_args(argv)
    chosen = chosen_policies(parser, args.policies)
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
        base = measurement_policy(running["text"], args.udp_idle)
        _nft(network, f"nft -f - <<'EOF'\n{COUNTER_RULES}EOF")
        texts = policy_variants(base, sorted({"routed", *chosen}), flooder=str(flooder(spec).ip.ip))
        phase = 0
        for key in ["reference", *chosen]:
            name = REFERENCE if key == "reference" else POLICIES[key]
            text = texts["routed" if key == "reference" else key]
            # after a rate the CPM may still be working through refused Writes (a full table):
            # the apply waits its turn in the CPM's queue
            network.api(
                "POST", "/api/v1/policy/apply", json={"path": path, "text": text}, timeout=300.0
            )
            settle(lambda: active(network), quiet=2.0)
            for rate in rates:
                if rate * args.seconds + 4096 > MAX_FRAMES:
                    raise SystemExit(
                        f"bench_newflows: {rate} flows/s for {args.seconds} s: too many"
                    )
                one = key == "reference"
                rows.append((name, rate, one_rate(network, rate, args.seconds, phase, one)))
                phase += 1
    print(
        f"New flows from h2 at each rate, {args.seconds} s per rate, UDP idle after "
        f"{args.udp_idle} s, target {choice.target.value}\n"
    )
    print(
        "| sessions made by | offered flows/s | sent | NPM in / out (port counters) | arrived "
        "| sessions | of them with exact entries | lost | of them via the CPM (packet-ins) "
        "| NPM drops | switch ring drops (receive / digest) "
        "| stream drops (digest samples / packet-ins) |"
    )
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---|---|---|")
    for name, rate, r in rows:
        dropped = ", ".join(f"{k} {v}" for k, v in sorted(r["drops"].items())) or "none"
        print(
            f"| {name} | {rate} | {r['sent']} | {r['npm_in']} / {r['npm_out']} "
            f"| {r['received']} | {r['installed']} "
            f"| {r['with_entries']} | {lost(r)} "
            f"| {r['packet_ins']} | {dropped} | {r['ring']} / {r['digests']} "
            f"| {r['stream'][0]} / {r['stream'][1]} |"
        )
    best: dict[str, int] = {}
    for name in dict.fromkeys(n for n, _, _ in rows):
        kept = [rate for n, rate, r in rows if n == name and lost(r) == 0]
        best[name] = max(kept) if kept else 0
    print("\nThe highest rate with nothing lost: sessions made by the NPM against the CPM\n")
    print(
        "| sessions made by | highest rate with nothing lost | vs masqueraded by the CPM "
        "| vs the switch's own rate |"
    )
    print("|---|---:|---:|---:|")
    cpm, own = best.get(POLICIES["cpm"], 0), best.get(REFERENCE, 0)
    for name, rate in best.items():
        what = "packets" if name == REFERENCE else "flows"
        vs_cpm = f"{rate / cpm:.1f}x" if cpm and name != REFERENCE else "-"
        vs_own = f"{rate / own:.2f}x" if own and rate else "-"
        print(f"| {name} | {f'{rate} {what}/s' if rate else 'none'} | {vs_cpm} | {vs_own} |")
    schema = P4Schema.load(p4_build_dir() / "opengate.p4info.txtpb")
    sessions = schema.tables.get(pc.T_SESSION).size // 2  # two entries, one per direction
    bound = sessions // min(args.udp_idle, args.seconds)
    print(
        f"\nThe session table holds {sessions} sessions; at {args.udp_idle} s idle, a rate above "
        f"about {bound} flows/s for {args.seconds} s cannot all be sessions; no rate above "
        f"{max(rates)}/s was offered."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
