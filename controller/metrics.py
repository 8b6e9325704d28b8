"""Prometheus metrics of one controller, in its own registry (so tests can run several).

A label's values must stay few: each one is a time series of its own, kept for as long as the
process runs. Labels that a client names (an alert's action) take known values only.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# The actions an alert's `action` label takes: Suricata's and Snort 3's rule actions and the
# EVE log's verdicts; any other action is counted as "other".
ALERT_ACTIONS = frozenset(
    {
        "alert",
        "drop",
        "block",
        "reject",
        "sdrop",
        "pass",
        "log",
        "allow",
        "allowed",
        "blocked",
        "would_drop",
    }
)
OTHER_ACTION = "other"


def alert_action_label(action: str) -> str:
    """The `action` label of an alert's action: itself if known, else "other"."""
    return action if action in ALERT_ACTIONS else OTHER_ACTION


class AlertCounter:
    """opengate_alerts by SPM and action, the action bounded by `alert_action_label`."""

    def __init__(self, counter: Counter) -> None:
        self.counter = counter

    def labels(self, spm: str, action: str) -> Any:
        return self.counter.labels(spm, alert_action_label(action))


_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    5.0,
)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.events = Counter(
            "opengate_events", "Events the event bus dispatched, by kind", ["kind"], registry=r
        )
        self.handler_errors = Counter(
            "opengate_handler_errors",
            "Event handlers that failed, by event kind (a refused request is not counted)",
            ["kind"],
            registry=r,
        )
        self.p4rt_writes = Counter(
            "opengate_p4rt_writes", "P4Runtime Write RPCs sent", ["npm"], registry=r
        )
        self.p4rt_updates = Counter(
            "opengate_p4rt_updates", "Updates sent in Write RPCs", ["npm"], registry=r
        )
        self.p4rt_write_errors = Counter(
            "opengate_p4rt_write_errors", "Updates the switch refused", ["npm"], registry=r
        )
        self.p4rt_write_seconds = Histogram(
            "opengate_p4rt_write_seconds",
            "P4Runtime Write RPC duration",
            ["npm"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.sessions_active = Gauge(
            "opengate_sessions_active", "Sessions held now", ["npm"], registry=r
        )
        self.sessions_installed = Counter(
            "opengate_sessions_installed",
            "Sessions installed (both directions)",
            ["npm", "nat"],
            registry=r,
        )
        self.sessions_removed = Counter(
            "opengate_sessions_removed", "Sessions removed", ["npm", "reason"], registry=r
        )
        self.session_duplicates = Counter(
            "opengate_session_duplicate_requests",
            "Session requests for flows already installed or pending",
            ["npm"],
            registry=r,
        )
        self.router_adverts = Counter(
            "opengate_router_advertisements",
            "Router advertisements sent (RFC 4861), per port",
            ["npm", "port"],
            registry=r,
        )
        self.nat64_icmp_errors = Counter(
            "opengate_nat64_icmp_errors",
            "ICMPv4 errors about NAT64 flows, by result (translated to ICMPv6, or why not)",
            ["npm", "result"],
            registry=r,
        )
        self.session_failures = Counter(
            "opengate_session_failures",
            "Sessions that could not be installed",
            ["npm", "why"],
            registry=r,
        )
        self.setup_latency = Histogram(
            "opengate_session_setup_seconds",
            "From the digest or packet-in arriving to both directions installed",
            ["npm", "source"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.nat_ports_in_use = Gauge(
            "opengate_nat_ports_in_use", "NAT bindings held", ["npm"], registry=r
        )
        self.packet_ins = Counter(
            "opengate_packet_ins", "Packet-ins by reason", ["npm", "reason"], registry=r
        )
        self.packet_ins_dropped = Counter(
            "opengate_packet_ins_dropped",
            "Packet-ins dropped because their source already had its most waiting for the CPM",
            ["npm"],
            registry=r,
        )
        self.spm_up = Gauge("opengate_spm_up", "1 if the SPM is up", ["spm"], registry=r)
        self.spm_weight = Gauge(
            "opengate_spm_weight", "Selector weight of the SPM", ["spm"], registry=r
        )
        self.spm_cpu = Gauge(
            "opengate_spm_cpu_percent", "CPU percent the SPM last reported", ["spm"], registry=r
        )
        self.spm_queue = Gauge(
            "opengate_spm_queue_depth", "Queue depth the SPM last reported", ["spm"], registry=r
        )
        self.spm_queue_dropped = Gauge(
            "opengate_spm_queue_dropped",
            "Packets the SPM's kernel queue dropped since the SPM started (reported)",
            ["spm"],
            registry=r,
        )
        self.alerts_by_action = Counter(
            "opengate_alerts",
            "Alerts the SPMs reported, by action (other: an action not known)",
            ["spm", "action"],
            registry=r,
        )
        self.alerts = AlertCounter(self.alerts_by_action)
        self.ipsec_tunnel_up = Gauge(
            "opengate_ipsec_tunnel_up",
            "1 if the tunnel has an installed CHILD SA",
            ["tunnel"],
            registry=r,
        )
        self.ipsec_bytes = Gauge(
            "opengate_ipsec_bytes",
            "Bytes through the tunnel's current CHILD SAs",
            ["tunnel", "direction"],
            registry=r,
        )
        self.ipsec_packets = Gauge(
            "opengate_ipsec_packets",
            "Packets through the tunnel's current CHILD SAs",
            ["tunnel", "direction"],
            registry=r,
        )
        self.ipsec_rekeys = Gauge(
            "opengate_ipsec_rekeys",
            "CHILD SA rekeys seen by the active IPsec SPM",
            ["tunnel"],
            registry=r,
        )
        self.policy_version = Gauge("opengate_policy_version", "Running policy version", registry=r)
        self.primary = Gauge(
            "opengate_npm_primary",
            "1 if this controller is the NPM's primary",
            ["npm"],
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
