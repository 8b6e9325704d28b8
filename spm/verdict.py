"""Verdicts a worker gives a packet, and the events it reports besides."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from enum import IntEnum
from typing import Any


class Verdict(IntEnum):
    """Ordered by severity: combining two verdicts keeps the larger."""

    ACCEPT = 0  # this packet goes back to the NPM
    BYPASS = 1  # this packet and the rest of its flow, without inspection
    DROP = 2  # this packet only (e.g. it could not be buffered; the sender will resend)
    BLOCK = 3  # this packet and the rest of its flow


@dataclass(frozen=True, slots=True)
class FlowInfo:
    proto: str  # "tcp" | "udp" | "icmp" | "ipv6-icmp" | number
    src: str
    dst: str
    sport: int
    dport: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Alert:
    """An IPS rule or an AV signature matched."""

    sid: int
    gid: int
    rev: int
    msg: str
    classtype: str
    action: str  # what was done: "alert" | "drop" | "block"
    flow: FlowInfo
    community_id: str
    source: str = "ips"  # "ips" | "av"
    priority: int = 3
    ts: float = 0.0

    def to_cpm(self) -> dict[str, Any]:
        return {
            "ts": self.ts or time.time(),
            "sid": self.sid,
            "gid": self.gid,
            "rev": self.rev,
            "msg": self.msg,
            "classtype": self.classtype,
            "action": self.action,
            "flow": self.flow.as_dict(),
            "community_id": self.community_id,
        }


@dataclass(frozen=True, slots=True)
class BypassRequest:
    """Ask the CPM to offload a clean flow to the NPM fast path."""

    flow: FlowInfo
    community_id: str
    clean_bytes: int
    flow_class: str

    def to_cpm(self) -> dict[str, Any]:
        return {
            "flow": self.flow.as_dict(),
            "community_id": self.community_id,
            "clean_bytes": self.clean_bytes,
        }
