"""What the SPMs say about flows: alerts (stored; a drop alert blocks its flow's session) and
bypass requests (a clean flow of a class that allows it is offloaded to the fast path), of
either family (an IPv6 flow's addresses in IPv6 text, ICMPv6 as `ipv6-icmp`). Either
may come before the CPM knows the session (the data plane made it and its digest is still on
its way): it is kept for EARLY_SECONDS (EARLY_KEPT at most) and applied when the session is
installed, a block over a bypass of the same flow."""

from __future__ import annotations

import ipaddress
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from controller import events as ev
from controller.db import Database
from controller.errors import RequestError
from controller.metrics import Metrics
from controller.session_encoding import FlowKey
from controller.session_model import BLOCKED, IPV4_MAX, Session
from controller.sessions import SessionManager
from opengate import p4constants as pc

LOG = logging.getLogger(__name__)

PROTO_NAMES = {
    "tcp": pc.IP_PROTO_TCP,
    "udp": pc.IP_PROTO_UDP,
    "icmp": pc.IP_PROTO_ICMP,
    "ipv6-icmp": pc.IP_PROTO_ICMPV6,  # the SPM's name (Suricata's, IANA's keyword)
    "icmpv6": pc.IP_PROTO_ICMPV6,
}
DROP_ACTIONS = ("drop", "block", "reject", "sdrop")
EARLY_SECONDS = 5.0
EARLY_KEPT = 4096


