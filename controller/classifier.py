"""The policy's ACL and IDS rules, handed to the HSM/IPP compiler and its hitless update planner
(`controller.hsm.update`): the CPM only adapts the policy and sends the planned batches.

The classification tables have two banks (the `version` key). An update compiles the new rules
into the idle bank (numbered against what that bank holds, so that the difference is small),
writes only the difference there, and flips `classifier_version` in a Write of its own, which
also carries the ACL default verdict (the one classification setting outside the banks).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Sequence

from controller.hsm import schema as hsm_schema
from controller.hsm.lookup import Op
from controller.hsm.rules import AclRule, IdsRule
from controller.hsm.update import ClassifierBanks, UpdatePlan, Write, entry_version
from controller.policy import Policy
from opengate.entries import TableEntry

# The banked classification tables: HSM's, and the hybrid's extra ACL partitions and spill tables
# where the program has them (v1model builds).
CLASSIFICATION_TABLES: tuple[str, ...] = (
    *hsm_schema.HSM_TABLES,
    *hsm_schema.HYBRID_TABLES,
)

__all__ = [
    "CLASSIFICATION_TABLES",
    "ClassifierBanks",
    "Op",
    "UpdatePlan",
    "Write",
    "acl_rules",
    "entries_digest",
    "ids_rules",
    "rules_digest",
    "rules_key",
    "split_plan",
]


def acl_rules(policy: Policy) -> list[AclRule]:
    return [spec.rule for spec in policy.acl_rules]


def ids_rules(policy: Policy) -> list[IdsRule]:
    return list(policy.ids_rules)


def rules_key(policy: Policy) -> tuple[object, ...]:
    """The rule sets of a policy without where they came from: equal keys, equal tables."""
    acl = tuple(dataclasses.replace(r, origin=None) for r in acl_rules(policy))
    ids = tuple(dataclasses.replace(r, origin=None) for r in ids_rules(policy))
    return (acl, ids)


def rules_digest(policy: Policy) -> str:
    return hashlib.sha256(repr(rules_key(policy)).encode()).hexdigest()


def entries_digest(entries: Iterable[TableEntry], bank: int) -> str:
    """A digest of one bank's classification entries (order-independent)."""
    lines = sorted(repr(e) for e in entries if entry_version(e) == bank and not e.is_default)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def split_plan(
    plan: UpdatePlan, flip_extra: Sequence[TableEntry] = ()
) -> tuple[list[tuple[Write, ...]], tuple[Write, ...] | None]:
    """(the idle-bank batches, the flip batch with `flip_extra` added) of a plan."""
    batches = list(plan.batches)
    if plan.to_version == plan.from_version or not batches:
        return batches, None
    flip = batches.pop()
    return batches, (*flip, *((Op.MODIFY, entry) for entry in flip_extra))


def summary(plan: UpdatePlan | None) -> dict[str, object] | str:
    if plan is None:
        return "unchanged"
    if not plan.batches:
        return "unchanged"
    return {
        "bank": plan.to_version,
        "inserts": plan.count(Op.INSERT),
        "modifies": plan.count(Op.MODIFY),
        "deletes": plan.count(Op.DELETE),
    }
