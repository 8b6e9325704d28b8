"""Existing sessions against a newly applied policy ("rematch").

A session keeps the verdict its first packet got: its exact entries (or its data-plane slot)
carry every later packet past the ACL, the classification and the SPM choice. Without a rematch,
a policy that denies a flow, or puts its class under inspection, would reach only new flows: a
long-lived connection opened under the old policy would stay permitted, or uninspected, for as
long as it lasts. So when a policy is applied, every session's original key is classified again,
exactly as the data plane classifies an opening packet, under the old policy and the new one, and
what changed between the two is applied:

- the new ACL verdict is deny where the old one was not: the session is blocked (its entries
  drop both directions until they idle out; blocking, unlike deleting, also stops a flow its
  slot alone carries);
- its IDS class, or its class's chain (pool, SPMs, failure policies), changed: it is re-steered
  (it keeps its SPM if that SPM is a live member of the new pool, else gets one as a moved flow
  does), made uninspected (the class has no chain now), or, with no SPM of the pool up, blocked
  if the chain or pool fails closed and uninspected if it fails open;
- otherwise it is left alone: what the policy did not change about a session is not judged again
  (a session whose key the old policy denied too exists for another reason, e.g. a flow the data
  plane reported from its reply; an SPM that went down is on_spm_down's business). Sessions
  already blocked stay blocked; bypassed sessions (an SPM judged them clean) keep their bypass
  unless the ACL now denies them.

What a rematch does not change: NAT bindings (a masqueraded or forwarded flow keeps its
translation, even if the new policy would translate it otherwise) and idle timeouts.

An IPv6 session is judged the same way by what the CPM classified it with: the ACL's IPv6
rules (`controller.acl6`, first match over the rules as `ipv6_acl` orders them), blocked when the
new policy denies its opening packet and the old one did not; and the IDS rules' IPv6 headers
(`controller.ids6`), re-steered as above when its class or the class's chain changed.
"""

from __future__ import annotations

import dataclasses
import difflib
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from controller import acl6
from controller.hsm.compile import CompiledTables
from controller.hsm.linear import Classification, LinearClassifier
from controller.hsm.lookup import TableState, Walker
from controller.hsm.rules import AclAction, AclRule, IdsRule
from controller.hsm.update import flip_entry
from controller.ids6 import Ids6Classifier
from controller.policy import Policy, SpmSpec
from controller.session_encoding import FlowKey
from controller.session_model import BLOCKED, BYPASSED, Session
from controller.spm_pool import SpmPool
from opengate import p4constants as pc
from opengate.entries import TableEntry
from opengate.fields import Packet

Classify = Callable[[Packet], Classification]
# pool name, flow -> an SPM of the pool that is up, or None
Choose = Callable[[str, FlowKey], SpmSpec | None]
# pool name -> the (port, MAC) of each of its SPMs that is up
LiveMembers = Callable[[str], set[tuple[int, int]]]
# old policy, new policy -> the rules added, removed or moved (None: too many to filter by)
ChangedRules = Callable[[Policy, Policy], list[AclRule | IdsRule] | None]

# A rule's P4 action (what classification gives) -> its verdict.
ACTIONS = {action.p4_action: action for action in AclAction}
# After a policy apply, reports received for this long may still carry the old policy's
# verdicts (packets classified before the flip, digests on their way): their sessions are held
# to the new policy before their entries are written.
APPLY_SETTLE = 0.5
# More changed rules than this: each session is classified rather than checked against them.
DELTA_LIMIT = 256
OUTCOMES = ("denied", "reclassified", "resteered", "inspected", "uninspected", "no_spm_blocked")
# A hold of open sessions to an applied policy runs on the CPM's dispatcher in turns of at most
# this many sessions and, after the first, about this long (HoldJob.turn); the rest waits behind
# the events queued meanwhile, so digests, packet-ins and the API's views are served between two
# turns. The first turn (in the apply itself) is bounded by sessions alone: it also builds the
# tables' indexes, and an apply's answer is whole for up to that many sessions, however busy the
# machine.
TURN_SESSIONS = 2048
TURN_SECONDS = 0.02


@dataclass(frozen=True, slots=True)
class Change:
    """What a session becomes under the new policy."""

    session: Session
    outcome: str  # one of OUTCOMES
    class_id: int
    spm_port: int
    spm_mac: int
    block: bool


# The walks of the last compiled tables asked for (the dispatcher's thread alone asks).
_walkers: list[tuple[CompiledTables, Classify]] = []


