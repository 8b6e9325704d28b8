"""The SPM configuration file: defaults, and errors that name file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from opengate.errors import ConfigError
from spm.config import load_config, tag_mac

FULL = """\
name: spm1
interface: eth1
tags: [1, "0x10-0x12", 300]
queue: {num: 3, length: 512, fail_open: no, backend: xt, per_source: 100, window: 8}
workers: 2
dispatch: jsq
ips:
  rules: [a.rules, b.rules]
  variables: {HOME_NET: 10.0.0.0/8, HTTP_PORTS: [80, 8080]}
  alert_action: drop
av: {enabled: yes, clamd_socket: /tmp/c.sock, max_scan_size: 1000, on_clamd_down: drop}
bypass: {classes: [tls, ssh], after_bytes: 4096}
cpm_url: http://127.0.0.1:8080/
token: abc
eve_log: /tmp/eve.json
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spm.yaml"
    path.write_text(text)
    return path


def test_full_config_is_read_with_ranges_expanded(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, FULL))
    assert cfg.tags == (1, 16, 17, 18, 300)
    assert (cfg.queue.num, cfg.queue.length, cfg.queue.fail_open) == (3, 512, False)
    assert (cfg.queue.per_source, cfg.queue.window) == (100, 8)
    assert cfg.dispatch == "jsq" and cfg.workers == 2
    assert cfg.ips.rules == ("a.rules", "b.rules")
    assert cfg.ips.variables == {"HOME_NET": "10.0.0.0/8", "HTTP_PORTS": "[80,8080]"}
    assert cfg.av.enabled and cfg.av.on_clamd_down == "drop" and cfg.av.on_size_limit == "accept"
    assert cfg.bypass.classes == ("tls", "ssh")
    assert cfg.cpm_url == "http://127.0.0.1:8080"


def test_minimal_config_gets_defaults(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, "name: s\ninterface: eth0\ntags: [7]\n"))
    assert cfg.queue.fail_open and cfg.dispatch == "hash5" and cfg.workers == 1
    assert (cfg.queue.per_source, cfg.queue.window) == (1024, 64)
    assert not cfg.av.enabled and cfg.ips.enabled


@pytest.mark.parametrize(
    ("text", "line", "field", "words"),
    [
        ("name: s\ninterface: e\ntags: [1]\ndispatch: rr\n", 4, "dispatch", "not one of"),
        (
            "name: s\ninterface: e\ntags: [1]\nqueue:\n  fail_open: maybe\n",
            5,
            "queue.fail_open",
            "",
        ),
        ("name: s\ninterface: e\ntags: [1]\nqueue:\n  lenght: 5\n", 5, "queue.lenght", "unknown"),
        ("name: s\ninterface: e\ntags: [1]\nqueue: {window: 0}\n", 4, "queue.window", ""),
        ("name: s\ninterface: e\ntags: [1]\nqueue: {per_source: -1}\n", 4, "queue.per_source", ""),
        ("name: s\ninterface: e\ntags:\n  - 1\n  - 70000\n", 5, "tags[1]", "0-65535"),
        ("name: s\ninterface: e\ntags: [1, 1]\n", 3, "tags[1]", "twice"),
        (
            "name: s\ninterface: e\ntags: [1]\nav: {on_size_limit: maybe}\n",
            4,
            "av.on_size_limit",
            "",
        ),
        ("name: s\ninterface: e\ntags: [1]\nbypass: {classes: [video]}\n", 4, "bypass.classes", ""),
        ("name: s\ninterface: e\ntags: [1]\ncpm_url: http://x\n", 4, "token", "required"),
        ("name: s\ntags: [1]\n", 1, "interface", "missing"),
    ],
)
def test_bad_values_are_rejected_naming_line_and_field(
    tmp_path: Path, text: str, line: int, field: str, words: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), line, field)
    assert words in err.message


def test_tag_mac_encodes_the_tag_in_the_last_two_bytes() -> None:
    assert tag_mac(0x1234) == "02:4f:47:00:12:34"
