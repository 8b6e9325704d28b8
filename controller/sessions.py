"""Sessions: both directions of a flow in the `session` table, their NAT bindings, their life.

A session is created from a `session_request_t` digest (the data plane already forwarded the
opening packet, needs no NAT, and on v1model builds made the session itself in its registers: the
entries written here take over from it) or from a packet-in (the opening packet needs NAT: the CPM
allocates the binding, installs both directions, and re-injects the packet through the pipeline).
Both directions carry the class and the SPM the data plane chose, so the flow stays on that SPM.
An IPv6 flow's opening packet that the ACL permits comes as a packet-in too (CPU_REASON_SESSION_V6):
the CPM gives it what the data plane gives an IPv4 flow, its IDS class (`controller.ids6`, the
same rules' IPv6 headers, first match) and, when the class's chain needs an SPM, a member of the
chain's pool that is up (`SpmPool.choose`: by the pool's weights, the same for both directions;
none up: the chain's `on_failure`, open routes the flow uninspected, closed blocks the session);
its session (`session_v6`: no NAT, both entries with the class and the SPM) is installed the same
way and the packet re-injected (not when blocked); its FIN or RST comes as a `session_close_v6_t`
digest. An IPv6 flow to a NAT64 prefix (`nat.nat64`) gets a NAT64 session instead: an IPv4
address and port from the translation's address and `nat.ports` (as for masquerading), the routes
of both families from the policy, no SPM (`controller.session_nat64`).

Entries per session (the data plane's contract, docs/explanation/architecture.md, "NAT and
inspection"):

* original direction, key = the 5-tuple as the first packet arrived, nat_before_spm = 0;
* reply direction, key = the reverse of the original's tuple after NAT, with the inverse rewrite
  and nat_before_spm = 1 (NAT is undone before the SPM sees the packet).

Life: removed when both directions are idle (the switch's idle-timeout notifications, confirmed
by reading `time_since_last_hit` of both entries), after FIN in both directions plus
`sessions.closing_linger`, after RST plus the same linger (late segments of a reset connection,
and the peer's RST for each of them, still pass, as a conntrack firewall lets them; 0: at once),
or by the API. Blocked by a drop verdict (both entries
become `session_block`), bypassed by a clean verdict (both entries lose their SPM).

Consistency: the switch is written first, the DB after, in bulk, one transaction per batch; a
restart reconciles the two (`reconcile`). Duplicate requests for a flow (retransmitted SYNs,
both ends opening a UDP flow at once, digests repeated by the switch) install it once.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from finsy.proto import p4r, rpc_code

from controller.db import Database, DbWriter
from controller.events import Call, Event, SessionsInstalled, SessionsRemoved
from controller.gateway_icmp import GatewayIcmp
from controller.metrics import Metrics
from controller.nat64_icmp import Nat64IcmpErrors
from controller.npm import NpmConnection, WriteResult
from controller.policy import Policy
from controller.rematch import OUTCOMES, Classify, HoldJob, PolicyHold, classify6
from controller.session_close import Close, SessionCloses, close_reason
from controller.session_encoding import FlowKey, SessionEncoder, SessionUpdate
from controller.session_model import (
    ACTIVE,
    BLOCKED,
    BYPASSED,
    Session,
    direction_params,
    flow_frame,
    flow_text,
    key_is_v6,
    reply_key,
)
from controller.session_nat64 import nat64_routes, nat64_session
from controller.session_reconcile import ReconcileReport, reconcile
from controller.spm_pool import SpmPool
from opengate import p4constants as pc
from opengate.throttled import ThrottledWarning

LOG = logging.getLogger(__name__)

RECENT_LATENCIES = 100_000
GONE = frozenset({rpc_code.NOT_FOUND})  # a delete's expected failure: the entry went already
# sessions.data_plane_entries: on_demand. The data plane reports a routed flow that its slot
# carries without exact entries again from its first packet after sessions.report_interval, so a
# slot-only session not reported for that + its idle timeout has aged out of its slot; this much
# more covers the digest's way to the CPM and the tick.
SLOT_GRACE_SECONDS = 2.0


@dataclass(slots=True)
class _Pending:
    session: Session
    received_at: float
    source: str  # digest | packet_in
    payload: bytes | None = None


@dataclass(slots=True)
class SessionStats:
    installed: int = 0
    removed: int = 0
    duplicates: int = 0
    failed: int = 0
    packet_outs: int = 0
    acl_to_cpu: int = 0
    early_closes: int = 0  # FIN/RST reports replayed on a session created after them
    orphans_deleted: int = 0  # idle session entries of no session (left by a failed Write)
    slot_only: int = 0  # sessions recorded without entries (on_demand): a slot carries them
    promoted: int = 0  # ...whose entries were installed later (reported again, or acted on)
    slot_aged: int = 0  # ...removed, not reported again: aged out of their slot
    # sessions a policy apply changed (controller.rematch), by outcome, since the start
    rematched: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    rematch_turns: int = 0  # turns on the dispatcher that held sessions to applied policies
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_LATENCIES))


class SessionManager:
    """Every session of every NPM. Used from the dispatcher thread only."""

    def __init__(
        self,
        db: Database,
        metrics: Metrics,
        npms: Mapping[str, NpmConnection],
        policy: Policy,
        spms: SpmPool,
        publish: Callable[[Event], object] | None = None,
        store: DbWriter | None = None,
    ) -> None:
        self.publish = publish
        self.store = store or DbWriter()
        self.db = db
        self.metrics = metrics
        self.npms = npms
        self.policy = policy
        self.spms = spms
        self.sessions: dict[int, Session] = {}
        self.index: dict[tuple[str, FlowKey], Session] = {}
        self.closes = SessionCloses()  # FIN/RST: sessions in their linger, early reports
        self.per_npm: dict[str, int] = {}
        self.nat_in_use: dict[str, int] = {}
        self.next_id = db.max_session_id() + 1
        self.stats = SessionStats()
        self.icmp = GatewayIcmp()  # answers to TTL_EXPIRED and NO_ROUTE packet-ins
        self.nat64_errors = Nat64IcmpErrors(metrics.nat64_icmp_errors)  # NAT64_ICMP_ERROR's
        self._encoders: dict[str, SessionEncoder] = {}
        self._nat_cursor: dict[tuple[str, int, int], int] = {}
        # Where every port of the range was taken: (npm, remote address, NAT address, proto,
        # remote port) -> the policy it was found under. Nothing frees a port there until a
        # session of that group goes or the policy changes, so a flood towards one service
        # fails each further flow at once instead of scanning the whole range again.
        self._nat_full: dict[tuple[str, int, int, int, int], Policy] = {}
        self._nat_failures = ThrottledWarning(LOG, "no free NAT port")
        self._no_spm = ThrottledWarning(LOG, "no SPM of the pool is up, the chain fails closed")
        self.nat64_refused = ThrottledWarning(LOG, "NAT64 flow refused")
        # Slot-only sessions by idle timeout, each oldest report first (ageing, on_tick).
        self._slots: dict[float, OrderedDict[int, Session]] = {}
        # Sessions held to applied policies (and the last apply's settling time).
        self.hold = PolicyHold(spms, self.stats.rematched)
        self._holding: HoldJob | None = None  # the last apply's hold, while sessions remain

    def encoder(self, npm: str) -> SessionEncoder:
        encoder = self._encoders.get(npm)
        if encoder is None:
            encoder = self._encoders[npm] = SessionEncoder(self.npms[npm].schema)
        return encoder

    def count(self, npm: str | None = None) -> int:
        if npm is None:
            return len(self.sessions)
        return self.per_npm.get(npm, 0)

    def find(self, npm: str | None, key: FlowKey) -> Session | None:
        names = [npm] if npm is not None else list(self.npms)
        for name in names:
            session = self.index.get((name, key))
            if session is not None:
                return session
        return None

    def find_flow(self, key: FlowKey) -> Session | None:
        """The session of a flow as an SPM names it: the original direction's addresses (NAT
        is applied after the SPM one way and undone before it the other way), either way round.
        ICMP and ICMPv6 flows are named by type and code, not by the echo identifier: matched on
        addresses (the oldest such session)."""
        src, dst, proto, sport, dport = key
        for candidate in (key, (dst, src, proto, dport, sport)):
            session = self.find(None, candidate)
            if session is not None:
                return session
        if proto in (pc.IP_PROTO_ICMP, pc.IP_PROTO_ICMPV6):
            for session in self.sessions.values():
                ends = (session.key[0], session.key[1])
                if session.key[2] == proto and ends in ((src, dst), (dst, src)):
                    return session
        return None

    def new_id(self) -> int:
        value = self.next_id
        self.next_id += 1
        return value

    def timeout_of(self, proto: int) -> float:
        return self.policy.sessions.timeout_for(proto)

    # -- creation ----------------------------------------------------------------------------

    def on_requests(self, events: Sequence[Any]) -> None:
        """SessionRequested events (digests): install both directions, in one Write per NPM."""
        pending: dict[str, list[_Pending]] = {}
        recorded: dict[str, list[Session]] = {}
        promote: dict[str, dict[int, Session]] = {}
        now = dt.datetime.now(dt.UTC)
        clock = time.monotonic()
        on_demand = self.policy.sessions.data_plane_entries == "on_demand"
        # (Tofino's slots do not report a flow again: there every flow gets its entries.)
        reports_again = {
            npm: connection.slots_retire_themselves for npm, connection in self.npms.items()
        }
        for event, f in ((e, record) for e in events for record in e.records):
            key: FlowKey = (
                f["ipv4_src"],
                f["ipv4_dst"],
                f["ip_proto"],
                f["l4_sport"],
                f["l4_dport"],
            )
            known = self.index.get((event.npm, key))
            if known is not None and known.slot_only and f.get("dp_session"):
                # Reported again by the data plane: the flow lives on; now it gets its entries.
                self._slot_touch(known, clock)
                promote.setdefault(event.npm, {})[known.id] = known
                continue
            if self._is_duplicate(event.npm, key):
                continue
            # The NPM masqueraded the flow itself (its port from the NPM's block) or carried a
            # port forward: the CPM records the binding and installs the entries with it.
            nat_port = f.get("nat_port", 0)
            nat_kind, nat_addr = (
                (f.get("nat_kind") or pc.NAT_REWRITE_SRC, f["nat_addr"])
                if nat_port
                else (pc.NAT_NONE, 0)
            )
            session = Session(
                id=self.new_id(),
                npm=event.npm,
                key=key,
                reply=reply_key(key, nat_kind, nat_addr, nat_port),
                class_id=f["ids_class"],
                spm_port=f["spm_port"],
                spm_mac=f["spm_mac"],
                nat_kind=nat_kind,
                nat_addr=nat_addr,
                nat_port=nat_port,
                acl_rule=f["acl_rule"],
                ingress_port=f["ingress_port"],
                idle_timeout=self.timeout_of(key[2]),
                created_at=now,
            )
            self.index_session(session)
            if (
                on_demand
                and reports_again.get(event.npm, False)
                and f.get("dp_session")
                and nat_kind == pc.NAT_NONE
                # (a flow the last apply changed gets entries: its slot has the old verdict)
                and not (self.hold.settling(event.received_at) and self.hold.again([session])[1])
            ):
                # A routed flow its slot carries: recorded; entries once it proves long-lived.
                session.slot_only = True
                self._slot_touch(session, clock)
                recorded.setdefault(event.npm, []).append(session)
                continue
            pending.setdefault(event.npm, []).append(_Pending(session, event.received_at, "digest"))
        for npm, sessions in recorded.items():
            self._record(npm, sessions)
        for npm, items in pending.items():
            installed = self._install(npm, items)
            self._replay_early_closes(item.session for item in installed)
        for npm, known_sessions in promote.items():
            self._promote(npm, list(known_sessions.values()), "sessions (long-lived)")

    def on_packet_ins(self, events: Sequence[Any]) -> None:
        """PacketIn events: session set-up for NAT flows and for flows whose two candidate
        slots the data plane found held (a collision: the packet waits here until its session is
        written), and ACL to-CPU packets, and packets whose TTL ran out or that no route takes,
        which the gateway answers (controller.gateway_icmp)."""
        pending: dict[str, list[_Pending]] = {}
        reinject: list[tuple[str, bytes]] = []
        now = dt.datetime.now(dt.UTC)
        for event in events:
            reason = event.metadata.get("reason", 0)
            reason_name = pc.CPU_REASON_NAMES.get(reason, str(reason))
            self.metrics.packet_ins.labels(event.npm, reason_name).inc()
            if reason in (pc.CPU_REASON_TTL_EXPIRED, pc.CPU_REASON_NO_ROUTE):
                port = event.metadata.get("ingress_port", 0)
                reply = self.icmp.answer(self.policy, event.npm, port, reason, event.payload)
                if reply is not None:
                    self.npms[event.npm].packet_out(reply, submit_to_ingress=False, port=port)
                    self.stats.packet_outs += 1
                continue
            if reason == pc.CPU_REASON_NAT64_ICMP_ERROR:
                self.nat64_errors.answer(self, event.npm, event.payload)
                continue
            key = event.key
            log = LOG.getChild("packet_in")
            if key is None:
                log.warning(
                    "%s: packet-in (%s) of no IPv4 or IPv6 flow; dropped", event.npm, reason_name
                )
                continue
            v6 = key_is_v6(key)
            if reason == pc.CPU_REASON_ACL:
                self.stats.acl_to_cpu += 1
                rule = event.metadata.get("acl_rule", pc.RULE_NONE)
                log.info(
                    "%s: ACL rule %s sent %s to the CPM (%s)",
                    event.npm,
                    self._rule_name(rule),
                    flow_text(key),
                    self.policy.sessions.acl_to_cpu,
                )
                if self.policy.sessions.acl_to_cpu != "permit":
                    continue
            elif reason == pc.CPU_REASON_SESSION_V6:
                if not v6:
                    log.warning("%s: %s packet-in of an IPv4 flow; dropped", event.npm, reason_name)
                    continue
            elif reason not in (pc.CPU_REASON_SESSION_NAT, pc.CPU_REASON_SESSION_COLLISION):
                log.warning("%s: packet-in with unknown reason %d; dropped", event.npm, reason)
                continue
            elif v6:
                log.warning("%s: %s packet-in of an IPv6 flow; dropped", event.npm, reason_name)
                continue
            existing = self.find(event.npm, key)
            if existing is not None:
                # A retransmission while (or after) the session was set up: just re-inject.
                self.stats.duplicates += 1
                self.metrics.session_duplicates.labels(event.npm).inc()
                if existing.state != BLOCKED:
                    reinject.append((event.npm, event.payload))
                continue
            if v6 and self.policy.nat64_for(ipaddress.IPv6Address(key[1])) is not None:
                session: Session | None = nat64_session(self, event.npm, key, event.metadata, now)
            elif v6:
                session = self._v6_session(event.npm, key, event.metadata, now)
            else:
                session = self._nat_session(event.npm, key, event.metadata, now)
            if session is None:
                continue
            self.index_session(session)
            pending.setdefault(event.npm, []).append(
                _Pending(session, event.received_at, "packet_in", event.payload)
            )
        for npm, items in pending.items():
            done = self._install(npm, items)
            reinject += [
                (npm, p.payload)
                for p in done
                if p.payload is not None and p.session.state != BLOCKED
            ]
        for npm, payload in reinject:
            self.npms[npm].packet_out(payload, submit_to_ingress=True)
            self.stats.packet_outs += 1

    def _rule_name(self, rule: int) -> str:
        name = self.policy.rule_name(rule)
        return f"#{rule} ({name})" if name is not None else f"#{rule}"

    def _is_duplicate(self, npm: str, key: FlowKey) -> bool:
        if (npm, key) in self.index:
            self.stats.duplicates += 1
            self.metrics.session_duplicates.labels(npm).inc()
            return True
        return False

    def _v6_session(
        self, npm: str, key: FlowKey, meta: Mapping[str, int], now: dt.datetime
    ) -> Session:
        """An IPv6 flow's session: both directions forward (no NAT) with the flow's class and
        SPM (`steer6`), or blocked when its chain needs an SPM, none is up and it fails
        closed."""
        class_id, spm_port, spm_mac, blocked = self.steer6(key)
        if blocked:
            self._no_spm.warning(npm, f"{flow_text(key)} (class {class_id}): session blocked")
        return Session(
            id=self.new_id(),
            npm=npm,
            key=key,
            reply=reply_key(key, pc.NAT_NONE, 0, 0),
            class_id=class_id,
            spm_port=spm_port,
            spm_mac=spm_mac,
            nat_kind=pc.NAT_NONE,
            nat_addr=0,
            nat_port=0,
            acl_rule=meta.get("acl_rule", pc.RULE_NONE),
            ingress_port=meta.get("ingress_port", 0),
            idle_timeout=self.timeout_of(key[2]),
            created_at=now,
            state=BLOCKED if blocked else ACTIVE,
        )

    def params_of(self, session: Session) -> tuple[dict[str, int] | None, dict[str, int] | None]:
        """direction_params, a NAT64 session's routes first taken from the policy where it has
        none (read from the database or a switch)."""
        if session.nat_kind == pc.NAT_64 and session.nat64 is None:
            session.nat64 = nat64_routes(self.policy, session.key)
        return direction_params(session)

    def classify6(self, key: FlowKey) -> int:
        """The IDS class of an IPv6 flow's opening packet under the current policy (0: no IDS
        rule matches it)."""
        return classify6(self.policy, key)

    def steer6(self, key: FlowKey) -> tuple[int, int, int, bool]:
        """(class, SPM port, SPM MAC, blocked) of a new IPv6 flow, as the data plane steers an
        IPv4 one: a class whose chain needs an SPM gets a member of the chain's pool that is up
        (by the pool's weights, the same member for both directions); with none up, the chain's
        on_failure: open, no SPM; closed, the session is blocked."""
        class_id = self.classify6(key)
        spec = self.policy.class_by_id(class_id)
        if spec is None or spec.chain is None:
            return class_id, 0, 0, False
        chain = self.policy.chain(spec.chain)
        chosen = self.spms.choose(chain.pool, key)
        if chosen is not None:
            return class_id, chosen.port, chosen.mac, False
        return class_id, 0, 0, chain.on_failure == "closed"

    def _nat_session(
        self, npm: str, key: FlowKey, meta: Mapping[str, int], now: dt.datetime
    ) -> Session | None:
        src, dst, proto, _sport, dport = key
        policy = self.policy
        nat_kind, nat_addr, nat_port = pc.NAT_NONE, 0, 0
        forward = policy.port_forward_for(ipaddress.IPv4Address(dst), proto, dport)
        if forward is not None:
            nat_kind, nat_addr, nat_port = pc.NAT_REWRITE_DST, int(forward.to), forward.to_port
        else:
            route = policy.route_for(ipaddress.IPv4Address(dst))
            rule = policy.masquerade_for(route.port, ipaddress.IPv4Address(src)) if route else None
            if rule is not None:
                allocated = self.allocate_port(npm, int(rule.address), key)
                if allocated is None:
                    self.stats.failed += 1
                    self.metrics.session_failures.labels(npm, "nat_ports_exhausted").inc()
                    self._nat_failures.warning(npm, flow_text(key))
                    return None
                nat_kind, nat_addr, nat_port = pc.NAT_REWRITE_SRC, int(rule.address), allocated
        spm_port = meta.get("spm_port", 0)
        spm = policy.spm_by_port(spm_port) if spm_port else None
        if spm_port and spm is None:
            LOG.warning("%s: packet-in names SPM port %d, which the policy lacks", npm, spm_port)
            spm_port = 0
        return Session(
            id=self.new_id(),
            npm=npm,
            key=key,
            reply=reply_key(key, nat_kind, nat_addr, nat_port),
            class_id=meta.get("ids_class", 0),
            spm_port=spm_port,
            spm_mac=spm.mac if spm is not None else 0,
            nat_kind=nat_kind,
            nat_addr=nat_addr,
            nat_port=nat_port,
            acl_rule=meta.get("acl_rule", pc.RULE_NONE),
            ingress_port=meta.get("ingress_port", 0),
            idle_timeout=self.timeout_of(proto),
            created_at=now,
        )

    def allocate_port(self, npm: str, address: int, key: FlowKey) -> int | None:
        """A source port on `address` such that the reply key is unused (port preserved when
        possible, like Linux masquerading); ports forwarded on that address are skipped."""
        _src, dst, proto, sport, dport = key
        low, high = self.policy.nat.ports
        forwarded = {
            f.port
            for f in self.policy.nat.port_forwards
            if int(f.address) == address and f.proto == proto
        }

        def free(port: int) -> bool:
            reply = (dst, address, proto, dport, port)
            return port not in forwarded and (npm, reply) not in self.index

        if low <= sport <= high and free(sport):
            return sport
        group = (npm, dst, address, proto, dport)
        if self._nat_full.get(group) is self.policy:
            return None
        span = high - low + 1
        cursor_key = (npm, address, proto)
        start = self._nat_cursor.get(cursor_key, 0)
        for step in range(span):
            port = low + (start + step) % span
            if free(port):
                self._nat_cursor[cursor_key] = (start + step + 1) % span
                return port
        self._nat_full[group] = self.policy
        return None

    def index_session(self, session: Session) -> None:
        self.sessions[session.id] = session
        self.per_npm[session.npm] = self.per_npm.get(session.npm, 0) + 1
        self.index[(session.npm, session.key)] = session
        self.index[(session.npm, session.reply)] = session
        if session.nat_kind != pc.NAT_NONE:
            self.nat_in_use[session.npm] = self.nat_in_use.get(session.npm, 0) + 1

    def _unindex(self, session: Session) -> None:
        if self.sessions.pop(session.id, None) is not None:
            self.per_npm[session.npm] -= 1
        if session.slot_only:
            self._slot_forget(session)
        self.closes.forget(session)
        for key in (session.key, session.reply):
            if self.index.get((session.npm, key)) is session:
                del self.index[(session.npm, key)]
        if session.nat_kind != pc.NAT_NONE:
            self.nat_in_use[session.npm] = self.nat_in_use.get(session.npm, 1) - 1
        if session.nat_kind in (pc.NAT_REWRITE_SRC, pc.NAT_64) and self._nat_full:
            # (the group allocate_port marks full: the IPv4 server, the address, protocol, port)
            dst, _addr, proto, dport, _port = session.reply
            self._nat_full.pop((session.npm, dst, session.nat_addr, proto, dport), None)

    def entries_of(self, session: Session) -> tuple[p4r.TableEntry, p4r.TableEntry]:
        encoder = self.encoder(session.npm)
        original, reply = self.params_of(session)
        timeout_ns = int(session.idle_timeout * 1e9)
        return (
            encoder.entry(session.key, original, timeout_ns),
            encoder.entry(session.reply, reply, timeout_ns),
        )

    def _write(
        self,
        npm: str,
        updates: Sequence[SessionUpdate],
        what: str,
        expected: frozenset[int] = frozenset(),
    ) -> WriteResult:
        """Write session entries, each Update built in place in its request."""
        encoder = self.encoder(npm)
        return self.npms[npm].write_filled(
            len(updates), lambda request, a, b: encoder.fill(request, updates[a:b]), what, expected
        )

    def _insert_entries(self, npm: str, sessions: Sequence[Session], what: str) -> set[int]:
        """INSERT both directions of every session in one Write (an entry there already is
        taken over with a MODIFY); the ids of the sessions not installed, whose halves that
        were written are deleted again. Raises if the Write fails as a whole."""
        insert = p4r.Update.INSERT
        updates: list[SessionUpdate] = []
        for session in sessions:
            original, reply = self.params_of(session)
            timeout_ns = int(session.idle_timeout * 1e9)
            updates.append(SessionUpdate(insert, session.key, original, timeout_ns))
            updates.append(SessionUpdate(insert, session.reply, reply, timeout_ns))
        result = self._write(npm, updates, what)
        failed_sessions: set[int] = set()
        failed_updates = {e.index for e in result.failed}
        retry: list[SessionUpdate] = []
        retry_owner: list[int] = []
        for error in result.failed:
            session = sessions[error.index // 2]
            if error.code == rpc_code.ALREADY_EXISTS:
                # Left on the switch from before (e.g. an earlier controller): take it over.
                original, reply = self.params_of(session)
                key, params = (
                    (session.key, original) if error.index % 2 == 0 else (session.reply, reply)
                )
                timeout_ns = int(session.idle_timeout * 1e9)
                retry.append(SessionUpdate(p4r.Update.MODIFY, key, params, timeout_ns))
                retry_owner.append(error.index // 2)
            else:
                failed_sessions.add(session.id)
        if retry:
            again = self._write(npm, retry, f"{what} (existing)")
            for error in again.failed:
                failed_sessions.add(sessions[retry_owner[error.index]].id)
        cleanup: list[SessionUpdate] = []
        for i, session in enumerate(sessions):
            if session.id in failed_sessions:
                for j, key in ((2 * i, session.key), (2 * i + 1, session.reply)):
                    if j not in failed_updates:
                        cleanup.append(SessionUpdate(p4r.Update.DELETE, key))
        if cleanup:
            self._write(npm, cleanup, f"{what} (cleanup)")
        return failed_sessions

    def _install(self, npm: str, items: list[_Pending]) -> list[_Pending]:
        """INSERT both directions of every session in one Write; returns the installed ones."""
        self._hold_new(items)
        try:
            failed_sessions = self._insert_entries(npm, [i.session for i in items], "sessions")
        except Exception:
            for item in items:
                self._unindex(item.session)
            self.stats.failed += len(items)
            self.metrics.session_failures.labels(npm, "write").inc(len(items))
            raise
        done: list[_Pending] = []
        for item in items:
            if item.session.id in failed_sessions:
                self._unindex(item.session)
                self.stats.failed += 1
                self.metrics.session_failures.labels(npm, "refused").inc()
                continue
            done.append(item)
        self.store.submit(self.db.insert_sessions, [item.session.row() for item in done])
        finished = time.perf_counter()
        latency_metric = self.metrics.setup_latency
        for item in done:
            latency = finished - item.received_at
            self.stats.latencies.append(latency)
            latency_metric.labels(npm, item.source).observe(latency)
        nat = sum(1 for item in done if item.session.nat_kind != pc.NAT_NONE)
        self.metrics.sessions_installed.labels(npm, "nat").inc(nat)
        self.metrics.sessions_installed.labels(npm, "none").inc(len(done) - nat)
        self.stats.installed += len(done)
        self.update_gauges(npm)
        if self.publish is not None and done:
            self.publish(SessionsInstalled(npm, tuple(i.session.key for i in done), finished))
        return done

    def _record(self, npm: str, sessions: list[Session]) -> None:
        """Slot-only sessions (on_demand): into the database and the gauges, no Write."""
        self.store.submit(self.db.insert_sessions, [s.row() for s in sessions])
        self.stats.slot_only += len(sessions)
        self.update_gauges(npm)
        if self.publish is not None:
            keys = tuple(s.key for s in sessions)
            self.publish(SessionsInstalled(npm, keys, time.perf_counter()))
        self._replay_early_closes(sessions)

    def _promote(self, npm: str, sessions: list[Session], what: str) -> list[Session]:
        """Install the entries of slot-only sessions (as they are now: blocked, bypassed,
        re-steered); those the switch refuses stay slot-only. Returns the installed ones."""
        failed = self._insert_entries(npm, sessions, what)
        done = [s for s in sessions if s.id not in failed]
        for session in done:
            self._slot_forget(session)
            session.slot_only = False
        self.stats.promoted += len(done)
        if len(done) < len(sessions):
            self.stats.failed += len(sessions) - len(done)
            self.metrics.session_failures.labels(npm, "refused").inc(len(sessions) - len(done))
        return done

    def _slot_touch(self, session: Session, clock: float) -> None:
        session.reported_at = clock
        queue = self._slots.setdefault(session.idle_timeout, OrderedDict())
        queue.pop(session.id, None)
        queue[session.id] = session

    def _slot_forget(self, session: Session) -> None:
        queue = self._slots.get(session.idle_timeout)
        if queue is not None:
            queue.pop(session.id, None)

    def update_gauges(self, npm: str) -> None:
        self.metrics.sessions_active.labels(npm).set(self.count(npm))
        self.metrics.nat_ports_in_use.labels(npm).set(self.nat_in_use.get(npm, 0))

    # -- removal and changes -----------------------------------------------------------------

    def remove(self, sessions: Iterable[Session], reason: str, end_slots: bool = False) -> int:
        """Remove sessions: their entries, or with `end_slots` (a session deleted on request)
        the data-plane slot of those a slot alone carries, which would otherwise carry the flow
        until it ages out."""
        by_npm: dict[str, list[Session]] = {}
        for session in sessions:
            if session.id in self.sessions:
                by_npm.setdefault(session.npm, []).append(session)
        removed = 0
        for npm, items in by_npm.items():
            connection = self.npms.get(npm)
            if connection is not None and connection.is_primary:
                delete = p4r.Update.DELETE
                deletes = [
                    SessionUpdate(delete, key)
                    for s in items
                    if not s.slot_only  # nothing written: its slot ages out alone
                    for key in (s.key, s.reply)
                ]
                if deletes:
                    self._write(npm, deletes, f"remove sessions ({reason})", GONE)
                # Slots are freed by a packet of each flow: those a slot alone carries, deleted
                # on request; and on Tofino, whose slots outlive their flow's entries, every
                # flow without NAT that a slot may hold (a frame for a flow without one changes
                # nothing).
                retire = connection.slots_retire_themselves
                for s in items:
                    if s.v6:
                        continue  # (no data-plane slots for IPv6)
                    if (end_slots and s.slot_only) or (not retire and s.nat_kind == pc.NAT_NONE):
                        connection.packet_out(flow_frame(s.key), end_flow=True)
                        self.stats.packet_outs += 1
            for session in items:
                self._unindex(session)
            self.store.submit(self.db.delete_sessions, [s.id for s in items])
            self.metrics.sessions_removed.labels(npm, reason).inc(len(items))
            if self.publish is not None:
                self.publish(SessionsRemoved(npm, tuple(s.key for s in items), reason))
            removed += len(items)
            self.update_gauges(npm)
        self.stats.removed += removed
        return removed

    def rewrite(self, sessions: Iterable[Session], what: str) -> int:
        """MODIFY both entries of each session to its current state (block, bypass, SPM)."""
        by_npm: dict[str, list[Session]] = {}
        for session in sessions:
            by_npm.setdefault(session.npm, []).append(session)
        changed = 0
        for npm, all_items in by_npm.items():
            # Slot-only sessions get their entries now (the slot cannot block or re-steer).
            fresh = [s for s in all_items if s.slot_only]
            installed = self._promote(npm, fresh, what) if fresh else []
            fresh_ids = {s.id for s in fresh}
            items = [s for s in all_items if s.id not in fresh_ids]
            modify = p4r.Update.MODIFY
            updates = []
            for s in items:
                original, reply = self.params_of(s)
                timeout_ns = int(s.idle_timeout * 1e9)
                updates.append(SessionUpdate(modify, s.key, original, timeout_ns))
                updates.append(SessionUpdate(modify, s.reply, reply, timeout_ns))
            gone: set[int] = set()
            if updates:
                result = self._write(npm, updates, what)
                gone = {
                    items[e.index // 2].id for e in result.failed if e.code == rpc_code.NOT_FOUND
                }
            if gone:
                self.remove([s for s in items if s.id in gone], "gone")
            ok = installed + [s for s in items if s.id not in gone]
            self.store.submit(
                self.db.update_sessions,
                [
                    {
                        "id": s.id,
                        "state": s.state,
                        "class_id": s.class_id,
                        "spm_port": s.spm_port,
                        "spm_mac": s.spm_mac,
                    }
                    for s in ok
                ],
            )
            changed += len(ok)
        return changed

    def on_close(self, events: Sequence[Any]) -> None:
        """SessionCloseSeen events (session_close_t, IPv6's session_close_v6_t): RST, or FIN
        both ways, removes the session after the linger."""
        closes = [
            (event.npm, _close_key(f), f.get("tcp_flags", 0))
            for event in events
            for f in event.records
        ]
        self._apply_closes(closes, remember=True)

    def _apply_closes(self, closes: Iterable[Close], remember: bool = False) -> None:
        now = time.monotonic()
        linger = self.policy.sessions.closing_linger
        self.closes.apply(closes, self.find, linger, now, remember)
        if linger == 0:
            self.on_tick(now)

    def _replay_early_closes(self, created: Iterable[Session]) -> None:
        """Apply the FIN/RST reports that came before these sessions existed."""
        closes = self.closes.replay(created, time.monotonic())
        if closes:
            self.stats.early_closes += len(closes)
            self._apply_closes(closes)

    def on_tick(self, now: float) -> None:
        due = self.closes.due(now)
        for reason in ("fin", "rst"):
            gone = [s for s in due if close_reason(s) == reason]
            if gone:
                self.remove(gone, reason)
        aged: list[Session] = []
        report = self.policy.sessions.report_interval
        for timeout, queue in self._slots.items():
            limit = now - (report + timeout + SLOT_GRACE_SECONDS)
            for session in queue.values():  # oldest report first
                if session.reported_at > limit:
                    break
                aged.append(session)
        if aged:
            self.stats.slot_aged += len(aged)
            self.remove(aged, "slot_aged")

    def on_idle(self, npm: str, keys: Iterable[FlowKey]) -> int:
        """Idle entries reported: remove the sessions whose both directions are idle, and
        delete the entries of no session (only the CPM writes session entries, so such an entry
        is what a Write that failed part-way left behind: nothing else would ever free it)."""
        candidates: dict[int, Session] = {}
        orphans: list[FlowKey] = []
        reported: set[FlowKey] = set()
        for key in keys:
            reported.add(key)
            session = self.index.get((npm, key))
            if session is not None:
                candidates[session.id] = session
            else:
                orphans.append(key)
        connection = self.npms[npm]
        if orphans and connection.is_primary:
            delete = p4r.Update.DELETE
            updates = [SessionUpdate(delete, k) for k in orphans]
            # NOT_FOUND: a late notification of a session removed since.
            result = self._write(npm, updates, "orphans", GONE)
            self.stats.orphans_deleted += len(orphans) - len(result.failed)
        # Both directions reported idle at once (a flow of one datagram, a flood's flows): no
        # need to ask the switch. One direction only: read both entries' ages, the other may be
        # in use.
        idle: list[Session] = []
        confirm: list[Session] = []
        for session in candidates.values():
            both = session.key in reported and session.reply in reported
            (idle if both else confirm).append(session)
        if not confirm:
            return self.remove(idle, "idle")
        encoder = self.encoder(npm)
        queries = []
        for session in confirm:
            for key in (session.key, session.reply):
                query = encoder.match(key)
                query.time_since_last_hit.SetInParent()
                queries.append(p4r.Entity(table_entry=query))
        elapsed: dict[FlowKey, float | None] = {}
        for entity in connection.read(queries):
            entry = entity.table_entry
            seen = entry.HasField("time_since_last_hit")
            elapsed[encoder.decode_key(entry)] = (
                entry.time_since_last_hit.elapsed_ns / 1e9 if seen else None
            )
        for session in confirm:
            ages = [elapsed.get(session.key), elapsed.get(session.reply)]
            present = [k in elapsed for k in (session.key, session.reply)]
            # Unknown age (target does not report it) or entry gone: trust the notification.
            if all(
                not here or age is None or age >= session.idle_timeout * 0.9
                for here, age in zip(present, ages, strict=True)
            ):
                idle.append(session)
        return self.remove(idle, "idle")

    # -- verdicts ----------------------------------------------------------------------------

    def block(self, session: Session) -> None:
        if session.state == BLOCKED:
            return
        session.state = BLOCKED
        self.closes.forget(session)
        self.rewrite([session], "block session")

    def bypass(self, session: Session) -> None:
        session.state = BYPASSED
        self.rewrite([session], "bypass session")

    def on_spm_down(self, spm_name: str) -> dict[str, int]:
        """Flows pinned to a dead SPM follow their pool's fail policy."""
        spec = next((s for s in self.policy.spms if s.name == spm_name), None)
        if spec is None:
            return {}
        moved: list[Session] = []
        outcome = {"resteered": 0, "blocked": 0, "uninspected": 0}
        for session in self.sessions.values():
            if not session.steered or session.spm_port != spec.port:
                continue
            if session.spm_mac != spec.mac:
                continue
            pool, on_failure = self._pool_of(session.class_id)
            target = None
            if pool is not None and pool.fail_policy == "resteer":
                target = self.spms.choose(pool.name, session.key)
            if target is not None:
                session.spm_port, session.spm_mac = target.port, target.mac
                outcome["resteered"] += 1
            elif pool is not None and (pool.fail_policy == "fail_closed" or on_failure == "closed"):
                session.state = BLOCKED
                outcome["blocked"] += 1
            else:
                session.spm_port, session.spm_mac = 0, 0
                outcome["uninspected"] += 1
            moved.append(session)
        if moved:
            self.rewrite(moved, f"SPM {spm_name} down")
        LOG.warning("SPM %s down: flows %s", spm_name, outcome, extra={"spm": spm_name})
        return outcome

    def rematch(
        self,
        old: tuple[Policy, Classify],
        new: tuple[Policy, Classify],
        npm: str | None = None,
    ) -> dict[str, int]:
        """Hold every session (of `npm`, or of every NPM) to the policy just applied, `new` (as
        `self.policy`), after `old` (controller.rematch.PolicyHold): the changed ones are
        rewritten. Returns how many sessions went each way so far: with an event bus, a first
        turn runs now and the rest in turns between other events (`rematch_pending` says how
        many sessions are left); without one, all of it runs now. A hold still in progress from
        an earlier apply is finished first."""
        self.finish_rematch()
        sessions = [s for s in self.sessions.values() if npm is None or s.npm == npm]
        job = self.hold.applied(sessions, old, new, alive=self._still_open)
        self._holding = job
        self._rematch_turn(job, first=True)
        return dict(job.outcome)

    @property
    def rematch_pending(self) -> int:
        """Sessions the last apply's hold has still to judge."""
        return 0 if self._holding is None else self._holding.remaining

    def finish_rematch(self) -> None:
        """Judge what the last apply's hold has left, now."""
        job = self._holding
        if job is not None:
            self._rematch_turn(job, to_the_end=True)

    def _still_open(self, session: Session) -> bool:
        return self.sessions.get(session.id) is session

    def _rematch_turn(self, job: HoldJob, to_the_end: bool = False, first: bool = False) -> None:
        if job is not self._holding:
            return  # finished by a later apply
        changed = job.step() if to_the_end or self.publish is None else job.turn(first)
        self.stats.rematch_turns += 1
        self._blocked_now(changed)
        if changed:
            self.rewrite(changed, "policy rematch")
        if job.done:
            self._holding = None
            if any(job.outcome.values()):
                LOG.info("policy applied: sessions rematched: %s", job.outcome)
        elif self.publish is not None:
            self.publish(Call(lambda: self._rematch_turn(job)))

    def _blocked_now(self, sessions: Iterable[Session]) -> None:
        for session in sessions:
            if session.state == BLOCKED:
                self.closes.forget(session)

    def _hold_new(self, items: Sequence[_Pending]) -> None:
        """New sessions from reports that may predate the last apply: held to it before their
        entries are written."""
        early = [i.session for i in items if self.hold.settling(i.received_at)]
        outcome, changed = self.hold.again(early)
        self._blocked_now(changed)
        if changed:
            LOG.info("new sessions of the old policy held to the new one: %s", outcome)

    def _pool_of(self, class_id: int) -> tuple[Any, str]:
        spec = self.policy.class_by_id(class_id)
        if spec is None or spec.chain is None:
            return None, "open"
        chain = self.policy.chain(spec.chain)
        return self.policy.pool(chain.pool), chain.on_failure

    # -- restart -----------------------------------------------------------------------------

    def forget_npm(self, npm: str) -> None:
        for session in [s for s in self.sessions.values() if s.npm == npm]:
            self._unindex(session)

    def reconcile(self, npm: str, switch_is_new: bool) -> ReconcileReport:
        """Make memory, DB and the switch's session table agree (controller.session_reconcile)."""
        return reconcile(self, npm, switch_is_new)


def _close_key(record: Mapping[str, int]) -> FlowKey:
    """The flow key of a session_close_t or session_close_v6_t record."""
    if "ipv6_src_hi" in record:
        return (
            (record["ipv6_src_hi"] << 64) | record["ipv6_src_lo"],
            (record["ipv6_dst_hi"] << 64) | record["ipv6_dst_lo"],
            record["ip_proto"],
            record["l4_sport"],
            record["l4_dport"],
        )
    return (
        record["ipv4_src"],
        record["ipv4_dst"],
        record["ip_proto"],
        record["l4_sport"],
        record["l4_dport"],
    )
