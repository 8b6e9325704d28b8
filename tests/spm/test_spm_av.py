"""AV: clamd INSTREAM with the project's own signatures, size limits and a clamd that is down."""

from __future__ import annotations

from pathlib import Path

import pytest

from spm.av.clamd import ClamdClient, ScanStatus, parse_reply
from spm.av.inspector import AvInspector
from spm.config import AvConfig


def test_clamd_finds_eicar_and_passes_clean_data(clamd_socket: str, eicar_bytes: bytes) -> None:
    client = ClamdClient(clamd_socket)
    assert client.ping()
    found = client.instream(eicar_bytes + b"\r\n")
    assert found.status is ScanStatus.INFECTED
    assert found.signature is not None and "Eicar" in found.signature
    assert client.instream(b"just some text" * 1000).status is ScanStatus.CLEAN


@pytest.mark.parametrize("sample", ["clam.exe", "clam.zip", "clam.tar.gz", "clam-upx.exe"])
def test_project_signatures_detect_clamav_test_samples(
    clamd_socket: str, testfiles: Path, sample: str
) -> None:
    result = ClamdClient(clamd_socket).instream((testfiles / sample).read_bytes())
    assert result.status is ScanStatus.INFECTED
    assert result.signature is not None and result.signature.startswith("OpenGate.Test.ClamExe")


def test_clamd_size_limit_is_reported_as_too_large(clamd_socket: str) -> None:
    # the test clamd has StreamMaxLength 2M
    assert ClamdClient(clamd_socket).instream(b"a" * (3 << 20)).status is ScanStatus.TOO_LARGE


def test_clamd_down_follows_the_configured_policy(tmp_path: Path, eicar_bytes: bytes) -> None:
    for policy, block in (("accept", False), ("drop", True)):
        cfg = AvConfig(enabled=True, clamd_socket=str(tmp_path / "none.sock"), on_clamd_down=policy)
        av = AvInspector(cfg)
        obj = av.begin("http-body")
        assert av.add(obj, eicar_bytes) is None
        outcome = av.finish(obj)
        assert (outcome.block, outcome.reason) == (block, "clamd_down")
        assert av.counters.clamd_down == 1
        assert av.buffered == 0


def test_object_over_the_size_limit_is_dropped_at_once_when_policy_says_drop() -> None:
    av = AvInspector(AvConfig(enabled=True, max_scan_size=100, on_size_limit="drop"))
    obj = av.begin("http-body")
    assert av.add(obj, b"x" * 60) is None
    outcome = av.add(obj, b"x" * 60)
    assert outcome is not None and outcome.block and outcome.reason == "size_limit"
    assert av.buffered == 0


def test_object_over_the_size_limit_has_its_head_scanned_when_policy_says_accept(
    clamd_socket: str, eicar_bytes: bytes
) -> None:
    av = AvInspector(AvConfig(enabled=True, clamd_socket=clamd_socket, max_scan_size=1000))
    clean = av.begin("http-body")
    av.add(clean, b"y" * 5000)
    assert (av.finish(clean).block, av.finish(clean).reason) == (False, "clean")
    big = av.begin("http-body")
    av.add(big, b"z" * 5000)
    outcome = av.finish(big)
    assert (outcome.block, outcome.reason) == (False, "size_limit")
    infected = av.begin("http-body")
    av.add(infected, eicar_bytes + b" " * 5000)
    assert av.finish(infected).reason == "infected"


def test_worker_buffer_budget_is_shared_between_objects() -> None:
    av = AvInspector(AvConfig(enabled=True, max_scan_size=100, max_buffered=150))
    a, b = av.begin("stream"), av.begin("stream")
    av.add(a, b"a" * 100)
    av.add(b, b"b" * 100)
    assert av.buffered == 150 and b.over_limit and not a.over_limit


def test_clamd_reply_parsing() -> None:
    assert parse_reply("stream: OK").status is ScanStatus.CLEAN
    assert parse_reply("stream: Win.Test FOUND").signature == "Win.Test"
    assert parse_reply("INSTREAM size limit exceeded. ERROR").status is ScanStatus.TOO_LARGE
    assert parse_reply("").status is ScanStatus.UNAVAILABLE
