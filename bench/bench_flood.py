"""A flood of new UDP flows from one inside host, and what the other users of the gateway see.

    sudo .venv/bin/python -m bench.bench_flood [--rates 2000,8000] [--seconds 10]
        [--policies routed,ondemand,plain,npm,cpm] [--trace]

Needs root (Mininet). h2 sends 18-byte datagrams to out1, each a new flow, at each rate for
`--seconds`, with bench.csender (the paced C sender) on its interface: the flooding host's own CPU
is not the gateway's to measure (a Python loop took 5 % of a core). Meanwhile h1 runs one iperf3
TCP flow to out1 (its rate is compared with the same flow alone), opens 20 new TCP connections to
out1 (connect times), and the REST API is asked for its status every 100 ms (response times).
The policies: routed (the example policy without masquerade; `ondemand`: with its exact
entries on demand; `plain`: with no chain on any class, so that nothing is inspected;
`denied`: with the flood's UDP denied by a first ACL rule, so that the flood costs the NPM and the
machine its packets but makes no session, digest or SPM work) and the
example policy (masquerade), whose flows the NPM makes itself, and the example policy with
`data_plane_ports: off`, whose masqueraded flows go to the CPM. The
example policy limits each source to 1,000 new flows a second (2,000 at once). `--trace`
follows h1's connections through the NPM, the CPM and the SPMs during each flood
(`bench.connect_trace`: tcpdump on the NPM's ports and its P4Runtime connection).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench import connect_trace
from bench.bench_sessions import measure, percentile
from bench.csender import binary, write_frames
from opengate import p4constants as pc
from opengate.errors import ConfigError
from opengate.target import repo_root, select_target
from topo.model import (
    load_topology,
    with_controller_nat,
    with_entries_on_demand,
    with_source_denied,
    without_inspection,
    without_masquerade,
)
from topo.net import GatewayNetwork

OUT1 = "198.51.100.20"
CPU_TOP = 10  # processes listed per flood
CPM_LABEL = "opengate.cli"  # the CPM's process, as `_label` names it
QUIET_SHARE = 0.1  # of a core: the CPM is quiet below this (`wait_for_quiet_cpm`)
QUIET_LIMIT = 120.0  # seconds
POLICIES = {
    "routed": "routed (data-plane sessions)",
    "ondemand": "routed, exact entries on demand",
    "plain": "routed, no inspection",
    "denied": "routed, the flood denied by the ACL",
    "npm": "masqueraded by the NPM",
    "cpm": "masqueraded by the CPM",
}


def policy_variants(text: str, keys: list[str], flooder: str | None = None) -> dict[str, str]:
    """The policies these benches compare, by their `--policies` key, made from `text`: only
    `keys`' (a variant needs what it removes: `plain` a chain, all but `npm` a masquerade;
    `denied` the flooding host's address, `flooder`)."""

    def denied(t: str) -> str:
        if flooder is None:
            raise ConfigError("the policy `denied` needs the flooding host's address")
        return with_source_denied(without_masquerade(t), flooder, "udp")

    makers: dict[str, Callable[[str], str]] = {
        "routed": without_masquerade,
        "ondemand": lambda t: with_entries_on_demand(without_masquerade(t)),
        "plain": lambda t: without_inspection(without_masquerade(t)),
        "denied": denied,
        "npm": lambda t: t,
        "cpm": with_controller_nat,
    }
    return {key: makers[key](text) for key in keys}


def chosen_policies(parser: argparse.ArgumentParser, value: str) -> list[str]:
    """The `--policies` keys in `value` (comma-separated); an unknown one stops with an error."""
    chosen = [p.strip() for p in value.split(",") if p.strip()]
    unknown = [p for p in chosen if p not in POLICIES]
    if unknown:
        parser.error(f"unknown policy {', '.join(unknown)}; known: {', '.join(POLICIES)}")
    return chosen


FLOOD_PAYLOAD = b"x" * 10


def flooder(spec: Any) -> Any:
    """The host that floods: h2."""
    return next(h for h in spec.hosts if h.name == "h2")


def flood_ports(i: int, phase: int) -> tuple[int, int]:
    """(source, destination) port of the flood's `i`th datagram in `phase`: source ports
    1024-65535, then the next destination port; each phase's destination ports its own."""
    return 1024 + i % 64512, 20000 + 64 * phase + i // 64512


