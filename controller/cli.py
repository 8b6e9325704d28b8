"""`opengate controller run` (the CPM process) and the client commands that talk to its REST API:
`opengate status`, `sessions`, `spms`, `ipsec`, `alerts`, `policy apply|diff|show|validate`.

Client commands find the API with `--api URL` (or $OPENGATE_API, default http://127.0.0.1:8080)
and the token with `--token-file F` (or $OPENGATE_TOKEN_FILE, default run/api-token) or
$OPENGATE_TOKEN.
"""

from __future__ import annotations

import argparse
import getpass
import json
import logging
import os
import secrets
import signal
import sys
from pathlib import Path
from typing import Any

import httpx

from controller.api import ApiServer
from controller.npm import NpmAddress, Pipeline
from controller.policy import load_policy
from controller.runtime import DEFAULT_ELECTION_ID, Controller, ControllerOptions
from controller.web import Console
from controller.web.auth import hash_password, load_users
from opengate.errors import ConfigError
from opengate.target import P4_BUILDS, p4_program_dir

LOG = logging.getLogger(__name__)

DEFAULT_API = "http://127.0.0.1:8080"
DEFAULT_TOKEN_FILE = Path("run") / "api-token"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    controller = sub.add_parser("controller", help="the CPM: run the controller process")
    controller_sub = controller.add_subparsers(dest="controller_command", required=True)
    run = controller_sub.add_parser(
        "run",
        help="run the controller (until SIGTERM)",
        description="Drive NPM switches over P4Runtime from a policy file; serve the REST API.",
    )
    run.add_argument("--policy", type=Path, help="policy file (YAML); default: the DB's latest")
    run.add_argument(
        "--npm",
        action="append",
        required=True,
        metavar="NAME=ADDR[,DEVICE_ID]",
        help="an NPM's P4Runtime server, e.g. npm1=127.0.0.1:9559,1 (repeat for several)",
    )
    run.add_argument("--db", help="database URL (default: sqlite:///STATE_DIR/opengate.db)")
    run.add_argument("--api", default="127.0.0.1:8080", help="HOST:PORT of the REST API, or 'off'")
    run.add_argument("--token-file", type=Path, help="API token (created if missing)")
    run.add_argument(
        "--api-socket",
        type=Path,
        help="also serve the REST API on this Unix socket (for SPM hosts in other namespaces)",
    )
    run.add_argument(
        "--console",
        choices=("on", "off"),
        default="on",
        help="the web console at /console on the API's address (default on)",
    )
    run.add_argument(
        "--console-users",
        type=Path,
        help="console users besides the token: NAME:HASH lines (`opengate console-user NAME`)",
    )
    run.add_argument(
        "--rules-file",
        type=Path,
        action="append",
        default=[],
        help="a rule file the SPMs run, where the console finds an alert's rule (repeatable)",
    )
    run.add_argument(
        "--election-id",
        type=int,
        default=DEFAULT_ELECTION_ID,
        help=f"P4Runtime election id; a standby uses a lower one (default {DEFAULT_ELECTION_ID})",
    )
    run.add_argument("--state-dir", type=Path, default=Path("run"), help="run-time files")
    run.add_argument(
        "--build",
        default="default",
        choices=sorted(P4_BUILDS),
        help="the committed P4 build to push (compact: BMv2 takes 0.8 GB instead of 3.8)",
    )
    run.add_argument("--p4info", type=Path, help="P4Info (default: the --build's)")
    run.add_argument("--device-config", type=Path, help="BMv2 JSON (default: the --build's)")
    run.set_defaults(handler=_run)

    user = sub.add_parser(
        "console-user",
        help="print a web console user line (NAME:HASH) for --console-users",
        description="Reads the password twice from the terminal (or once from standard input "
        "with --stdin) and prints NAME:scrypt$... for the controller's --console-users file.",
    )
    user.add_argument("name", help="the user's name (no ':')")
    user.add_argument("--stdin", action="store_true", help="read the password from stdin")
    user.set_defaults(handler=_console_user)

    def client(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = sub.add_parser(name, help=help_text)
        _client_options(parser)
        return parser

    status = client("status", "the controller's status (NPMs, sessions, SPMs, policy)")
    status.add_argument("--hsm", action="store_true", help="the classifier banks and statistics")
    status.set_defaults(handler=_status)
    sessions = client("sessions", "installed sessions")
    sessions.add_argument("--npm", help="only this NPM's sessions")
    sessions.add_argument("--limit", type=int, default=50, help="at most this many sessions")
    sessions.add_argument("--delete", type=int, metavar="ID", help="remove session ID")
    sessions.set_defaults(handler=_sessions)
    spms = client("spms", "SPMs: status, weight, load")
    spms.set_defaults(handler=_spms)
    ipsec = client("ipsec", "IPsec tunnels: state, SAs, counters, last error")
    ipsec.add_argument("--sas", action="store_true", help="also list each tunnel's SAs")
    ipsec.set_defaults(handler=_ipsec)
    counters = client("counters", "what the NPMs counted: drops by reason, flow events, ports")
    counters.add_argument("--all", action="store_true", help="also the reasons and events at 0")
    counters.set_defaults(handler=_counters)
    alerts = client("alerts", "latest alerts from the SPMs")
    alerts.add_argument("--limit", type=int, default=20, help="at most this many alerts")
    alerts.set_defaults(handler=_alerts)

    policy = sub.add_parser("policy", help="policy versions: apply, diff, show, validate")
    policy_sub = policy.add_subparsers(dest="policy_command", required=True)
    apply = policy_sub.add_parser("apply", help="push a new policy version (hitless)")
    _client_options(apply)
    apply.add_argument("file", type=Path, help="the policy file (YAML)")
    apply.set_defaults(handler=_policy_apply)
    diff = policy_sub.add_parser("diff", help="what applying FILE would change")
    _client_options(diff)
    diff.add_argument("file", type=Path, help="the policy file (YAML)")
    diff.set_defaults(handler=_policy_diff)
    show = policy_sub.add_parser("show", help="the running policy (or the version list)")
    _client_options(show)
    show.add_argument(
        "--versions", action="store_true", help="list the stored versions instead, newest first"
    )
    show.set_defaults(handler=_policy_show)
    validate = policy_sub.add_parser("validate", help="check a policy file locally")
    validate.add_argument("file", type=Path, help="the policy file (YAML)")
    validate.set_defaults(handler=_policy_validate)


def _client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--api",
        default=os.environ.get("OPENGATE_API", DEFAULT_API),
        help="URL of the controller's REST API ($OPENGATE_API sets the default)",
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        default=Path(os.environ.get("OPENGATE_TOKEN_FILE", str(DEFAULT_TOKEN_FILE))),
        help="the API token's file ($OPENGATE_TOKEN_FILE sets the default; $OPENGATE_TOKEN, "
        "if set, is the token itself)",
    )
    parser.add_argument("--json", action="store_true", help="print the API's JSON")


