"""The CPM's database: policy versions, NPMs and their tag blocks, SPMs and their status,
sessions, alerts. SQLAlchemy 2; a SQLite file by default, PostgreSQL by URL
(`postgresql+psycopg://user@/dbname?host=/run/postgresql`).

Sessions are written in bulk, one transaction per batch, after the switch accepted the entries:
the switch is the truth and the DB follows it; a restart reconciles the two
(`controller.sessions.SessionManager.reconcile`). An IPv6 session's addresses are text in `src6`
and `dst6` (its reply's are the same, swapped: IPv6 sessions have no NAT), its integer address
columns 0. A database made before a column was added gets it at start (`Database.create`).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import logging
import operator
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    Float,
    Index,
    Integer,
    String,
    Text,
    and_,
    create_engine,
    delete,
    event,
    false,
    func,
    inspect,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker
from sqlalchemy.sql.elements import ColumnElement

from opengate.yamlconf import text_problem

LOG = logging.getLogger(__name__)


# The largest values of the columns' integer types, the same on SQLite and PostgreSQL: what
# the API lets a client ask for (a larger id or offset fails in the driver, not as a miss).
INT_MAX = 2**31 - 1  # Integer
BIGINT_MAX = 2**63 - 1  # BigInteger, and SQLite's LIMIT and OFFSET


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Base(DeclarativeBase):
    pass


class PolicyVersion(Base):
    __tablename__ = "policy_versions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200))
    path: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64), index=True)
    text: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(20))  # applied | failed | superseded
    source: Mapped[str] = mapped_column(String(50), default="cli")
    summary: Mapped[str] = mapped_column(Text, default="{}")
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class NpmRow(Base):
    __tablename__ = "npms"
    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    address: Mapped[str] = mapped_column(String(200))
    device_id: Mapped[int] = mapped_column(BigInteger)
    tag_base: Mapped[int] = mapped_column(Integer, unique=True)
    # What the active classifier bank holds, so that a restart can trust it without compiling.
    classifier_bank: Mapped[int | None] = mapped_column(Integer, nullable=True)
    classifier_rules: Mapped[str | None] = mapped_column(String(64), nullable=True)
    classifier_entries: Mapped[str | None] = mapped_column(String(64), nullable=True)


class SpmRow(Base):
    __tablename__ = "spms"
    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    port: Mapped[int] = mapped_column(Integer)
    mac: Mapped[int] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(20), default="unknown")  # unknown | up | down
    weight: Mapped[int] = mapped_column(Integer, default=0)
    last_report: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    report: Mapped[str] = mapped_column(Text, default="{}")
    changed_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class SessionRow(Base):
    __tablename__ = "sessions"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    npm: Mapped[str] = mapped_column(String(100))
    proto: Mapped[int] = mapped_column(Integer)
    src: Mapped[int] = mapped_column(BigInteger)
    dst: Mapped[int] = mapped_column(BigInteger)
    src6: Mapped[str | None] = mapped_column(String(39), nullable=True)  # IPv6 sessions' addresses
    dst6: Mapped[str | None] = mapped_column(String(39), nullable=True)
    sport: Mapped[int] = mapped_column(Integer)
    dport: Mapped[int] = mapped_column(Integer)
    r_src: Mapped[int] = mapped_column(BigInteger)
    r_dst: Mapped[int] = mapped_column(BigInteger)
    r_sport: Mapped[int] = mapped_column(Integer)
    r_dport: Mapped[int] = mapped_column(Integer)
    class_id: Mapped[int] = mapped_column(Integer)
    spm_port: Mapped[int] = mapped_column(Integer)
    spm_mac: Mapped[int] = mapped_column(BigInteger)
    nat_kind: Mapped[int] = mapped_column(Integer)
    nat_addr: Mapped[int] = mapped_column(BigInteger)
    nat_port: Mapped[int] = mapped_column(Integer)
    acl_rule: Mapped[int] = mapped_column(BigInteger)
    ingress_port: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(20))  # active | closing | blocked | bypassed
    idle_timeout: Mapped[float] = mapped_column(Float)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (Index("ix_sessions_npm", "npm"),)


class AlertRow(Base):
    __tablename__ = "alerts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    received_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    spm: Mapped[str] = mapped_column(String(100))
    ts: Mapped[str | None] = mapped_column(String(64), nullable=True)
    sid: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    gid: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    rev: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    msg: Mapped[str] = mapped_column(Text, default="")
    classtype: Mapped[str | None] = mapped_column(String(100), nullable=True)
    action: Mapped[str] = mapped_column(String(20))
    proto: Mapped[str | None] = mapped_column(String(10), nullable=True)
    src: Mapped[str | None] = mapped_column(String(64), nullable=True)
    dst: Mapped[str | None] = mapped_column(String(64), nullable=True)
    sport: Mapped[int | None] = mapped_column(Integer, nullable=True)
    dport: Mapped[int | None] = mapped_column(Integer, nullable=True)
    community_id: Mapped[str | None] = mapped_column(String(100), nullable=True)
    session_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


def row_problem(model: type[Base], values: dict[str, Any]) -> str | None:
    """Why a row of `model` with these column values could not be stored, on SQLite or
    PostgreSQL alike (text without NUL or lone surrogates, within a String's length; integers
    within the column's type), or None: checked before a change that the row records is made."""
    columns = model.__table__.columns
    for name, value in values.items():
        kind = columns[name].type
        if isinstance(value, str):
            problem = text_problem(value)
            if problem is not None:
                return f"{name} {problem}"
            length = getattr(kind, "length", None)
            if length is not None and len(value) > length:
                return f"{name} is longer than {length} characters"
        elif isinstance(value, int) and isinstance(kind, Integer):
            top = BIGINT_MAX if isinstance(kind, BigInteger) else INT_MAX
            if not -top - 1 <= value <= top:
                return f"{name} {value} does not fit the column"
    return None


def policy_version_problem(*, name: str, path: str, text: str, source: str) -> str | None:
    """What keeps a policy version from being stored (`row_problem`), or None."""
    values = {"name": name, "path": path, "text": text, "source": source}
    return row_problem(PolicyVersion, values)


@dataclass(frozen=True, slots=True)
class StoredPolicy:
    version: int
    name: str
    path: str
    sha256: str
    text: str
    status: str
    source: str
    summary: dict[str, Any]
    error: str | None
    created_at: dt.datetime


SESSION_COLUMNS = tuple(c.name for c in SessionRow.__table__.columns)


class Database:
    """Thread-safe: every method opens its own short transaction."""

    def __init__(self, url: str) -> None:
        self.url = url
        kwargs: dict[str, Any] = {}
        if url.startswith("sqlite"):
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        self.engine: Engine = create_engine(url, **kwargs)
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._session_insert: tuple[str, Callable[[dict[str, Any]], Any]] | None = None

    def create(self) -> None:
        Base.metadata.create_all(self.engine)
        self._add_missing_columns()

    def _add_missing_columns(self) -> None:
        """Nullable columns a table made by an earlier version lacks (IPv6 sessions' src6 and
        dst6), added: ALTER TABLE ... ADD COLUMN, which SQLite and PostgreSQL both have."""
        inspector = inspect(self.engine)
        with self.engine.begin() as conn:
            for table in Base.metadata.sorted_tables:
                have = {c["name"] for c in inspector.get_columns(table.name)}
                for column in table.columns:
                    if column.name in have or not column.nullable:
                        continue
                    kind = column.type.compile(dialect=self.engine.dialect)
                    quote = self.engine.dialect.identifier_preparer.quote
                    conn.exec_driver_sql(
                        f"ALTER TABLE {quote(table.name)} ADD COLUMN {quote(column.name)} {kind}"
                    )
                    LOG.info("database: added column %s.%s", table.name, column.name)

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions.begin() as session:
            yield session

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    # -- policy versions ---------------------------------------------------------------------

    def add_policy_version(
        self,
        *,
        name: str,
        path: str,
        sha256: str,
        text: str,
        status: str,
        source: str,
        summary: dict[str, Any],
        error: str | None = None,
    ) -> int:
        with self.session() as s:
            if status == "applied":
                s.execute(
                    update(PolicyVersion)
                    .where(PolicyVersion.status == "applied")
                    .values(status="superseded")
                )
            row = PolicyVersion(
                name=name,
                path=path,
                sha256=sha256,
                text=text,
                status=status,
                source=source,
                summary=json.dumps(summary, default=str),
                error=error,
            )
            s.add(row)
            s.flush()
            return int(row.id)

    def active_policy(self) -> StoredPolicy | None:
        with self.session() as s:
            row = s.scalars(
                select(PolicyVersion)
                .where(PolicyVersion.status == "applied")
                .order_by(PolicyVersion.id.desc())
                .limit(1)
            ).first()
            return _stored(row) if row is not None else None

    def policy_versions(self, limit: int = 50) -> list[StoredPolicy]:
        with self.session() as s:
            rows = s.scalars(
                select(PolicyVersion).order_by(PolicyVersion.id.desc()).limit(limit)
            ).all()
            return [_stored(r) for r in rows]

    def policy_version(self, version: int) -> StoredPolicy | None:
        with self.session() as s:
            row = s.get(PolicyVersion, version)
            return _stored(row) if row is not None else None

    # -- NPMs --------------------------------------------------------------------------------

    def tag_base_for(self, name: str, address: str, device_id: int) -> int:
        """This NPM's tag block: allocated once (even, from 0x0100 up), then kept."""
        with self.session() as s:
            row = s.get(NpmRow, name)
            if row is not None:
                row.address = address
                row.device_id = device_id
                return int(row.tag_base)
            used = set(s.scalars(select(NpmRow.tag_base)).all())
            tag = 0x0100
            while tag in used:
                tag += 2
            s.add(NpmRow(name=name, address=address, device_id=device_id, tag_base=tag))
            return tag

    def classifier_state(self, name: str) -> tuple[int, str, str] | None:
        """(active bank, rules digest, entries digest) last recorded for an NPM."""
        with self.session() as s:
            row = s.get(NpmRow, name)
            if row is None or row.classifier_bank is None:
                return None
            return (row.classifier_bank, row.classifier_rules or "", row.classifier_entries or "")

    def set_classifier_state(self, name: str, bank: int, rules: str, entries: str) -> None:
        with self.session() as s:
            row = s.get(NpmRow, name)
            if row is not None:
                row.classifier_bank = bank
                row.classifier_rules = rules
                row.classifier_entries = entries

    # -- SPMs --------------------------------------------------------------------------------

    def upsert_spm(
        self,
        name: str,
        *,
        port: int,
        mac: int,
        status: str,
        weight: int,
        report: dict[str, Any] | None = None,
        status_changed: bool = False,
    ) -> None:
        with self.session() as s:
            row = s.get(SpmRow, name)
            if row is None:
                row = SpmRow(name=name, port=port, mac=mac, status=status, weight=weight)
                s.add(row)
            row.port, row.mac, row.status, row.weight = port, mac, status, weight
            if report is not None:
                row.report = json.dumps(report, default=str)
                row.last_report = utcnow()
            if status_changed:
                row.changed_at = utcnow()

    def spms(self) -> list[dict[str, Any]]:
        with self.session() as s:
            rows = s.scalars(select(SpmRow).order_by(SpmRow.name)).all()
            return [
                {
                    "name": r.name,
                    "port": r.port,
                    "mac": r.mac,
                    "status": r.status,
                    "weight": r.weight,
                    "last_report": r.last_report.isoformat() if r.last_report else None,
                    "report": json.loads(r.report or "{}"),
                    "changed_at": r.changed_at.isoformat() if r.changed_at else None,
                }
                for r in rows
            ]

    # -- sessions ----------------------------------------------------------------------------

    def insert_sessions(self, rows: Sequence[dict[str, Any]]) -> None:
        """One statement for many rows, through the driver: a flood of new flows is a row each,
        and SQLAlchemy's own executemany cost about 6 µs a row on SQLite, this about 4."""
        if not rows:
            return
        with self.engine.begin() as conn:
            if self._session_insert is None:
                self._session_insert = _driver_insert(SessionRow.__table__, conn.dialect)
            sql, row_params = self._session_insert
            conn.exec_driver_sql(sql, [row_params(r) for r in rows])

    def delete_sessions(self, ids: Iterable[int]) -> None:
        id_list = list(ids)
        if not id_list:
            return
        with self.engine.begin() as conn:
            for start in range(0, len(id_list), 500):
                chunk = id_list[start : start + 500]
                conn.execute(delete(SessionRow).where(SessionRow.id.in_(chunk)))

    def update_sessions(self, changes: Sequence[dict[str, Any]]) -> None:
        """Each item: {"id": ..., column: value, ...}."""
        if not changes:
            return
        with self.engine.begin() as conn:
            for change in changes:
                values = {k: v for k, v in change.items() if k != "id"}
                conn.execute(update(SessionRow).where(SessionRow.id == change["id"]).values(values))

    def sessions(
        self, npm: str | None = None, limit: int | None = None, offset: int = 0
    ) -> list[dict[str, Any]]:
        query = select(SessionRow).order_by(SessionRow.id)
        if npm is not None:
            query = query.where(SessionRow.npm == npm)
        if limit is not None:
            query = query.limit(limit).offset(offset)
        with self.engine.connect() as conn:
            return [
                dict(row._mapping)
                for row in conn.execute(query.with_only_columns(*SessionRow.__table__.columns))
            ]

    def session_count(self, npm: str | None = None) -> int:
        query = select(func.count()).select_from(SessionRow)
        if npm is not None:
            query = query.where(SessionRow.npm == npm)
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def session_page(
        self,
        search: str = "",
        sort: str = "id",
        descending: bool = False,
        limit: int = 50,
        offset: int = 0,
    ) -> tuple[int, list[dict[str, Any]]]:
        """One page of sessions for the console: (how many match, the page's rows). `search`:
        words that must all match (an address, address:port, a port or id, tcp/udp/icmp, a
        state, an NPM name); `sort`: a key of SESSION_SORT_KEYS."""
        column = SESSION_SORT_KEYS.get(sort)
        if column is None:
            raise ValueError(f"cannot sort sessions by {sort!r}")
        conditions = [session_condition(word) for word in search.split()]
        order = column.desc() if descending else column.asc()
        tie = SessionRow.id.desc() if descending else SessionRow.id.asc()
        query = (
            select(*SessionRow.__table__.columns)
            .where(*conditions)
            .order_by(order, tie)
            .limit(limit)
            .offset(offset)
        )
        count = select(func.count()).select_from(SessionRow).where(*conditions)
        with self.engine.connect() as conn:
            total = int(conn.execute(count).scalar_one())
            return total, [dict(row._mapping) for row in conn.execute(query)]

    def session_row(self, session_id: int) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(*SessionRow.__table__.columns).where(SessionRow.id == session_id)
            ).first()
            return dict(row._mapping) if row is not None else None

    def max_session_id(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.max(SessionRow.id))).scalar() or 0)

    # -- alerts ------------------------------------------------------------------------------

    def add_alert(self, **values: Any) -> int:
        with self.session() as s:
            row = AlertRow(**values)
            s.add(row)
            s.flush()
            return int(row.id)

    def alerts(self, limit: int = 100) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(*AlertRow.__table__.columns).order_by(AlertRow.id.desc()).limit(limit)
            )
            out = []
            for row in rows:
                item = dict(row._mapping)
                item["received_at"] = item["received_at"].isoformat()
                out.append(item)
            return out

    def alert_page(
        self,
        *,
        sid: int | None = None,
        classtype: str | None = None,
        host: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[int, list[dict[str, Any]]]:
        """Alerts newest first, filtered for the console: (how many match, the page)."""
        conditions: list[ColumnElement[bool]] = []
        if sid is not None:
            conditions.append(AlertRow.sid == sid)
        if classtype:
            conditions.append(AlertRow.classtype == classtype)
        if host:
            conditions.append(or_(AlertRow.src == host, AlertRow.dst == host))
        query = (
            select(*AlertRow.__table__.columns)
            .where(*conditions)
            .order_by(AlertRow.id.desc())
            .limit(limit)
            .offset(offset)
        )
        count = select(func.count()).select_from(AlertRow).where(*conditions)
        with self.engine.connect() as conn:
            total = int(conn.execute(count).scalar_one())
            out = []
            for row in conn.execute(query):
                item = dict(row._mapping)
                item["received_at"] = item["received_at"].isoformat()
                out.append(item)
            return total, out

    def alert_classtypes(self) -> list[str]:
        with self.engine.connect() as conn:
            query = select(AlertRow.classtype).where(AlertRow.classtype.is_not(None)).distinct()
            return sorted(str(c) for c in conn.execute(query).scalars())

    def max_alert_id(self) -> int:
        """Alerts stored so far (ids only grow): what the console's alert rate counts."""
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.max(AlertRow.id))).scalar() or 0)


