"""Target-neutral table entries, addressed by P4Info names.

Compilers (the HSM/IPP rule compiler, the session installer) produce these; `opengate.p4info`
turns them into P4Runtime protobufs. They are frozen and hashable so that a policy change can be
diffed with set operations.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Exact:
    value: int


@dataclass(frozen=True, slots=True)
class Lpm:
    value: int
    prefix_len: int


@dataclass(frozen=True, slots=True)
class Ternary:
    value: int
    mask: int


@dataclass(frozen=True, slots=True)
class Range:
    low: int
    high: int


@dataclass(frozen=True, slots=True)
class Optional:
    """P4Runtime `optional` match: a value, or None for "don't care"."""

    value: int | None


MatchValue = Exact | Lpm | Ternary | Range | Optional


@dataclass(frozen=True, slots=True)
class TableEntry:
    """One table entry by names: table, action and the keys of match/params are P4Info names.

    `match` and `params` are tuples of (name, value) pairs so the entry is hashable; use
    `TableEntry.make` to build one from dicts. A field missing from `match` is a wildcard (allowed
    only for ternary, range, optional and LPM fields, as in P4Runtime).
    """

    table: str
    match: tuple[tuple[str, MatchValue], ...]
    action: str
    params: tuple[tuple[str, int], ...] = ()
    priority: int = 0
    is_default: bool = False

    @classmethod
    def make(
        cls,
        table: str,
        match: dict[str, MatchValue],
        action: str,
        params: dict[str, int] | None = None,
        priority: int = 0,
        is_default: bool = False,
    ) -> TableEntry:
        return cls(
            table=table,
            match=tuple(sorted(match.items())),
            action=action,
            params=tuple(sorted((params or {}).items())),
            priority=priority,
            is_default=is_default,
        )

    def key(self) -> tuple[str, tuple[tuple[str, MatchValue], ...], int]:
        """The identity of the entry in its table (what P4Runtime MODIFY/DELETE address)."""
        return (self.table, self.match, self.priority)

    @property
    def match_dict(self) -> dict[str, MatchValue]:
        return dict(self.match)

    @property
    def params_dict(self) -> dict[str, int]:
        return dict(self.params)