# -- the controller process ---------------------------------------------------------------------


def parse_npm(text: str) -> NpmAddress:
    name, eq, rest = text.partition("=")
    if not eq or not name or not rest:
        raise ConfigError(f"--npm {text!r}: expected NAME=HOST:PORT[,DEVICE_ID]", field="--npm")
    address, _, device = rest.partition(",")
    if ":" not in address:
        raise ConfigError(f"--npm {text!r}: the address needs a port", field="--npm")
    if device and not device.isdigit():
        raise ConfigError(f"--npm {text!r}: device id must be a number", field="--npm")
    return NpmAddress(name, address, int(device) if device else 1)


def read_or_create_token(path: Path) -> str:
    if path.exists():
        token = path.read_text().strip()
        if not token:
            raise ConfigError("the token file is empty", path=str(path))
        return token
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    path.write_text(token + "\n")
    path.chmod(0o600)
    LOG.warning("created API token in %s", path)
    return token


def _run(args: argparse.Namespace) -> int:
    state_dir: Path = args.state_dir
    state_dir.mkdir(parents=True, exist_ok=True)
    npms = tuple(parse_npm(text) for text in args.npm)
    if len({n.name for n in npms}) != len(npms):
        raise ConfigError("two --npm options have the same name", field="--npm")
    program = p4_program_dir(args.build)
    pipeline = Pipeline(
        args.p4info or program / "opengate.p4info.txtpb",
        args.device_config or program / "opengate.json",
    )
    options = ControllerOptions(
        npms=npms,
        policy_path=args.policy,
        db_url=args.db or f"sqlite:///{(state_dir / 'opengate.db').resolve()}",
        election_id=args.election_id,
        state_dir=state_dir,
        pipeline=pipeline,
    )
    controller = Controller(options)
    servers: list[ApiServer] = []
    signal.signal(signal.SIGTERM, lambda *_: controller.request_stop())
    signal.signal(signal.SIGINT, lambda *_: controller.request_stop())
    try:
        controller.start()
        if args.api != "off":
            host, _, port = args.api.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(f"--api {args.api!r}: expected HOST:PORT", field="--api")
            token = read_or_create_token(args.token_file or state_dir / "api-token")
            console = None
            if args.console == "on":
                users = load_users(args.console_users) if args.console_users else {}
                console = Console(controller, token, users, tuple(args.rules_file))
            servers.append(ApiServer(controller, host, int(port), token, console=console))
            if args.api_socket is not None:
                args.api_socket.unlink(missing_ok=True)
                servers.append(ApiServer(controller, host, 0, token, uds=str(args.api_socket)))
            for server in servers:
                server.start()
        controller.run_forever()
    finally:
        for server in servers:
            server.stop()
        controller.stop()
    return 0


