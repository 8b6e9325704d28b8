"""What the worker needs from an IPS engine, whichever it is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from spm.flow import Direction, Flow
from spm.packet import Packet


@dataclass(frozen=True, slots=True)
class RuleInfo:
    """The reportable identity of a rule."""

    gid: int
    sid: int
    rev: int
    msg: str
    classtype: str
    action: str  # the rule's own action: alert | drop | block | reject | pass | log | sdrop
    priority: int = 3


@dataclass(frozen=True, slots=True)
class RuleMatch:
    rule: RuleInfo


class Detector(Protocol):
    """An IPS engine as the worker drives it: once per packet, after the stream and HTTP state
    of `d` (the packet's direction) have been updated with whatever the packet delivered."""

    def inspect(
        self, flow: Flow, d: Direction, pkt: Packet, to_server: bool, new_data: bool
    ) -> list[RuleMatch]: ...
