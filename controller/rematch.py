"""Existing sessions against a newly applied policy ("rematch").

A session keeps the verdict its first packet got: its exact entries (or its data-plane slot)
carry every later packet past the ACL, the classification and the SPM choice. Without a rematch,
a policy that denies a flow, or puts its class under inspection, would reach only new flows: a
long-lived connection opened under the old policy would stay permitted, or uninspected, for as
long as it lasts. So when a policy is applied, every session's original key is classified again
against the new rules, exactly as the data plane classifies an opening packet:

- the new ACL verdict is deny: the session is blocked (its entries drop both directions until
  they idle out; blocking, unlike deleting, also stops a flow its slot alone carries);
- its IDS class changed, or the SPM it is pinned to is not a live member of its class's pool any
  more: it is re-steered (an SPM of the pool chosen as for a moved flow), made uninspected (the
  class has no chain), or, with no SPM of the pool up, blocked if the chain or pool fails closed
  and uninspected if it fails open;
- otherwise it is left alone. Sessions already blocked stay blocked; bypassed sessions (an SPM
  judged them clean) keep their bypass unless the ACL now denies them.

What a rematch does not change: NAT bindings (a masqueraded or forwarded flow keeps its
translation, even if the new policy would translate it otherwise) and idle timeouts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from controller.hsm.compile import CompiledTables
from controller.hsm.linear import Classification, LinearClassifier
from controller.hsm.lookup import TableState, Walker
from controller.hsm.rules import AclAction
from controller.hsm.update import flip_entry
from controller.policy import Policy, SpmSpec
from controller.session_encoding import FlowKey
from controller.session_model import BLOCKED, BYPASSED, Session
from opengate.fields import Packet

Classify = Callable[[Packet], Classification]
# pool name, flow -> an SPM of the pool that is up, or None
Choose = Callable[[str, FlowKey], SpmSpec | None]
# pool name -> the (port, MAC) of each of its SPMs that is up
LiveMembers = Callable[[str], set[tuple[int, int]]]

OUTCOMES = ("denied", "reclassified", "resteered", "inspected", "uninspected", "no_spm_blocked")


@dataclass(frozen=True, slots=True)
class Change:
    """What a session becomes under the new policy."""

    session: Session
    outcome: str  # one of OUTCOMES
    class_id: int
    spm_port: int
    spm_mac: int
    block: bool


def classifier(policy: Policy, compiled: CompiledTables | None) -> Classify:
    """How the new policy classifies an opening packet: a walk of the classification tables the
    NPMs hold for its rules (compiled by this apply, or by an earlier one with the same rules),
    or, where this controller has not compiled them (after a restart), first-match linear
    search over its rules, which the tables agree with (slower: every rule per session)."""
    if compiled is not None:
        # The tables of one bank, and the flip that makes it the one packets read.
        return Walker(TableState((*compiled.entries, flip_entry(compiled.version)))).classify
    return LinearClassifier(
        [spec.rule for spec in policy.acl_rules], list(policy.ids_rules)
    ).classify


def acl_verdict(policy: Policy, result: Classification) -> AclAction:
    if result.acl_rule < 0:
        return policy.acl_default
    return policy.acl_rules[result.acl_rule].rule.action


def rematch(
    sessions: Iterable[Session],
    policy: Policy,
    classify: Classify,
    live_members: LiveMembers,
    choose: Choose,
) -> list[Change]:
    """The sessions that the new policy treats otherwise, and how (nothing is changed here)."""
    changes: list[Change] = []
    for session in sessions:
        if session.state == BLOCKED:
            continue
        src, dst, proto, sport, dport = session.key
        result = classify(Packet(src, dst, sport, dport, proto))
        if acl_verdict(policy, result) is AclAction.DENY:
            changes.append(Change(session, "denied", session.class_id, 0, 0, block=True))
            continue
        if session.state == BYPASSED:
            continue
        change = _steering(session, policy, result.ids_class, live_members, choose)
        if change is not None:
            changes.append(change)
    return changes


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
