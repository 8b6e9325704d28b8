"""`python -m fuzz [--seconds S] [--seed N] [TARGET ...]` (what `make fuzz` runs): every target,
or those named, one after the other, each for S seconds; exit status 1 if any found something
(the inputs are under run/fuzz/findings/<target>/: docs/howto/tests.md says how to reproduce
and keep them)."""

from __future__ import annotations

import argparse
import sys

from fuzz.run import TARGETS, run_target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__)
    parser.add_argument("targets", nargs="*", metavar="TARGET", help=f"of {', '.join(TARGETS)}")
    parser.add_argument("--seconds", type=int, default=60, help="per target (default 60)")
    parser.add_argument("--seed", type=int, default=0, help="libFuzzer's -seed (0: random)")
    args = parser.parse_args(argv)
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        parser.error(f"unknown target {', '.join(unknown)} (targets: {', '.join(TARGETS)})")
    failed = []
    for target in args.targets or TARGETS:
        outcome = run_target(target, seconds=args.seconds, seed=args.seed)
        status = "ok" if outcome.ok else "FOUND SOMETHING"
        stats = [ln for ln in outcome.output.splitlines() if ln.startswith("#") and "DONE" in ln]
        print(f"{target}: {status} {stats[-1] if stats else ''}", flush=True)
        if not outcome.ok:
            failed.append(target)
            print(outcome.output[-6000:], file=sys.stderr)
            for path in outcome.findings:
                print(f"  finding: {path}", file=sys.stderr)
    if failed:
        print(f"findings in: {', '.join(failed)} (run/fuzz/findings/)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
