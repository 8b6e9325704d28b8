"""The SPM's IPS rule loader (spm/ips/loader.py): a rules file of any content loads into a rule
set (a rule whose options the engine does not support is left out and reported) or is refused
with a ConfigError naming file and line, the loader's documented error."""

from __future__ import annotations

import tempfile
from pathlib import Path

from opengate.errors import ConfigError
from opengate.snort.header import SnortVariables
from spm.ips.loader import load_ruleset

ERRORS: tuple[type[BaseException], ...] = (ConfigError,)
VARIABLES = dict(SnortVariables().values)
_DIR = tempfile.TemporaryDirectory(prefix="og-fuzz-ips-")
RULES = Path(_DIR.name) / "fuzz.rules"


def one_input(data: bytes) -> None:
    RULES.write_bytes(data)
    ruleset = load_ruleset([str(RULES)], VARIABLES, include_disabled=bool(data[:1] == b"#"))
    assert ruleset.report.loaded == len(ruleset.rules)