SESSION_SORT_KEYS: dict[str, Any] = {
    "id": SessionRow.id,
    "npm": SessionRow.npm,
    "proto": SessionRow.proto,
    "src": SessionRow.src,
    "dst": SessionRow.dst,
    "sport": SessionRow.sport,
    "dport": SessionRow.dport,
    "nat": SessionRow.nat_addr,
    "class": SessionRow.class_id,
    "spm": SessionRow.spm_port,
    "state": SessionRow.state,
    "created": SessionRow.created_at,
}
SESSION_STATES = ("active", "closing", "blocked", "bypassed")
_PROTOCOLS = {"tcp": 6, "udp": 17, "icmp": 1}


def session_condition(word: str) -> ColumnElement[bool]:
    """What one search word of the console's session table matches: `id:N`, an address (any
    side, or the NAT address), `address:port`, a number (id or any port), a protocol, a state,
    else an NPM name."""
    text = word.strip().lower()
    if text.startswith("id:") and _is_number(text[3:]):
        return _id_condition(int(text[3:]))
    v6 = _ipv6_word(text)
    if v6 is not None:
        address6, port6 = v6
        on_address6 = or_(SessionRow.src6 == address6, SessionRow.dst6 == address6)
        return on_address6 if port6 is None else and_(on_address6, _port_condition(port6))
    address, _, port_text = text.partition(":")
    try:
        value = int(ipaddress.IPv4Address(address))
    except ValueError:
        value = None
    if value is not None:
        on_address = or_(
            SessionRow.src == value,
            SessionRow.dst == value,
            SessionRow.r_src == value,
            SessionRow.r_dst == value,
            and_(SessionRow.nat_kind != 0, SessionRow.nat_addr == value),
        )
        if not _is_number(port_text):
            return on_address
        port = int(port_text)
        return and_(on_address, _port_condition(port))
    if _is_number(text):
        number = int(text)
        return or_(_id_condition(number), _port_condition(number))
    if text in _PROTOCOLS:
        return SessionRow.proto == _PROTOCOLS[text]
    if text in SESSION_STATES:
        return SessionRow.state == text
    return SessionRow.npm == word


