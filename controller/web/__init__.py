"""The CPM's web console, served by the API's own server under /console: overview with live
charts, sessions (search, sort, pages, block), alerts (with their rule and flow), the policy
(versions, diff, validate, apply), SPMs (load history, drain, restore).

Pages are small HTML shells; one script (static/console.js) fetches JSON from /console/data/...
and draws tables and SVG charts, so nothing comes from elsewhere at run time and there is no
build step. Everything but the login page and its style sheet needs a console session (a
cookie, see `auth`) or the API's bearer token; a state-changing request with the cookie must
also carry the header `X-OpenGate-Console` (which a cross-site form cannot set).

Live state is read the way the API reads it: `call` runs a function on the controller's event
dispatcher; changes are events published on its bus.
"""

from __future__ import annotations

import hashlib
import html
import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, FastAPI, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from finsy.proto import p4r
from pydantic import BaseModel, Field

from controller import events as ev
from controller.counters import Cell
from controller.db import INT_MAX, SESSION_SORT_KEYS
from controller.errors import JSON_INT_MAX, Count, RequestError, Text, Text100
from controller.policy import load_policy
from controller.runtime import Controller
from controller.session_encoding import SessionEncoder
from controller.session_model import address_text, row_keys
from controller.web.auth import COOKIE, SESSION_SECONDS, Logins
from controller.web.history import History
from controller.web.rules import RuleIndex
from opengate import p4constants as pc

LOG = logging.getLogger(__name__)

PREFIX = "/console"
HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
PAGES = HERE / "pages"
CSRF_HEADER = "x-opengate-console"
# pages of the console: path (under PREFIX), file in pages/, title in the navigation
NAV = (
    ("/", "overview", "Overview"),
    ("/sessions", "sessions", "Sessions"),
    ("/alerts", "alerts", "Alerts"),
    ("/policy", "policy", "Policy"),
    ("/spms", "spms", "SPMs"),
)
PUBLIC = {f"{PREFIX}/login", f"{PREFIX}/static/console.css"}
MEDIA = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
PROTO_NAMES = {
    pc.IP_PROTO_TCP: "tcp",
    pc.IP_PROTO_UDP: "udp",
    pc.IP_PROTO_ICMP: "icmp",
    pc.IP_PROTO_ICMPV6: "icmpv6",
}
# The last page of a table (of the largest page size) whose offset the database takes.
MAX_PAGE = JSON_INT_MAX // 500


class PolicyText(BaseModel):
    text: Text = Field(description="the policy file's content")
    name: Text100 = Field(default="", description="its file name (uploaded or edited)")


def _packets(cells: dict[int, Cell], port: int) -> int | None:
    cell = cells.get(port)
    return cell.packets if cell is not None else None


def _ip(value: int) -> str:
    return str(ipaddress.IPv4Address(value))


class Static:
    """The console's assets, read once, served from memory with a content hash in the URL."""

    def __init__(self) -> None:
        self.files: dict[str, tuple[bytes, str]] = {}
        for path in sorted(STATIC.iterdir()):
            if path.suffix in MEDIA:
                self.files[path.name] = (path.read_bytes(), MEDIA[path.suffix])
        self.version = hashlib.sha256(
            b"".join(content for content, _ in self.files.values())
        ).hexdigest()[:12]

    def response(self, name: str) -> Response:
        found = self.files.get(name)
        if found is None:
            return JSONResponse({"detail": "not found"}, status_code=404)
        content, media = found
        return Response(
            content, media_type=media, headers={"Cache-Control": "private, max-age=86400"}
        )