def classifier(policy: Policy, compiled: CompiledTables | None) -> Classify:
    """How the new policy classifies an opening packet: a walk of the classification tables the
    NPMs hold for its rules (compiled by this apply, or by an earlier one with the same rules),
    or, where this controller has not compiled them (after a restart), first-match linear
    search over its rules, which the tables agree with (slower: every rule per session)."""
    if compiled is not None:
        for seen, classify in _walkers:
            if seen is compiled:
                return classify
        classify = tables_classifier(compiled.entries, compiled.version)
        # A walk builds each table's index at its first lookup: the new tables' walk is the next
        # apply's old one, so the last two are kept.
        _walkers[:] = [*_walkers[-1:], (compiled, classify)]
        return classify
    return LinearClassifier(
        [spec.rule for spec in policy.acl_rules], list(policy.ids_rules)
    ).classify


def tables_classifier(entries: Iterable[TableEntry], active: int) -> Classify:
    """How a switch classifies with the classification entries read back from it (both banks)
    and its active bank: what the policy it last ran did, whatever its files say now."""
    return Walker(TableState((*entries, flip_entry(active)))).classify


def acl_verdict(policy: Policy, result: Classification) -> AclAction:
    if result.acl_rule < 0:
        return policy.acl_default
    return ACTIONS[result.acl_action or ""]


def judge(
    sessions: Iterable[Session],
    old: tuple[Policy, Classify],
    new: tuple[Policy, Classify],
    live_members: LiveMembers,
    choose: Choose,
    changed: ChangedRules | None = None,
) -> Iterator[Change | None]:
    """The sessions that the new policy (with how it classifies) treats otherwise than the old
    one did, and how (nothing is changed here): for each session taken from `sessions`, its
    Change or None (it stays as it is), so that a caller can stop between two sessions and go
    on later (HoldJob). Nothing at all when nothing a session depends on changed (the same
    tables and chains). `changed`: how the changed rules are found (changed_rules by
    default)."""
    (old_policy, old_classify), (policy, classify) = old, new
    # Whether anything but the rules changed: the default verdict, the classes' chains.
    same_default = old_policy.acl_default == policy.acl_default
    default_denies = (
        policy.acl_default is AclAction.DENY and old_policy.acl_default is not AclAction.DENY
    )
    unchanged_rest = same_default and _chains(old_policy) == _chains(policy)
    # The same tables (one classifier for both): a packet classifies alike under both, so only
    # the rest can have changed; if it did not, nothing did. (IPv6: the same rules, the same
    # default.)
    same_tables = old_classify is classify
    same6 = same_default and old_policy.acl6 == policy.acl6
    same_ids6 = old_policy.ids6_rules == policy.ids6_rules
    if same_tables and unchanged_rest and same6 and same_ids6:
        return
    # A packet that no added, removed or moved rule matches keeps its first match (the rules it
    # matches keep their order), so its verdict and class are the old ones.
    delta = None if same_tables else (changed or changed_rules)(old_policy, policy)

    def one(session: Session) -> Change | None:
        if session.state == BLOCKED:
            return None
        if session.v6:
            if not same6 and _denied6(old_policy, policy, session):
                return Change(session, "denied", session.class_id, 0, 0, block=True)
            if session.nat_kind == pc.NAT_64:
                return None  # not inspected: nothing to steer
            if session.state == BYPASSED or (same_ids6 and unchanged_rest):
                return None
            class_before = classify6(old_policy, session.key)
            class_after = classify6(policy, session.key)
            if (class_before, _chain(old_policy, class_before)) == (
                class_after,
                _chain(policy, class_after),
            ):
                return None
            return _steering(session, policy, class_after, live_members, choose)
        src, dst, proto, sport, dport = session.key
        packet = Packet(src, dst, sport, dport, proto)
        if same_tables:
            # The tables its first packet met: its class is the one it has, and its verdict
            # changes only with the default, for a packet that no rule matched (its rule is
            # RULE_NONE; so is one of a session adopted from a switch: classified to know).
            class_before = class_after = session.class_id
            denied = False
            if not same_default and session.acl_rule == pc.RULE_NONE:
                denied = classify(packet).acl_rule < 0 and default_denies
        else:
            untouched = delta is not None and not any(rule.matches(packet) for rule in delta)
            if untouched and unchanged_rest:
                return None
            after = classify(packet)
            before = after if untouched else old_classify(packet)
            denied = (
                acl_verdict(policy, after) is AclAction.DENY
                and acl_verdict(old_policy, before) is not AclAction.DENY
            )
            class_before, class_after = before.ids_class, after.ids_class
        if denied:
            return Change(session, "denied", session.class_id, 0, 0, block=True)
        if session.state == BYPASSED:
            return None
        if (class_before, _chain(old_policy, class_before)) == (
            class_after,
            _chain(policy, class_after),
        ):
            return None
        return _steering(session, policy, class_after, live_members, choose)

    for session in sessions:
        yield one(session)