def flood_frames(spec: Any, n: int, phase: int) -> list[bytes]:
    """`n` UDP datagrams from h2 to out1 (18 bytes of UDP), each its own flow: source ports
    1024-65535, then the next destination port; each phase (policy) has destination ports of its
    own, so that no flow of an earlier phase is met again while its session lives."""
    h2 = flooder(spec)
    lan = next(lan for lan in spec.lans if lan.name == h2.lan)
    eth = bytes.fromhex(lan.gateway_mac.replace(":", "")) + bytes.fromhex(h2.mac.replace(":", ""))
    eth += b"\x08\x00"
    src, dst = int(h2.ip.ip), int(ipaddress.IPv4Address(OUT1))
    udp_len = 8 + len(FLOOD_PAYLOAD)
    frames = []
    for i in range(n):
        sport, dport = flood_ports(i, phase)
        ip = bytearray(
            struct.pack("!BBHHHBBHII", 0x45, 0, 20 + udp_len, i & 0xFFFF, 0, 64, 17, 0, src, dst)
        )
        total = sum(struct.unpack("!10H", ip))
        total = (total & 0xFFFF) + (total >> 16)
        total = (total & 0xFFFF) + (total >> 16)
        struct.pack_into("!H", ip, 10, ~total & 0xFFFF)
        frames.append(
            eth + bytes(ip) + struct.pack("!HHHH", sport, dport, udp_len, 0) + FLOOD_PAYLOAD
        )
    return frames


def iperf_seconds(flood_seconds: int) -> int:
    """How long iperf3 runs, alone and in a flood of `flood_seconds` (it starts with the flood
    and ends before it, so that the flood's start and end are not in its rate)."""
    return max(2, flood_seconds - 3)


def iperf(network: GatewayNetwork, seconds: int) -> float:
    result = network.run("h1", f"iperf3 -c {OUT1} -t {seconds} -J", timeout=seconds + 60)
    if result.returncode != 0:
        return 0.0
    return float(json.loads(result.output)["end"]["sum_received"]["bits_per_second"]) / 1e6


def iperf_and_cpu(network: GatewayNetwork, seconds: int) -> tuple[float, dict[str, float]]:
    """iperf3's rate (alone or in a flood), and where the CPU went while it ran (`cpu_while`)."""
    shares: dict[str, float] = {}
    thread = threading.Thread(target=lambda: shares.update(cpu_while(seconds)))
    thread.start()
    try:
        return iperf(network, seconds), shares
    finally:
        thread.join()


def api_times(network: GatewayNetwork, seconds: float) -> list[float]:
    out: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        network.api("GET", "/api/v1/status")
        out.append((time.perf_counter() - started) * 1000)
        time.sleep(0.1)
    return out


def drops(
    network: GatewayNetwork,
    counter: str = pc.C_DROP_COUNTER,
    names: dict[int, str] = pc.DROP_NAMES,
) -> dict[str, int]:
    """The NPM's drops by reason (or another counter's cells by `names`), in one read."""
    cells = network.counter_cells(counter)
    return {name: cells.get(index, 0) for index, name in names.items()}


def drops_since(
    network: GatewayNetwork,
    before: dict[str, int],
    counter: str = pc.C_DROP_COUNTER,
    names: dict[int, str] = pc.DROP_NAMES,
) -> dict[str, int]:
    """The NPM's drops by reason (or `counter`'s cells) since `before`, the cells that moved."""
    after = drops(network, counter, names)
    return {k: after[k] - before[k] for k in after if after[k] != before[k]}


def flow_events(network: GatewayNetwork) -> dict[str, int]:
    """The data-plane session events (flow_event_counter) by name."""
    return drops(network, pc.C_FLOW_EVENT_COUNTER, pc.FLOW_EVENT_NAMES)


def spm_queue_drops(network: GatewayNetwork, after: float = 0.0) -> int:
    """Packets the SPMs' kernel queues dropped since they started, from their load reports
    (sent every second), waiting up to 5 s for reports made after time.time() `after`."""
    deadline = time.monotonic() + 5.0
    while True:
        spms = network.api("GET", "/api/v1/spms")["spms"].values()
        reports = [s.get("report") or {} for s in spms]
        fresh = all(float(r.get("ts") or 0) > after for r in reports)
        if fresh or time.monotonic() > deadline:
            return sum(int(r.get("queue_dropped", 0)) for r in reports)
        time.sleep(0.2)


