"""Sessions held to a newly applied policy (controller.rematch): denied ones blocked, those whose
class changed or lost its SPM re-steered; against the switch double (entries and database), and
the decisions alone against first-match linear search."""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from controller import events as ev
from controller import rematch as rematch_module
from controller.classifier import acl_rules, ids_rules
from controller.hsm.linear import Classification
from controller.hsm.tables import compile_tables
from controller.policy import Policy, SpmSpec, load_policy
from controller.rematch import OUTCOMES, classifier, judge, tables_classifier
from controller.session_encoding import FlowKey
from controller.session_model import ACTIVE, BLOCKED, BYPASSED, Session
from opengate import p4constants as pc
from opengate.fields import Packet
from tests.controller.conftest import DATA, ControllerFactory, wait_until
from tests.controller.flows import H1, H2, OUT1, SPM1_MAC, SPM2_MAC, key, request
from tests.controller.test_runtime import apply
from tests.controller.test_sessions import db_sessions, expected_entry, session_entries
from tests.switch_double import SwitchDouble

SMTP = key(H1, OUT1, pc.IP_PROTO_TCP, 40000, 25)  # no IDS class; the new policy denies it
DNS = key(H1, OUT1, pc.IP_PROTO_UDP, 40001, 53)  # class dns (pool strict); loses its chain
WEB = key(H1, OUT1, pc.IP_PROTO_TCP, 40002, 80)  # class web on spm1; nothing changes
BULK = key(H2, OUT1, pc.IP_PROTO_TCP, 40003, 5201)  # class bulk, made with no SPM up


def reverse(flow: FlowKey) -> FlowKey:
    src, dst, proto, sport, dport = flow
    return (dst, src, proto, dport, sport)


def changed_policy(lab: Path) -> None:
    """SMTP from inside denied; the dns class no longer inspected; the bulk class on the strict
    chain (pool strict: spm1 alone, fails closed)."""
    text = lab.read_text()
    for line, replacement in (
        (
            "    - {name: lan-out, src: inside, action: permit}",
            "    - {name: no-smtp, src: inside, proto: tcp, dport: 25, action: deny}\n"
            "    - {name: lan-out, src: inside, action: permit}",
        ),
        (
            "  - {id: 3, name: dns, chain: strict-ips, sids: [1000004]}",
            "  - {id: 3, name: dns, sids: [1000004]}",
        ),
        (
            "  - {id: 2, name: bulk, chain: ips-av, bypass: true, sids: [1000003]}",
            "  - {id: 2, name: bulk, chain: strict-ips, bypass: true, sids: [1000003]}",
        ),
    ):
        assert line in text, f"lab.yaml has no line {line!r}"
        text = text.replace(line, replacement)
    lab.write_text(text)


