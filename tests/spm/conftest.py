"""Fixtures of the SPM tests: a real clamd with the project's signatures, test samples."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from opengate.netutil import stop_process

SIGNATURES = Path(__file__).resolve().parents[2] / "spm" / "signatures"
TESTFILES = Path("/usr/share/clamav-testfiles")


def eicar() -> bytes:
    """The EICAR test string, assembled here so that this file itself is not a 'virus'."""
    return b"X5O!P%@AP[4\\PZX54(P^)7CC)7}$" + b"EICAR-STANDARD-ANTIVIRUS-" + b"TEST-FILE!$H+H*"


@pytest.fixture(name="eicar_bytes")
def _eicar_bytes() -> bytes:
    return eicar()


@pytest.fixture(scope="session")
def testfiles() -> Path:
    if not (TESTFILES / "clam.exe").exists():
        pytest.skip(f"{TESTFILES} is missing (Debian package clamav-testfiles)")
    return TESTFILES


@pytest.fixture(scope="session")
def clamd_socket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start clamd (Foreground, its own socket and a copy of spm/signatures); stop it by PID."""
    binary = shutil.which("clamd") or (
        "/usr/sbin/clamd" if Path("/usr/sbin/clamd").exists() else None
    )
    if binary is None:
        pytest.skip("clamd is not installed (Debian package clamav-daemon)")
    base = tmp_path_factory.mktemp("clamd")
    db = base / "db"
    shutil.copytree(SIGNATURES, db)
    sock = base / "clamd.sock"
    conf = base / "clamd.conf"
    conf.write_text(
        f"LocalSocket {sock}\nDatabaseDirectory {db}\nForeground yes\nLogFile {base}/clamd.log\n"
        "Bytecode no\nStreamMaxLength 2M\nMaxThreads 4\n"
    )
    proc = subprocess.Popen(
        [binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 30
        while not sock.exists():
            if proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr else ""
                pytest.fail(f"clamd exited with {proc.returncode}: {err}")
            if time.monotonic() > deadline:
                pytest.fail("clamd did not create its socket within 30 s")
            time.sleep(0.05)
        yield str(sock)
    finally:
        stop_process(proc)
