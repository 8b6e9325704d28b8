"""Throughput of one TCP flow (iperf3, h1 -> out1) through the whole gateway in Mininet, on the
selected target: without deep inspection, inspected by an SPM, and offloaded after 1 MiB (bypass);
each over IPv4 and over IPv6, side by side in the same topology.

    sudo .venv/bin/python -m bench.bench_gateway [--seconds 5]

Needs root (Mininet). "Without inspection" runs the example policy with no chain on any class;
"inspected" the example policy as it is, with the SPMs' built-in engine and, where Snort 3 is
installed, with Snort inline; "bypass" the same (built-in engine) with the SPMs asking the
controller to offload flows of the service class "other" (iperf3's) after 1 MiB of clean bytes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from opengate.target import repo_root, select_target
from spm.replay import find_snort_binary
from topo.model import ENGINE_ENV, load_topology, without_inspection
from topo.net import GatewayNetwork

OUT1 = {4: "198.51.100.20", 6: "2001:db8:2::20"}


def policy_without_inspection(policy: Path, folder: Path) -> Path:
    """The example policy with every class left uninspected (no chain)."""
    folder.mkdir(parents=True, exist_ok=True)
    text = without_inspection(policy.read_text())
    rules = yaml.safe_load(text).get("ids", {}).get("rules")
    if rules:
        shutil.copyfile(policy.parent / rules, folder / Path(rules).name)
    target = folder / "policy-no-inspection.yaml"
    target.write_text(text)
    return target


def measure(network: GatewayNetwork, seconds: int, family: int = 4) -> dict[str, Any]:
    command = f"iperf3 -{family} -c {OUT1[family]} -t {seconds} -J --connect-timeout 10000"
    result = network.run("h1", command, timeout=seconds + 60)
    if result.returncode != 0:
        return {"error": result.output.strip().splitlines()[-1:] or ["iperf3 failed"]}
    report = json.loads(result.output)
    end = report["end"]
    return {
        "mbps": end["sum_received"]["bits_per_second"] / 1e6,
        "retransmits": end["sum_sent"].get("retransmits", 0),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=5)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_gateway: skipped, Mininet needs root")
        return 0
    root = repo_root()
    spec = load_topology(root / "topo" / "gateway.yaml", root=root)
    run_dir = root / "run" / "bench-gateway"
    choice = select_target()
    scenarios: list[tuple[str, Any, dict[str, Any] | None]] = [
        (
            "without inspection",
            dataclasses.replace(spec, policy=policy_without_inspection(spec.policy, run_dir)),
            None,
        ),
        ("inspected by an SPM, built-in engine", spec, None),
        ("bypass after 1 MiB", spec, {"classes": ["other"], "after_bytes": 1 << 20}),
    ]
    if find_snort_binary() is not None:
        scenarios.insert(2, ("inspected by an SPM, Snort 3 inline", spec, None))
    rows: list[tuple[str, int, dict[str, Any]]] = []
    for name, scenario_spec, bypass in scenarios:
        os.environ[ENGINE_ENV] = "snort" if "Snort" in name else "builtin"
        with GatewayNetwork(scenario_spec, run_dir, target=choice, spm_bypass=bypass) as network:
            for family in (4, 6):
                rows.append((name, family, measure(network, args.seconds, family)))
    print(
        f"One iperf3 TCP flow h1 -> out1, {args.seconds} s, target {choice.target.value}: "
        "each path against the gateway without inspection, and IPv6 against IPv4\n"
    )
    print(
        "| path | IP | Mbit/s | retransmits | vs without inspection | vs the built-in engine "
        "| IPv6 vs IPv4 |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    mbps_of = {(name, family): result.get("mbps") for name, family, result in rows}
    for name, family, result in rows:
        if "error" in result:
            print(f"| {name} | IPv{family} | failed: {result['error'][0]} | | | | |")
            continue
        mbps = result["mbps"]
        plain = mbps_of.get(("without inspection", family))
        builtin = mbps_of.get(("inspected by an SPM, built-in engine", family))
        ratio = f"{mbps / plain:.2f}x" if plain else "-"
        engine = f"{mbps / builtin:.2f}x" if builtin and name.startswith("inspected") else "-"
        v4 = mbps_of.get((name, 4))
        versus = f"{mbps / v4:.2f}x" if family == 6 and v4 else "-"
        print(
            f"| {name} | IPv{family} | {mbps:.1f} | {result['retransmits']} | {ratio} | {engine} "
            f"| {versus} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
