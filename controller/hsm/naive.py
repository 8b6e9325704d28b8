"""The baseline profile (P4 built with -DWITH_NAIVE_ACL): one priority ternary table per rule set.

Each match term becomes one entry per combination of its field alternatives; earlier terms get
higher priorities (P4Runtime: the higher number wins). Also the fallback when the HSM cross
products do not fit the tables.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence

from controller.hsm import schema
from controller.hsm.compile import (
    CompiledTables,
    MatchTerm,
    Profile,
    TableOverflow,
    acl_terms,
    ids_terms,
)
from controller.hsm.rules import AclRule, IdsRule
from controller.hsm.stats import CompileStats, table_stats
from opengate.entries import MatchValue, Range, TableEntry, Ternary
from opengate.fields import PROTO_MAX, Prefix, prefix_mask


def _ternary(prefix: Prefix) -> Ternary:
    return Ternary(prefix.value, prefix_mask(prefix.length))


def naive_entries(table: str, terms: Sequence[MatchTerm]) -> list[TableEntry]:
    rows: list[tuple[dict[str, MatchValue], MatchTerm]] = []
    for term in terms:
        src, dst, sport, dport, proto = term.fields
        for s, d, sp, dp, pr in itertools.product(src, dst, sport, dport, proto):
            match: dict[str, MatchValue] = {
                "ipv4_src": _ternary(s),
                "ipv4_dst": _ternary(d),
                "l4_sport": Range(sp.low, sp.high),
                "l4_dport": Range(dp.low, dp.high),
                "ip_proto": Ternary(pr.value, pr.mask & PROTO_MAX),
            }
            rows.append((match, term))
    total = len(rows)
    return [
        TableEntry.make(table, match, term.action, dict(term.params), priority=total - i)
        for i, (match, term) in enumerate(rows)
    ]


def compile_naive(
    acl: Sequence[AclRule],
    ids: Sequence[IdsRule],
    *,
    limits: Mapping[str, int] | None = None,
    fallback_reason: str | None = None,
) -> CompiledTables:
    """Entries of `acl_naive` and `ids_naive`. Raises TableOverflow if a table does not fit."""
    started = time.perf_counter()
    a_terms, i_terms = acl_terms(acl), ids_terms(ids)
    entries: list[TableEntry] = []
    for table, terms in ((schema.ACL_NAIVE, a_terms), (schema.IDS_NAIVE, i_terms)):
        rows = naive_entries(table, terms)
        limit = (limits or {}).get(table, schema.table_capacity(table))
        if len(rows) > limit:
            raise TableOverflow(table, len(rows), limit)
        entries += rows
    stats = CompileStats(
        profile=Profile.NAIVE.value,
        acl_rules=len(acl),
        ids_rules=len(ids),
        acl_terms=len(a_terms),
        ids_terms=len(i_terms),
        tables=table_stats(entries),
        compile_seconds=time.perf_counter() - started,
        fallback_reason=fallback_reason,
    )
    return CompiledTables(Profile.NAIVE, 0, tuple(entries), stats)
