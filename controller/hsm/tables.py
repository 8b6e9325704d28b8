"""Compile rule sets into a profile's tables: HSM/IPP when it fits, else the hybrid, else (on
request) the ternary baseline.

The HSM aggregation tables are cross products; some rule sets (many rules that are wildcards in
one field of a pair and specific in the other, as in ClassBench's fw and ipc sets) need more
entries than a bank may hold. Then the compile stops early (it never builds the oversized table).
With `hybrid` (a program with the spill tables), the rules that blow the tables up are spilled
into them (`controller.hsm.hybrid`). When that does not fit either and `fallback` is set, the
naive profile's entries come back with the reason in the stats; the NPM must run the
-DWITH_NAIVE_ACL build for those.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from controller.hsm.compile import CompiledTables, Progress, TableOverflow, compile_hsm
from controller.hsm.hybrid import compile_hybrid
from controller.hsm.naive import compile_naive
from controller.hsm.rules import AclRule, IdsRule

LOG = logging.getLogger(__name__)


def compile_tables(
    acl: Sequence[AclRule],
    ids: Sequence[IdsRule],
    *,
    version: int = 0,
    reuse: CompiledTables | None = None,
    limits: Mapping[str, int] | None = None,
    fallback: bool = True,
    hybrid: bool = True,
    progress: Progress | None = None,
) -> CompiledTables:
    try:
        if hybrid:
            return compile_hybrid(
                acl, ids, version=version, reuse=reuse, limits=limits, progress=progress
            )
        return compile_hsm(acl, ids, version=version, reuse=reuse, limits=limits, progress=progress)
    except TableOverflow as overflow:
        if not fallback:
            raise
        reason = f"HSM does not fit: {overflow}"
        LOG.warning("%s; falling back to the naive (ternary) profile", reason)
        try:
            return compile_naive(acl, ids, limits=limits, fallback_reason=reason)
        except TableOverflow as naive_overflow:
            raise TableOverflow(
                naive_overflow.table,
                naive_overflow.needed,
                naive_overflow.limit,
                note=f"the naive fallback does not fit either; before it, {reason}",
            ) from None