class Console:
    def __init__(
        self,
        controller: Controller,
        token: str,
        users: dict[str, str] | None = None,
        rule_files: tuple[Path, ...] = (),
        secure_cookie: bool = False,
    ) -> None:
        self.controller = controller
        self.logins = Logins(token, users)
        self.rule_files = rule_files
        self.secure_cookie = secure_cookie
        self.static = Static()
        self.layout = (PAGES / "layout.html").read_text()
        self.bodies = {name: (PAGES / f"{name}.html").read_text() for _, name, _ in NAV}
        self.login_page = (PAGES / "login.html").read_text()
        self.rules = RuleIndex(self._rule_files)
        self.history: History | None = None
        self._call: Callable[[Callable[[], Any]], Any] | None = None
        self.router: APIRouter | None = None  # the console's routes, once mounted

    def _rule_files(self) -> list[Path]:
        policy = self.controller.policy
        files = [Path(policy.ids_file)] if policy is not None and policy.ids_file else []
        return files + list(self.rule_files)

    def start(self) -> None:
        """Start sampling for the live charts (after `mount`)."""
        if self._call is None:
            raise RuntimeError("mount the console on the API's app first")
        self.history = History(self.controller, self._call)
        self.history.start()

    def stop(self) -> None:
        if self.history is not None:
            self.history.stop()

    # -- authentication ----------------------------------------------------------------------

    @staticmethod
    def owns(path: str) -> bool:
        return path == PREFIX or path.startswith(PREFIX + "/")

    async def authenticate(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        """Every console request but the login page: a console session or the bearer token."""
        path = request.url.path
        if path in PUBLIC:
            response = await call_next(request)
        else:
            user = self.logins.user_of(request.cookies.get(COOKIE))
            by_cookie = user is not None
            if user is None and self.logins.bearer_ok(request.headers.get("authorization", "")):
                user = "token"
            if user is None:
                if request.method == "GET" and not path.startswith(f"{PREFIX}/data/"):
                    target = quote(path, safe="/")
                    response = RedirectResponse(f"{PREFIX}/login?next={target}", status_code=303)
                else:
                    response = JSONResponse({"detail": "log in first"}, status_code=401)
            elif (
                by_cookie
                and request.method not in ("GET", "HEAD")
                and path != f"{PREFIX}/logout"  # a plain form; a forced log-out harms nobody
                and request.headers.get(CSRF_HEADER) != "1"
            ):
                response = JSONResponse(
                    {"detail": f"missing the {CSRF_HEADER} header"}, status_code=403
                )
            else:
                request.state.user = user
                response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    # -- pages -------------------------------------------------------------------------------

    def page(self, name: str, user: str) -> str:
        title = next(t for _, n, t in NAV if n == name)
        links = "".join(
            f'<li><a href="{PREFIX}{path}"{" aria-current=page" if n == name else ""}>{t}</a></li>'
            for path, n, t in NAV
        )
        return (
            self.layout.replace("{title}", title)
            .replace("{page}", name)
            .replace("{nav}", links)
            .replace("{user}", html.escape(user))
            .replace("{version}", self.static.version)
            .replace("{body}", self.bodies[name])
        )

    def login_html(self, next_path: str, error: str = "") -> str:
        message = f'<p class="error" role="alert">{html.escape(error)}</p>' if error else ""
        return (
            self.login_page.replace("{next}", html.escape(next_path))
            .replace("{error}", message)
            .replace("{version}", self.static.version)
        )

    # -- views -------------------------------------------------------------------------------

    def overview(self, call: Callable[[Callable[[], Any]], Any], seconds: float) -> dict[str, Any]:
        controller = self.controller
        status: dict[str, Any] = call(controller.status)
        history = self.history
        counters = history.counters() if history is not None else {}
        policy = controller.policy
        ports = list(policy.ports) if policy is not None else []
        npms = []
        for name, npm in status["npms"].items():
            read = counters.get(name)
            npms.append(
                {
                    "name": name,
                    "address": npm["address"],
                    "role": npm["role"],
                    "sessions": npm["sessions"],
                    "ports": [
                        {
                            "port": p.number,
                            "name": p.name,
                            "role": pc.ROLE_NAMES.get(p.role, str(p.role)).lower(),
                            "rx": _packets(read.rx, p.number) if read else None,
                            "tx": _packets(read.tx, p.number) if read else None,
                        }
                        for p in ports
                    ],
                }
            )
        return {
            "now": time.time(),
            "policy": status["policy"],
            "uptime_seconds": status["uptime_seconds"],
            "sessions": status["sessions"],
            "npms": npms,
            "spms": list(status["spms"].values()),
            "samples": history.since(seconds) if history is not None else [],
        }

    def session_rows(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        policy = self.controller.policy
        now = time.time()
        spm_by_port = {s.port: s.name for s in policy.spms} if policy is not None else {}
        out = []
        for row in rows:
            spec = policy.class_by_id(row["class_id"]) if policy is not None else None
            created = row["created_at"]
            key, reply = row_keys(row)
            v6 = bool(row.get("src6"))
            out.append(
                {
                    "id": row["id"],
                    "npm": row["npm"],
                    "proto": PROTO_NAMES.get(row["proto"], str(row["proto"])),
                    "src": address_text(key[0], v6),
                    "sport": row["sport"],
                    "dst": address_text(key[1], v6),
                    "dport": row["dport"],
                    "nat": pc.NAT_NAMES.get(row["nat_kind"], str(row["nat_kind"])),
                    "nat_addr": _ip(row["nat_addr"]) if row["nat_kind"] else None,
                    "nat_port": row["nat_port"] if row["nat_kind"] else None,
                    "class_id": row["class_id"],
                    "class": spec.name if spec is not None else None,
                    "spm": spm_by_port.get(row["spm_port"]) if row["spm_port"] else None,
                    "state": row["state"],
                    "age_seconds": round(now - created.timestamp(), 1) if created else None,
                    "bytes": None,
                    "key": key,
                    "reply": reply,
                }
            )
        return out

    def add_bytes(
        self, rows: list[dict[str, Any]], call: Callable[[Callable[[], Any]], Any]
    ) -> None:
        """Bytes of both directions of each row, from the session table's direct counter:
        one Read per NPM for the page's rows only."""
        controller = self.controller
        sessions = controller.sessions
        assert sessions is not None
        by_npm: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            by_npm.setdefault(row["npm"], []).append(row)
        for npm, items in by_npm.items():
            conn = controller.npms.get(npm)
            if conn is None or not conn.is_connected:
                continue
            encoder: SessionEncoder = call(partial(sessions.encoder, npm))
            wanted: dict[bytes, dict[str, Any]] = {}
            entities = []
            for row in items:
                for key in (row["key"], row["reply"]):
                    match = encoder.match(key)
                    wanted[_match_id(match)] = row
                    entities.append(
                        p4r.Entity(direct_counter_entry=p4r.DirectCounterEntry(table_entry=match))
                    )
            try:
                replies = conn.read(entities)
            except Exception as error:  # a failed read leaves the column empty
                LOG.debug("%s: cannot read session counters: %s", npm, error)
                continue
            for entity in replies:
                entry = entity.direct_counter_entry
                owner = wanted.get(_match_id(entry.table_entry))
                if owner is not None:
                    owner["bytes"] = (owner["bytes"] or 0) + int(entry.data.byte_count)

    def rule(self, sid: int) -> dict[str, Any]:
        found = self.rules.find(sid)
        if found is None:
            raise RequestError(404, f"no rule with sid {sid} in {self._files_text()}")
        return {"sid": found.sid, "path": found.path, "line": found.line, "text": found.text}

    def _files_text(self) -> str:
        return ", ".join(str(p) for p in self._rule_files()) or "no rule file"

    # -- routes ------------------------------------------------------------------------------

    def mount(
        self,
        app: FastAPI,
        call: Callable[[Callable[[], Any]], Any],
        publish: Callable[[ev.Event], Any],
    ) -> None:
        router = APIRouter(prefix=PREFIX, include_in_schema=False)
        controller = self.controller
        self._call = call

        @router.get("/login", response_class=HTMLResponse)
        def login_form(next: str = f"{PREFIX}/") -> HTMLResponse:
            return HTMLResponse(self.login_html(_safe_next(next)))

        @router.post("/login", response_class=HTMLResponse)
        async def login(request: Request) -> Response:
            # the login form, url-encoded (parsed here: no multipart dependency for one form)
            body = await request.body()
            fields = parse_qs(body.decode("utf-8", "replace")[:8192], keep_blank_values=True)
            user = fields.get("user", [""])[0].strip()
            secret = fields.get("secret", [""])[0]
            next_path = _safe_next(fields.get("next", [f"{PREFIX}/"])[0])
            who = self.logins.check(user, secret)
            if who is None:
                LOG.warning("console: failed login for %r", user or "(token)")
                return HTMLResponse(
                    self.login_html(next_path, "Wrong token, user name or password."),
                    status_code=401,
                )
            LOG.info("console: %s logged in", who)
            response = RedirectResponse(next_path, status_code=303)
            response.set_cookie(
                COOKIE,
                self.logins.open(who),
                max_age=int(SESSION_SECONDS),
                path=PREFIX,
                httponly=True,
                samesite="strict",
                secure=self.secure_cookie,
            )
            return response

        @router.post("/logout")
        def logout(request: Request) -> Response:
            self.logins.close(request.cookies.get(COOKIE))
            response = RedirectResponse(f"{PREFIX}/login", status_code=303)
            response.delete_cookie(COOKIE, path=PREFIX)
            return response

        @router.get("/static/{name}")
        def static(name: str) -> Response:
            return self.static.response(name)

        def page_route(name: str) -> Callable[[Request], HTMLResponse]:
            def render(request: Request) -> HTMLResponse:
                return HTMLResponse(self.page(name, request.state.user))

            return render

        for path, name, _ in NAV:
            router.add_api_route(path, page_route(name), methods=["GET"])

        @router.get("/data/overview")
        def overview(minutes: float = Query(5, gt=0, le=15)) -> dict[str, Any]:
            return self.overview(call, minutes * 60)

        @router.get("/data/sessions")
        def sessions(
            q: Annotated[Text, Query(max_length=200)] = "",
            sort: str = "id",
            order: str = Query("asc", pattern="^(asc|desc)$"),
            page: int = Query(1, ge=1, le=MAX_PAGE),
            size: int = Query(50, ge=1, le=500),
        ) -> dict[str, Any]:
            if sort not in SESSION_SORT_KEYS:
                raise RequestError(422, f"sort: one of {', '.join(SESSION_SORT_KEYS)}")
            controller.db_writer.flush()  # what the switch holds, the DB has too
            total, rows = controller.db.session_page(
                q, sort, order == "desc", size, (page - 1) * size
            )
            out = self.session_rows(rows)
            self.add_bytes(out, call)
            for row in out:
                del row["key"], row["reply"]
            return {"total": total, "page": page, "size": size, "sessions": out}

        @router.post("/data/sessions/{session_id}/block")
        def block(session_id: Count, request: Request) -> dict[str, Any]:
            result: dict[str, Any] = publish(
                ev.SessionBlockRequested(session_id, f"console ({request.state.user})")
            )
            return result

        @router.get("/data/alerts")
        def alerts(
            sid: Count | None = None,
            classtype: Annotated[Text | None, Query(max_length=100)] = None,
            host: Annotated[Text | None, Query(max_length=64)] = None,
            page: int = Query(1, ge=1, le=MAX_PAGE),
            size: int = Query(50, ge=1, le=500),
        ) -> dict[str, Any]:
            total, rows = controller.db.alert_page(
                sid=sid,
                classtype=classtype or None,
                host=(host or "").strip() or None,
                limit=size,
                offset=(page - 1) * size,
            )
            return {
                "total": total,
                "page": page,
                "size": size,
                "alerts": rows,
                "classtypes": controller.db.alert_classtypes(),
            }

        @router.get("/data/rules/{sid}")
        def rule(sid: Count) -> dict[str, Any]:
            return self.rule(sid)

        @router.get("/data/policy")
        def policy() -> dict[str, Any]:
            running = controller.policy
            assert running is not None
            versions = [
                {
                    "version": v.version,
                    "name": v.name,
                    "status": v.status,
                    "source": v.source,
                    "error": v.error,
                    "created_at": v.created_at.isoformat(),
                }
                for v in controller.db.policy_versions(100)
            ]
            return {
                "version": controller.policy_version,
                "name": running.name,
                "path": running.path,
                "summary": running.summary(),
                "text": running.text,
                "versions": versions,
            }

        @router.get("/data/policy/versions/{version}")
        def policy_version(version: Annotated[int, PathParam(ge=0, le=INT_MAX)]) -> dict[str, Any]:
            stored = controller.db.policy_version(version)
            if stored is None:
                raise RequestError(404, f"no policy version {version}")
            return {"version": stored.version, "name": stored.name, "text": stored.text}

        def load(request: PolicyText) -> Any:
            running = controller.policy
            assert running is not None
            # files the policy names (its IDS rules) are read beside the running policy
            name = Path(request.name).name or "edited.yaml"
            return load_policy(Path(running.path).parent / name, request.text)

        @router.post("/data/policy/validate")
        def policy_validate(request: PolicyText) -> dict[str, Any]:
            return {"valid": True, "summary": load(request).summary()}

        @router.post("/data/policy/diff")
        def policy_diff(request: PolicyText) -> dict[str, Any]:
            new = load(request)
            result: dict[str, Any] = call(lambda: controller.diff_policy(new))
            return result

        @router.post("/data/policy/apply")
        def policy_apply(request: PolicyText, http: Request) -> dict[str, Any]:
            new = load(request)
            result: dict[str, Any] = publish(
                ev.PolicyApplyRequested(new, f"console ({http.state.user})")
            )
            return result

        @router.get("/data/hsm")
        def hsm() -> dict[str, Any]:
            result: dict[str, Any] = call(controller.hsm_status)
            return result

        @router.get("/data/spms")
        def spms(minutes: float = Query(15, gt=0, le=15)) -> dict[str, Any]:
            pool = controller.spms
            assert pool is not None
            live = call(lambda: [s.as_dict() for s in pool.states.values()])
            samples = self.history.since(minutes * 60) if self.history is not None else []
            return {
                "spms": live,
                "history": [{"t": s["t"], "spms": s["spms"]} for s in samples],
            }

        def drain_route(drained: bool) -> Callable[[str], dict[str, Any]]:
            def change(name: str) -> dict[str, Any]:
                result: dict[str, Any] = publish(ev.SpmDrainRequested(name, drained))
                return result

            return change

        router.add_api_route("/data/spms/{name}/drain", drain_route(True), methods=["POST"])
        router.add_api_route("/data/spms/{name}/restore", drain_route(False), methods=["POST"])

        @router.get("")
        def root() -> Response:
            return RedirectResponse(f"{PREFIX}/", status_code=307)

        app.include_router(router)
        self.router = router


def _safe_next(value: str) -> str:
    """Only a path of the console itself (no open redirect)."""
    if value.startswith(PREFIX + "/") and not value.startswith("//") and "\\" not in value:
        return value
    return f"{PREFIX}/"


def _match_id(entry: p4r.TableEntry) -> bytes:
    fields = sorted(entry.match, key=lambda m: m.field_id)
    return b"|".join(m.exact.value.lstrip(b"\0") for m in fields)