def _ipv6_word(text: str) -> tuple[str, int | None] | None:
    """An IPv6 address (`2001:db8::1`) or address and port (`[2001:db8::1]:80`) as the
    database writes it, or None."""
    port: int | None = None
    if text.startswith("["):
        inside, _, rest = text[1:].partition("]")
        if rest:
            if not (rest.startswith(":") and _is_number(rest[1:])):
                return None
            port = int(rest[1:])
        text = inside
    if text.count(":") < 2:
        return None
    try:
        return str(ipaddress.IPv6Address(text)), port
    except ValueError:
        return None


def _is_number(text: str) -> bool:
    """ASCII digits only: str.isdigit() also takes "²", which int() refuses."""
    return text.isascii() and text.isdigit()


def _id_condition(number: int) -> ColumnElement[bool]:
    # past the column's range no id matches (the driver would refuse the number)
    return SessionRow.id == number if number <= BIGINT_MAX else false()


def _port_condition(port: int) -> ColumnElement[bool]:
    if port > 65535:
        return false()
    return or_(
        SessionRow.sport == port,
        SessionRow.dport == port,
        SessionRow.r_sport == port,
        SessionRow.r_dport == port,
        and_(SessionRow.nat_kind != 0, SessionRow.nat_port == port),
    )


def _stored(row: PolicyVersion) -> StoredPolicy:
    return StoredPolicy(
        version=row.id,
        name=row.name,
        path=row.path,
        sha256=row.sha256,
        text=row.text,
        status=row.status,
        source=row.source,
        summary=json.loads(row.summary or "{}"),
        error=row.error,
        created_at=row.created_at,
    )


