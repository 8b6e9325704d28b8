"""IPsec SPM benchmarks (#20), as Markdown tables: ESP throughput through one tunnel between two
IPsec SPMs (charon + ESP in the kernel or in libipsec, as `esp: auto` picks), AES-GCM-128 with
1,400- and 64-byte UDP payloads (iperf3, unpaced) and one TCP flow, each with the CPU time the
two charons used (so the figure per core used); and tunnel set-up time (IKE_SA_INIT + IKE_AUTH
with the first CHILD SA, X25519, from `initiate` to installed).

The two IPsec SPMs run in network namespaces joined by a veth pair (tests/ipsec/netns.py), no
P4 switch: this measures the SPM, not the NPM. Needs root, charon-systemd and iperf3.

    sudo .venv/bin/python -m bench.bench_ipsec [--seconds 5] [--setups 10]

Run-to-completion against a pipelined split: with ESP in the kernel (XFRM) a packet is encrypted
by the core that forwards it (run to completion), with libipsec charon reads the TUN device in
one thread and encrypts in its job threads (a pipeline). Both are measured where the kernel has
ESP; where it has not (this project's VM), only the pipelined one can run, and the table says so.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from opengate.ipsec import TunnelSpec, tunnels_from_yaml
from opengate.yamlconf import load_yaml_text
from spm.ipsec.charon import find_charon, kernel_has_esp
from spm.ipsec.control import IpsecControl
from tests.ipsec.netns import TwoSites, wait_line


def _tunnel(name: str, local: str, remote: str, peer: str, start: bool) -> TunnelSpec:
    text = f"""
- name: {name}
  local_subnets: [{local}]
  remote_subnets: [{remote}]
  peer: {peer}
  auth: {{psk: "a benchmark pre-shared key"}}
  proposals:
    ike: {{encryption: [aes-gcm-256], prf: [sha384], dh: [x25519]}}
    esp: {{encryption: [aes-gcm-128]}}
  start: {"true" if start else "false"}
"""
    (tunnel,) = tunnels_from_yaml(load_yaml_text(text, "bench.yaml"), "bench.yaml")
    return tunnel


def _cpu_seconds(pid: int | None) -> float:
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _iperf(sites: TwoSites, seconds: float, packet: int | None) -> dict[str, float]:
    """iperf3 from A's LAN address to B's: UDP packets of `packet` bytes (IP), or TCP."""
    udp_len = packet - 28 if packet is not None else None
    a, b = sites.a, sites.b
    server = b.popen("iperf3", "-s", "-1", "--forceflush", "-B", b.lan)
    try:
        wait_line(server, "stdout", "Server listening", 15.0)
        argv = ["iperf3", "-c", b.lan, "-B", a.lan, "-t", str(seconds), "-J"]
        if udp_len is not None:
            argv += ["-u", "-b", "0", "-l", str(udp_len)]
        assert a.charon is not None and b.charon is not None
        cpu = (_cpu_seconds(a.charon.pid), _cpu_seconds(b.charon.pid))
        started = time.monotonic()
        result = a.run(*argv, timeout=seconds + 60)
        elapsed = time.monotonic() - started
        cpu = (_cpu_seconds(a.charon.pid) - cpu[0], _cpu_seconds(b.charon.pid) - cpu[1])
    finally:
        server.kill()
        server.communicate()
    end = json.loads(result.stdout)["end"]
    if udp_len is not None:
        total = end["sum"]
        received = int(total["packets"]) - int(total["lost_packets"])
        seconds_run = float(total["seconds"])
        bits = received * (udp_len + 28) * 8 / seconds_run
        pps = received / seconds_run
    else:
        total = end["sum_received"]
        seconds_run = float(total["seconds"])
        bits = float(total["bits_per_second"])
        pps = 0.0
    return {
        "mbps": bits / 1e6,
        "pps": pps,
        "enc_cores": cpu[0] / elapsed,
        "dec_cores": cpu[1] / elapsed,
    }


def _setup_times(control: IpsecControl, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        control.terminate("to-b")
        started = time.monotonic()
        control.initiate("to-b")
        times.append((time.monotonic() - started) * 1000)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--setups", type=int, default=10)
    args = parser.parse_args(argv)
    missing = [
        what
        for what, ok in (
            ("root", os.geteuid() == 0),
            ("charon-systemd", find_charon() is not None),
            ("iperf3", shutil.which("iperf3") is not None),
        )
        if not ok
    ]
    if missing:
        print(f"skipped: needs {', '.join(missing)}")
        return 0
    kernel_esp, why = kernel_has_esp()
    with tempfile.TemporaryDirectory(prefix="og-bench-ipsec-") as folder:
        sites = TwoSites(Path(folder))
        try:
            sites.open()
            sites.start_charons()
            assert sites.a.charon is not None and sites.b.charon is not None
            a, b = IpsecControl(sites.a.charon), IpsecControl(sites.b.charon)
            b.load(_tunnel("to-a", sites.b.lan_net, sites.a.lan_net, sites.a.outside, False),
                   ipaddress.IPv4Address(sites.b.outside))  # fmt: skip
            a.load(_tunnel("to-b", sites.a.lan_net, sites.b.lan_net, sites.b.outside, False),
                   ipaddress.IPv4Address(sites.a.outside))  # fmt: skip
            a.initiate("to-b")
            mode = sites.a.charon.esp
            setups = _setup_times(a, args.setups)
            rows = [
                ("UDP, 1,400-byte packets", _iperf(sites, args.seconds, 1400)),
                ("UDP, 64-byte packets", _iperf(sites, args.seconds, 64)),
                ("TCP, one flow", _iperf(sites, args.seconds, None)),
            ]
        finally:
            sites.close()
    esp = "kernel (XFRM)" if mode == "kernel" else "libipsec in charon (ESP in UDP 4500)"
    print(f"ESP throughput through one tunnel, ESP in {esp}\n")
    print("| inner traffic (AES-GCM-128) | received Mbit/s | received packets/s | encrypting "
          "charon, cores | decrypting charon, cores | Mbit/s per encrypting core |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|")
    for label, row in rows:
        per_core = row["mbps"] / row["enc_cores"] if row["enc_cores"] > 0 else float("nan")
        pps = f"{row['pps']:,.0f}" if row["pps"] else "-"
        print(f"| {label} | {row['mbps']:,.1f} | {pps} | {row['enc_cores']:.2f} | "
              f"{row['dec_cores']:.2f} | {per_core:,.1f} |")  # fmt: skip
    print(f"\nKernel ESP: {'yes' if kernel_esp else 'no (' + why + ')'}; "
          f"{os.cpu_count()} cores, shared by sender, receiver and both IPsec SPMs.\n")  # fmt: skip
    print("Tunnel set-up (IKEv2, AES-GCM-256/PRF-SHA384/X25519, PSK)\n")
    print("| rounds | median ms | min ms | max ms |")
    print("|---:|---:|---:|---:|")
    print(f"| {len(setups)} | {statistics.median(setups):.1f} | {min(setups):.1f} | "
          f"{max(setups):.1f} |\n")  # fmt: skip
    if mode == "kernel":
        print("Run-to-completion (XFRM) is what ran above; the pipelined split (libipsec) is "
              "`esp: userspace`.")  # fmt: skip
    else:
        print("Run-to-completion against the pipelined split: only the pipelined one (libipsec) "
              "can run on this host (its kernel has no ESP); no side-by-side figure.")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
