"""The CPM's REST API (FastAPI): status, sessions, SPMs, policy versions, and the endpoints the
SPM daemons call (load reports, alerts, bypass). Every request needs `Authorization: Bearer
TOKEN`, the OpenAPI schema and /metrics (Prometheus) included; nothing answers without it.

The schema is at /openapi.json, the browsable docs at /docs (both behind the token too).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn
from fastapi import Depends, FastAPI, Query, Request, Response
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ConfigDict, Field

from controller import events as ev
from controller.errors import RequestError
from controller.policy import load_policy, mac_text
from controller.runtime import Controller
from controller.spm_pool import ReportError, validate_report
from controller.web import Console
from opengate import p4constants as pc
from opengate.errors import ConfigError

LOG = logging.getLogger(__name__)

API = "/api/v1"
HANDLER_TIMEOUT = 120.0


class LoadReport(BaseModel):
    model_config = ConfigDict(extra="allow")
    ts: float | str | None = None
    cpu: float = Field(ge=0)
    queue_depth: int = Field(ge=0)
    queue_held: int = Field(default=0, ge=0)  # of queue_depth, read by the dispatcher
    queue_dropped: int = Field(default=0, ge=0)  # not queued (full or over a share)
    pps: float = Field(default=0, ge=0)
    bps: float = Field(default=0, ge=0)
    mem_bytes: int = Field(default=0, ge=0)
    workers: int = Field(default=1, ge=0)
    flows: int = Field(default=0, ge=0)


class Flow(BaseModel):
    proto: str | int
    src: str
    dst: str
    sport: int = Field(default=0, ge=0, le=65535)
    dport: int = Field(default=0, ge=0, le=65535)


class Alert(BaseModel):
    model_config = ConfigDict(extra="allow")
    ts: float | str | None = None
    sid: int | None = None
    gid: int | None = None
    rev: int | None = None
    msg: str = ""
    classtype: str | None = None
    action: str = "alert"
    flow: Flow | None = None
    community_id: str | None = None


class Bypass(BaseModel):
    flow: Flow
    community_id: str | None = None
    clean_bytes: int = Field(default=0, ge=0)


class PolicyRequest(BaseModel):
    path: str = Field(description="where the policy file is; files it names are read from there")
    text: str | None = Field(default=None, description="its content (read from `path` if absent)")
    source: str = "api"


def _ip(value: int) -> str:
    return str(ipaddress.IPv4Address(value))


def session_view(row: dict[str, Any]) -> dict[str, Any]:
    """A DB session row with addresses and MACs as text."""
    out = dict(row)
    for name in ("src", "dst", "r_src", "r_dst"):
        out[name] = _ip(row[name])
    out["nat_addr"] = _ip(row["nat_addr"]) if row["nat_kind"] else None
    out["nat"] = pc.NAT_NAMES.get(row["nat_kind"], str(row["nat_kind"]))
    out["spm_mac"] = mac_text(row["spm_mac"]) if row["spm_port"] else None
    created = row.get("created_at")
    out["created_at"] = created.isoformat() if created is not None else None
    return out


def create_app(controller: Controller, token: str, console: Console | None = None) -> FastAPI:
    """The API; with `console`, the web console too (under /console, its own log-in)."""
    if not token:
        raise ValueError("the API needs a token")
    expected = f"Bearer {token}".encode()
    app = FastAPI(
        title="OpenGate CPM",
        version="1",
        description="Control processing module of the OpenGate gateway. Every request needs "
        "`Authorization: Bearer TOKEN`.",
        dependencies=[Depends(HTTPBearer(auto_error=False))],
    )

    @app.middleware("http")
    async def authenticate(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        if console is not None and console.owns(request.url.path):
            return await console.authenticate(request, call_next)
        given = request.headers.get("authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            return JSONResponse(
                {"detail": "missing or wrong bearer token"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        return await call_next(request)

    @app.exception_handler(RequestError)
    async def request_error(_request: Request, error: RequestError) -> JSONResponse:
        return JSONResponse({"detail": error.message}, status_code=error.status)

    @app.exception_handler(ConfigError)
    async def config_error(_request: Request, error: ConfigError) -> JSONResponse:
        return JSONResponse(
            {"detail": str(error), "path": error.path, "line": error.line, "field": error.field},
            status_code=422,
        )

    def call(function: Callable[[], Any]) -> Any:
        """A read-only look at the controller's state: ahead of queued events."""
        return controller.bus.call_now(function, timeout=HANDLER_TIMEOUT)

    def publish(event: ev.Event) -> Any:
        results = controller.bus.publish(event).result(timeout=HANDLER_TIMEOUT)
        return results[0] if results else None

    if console is not None:
        console.mount(app, call, publish)

    def known_spm(name: str) -> None:
        policy = controller.policy
        if policy is None or policy.spm_by_name(name) is None:
            raise RequestError(404, f"no SPM named {name!r} in the policy")

    # -- views -------------------------------------------------------------------------------

    @app.get(f"{API}/status", summary="Controller, NPMs, sessions and SPMs at a glance")
    def status() -> dict[str, Any]:
        """Answers `uptime_seconds`, `election_id`, the running `policy` (version, name, sha256,
        path), `npms` (each NPM's address, role, sync state, tags, classifier bank, sessions),
        `sessions` (counts), `icmp` (what the gateway answered itself), `spms`,
        `events_pending`."""
        result: dict[str, Any] = call(controller.status)
        return result

    @app.get(f"{API}/sessions", summary="Installed sessions")
    def sessions(
        npm: str | None = None,
        limit: int = Query(100, ge=1, le=100_000),
        offset: int = Query(0, ge=0),
    ) -> dict[str, Any]:
        """Answers `total` (the sessions stored, of `npm` if given) and `sessions` (`limit` of
        them from `offset`, oldest first), each with `entries`: true when the switch holds its
        exact entries, false when only its data-plane slot, null when not in this controller's
        memory."""
        controller.db_writer.flush()  # what the switch holds, the DB has too
        rows = controller.db.sessions(npm=npm, limit=limit, offset=offset)
        manager = controller.sessions
        known = manager.sessions if manager is not None else {}
        views = []
        for row in rows:
            view = session_view(row)
            # Whether the switch holds the session's exact entries, or only its data-plane slot
            # (`data_plane_entries: on_demand`); None: not in this controller's memory.
            session = known.get(row["id"])
            view["entries"] = None if session is None else not session.slot_only
            views.append(view)
        return {"total": controller.db.session_count(npm), "sessions": views}

    @app.delete(f"{API}/sessions/{{session_id}}", summary="Remove a session (both directions)")
    def delete_session(session_id: int) -> dict[str, Any]:
        """Answers `{"deleted": ID}`; 404 when the controller holds no such session."""
        result: dict[str, Any] = publish(ev.SessionDeleteRequested(session_id, "api"))
        return result

    @app.post(f"{API}/sessions/{{session_id}}/block", summary="Block a session (the flow stops)")
    def block_session(session_id: int) -> dict[str, Any]:
        """Answers `{"blocked": ID}`; 404 when the controller holds no such session."""
        result: dict[str, Any] = publish(ev.SessionBlockRequested(session_id, "api"))
        return result

    @app.post(f"{API}/spms/{{name}}/drain", summary="Drain an SPM: weight 0, no new flows")
    def drain_spm(name: str) -> dict[str, Any]:
        """Answers `spm`, `drained`, `weight`; 404 when the policy has no SPM of that name."""
        result: dict[str, Any] = publish(ev.SpmDrainRequested(name, True))
        return result

    @app.post(f"{API}/spms/{{name}}/restore", summary="Restore a drained SPM")
    def restore_spm(name: str) -> dict[str, Any]:
        """Answers `spm`, `drained`, `weight`; 404 when the policy has no SPM of that name."""
        result: dict[str, Any] = publish(ev.SpmDrainRequested(name, False))
        return result

    @app.get(f"{API}/spms", summary="SPMs: status, weight, last load report")
    def spms() -> dict[str, Any]:
        """Answers `spms`: each SPM's state (status, weight, last load report), with
        `last_report_at` and `status_changed_at` from the database."""
        assert controller.spms is not None
        pool = controller.spms
        live: dict[str, Any] = call(lambda: {n: s.as_dict() for n, s in pool.states.items()})
        stored = {row["name"]: row for row in controller.db.spms()}
        for name, item in live.items():
            row = stored.get(name)
            item["last_report_at"] = row["last_report"] if row else None
            item["status_changed_at"] = row["changed_at"] if row else None
        return {"spms": live}

    @app.get(f"{API}/alerts", summary="Latest alerts from the SPMs")
    def alerts(limit: int = Query(100, ge=1, le=10_000)) -> dict[str, Any]:
        """Answers `alerts`: the latest `limit`, newest first (SPM, rule, action, flow, session)."""
        return {"alerts": controller.db.alerts(limit)}

    @app.get(f"{API}/hsm", summary="Classifier banks and compile statistics per NPM")
    def hsm() -> dict[str, Any]:
        """Answers, per NPM, `active_bank`, `entries` per bank, the compile `stats`,
        `lookups_per_packet`, `memory_accesses_per_packet` and each table's `fill`."""
        result: dict[str, Any] = call(controller.hsm_status)
        return result

    # -- policy ------------------------------------------------------------------------------

    @app.get(f"{API}/policy", summary="The running policy")
    def policy() -> dict[str, Any]:
        """Answers `version`, `summary` (what the policy holds, counted) and `text` (its file)."""
        running = controller.policy
        assert running is not None
        return {
            "version": controller.policy_version,
            "summary": running.summary(),
            "text": running.text,
        }

    @app.get(f"{API}/policy/versions", summary="Policy versions, newest first")
    def policy_versions(limit: int = Query(50, ge=1, le=1000)) -> dict[str, Any]:
        """Answers `versions`: version, name, sha256, status, source, error, created_at."""
        return {
            "versions": [
                {
                    "version": v.version,
                    "name": v.name,
                    "sha256": v.sha256,
                    "status": v.status,
                    "source": v.source,
                    "error": v.error,
                    "created_at": v.created_at.isoformat(),
                }
                for v in controller.db.policy_versions(limit)
            ]
        }

    @app.post(f"{API}/policy/validate", summary="Validate a policy without applying it")
    def policy_validate(request: PolicyRequest) -> dict[str, Any]:
        """Answers `valid` (true) and the policy's `summary`; an invalid policy gets 422 with
        `detail`, `path`, `line` and `field`."""
        return {"valid": True, "summary": load_policy(request.path, request.text).summary()}

    @app.post(f"{API}/policy/diff", summary="What applying a policy would write")
    def policy_diff(request: PolicyRequest) -> dict[str, Any]:
        """Nothing is written. Answers `running_sha256`, `new_sha256`, `changed`, `npms` (what
        each NPM would be written) and `text_diff` (a unified diff of the files); 422: invalid."""
        new = load_policy(request.path, request.text)
        result: dict[str, Any] = call(lambda: controller.diff_policy(new))
        return result

    @app.post(f"{API}/policy/apply", summary="Apply a policy: validate, write the difference")
    def policy_apply(request: PolicyRequest) -> dict[str, Any]:
        """Answers `version`, `sha256`, `npms` (what each NPM was written), `rematched` and
        `rematch_pending` (the open sessions held to the new policy); 422: invalid; 409: a
        switch refused it (the running policy is restored)."""
        new = load_policy(request.path, request.text)
        result: dict[str, Any] = publish(ev.PolicyApplyRequested(new, request.source))
        return result

    # -- SPM daemons -------------------------------------------------------------------------

    @app.post(f"{API}/spm/{{name}}/load", summary="An SPM's load report (every second)")
    def spm_load(name: str, report: LoadReport) -> dict[str, Any]:
        """Answers the SPM's `status` and selector `weight` after the report; 404: unknown
        SPM; 422: a report that does not validate."""
        known_spm(name)
        values = report.model_dump()
        try:
            validate_report(values)
        except ReportError as error:
            raise RequestError(422, str(error)) from None
        result: dict[str, Any] = publish(ev.SpmLoadReport(name, values))
        return result

    @app.post(f"{API}/spm/{{name}}/alerts", summary="An IPS/AV alert; drop/block blocks the flow")
    def spm_alert(name: str, alert: Alert) -> dict[str, Any]:
        """Stored; an action of drop, block, reject or sdrop blocks the flow's session (or
        blocks it once installed). Answers `alert` (its id), `session`, `blocked`; 404: unknown
        SPM."""
        known_spm(name)
        result: dict[str, Any] = publish(ev.AlertReceived(name, alert.model_dump()))
        return result

    @app.post(f"{API}/spm/{{name}}/bypass", summary="Offload a clean flow to the fast path")
    def spm_bypass(name: str, request: Bypass) -> dict[str, Any]:
        """Answers `session` and `bypassed`, and `pending` when the session is not known yet
        (bypassed once installed); 409: its class allows no bypass, or it is blocked; 404:
        unknown SPM."""
        known_spm(name)
        result: dict[str, Any] = publish(
            ev.BypassRequested(
                name, request.flow.model_dump(), request.community_id, request.clean_bytes
            )
        )
        return result

    @app.get(f"{API}/spm/{{name}}/config", summary="What an SPM needs from the CPM (its tags)")
    def spm_config(name: str) -> dict[str, Any]:
        """Answers `name` and `tags`: the next-hop tags it serves (two per NPM); 404: unknown
        SPM."""
        known_spm(name)
        tags = sorted({t for s in controller.states.values() for t in (s.tag_base, s.tag_base | 1)})
        return {"name": name, "tags": tags}

    # -- IPsec (controller.ipsec) -------------------------------------------------------------

    @app.get(f"{API}/counters", summary="What each NPM counted: drops, flow events, ports")
    def counters() -> dict[str, Any]:
        """Read from the NPMs over P4Runtime when asked. Answers `npms`: each NPM's `drops` (by
        reason: packets, bytes), `flow_events` (by event: count) and `ports` (rx/tx packets,
        bytes)."""
        # P4Runtime reads, not the controller's state: made here, not on the event thread
        npms = controller.npm_counters()
        return {"npms": {name: c.view() for name, c in sorted(npms.items())}}

    @app.get(f"{API}/ipsec", summary="IPsec tunnels: configuration, active SPM, SAs, counters")
    def ipsec() -> dict[str, Any]:
        """Answers `enabled`, the `address` and `pool`, `spms` (up, active) and `tunnels` (state,
        active SPM, bytes, packets, rekeys, last error, SAs) from the active SPM's reports."""
        result: dict[str, Any] = call(controller.ipsec_status)
        return result

    @app.get(
        f"{API}/ipsec/spm/{{name}}/config",
        summary="What an IPsec SPM polls: whether it is active, its address and tunnels",
    )
    def ipsec_spm_config(name: str) -> dict[str, Any]:
        """Answers `name`, `ipsec`, `active` and, for an SPM of the IPsec pool, `address`,
        `npm_mac`, `policy` and `tunnels` (for the active one only: what it loads, PSKs
        included)."""
        result: dict[str, Any] = call(lambda: controller.ipsec_spm_config(name))
        return result

    @app.post(f"{API}/ipsec/spm/{{name}}/status", summary="An IPsec SPM's tunnels (every second)")
    def ipsec_spm_status(name: str, report: dict[str, Any]) -> dict[str, Any]:
        """The body's `tunnels` (name, state, bytes and packets in/out, rekeys): the active
        SPM's set the metrics. Answers `active` and `policy`; 404: unknown SPM; 422: bad
        tunnels."""
        tunnels = report.get("tunnels")
        if not isinstance(tunnels, list) or not all(isinstance(t, dict) for t in tunnels):
            raise RequestError(422, "tunnels must be a list of objects")
        result: dict[str, Any] = call(lambda: controller.ipsec_report(name, report))
        return result

    # -- metrics -----------------------------------------------------------------------------

    @app.get("/metrics", summary="Prometheus metrics", response_class=Response)
    def metrics() -> Response:
        """The Prometheus text format (docs/reference/metrics.md lists the families)."""
        return Response(controller.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return app


class ApiServer:
    """uvicorn in a thread of the controller process."""

    def __init__(
        self,
        controller: Controller,
        host: str,
        port: int,
        token: str,
        uds: str | None = None,
        console: Console | None = None,
    ) -> None:
        """Listen on host:port, or on the Unix socket `uds` when given; serve `console` too."""
        self.app = create_app(controller, token, console)
        self.console = console
        self.uds = uds
        config = uvicorn.Config(
            self.app,
            host=host,
            port=port,
            uds=uds,
            log_level="warning",
            access_log=False,
            lifespan="off",
        )
        self.server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 10.0) -> None:
        self._thread = threading.Thread(target=self.server.run, name="cpm-api", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the API server stopped at start-up (port in use?)")
            if time.monotonic() > deadline:
                raise TimeoutError("the API server did not start")
            time.sleep(0.02)
        if self.uds:
            LOG.info("REST API on unix:%s", self.uds)
        else:
            LOG.info("REST API on http://%s:%d", self.server.config.host, self.port)
        if self.console is not None:
            self.console.start()
            LOG.info("web console on %s", self.console_url)

    @property
    def console_url(self) -> str | None:
        if self.console is None or self.uds:
            return None
        host = self.server.config.host
        return f"http://{host}:{self.port}/console/"

    @property
    def port(self) -> int:
        servers = getattr(self.server, "servers", [])
        for server in servers:
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        return int(self.server.config.port)

    def stop(self) -> None:
        if self.console is not None:
            self.console.stop()
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=5)
