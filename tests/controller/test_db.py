"""The database on SQLite (a file) and PostgreSQL (a server the test starts on a unix socket)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy

from controller.db import Database, SessionRow
from controller.session_model import Session
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
        "src6": None,
        "dst6": None,
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


def test_ipv6_sessions_are_stored_searched_and_read_back(db_url: str) -> None:
    """An IPv6 session's addresses go to src6 and dst6 as text; the console's search finds it by
    address and by [address]:port; Session.from_row gives its 128-bit key and reply back."""
    db = Database(db_url)
    db.create()
    try:
        src = int(ipaddress.IPv6Address("2001:db8:1::10"))
        dst = int(ipaddress.IPv6Address("2001:db8:2::20"))
        session = Session.from_row({**_row(1), **_v6_columns(src, dst)})
        assert session.key == (src, dst, 6, 1, 2) and session.reply == (dst, src, 6, 2, 1)
        db.insert_sessions([session.row(), _row(2)])
        (row,) = [r for r in db.sessions() if r["id"] == 1]
        assert (row["src6"], row["dst6"], row["src"], row["r_dst"]) == (
            "2001:db8:1::10",
            "2001:db8:2::20",
            0,
            0,
        )
        again = Session.from_row(row)
        assert (again.key, again.reply) == (session.key, session.reply)
        for word, ids in (
            ("2001:db8:1::10", [1]),
            ("2001:DB8:2:0::20", [1]),
            ("[2001:db8:2::20]:2", [1]),
            ("[2001:db8:2::20]:3", []),
            ("10.0.1.10", []),
            ("198.51.100.20", [2]),
        ):
            _, page = db.session_page(search=word)
            assert [r["id"] for r in page] == ids, word
    finally:
        db.close()


def _v6_columns(src: int, dst: int) -> dict[str, object]:
    return {
        "src": 0,
        "dst": 0,
        "r_src": 0,
        "r_dst": 0,
        "src6": str(ipaddress.IPv6Address(src)),
        "dst6": str(ipaddress.IPv6Address(dst)),
    }


def test_a_database_of_an_earlier_version_gets_the_ipv6_columns(tmp_path: Path) -> None:
    """A sessions table made before src6 and dst6 existed: create() adds them, and rows written
    before still read back (as IPv4 sessions)."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    old = sqlalchemy.create_engine(url)
    columns = [c.name for c in SessionRow.__table__.columns if c.name not in ("src6", "dst6")]
    with old.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE sessions ({', '.join(columns)}, PRIMARY KEY (id))")
        values = {k: v for k, v in _row(7).items() if k in columns}
        values["created_at"] = str(values["created_at"])
        names = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        conn.exec_driver_sql(
            f"INSERT INTO sessions ({names}) VALUES ({marks})", tuple(values.values())
        )
    old.dispose()
    db = Database(url)
    db.create()
    try:
        (row,) = db.sessions()
        assert (row["id"], row["src"], row["src6"]) == (7, 0xC6336414, None)
        assert Session.from_row(row).key == (0xC6336414, 0xFFFFFFFE, 6, 1, 2)
        db.insert_sessions([{**_row(8), "src6": "2001:db8::1", "dst6": "2001:db8::2"}])
        assert db.session_count() == 2
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
