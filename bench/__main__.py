"""Run every benchmark module (bench/bench_*.py) in its own process and print its Markdown.

    python -m bench                 # all of them
    python -m bench hsm softswitch  # only bench_hsm.py and bench_softswitch.py

Each benchmark prints its own tables with the machine and the command; the figures are copied
into the README by hand, with the date.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    python = platform.python_version()
    return f"{platform.node()}: {cpu}, {os.cpu_count()} cores, {mem:.0f} GiB, Python {python}"


def main(argv: list[str]) -> int:
    here = Path(__file__).resolve().parent
    wanted = set(argv)
    modules = sorted(p.stem for p in here.glob("bench_*.py"))
    if wanted:
        unknown = wanted - {m.removeprefix("bench_") for m in modules}
        if unknown:
            print(
                f"no benchmark named {', '.join(sorted(unknown))}; have: "
                f"{', '.join(m.removeprefix('bench_') for m in modules)}",
                file=sys.stderr,
            )
            return 2
        modules = [m for m in modules if m.removeprefix("bench_") in wanted]
    print(f"# OpenGate benchmarks\n\nMachine: {machine()}\n", flush=True)
    status = 0
    for module in modules:
        print(f"## {module}\n", flush=True)
        result = subprocess.run(
            [sys.executable, "-m", f"bench.{module}"], cwd=here.parent, check=False
        )
        if result.returncode != 0:
            print(f"\n{module} failed with exit status {result.returncode}\n", flush=True)
            status = 1
        print(flush=True)
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
