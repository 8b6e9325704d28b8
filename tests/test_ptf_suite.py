"""The PTF packet tests (ptf/tests) against the selected target, as one pytest item per run.

ptf/run_ptf.py sets up the veths and the switch and tears them down; its output is shown on
failure. `make ptf` runs the same thing directly.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from opengate.target import TargetChoice, repo_root
from tests.helpers import skip_unless_root


@pytest.mark.ptf
@pytest.mark.slow
# The run's own bound (below), not the suite's 600 s per test: on BMv2, beside other work on a
# 2-core machine, the 98 tests took over ten minutes (about three quiet).
@pytest.mark.timeout(1800)
def test_ptf_suite_passes_on_the_selected_target(target_choice: TargetChoice) -> None:
    skip_unless_root("the PTF suite")
    result = subprocess.run(
        [sys.executable, str(repo_root() / "ptf" / "run_ptf.py")],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    output = result.stdout + result.stderr
    print(output)
    assert result.returncode == 0, (
        f"PTF suite failed on {target_choice.target.value}:\n{output[-20000:]}"
    )
    assert "Ran " in output and "OK" in output
