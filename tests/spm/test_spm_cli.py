"""`opengate spm ...` subcommands (run here as `python -m spm`, the same code)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _spm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spm", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_rules_check_lists_unsupported_rules_with_file_line_and_option(tmp_path: Path) -> None:
    rules = tmp_path / "r.rules"
    rules.write_text(
        'alert tcp any any -> any 80 (msg:"ok"; content:"a"; sid:1;)\n'
        'alert tcp any any -> any 80 (msg:"asn"; asn1:oversize_length 10000; sid:2;)\n'
    )
    out = _spm("rules-check", "-v", str(rules))
    assert out.returncode == 0, out.stderr
    assert "1 rules loaded, 1 not supported" in out.stdout
    assert f"{rules}:2: sid 2: asn1:" in out.stdout


def test_broken_rules_file_fails_naming_file_and_line(tmp_path: Path) -> None:
    rules = tmp_path / "bad.rules"
    rules.write_text('alert tcp any any -> any 80 (msg:"x; sid:1;)\n')
    out = _spm("rules-check", str(rules))
    assert out.returncode == 2
    assert f"{rules}:1:" in out.stderr


def test_bad_config_fails_naming_file_line_and_field(tmp_path: Path) -> None:
    config = tmp_path / "spm.yaml"
    config.write_text("name: s\ninterface: eth0\ntags: [1]\ndispatch: random\n")
    out = _spm("check-config", str(config))
    assert out.returncode == 2
    assert f"{config}:4: dispatch:" in out.stderr
