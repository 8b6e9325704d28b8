"""The database on SQLite (a file) and PostgreSQL (a server the test starts on a unix socket)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.db import Database
from opengate import p4constants as pc
from tests.controller.conftest import ControllerFactory
from tests.controller.flows import H1, OUT1, key, request
from tests.controller.postgres import missing_reason, postgres_server
from tests.switch_double import SwitchDouble


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'test.db'}"
        return
    url = request.getfixturevalue("postgres_url")
    database = Database(url)
    from controller.db import Base

    Base.metadata.drop_all(database.engine)
    database.close()
    yield url


def _row(session_id: int, npm: str = "npm1") -> dict[str, object]:
    return {
        "id": session_id,
        "npm": npm,
        "proto": 6,
        "src": 0xC6336414,
        "dst": 0xFFFFFFFE,
        "sport": 1,
        "dport": 2,
        "r_src": 0xFFFFFFFE,
        "r_dst": 0xC6336414,
        "r_sport": 2,
        "r_dport": 1,
        "class_id": 1,
        "spm_port": 3,
        "spm_mac": 0xFFFFFFFFFFFF,
        "nat_kind": 0,
        "nat_addr": 0,
        "nat_port": 0,
        "acl_rule": pc.RULE_NONE,
        "ingress_port": 1,
        "state": "active",
        "idle_timeout": 30.0,
        "created_at": dt.datetime.now(dt.UTC),
    }


def test_database_round_trips(db_url: str) -> None:
    db = Database(db_url)
    db.create()
    try:
        assert db.tag_base_for("npm1", "a:1", 1) == 0x0100
        assert db.tag_base_for("npm2", "a:2", 2) == 0x0102
        assert db.tag_base_for("npm1", "a:3", 1) == 0x0100, "a tag block is kept"
        first = db.add_policy_version(
            name="p",
            path="/p",
            sha256="a" * 64,
            text="x",
            status="applied",
            source="test",
            summary={"n": 1},
        )
        second = db.add_policy_version(
            name="p",
            path="/p",
            sha256="b" * 64,
            text="y",
            status="applied",
            source="test",
            summary={},
        )
        active = db.active_policy()
        assert active is not None and active.version == second
        assert [(v.version, v.status) for v in db.policy_versions()] == [
            (second, "applied"),
            (first, "superseded"),
        ]
        rows = [_row(i) for i in range(1, 1001)]
        db.insert_sessions(rows)
        assert db.session_count() == 1000 and db.max_session_id() == 1000
        (big,) = db.sessions(limit=1)
        assert (big["src"], big["spm_mac"], big["acl_rule"]) == (
            0xC6336414,
            0xFFFFFFFFFFFF,
            pc.RULE_NONE,
        )
        # every column reads back as written (the time as UTC: SQLite keeps no zone)
        written = rows[0]["created_at"]
        assert isinstance(written, dt.datetime)
        read = big.pop("created_at")
        assert read.replace(tzinfo=read.tzinfo or dt.UTC) == written
        assert big == {k: v for k, v in rows[0].items() if k != "created_at"}
        db.update_sessions([{"id": 1, "state": "blocked"}])
        db.delete_sessions(range(2, 1001))
        assert [(r["id"], r["state"]) for r in db.sessions()] == [(1, "blocked")]
        db.upsert_spm("spm1", port=3, mac=0x333, status="up", weight=8, report={"cpu": 1})
        assert db.spms()[0]["report"] == {"cpu": 1}
        alert = db.add_alert(spm="spm1", sid=1, msg="m", action="drop", session_id=1)
        assert db.alerts()[0]["id"] == alert
    finally:
        db.close()


def test_controller_on_the_database_survives_a_restart(
    db_url: str, switch: SwitchDouble, make_controller: ControllerFactory
) -> None:
    first = make_controller(switch, db_url=db_url)
    switch.inject_digest(pc.D_SESSION_REQUEST_T, [request(key(H1, OUT1, 6, 40000, 80))])
    from tests.controller.conftest import wait_until

    wait_until("the session stored", lambda: first.db.session_count() == 1)
    first.stop()
    second = make_controller(switch, db_url=db_url)
    assert second.states["npm1"].last_sync["sessions"]["adopted"] == 1
    assert second.policy_version == 1
    assert second.db.dialect == ("postgresql" if db_url.startswith("postgresql") else "sqlite")
