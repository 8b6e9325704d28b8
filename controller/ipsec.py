"""The CPM's side of the IPsec service (#20): where the NPM sends tunnel traffic, which IPsec SPM
holds the tunnels, and what the IPsec SPMs report.

Steering is by route, not by class: the IPsec SPM is a router behind the NPM that holds the
gateway's IKE/ESP address. The NPM's routing table sends each tunnel's remote subnets (inside ->
remote traffic, after ACL, sessions and any inspection) and the IPsec address itself (IKE and
ESP from the peers) to the active IPsec SPM by its port and MAC; the SPM encrypts, and sends ESP
back to the NPM untagged, which routes it out of the outside port; decrypted packets come back
the same way and go through the NPM's pipeline like any packet from a LAN (ACL, sessions,
classification, SPM inspection where their class says so). No P4 change: routes, the ARP
responder and port roles already say all of it. (A class-based steer would return the packet it
sent, tagged, to resume its chain; an IPsec SPM returns another packet, ESP or the inner one.)

The active IPsec SPM is the first of the policy's `ipsec.pool` that is up (weights from the
load reports, as for any SPM); when it goes down, the next one up gets the routes, and on its
next poll of its configuration learns that it is active: it takes the address and brings the
tunnels up again (new IKE and CHILD SAs). It keeps them when the first comes back. With none
up, the routes stay on the first one, so tunnel traffic is dropped rather than sent out in the
clear.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controller.policy import Policy, SpmSpec, mac_text
from opengate.ipsec import vici_connection, vici_key, vici_secret

# Reports older than this are shown as stale (the SPM stopped reporting).
REPORT_STALE_S = 5.0


@dataclass(frozen=True, slots=True)
class IpsecRoute:
    prefix: ipaddress.IPv4Network
    port: int
    mac: int


def active_spm(
    policy: Policy, weights: Mapping[str, int], holder: str | None = None
) -> tuple[SpmSpec | None, bool]:
    """The IPsec SPM that holds the tunnels, and whether it is up: `holder` (the one that holds
    them now) while it is up and in the pool, so that an SPM coming back does not take them back
    (a move costs new SAs); else the pool's first that is up. With none up: the pool's first, not
    up (its routes blackhole tunnel traffic instead of leaking it)."""
    if policy.ipsec is None:
        return None, False
    names = policy.pool(policy.ipsec.pool).spms
    if holder in names and weights.get(holder, 0) > 0:
        return policy.spm_by_name(holder), True
    for name in names:
        if weights.get(name, 0) > 0:
            return policy.spm_by_name(name), True
    return (policy.spm_by_name(names[0]) if names else None), False


def ipsec_routes(
    policy: Policy, weights: Mapping[str, int], holder: str | None = None
) -> list[IpsecRoute]:
    """The NPM routes of the IPsec service: remote subnets and the IPsec address, to the active
    IPsec SPM."""
    spm, _ = active_spm(policy, weights, holder)
    if policy.ipsec is None or spm is None:
        return []
    prefixes = [ipaddress.IPv4Network(f"{policy.ipsec.address}/32")]
    for tunnel in policy.ipsec.tunnels:
        prefixes.extend(tunnel.remote_subnets)
    return [IpsecRoute(p, spm.port, spm.mac) for p in prefixes]


def spm_config(
    policy: Policy, weights: Mapping[str, int], name: str, holder: str | None = None
) -> dict[str, Any]:
    """What IPsec SPM `name` polls: whether it is active, and if so the address to hold and the
    tunnels to load (VICI messages, PSKs included: this goes over the token-protected API)."""
    if policy.ipsec is None or name not in policy.pool(policy.ipsec.pool).spms:
        return {"name": name, "ipsec": False, "active": False}
    spm, up = active_spm(policy, weights, holder)
    active = spm is not None and spm.name == name and up
    npm_mac = next((p.mac for p in policy.ports if p.mac is not None), 0)
    out: dict[str, Any] = {
        "name": name,
        "ipsec": True,
        "active": active,
        "address": str(policy.ipsec.address),
        "npm_mac": mac_text(npm_mac or 0),
        "policy": policy.sha256,
        "tunnels": [],
    }
    if active:
        for tunnel in policy.ipsec.tunnels:
            out["tunnels"].append(
                {
                    "name": tunnel.name,
                    "start": tunnel.start,
                    "remote_subnets": [str(n) for n in tunnel.remote_subnets],
                    "connection": vici_connection(tunnel, policy.ipsec.address),
                    "secret": vici_secret(tunnel, policy.ipsec.address),
                    "key": vici_key(tunnel),
                }
            )
    return out


class IpsecReports:
    """The latest status report of each IPsec SPM (thread-safe: the API writes, views read)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reports: dict[str, tuple[float, dict[str, Any]]] = {}

    def put(self, name: str, report: Mapping[str, Any]) -> None:
        with self._lock:
            self._reports[name] = (time.monotonic(), dict(report))

    def get(self, name: str) -> tuple[float, dict[str, Any]] | None:
        with self._lock:
            return self._reports.get(name)


def ipsec_view(
    policy: Policy | None,
    weights: Mapping[str, int],
    reports: IpsecReports,
    holder: str | None = None,
) -> dict[str, Any]:
    """GET /api/v1/ipsec: the tunnels as configured, the active SPM, and each tunnel's state,
    SAs and counters from the active SPM's latest report."""
    if policy is None or policy.ipsec is None:
        return {"enabled": False, "tunnels": [], "spms": []}
    spm, up = active_spm(policy, weights, holder)
    now = time.monotonic()
    spms = []
    for name in policy.pool(policy.ipsec.pool).spms:
        got = reports.get(name)
        spms.append(
            {
                "name": name,
                "up": weights.get(name, 0) > 0,
                "active": spm is not None and spm.name == name and up,
                "esp": got[1].get("esp") if got else None,
                "report_age_s": round(now - got[0], 1) if got else None,
            }
        )
    report = reports.get(spm.name) if spm is not None else None
    fresh = report is not None and now - report[0] <= REPORT_STALE_S
    status = {t.get("name"): t for t in (report[1].get("tunnels", []) if report else [])}
    tunnels = []
    for tunnel in policy.ipsec.tunnels:
        seen = status.get(tunnel.name, {}) if fresh else {}
        tunnels.append(
            {
                **tunnel.summary(),
                "spm": spm.name if spm is not None else None,
                "state": seen.get("state", "down" if up else "no IPsec SPM up"),
                "last_error": seen.get("last_error"),
                "bytes_in": seen.get("bytes_in", 0),
                "bytes_out": seen.get("bytes_out", 0),
                "packets_in": seen.get("packets_in", 0),
                "packets_out": seen.get("packets_out", 0),
                "rekeys": seen.get("rekeys", 0),
                "sas": seen.get("sas", []),
            }
        )
    return {
        "enabled": True,
        "address": str(policy.ipsec.address),
        "pool": policy.ipsec.pool,
        "active_spm": spm.name if spm is not None and up else None,
        "spms": spms,
        "tunnels": tunnels,
    }
