"""Tunnels in charon over VICI: load, bring up, rekey, read SAs and counters, explain failures.

Every call opens its own VICI connection (`Charon.session`), so the monitor thread and the
daemon's requests never share one. `diagnose` reads charon's log lines about one IKE SA and says
what went wrong in terms of the policy (the pre-shared key, the proposals, the subnets, the peer's
reachability); the initiator learns a wrong PSK or a proposal mismatch from the peer's notify,
the responder from its own checks, and both are recognised.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vici.exception import CommandException, SessionException

from opengate.ipsec import TunnelSpec, vici_connection, vici_key, vici_secret
from spm.ipsec.charon import Charon

LOG = logging.getLogger(__name__)


class IpsecError(Exception):
    """A tunnel could not be loaded or brought up; the message says why, for a person."""


# -- explaining failures ----------------------------------------------------------------------

_DIAGNOSES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"unable to (add SAD entry|install .*(IPsec SA|IPsec policies))"),
        "the SA was negotiated but could not be installed (a kernel without ESP or the cipher: "
        "use esp: userspace; with libipsec, no address of the local subnet on the host)",
    ),
    (
        re.compile(r"AUTHENTICATION_FAILED|MAC mismatched|peer authentication failed"),
        "authentication failed: the two gateways' pre-shared keys (or certificates) differ",
    ),
    (
        re.compile(r"no shared key found"),
        "authentication failed: no pre-shared key for this peer",
    ),
    (
        re.compile(r"TS_UNACCEPTABLE|traffic selectors .* unacceptable"),
        "traffic selectors refused: the local/remote subnets differ from the peer's (or the "
        "peer could not install them)",
    ),
    (
        re.compile(
            r"NO_PROPOSAL_CHOSEN notify, no CHILD_SA built|no acceptable proposal found.*"
            r"CHILD|no acceptable proposal found$"
        ),
        "no common ESP proposal: the tunnel's esp proposals differ from the peer's",
    ),
    (
        re.compile(r"no IKE config found"),
        "the peer has no tunnel for this address pair, or none with a common IKE proposal",
    ),
    (
        re.compile(r"NO_PROPOSAL_CHOSEN|no acceptable proposal found|proposals unacceptable"),
        "no common IKE proposal: the tunnel's ike proposals differ from the peer's",
    ),
    (
        re.compile(r"giving up after \d+ retransmits|peer not responding"),
        "the peer does not answer IKE (UDP 500): unreachable, or no IPsec gateway there",
    ),
)
_ADDRESS = re.compile(r"\b(\d+\.\d+\.\d+\.\d+)\b")
_PROPOSALS = re.compile(r"(received|configured) proposals: (.*)")


def diagnose(lines: Iterable[str]) -> str | None:
    """What went wrong, from charon's log lines about one IKE SA; None if nothing did."""
    lines = list(lines)
    for pattern, message in _DIAGNOSES:
        if any(pattern.search(line) for line in lines):
            if "proposal" in message:
                seen = {m.group(1): m.group(2) for m in map(_PROPOSALS.search, lines) if m}
                details = "; ".join(f"{k}: {v}" for k, v in sorted(seen.items()))
                return f"{message} ({details})" if details else message
            return message
    return None


# -- what charon says about SAs ----------------------------------------------------------------


def _text(value: Any, default: str = "") -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if value is None:
        return default
    return str(value)


def _int(value: Any) -> int:
    try:
        return int(_text(value, "0"))
    except ValueError:
        return 0


def _list(value: Any) -> list[str]:
    if isinstance(value, list):
        return [_text(v) for v in value]
    return [] if value is None else [_text(value)]