def test_applied_policy_blocks_denied_sessions_and_resteers_changed_classes(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    controller = make_controller(switch)
    spm1 = {"spm_port": 3, "spm_mac": SPM1_MAC}
    switch.inject_digest(
        pc.D_SESSION_REQUEST_T,
        [
            request(SMTP),
            request(DNS, ids_class=3, **spm1),
            request(WEB, ids_class=1, **spm1),
            request(BULK, ids_class=2),
        ],
    )
    wait_until(
        "8 session entries and 4 database rows",
        lambda: len(session_entries(switch)) == 8 and len(db_sessions(controller)) == 4,
    )
    web_entries = [
        expected_entry(controller, WEB, class_id=1, **spm1),
        expected_entry(controller, reverse(WEB), class_id=1, **spm1),
    ]
    changed_policy(lab)

    result = apply(controller, lab)

    assert result["rematched"] == {
        **dict.fromkeys(OUTCOMES, 0),
        "denied": 1,
        "uninspected": 1,
        "inspected": 1,
    }
    # BULK's class is on the strict chain now: spm1, the only SPM of its pool.
    bulk = {"class_id": 2, **spm1}
    expected = [
        expected_entry(controller, SMTP, 30.0, True),
        expected_entry(controller, reverse(SMTP), 30.0, True),
        expected_entry(controller, DNS, class_id=3),
        expected_entry(controller, reverse(DNS), class_id=3),
        *web_entries,
        expected_entry(controller, BULK, **bulk),
        expected_entry(controller, reverse(BULK), **bulk),
    ]
    assert sorted(session_entries(switch), key=str) == sorted(expected, key=str)
    rows = {(r["sport"], r["state"], r["class_id"], r["spm_port"]) for r in db_sessions(controller)}
    assert rows == {
        (40000, BLOCKED, 0, 0),
        (40001, ACTIVE, 3, 0),
        (40002, ACTIVE, 1, 3),
        (40003, ACTIVE, 2, 3),
    }
    assert controller.status()["sessions"]["rematched"] == result["rematched"]
    # Applying the same policy again changes nothing more.
    assert apply(controller, lab)["rematched"] == dict.fromkeys(OUTCOMES, 0)


def session(flow: FlowKey, class_id: int, spm: tuple[int, int], state: str = ACTIVE) -> Session:
    return Session(
        id=flow[3],
        npm="npm1",
        key=flow,
        reply=reverse(flow),
        class_id=class_id,
        spm_port=spm[0],
        spm_mac=spm[1],
        nat_kind=pc.NAT_NONE,
        nat_addr=0,
        nat_port=0,
        acl_rule=1,
        ingress_port=1,
        idle_timeout=30.0,
        created_at=dt.datetime.now(dt.UTC),
        state=state,
    )


def outcomes(
    old: Policy, new: Policy, sessions: list[Session], live: set[tuple[int, int]]
) -> dict[int, tuple[str, int, int, bool]]:
    """Each changed session's outcome, class, SPM port and block, from `old` to `new` with the
    SPMs `live` up (a moved flow gets the first live SPM of its pool)."""
    specs = {(s.port, s.mac): s for s in new.spms}

    def members(pool: str) -> set[tuple[int, int]]:
        names = new.pool(pool).spms
        return {spm for spm in live if specs[spm].name in names}

    def choose(pool: str, flow: FlowKey) -> SpmSpec | None:
        del flow
        up = sorted(members(pool))
        return specs[up[0]] if up else None

    changes = judge(
        sessions, (old, classifier(old, None)), (new, classifier(new, None)), members, choose
    )
    return {c.session.id: (c.outcome, c.class_id, c.spm_port, c.block) for c in changes if c}


def test_rematch_judges_what_the_policy_changed(lab: Path) -> None:
    old = load_policy(lab)
    changed_policy(lab)
    new = load_policy(lab)
    spm1, spm2 = (3, SPM1_MAC), (4, SPM2_MAC)
    tcp, udp = pc.IP_PROTO_TCP, pc.IP_PROTO_UDP
    sessions = [
        session(SMTP, 0, (0, 0)),  # denied now
        session(key(H1, OUT1, tcp, 40010, 25), 0, (0, 0), BYPASSED),  # denied too
        session(key(H1, OUT1, tcp, 40011, 25), 0, (0, 0), BLOCKED),  # stays blocked
        session(DNS, 3, spm1),  # dns lost its chain: uninspected
        session(WEB, 1, spm1),  # nothing changed
        session(key(H1, OUT1, tcp, 40012, 80), 1, spm2),  # spm2 is down, but not the policy's
        session(key(H1, OUT1, tcp, 40014, 5201), 2, (0, 0), BYPASSED),  # bypass kept
        session(key(H1, OUT1, tcp, 40015, 5201), 2, spm2),  # bulk's pool is spm1's alone
        session(key(H1, OUT1, tcp, 40016, 5201), 2, spm1),  # ...where it is already
        # reported from its reply: its key is denied under both policies, and has no class
        session(key(OUT1, H1, udp, 7, 40017), 1, spm1),
    ]
    assert outcomes(old, new, sessions, {spm1}) == {
        40000: ("denied", 0, 0, True),
        40010: ("denied", 0, 0, True),
        40001: ("uninspected", 3, 0, False),
        40015: ("resteered", 2, 3, False),
    }
    # Back to the lab policy with no SPM up: dns's strict chain fails closed, bulk's ips-av
    # chain is open on failure.
    assert outcomes(
        new, old, [session(DNS, 3, (0, 0)), session(BULK, 2, spm1), session(WEB, 1, spm1)], set()
    ) == {
        40001: ("no_spm_blocked", 3, 0, True),
        40003: ("uninspected", 2, 0, False),
    }


def test_rematch_classifies_as_the_compiled_tables_do(lab: Path) -> None:
    """The walk of compiled tables and linear search give the same decisions."""
    changed_policy(lab)
    policy = load_policy(lab)
    linear = classifier(policy, None)
    flows = (SMTP, DNS, WEB, BULK, key(OUT1, H1, pc.IP_PROTO_TCP, 80, 40000))
    for bank in (0, 1):
        compiled = compile_tables(acl_rules(policy), ids_rules(policy), version=bank)
        walk = classifier(policy, compiled)
        for src, dst, proto, sport, dport in flows:
            packet = Packet(src, dst, sport, dport, proto)
            assert walk(packet) == linear(packet), (bank, packet)
    # (and they are not all alike: SMTP is denied, WEB and BULK have classes of their own)
    results = {linear(Packet(f[0], f[1], f[3], f[4], f[2])) for f in flows}
    assert len(results) == len(flows)


def test_a_restart_with_another_policy_holds_the_sessions_to_it(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    """The controller stops; the policy file changes; the new controller reconciles the
    sessions and holds them to the new policy, judged against the tables the switch kept."""
    first = make_controller(switch)
    spm1 = {"spm_port": 3, "spm_mac": SPM1_MAC}
    switch.inject_digest(pc.D_SESSION_REQUEST_T, [request(SMTP), request(WEB, ids_class=1, **spm1)])
    wait_until("4 session entries", lambda: len(session_entries(switch)) == 4)
    first.stop()
    changed_policy(lab)

    second = make_controller(switch)

    sync = second.states["npm1"].last_sync
    assert sync["rematched"] == {**dict.fromkeys(OUTCOMES, 0), "denied": 1}, sync
    assert sorted(session_entries(switch), key=str) == sorted(
        [
            expected_entry(second, SMTP, 30.0, True),
            expected_entry(second, reverse(SMTP), 30.0, True),
            expected_entry(second, WEB, class_id=1, **spm1),
            expected_entry(second, reverse(WEB), class_id=1, **spm1),
        ],
        key=str,
    )
    states = {r["sport"]: r["state"] for r in db_sessions(second)}
    assert states == {SMTP[3]: BLOCKED, WEB[3]: ACTIVE}
    # What the switch's tables say, read back, is what linear search over the policy says.
    active, entries = second.npms["npm1"].read_classification()
    read_back = tables_classifier(entries, active)
    linear = classifier(load_policy(lab), None)
    for src, dst, proto, sport, dport in (SMTP, WEB, DNS, BULK):
        packet = Packet(src, dst, sport, dport, proto)
        assert read_back(packet) == linear(packet), packet
    # A restart with the same policy again holds nothing anew.
    second.stop()
    third = make_controller(switch)
    assert "rematched" not in third.states["npm1"].last_sync


def test_reports_that_may_predate_an_apply_are_held_to_it(
    switch: SwitchDouble,
    make_controller: ControllerFactory,
    lab: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A digest received soon after an apply may be of a packet classified before the flip: its
    session is held to the new policy before its entries are written. One received later is the
    new tables' own verdict."""
    controller = make_controller(switch)
    monkeypatch.setattr(rematch_module, "APPLY_SETTLE", 60.0)  # a loaded machine is slow
    changed_policy(lab)
    assert apply(controller, lab)["rematched"] == dict.fromkeys(OUTCOMES, 0)  # none open yet
    switch.inject_digest(pc.D_SESSION_REQUEST_T, [request(SMTP)])
    wait_until("the session in the database", lambda: db_sessions(controller))
    assert session_entries(switch) == [
        expected_entry(controller, SMTP, 30.0, True),
        expected_entry(controller, reverse(SMTP), 30.0, True),
    ]
    assert [r["state"] for r in db_sessions(controller)] == [BLOCKED]
    # With the settling time over, a report is taken as it is.
    monkeypatch.setattr(rematch_module, "APPLY_SETTLE", 0.0)
    apply(controller, lab)
    later = key(H2, OUT1, pc.IP_PROTO_TCP, 40020, 25)
    switch.inject_digest(pc.D_SESSION_REQUEST_T, [request(later)])
    wait_until("the second session", lambda: len(db_sessions(controller)) == 2)
    states = {r["src"]: r["state"] for r in db_sessions(controller)}
    assert states == {SMTP[0]: BLOCKED, later[0]: ACTIVE}


def test_with_the_same_rules_only_the_default_verdict_and_the_chains_count(lab: Path) -> None:
    """One classifier for both policies (their rules are the same): a session keeps the class
    its first packet got, so a changed chain needs no classification; a changed default verdict
    classifies only the sessions that no rule admitted (and those adopted from a switch, whose
    rule is not known: RULE_NONE too)."""
    old = load_policy(lab)
    lab.write_text(lab.read_text().replace("closing_linger: 0.2", "closing_linger: 1"))
    timer = load_policy(lab)
    linear = classifier(old, None)
    calls: list[Packet] = []

    def counted(packet: Packet) -> Classification:
        calls.append(packet)
        return linear(packet)

    inbound = key(OUT1, H1, pc.IP_PROTO_TCP, 40000, 22)  # no rule matches: the default
    sessions = [
        session(DNS, 3, (3, SPM1_MAC)),
        session(WEB, 1, (4, SPM2_MAC)),
        dataclasses.replace(session(inbound, 0, (0, 0)), acl_rule=pc.RULE_NONE),
    ]

    def changes(before: Policy, after: Policy) -> list[tuple[int, str]]:
        found = judge(
            sessions, (before, counted), (after, counted), lambda _: set(), lambda *_: None
        )
        return [(c.session.id, c.outcome) for c in found if c]

    assert changes(old, timer) == [] and calls == []
    text = lab.read_text()
    lab.write_text(
        text.replace(
            "  - {id: 3, name: dns, chain: strict-ips, sids: [1000004]}",
            "  - {id: 3, name: dns, sids: [1000004]}",
        )
    )
    assert changes(old, load_policy(lab)) == [(DNS[3], "uninspected")]
    assert calls == []
    lab.write_text(text.replace("  default: deny", "  default: permit"))
    assert changes(load_policy(lab), old) == [(inbound[3], "denied")]
    assert calls == [Packet(inbound[0], inbound[1], inbound[3], inbound[4], inbound[2])]


def _acl_lines(rng: random.Random, count: int) -> list[str]:
    """Random ACL rules over a few addresses and ports, so that they overlap often."""
    lines = []
    for number in range(count):
        src = rng.choice(["inside", "10.0.1.10", "10.0.1.0/25", "10.0.0.0/8"])
        dst = rng.choice(["outside", "198.51.100.20", "198.51.100.0/25", "0.0.0.0/0"])
        proto = rng.choice(["tcp", "udp"])
        port = rng.choice([25, 53, 80, "1000-2000"])
        action = rng.choice(["permit", "deny"])
        lines.append(
            f"    - {{name: r{number}, src: {src}, dst: {dst}, proto: {proto}, dport: {port}, "
            f"action: {action}}}"
        )
    return lines


def _with_acl(lab: Path, lines: list[str], name: str) -> Policy:
    text = (DATA / "lab.yaml").read_text()
    start = text.index("    - {name: telnet-to-cpu")
    end = text.index("\n\nids:")
    path = lab.with_name(name)
    path.write_text(text[:start] + "\n".join(lines) + text[end:])
    return load_policy(path)


def test_checking_sessions_against_the_changed_rules_decides_as_classifying_them(
    lab: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random ACLs and random edits of them (rules added, removed, moved): holding sessions to
    the edited ACL with the changed rules as a filter gives the same changes as classifying
    every session under both (the brute force)."""
    rng = random.Random(7)
    for trial in range(40):
        lines = _acl_lines(rng, 12)
        edited = list(lines)
        for _ in range(rng.randrange(1, 4)):
            edit = rng.choice(["add", "remove", "move"])
            if edit == "add":
                edited.insert(rng.randrange(len(edited) + 1), _acl_lines(rng, 1)[0])
            elif edit == "remove" and len(edited) > 1:
                edited.pop(rng.randrange(len(edited)))
            else:
                edited.insert(rng.randrange(len(edited)), edited.pop(rng.randrange(len(edited))))
        old = _with_acl(lab, lines, f"old{trial}.yaml")
        new = _with_acl(lab, edited, f"new{trial}.yaml")
        sessions = [
            session(
                key(
                    rng.choice([H1, H2]),
                    rng.choice([OUT1, "198.51.100.200", "203.0.113.5"]),
                    rng.choice([pc.IP_PROTO_TCP, pc.IP_PROTO_UDP]),
                    40000 + n,
                    rng.choice([25, 53, 80, 1500, 7]),
                ),
                0,
                (0, 0),
            )
            for n in range(30)
        ]
        live = {(3, SPM1_MAC), (4, SPM2_MAC)}
        filtered = outcomes(old, new, sessions, live)
        monkeypatch.setattr(rematch_module, "DELTA_LIMIT", -1)  # no filter: classify them all
        brute = outcomes(old, new, sessions, live)
        monkeypatch.undo()
        assert filtered == brute, (trial, lines, edited)
        assert rematch_module.changed_rules(old, new) is not None


class _Spms:
    """What PolicyHold asks of the SPM pool: every SPM of `live` up, a moved flow to the first."""

    def __init__(self, policy: Policy, live: set[tuple[int, int]]) -> None:
        self.specs = {(s.port, s.mac): s for s in policy.spms}
        self.policy, self.live = policy, live

    def live_members(self, pool: str) -> list[tuple[SpmSpec, object]]:
        names = self.policy.pool(pool).spms
        return [(self.specs[m], None) for m in sorted(self.live) if self.specs[m].name in names]

    def choose(self, pool: str, flow: FlowKey) -> SpmSpec | None:
        del flow
        members = self.live_members(pool)
        return members[0][0] if members else None


@pytest.mark.parametrize("turn", [1, 3, 7, 1000])
def test_a_hold_in_turns_changes_what_one_pass_does_and_skips_sessions_that_ended(
    lab: Path, turn: int
) -> None:
    """A HoldJob stepped `turn` sessions at a time changes the same sessions the same way as
    judge() in one pass (the reference), except those that ended between two turns."""
    old = load_policy(lab)
    changed_policy(lab)
    new = load_policy(lab)
    rng = random.Random(turn)
    live = {(3, SPM1_MAC)}

    def make() -> list[Session]:
        rng.seed(turn)
        return [
            session(
                key(
                    H1,
                    OUT1,
                    rng.choice([pc.IP_PROTO_TCP, pc.IP_PROTO_UDP]),
                    41000 + n,
                    rng.choice([25, 53, 80, 5201]),
                ),
                rng.choice([0, 1, 2, 3]),
                rng.choice([(0, 0), (3, SPM1_MAC), (4, SPM2_MAC)]),
            )
            for n in range(60)
        ]

    reference = outcomes(old, new, make(), live)
    assert len(reference) > 10  # the policy change touches many of them
    sessions = make()
    ended: set[int] = set()
    counts = dict.fromkeys(OUTCOMES, 0)
    hold = rematch_module.PolicyHold(_Spms(new, live), counts)  # type: ignore[arg-type]
    job = hold.applied(
        sessions,
        (old, classifier(old, None)),
        (new, classifier(new, None)),
        alive=lambda s: s.id not in ended,
    )
    changed: dict[int, tuple[str, int, int, bool]] = {}
    turns = 0
    while not job.done:
        before = job.examined
        for s in job.step(turn):
            changed[s.id] = (s.state, s.class_id, s.spm_port, s.state == BLOCKED)
        turns += 1
        assert job.examined - before <= turn + len(ended)  # ended ones are passed over
        assert job.remaining == (0 if job.done else len(sessions) - job.examined)
        # a session not judged yet ends: it must be left alone
        waiting = [s.id for s in sessions[job.examined :] if s.id not in ended]
        if waiting and turns % 2 == 0:
            ended.add(waiting[0])
    assert turns >= (len(sessions) - len(ended)) // turn
    expected = {k: v for k, v in reference.items() if k not in ended}
    assert set(changed) == set(expected)
    for sid, (outcome, class_id, spm_port, block) in expected.items():
        # a block changes only the state (the entries keep their SPM, and drop)
        want = (changed[sid][1], changed[sid][2], True) if block else (class_id, spm_port, False)
        assert changed[sid][1:] == want, (sid, outcome)
    assert sum(job.outcome.values()) == len(expected) == sum(counts.values())


def test_a_large_hold_runs_in_turns_between_other_events(
    switch: SwitchDouble,
    make_controller: ControllerFactory,
    lab: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An apply that changes many open sessions judges them in turns on the dispatcher (here
    10 sessions a turn, and no time: a later turn stops after one session): the apply answers
    after the first turn (bounded by sessions alone) with what is left, an event queued behind
    the apply is served after the second turn, and the turns go on until every session is held
    to the new policy (all blocked here: the new ACL denies SMTP)."""
    monkeypatch.setattr(rematch_module, "TURN_SESSIONS", 10)
    monkeypatch.setattr(rematch_module, "TURN_SECONDS", 0.0)
    controller = make_controller(switch)
    flows = [key(H1, OUT1, pc.IP_PROTO_TCP, 42000 + n, 25) for n in range(50)]
    switch.inject_digest(pc.D_SESSION_REQUEST_T, [request(f) for f in flows])
    wait_until(
        "100 session entries and 50 database rows",
        lambda: len(session_entries(switch)) == 100 and len(db_sessions(controller)) == 50,
    )
    changed_policy(lab)
    manager = controller.sessions
    assert manager is not None
    event = ev.PolicyApplyRequested(load_policy(lab), "test")

    def apply_then_look() -> tuple[dict[str, Any], Future[tuple[Any, ...]]]:
        # on the dispatcher: the apply (whose first turn queues the second), then a look
        # queued right behind it, before any later turn can be
        result = controller._on_policy_apply(event)
        return result, controller.bus.publish(ev.Call(lambda: manager.rematch_pending))

    result, look = controller.bus.call(apply_then_look)
    (pending,) = look.result(timeout=30)

    assert result["rematched"] == {**dict.fromkeys(OUTCOMES, 0), "denied": 10}, result
    assert result["rematch_pending"] == 40
    assert pending == 39  # a later turn is bounded by time too: here, one session
    wait_until(
        "every session blocked, in the database and on the switch",
        lambda: (
            controller.status()["sessions"]["rematch_pending"] == 0
            and {r["state"] for r in db_sessions(controller)} == {BLOCKED}
            and sorted(session_entries(switch), key=str)
            == sorted(
                [
                    e
                    for f in flows
                    for e in (
                        expected_entry(controller, f, 30.0, True),
                        expected_entry(controller, reverse(f), 30.0, True),
                    )
                ],
                key=str,
            )
        ),
    )
    status = controller.status()["sessions"]
    assert status["rematched"]["denied"] == 50
    assert status["rematch_turns"] >= 41