# The IPv6 IDS classifiers of the last policies asked for (the dispatcher's thread alone asks).
_classifiers6: list[tuple[Policy, Ids6Classifier]] = []


def classify6(policy: Policy, key: FlowKey) -> int:
    """The IDS class the policy gives an IPv6 flow's opening packet (controller.ids6)."""
    found = [c for seen, c in _classifiers6 if seen is policy]
    if found:
        classifier6 = found[0]
    else:
        classifier6 = Ids6Classifier(policy.ids6_rules)
        _classifiers6[:] = [*_classifiers6[-1:], (policy, classifier6)]
    rule = classifier6.classify(key)
    return 0 if rule is None else rule.class_id


def _denied6(old: Policy, new: Policy, session: Session) -> bool:
    """Whether the new policy's IPv6 rules deny the session's opening packet and the old ones
    did not (an echo session opens with a request)."""
    src, dst, proto, sport, dport = session.key
    icmp_type = pc.ICMPV6_ECHO_REQUEST if proto == pc.IP_PROTO_ICMPV6 else 0
    packet = acl6.Packet6(src, dst, proto, sport, dport, icmp_type)
    after, _ = acl6.first_match(new.acl6, packet, new.acl_default)
    if after is not AclAction.DENY:
        return False
    before, _ = acl6.first_match(old.acl6, packet, old.acl_default)
    return before is not AclAction.DENY


def changed_rules(old: Policy, new: Policy) -> list[AclRule | IdsRule] | None:
    """The ACL and IDS rules of either policy outside the runs of rules both have in the same
    order (rules compared without where they came from; an IDS rule's class counts), or None
    when there are more than DELTA_LIMIT: then checking each session against them would cost
    more than classifying it."""
    out: list[AclRule | IdsRule] = []
    pairs: tuple[tuple[Sequence[AclRule | IdsRule], Sequence[AclRule | IdsRule]], ...] = (
        ([s.rule for s in old.acl_rules], [s.rule for s in new.acl_rules]),
        (old.ids_rules, new.ids_rules),
    )
    for before, after in pairs:
        if before == after:
            continue
        matcher = difflib.SequenceMatcher(
            None, [_bare(r) for r in before], [_bare(r) for r in after], autojunk=False
        )
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag != "equal":
                out.extend(before[i1:i2])
                out.extend(after[j1:j2])
        if len(out) > DELTA_LIMIT:
            return None
    return out


def _bare(rule: AclRule | IdsRule) -> AclRule | IdsRule:
    if isinstance(rule, IdsRule):
        return dataclasses.replace(rule, origin=None, rule_id=0)
    return dataclasses.replace(rule, origin=None)


def _chains(policy: Policy) -> dict[int, tuple[object, ...] | None]:
    return {spec.class_id: _chain(policy, spec.class_id) for spec in policy.classes}


def _chain(policy: Policy, class_id: int) -> tuple[object, ...] | None:
    """What steering a class's flows depends on: its chain, the chain's pool and the pool's SPMs
    (None: the class is not inspected)."""
    spec = policy.class_by_id(class_id)
    if spec is None or spec.chain is None:
        return None
    chain = policy.chain(spec.chain)
    pool = policy.pool(chain.pool)
    spms = tuple(
        (s.name, s.port, s.mac) for name in pool.spms for s in policy.spms if s.name == name
    )
    return (chain.on_failure, pool.name, pool.fail_policy, spms)


def _steering(
    session: Session,
    policy: Policy,
    class_id: int,
    live_members: LiveMembers,
    choose: Choose,
) -> Change | None:
    current = (session.spm_port, session.spm_mac)
    spec = policy.class_by_id(class_id)
    if spec is None or spec.chain is None:
        target: tuple[int, int] | None = (0, 0)  # no inspection for this class
    else:
        chain = policy.chain(spec.chain)
        pool = policy.pool(chain.pool)
        if current in live_members(pool.name):
            target = current
        else:
            chosen = choose(pool.name, session.key)
            if chosen is not None:
                target = (chosen.port, chosen.mac)
            elif chain.on_failure == "closed" or pool.fail_policy == "fail_closed":
                target = None  # no SPM of the pool is up and the class must not pass
            else:
                target = (0, 0)
    if target is None:
        return Change(session, "no_spm_blocked", class_id, 0, 0, block=True)
    if target == current and class_id == session.class_id:
        return None
    if target == current:
        outcome = "reclassified"
    elif target == (0, 0):
        outcome = "uninspected"
    elif current == (0, 0):
        outcome = "inspected"
    else:
        outcome = "resteered"
    return Change(session, outcome, class_id, target[0], target[1], block=False)


