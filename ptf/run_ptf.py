"""Run the PTF suite against the selected target (TARGET=soft|bmv2, see opengate.target).

Creates veth pairs og-sw<N> (switch side) / og-ptf<N> (PTF side) for N = 1..5, starts the switch
on the og-sw ends, runs `ptf` on the og-ptf ends, and removes everything afterwards, also when the
run fails. Extra arguments are passed to ptf (e.g. a test name such as test_nat.SnatUdpChecksum).

On BMv2 the whole suite runs one test module at a time, each on a switch of its own: the tests
start from fresh state by pushing the pipeline again (BMv2 takes no register writes), and BMv2
grows by about 300 MB a push (3.8 GB after the first; a whole run of the suite on one switch grew
past 12 GB, enough for the kernel to kill it beside other work).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from opengate.netutil import require_root, veth_pairs
from opengate.switch import running_switch
from opengate.target import Target, TargetChoice, p4_build_dir, repo_root, select_target

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
    runs: list[tuple[str, list[str]]] = [("", ptf_args)]
    if choice.target is Target.BMV2 and not ptf_args:
        runs = [
            (f"-{t.stem}", [t.stem]) for t in sorted((root / "ptf" / "tests").glob("test_*.py"))
        ]
    with veth_pairs(pairs):
        failed = 0
        for suffix, names in runs:
            code = _run(choice, args.build, args.log_dir, suffix, names)
            failed = failed or code
        return failed


def _run(choice: TargetChoice, build: Path, log_dir: Path, suffix: str, ptf_args: list[str]) -> int:
    """ptf with `ptf_args` against a switch started for it; logs named with `suffix`."""
    root = repo_root()
    with running_switch(
        {n: f"og-sw{n}" for n in PORTS},
        log_dir / f"switch-{choice.target.value}{suffix}.log",
        choice,
    ) as switch:
        params = ";".join(
            [
                f"grpcaddr='{switch.grpc_address}'",
                "device_id=1",
                f"p4info='{build / 'opengate.p4info.txtpb'}'",
                f"config='{build / 'opengate.json'}'",
                f"naive_p4info='{build / 'naive_acl' / 'opengate.p4info.txtpb'}'",
                f"naive_config='{build / 'naive_acl' / 'opengate.json'}'",
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
            str(log_dir / f"ptf{suffix}.log"),
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