@dataclass(frozen=True, slots=True)
class ChildSa:
    name: str
    unique_id: int
    state: str  # INSTALLED, REKEYING, REKEYED, ...
    spi_in: str
    spi_out: str
    encryption: str
    dh_group: str
    bytes_in: int
    bytes_out: int
    packets_in: int
    packets_out: int
    installed_s: int
    rekey_in_s: int
    local_ts: tuple[str, ...]
    remote_ts: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unique_id": self.unique_id,
            "state": self.state,
            "spi_in": self.spi_in,
            "spi_out": self.spi_out,
            "encryption": self.encryption,
            "dh_group": self.dh_group,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "packets_in": self.packets_in,
            "packets_out": self.packets_out,
            "installed_s": self.installed_s,
            "rekey_in_s": self.rekey_in_s,
            "local_ts": list(self.local_ts),
            "remote_ts": list(self.remote_ts),
        }


@dataclass(frozen=True, slots=True)
class IkeSa:
    name: str
    unique_id: int
    state: str  # CONNECTING, ESTABLISHED, REKEYING, DELETING, ...
    local: str
    remote: str
    initiator: bool
    proposal: str
    established_s: int
    rekey_in_s: int
    children: tuple[ChildSa, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unique_id": self.unique_id,
            "state": self.state,
            "local": self.local,
            "remote": self.remote,
            "initiator": self.initiator,
            "proposal": self.proposal,
            "established_s": self.established_s,
            "rekey_in_s": self.rekey_in_s,
            "children": [c.as_dict() for c in self.children],
        }


def _child(data: Mapping[str, Any]) -> ChildSa:
    encryption = _text(data.get("encr-alg"))
    if data.get("encr-keysize"):
        encryption += f"-{_text(data.get('encr-keysize'))}"
    return ChildSa(
        name=_text(data.get("name")),
        unique_id=_int(data.get("uniqueid")),
        state=_text(data.get("state")),
        spi_in=_text(data.get("spi-in")),
        spi_out=_text(data.get("spi-out")),
        encryption=encryption,
        dh_group=_text(data.get("dh-group")),
        bytes_in=_int(data.get("bytes-in")),
        bytes_out=_int(data.get("bytes-out")),
        packets_in=_int(data.get("packets-in")),
        packets_out=_int(data.get("packets-out")),
        installed_s=_int(data.get("install-time")),
        rekey_in_s=_int(data.get("rekey-time")),
        local_ts=tuple(_list(data.get("local-ts"))),
        remote_ts=tuple(_list(data.get("remote-ts"))),
    )


def parse_sa(name: str, data: Mapping[str, Any]) -> IkeSa:
    """One entry of a VICI `list-sa` event."""
    parts = [_text(data.get("encr-alg"))]
    if data.get("encr-keysize"):
        parts[0] += f"-{_text(data.get('encr-keysize'))}"
    parts += [_text(data.get(k)) for k in ("integ-alg", "prf-alg", "dh-group") if data.get(k)]
    children = tuple(
        _child(child) for child in (data.get("child-sas") or {}).values() if isinstance(child, dict)
    )
    return IkeSa(
        name=name,
        unique_id=_int(data.get("uniqueid")),
        state=_text(data.get("state")),
        local=_text(data.get("local-host")),
        remote=_text(data.get("remote-host")),
        initiator=_text(data.get("initiator")) == "yes",
        proposal="/".join(p for p in parts if p),
        established_s=_int(data.get("established")),
        rekey_in_s=_int(data.get("rekey-time")),
        children=children,
    )


def _up(sa: IkeSa) -> bool:
    """The IKE SA is established with an installed CHILD SA: the tunnel carries traffic."""
    return sa.state == "ESTABLISHED" and any(c.state == "INSTALLED" for c in sa.children)


# -- the control -------------------------------------------------------------------------------


@dataclass(slots=True)
class _TunnelEvents:
    last_error: str | None = None
    error_at: float | None = None
    ups: int = 0
    downs: int = 0
    rekeys: int = 0
    lines: deque[str] = field(default_factory=lambda: deque(maxlen=60))


