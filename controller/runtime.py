"""The CPM as one long-running process: policy, NPM connections, sessions, SPMs, DB, API.

Threads: one dispatcher runs every event handler (so handlers share state without locks and the
switches see writes in event order); per NPM, a watcher that (re)connects and notices when this
controller becomes or stops being the primary, and three stream pumps; a ticker; the REST API.
Start-up and take-over (a standby that becomes primary) read the switch back and reconcile it
with the policy and the DB instead of wiping it. SIGTERM stops everything gracefully and leaves
the switch's tables as they are.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import difflib
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from finsy.proto import p4r

from controller import events as ev
from controller.baseconfig import (
    BaseConfig,
    BaseDiff,
    diff_base,
    static_base,
    with_weights,
)
from controller.classifier import (
    ClassifierBanks,
    UpdatePlan,
    Write,
    acl_rules,
    entries_digest,
    ids_rules,
    rules_digest,
    rules_key,
    split_plan,
)
from controller.classifier import summary as classifier_summary
from controller.counters import NpmCounterCollector, NpmCounters, read_counters
from controller.db import Database, DbWriter, policy_version_problem
from controller.errors import RequestError
from controller.hsm.compile import CompiledTables, TableOverflow
from controller.ipsec import IpsecReports, active_spm, ipsec_view, spm_config
from controller.metrics import Metrics
from controller.npm import NpmAddress, NpmConnection, Pipeline
from controller.packet_in_queue import PacketInQueue, source_of
from controller.policy import Policy, load_policy
from controller.rematch import Classify, classifier, tables_classifier
from controller.router_adverts import Advertisements
from controller.session_encoding import FlowKey
from controller.session_model import parse_flow
from controller.sessions import SessionManager
from controller.spm_pool import SpmPool
from controller.verdicts import SpmVerdicts
from opengate import p4constants as pc
from opengate.entries import Exact, TableEntry
from opengate.errors import ConfigError
from opengate.p4rt import P4RuntimeError
from opengate.target import p4_build_dir
from opengate.throttled import ThrottledWarning

LOG = logging.getLogger(__name__)

DEFAULT_ELECTION_ID = 10
TAKEOVER_RETRY_SECONDS = 2.0
# A read of an NPM's counters (API, Prometheus scrape) gives up after this long: a switch that
# does not answer must not hang the API.
COUNTER_READ_SECONDS = 5.0
# Packet-ins set up per turn of the dispatcher (one Write for their sessions). A packet waits for
# the turn in progress and its own: 32 keeps that to tens of milliseconds under a flood of NAT
# flows on this 2-core machine, where the bus's 128 records took over a hundred.
PACKET_IN_BATCH = 32


# Base tables whose size a policy can outgrow (the IPv6 ACL's rules multiply their fields' values;
# IPv6 routes and addresses): refused with 422 before anything is written.
SIZED_BASE_TABLES = (
    pc.T_IPV6_ACL,
    pc.T_ROUTING_V6,
    pc.T_ND_RESPONDER,
    pc.T_NPTV6_INBOUND,
    pc.T_NPTV6_OUTBOUND,
)


def _check_fits(conn: NpmConnection, desired: BaseConfig) -> None:
    for name in SIZED_BASE_TABLES:
        if name not in conn.schema.tables:
            continue
        size = conn.schema.tables.get(name).size
        count = sum(1 for e in desired.entries.values() if e.table == name and not e.is_default)
        if size and count > size:
            raise RequestError(
                422, f"the policy needs {count} entries in {name}, which holds {size}"
            )


def default_pipeline() -> Pipeline:
    build = p4_build_dir()
    return Pipeline(build / "opengate.p4info.txtpb", build / "opengate.json")


@dataclass(frozen=True, slots=True)
class ControllerOptions:
    npms: tuple[NpmAddress, ...]
    policy_path: Path | None = None
    db_url: str = "sqlite:///opengate.db"
    election_id: int = DEFAULT_ELECTION_ID
    state_dir: Path = Path("run")
    pipeline: Pipeline = field(default_factory=default_pipeline)
    tick_seconds: float = 0.25
    connect_timeout: float = 5.0


@dataclass(slots=True)
class NpmState:
    conn: NpmConnection
    tag_base: int
    role: str = "disconnected"  # disconnected | standby | primary | failed (retried)
    synced: threading.Event = field(default_factory=threading.Event)
    base: BaseConfig | None = None  # what the switch holds, as last read or written
    # The part of the desired base config the SPMs' weights do not decide, and what it was
    # made from (`Controller._desired_base`).
    static_base: tuple[tuple[object, ...], BaseConfig] | None = None
    classifier: ClassifierBanks = field(default_factory=ClassifierBanks)
    rules: tuple[object, ...] | None = None  # the rule sets the active bank holds
    last_sync: dict[str, Any] = field(default_factory=dict)
    takeovers: int = 0
    error: str | None = None  # why the last take-over failed
    retry_at: float = 0.0


@dataclass(slots=True)
class NpmPlan:
    """What a policy change writes to one NPM."""

    compiled: CompiledTables | None
    update: UpdatePlan | None  # None: the rules did not change, nothing compiled
    base_diff: BaseDiff
    desired: BaseConfig
    flip_extra: list[TableEntry]
    rules_digest: str

    def summary(self) -> dict[str, Any]:
        return {"base": self.base_diff.summary(), "classifier": classifier_summary(self.update)}


class Controller:
    def __init__(self, options: ControllerOptions) -> None:
        self.options = options
        self.metrics = Metrics()
        self.metrics.registry.register(NpmCounterCollector(self.npm_counters))
        self.db = Database(options.db_url)
        self.db_writer = DbWriter()
        self.bus = ev.EventBus(self.metrics)
        self.packet_ins = PacketInQueue(
            on_drop=lambda npm: self.metrics.packet_ins_dropped.labels(npm).inc(),
            wake=lambda: self.bus.publish(ev.PacketInsWaiting()),
        )
        self.npms: dict[str, NpmConnection] = {}
        self.states: dict[str, NpmState] = {}
        self.policy: Policy | None = None
        self.adverts = Advertisements(self.metrics.router_adverts)
        self.policy_version: int | None = None
        self.pending_policy_record = False
        self.previous_policy: tuple[str, str] | None = None  # (path, text), see _initial_policy
        self.started_at = time.time()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.spms: SpmPool | None = None
        self.sessions: SessionManager | None = None
        self.ipsec_reports = IpsecReports()
        self._ipsec_holder: str | None = None  # the IPsec SPM that holds the tunnels
        self._counters_unread = ThrottledWarning(LOG, "counters not read", interval=60.0)

    # -- start and stop ----------------------------------------------------------------------

    def start(self) -> None:
        self.db.create()
        self.policy = self._initial_policy()
        self.metrics.policy_version.set(self.policy_version or 0)
        now = time.monotonic()
        self.spms = SpmPool(self.policy, now)
        for address in self.options.npms:
            tag_base = self.db.tag_base_for(address.name, address.address, address.device_id)
            conn = NpmConnection(
                address,
                self.options.pipeline,
                self.options.election_id,
                self.metrics,
                self._stream_sink(address.name),
            )
            self.npms[address.name] = conn
            self.states[address.name] = NpmState(conn, tag_base)
        self.sessions = SessionManager(
            self.db,
            self.metrics,
            self.npms,
            self.policy,
            self.spms,
            self.bus.publish,
            self.db_writer,
        )
        self.verdicts = SpmVerdicts(self.sessions, self.db, self.metrics)
        for spm in self.policy.spms:
            self.db.upsert_spm(
                spm.name, port=spm.port, mac=spm.mac, status="unknown", weight=spm.weight
            )
        self._subscribe()
        self.bus.start()
        for name in self.states:
            self._spawn(self._watch, name, thread_name=f"npm-watch-{name}")
        self._spawn(self._ticker, thread_name="cpm-ticker")
        LOG.info(
            "controller started: %d NPM(s), election id %d, policy %s",
            len(self.npms),
            self.options.election_id,
            self.policy.name,
        )

    def _spawn(self, target: Callable[..., None], *args: Any, thread_name: str) -> None:
        thread = threading.Thread(target=target, args=args, name=thread_name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def wait_synced(self, timeout: float) -> bool:
        """True once every NPM this controller is primary for has been reconciled."""
        deadline = time.monotonic() + timeout
        for state in self.states.values():
            if not state.synced.wait(max(0.0, deadline - time.monotonic())):
                return False
        return True

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        if self.sessions is not None and self.sessions.rematch_pending:
            # an apply's hold still in turns: finished before the switches are let go
            self.bus.call(self.sessions.finish_rematch, timeout=120.0)
        self.bus.stop()
        for conn in self.npms.values():
            conn.close()
        self.db_writer.stop()
        self.db.close()
        LOG.info("controller stopped; the switches keep their tables")

    def run_forever(self) -> None:
        self._stop.wait()

    def request_stop(self) -> None:
        """From a signal handler: make run_forever return (stop() does the rest)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # -- policy at start ---------------------------------------------------------------------

    def _initial_policy(self) -> Policy:
        stored = self.db.active_policy()
        path = self.options.policy_path
        if path is not None:
            try:
                policy = load_policy(path)
            except ConfigError as error:
                if stored is None:
                    raise
                LOG.error("%s; keeping the running policy version %d", error, stored.version)
                return self._stored_policy(stored.version, stored.path, stored.text)
            if stored is not None and stored.sha256 == policy.sha256:
                self.policy_version = stored.version
            else:
                self.pending_policy_record = True
                if stored is not None:
                    # The NPMs' sessions were made under it: held to this one at take-over.
                    self.previous_policy = (stored.path, stored.text)
            return policy
        if stored is None:
            raise ConfigError("no policy: give --policy FILE (the database has none)")
        return self._stored_policy(stored.version, stored.path, stored.text)

    def _stored_policy(self, version: int, path: str, text: str) -> Policy:
        self.policy_version = version
        return load_policy(path, text)

    # -- the stream, the watcher and the ticker ----------------------------------------------

    def _stream_sink(self, npm: str) -> Callable[[str, Any], None]:
        def sink(kind: str, item: Any) -> None:
            received = time.perf_counter()
            conn = self.npms[npm]
            if kind == "digest":
                name, records = conn.decode_digest(item)
                if name == pc.D_SESSION_REQUEST_T:
                    self.bus.publish(ev.SessionRequested(npm, records, received))
                elif name in (pc.D_SESSION_CLOSE_T, pc.D_SESSION_CLOSE_V6_T):
                    self.bus.publish(ev.SessionCloseSeen(npm, records))
            elif kind == "packet_in":
                metadata = conn.decode_packet_in(item)
                key = parse_flow(item.payload)
                event = ev.PacketIn(npm, item.payload, metadata, received, key)
                source = source_of(npm, key, metadata.get("ingress_port", 0))
                self.packet_ins.put(source, npm, event)
            elif kind == "idle":
                encoder_keys = tuple(
                    self._decode_session_key(npm, entry) for entry in item.table_entry
                )
                self.bus.publish(ev.IdleTimeout(npm, encoder_keys))

        return sink

    def _on_packet_ins_waiting(self, _event: ev.PacketInsWaiting) -> None:
        """A batch of packet-ins, one per source in turn (the queue wakes this again, behind
        whatever else the bus has queued meanwhile, if packets are left)."""
        assert self.sessions is not None
        batch = self.packet_ins.take(PACKET_IN_BATCH)
        if batch:
            self.sessions.on_packet_ins(batch)

    def _decode_session_key(self, npm: str, entry: p4r.TableEntry) -> FlowKey:
        assert self.sessions is not None
        return self.sessions.encoder(npm).decode_key(entry)

    def _watch(self, name: str) -> None:
        state = self.states[name]
        conn = state.conn
        was_primary = False
        backoff = 0.2
        while not self._stop.is_set():
            if not conn.is_connected:
                if was_primary:
                    was_primary = False
                    self.bus.publish(ev.NpmRoleChanged(name, False))
                try:
                    conn.connect(timeout=self.options.connect_timeout)
                    backoff = 0.2
                except (ConnectionError, P4RuntimeError, OSError) as error:
                    LOG.debug("%s: cannot connect: %s", name, error)
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 2.0)
                    continue
            primary = conn.is_primary
            if primary != was_primary or state.role == "disconnected":
                was_primary = primary
                self.bus.publish(ev.NpmRoleChanged(name, primary))
            self._stop.wait(0.1)

    def _ticker(self) -> None:
        while not self._stop.wait(self.options.tick_seconds):
            self.bus.publish(ev.Tick(time.monotonic()))

    # -- handlers ----------------------------------------------------------------------------

    def _subscribe(self) -> None:
        sessions = self.sessions
        assert sessions is not None
        bus = self.bus
        bus.subscribe(ev.SessionRequested, sessions.on_requests, batch=True)
        bus.subscribe(ev.PacketIn, sessions.on_packet_ins, batch=True)
        bus.subscribe(ev.PacketInsWaiting, self._on_packet_ins_waiting)
        bus.subscribe(ev.SessionCloseSeen, sessions.on_close, batch=True)
        bus.subscribe(ev.IdleTimeout, self._on_idle)
        bus.subscribe(ev.Tick, self._on_tick)
        bus.subscribe(ev.NpmRoleChanged, self._on_role)
        bus.subscribe(ev.PolicyApplyRequested, self._on_policy_apply)
        bus.subscribe(ev.SpmLoadReport, self._on_spm_load)
        bus.subscribe(ev.SpmDown, self._on_spm_down)
        bus.subscribe(ev.SpmUp, self._on_spm_up)
        self.verdicts.subscribe(bus)
        bus.subscribe(ev.SessionDeleteRequested, self._on_session_delete)
        bus.subscribe(ev.SessionBlockRequested, self._on_session_block)
        bus.subscribe(ev.SpmDrainRequested, self._on_spm_drain)

    def _on_idle(self, event: ev.IdleTimeout) -> int:
        assert self.sessions is not None
        if not self.npms[event.npm].is_primary:
            return 0
        return self.sessions.on_idle(event.npm, event.keys)

    def _on_tick(self, event: ev.Tick) -> None:
        assert self.sessions is not None and self.spms is not None
        self.sessions.on_tick(event.now)
        for state in self.states.values():
            if state.role == "failed" and event.now >= state.retry_at and state.conn.is_primary:
                state.role = "primary"
                self._try_take_over(state)
        if not any(s.role == "primary" for s in self.states.values()):
            return
        for name in self.spms.expired(event.now):
            self._on_spm_down(ev.SpmDown(name, "no load report"))
        if self.policy is not None:
            primaries = {
                name: state.conn
                for name, state in self.states.items()
                if state.role == "primary" and state.synced.is_set()
            }
            self.adverts.tick(self.policy, primaries, event.now)

    def _on_role(self, event: ev.NpmRoleChanged) -> None:
        state = self.states[event.npm]
        self.metrics.primary.labels(event.npm).set(int(event.primary))
        if not event.primary:
            role = "standby" if state.conn.is_connected else "disconnected"
            if state.role != role:
                LOG.info("%s: this controller is now %s", event.npm, role)
            state.role = role
            if role == "standby":
                state.synced.set()  # nothing to do until we become primary
            return
        if state.role == "primary":
            return
        LOG.info("%s: this controller is the primary; reconciling", event.npm)
        state.role = "primary"
        state.synced.clear()
        self._try_take_over(state)

    def _try_take_over(self, state: NpmState) -> None:
        try:
            self._take_over(state)
        except Exception as error:
            # Retried from the ticker: a switch that refused something may accept it later.
            state.role = "failed"
            state.error = str(error)
            state.retry_at = time.monotonic() + TAKEOVER_RETRY_SECONDS
            LOG.error(
                "%s: could not take over (%s); retrying in %gs",
                state.conn.name,
                error,
                TAKEOVER_RETRY_SECONDS,
            )
            return
        state.error = None
        state.synced.set()

    def _take_over(self, state: NpmState) -> None:
        """Read the switch back, reconcile it with the policy and the DB; write differences."""
        assert self.policy is not None and self.sessions is not None
        conn = state.conn
        state.takeovers += 1
        fresh = conn.ensure_pipeline()
        conn.enable_digests()
        state.base = conn.read_base()
        active, entries = conn.read_classification()
        state.classifier = ClassifierBanks(entries, active)
        # The active bank holds this policy's rules if it is, entry for entry, what this NPM was
        # last given for them (the numbering depends on the history: recompiling could differ).
        recorded = self.db.classifier_state(conn.name)
        holds = (active, rules_digest(self.policy), entries_digest(entries, active))
        state.rules = rules_key(self.policy) if recorded == holds else None
        plan = self._plan_npm(state, self.policy)
        self._execute(state, plan, rules_key(self.policy))
        report = self.sessions.reconcile(conn.name, switch_is_new=fresh)
        state.last_sync = {
            "at": dt.datetime.now(dt.UTC).isoformat(),
            "pipeline_pushed": fresh,
            "writes": plan.summary(),
            "sessions": report.as_dict(),
        }
        if self.previous_policy is not None:
            # Started with a policy other than the one the sessions were made under.
            old = tables_classifier(entries, active) if not fresh else None
            state.last_sync["rematched"] = self._rematch_at_start(state, old)
        if self.pending_policy_record:
            self._record_policy(self.policy, "start")
        LOG.info("%s: in sync: %s", conn.name, state.last_sync)

    def _rematch_at_start(self, state: NpmState, old_classify: Classify | None) -> dict[str, int]:
        """Hold an NPM's sessions to the policy this controller started with, from the one the
        database says was running (classified as the switch's tables did, when it kept them)."""
        assert self.policy is not None and self.sessions is not None
        assert self.previous_policy is not None
        path, text = self.previous_policy
        try:
            old = load_policy(path, text)
        except ConfigError as error:
            LOG.warning(
                "%s: the policy its sessions were made under cannot be read back (%s); they keep "
                "their verdicts",
                state.conn.name,
                error,
            )
            return {}
        banks = state.classifier
        return self.sessions.rematch(
            (old, old_classify or classifier(old, None)),
            (self.policy, classifier(self.policy, banks.content.get(banks.active))),
            npm=state.conn.name,
        )

    def _plan_npm(self, state: NpmState, policy: Policy) -> NpmPlan:
        compiled: CompiledTables | None = None
        update: UpdatePlan | None = None
        if rules_key(policy) != state.rules:
            try:
                compiled, update = state.classifier.prepare(
                    acl_rules(policy),
                    ids_rules(policy),
                    hybrid=pc.T_ACL_SPILL in state.conn.available,
                    limits=state.conn.classifier_limits,
                )
            except TableOverflow as overflow:
                raise RequestError(
                    422, f"the rules do not fit the classifier: {overflow}"
                ) from None
        desired = self._desired_base(policy, state, self._weights_for(policy))
        _check_fits(state.conn, desired)
        diff = diff_base(state.base or BaseConfig(), desired)
        flip_extra: list[TableEntry] = []
        if update is not None and update.to_version != update.from_version:
            # The ACL default verdict is not banked: it changes in the flip's Write.
            flip_extra = [e for e in diff.modify_entries if e.table == pc.T_ACL_VERDICT]
            diff.modify_entries = [e for e in diff.modify_entries if e.table != pc.T_ACL_VERDICT]
        return NpmPlan(compiled, update, diff, desired, flip_extra, rules_digest(policy))

    def _weights_for(self, policy: Policy) -> dict[str, int]:
        assert self.spms is not None
        weights = self.spms.weights()
        return {s.name: weights.get(s.name, s.weight) for s in policy.spms if s.name in weights}

    def _execute(self, state: NpmState, plan: NpmPlan, rules: tuple[object, ...]) -> None:
        """Idle bank, then additions to the base, then the flip, then base removals."""
        conn = state.conn
        pre = dataclasses.replace(
            plan.base_diff, delete_entries=[], delete_groups=[], delete_members=[]
        )
        post = BaseDiff(
            delete_entries=plan.base_diff.delete_entries,
            delete_groups=plan.base_diff.delete_groups,
            delete_members=plan.base_diff.delete_members,
        )
        body: list[tuple[Write, ...]] = []
        flip: tuple[Write, ...] | None = None
        if plan.update is not None:
            body, flip = split_plan(plan.update, plan.flip_extra)
        try:
            for batch in body:
                conn.write_batch(batch, "classifier (idle bank)")
            conn.apply_base(pre)
            if flip is not None:
                conn.write_batch(flip, "classifier flip")
            conn.apply_base(post)
        except Exception:
            # What the switch holds is no longer known exactly: read it back.
            state.rules = None
            self._reread(state)
            raise
        state.base = plan.desired
        if plan.update is not None and plan.compiled is not None:
            state.classifier.commit(plan.compiled, plan.update)
            state.rules = rules
            banks = state.classifier
            self.db_writer.submit(
                self.db.set_classifier_state,
                conn.name,
                banks.active,
                plan.rules_digest,
                entries_digest(banks.installed, banks.active),
            )

    def _reread(self, state: NpmState) -> None:
        state.base = None
        try:
            state.base = state.conn.read_base()
            active, entries = state.conn.read_classification()
            state.classifier = ClassifierBanks(entries, active)
        except (P4RuntimeError, ConnectionError) as error:
            LOG.warning("%s: cannot read the switch back: %s", state.conn.name, error)

    def _record_policy(self, policy: Policy, source: str) -> int:
        """The running version in the DB: one transaction (the one before superseded)."""
        version = self._add_version(policy, source, "applied")
        self.policy_version = version
        self.pending_policy_record = False
        self.metrics.policy_version.set(version)
        return version

    def _primaries(self) -> list[NpmState]:
        return [s for s in self.states.values() if s.role == "primary" and s.conn.is_primary]

    def _on_policy_apply(self, event: ev.PolicyApplyRequested) -> dict[str, Any]:
        """All or nothing: the database, this controller and the switches run either the new
        policy or the one before. Everything the DB will be asked to store is checked before
        the first write; the switches are written (a refusal puts them back), then the version
        is recorded (a failure puts them back too), and only then does the controller run it
        (its SPM weights, the sessions held to it)."""
        assert self.spms is not None and self.sessions is not None
        new: Policy = event.policy
        old = self.policy
        assert old is not None
        problem = policy_version_problem(
            name=new.name, path=new.path, text=new.text, source=event.source
        )
        if problem is not None:
            raise RequestError(422, f"the policy cannot be stored: {problem}")
        self.spms.update_policy(new, time.monotonic())  # the weights the plans write
        results: dict[str, Any] = {}
        # The tables the NPMs classify with before and after (all NPMs have the same rules).
        tables: list[CompiledTables | None] = [None, None]
        try:
            for state in self._primaries():
                banks = state.classifier
                tables[0] = tables[0] or banks.content.get(banks.active)
                plan = self._plan_npm(state, new)
                self._execute(state, plan, rules_key(new))
                results[state.conn.name] = plan.summary()
                tables[1] = tables[1] or plan.compiled or banks.content.get(banks.active)
        except Exception as error:
            LOG.error("policy apply failed: %s; restoring the running policy", error)
            restored = self._restore_policy(old)
            self._record_failed(new, event.source, str(error))
            if isinstance(error, RequestError) and error.status == 422:
                raise RequestError(422, f"{error.message}; {restored}") from None
            raise RequestError(
                409, f"the switch refused the new policy: {error}; {restored}"
            ) from None
        try:
            version = self._record_policy(new, event.source)
        except Exception as error:
            LOG.error("policy apply: the database did not record it: %s; restoring", error)
            restored = self._restore_policy(old)
            raise RequestError(
                503, f"the database did not record the new policy ({error}); {restored}"
            ) from None
        self.policy = new
        self.sessions.policy = new
        self.previous_policy = None  # the sessions are held to `new` now, from `old`
        # The sessions opened under the old policy are held to the new one too.
        new_classify = classifier(new, tables[1])
        # The same rules, the same tables: one classifier serves both policies.
        same = rules_key(old) == rules_key(new)
        old_classify = new_classify if same else classifier(old, tables[0])
        rematched = self.sessions.rematch((old, old_classify), (new, new_classify))
        self.bus.publish(ev.PolicyApplied(version, new.sha256, new.summary()))
        LOG.info("policy version %d applied: %s", version, results)
        return {
            "version": version,
            "sha256": new.sha256,
            "npms": results,
            "rematched": rematched,  # in the first turn (status: sessions.rematch_pending)
            "rematch_pending": self.sessions.rematch_pending,
        }

    def _restore_policy(self, old: Policy) -> str:
        """Put every primary NPM back to `old` after a failed apply; what runs now, in words.
        An NPM that cannot be put back is reconciled again from the ticker (as a failed
        take-over is), and its status says why until then."""
        assert self.spms is not None
        self.spms.update_policy(old, time.monotonic())
        failed: list[str] = []
        for state in self._primaries():
            try:
                self._execute(state, self._plan_npm(state, old), rules_key(old))
            except Exception as error:
                LOG.error("%s: restoring the running policy failed too: %s", state.conn.name, error)
                state.role = "failed"
                state.error = f"restoring policy version {self.policy_version} failed: {error}"
                state.retry_at = time.monotonic() + TAKEOVER_RETRY_SECONDS
                state.synced.clear()
                failed.append(f"{state.conn.name} ({error})")
        running = f"version {self.policy_version} ({old.name}) runs"
        if not failed:
            return f"{running} on every NPM, as before"
        return f"{running}, but could not be written back to {', '.join(failed)}: reconciling"

    def _add_version(
        self, policy: Policy, source: str, status: str, error: str | None = None
    ) -> int:
        return self.db.add_policy_version(
            name=policy.name,
            path=policy.path,
            sha256=policy.sha256,
            text=policy.text,
            status=status,
            source=source,
            summary=policy.summary(),
            error=error,
        )

    def _record_failed(self, policy: Policy, source: str, error: str) -> None:
        """The refused policy in the version history (best effort: the DB may be what failed)."""
        try:
            self._add_version(policy, source, "failed", error)
        except Exception as db_error:
            LOG.error("the refused policy is not in the version history: %s", db_error)

    def diff_policy(self, new: Policy) -> dict[str, Any]:
        """What applying `new` would write (dispatcher thread: call through bus.call)."""
        assert self.policy is not None
        results: dict[str, Any] = {}
        for state in self._primaries():
            results[state.conn.name] = self._plan_npm(state, new).summary()
        text_diff = "".join(
            difflib.unified_diff(
                self.policy.text.splitlines(keepends=True),
                new.text.splitlines(keepends=True),
                fromfile=f"running (version {self.policy_version})",
                tofile=new.path,
            )
        )
        return {
            "running_sha256": self.policy.sha256,
            "new_sha256": new.sha256,
            "changed": new.sha256 != self.policy.sha256,
            "npms": results,
            "text_diff": text_diff,
        }

    # -- SPMs --------------------------------------------------------------------------------

    def _sync_selector(self) -> None:
        """Write the selector groups that changed (weights, members up or down)."""
        assert self.policy is not None
        for state in self._primaries():
            desired = self._desired_base(self.policy, state, self._weights_for(self.policy))
            current = state.base or BaseConfig()
            diff = diff_base(current, desired)
            if diff.count():
                pre = dataclasses.replace(
                    diff, delete_entries=[], delete_groups=[], delete_members=[]
                )
                state.conn.apply_base(pre)
                state.conn.apply_base(BaseDiff(delete_entries=diff.delete_entries))
            state.base = desired

    def _desired_base(
        self, policy: Policy, state: NpmState, weights: Mapping[str, int]
    ) -> BaseConfig:
        """`desired_base` for an NPM, its part that the SPMs' weights do not decide made again
        only when the policy or the NPM changed: the weights move with the SPMs' load reports,
        and making the whole base each time (every cell of the per-source meters among it) took
        a sixth of the CPM's interpreter during a flood of new flows (py-spy)."""
        key = (policy.sha256, state.tag_base, frozenset(state.conn.available))
        if state.static_base is None or state.static_base[0] != key:
            state.static_base = (key, static_base(policy, state.tag_base, state.conn.available))
        static = state.static_base[1]
        return with_weights(static, policy, weights, self._ipsec_hold(policy, weights))

    def _on_spm_load(self, event: ev.SpmLoadReport) -> dict[str, Any]:
        assert self.spms is not None
        state_before = self.spms.states.get(event.spm)
        if state_before is None:
            raise RequestError(404, f"no SPM named {event.spm!r} in the policy")
        was_down = state_before.status == "down"
        try:
            outcome = self.spms.report(event.spm, event.report, time.monotonic())
        except ValueError as error:
            raise RequestError(422, str(error)) from None
        state = self.spms.states[event.spm]
        self.metrics.spm_up.labels(event.spm).set(1)
        self.metrics.spm_weight.labels(event.spm).set(state.weight)
        self.metrics.spm_cpu.labels(event.spm).set(float(state.report.get("cpu", 0)))
        self.metrics.spm_queue.labels(event.spm).set(float(state.report.get("queue_depth", 0)))
        dropped = float(state.report.get("queue_dropped", 0))
        self.metrics.spm_queue_dropped.labels(event.spm).set(dropped)
        if outcome.weight_changed:
            self._sync_selector()
        self.db.upsert_spm(
            event.spm,
            port=state.spec.port,
            mac=state.spec.mac,
            status=state.status,
            weight=state.weight,
            report=state.report,
            status_changed=outcome.came_up,
        )
        if outcome.came_up and was_down:
            self.bus.publish(ev.SpmUp(event.spm))
        return {"status": state.status, "weight": state.weight}

    def _on_spm_down(self, event: ev.SpmDown) -> dict[str, int]:
        assert self.spms is not None and self.sessions is not None
        self.spms.mark_down(event.spm)
        self.metrics.spm_up.labels(event.spm).set(0)
        self.metrics.spm_weight.labels(event.spm).set(0)
        self._sync_selector()
        outcome = self.sessions.on_spm_down(event.spm)
        state = self.spms.states.get(event.spm)
        if state is not None:
            self.db.upsert_spm(
                event.spm,
                port=state.spec.port,
                mac=state.spec.mac,
                status="down",
                weight=0,
                status_changed=True,
            )
        return outcome

    # -- IPsec -------------------------------------------------------------------------------

    def ipsec_weights(self) -> dict[str, int]:
        """SPM name -> weight, 0 for SPMs that are down (what picks the active IPsec SPM)."""
        return dict(self.spms.weights()) if self.spms is not None else {}

    def _ipsec_hold(self, policy: Policy | None, weights: Mapping[str, int]) -> str | None:
        """The IPsec SPM that holds the tunnels: the one that holds them now while it is up,
        else the pool's first that is up (remembered: a recovered SPM does not take them back)."""
        if policy is None:
            return None
        spm, up = active_spm(policy, weights, self._ipsec_holder)
        if spm is not None and up:
            self._ipsec_holder = spm.name
        return self._ipsec_holder

    def ipsec_status(self) -> dict[str, Any]:
        weights = self.ipsec_weights()
        holder = self._ipsec_hold(self.policy, weights)
        return ipsec_view(self.policy, weights, self.ipsec_reports, holder)

    def ipsec_spm_config(self, name: str) -> dict[str, Any]:
        if self.policy is None or self.policy.spm_by_name(name) is None:
            raise RequestError(404, f"no SPM named {name!r} in the policy")
        weights = self.ipsec_weights()
        return spm_config(self.policy, weights, name, self._ipsec_hold(self.policy, weights))

    def ipsec_report(self, name: str, report: dict[str, Any]) -> dict[str, Any]:
        """An IPsec SPM's status (every second); the active one's sets the metrics."""
        if self.policy is None or self.policy.spm_by_name(name) is None:
            raise RequestError(404, f"no SPM named {name!r} in the policy")
        tunnels = report.get("tunnels")
        if not isinstance(tunnels, list) or not all(isinstance(t, dict) for t in tunnels):
            raise RequestError(422, "tunnels must be a list of objects")
        self.ipsec_reports.put(name, report)
        weights = self.ipsec_weights()
        config = spm_config(self.policy, weights, name, self._ipsec_hold(self.policy, weights))
        ipsec = self.policy.ipsec
        known = {t.name for t in ipsec.tunnels} if ipsec is not None else set()
        if config["active"]:
            # a tunnel's name is a label: only the policy's (a report cannot grow /metrics)
            for tunnel in (t for t in tunnels if t.get("name") in known):
                label = str(tunnel.get("name"))
                self.metrics.ipsec_tunnel_up.labels(label).set(int(tunnel.get("state") == "up"))
                self.metrics.ipsec_rekeys.labels(label).set(float(tunnel.get("rekeys") or 0))
                for direction in ("in", "out"):
                    self.metrics.ipsec_bytes.labels(label, direction).set(
                        float(tunnel.get(f"bytes_{direction}") or 0)
                    )
                    self.metrics.ipsec_packets.labels(label, direction).set(
                        float(tunnel.get(f"packets_{direction}") or 0)
                    )
        return {"active": config["active"], "policy": config.get("policy")}

    def _on_spm_up(self, event: ev.SpmUp) -> None:
        LOG.info("SPM %s is back; new flows may use it again", event.spm)

    def _on_session_delete(self, event: ev.SessionDeleteRequested) -> dict[str, Any]:
        assert self.sessions is not None
        session = self.sessions.sessions.get(event.session_id)
        if session is None:
            raise RequestError(404, f"no session {event.session_id}")
        self.sessions.remove([session], event.reason, end_slots=True)
        return {"deleted": event.session_id}

    def _on_session_block(self, event: ev.SessionBlockRequested) -> dict[str, Any]:
        assert self.sessions is not None
        session = self.sessions.sessions.get(event.session_id)
        if session is None:
            raise RequestError(404, f"no session {event.session_id}")
        self.sessions.block(session)
        LOG.info("session %d blocked (%s)", session.id, event.reason)
        return {"blocked": event.session_id}

    def _on_spm_drain(self, event: ev.SpmDrainRequested) -> dict[str, Any]:
        assert self.spms is not None
        try:
            changed = self.spms.drain(event.spm, event.drained)
        except KeyError:
            raise RequestError(404, f"no SPM named {event.spm!r} in the policy") from None
        state = self.spms.states[event.spm]
        self.metrics.spm_weight.labels(event.spm).set(state.weight)
        if changed:
            self._sync_selector()
        return {"spm": event.spm, "drained": state.drained, "weight": state.weight}

    # -- views (run on the dispatcher through bus.call) --------------------------------------

    def npm_counters(self, ports: Sequence[int] | None = None) -> dict[str, NpmCounters]:
        """What each connected NPM counted (drops by reason, data-plane session events, ports:
        all, or `ports` only), read now; reads need no primary role. An NPM that cannot be read
        is left out (the console asks every second: the warning is throttled)."""
        out: dict[str, NpmCounters] = {}
        for name, state in list(self.states.items()):
            conn = state.conn
            if not conn.is_connected:
                continue
            read = functools.partial(conn.read, timeout=COUNTER_READ_SECONDS)
            try:
                out[name] = read_counters(conn.schema, read, ports)
            except (P4RuntimeError, ConnectionError) as error:
                self._counters_unread.warning(name, str(error))
        return out

    def status(self) -> dict[str, Any]:
        assert self.policy is not None and self.sessions is not None and self.spms is not None
        stats = self.sessions.stats
        return {
            "uptime_seconds": round(time.time() - self.started_at, 1),
            "election_id": self.options.election_id,
            "policy": {
                "version": self.policy_version,
                "name": self.policy.name,
                "sha256": self.policy.sha256,
                "path": self.policy.path,
            },
            "npms": {
                name: {
                    "address": state.conn.address.address,
                    "device_id": state.conn.address.device_id,
                    "role": state.role,
                    # reconciled since it last became primary (or, as standby, nothing to do)
                    "synced": state.synced.is_set(),
                    "error": state.error,
                    "tag_base": state.tag_base,
                    "tags": [state.tag_base, state.tag_base | 1],
                    "classifier_bank": state.classifier.active,
                    "sessions": self.sessions.count(name),
                    "last_sync": state.last_sync,
                }
                for name, state in self.states.items()
            },
            "sessions": {
                "active": self.sessions.count(),
                "installed": stats.installed,
                "removed": stats.removed,
                "duplicates": stats.duplicates,
                "failed": stats.failed,
                "acl_to_cpu": stats.acl_to_cpu,
                "orphans_deleted": stats.orphans_deleted,
                # sessions.data_plane_entries: on_demand
                "slot_only": stats.slot_only,
                "promoted": stats.promoted,
                "slot_aged": stats.slot_aged,
                "rematched": dict(stats.rematched),  # by policy applies (controller.rematch)
                "rematch_pending": self.sessions.rematch_pending,  # left to the next turns
                "rematch_turns": stats.rematch_turns,
            },
            # what the gateway answered itself (controller.gateway_icmp)
            "icmp": {
                **self.sessions.icmp.sent,
                "not_answered": self.sessions.icmp.not_answered,
                "rate_limited": self.sessions.icmp.rate_limited,
            },
            "spms": {name: s.as_dict() for name, s in self.spms.states.items()},
            "events_pending": self.bus.pending,
        }

    def hsm_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, state in self.states.items():
            banks = state.classifier
            compiled = banks.content.get(banks.active)
            counts = {0: 0, 1: 0}
            for entry in banks.installed:
                version = entry.match_dict.get("version")
                if isinstance(version, Exact):
                    counts[version.value] = counts.get(version.value, 0) + 1
            stats = compiled.stats if compiled is not None else None
            limits = state.conn.classifier_limits
            out[name] = {
                "active_bank": banks.active,
                "entries": counts,
                "stats": dataclasses.asdict(stats) if stats is not None else None,
                # what a packet costs and how full each table's bank is
                "lookups_per_packet": stats.lookups_per_packet if stats else None,
                "memory_accesses_per_packet": stats.memory_accesses() if stats else None,
                "fill": (
                    {
                        t.table: round(t.entries / limits[t.table], 4)
                        for t in stats.tables
                        if limits.get(t.table, 0) > 0
                    }
                    if stats
                    else None
                ),
            }
        return out