class HoldJob:
    """One hold of sessions to an applied policy, in progress: `step` judges the next sessions
    and changes those the policy changed; a later step goes on where the last one stopped. The
    sessions are the ones open at the apply; `alive` says whether one still is (one that ended
    since is skipped; None: all are)."""

    def __init__(
        self,
        hold: PolicyHold,
        sessions: Sequence[Session],
        old: tuple[Policy, Classify],
        new: tuple[Policy, Classify],
        alive: Callable[[Session], bool] | None = None,
    ) -> None:
        self.hold = hold
        self.examined = 0
        self.outcome = dict.fromkeys(OUTCOMES, 0)
        self.done = False
        self._sessions = sessions
        self._alive = alive

        def live(pool: str) -> set[tuple[int, int]]:
            return {(spec.port, spec.mac) for spec, _ in hold.spms.live_members(pool)}

        self._judged = judge(
            self._stream(), old, new, live, hold.spms.choose, hold.changed_rules_of
        )

    @property
    def remaining(self) -> int:
        return 0 if self.done else len(self._sessions) - self.examined

    def _stream(self) -> Iterator[Session]:
        for session in self._sessions:
            self.examined += 1
            if self._alive is None or self._alive(session):
                yield session

    def turn(self, first: bool = False) -> list[Session]:
        """One turn on the dispatcher (TURN_SESSIONS, TURN_SECONDS): step's changed sessions."""
        return self.step(TURN_SESSIONS, None if first else time.perf_counter() + TURN_SECONDS)

    def step(self, sessions: int | None = None, deadline: float | None = None) -> list[Session]:
        """Judge about `sessions` more sessions, or until time.perf_counter() passes `deadline`
        (None and None: all the rest); change those the policy changed (in memory: the caller
        writes their entries) and return them."""
        changed: list[Session] = []
        stop_at = None if sessions is None else self.examined + sessions
        for change in self._judged:
            if change is not None:
                session = change.session
                if change.block:
                    session.state = BLOCKED
                else:
                    session.class_id = change.class_id
                    session.spm_port, session.spm_mac = change.spm_port, change.spm_mac
                self.outcome[change.outcome] += 1
                self.hold.counts[change.outcome] += 1
                changed.append(session)
            if (stop_at is not None and self.examined >= stop_at) or (
                deadline is not None and time.perf_counter() >= deadline
            ):
                return changed
        self.done = True
        return changed


class PolicyHold:
    """Holds sessions to the policies applied (changing them in memory; the caller writes the
    entries), counts the outcomes into `counts`, and remembers the last apply, so that sessions
    from reports received within APPLY_SETTLE seconds of it are held to it too."""

    def __init__(self, spms: SpmPool, counts: dict[str, int]) -> None:
        self.spms = spms
        self.counts = counts
        self._last: tuple[tuple[Policy, Classify], tuple[Policy, Classify], float] | None = None
        # the last apply's changed rules, found once for all its holds
        self._delta: tuple[Policy, Policy, list[AclRule | IdsRule] | None] | None = None

    def applied(
        self,
        sessions: Sequence[Session],
        old: tuple[Policy, Classify],
        new: tuple[Policy, Classify],
        alive: Callable[[Session], bool] | None = None,
    ) -> HoldJob:
        """`new` was applied after `old`: the hold of `sessions` to it, to be stepped through
        (HoldJob.step)."""
        self._last = (old, new, time.perf_counter() + APPLY_SETTLE)
        return HoldJob(self, sessions, old, new, alive)

    def settling(self, received_at: float) -> bool:
        """Whether a report received then (time.perf_counter()) may carry a verdict of the
        policy before the last apply (the NPM classified its packet before the flip)."""
        return self._last is not None and received_at <= self._last[2]

    def again(self, sessions: Sequence[Session]) -> tuple[dict[str, int], list[Session]]:
        """Hold new sessions to the last apply, all at once."""
        if self._last is None or not sessions:
            return dict.fromkeys(OUTCOMES, 0), []
        job = HoldJob(self, sessions, self._last[0], self._last[1])
        changed = job.step()
        return job.outcome, changed

    def changed_rules_of(self, old: Policy, new: Policy) -> list[AclRule | IdsRule] | None:
        if self._delta is None or self._delta[0] is not old or self._delta[1] is not new:
            self._delta = (old, new, changed_rules(old, new))
        return self._delta[2]
