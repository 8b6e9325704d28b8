"""What holding open sessions to a newly applied policy costs the CPM (controller/rematch.py).

    python -m bench.bench_rematch [--sessions 20000] [--linear 500]

For the example policy, and the example policy with ClassBench's acl1_10k in its ACL and the
Snort 3 community rules as its IDS rules (from ../shared/data; left out if absent), it times
`rematch` over SESSIONS sessions from the inside hosts to random outside addresses and ports
(TCP and UDP), in the dispatcher's three cases:
- the rules changed (a deny rule added): each session is checked against the rules added,
  removed or moved, and those one of them matches are classified twice, a walk of the old
  tables and of the new ones, as the data plane classifies (the first lookups of a table build
  its index: that is in the time);
- the rules are the same, a class's chain changed (no inspection): each classified once;
- nothing a session depends on changed (a timer): nothing classified;
and, for comparison, the rules changed with first-match linear search as the classifier (what a
restarted controller without the old tables falls back to) over LINEAR sessions. Prints
Markdown.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import sys
import time
from pathlib import Path

from controller.classifier import acl_rules, ids_rules
from controller.hsm.tables import compile_tables
from controller.policy import Policy, SpmSpec, load_policy
from controller.rematch import OUTCOMES, Classify, PolicyHold, classifier
from controller.session_encoding import FlowKey
from controller.session_model import Session
from opengate import p4constants as pc
from opengate.target import repo_root, shared_data_dir
from topo.model import with_first_acl_rule, without_inspection

DENY = {"name": "no-smtp", "src": "inside", "proto": "tcp", "dport": 25, "action": "deny"}


EXAMPLE = repo_root() / "controller" / "examples" / "gateway.yaml"


def example_with(ids_rules: Path | None = None, classbench: Path | None = None) -> str:
    """The example policy's text, with `ids_rules` as its IDS rules file and a ClassBench set
    added after its own ACL rules (permitted)."""
    text = EXAMPLE.read_text()
    if classbench is not None:
        last = "action: deny}\n\nids:"  # the end of the example's ACL rules
        assert last in text, "the example policy's ACL does not end as expected"
        added = f"action: deny}}\n  classbench: {{file: {classbench}, action: permit}}\n\nids:"
        text = text.replace(last, added)
    if ids_rules is not None:
        text = text.replace("rules: gateway.rules", f"rules: {ids_rules}")
    return text


def policies() -> list[tuple[str, Path, str]]:
    """(name, path, text) of the policies measured."""
    out = [("example", EXAMPLE, example_with())]
    data = shared_data_dir()
    acl, rules = data / "classbench" / "acl1_10k", data / "snort" / "snort3-community.rules"
    if acl.exists() and rules.exists():
        out.append(("example + acl1_10k + community rules", EXAMPLE, example_with(rules, acl)))
    else:
        print(f"(no {acl} or {rules}: the example policy alone)", file=sys.stderr)
    return out


def sessions(count: int, seed: int = 1) -> list[Session]:
    rng = random.Random(seed)
    now = dt.datetime.now(dt.UTC)
    out = []
    for number in range(count):
        proto = rng.choice((pc.IP_PROTO_TCP, pc.IP_PROTO_UDP))
        key: FlowKey = (
            0x0A000100 | rng.randrange(2, 255),
            rng.getrandbits(32),
            proto,
            rng.randrange(1024, 65536),
            rng.choice((25, 53, 80, 443, 5201, rng.randrange(1, 65536))),
        )
        reply = (key[1], key[0], proto, key[4], key[3])
        out.append(
            Session(number, "npm1", key, reply, 3, 3, 0x333, pc.NAT_NONE, 0, 0, 0, 1, 60.0, now)
        )
    return out


class _Pool:
    """What the hold asks of the SPM pool: every SPM of the policy up, a moved flow to the
    pool's first."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.specs = {s.name: s for s in policy.spms}

    def live_members(self, pool: str) -> list[tuple[SpmSpec, None]]:
        return [(self.specs[n], None) for n in self.policy.pool(pool).spms]

    def choose(self, pool: str, flow: FlowKey) -> SpmSpec | None:
        del flow
        return self.specs[self.policy.pool(pool).spms[0]]


def timed(
    sessions: list[Session], old: tuple[Policy, Classify], new: tuple[Policy, Classify]
) -> tuple[float, int, int, float]:
    """The hold of `sessions` in the dispatcher's turns (HoldJob.turn): its time in all, the
    sessions changed, the turns, and the longest turn."""
    counts = dict.fromkeys(OUTCOMES, 0)
    hold = PolicyHold(_Pool(new[0]), counts)  # type: ignore[arg-type]
    started = time.perf_counter()
    job = hold.applied(sessions, old, new)
    turns, longest = 0, 0.0
    while not job.done:
        turn = time.perf_counter()
        job.turn(first=turns == 0)
        turns += 1
        longest = max(longest, time.perf_counter() - turn)
    return time.perf_counter() - started, sum(counts.values()), turns, longest


def walker(policy: Policy, version: int) -> Classify:
    return classifier(policy, compile_tables(acl_rules(policy), ids_rules(policy), version=version))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20_000)
    parser.add_argument("--linear", type=int, default=500)
    args = parser.parse_args(argv)
    table = [
        "| policy | rules (ACL / IDS) | what changed | sessions | changed | seconds | µs per "
        "session | per session vs linear search | turns on the dispatcher | longest turn, ms |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    many, few = (args.sessions, 1), (args.linear, 2)  # (sessions, seed)
    for name, path, text in policies():
        old = load_policy(path, text)
        denied = load_policy(path, with_first_acl_rule(text, DENY))
        plain = load_policy(path, without_inspection(text))
        timer = load_policy(path, text.replace("closing_linger: 2", "closing_linger: 3"))
        before, after = walker(old, 0), walker(denied, 1)
        linear_old, linear_new = classifier(old, None), classifier(denied, None)
        cases = [
            ("rules (a deny added)", many, (old, before), (denied, after)),
            ("a class's chain", many, (old, before), (plain, before)),
            ("a timer", many, (old, before), (timer, before)),
            (
                "rules (a deny added), no tables: linear search",
                few,
                (old, linear_old),
                (denied, linear_new),
            ),
        ]
        rules = f"{len(old.acl_rules):,} / {len(old.ids_rules):,}"
        measured = []
        for what, (count, seed), before_policy, after_policy in cases:
            items = sessions(count, seed)  # fresh for each case: a hold changes them
            seconds, changed, turns, longest = timed(items, before_policy, after_policy)
            measured.append((what, len(items), changed, seconds, turns, longest))
        linear = measured[-1][3] / measured[-1][1]  # the last case: linear search
        for what, count, changed, seconds, turns, longest in measured:
            per = seconds / count
            ratio = f"{per / linear:.3f}x" if linear else "-"
            table.append(
                f"| {name} | {rules} | {what} | {count:,} | {changed:,} | {seconds:.2f} | "
                f"{per * 1e6:,.1f} | {ratio} | {turns:,} | {longest * 1e3:,.1f} |"
            )
    print("Holding open sessions to an applied policy, against linear search\n")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
