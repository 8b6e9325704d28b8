"""The CPM's REST API (FastAPI): status, sessions, SPMs, policy versions, and the endpoints the
SPM daemons call (load reports, alerts, bypass). Every request needs `Authorization: Bearer
TOKEN`, the OpenAPI schema and /metrics (Prometheus) included; nothing answers without it.

The schema is at /openapi.json, the browsable docs at /docs (both behind the token too).

No input breaks the controller: what a request carries is checked before anything acts on it
(strings are text the database can store, integers fit its columns, floats are finite, bodies
are at most 20 MiB, `MAX_BODY_BYTES`), and every refusal is a 4xx in the shape the schema declares
(`Problem`), logged at DEBUG, not as an error.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any

import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ConfigDict, Field
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from controller import events as ev
from controller.errors import (
    JSON_INT_MAX,
    Count,
    RequestError,
    Text,
    Text10,
    Text20,
    Text50,
    Text64,
    Text100,
    Text4096,
    storable,
)
from controller.policy import load_policy, mac_text
from controller.runtime import Controller
from controller.session_model import address_text, key_is_v6, row_keys
from controller.spm_pool import ReportError, validate_report
from controller.web import Console
from opengate import p4constants as pc
from opengate.errors import ConfigError
from opengate.yamlconf import MAX_DEPTH, MAX_FILE_BYTES

LOG = logging.getLogger(__name__)

API = "/api/v1"
HANDLER_TIMEOUT = 120.0
# The largest request body: a policy file of the largest size a file may have
# (opengate.yamlconf.MAX_FILE_BYTES, 16 MiB: 100,000 ClassBench rules inline are 11 MB), sent
# as a JSON string (its newlines and quotes escaped), with room to spare. Larger: 413.
MAX_BODY_BYTES = MAX_FILE_BYTES + MAX_FILE_BYTES // 4


SessionId = Annotated[int, Path(ge=0, le=JSON_INT_MAX, description="the session's id")]


class Problem(BaseModel):
    """What a refused request is answered with."""

    detail: str | list[dict[str, Any]] = Field(
        description="why: a message, or (a request that does not match the schema) one object "
        "per problem with `loc`, `msg` and `type`"
    )
    path: str | None = Field(default=None, description="a policy's error: the file")
    line: int | None = Field(default=None, description="a policy's error: the line")
    field: str | None = Field(default=None, description="a policy's error: the field")


def _problems(*codes: int) -> dict[int | str, dict[str, Any]]:
    what = {
        400: "the body is not JSON",
        404: "no such SPM, session or version",
        409: "the controller or a switch refused it",
        413: f"the body is larger than {MAX_BODY_BYTES} bytes",
        422: "the request does not validate",
        503: "the database did not record it (the switches were put back)",
    }
    return {code: {"model": Problem, "description": what[code]} for code in codes}


# OpenAPI links: where a response's values are another operation's parameters (a client, or
# schemathesis's stateful tests, follow them).
SESSION_LINKS = {
    name: {
        "operationId": operation,
        "parameters": {"session_id": "$response.body#/sessions/0/id"},
        "description": f"{name.lower()} the first session listed",
    }
    for name, operation in (("Block", "block_session"), ("Delete", "delete_session"))
}


def _json_value(value: Any, depth: int = 0) -> Any:
    """A JSON value kept as it came (an IPsec SPM's report is shown again): strings storable,
    numbers finite and within 64 bits, nesting bounded."""
    if depth > MAX_DEPTH:
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if abs(value) > JSON_INT_MAX:
            raise ValueError(f"{value} is out of range (at most {JSON_INT_MAX})")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value} is not a finite number")
        return value
    if isinstance(value, list):
        return [_json_value(item, depth + 1) for item in value]
    if isinstance(value, dict):
        return {storable(str(k)): _json_value(v, depth + 1) for k, v in value.items()}
    raise ValueError(f"not a JSON value: {type(value).__name__}")


class LoadReport(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    ts: float | Text64 | None = None
    cpu: float = Field(ge=0)
    queue_depth: Count
    queue_held: Count = 0  # of queue_depth, read by the dispatcher
    queue_dropped: Count = 0  # not queued (full or over a share)
    pps: float = Field(default=0, ge=0)
    bps: float = Field(default=0, ge=0)
    mem_bytes: Count = 0
    workers: Count = 1
    flows: Count = 0


class Flow(BaseModel):
    proto: Text10 | Annotated[int, Field(ge=0, le=255)]
    src: Text64
    dst: Text64
    sport: int = Field(default=0, ge=0, le=65535)
    dport: int = Field(default=0, ge=0, le=65535)


class Alert(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    ts: float | Text64 | None = None
    sid: Count | None = None
    gid: Count | None = None
    rev: Count | None = None
    msg: Text4096 = ""
    classtype: Text100 | None = None
    action: Text20 = Field(
        default="alert", description="drop, block, reject or sdrop block the flow"
    )
    flow: Flow | None = None
    community_id: Text100 | None = None


class Bypass(BaseModel):
    flow: Flow
    community_id: Text100 | None = None
    clean_bytes: Count = 0


class IpsecTunnelStatus(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    name: Text100
    state: Text20 | None = None
    bytes_in: Count = 0
    bytes_out: Count = 0
    packets_in: Count = 0
    packets_out: Count = 0
    rekeys: Count = 0


class IpsecStatus(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    tunnels: list[IpsecTunnelStatus]


class PolicyRequest(BaseModel):
    path: Text4096 = Field(
        description="where the policy file is; files it names are read from there"
    )
    text: Text | None = Field(default=None, description="its content (read from `path` if absent)")
    source: Text50 = "api"


class BodyLimit:
    """ASGI middleware: a request body over `limit` bytes is refused with 413, by its
    Content-Length before it is read, else once that much has come."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        declared = headers.get(b"content-length", b"").decode("latin-1")
        if declared.isascii() and declared.isdigit() and int(declared) > self.limit:
            await self.refuse()(scope, receive, send)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise HTTPException(413, self.message)
            return message

        await self.app(scope, limited, send)

    @property
    def message(self) -> str:
        return f"the request body is larger than the limit of {self.limit} bytes"

    def refuse(self) -> JSONResponse:
        return JSONResponse({"detail": self.message}, status_code=413)


def _printable(value: Any) -> Any:
    """`value` with every string made encodable (a lone surrogate as its escape), for an error
    answer that quotes what was sent."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, list | tuple):
        return [_printable(v) for v in value]
    if isinstance(value, Mapping):
        return {_printable(str(k)): _printable(v) for k, v in value.items()}
    return value


def _issue(error: Mapping[str, Any]) -> dict[str, Any]:
    """One of FastAPI's validation errors, with its `input` only when short and JSON."""
    out = {"loc": _printable(list(error.get("loc", ()))), "msg": _printable(error.get("msg"))}
    out["type"] = str(error.get("type", ""))
    given = error.get("input")
    if isinstance(given, str) and len(given) <= 200:
        out["input"] = _printable(given)
    elif _plain_number(given):
        out["input"] = given
    return out


def _plain_number(value: Any) -> bool:
    """None, a boolean, or a number JSON has (finite, an integer within 64 bits)."""
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, int):
        return abs(value) <= JSON_INT_MAX
    return isinstance(value, float) and math.isfinite(value)


