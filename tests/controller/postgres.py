"""A throw-away PostgreSQL server for tests: initdb in a temporary folder, listening on a unix
socket only, stopped by its PID. Runs as the `postgres` user when started as root (initdb refuses
to run as root)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def missing_reason() -> str | None:
    for tool in ("initdb", "postgres", "pg_isready"):
        if not (PG_BIN / tool).exists():
            return (
                f"PostgreSQL is not installed ({PG_BIN / tool} missing; apt-get install postgresql)"
            )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "PostgreSQL tests run as root need the 'postgres' user"
    return None


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Yield an SQLAlchemy URL of a fresh PostgreSQL database."""
    root = Path(tempfile.mkdtemp(prefix="og-pg-"))
    data, sockets = root / "data", root / "sock"
    sockets.mkdir()
    prefix: list[str] = []
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        os.chown(root, entry.pw_uid, entry.pw_gid)
        os.chown(sockets, entry.pw_uid, entry.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    log = root / "postgres.log"
    subprocess.run(
        [
            *prefix,
            str(PG_BIN / "initdb"),
            "-D",
            str(data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
        ],
        check=True,
        capture_output=True,
    )
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                *prefix,
                str(PG_BIN / "postgres"),
                "-D",
                str(data),
                "-k",
                str(sockets),
                "-c",
                "listen_addresses=",
                "-c",
                "fsync=off",
                "-p",
                "5432",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            ready = subprocess.run(
                [str(PG_BIN / "pg_isready"), "-h", str(sockets), "-p", "5432", "-q"], check=False
            )
            if ready.returncode == 0:
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield f"postgresql+psycopg://postgres@/postgres?host={sockets}&port=5432"
    finally:
        if process.poll() is None:
            # Fast shutdown, sent to the postmaster itself (runuser does not pass SIGINT on).
            pid_file = data / "postmaster.pid"
            if pid_file.exists():
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGINT)
            else:
                process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(root, ignore_errors=True)
