"""After a controller restart: make memory, the database and a switch's session tables agree
without wiping anything (SessionManager.reconcile)."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from finsy.proto import p4r

from controller.session_encoding import FlowKey
from controller.session_model import Session, partner_key, session_from_entries
from opengate.p4rt import update_of

if TYPE_CHECKING:
    from controller.sessions import SessionManager

LOG = logging.getLogger("controller.sessions")


@dataclass(slots=True)
class ReconcileReport:
    adopted: int = 0
    adopted_from_switch: int = 0
    reinstalled: int = 0
    dropped_from_db: int = 0
    deleted_orphans: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "adopted": self.adopted,
            "adopted_from_switch": self.adopted_from_switch,
            "reinstalled": self.reinstalled,
            "dropped_from_db": self.dropped_from_db,
            "deleted_orphans": self.deleted_orphans,
        }


def reconcile(manager: SessionManager, npm: str, switch_is_new: bool) -> ReconcileReport:
    """Make memory, DB and the switch's session table agree, without wiping anything.

    * DB session with both entries on the switch: adopted.
    * DB session with one or no entry: reinstalled when the switch is new (it restarted),
      else (the entries aged out while no controller listened) dropped from the DB.
    * Switch entries no DB session claims: paired by their keys and adopted if both
      directions are there and agree, else deleted.
    """
    report = ReconcileReport()
    manager.store.flush()
    manager.forget_npm(npm)
    manager.next_id = max(manager.next_id, manager.db.max_session_id() + 1)
    connection = manager.npms[npm]
    encoder = manager.encoder(npm)
    on_switch: dict[FlowKey, p4r.TableEntry] = {}
    queries = [
        p4r.Entity(table_entry=p4r.TableEntry(table_id=table_id)) for table_id in encoder.table_ids
    ]
    for entity in connection.read(queries):
        on_switch[encoder.decode_key(entity.table_entry)] = entity.table_entry
    claimed: set[FlowKey] = set()
    reinstall: list[Session] = []
    drop_ids: list[int] = []
    for row in manager.db.sessions(npm=npm):
        session = Session.from_row(row)
        here = [k in on_switch for k in (session.key, session.reply)]
        if all(here):
            manager.index_session(session)
            claimed.update((session.key, session.reply))
            report.adopted += 1
        elif switch_is_new or any(here):
            manager.index_session(session)
            claimed.update(k for k in (session.key, session.reply) if k in on_switch)
            reinstall.append(session)
        else:
            drop_ids.append(session.id)
    manager.db.delete_sessions(drop_ids)
    report.dropped_from_db = len(drop_ids)
    if reinstall:
        updates = []
        for session in reinstall:
            for key, entry in zip(
                (session.key, session.reply), manager.entries_of(session), strict=True
            ):
                kind = p4r.Update.MODIFY if key in on_switch else p4r.Update.INSERT
                updates.append(update_of(kind, entry))
        connection.write_checked(updates, "reinstall sessions")
        report.reinstalled = len(reinstall)
    # Entries nobody claims: pair them up.
    adopted: list[Session] = []
    orphans: list[FlowKey] = []
    now = dt.datetime.now(dt.UTC)
    for key, entry in on_switch.items():
        if key in claimed:
            continue
        params = encoder.decode_params(entry)
        partner, original = partner_key(key, params)
        other = on_switch.get(partner)
        if other is None or partner in claimed:
            orphans.append(key)
            continue
        other_params = encoder.decode_params(other)
        if (params is None) != (other_params is None):
            orphans.append(key)
            continue
        orig_key, orig_params = (key, params) if original else (partner, other_params)
        session = session_from_entries(
            manager.new_id(), npm, orig_key, orig_params, entry.idle_timeout_ns, now
        )
        if session.reply != (partner if original else key):
            orphans.append(key)
            continue
        claimed.update((key, partner))
        manager.index_session(session)
        adopted.append(session)
    if orphans:
        connection.write(
            [update_of(p4r.Update.DELETE, encoder.match(k)) for k in orphans], "orphan entries"
        )
    manager.db.insert_sessions([s.row() for s in adopted])
    report.adopted_from_switch = len(adopted)
    report.deleted_orphans = len(orphans)
    manager.update_gauges(npm)
    LOG.info("%s: sessions reconciled: %s", npm, report.as_dict())
    return report
