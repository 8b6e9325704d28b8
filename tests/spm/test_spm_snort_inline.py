"""Real Snort 3 inline in the SPM (`ips.engine: snort`): `python -m spm run` starts Snort on the
SPM's NFQUEUE (DAQ nfq) in its own network namespace, with the same fake NPM and CPM as the
built-in engine's end-to-end test, and the same checks: clean traffic comes back to its tag, a
request that fires a community rule is dropped and its alert reaches the EVE log and the CPM.
Skipped where Snort 3 is not installed (`snort` on PATH, $SNORT_PREFIX or /opt/snort)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from spm.ips.snort import snort_binary
from tests.spm.test_spm_e2e import (
    Rig,
    check_clean_http_comes_back,
    check_rule_match_dropped_and_alerted,
    spm_rig,
)

pytestmark = [pytest.mark.needs_root]


@pytest.fixture(scope="module")
def snort_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    if snort_binary() is None:
        pytest.skip("Snort 3 is not installed (no snort on PATH, $SNORT_PREFIX or /opt/snort)")
    # Snort has no clamd hook: the AV is off in this mode (the configuration refuses both).
    tmp = tmp_path_factory.mktemp("spm-snort")
    with spm_rig(tmp, ips_extra="engine: snort, ", av="av: {enabled: no}\n") as rig:
        yield rig


def test_snort_inline_returns_clean_http_to_its_tag(snort_rig: Rig) -> None:
    check_clean_http_comes_back(snort_rig)


def test_snort_inline_drops_a_rule_match_and_alerts(snort_rig: Rig) -> None:
    check_rule_match_dropped_and_alerted(snort_rig)
    sources = {e["alert"]["source"] for e in snort_rig.eve_events("alert")}
    assert sources == {"snort"}