def setup_buckets(network: GatewayNetwork) -> dict[str, dict[float, float]]:
    """The CPM's `opengate_session_setup_seconds` histogram (from a digest's or packet-in's
    arrival to its sessions written), by source (`digest`, `packet_in`): the cumulative count
    per bucket's upper bound, summed over NPMs."""
    out: dict[str, dict[float, float]] = {}
    for family in text_string_to_metric_families(network.api_text("/metrics")):
        if family.name != "opengate_session_setup_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                cells = out.setdefault(sample.labels["source"], {})
                bound = float(sample.labels["le"])
                cells[bound] = cells.get(bound, 0.0) + sample.value
    return out


def setup_quantiles(
    before: dict[str, dict[float, float]], after: dict[str, dict[float, float]]
) -> dict[str, tuple[int, float, float]]:
    """Per source, from two `setup_buckets` readings: how many set-ups came between them, and
    the bucket bounds (seconds) within which half of them, and 99 %, were done."""
    out: dict[str, tuple[int, float, float]] = {}
    for source, cells in after.items():
        counts = {b: n - before.get(source, {}).get(b, 0.0) for b, n in cells.items()}
        total = counts.get(float("inf"), 0.0)
        if total <= 0:
            continue
        out[source] = (int(total), _within(counts, 0.5), _within(counts, 0.99))
    return out


def _within(counts: dict[float, float], q: float) -> float:
    """The first bucket bound by which the share `q` of the count was done."""
    total = counts[float("inf")]
    return next(b for b in sorted(counts) if counts[b] >= q * total)


def spm_queue_depths(network: GatewayNetwork, seconds: float) -> list[tuple[int, int]]:
    """The SPMs' queues, summed over SPMs, from their load reports, read every 0.5 s for
    `seconds`: (packets not yet answered, those of them the dispatchers have read)."""
    out: list[tuple[int, int]] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        spms = network.api("GET", "/api/v1/spms")["spms"].values()
        reports = [s.get("report") or {} for s in spms]
        out.append(
            (
                sum(int(r.get("queue_depth", 0)) for r in reports),
                sum(int(r.get("queue_held", 0)) for r in reports),
            )
        )
        time.sleep(0.5)
    return out


TICKS = os.sysconf("SC_CLK_TCK")