def _ip(value: int) -> str:
    return str(ipaddress.IPv4Address(value))


def session_view(row: dict[str, Any]) -> dict[str, Any]:
    """A DB session row with addresses (IPv6 ones too) and MACs as text, and its `family`."""
    out = dict(row)
    key, reply = row_keys(row)
    v6 = bool(row.get("src6"))
    out.pop("src6", None)
    out.pop("dst6", None)
    out["family"] = 6 if v6 else 4
    reply_v6 = key_is_v6(reply)  # (NAT64: an IPv4 reply)
    for name, value, family6 in (
        ("src", key[0], v6),
        ("dst", key[1], v6),
        ("r_src", reply[0], reply_v6),
        ("r_dst", reply[1], reply_v6),
    ):
        out[name] = address_text(value, family6)
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
        responses={401: {"model": Problem, "description": "missing or wrong bearer token"}},
    )
    # inside the authentication below: a client without the token learns nothing of the limit
    app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES)

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
    async def request_error(request: Request, error: RequestError) -> JSONResponse:
        LOG.debug("%s %s: %d %s", request.method, request.url.path, error.status, error.message)
        return JSONResponse({"detail": _printable(error.message)}, status_code=error.status)

    @app.exception_handler(ConfigError)
    async def config_error(request: Request, error: ConfigError) -> JSONResponse:
        LOG.debug("%s %s: 422 %s", request.method, request.url.path, error)
        body = {"detail": str(error), "path": error.path, "line": error.line, "field": error.field}
        return JSONResponse(_printable(body), status_code=422)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        """FastAPI's answer, made safe to send: what it quotes of the request may be text
        that cannot be encoded, a number JSON has not, or the whole 16 MiB body."""
        issues = [_issue(e) for e in error.errors()]
        LOG.debug("%s %s: 422 %s", request.method, request.url.path, issues)
        return JSONResponse({"detail": issues}, status_code=422)

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

    @app.get(
        f"{API}/sessions",
        summary="Installed sessions",
        responses={**_problems(422), 200: {"description": "the sessions", "links": SESSION_LINKS}},
    )
    def sessions(
        npm: Annotated[Text100 | None, Query(description="only this NPM's")] = None,
        limit: int = Query(100, ge=1, le=100_000),
        offset: int = Query(0, ge=0, le=JSON_INT_MAX),
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

    @app.delete(
        f"{API}/sessions/{{session_id}}",
        summary="Remove a session (both directions)",
        responses=_problems(404, 422),
        operation_id="delete_session",
    )
    def delete_session(session_id: SessionId) -> dict[str, Any]:
        """Answers `{"deleted": ID}`; 404 when the controller holds no such session."""
        result: dict[str, Any] = publish(ev.SessionDeleteRequested(session_id, "api"))
        return result

    @app.post(
        f"{API}/sessions/{{session_id}}/block",
        summary="Block a session (the flow stops)",
        responses=_problems(404, 422),
        operation_id="block_session",
    )
    def block_session(session_id: SessionId) -> dict[str, Any]:
        """Answers `{"blocked": ID}`; 404 when the controller holds no such session."""
        result: dict[str, Any] = publish(ev.SessionBlockRequested(session_id, "api"))
        return result

    @app.post(
        f"{API}/spms/{{name}}/drain",
        summary="Drain an SPM: weight 0, no new flows",
        responses=_problems(404, 422),
    )
    def drain_spm(name: str) -> dict[str, Any]:
        """Answers `spm`, `drained`, `weight`; 404 when the policy has no SPM of that name."""
        result: dict[str, Any] = publish(ev.SpmDrainRequested(name, True))
        return result

    @app.post(
        f"{API}/spms/{{name}}/restore",
        summary="Restore a drained SPM",
        responses=_problems(404, 422),
    )
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

    @app.get(f"{API}/alerts", summary="Latest alerts from the SPMs", responses=_problems(422))
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

    @app.get(
        f"{API}/policy/versions", summary="Policy versions, newest first", responses=_problems(422)
    )
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

    @app.post(
        f"{API}/policy/validate",
        summary="Validate a policy without applying it",
        responses=_problems(400, 413, 422),
    )
    def policy_validate(request: PolicyRequest) -> dict[str, Any]:
        """Answers `valid` (true) and the policy's `summary`; an invalid policy gets 422 with
        `detail`, `path`, `line` and `field`."""
        return {"valid": True, "summary": load_policy(request.path, request.text).summary()}

    @app.post(
        f"{API}/policy/diff",
        summary="What applying a policy would write",
        responses=_problems(400, 413, 422),
    )
    def policy_diff(request: PolicyRequest) -> dict[str, Any]:
        """Nothing is written. Answers `running_sha256`, `new_sha256`, `changed`, `npms` (what
        each NPM would be written) and `text_diff` (a unified diff of the files); 422: invalid."""
        new = load_policy(request.path, request.text)
        result: dict[str, Any] = call(lambda: controller.diff_policy(new))
        return result

    @app.post(
        f"{API}/policy/apply",
        summary="Apply a policy: validate, write the difference",
        responses=_problems(400, 409, 413, 422, 503),
    )
    def policy_apply(request: PolicyRequest) -> dict[str, Any]:
        """All or nothing. Answers `version`, `sha256`, `npms` (what each NPM was written),
        `rematched` and `rematch_pending` (the open sessions held to the new policy); 422:
        invalid (nothing was written); 409: a switch refused it, 503: the database did not
        record it (either way the switches were put back to the running policy, and `detail`
        says so, or which NPM could not be and is reconciled again)."""
        new = load_policy(request.path, request.text)
        result: dict[str, Any] = publish(ev.PolicyApplyRequested(new, request.source))
        return result

    # -- SPM daemons -------------------------------------------------------------------------

    @app.post(
        f"{API}/spm/{{name}}/load",
        summary="An SPM's load report (every second)",
        responses=_problems(400, 404, 413, 422),
    )
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

    @app.post(
        f"{API}/spm/{{name}}/alerts",
        summary="An IPS/AV alert; drop/block blocks the flow",
        responses=_problems(400, 404, 413, 422),
    )
    def spm_alert(name: str, alert: Alert) -> dict[str, Any]:
        """Stored; an action of drop, block, reject or sdrop blocks the flow's session (or
        blocks it once installed). Answers `alert` (its id), `session`, `blocked`; 404: unknown
        SPM."""
        known_spm(name)
        result: dict[str, Any] = publish(ev.AlertReceived(name, alert.model_dump()))
        return result

    @app.post(
        f"{API}/spm/{{name}}/bypass",
        summary="Offload a clean flow to the fast path",
        responses=_problems(400, 404, 409, 413, 422),
    )
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

    @app.get(
        f"{API}/spm/{{name}}/config",
        summary="What an SPM needs from the CPM (its tags)",
        responses=_problems(404, 422),
    )
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
        responses=_problems(404, 422),
    )
    def ipsec_spm_config(name: str) -> dict[str, Any]:
        """Answers `name`, `ipsec`, `active` and, for an SPM of the IPsec pool, `address`,
        `npm_mac`, `policy` and `tunnels` (for the active one only: what it loads, PSKs
        included)."""
        result: dict[str, Any] = call(lambda: controller.ipsec_spm_config(name))
        return result

    @app.post(
        f"{API}/ipsec/spm/{{name}}/status",
        summary="An IPsec SPM's tunnels (every second)",
        responses=_problems(400, 404, 413, 422),
    )
    def ipsec_spm_status(name: str, report: IpsecStatus) -> dict[str, Any]:
        """The body's `tunnels` (name, state, bytes and packets in/out, rekeys): the active
        SPM's set the metrics of the tunnels the policy has. Answers `active` and `policy`;
        404: unknown SPM; 422: bad tunnels."""
        try:
            values: dict[str, Any] = _json_value(report.model_dump())  # shown again: all of it
        except ValueError as error:
            raise RequestError(422, f"the report: {error}") from None
        result: dict[str, Any] = call(lambda: controller.ipsec_report(name, values))
        return result

    # -- metrics -----------------------------------------------------------------------------

    @app.get(
        "/metrics",
        summary="Prometheus metrics",
        response_class=Response,
        responses={
            200: {
                "description": "the Prometheus text format",
                "content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}},
            }
        },
    )
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
