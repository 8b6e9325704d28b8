"""How TCP sessions end: FIN in both directions, or an RST, then `sessions.closing_linger`.

After an RST the segments still in flight reach the peer, which answers each with another RST;
the linger lets them pass, as a conntrack firewall keeps a reset connection (removing the session
at the first RST dropped them). The first report counts: later FINs and RSTs do not push the end
back. A blocked session is not ended this way (it stays until idle).

FIN/RST reports of flows the CPM does not know yet (a short flow the data plane set up and closed
before its request digest was handled) are kept a few seconds and replayed when the session is
made, so that nothing stays until its idle timeout.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable

from controller.session_encoding import FlowKey
from controller.session_model import ACTIVE, BLOCKED, CLOSING, FIN_ORIGINAL, FIN_REPLY, Session
from opengate import p4constants as pc

EARLY_CLOSES_KEPT = 65_536  # FIN/RST reports of flows not known yet, at most...
EARLY_CLOSE_SECONDS = 10.0  # ...and for this long
FIN_BOTH = FIN_ORIGINAL | FIN_REPLY

Close = tuple[str, FlowKey, int]  # (npm, the flow's key as reported, TCP flags)


def close_reason(session: Session) -> str:
    """Why a session that reached its end is removed: "fin" (both ways), else "rst"."""
    return "fin" if session.fins == FIN_BOTH else "rst"


class SessionCloses:
    """The sessions waiting for the end of their linger, and the early reports."""

    def __init__(self) -> None:
        self.closing: dict[int, Session] = {}
        self._early: OrderedDict[tuple[str, FlowKey], tuple[int, float]] = OrderedDict()

    def apply(
        self,
        closes: Iterable[Close],
        find: Callable[[str, FlowKey], Session | None],
        linger: float,
        now: float,
        remember: bool = False,
    ) -> None:
        """Date the end of the sessions these reports close; with `remember`, keep the
        reports of flows `find` does not know."""
        for npm, key, flags in closes:
            session = find(npm, key)
            if session is None:
                if remember and flags & (pc.TCP_FLAG_FIN | pc.TCP_FLAG_RST):
                    self._remember(npm, key, flags, now)
                continue
            if session.state == BLOCKED:
                continue
            if flags & pc.TCP_FLAG_FIN:
                session.fins |= FIN_ORIGINAL if key == session.key else FIN_REPLY
            if session.close_at is None and (flags & pc.TCP_FLAG_RST or session.fins == FIN_BOTH):
                session.close_at = now + linger
                if session.state == ACTIVE:
                    session.state = CLOSING
                self.closing[session.id] = session

    def due(self, now: float) -> list[Session]:
        return [s for s in self.closing.values() if s.close_at is not None and s.close_at <= now]

    def forget(self, session: Session) -> None:
        self.closing.pop(session.id, None)

    def replay(self, created: Iterable[Session], now: float) -> list[Close]:
        """The reports kept for these new sessions' keys (taken out)."""
        if not self._early:
            return []
        closes: list[Close] = []
        for session in created:
            for key in (session.key, session.reply):
                early = self._early.pop((session.npm, key), None)
                if early is not None and now - early[1] <= EARLY_CLOSE_SECONDS:
                    closes.append((session.npm, key, early[0]))
        return closes

    def _remember(self, npm: str, key: FlowKey, flags: int, now: float) -> None:
        early = self._early
        previous = early.pop((npm, key), None)
        early[(npm, key)] = ((previous[0] if previous else 0) | flags, now)
        while len(early) > EARLY_CLOSES_KEPT:
            early.popitem(last=False)
        while early:
            _, (_, seen) = next(iter(early.items()))
            if now - seen <= EARLY_CLOSE_SECONDS:
                break
            early.popitem(last=False)