def _driver_insert(table: Any, dialect: Any) -> tuple[str, Callable[[dict[str, Any]], Any]]:
    """An INSERT of every column of `table` with positional parameters in the driver's style
    (SQLite's `?`, psycopg's `%s`), and the function that turns a row (column -> Python value)
    into its parameters, with the dialect's conversions (SQLite stores a datetime as text, as
    SQLAlchemy would)."""
    mark = {"qmark": "?", "format": "%s", "pyformat": "%s"}.get(dialect.paramstyle)
    if mark is None:
        raise ValueError(f"database driver with parameter style {dialect.paramstyle!r}")
    columns = list(table.columns)
    names = [c.name for c in columns]
    # a row may leave out a nullable column (None): rows made before it was added
    optional = {c.name for c in columns if c.nullable}
    required = operator.itemgetter(*names)
    converted = [
        (i, f)
        for i, c in enumerate(columns)
        if (f := c.type.dialect_impl(dialect).bind_processor(dialect)) is not None
    ]

    def params(row: dict[str, Any]) -> tuple[Any, ...]:
        if optional.issubset(row):
            values = list(required(row))
        else:
            values = [row.get(n) if n in optional else row[n] for n in names]
        for i, f in converted:
            values[i] = f(values[i])
        return tuple(values)

    quoted = ", ".join(dialect.identifier_preparer.quote(n) for n in names)
    sql = f"INSERT INTO {table.name} ({quoted}) VALUES ({', '.join([mark] * len(names))})"
    return sql, params


def _sqlite_pragmas(connection: Any, _record: Any) -> None:
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


class DbWriter:
    """Writes in submission order on a thread of their own, so that the event dispatcher (and
    the switch) never wait for the database. `flush()` waits until everything submitted so far
    is committed; the controller flushes before it reads sessions back and when it stops."""

    def __init__(self, name: str = "cpm-db-writer") -> None:
        self._queue: queue.Queue[tuple[Callable[..., Any], tuple[Any, ...]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self.errors = 0

    def submit(self, function: Callable[..., Any], *args: Any) -> None:
        self._queue.put((function, args))

    def flush(self, timeout: float = 60.0) -> bool:
        done = threading.Event()
        self._queue.put((done.set, ()))
        return done.wait(timeout)

    def stop(self, timeout: float = 60.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            function, args = item
            try:
                function(*args)
            except Exception:
                self.errors += 1
                LOG.exception("database write %s failed", getattr(function, "__name__", function))
