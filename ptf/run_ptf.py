"""Run the PTF suite against the selected target (TARGET=soft|bmv2, see opengate.target).

Creates veth pairs og-sw<N> (switch side) / og-ptf<N> (PTF side) for N = 1..5, starts the switch
on the og-sw ends, runs `ptf` on the og-ptf ends, and removes everything afterwards, also when the
run fails. Extra arguments are passed to ptf (e.g. a test name such as test_nat.SnatUdpChecksum).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from opengate.netutil import require_root, veth_pairs
from opengate.switch import running_switch
from opengate.target import p4_build_dir, repo_root, select_target

PORTS = range(1, 6)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--build", type=Path, default=p4_build_dir(), help="folder with opengate.json + p4info"
    )
    parser.add_argument("--log-dir", type=Path, default=repo_root() / "run" / "ptf")
    args, ptf_args = parser.parse_known_args(argv)
    reason = require_root("the PTF suite")
    if reason:
        print(f"run_ptf: {reason}", file=sys.stderr)
        return 2
    choice = select_target()
    print(f"run_ptf: target {choice.target.value} ({choice.reason})", flush=True)
    root = repo_root()
    args.log_dir.mkdir(parents=True, exist_ok=True)
    pairs = [(f"og-sw{n}", f"og-ptf{n}") for n in PORTS]
    with (
        veth_pairs(pairs),
        running_switch(
            {n: f"og-sw{n}" for n in PORTS},
            args.log_dir / f"switch-{choice.target.value}.log",
            choice,
        ) as switch,
    ):
        params = ";".join(
            [
                f"grpcaddr='{switch.grpc_address}'",
                "device_id=1",
                f"p4info='{args.build / 'opengate.p4info.txtpb'}'",
                f"config='{args.build / 'opengate.json'}'",
                f"naive_p4info='{args.build / 'naive_acl' / 'opengate.p4info.txtpb'}'",
                f"naive_config='{args.build / 'naive_acl' / 'opengate.json'}'",
                f"target='{choice.target.value}'",
            ]
        )
        command = [
            str(Path(sys.executable).parent / "ptf"),
            "--test-dir",
            str(root / "ptf" / "tests"),
            "--pypath",
            str(root / "ptf" / "lib"),
            "--log-file",
            str(args.log_dir / "ptf.log"),
            "--default-timeout",
            "3",
            "--default-negative-timeout",
            "0.3",
            "--test-params",
            params,
        ]
        for n in PORTS:
            command += ["--interface", f"{n}@og-ptf{n}"]
        command += ptf_args
        env = dict(os.environ, PYTHONPATH=str(root))
        return subprocess.run(command, env=env, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main())
