"""The reference classifier: first-match linear search over the rules, as the rules files mean it.

The compiled tables must agree with this for every packet; tests and `classify --engine linear`
use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from controller.hsm.rules import AclRule, IdsRule
from opengate.fields import Packet


@dataclass(frozen=True, slots=True)
class Classification:
    """What classification gives a packet. `acl_rule` -1: no ACL rule matched (the policy's
    default verdict applies, `acl_action` None); `ids_rule` -1 with `ids_class` 0: no IDS rule."""

    acl_rule: int
    acl_action: str | None
    ids_class: int
    ids_rule: int

    def __str__(self) -> str:
        return f"{self.acl_rule} {self.ids_class}"


class LinearClassifier:
    def __init__(self, acl: Sequence[AclRule], ids: Sequence[IdsRule]) -> None:
        self.acl = list(acl)
        self.ids = list(ids)

    def classify(self, packet: Packet) -> Classification:
        acl_rule, acl_action = -1, None
        for index, rule in enumerate(self.acl):
            if rule.matches(packet):
                acl_rule, acl_action = index, rule.action.p4_action
                break
        ids_class, ids_rule = 0, -1
        for ids in self.ids:
            if ids.matches(packet):
                ids_class, ids_rule = ids.class_id, ids.rule_id
                break
        return Classification(acl_rule, acl_action, ids_class, ids_rule)