def _console_user(args: argparse.Namespace) -> int:
    if ":" in args.name or not args.name.strip():
        raise ConfigError("a user name must not be empty or contain ':'", field="name")
    if args.stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            raise ConfigError("the two passwords differ")
    if len(password) < 8:
        raise ConfigError("a console password needs 8 characters or more")
    print(f"{args.name}:{hash_password(password)}")
    return 0


# -- the client commands ------------------------------------------------------------------------


class ApiError(Exception):
    pass


def _client(args: argparse.Namespace) -> httpx.Client:
    token = os.environ.get("OPENGATE_TOKEN")
    if not token:
        path: Path = args.token_file
        try:
            token = path.read_text().strip()
        except OSError as error:
            raise ConfigError(
                f"cannot read the API token: {error.strerror} (use --token-file or "
                "$OPENGATE_TOKEN)",
                path=str(path),
            ) from None
    return httpx.Client(
        base_url=args.api, headers={"Authorization": f"Bearer {token}"}, timeout=130.0
    )


def _request(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    with _client(args) as client:
        try:
            response = client.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise ApiError(f"cannot reach the controller at {args.api}: {error}") from None
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        if isinstance(detail, list):
            detail = "; ".join(
                f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg')}" for d in detail
            )
        raise ApiError(f"{response.status_code}: {detail}")
    return response.json()


def _client_command(args: argparse.Namespace, run: Any) -> int:
    try:
        run()
    except ApiError as error:
        print(f"opengate: error: {error}", file=sys.stderr)
        return 1
    return 0


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def _table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _status(args: argparse.Namespace) -> int:
    def run() -> None:
        if args.hsm:
            hsm = _request(args, "GET", "/api/v1/hsm")
            if args.json:
                _print_json(hsm)
                return
            for npm, item in sorted(hsm.items()):
                counts = ", ".join(f"bank {b}: {n}" for b, n in sorted(item["entries"].items()))
                print(f"{npm}: active bank {item['active_bank']} ({counts})")
                stats = item.get("stats") or {}
                for table in stats.get("tables", []):
                    print(f"  {table['table']}: {table['entries']} entries, {table['bytes']} bytes")
            return
        data = _request(args, "GET", "/api/v1/status")
        if args.json:
            _print_json(data)
            return
        policy = data["policy"]
        print(f"policy: version {policy['version']} ({policy['name']}, {policy['sha256'][:12]})")
        print(f"uptime: {data['uptime_seconds']}s, election id {data['election_id']}")
        s = data["sessions"]
        print(
            f"sessions: {s['active']} active, {s['installed']} installed, {s['removed']} removed, "
            f"{s['duplicates']} duplicate requests, {s['failed']} failed"
        )
        if s.get("rematch_pending"):
            print(f"  {s['rematch_pending']} open sessions still being held to the applied policy")
        _table(
            [
                [
                    n,
                    v["address"],
                    v["role"],
                    f"{v['tag_base']:#06x}",
                    str(v["classifier_bank"]),
                    str(v["sessions"]),
                ]
                for n, v in sorted(data["npms"].items())
            ],
            ["NPM", "ADDRESS", "ROLE", "TAGS", "BANK", "SESSIONS"],
        )
        _table(
            [
                [n, v["status"], str(v["weight"]), str(v["load"])]
                for n, v in sorted(data["spms"].items())
            ],
            ["SPM", "STATUS", "WEIGHT", "LOAD"],
        )

    return _client_command(args, run)


def _sessions(args: argparse.Namespace) -> int:
    def run() -> None:
        if args.delete is not None:
            _print_json(_request(args, "DELETE", f"/api/v1/sessions/{args.delete}"))
            return
        params: dict[str, Any] = {"limit": args.limit}
        if args.npm:
            params["npm"] = args.npm
        data = _request(args, "GET", "/api/v1/sessions", params=params)
        if args.json:
            _print_json(data)
            return
        rows = []
        for s in data["sessions"]:
            nat = ""
            if s["nat"] != "NONE":
                nat = f"{s['nat']} {s['nat_addr']}:{s['nat_port']}"
            rows.append(
                [
                    str(s["id"]),
                    s["npm"],
                    _proto(s["proto"]),
                    _endpoint(s["src"], s["sport"]),
                    _endpoint(s["dst"], s["dport"]),
                    str(s["class_id"]),
                    str(s["spm_port"] or "-"),
                    nat,
                    s["state"],
                    {True: "exact", False: "slot"}.get(s.get("entries"), "-"),
                ]
            )
        _table(
            rows,
            ["ID", "NPM", "PROTO", "SOURCE", "DESTINATION", "CLASS", "SPM", "NAT", "STATE", "IN"],
        )
        print(f"({len(rows)} of {data['total']})")

    return _client_command(args, run)


def _proto(number: int) -> str:
    return {1: "icmp", 6: "tcp", 17: "udp", 58: "icmpv6"}.get(number, str(number))


def _endpoint(address: str, port: int) -> str:
    """`10.0.1.10:5000`, `[2001:db8:1::10]:5000`."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _spms(args: argparse.Namespace) -> int:
    def run() -> None:
        data = _request(args, "GET", "/api/v1/spms")
        if args.json:
            _print_json(data)
            return
        rows = []
        for name, s in sorted(data["spms"].items()):
            report = s.get("report") or {}
            rows.append(
                [
                    name,
                    str(s["port"]),
                    s["status"],
                    f"{s['weight']}/{s['max_weight']}",
                    str(report.get("cpu", "-")),
                    str(report.get("queue_depth", "-")),
                    str(report.get("queue_dropped", "-")),
                    str(report.get("flows", "-")),
                ]
            )
        _table(rows, ["SPM", "PORT", "STATUS", "WEIGHT", "CPU%", "QUEUE", "DROPPED", "FLOWS"])

    return _client_command(args, run)


def _counters(args: argparse.Namespace) -> int:
    def run() -> None:
        data = _request(args, "GET", "/api/v1/counters")
        if args.json:
            _print_json(data)
            return
        for npm, counts in data["npms"].items():
            drops = [
                [reason, str(c["packets"]), str(c["bytes"])]
                for reason, c in counts["drops"].items()
                if args.all or c["packets"]
            ]
            print(f"NPM {npm}: packets dropped")
            _table(drops or [["(none)", "0", "0"]], ["REASON", "PACKETS", "BYTES"])
            events = [
                [event, str(n)] for event, n in counts["flow_events"].items() if args.all or n
            ]
            if counts["flow_events"]:
                print(f"NPM {npm}: data-plane session events")
                _table(events or [["(none)", "0"]], ["EVENT", "COUNT"])
            ports = [
                [port, str(c["rx_packets"]), str(c["rx_bytes"]), str(c["tx_packets"]),
                 str(c["tx_bytes"])]
                for port, c in counts["ports"].items()
            ]  # fmt: skip
            print(f"NPM {npm}: ports")
            _table(ports, ["PORT", "RX PACKETS", "RX BYTES", "TX PACKETS", "TX BYTES"])

    return _client_command(args, run)


def _ipsec(args: argparse.Namespace) -> int:
    def run() -> None:
        data = _request(args, "GET", "/api/v1/ipsec")
        if args.json:
            _print_json(data)
            return
        if not data.get("enabled"):
            print("IPsec: not configured (the policy has no ipsec section)")
            return
        spms = ", ".join(
            f"{s['name']} ({'active' if s['active'] else 'up' if s['up'] else 'down'}"
            + (f", ESP in {s['esp']}" if s.get("esp") else "")
            + ")"
            for s in data["spms"]
        )
        print(f"IPsec address {data['address']}, pool {data['pool']}: {spms}")
        rows = []
        for t in data["tunnels"]:
            rows.append(
                [
                    t["name"],
                    t["peer"],
                    ",".join(t["remote_subnets"]),
                    t["state"],
                    t["spm"] or "-",
                    f"{t['packets_in']}/{t['packets_out']}",
                    f"{t['bytes_in']}/{t['bytes_out']}",
                    str(t["rekeys"]),
                ]
            )
        _table(
            rows,
            ["TUNNEL", "PEER", "REMOTE", "STATE", "SPM", "PKTS IN/OUT", "BYTES IN/OUT", "REKEYS"],
        )
        for t in data["tunnels"]:
            if t.get("last_error"):
                print(f"{t['name']}: error: {t['last_error']}")
            if args.sas:
                for sa in t.get("sas", []):
                    print(_sa_line(sa))
                    for child in sa.get("children", []):
                        print(_child_line(child))

    return _client_command(args, run)


def _sa_line(sa: dict[str, Any]) -> str:
    return (
        f"  IKE SA #{sa['unique_id']} {sa['state']} {sa['local']} -> {sa['remote']} "
        f"{sa['proposal']}, up {sa['established_s']} s"
    )


def _child_line(c: dict[str, Any]) -> str:
    return (
        f"    CHILD SA #{c['unique_id']} {c['state']} SPI in {c['spi_in']} out {c['spi_out']} "
        f"{c['encryption']}, {c['bytes_in']}/{c['bytes_out']} bytes, rekey in {c['rekey_in_s']} s"
    )


def _alerts(args: argparse.Namespace) -> int:
    def run() -> None:
        data = _request(args, "GET", "/api/v1/alerts", params={"limit": args.limit})
        if args.json:
            _print_json(data)
            return
        rows = [
            [
                str(a["id"]),
                a["received_at"][:19],
                a["spm"],
                str(a["sid"]),
                a["action"],
                f"{a['src']}:{a['sport']} > {a['dst']}:{a['dport']}",
                a["msg"][:60],
            ]
            for a in data["alerts"]
        ]
        _table(rows, ["ID", "RECEIVED", "SPM", "SID", "ACTION", "FLOW", "MESSAGE"])

    return _client_command(args, run)


def _policy_body(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"cannot read: {error.strerror}", path=str(path)) from None
    return {"path": str(path.resolve()), "text": text, "source": "cli"}


def _policy_apply(args: argparse.Namespace) -> int:
    def run() -> None:
        data = _request(args, "POST", "/api/v1/policy/apply", json=_policy_body(args.file))
        if args.json:
            _print_json(data)
            return
        print(f"policy version {data['version']} applied ({data['sha256'][:12]})")
        for npm, summary in sorted(data["npms"].items()):
            print(f"  {npm}: {json.dumps(summary, sort_keys=True)}")
        changed = {k: v for k, v in data.get("rematched", {}).items() if v}
        if changed:
            counts = ", ".join(f"{n} {outcome}" for outcome, n in changed.items())
            print(f"  open sessions held to it: {counts}")
        if data.get("rematch_pending"):
            print(
                f"  {data['rematch_pending']} more open sessions are being held to it "
                "(`opengate status` says how many are left)"
            )

    return _client_command(args, run)


def _policy_diff(args: argparse.Namespace) -> int:
    def run() -> None:
        data = _request(args, "POST", "/api/v1/policy/diff", json=_policy_body(args.file))
        if args.json:
            _print_json(data)
            return
        if not data["changed"]:
            print("no change: this is the running policy")
        sys.stdout.write(data["text_diff"])
        for npm, summary in sorted(data["npms"].items()):
            print(f"{npm} would write: {json.dumps(summary, sort_keys=True)}")

    return _client_command(args, run)


def _policy_show(args: argparse.Namespace) -> int:
    def run() -> None:
        if args.versions:
            data = _request(args, "GET", "/api/v1/policy/versions")
            if args.json:
                _print_json(data)
                return
            _table(
                [
                    [
                        str(v["version"]),
                        v["created_at"][:19],
                        v["status"],
                        v["name"],
                        v["sha256"][:12],
                        v["source"],
                        (v["error"] or "")[:50],
                    ]
                    for v in data["versions"]
                ],
                ["VERSION", "CREATED", "STATUS", "NAME", "SHA256", "SOURCE", "ERROR"],
            )
            return
        data = _request(args, "GET", "/api/v1/policy")
        if args.json:
            _print_json(data)
            return
        print(f"# version {data['version']}: {json.dumps(data['summary'], sort_keys=True)}")
        sys.stdout.write(data["text"])

    return _client_command(args, run)


def _policy_validate(args: argparse.Namespace) -> int:
    policy = load_policy(args.file)
    print(f"{args.file}: valid: {json.dumps(policy.summary(), sort_keys=True)}")
    return 0