class IpsecControl:
    """Tunnels in one charon. `watch()` starts a thread that follows charon's events."""

    def __init__(self, charon: Charon) -> None:
        self.charon = charon
        self.tunnels: dict[str, dict[str, Any]] = {}  # name -> summary (no secrets)
        self._peers: dict[str, list[str]] = {}
        self._events: dict[str, _TunnelEvents] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ike_names: dict[str, str] = {}  # IKE SA unique id -> tunnel, for unnamed lines
        self.on_change: Callable[[str], None] | None = None

    # -- configuration ------------------------------------------------------------------------

    def load(self, tunnel: TunnelSpec, local_address: ipaddress.IPv4Address) -> None:
        """Load (or replace) a tunnel's secret/credentials and connection."""
        self.load_messages(
            tunnel.name,
            vici_connection(tunnel, local_address),
            vici_secret(tunnel, local_address),
            tunnel.summary(),
            vici_key(tunnel),
        )

    def load_messages(
        self,
        name: str,
        connection: Mapping[str, Any],
        secret: Mapping[str, Any] | None,
        summary: Mapping[str, Any] | None = None,
        key: Mapping[str, Any] | None = None,
    ) -> None:
        """Load a tunnel from its VICI messages (as the CPM hands them to an IPsec SPM)."""
        conn = connection.get(name)
        if not isinstance(conn, Mapping):
            raise IpsecError(f"tunnel {name}: the connection message has no {name!r}")
        try:
            with self.charon.session() as session:
                if key is not None:  # a certificate tunnel's private key
                    session.load_key(dict(key))
                if secret is not None:
                    session.load_shared(dict(secret))
                session.load_conn(dict(connection))
        except (CommandException, SessionException, OSError) as error:
            raise IpsecError(f"tunnel {name}: charon refused it: {error}") from None
        peers = [str(a) for a in conn.get("remote_addrs", [])]
        with self._lock:
            self.tunnels[name] = dict(summary or {"name": name, "peer": ",".join(peers)})
            self._peers[name] = peers
            self._events.setdefault(name, _TunnelEvents())
        LOG.info("ipsec: loaded tunnel %s (peer %s)", name, ",".join(peers))

    def unload(self, name: str) -> None:
        """Forget the tunnel's connection and secret, then close its SAs (telling the peer): in
        this order, a peer that starts again at once finds no stale configuration here."""
        try:
            with self.charon.session() as session:
                session.unload_conn({"name": name})
                with contextlib.suppress(CommandException):
                    session.unload_shared({"id": f"psk-{name}"})
            self.close_sas(name)
        except (CommandException, SessionException, OSError) as error:
            LOG.info("ipsec: unloading %s: %s", name, error)
        with self._lock:
            self.tunnels.pop(name, None)
            self._peers.pop(name, None)

    # -- actions -------------------------------------------------------------------------------

    def initiate(self, name: str, timeout: float = 20.0) -> None:
        """Bring a tunnel's CHILD SA up and wait for it; IpsecError says why it failed."""
        if self._await_under_way(name, timeout):
            return
        lines: list[str] = []
        message = {"child": name, "ike": name, "timeout": str(int(timeout * 1000)), "loglevel": "2"}
        try:
            with self.charon.session(timeout=timeout + 10) as session:
                for event in session.initiate(message):
                    lines.append(_text(event.get("msg")))
        except CommandException as error:
            if self.established(name):  # brought up meanwhile (start_action, or the peer)
                return
            reason = diagnose(lines) or self.last_error(name) or str(error)
            self._record_error(name, reason)
            raise IpsecError(f"tunnel {name}: {reason}") from None
        except (SessionException, OSError) as error:
            with contextlib.suppress(SessionException, OSError):
                if self.established(name):  # up, though the call was not answered
                    return
            # charon may be too slow to answer the call (a loaded machine) while its log has
            # already said why the tunnel failed
            known = diagnose(lines) or self.last_error(name)
            if known:
                raise IpsecError(
                    f"tunnel {name}: {known} (charon did not answer in time)"
                ) from None
            raise IpsecError(f"tunnel {name}: no answer from charon: {error}") from None

    def _await_under_way(self, name: str, timeout: float) -> bool:
        """True once the tunnel is up. An IKE SA of the tunnel already being set up (its
        start_action at load, a DPD or close action, or the peer) is waited for rather than
        initiated again: a second initiate queues a duplicate CHILD_CREATE, which strongSwan 5.9
        drops without ever answering the call (the worker it holds even delays SIGTERM). False
        when nothing of the tunnel is under way (no SA, or an IKE SA up whose CHILD SA failed):
        the caller initiates. IpsecError when the attempt under way failed (from the event
        thread's diagnosis) or did not finish, or charon does not answer."""
        started = time.time()
        deadline = time.monotonic() + timeout
        while True:
            try:
                mine = [sa for sa in self.sas() if sa.name == name]
            except (SessionException, OSError) as error:
                raise IpsecError(f"tunnel {name}: no answer from charon: {error}") from None
            if any(_up(sa) for sa in mine):
                return True
            with self._lock:
                events = self._events.get(name)
                failed = events.last_error if events and (events.error_at or 0) >= started else None
            if failed:
                raise IpsecError(f"tunnel {name}: {failed}")
            # an IKE SA up without any CHILD SA is settled (its CHILD failed): initiate one
            if not any(sa.state != "ESTABLISHED" or sa.children for sa in mine):
                return False
            if time.monotonic() > deadline:
                with self._lock:
                    recent = list(events.lines) if events else []
                reason = diagnose(recent) or f"still {mine[0].state.lower()} after {timeout:.0f} s"
                self._record_error(name, reason)
                raise IpsecError(f"tunnel {name}: {reason}")
            time.sleep(0.1)

    def initiate_async(self, name: str) -> None:
        """Ask charon to bring a tunnel up without waiting (errors come as events)."""
        message = {"child": name, "ike": name, "timeout": "-1"}
        try:
            with self.charon.session() as session:
                for _ in session.initiate(message):
                    pass
        except (CommandException, SessionException, OSError) as error:
            LOG.info("ipsec: initiating %s: %s", name, error)

    def rekey(self, name: str, ike: bool = False) -> None:
        """Rekey the tunnel's CHILD SA (or its IKE SA), make-before-break."""
        try:
            with self.charon.session() as session:
                session.rekey({"ike" if ike else "child": name})
        except (CommandException, SessionException) as error:
            raise IpsecError(f"tunnel {name}: rekey refused: {error}") from None

    def close_sas(self, name: str) -> None:
        """Close the tunnel's IKE SA (and its CHILD SAs), telling the peer; none is fine."""
        try:
            with self.charon.session() as session:
                for _ in session.terminate({"ike": name, "timeout": "2000"}):
                    pass
        except (CommandException, SessionException, OSError) as error:
            LOG.debug("ipsec: closing %s: %s", name, error)

    def terminate(self, name: str) -> None:
        try:
            with self.charon.session() as session:
                for _ in session.terminate({"ike": name, "timeout": "5000"}):
                    pass
        except (CommandException, SessionException) as error:
            raise IpsecError(f"tunnel {name}: {error}") from None

    # -- state ---------------------------------------------------------------------------------

    def sas(self) -> list[IkeSa]:
        out: list[IkeSa] = []
        with self.charon.session() as session:
            for event in session.list_sas():
                for name, data in event.items():
                    if isinstance(data, dict):
                        out.append(parse_sa(_text(name), data))
        return out

    def established(self, name: str) -> bool:
        """An IKE SA of the tunnel is up with an installed CHILD SA."""
        return any(sa.name == name and _up(sa) for sa in self.sas())

    def last_error(self, name: str) -> str | None:
        with self._lock:
            events = self._events.get(name)
            return events.last_error if events else None

    def status(self) -> list[dict[str, Any]]:
        """One record per loaded tunnel: configuration, state, SAs, counters, last error."""
        try:
            sas = self.sas()
            reachable = True
        except (SessionException, OSError):
            sas, reachable = [], False
        out: list[dict[str, Any]] = []
        with self._lock:
            for name, summary in sorted(self.tunnels.items()):
                mine = [sa for sa in sas if sa.name == name]
                children = [c for sa in mine for c in sa.children]
                if any(c.state == "INSTALLED" for c in children):
                    state = "up"
                elif mine:
                    state = "connecting"
                else:
                    state = "down"
                events = self._events.get(name, _TunnelEvents())
                out.append(
                    {
                        **summary,
                        "state": state if reachable else "unknown",
                        "last_error": events.last_error,
                        "error_at": events.error_at,
                        "ups": events.ups,
                        "downs": events.downs,
                        "rekeys": events.rekeys,
                        "bytes_in": sum(c.bytes_in for c in children),
                        "bytes_out": sum(c.bytes_out for c in children),
                        "packets_in": sum(c.packets_in for c in children),
                        "packets_out": sum(c.packets_out for c in children),
                        "sas": [sa.as_dict() for sa in mine],
                    }
                )
        return out

    # -- the event thread ----------------------------------------------------------------------

    def watch(self) -> None:
        """Follow charon's log and up/down/rekey events in a thread; returns once registered."""
        registered = threading.Event()
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._follow, args=(registered,), name="ipsec-events", daemon=True
        )
        self._thread.start()
        if not registered.wait(10.0):
            raise IpsecError("could not follow charon's events over VICI")

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    def _follow(self, registered: threading.Event) -> None:
        kinds = ["log", "ike-updown", "child-updown", "child-rekey"]
        while not self._stop.is_set():
            try:
                with self.charon.session(timeout=None) as session:
                    stream = session.listen(kinds, timeout=0.2)
                    try:
                        for kind, message in stream:
                            registered.set()
                            if self._stop.is_set():
                                break
                            if kind is not None:
                                self._event(_text(kind), message)
                    finally:
                        with contextlib.suppress(Exception):
                            stream.close()  # unregisters while the socket is still open
            except (SessionException, OSError) as error:
                if self._stop.is_set():
                    return
                LOG.debug("ipsec: event stream broke (%s); reconnecting", error)
                registered.set()
                self._stop.wait(0.5)

    def _event(self, kind: str, message: Mapping[str, Any]) -> None:
        if kind == "log":
            self._log(message)
            return
        changed: list[str] = []
        with self._lock:
            for name, data in message.items():
                if not isinstance(data, dict):
                    continue
                events = self._events.setdefault(_text(name), _TunnelEvents())
                if kind == "child-rekey":
                    events.rekeys += 1
                elif kind == "child-updown":
                    if _text(message.get("up")) == "yes":
                        events.ups += 1
                        events.last_error = None
                        events.error_at = None
                    else:
                        events.downs += 1
                changed.append(_text(name))
        if self.on_change is not None:
            for name in changed:
                self.on_change(name)

    def _log(self, message: Mapping[str, Any]) -> None:
        level = _int(message.get("level"))
        if level > 2:
            return
        text = _text(message.get("msg"))
        unique = _text(message.get("ikesa-uniqueid"))
        name = _text(message.get("ikesa-name"))
        with self._lock:
            if not name or name not in self.tunnels:
                name = self._ike_names.get(unique, "")
            if not name:
                addresses = set(_ADDRESS.findall(text))
                for tunnel, peers in self._peers.items():
                    if addresses.intersection(peers):
                        name = tunnel
            if not name:
                return
            if unique:
                self._ike_names[unique] = name
            events = self._events.setdefault(name, _TunnelEvents())
            events.lines.append(text)
            recent = list(events.lines)[-20:]
        reason = diagnose([text]) and diagnose(recent)
        if reason is not None:
            self._record_error(name, reason)

    def _record_error(self, name: str, reason: str) -> None:
        with self._lock:
            events = self._events.setdefault(name, _TunnelEvents())
            new = events.last_error != reason
            events.last_error = reason
            events.error_at = time.time()
        if new:
            LOG.error("ipsec: tunnel %s: %s", name, reason)
            if self.on_change is not None:
                self.on_change(name)
