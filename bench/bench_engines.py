"""The built-in engine and Snort 3 side by side, on the same captures and rules.

1. Agreement: the corpus of `spm.corpus` (a flow for each generated rule, 50 benign flows) for
   the enabled community rules (seed 0), and for all 3,488 rules enabled (seed 3), replayed by
   both engines (`opengate spm replay`); the (flow, sid) alerts raised by both, by only one,
   and the rule flows neither fired.
2. Throughput, one core each: the enabled-rules corpus repeated 20 times (other addresses),
   replayed by each engine in turn, three rounds; Mbps of IP bytes over each engine's own
   inspection time (the built-in engine: its packet loop with the rules loaded; Snort: the
   `timing / seconds` of its closing statistics), so neither pays for loading rules.

    .venv/bin/python -m bench.bench_engines

Needs Snort 3 (`snort` on PATH, $SNORT_PREFIX or /opt/snort) and ../shared/data; says so and
exits 0 without them. About a minute on 2 cores.
"""

from __future__ import annotations

import logging
import sys
import tempfile
from pathlib import Path

from opengate.target import shared_data_dir
from spm.corpus import compare, enable_all, generate, run_engine
from spm.ips.loader import load_ruleset
from spm.replay import find_snort_binary

RULES = shared_data_dir() / "snort" / "snort3-community.rules"
ROUNDS = 3
COPIES = 20


def agreement(snort: str, tmp: Path) -> None:
    print("Alerts of the built-in engine and of Snort 3 on the generated corpus\n")
    print(
        "| rules | rule flows | both engines | built-in only | Snort only | neither | agreement |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    all_rules = tmp / "all.rules"
    refused = enable_all(RULES, all_rules, snort)
    for label, rules, seed in (
        ("the 829 enabled community rules", RULES, 0),
        (f"all 3,488 community rules, enabled (less {len(refused)} Snort refuses)", all_rules, 3),
    ):
        corpus = generate(load_ruleset([str(rules)], {}), seed)
        pcap = tmp / "corpus.pcap"
        corpus.write_pcap(pcap)
        result = compare(corpus, pcap, [rules], snort)
        rules_both = len({sid for _, sid in result.both})
        print(
            f"| {label} | {len(corpus.rule_flows)} | {len(result.both)} alerts ({rules_both} "
            f"rules) | {len(result.builtin_only)} | {len(result.snort_only)} | "
            f"{len(result.neither)} | {100 * result.agreement:.1f} % |"
        )
    print()


def throughput(snort: str, tmp: Path) -> None:
    corpus = generate(load_ruleset([str(RULES)], {}), seed=1, copies=COPIES)
    pcap = tmp / "long.pcap"
    size = corpus.write_pcap(pcap)
    packets = sum(len(f.packets) for f in corpus.flows)
    print("Throughput, one core each: the built-in engine against Snort 3\n")
    print("| round | built-in engine Mbps | Snort 3 Mbps | built-in / Snort |")
    print("|---:|---:|---:|---:|")
    for n in range(1, ROUNDS + 1):
        built = run_engine(pcap, [RULES], "builtin")
        snorted = run_engine(pcap, [RULES], "snort", snort)
        b = size * 8 / built.seconds / 1e6
        s = size * 8 / snorted.seconds / 1e6
        print(f"| {n} | {b:.1f} | {s:.1f} | {b / s:.2f}x |")
    print(
        f"\nCapture: {len(corpus.flows)} flows, {packets} packets, {size / 1e6:.1f} MB of IP; "
        f"the 829 enabled community rules; {ROUNDS} rounds, the engines in turn.\n"
    )


def main() -> int:
    logging.disable(logging.WARNING)
    snort = find_snort_binary()
    if snort is None or not RULES.is_file():
        print("skipped: needs Snort 3 and ../shared/data/snort/snort3-community.rules\n")
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as tmp:
        agreement(snort, Path(tmp))
        throughput(snort, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