def _label(pid: str) -> str:
    """A short name for a process: its program, and for Python programs their module."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    words = [a.decode(errors="replace") for a in argv if a]
    if not words:  # a kernel thread: by its name, without the CPU number
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            return "?"
        return "kernel " + comm.split("/")[0]
    program = Path(words[0]).name
    if program.startswith("python") and "-m" in words[:-1]:
        module = words[words.index("-m") + 1]
        if module == "opengate" and len(words) > words.index("-m") + 2:
            return f"opengate {words[words.index('-m') + 2]}"
        return module
    return program


def cpu_ticks() -> dict[str, int]:
    """CPU ticks used so far (user + system) by every process, summed by `_label`, and the
    machine's idle ticks as "idle"."""
    out: dict[str, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        label = _label(entry.name)
        out[label] = out.get(label, 0) + int(fields[11]) + int(fields[12])
    cpu = Path("/proc/stat").read_text().splitlines()[0].split()
    out["idle"] = int(cpu[4]) + int(cpu[5])
    out["kernel: interrupts"] = int(cpu[6]) + int(cpu[7])
    return out


def wait_for_quiet_cpm(limit: float = QUIET_LIMIT) -> float:
    """Wait (at most `limit` seconds) until the CPM has used less than `QUIET_SHARE` of a core
    for a second: after a policy apply it may still be holding the last flood's sessions to the
    new policy (the `denied` variant blocks 12,000 of them), which would be in iperf3's rate
    alone. Returns the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        before, t0 = cpu_ticks(), time.monotonic()
        if CPM_LABEL not in before:
            raise RuntimeError(f"no process is labelled {CPM_LABEL!r}: where is the CPM?")
        time.sleep(1.0)
        if cpu_shares(before, cpu_ticks(), time.monotonic() - t0).get(CPM_LABEL, 0.0) < QUIET_SHARE:
            break
    return time.monotonic() - started


def cpu_while(seconds: float) -> dict[str, float]:
    """The CPU shares (`cpu_shares`) from 1 s after now to 0.5 s before `seconds` from now: the
    middle of an iperf3 run that starts now, without its start-up and its end."""
    time.sleep(1.0)
    before, started = cpu_ticks(), time.monotonic()
    time.sleep(max(0.5, seconds - 1.5))
    return cpu_shares(before, cpu_ticks(), time.monotonic() - started)


def cpu_shares(before: dict[str, int], after: dict[str, int], seconds: float) -> dict[str, float]:
    """Per label, the share of one core used between two `cpu_ticks` readings."""
    return {
        k: (after[k] - before.get(k, 0)) / TICKS / seconds
        for k in after
        if after[k] > before.get(k, 0)
    }


def flood(
    network: GatewayNetwork,
    rate: int,
    seconds: int,
    alone_mbps: float,
    phase: int,
    trace: bool = False,
) -> dict[str, Any]:
    """One flood and what h1, iperf3, the API, the CPM and the SPMs saw; `trace`: with h1's
    connects followed through the gateway (`connect_trace`), its captures stopped whatever
    happens."""
    if not trace:
        return _flood(network, rate, seconds, alone_mbps, phase)
    npm = network.spec.npms[0].name
    grpc_port = int(network.net.get(npm).grpc_address.rsplit(":", 1)[1])
    where = repo_root() / "run" / "bench-flood" / f"trace-{phase}"
    capture = connect_trace.start(network.spec, npm, grpc_port, where)
    try:
        results = _flood(network, rate, seconds, alone_mbps, phase)
    finally:
        capture.stop()
    results["trace"] = connect_trace.analyse(capture)
    return results


def _flood(
    network: GatewayNetwork, rate: int, seconds: int, alone_mbps: float, phase: int
) -> dict[str, Any]:
    frames = repo_root() / "run" / "bench-flood" / "flood.frames"
    frames.parent.mkdir(parents=True, exist_ok=True)
    write_frames(frames, flood_frames(network.spec, rate * seconds, phase))
    before = drops(network)
    events_before = flow_events(network)
    setup_before = setup_buckets(network)
    spm_before = spm_queue_drops(network)
    results: dict[str, Any] = {}

    def flooder() -> None:
        command = f"{binary()} h2-eth0 {frames} {rate} {seconds}"
        result = network.run("h2", command, timeout=seconds + 60)
        results["sent"] = int(result.output.split()[-2]) if result.returncode == 0 else 0

    def throughput() -> None:  # the CPU while iperf3 runs (not after it, as until 2026-11-30)
        results["mbps"], results["cpu"] = iperf_and_cpu(network, iperf_seconds(seconds))

    def queues() -> None:
        results["spm_queue"] = spm_queue_depths(network, max(1.0, seconds - 1))

    threads = [
        threading.Thread(target=flooder),
        threading.Thread(target=throughput),
        threading.Thread(target=queues),
    ]
    for thread in threads:
        thread.start()
    time.sleep(1)
    results["connect"] = measure(network, 20)
    results["api"] = api_times(network, max(1.0, iperf_seconds(seconds) - 1))
    for thread in threads:
        thread.join()
    results["drops"] = drops_since(network, before)
    results["events"] = drops_since(
        network, events_before, pc.C_FLOW_EVENT_COUNTER, pc.FLOW_EVENT_NAMES
    )
    results["spm_drops"] = spm_queue_drops(network, time.time()) - spm_before
    results["setup"] = setup_quantiles(setup_before, setup_buckets(network))
    results["alone"] = alone_mbps
    results["kept"] = results["mbps"] / alone_mbps if alone_mbps else 0.0
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="2000,8000")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--policies", default=",".join(POLICIES), help=",".join(POLICIES))
    parser.add_argument(
        "--trace",
        action="store_true",
        help="capture h1's connections on the NPM's ports and P4Runtime connection "
        "(tcpdump) and print where their time went",
    )
    args = parser.parse_args(argv)
    chosen = chosen_policies(parser, args.policies)
    if os.geteuid() != 0:
        print("bench_flood: skipped, Mininet needs root")
        return 0
    rates = [int(r) for r in args.rates.split(",")]
    root = repo_root()
    spec = load_topology(root / "topo" / "gateway.yaml", root=root)
    choice = select_target()
    rows: list[tuple[str, int, dict[str, Any]]] = []
    alone_cpu: list[tuple[str, dict[str, float]]] = []
    stopped = ""
    with GatewayNetwork(spec, root / "run" / "bench-flood", target=choice) as network:
        running = network.api("GET", "/api/v1/policy")
        path = str(spec.policy)
        texts = policy_variants(running["text"], chosen, flooder=str(flooder(spec).ip.ip))
        try:
            for name, text in ((POLICIES[key], texts[key]) for key in chosen):
                network.api("POST", "/api/v1/policy/apply", json={"path": path, "text": text})
                waited = wait_for_quiet_cpm()
                alone, shares = iperf_and_cpu(network, iperf_seconds(args.seconds))
                alone_cpu.append((f"{name} (after {waited:.0f} s for a quiet CPM)", shares))
                for rate in rates:
                    phase = len(rows)
                    rows.append(
                        (name, rate, flood(network, rate, args.seconds, alone, phase, args.trace))
                    )
        except ConnectionError as error:  # the switch went away (BMv2 has aborted in a flood)
            logs = ", ".join(str(network.run_dir / f"{n.name}.log") for n in spec.npms)
            stopped = f"The run stopped early: {error} (the switch's log: {logs}).\n"
    if stopped:
        print(stopped)
    print(
        f"A flood of new UDP flows from h2, {args.seconds} s each, target "
        f"{choice.target.value}: what h1, iperf3 and the API saw\n"
    )
    print(
        "| policy | flood offered (flows/s) | sent | h1 connects ok | connect p50 / p99 ms "
        "| iperf3 kept (Mbit/s alone, in the flood) | API p50 / p99 ms "
        "| NPM drops during the flood | SPM queue drops | session events during the flood |"
    )
    print("|---|---:|---:|---:|---|---|---|---|---:|---|")
    for name, rate, r in rows:
        c = r["connect"]
        ok = "0/20" if "error" in c else f"{c['n'] - c['failed']}/{c['n']}"
        times = "-" if "error" in c else f"{c['p50']:.1f} / {c['p99']:.1f}"
        api = r["api"]
        dropped = ", ".join(f"{k} {v}" for k, v in sorted(r["drops"].items())) or "none"
        events = ", ".join(f"{k} {v}" for k, v in sorted(r["events"].items())) or "none"
        print(
            f"| {name} | {rate} | {r['sent']} | {ok} | {times} | {r['kept'] * 100:.0f} % "
            f"({r['alone']:.0f}, {r['mbps']:.0f}) "
            f"| {percentile(api, 50):.1f} / {percentile(api, 99):.1f} | {dropped} "
            f"| {r['spm_drops']:,} | {events} |"
        )
    print(
        "\niperf3 kept: its rate in the flood against the same flow alone, just before the "
        "policy's floods."
    )
    print("\nThe CPM's session set-up and the SPMs' queues during each flood\n")
    print(
        "| policy | set-ups from digests: n, p50 / p99 within ms | from packet-ins "
        "| SPM queue p50 / max | read by the dispatchers p50 / max |"
    )
    print("|---|---|---|---|---|")
    for name, _rate, r in rows:
        cells = []
        for source in ("digest", "packet_in"):
            if source in r["setup"]:
                n, p50, p99 = r["setup"][source]
                cells.append(f"{n:,}, {p50 * 1000:g} / {p99 * 1000:g}")
            else:
                cells.append("none")
        samples = r["spm_queue"] or [(0, 0)]
        queue = [
            f"{percentile([float(x) for x in column], 50):.0f} / {max(column)}"
            for column in zip(*samples, strict=True)
        ]
        print(f"| {name} | {cells[0]} | {cells[1]} | {queue[0]} | {queue[1]} |")
    print(
        "\nSet-up: from the digest's or packet-in's arrival to the sessions written "
        "(`opengate_session_setup_seconds`, bucket bounds); the SPMs' queues: packets not yet "
        "answered, and those of them read by the dispatchers, from their load reports every "
        "0.5 s."
    )
    print(
        "\nWhere the CPU went while iperf3 ran, alone (before the policy's floods) and in each "
        "flood, from 1 s after its start to 0.5 s before its end (share of one core; the "
        f"machine's cores are {os.cpu_count()}; the busiest processes by program or module):\n"
    )
    listed = [(f"{name}, iperf3 alone", shares) for name, shares in alone_cpu]
    listed += [(f"{name}, {rate}/s", r["cpu"]) for name, rate, r in rows]
    for label, shares in listed:
        busiest = sorted(shares.items(), key=lambda kv: -kv[1])[:CPU_TOP]
        print(f"- {label}: " + ", ".join(f"{k} {v * 100:.0f} %" for k, v in busiest))
    if args.trace:
        connect_trace.table([(f"{name}, {rate}/s", r["trace"]) for name, rate, r in rows])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
