"""Hitless updates of the classification tables: write the idle bank, then flip one bit.

Every HSM table has a 1-bit `version` key, and a packet reads the version once, from the keyless
`classifier_version` table, before any classification lookup. The planner:

1. diffs the new content (addressed to the idle bank) against what the idle bank holds now
   (the previous-but-one rule set): DELETEs, then MODIFYs, then INSERTs, in that order so that a
   bank never holds more than the larger of its old and new content;
2. then flips `classifier_version` to the idle bank in a batch of its own.

No write touches the active bank, so a packet classifies either entirely with the old tables or
entirely with the new ones. The old content stays in the now idle bank; with stable class
numbering (`compile_hsm(reuse=...)`, done by `ClassifierBanks`) the next small policy change is
again a small diff. Batches must be sent in order, each after the previous one is acknowledged.

The naive profile has no banks: its plan is a plain diff and says so (`hitless` False).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from controller.hsm import schema
from controller.hsm.compile import CompiledTables, Profile
from controller.hsm.lookup import Op
from controller.hsm.rules import AclRule, IdsRule
from controller.hsm.tables import compile_tables
from opengate.entries import Exact, MatchValue, TableEntry

LOG = logging.getLogger(__name__)

Write = tuple[Op, TableEntry]
EntryKey = tuple[str, tuple[tuple[str, MatchValue], ...], int]  # TableEntry.key()

# Every table with the `version` key: HSM's and, in a hybrid program, the extra ACL partitions'
# and the spill tables.
_BANKED = frozenset((*schema.HSM_TABLES, *schema.HYBRID_TABLES))
_NAIVE = frozenset({schema.ACL_NAIVE, schema.IDS_NAIVE})


@dataclass(frozen=True, slots=True)
class UpdatePlan:
    batches: tuple[tuple[Write, ...], ...]
    from_version: int
    to_version: int
    hitless: bool = True

    @property
    def writes(self) -> list[Write]:
        return [write for batch in self.batches for write in batch]

    def count(self, op: Op) -> int:
        return sum(1 for o, entry in self.writes if o is op and not entry.is_default)

    def __str__(self) -> str:
        return (
            f"{self.count(Op.INSERT)} inserts, {self.count(Op.MODIFY)} modifies, "
            f"{self.count(Op.DELETE)} deletes in {len(self.batches)} batches, "
            f"bank {self.from_version} -> {self.to_version}"
        )


def flip_entry(version: int) -> TableEntry:
    return TableEntry.make(
        schema.CLASSIFIER_VERSION,
        {},
        schema.SET_CLASSIFIER_VERSION,
        {"version": version},
        is_default=True,
    )


def entry_version(entry: TableEntry) -> int | None:
    for name, value in entry.match:
        if name == schema.VERSION_KEY and isinstance(value, Exact):
            return value.value
    return None


def _diff(
    current: Mapping[EntryKey, TableEntry], target: Mapping[EntryKey, TableEntry]
) -> list[tuple[Write, ...]]:
    deletes = tuple((Op.DELETE, e) for k, e in current.items() if k not in target)
    modifies = tuple(
        (Op.MODIFY, e)
        for k, e in target.items()
        if k in current and (current[k].action, current[k].params) != (e.action, e.params)
    )
    inserts = tuple((Op.INSERT, e) for k, e in target.items() if k not in current)
    return [batch for batch in (deletes, modifies, inserts) if batch]


def plan_update(
    installed: Iterable[TableEntry], active_version: int, new: CompiledTables
) -> UpdatePlan:
    """The ordered writes that take the switch from `installed` to `new` without a packet ever
    seeing a mix of old and new classification."""
    if active_version not in (0, 1):
        raise ValueError(f"active version must be 0 or 1, not {active_version}")
    installed = list(installed)
    if new.profile is Profile.NAIVE:
        current = {e.key(): e for e in installed if e.table in _NAIVE and not e.is_default}
        target = {e.key(): e for e in new.entries}
        return UpdatePlan(tuple(_diff(current, target)), 0, 0, hitless=False)
    idle = 1 - active_version
    target = {e.key(): e for e in new.in_bank(idle).entries}
    active_now = {
        e.key(): e
        for e in installed
        if e.table in _BANKED and not e.is_default and entry_version(e) == active_version
    }
    same_as_active = {e.key(): e for e in new.in_bank(active_version).entries}
    if _same(active_now, same_as_active):
        LOG.info("classification unchanged; nothing to write")
        return UpdatePlan((), active_version, active_version)
    current = {
        e.key(): e
        for e in installed
        if e.table in _BANKED and not e.is_default and entry_version(e) == idle
    }
    batches = _diff(current, target)
    batches.append(((Op.MODIFY, flip_entry(idle)),))
    plan = UpdatePlan(tuple(batches), active_version, idle)
    LOG.info("update plan: %s", plan)
    return plan


def _same(a: Mapping[EntryKey, TableEntry], b: Mapping[EntryKey, TableEntry]) -> bool:
    if a.keys() != b.keys():
        return False
    return all((a[k].action, a[k].params) == (b[k].action, b[k].params) for k in a)


class ClassifierBanks:
    """The controller's memory of both banks: compiles each new rule set against the content of
    the bank it will overwrite (so class numbers stay put), plans, and records what was done.

    Use: `new, plan = banks.prepare(acl, ids)`; send `plan.batches` in order; then
    `banks.commit(new, plan)`.
    """

    def __init__(self, installed: Sequence[TableEntry] = (), active_version: int = 0) -> None:
        self._installed: dict[EntryKey, TableEntry] = {e.key(): e for e in installed}
        self.active = active_version
        self.content: dict[int, CompiledTables | None] = {0: None, 1: None}

    @property
    def installed(self) -> frozenset[TableEntry]:
        return frozenset(self._installed.values())

    def prepare(
        self,
        acl: Sequence[AclRule],
        ids: Sequence[IdsRule],
        *,
        fallback: bool = False,
        hybrid: bool = True,
        limits: Mapping[str, int] | None = None,
    ) -> tuple[CompiledTables, UpdatePlan]:
        """`hybrid`: the program has the spill tables (HSM that does not fit spills into them);
        `limits`: its tables' entries per bank (default: the default v1model build's)."""
        idle = 1 - self.active
        new = compile_tables(
            acl,
            ids,
            version=idle,
            reuse=self.content[idle],
            fallback=fallback,
            hybrid=hybrid,
            limits=limits,
        )
        return new, plan_update(self._installed.values(), self.active, new)

    def commit(self, new: CompiledTables, plan: UpdatePlan) -> None:
        """Record that every write of `plan` was acknowledged by the switch."""
        for op, entry in plan.writes:
            if entry.is_default:
                continue
            if op is Op.DELETE:
                del self._installed[entry.key()]
            else:
                self._installed[entry.key()] = entry
        if plan.to_version != plan.from_version:
            self.content[plan.to_version] = new
        self.active = plan.to_version