class SpmVerdicts:
    """Alerts and bypass requests of the SPMs, against the sessions. Dispatcher thread only."""

    def __init__(self, sessions: SessionManager, db: Database, metrics: Metrics) -> None:
        self.sessions = sessions
        self.db = db
        self.metrics = metrics
        self._early: OrderedDict[FlowKey, tuple[ev.BypassRequested | str, float]] = OrderedDict()

    def subscribe(self, bus: ev.EventBus) -> None:
        bus.subscribe(ev.AlertReceived, self.on_alert)
        bus.subscribe(ev.BypassRequested, self.on_bypass)
        bus.subscribe(ev.SessionsInstalled, self.on_sessions_installed)

    def flow_key(self, flow: Mapping[str, Any]) -> FlowKey:
        try:
            proto_value = flow["proto"]
            if isinstance(proto_value, str):
                proto = PROTO_NAMES.get(proto_value.lower())
                if proto is None:
                    proto = int(proto_value)
            else:
                proto = int(proto_value)
            src = ipaddress.ip_address(str(flow["src"]))
            dst = ipaddress.ip_address(str(flow["dst"]))
            if src.version != dst.version:
                raise ValueError(f"{src} and {dst} are of different address families")
            if src.version == 6 and (int(src) <= IPV4_MAX or int(dst) <= IPV4_MAX):
                # ::/96: the CPM makes no session of such an address (controller.session_model)
                raise ValueError(f"{src} > {dst}: no session has an address in ::/96")
            return (
                int(src),
                int(dst),
                proto,
                int(flow.get("sport") or 0),
                int(flow.get("dport") or 0),
            )
        except (KeyError, ValueError, TypeError) as error:
            raise RequestError(422, f"flow: {error}") from None

    def find_flow(self, flow: Mapping[str, Any]) -> Session | None:
        return self.sessions.find_flow(self.flow_key(flow))

    def on_alert(self, event: ev.AlertReceived) -> dict[str, Any]:
        alert = event.alert
        flow = alert.get("flow") or {}
        session = self.find_flow(flow) if flow else None
        action = str(alert.get("action", "alert")).lower()
        self.metrics.alerts.labels(event.spm, action).inc()
        alert_id = self.db.add_alert(
            spm=event.spm,
            ts=str(alert.get("ts")) if alert.get("ts") is not None else None,
            sid=alert.get("sid"),
            gid=alert.get("gid"),
            rev=alert.get("rev"),
            msg=str(alert.get("msg", "")),
            classtype=alert.get("classtype"),
            action=action,
            proto=str(flow.get("proto")) if flow.get("proto") is not None else None,
            src=flow.get("src"),
            dst=flow.get("dst"),
            sport=flow.get("sport"),
            dport=flow.get("dport"),
            community_id=alert.get("community_id"),
            session_id=session.id if session is not None else None,
        )
        blocked = False
        if action in DROP_ACTIONS and session is None and flow:
            # its session may not be known yet (digest queued): blocked when it is installed
            self._remember_early(self.flow_key(flow), event.spm)
        if action in DROP_ACTIONS and session is not None and session.state != BLOCKED:
            self.sessions.block(session)
            blocked = True
            LOG.warning(
                "SPM %s: %s (sid %s) -> session %d blocked",
                event.spm,
                alert.get("msg"),
                alert.get("sid"),
                session.id,
                extra={"spm": event.spm},
            )
        return {
            "alert": alert_id,
            "session": session.id if session is not None else None,
            "blocked": blocked,
        }

    def on_bypass(self, event: ev.BypassRequested) -> dict[str, Any]:
        session = self.find_flow(event.flow)
        if session is None:
            # The data plane may have made the session, its digest not handled yet: keep the
            # request for a while and apply it when the session is installed.
            self._remember_early(self.flow_key(event.flow), event)
            return {"session": None, "bypassed": False, "pending": True}
        return self._bypass(session, event)

    def _remember_early(self, key: FlowKey, request: ev.BypassRequested | str) -> None:
        early = self._early
        key = _early_name(key)
        previous = early.pop(key, None)
        if previous is not None and isinstance(previous[0], str):
            request = previous[0]  # blocked stays blocked
        early[key] = (request, time.monotonic())
        while len(early) > EARLY_KEPT:
            early.popitem(last=False)

    def on_sessions_installed(self, event: ev.SessionsInstalled) -> None:
        """Apply the bypass requests and drop alerts that came before these sessions were
        known."""
        early = self._early
        if not early:
            return
        now = time.monotonic()
        while early:  # expired first (oldest first)
            _, (_, seen) = next(iter(early.items()))
            if now - seen <= EARLY_SECONDS:
                break
            early.popitem(last=False)
        for key in event.keys:
            session = self.sessions.find(event.npm, key)
            if session is None:
                continue
            for k in (session.key, session.reply):
                for named in (k, (k[1], k[0], k[2], k[4], k[3])):
                    item = early.pop(_early_name(named), None)
                    if item is None:
                        continue
                    request = item[0]
                    if isinstance(request, str):
                        if session.state != BLOCKED:
                            self.sessions.block(session)
                            LOG.warning(
                                "SPM %s: drop alert before the session -> session %d blocked",
                                request,
                                session.id,
                                extra={"spm": request},
                            )
                        continue
                    try:
                        self._bypass(session, request)
                    except RequestError as refused:
                        LOG.warning("session %d: bypass refused: %s", session.id, refused.message)

    def _bypass(self, session: Session, event: ev.BypassRequested) -> dict[str, Any]:
        spec = self.sessions.policy.class_by_id(session.class_id)
        if spec is None or not spec.bypass:
            name = spec.name if spec is not None else f"#{session.class_id}"
            raise RequestError(409, f"class {name} does not allow bypass")
        if session.state == BLOCKED:
            raise RequestError(409, "the session is blocked")
        self.sessions.bypass(session)
        LOG.info(
            "session %d bypassed by SPM %s after %d clean bytes",
            session.id,
            event.spm,
            event.clean_bytes,
            extra={"spm": event.spm},
        )
        return {"session": session.id, "bypassed": True}


def _early_name(key: FlowKey) -> FlowKey:
    """How an early request is filed: by its 5-tuple, but an ICMP or ICMPv6 flow by its
    addresses alone (an SPM names it by type and code, the session by the echo identifier;
    `find_flow` matches it the same way)."""
    if key[2] in (pc.IP_PROTO_ICMP, pc.IP_PROTO_ICMPV6):
        return (key[0], key[1], key[2], 0, 0)
    return key
