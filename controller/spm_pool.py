"""SPM load and liveness -> selector weights.

Each SPM daemon reports its load every second. The weight of its selector member follows:
`weight = max(1, round(policy_weight * (1 - load)))`, load being the larger of CPU (percent / 100)
and queue depth / `spm.queue_limit`, smoothed (EWMA, alpha 0.5). A weight is rewritten only when
it moves by `spm.min_weight_change` or more, so that a steady load costs no writes. New flows
follow the weights (the data plane's weighted hash); existing flows keep their SPM because their
sessions hold it.

An SPM that has not reported for `spm.down_after` seconds is down: its member leaves every group
(the caller writes that and applies the pool's fail policy to its flows). At start-up every SPM
is given `spm.startup_grace` seconds (30 by default, never less than `down_after`) for its first
report, so that an SPM still starting (clamd loading its signatures) is not taken for a dead one;
its first report brings it up. After that, `down_after` counts from its last report.

An operator may drain an SPM (weight 0: no new flows, its flows stay) and restore it; a drained
SPM keeps reporting and keeps weight 0 until restored.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.policy import Policy, SpmSpec

LOG = logging.getLogger(__name__)

EWMA_ALPHA = 0.5
REPORT_FIELDS = (
    "cpu",
    "queue_depth",
    "queue_held",  # of queue_depth, read by the SPM's dispatcher (0 where not reported)
    "queue_dropped",
    "pps",
    "bps",
    "mem_bytes",
    "workers",
    "flows",
)


class ReportError(ValueError):
    """A load report that does not have the expected shape."""


@dataclass(slots=True)
class SpmState:
    spec: SpmSpec
    status: str = "unknown"  # unknown | up | down
    last_seen: float = 0.0  # monotonic
    load: float = 0.0  # smoothed, 0..1
    weight: int = 0  # what the selector has now (0: not a member)
    report: dict[str, Any] = field(default_factory=dict)
    drained: bool = False  # by the operator: weight 0 whatever the load

    @property
    def name(self) -> str:
        return self.spec.name

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "port": self.spec.port,
            "status": self.status,
            "weight": self.weight,
            "max_weight": self.spec.weight,
            "load": round(self.load, 3),
            "drained": self.drained,
            "report": dict(self.report),
        }


@dataclass(frozen=True, slots=True)
class ReportOutcome:
    came_up: bool
    weight_changed: bool


def validate_report(report: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in REPORT_FIELDS:
        value = report.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ReportError(f"{name} must be a number >= 0, got {value!r}")
        out[name] = value
    if out["cpu"] > 100 * max(1, int(out.get("workers") or 1)):
        raise ReportError(f"cpu is a percentage, got {out['cpu']}")
    out["ts"] = report.get("ts")
    return out


def load_weight(state: SpmState) -> int:
    """The weight an SPM's smoothed load gives it."""
    return max(1, round(state.spec.weight * (1.0 - state.load)))


class SpmPool:
    """The state of every SPM of the policy. Used from the dispatcher thread only."""

    def __init__(self, policy: Policy, now: float) -> None:
        self.policy = policy
        self.states: dict[str, SpmState] = {}
        self.update_policy(policy, now)

    def update_policy(self, policy: Policy, now: float) -> None:
        old = self.states
        self.policy = policy
        self.states = {}
        for spec in policy.spms:
            state = old.get(spec.name)
            if state is None:
                # Unknown SPMs start in the selector with their full weight and have
                # startup_grace seconds for their first report.
                state = SpmState(spec, status="unknown", last_seen=now, weight=spec.weight)
            else:
                state.spec = spec
                state.weight = min(state.weight, spec.weight)
            self.states[spec.name] = state

    def weights(self) -> dict[str, int]:
        return {name: s.weight for name, s in self.states.items() if s.status != "down"}

    def report(self, name: str, report: Mapping[str, Any], now: float) -> ReportOutcome:
        state = self.states.get(name)
        if state is None:
            raise KeyError(name)
        values = validate_report(report)
        settings = self.policy.spm
        cpu_load = min(1.0, float(values["cpu"]) / 100.0)
        queue_load = min(1.0, float(values["queue_depth"]) / settings.queue_limit)
        load = max(cpu_load, queue_load)
        came_up = state.status != "up"
        state.load = load if came_up else EWMA_ALPHA * load + (1 - EWMA_ALPHA) * state.load
        state.last_seen = now
        state.report = values
        state.status = "up"
        weight = 0 if state.drained else load_weight(state)
        changed = False
        if came_up or abs(weight - state.weight) >= settings.min_weight_change:
            changed = weight != state.weight or came_up
            state.weight = weight
        if came_up:
            LOG.info("SPM %s is up (weight %d)", name, weight, extra={"spm": name})
        return ReportOutcome(came_up, changed)

    def drain(self, name: str, drained: bool) -> bool:
        """Drain (weight 0) or restore an SPM; True if its weight changed."""
        state = self.states.get(name)
        if state is None:
            raise KeyError(name)
        state.drained = drained
        if drained:
            weight = 0
        elif state.status == "down":
            weight = 0  # its next report brings it back
        elif state.status == "unknown":
            weight = state.spec.weight
        else:
            weight = load_weight(state)
        changed = weight != state.weight
        state.weight = weight
        LOG.info("SPM %s %s (weight %d)", name, "drained" if drained else "restored", weight)
        return changed

    def expired(self, now: float) -> list[str]:
        """SPMs that just went down (no report for down_after seconds)."""
        settings = self.policy.spm
        if settings.down_after <= 0:
            return []
        grace = max(settings.down_after, settings.startup_grace)
        out = []
        for state in self.states.values():
            never = state.status == "unknown"
            limit = grace if never else settings.down_after
            if state.status == "down" or now - state.last_seen <= limit:
                continue
            state.status = "down"
            state.weight = 0
            out.append(state.name)
            LOG.warning(
                "SPM %s is down: %s for %.1fs",
                state.name,
                "no report since it was configured" if never else "no load report",
                now - state.last_seen,
                extra={"spm": state.name},
            )
        return out

    def mark_down(self, name: str) -> bool:
        state = self.states.get(name)
        if state is None or state.status == "down":
            return False
        state.status = "down"
        state.weight = 0
        return True

    def live_members(self, pool_name: str) -> list[tuple[SpmSpec, int]]:
        pool = self.policy.pool(pool_name)
        out = []
        for name in pool.spms:
            state = self.states.get(name)
            if state is not None and state.status != "down" and state.weight > 0:
                out.append((state.spec, state.weight))
        return out

    def choose(self, pool_name: str, flow: tuple[int, ...]) -> SpmSpec | None:
        """An SPM of the pool for a flow being moved: weighted, stable per flow, direction
        agnostic (like the data plane's selector, not bit-identical to it)."""
        members = self.live_members(pool_name)
        if not members:
            return None
        src, dst, proto, sport, dport = flow
        lo, hi = sorted((src, dst))
        plo, phi = sorted((sport, dport))
        key = f"{lo}-{hi}-{proto}-{plo}-{phi}".encode()
        point = zlib.crc32(key) % sum(w for _, w in members)
        for spec, weight in members:
            if point < weight:
                return spec
            point -= weight
        return members[-1][0]
