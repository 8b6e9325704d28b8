"""The web console without a browser: nothing of it answers without a log-in, logging in and
out, the data behind each page (sessions paged, sorted and searched over 50,000 rows; alerts with
their rule; policy errors at file:line; block; drain and restore)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import time
from pathlib import Path

import pytest

from controller.web import PREFIX, PUBLIC
from controller.web.auth import COOKIE, check_password, hash_password, load_users
from opengate import p4constants as pc
from opengate.errors import ConfigError
from tests.controller.conftest import wait_until
from tests.controller.flows import H1, OUT1, SPM1_MAC, key, request
from tests.switch_double import SwitchDouble
from tests.web.conftest import PASSWORD, TOKEN, USER, Served


def console_routes(served: Served) -> list[tuple[str, str]]:
    """(method, path) of every console route, path parameters filled in."""
    out = []
    assert served.server.console is not None and served.server.console.router is not None
    for route in served.server.console.router.routes:
        path = getattr(route, "path", "")
        if not path.startswith(PREFIX):
            continue
        filled = (
            path.replace("{name}", "spm1")
            .replace("{session_id}", "1")
            .replace("{sid}", "1")
            .replace("{version}", "1")
        )
        for method in sorted(getattr(route, "methods", ()) or ()):
            if method != "HEAD":
                out.append((method, filled))
    return out


def test_every_console_route_refuses_a_request_without_a_login(served: Served) -> None:
    routes = console_routes(served)
    assert len(routes) >= 20, routes
    with served.client() as anonymous:
        for method, path in [*routes, ("GET", f"{PREFIX}/static/console.js")]:
            if path in PUBLIC:
                continue
            for cookies in ({}, {COOKIE: "forged"}):
                anonymous.cookies.clear()
                for name, value in cookies.items():
                    anonymous.cookies.set(name, value, path=PREFIX)
                response = anonymous.request(method, path)
                if method == "GET" and "/data/" not in path:
                    assert response.status_code == 303, (method, path)
                    assert response.headers["location"].startswith(f"{PREFIX}/login?next=")
                else:
                    assert response.status_code == 401, (method, path)
                    assert response.json() == {"detail": "log in first"}


def test_the_api_token_opens_the_data_as_the_api_does(served: Served) -> None:
    with served.client() as client:
        response = client.get(
            f"{PREFIX}/data/sessions", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert response.status_code == 200
        assert client.get("/api/v1/status").status_code == 401  # the API still wants its token


def test_log_in_with_the_token_or_a_user_and_log_out(served: Served) -> None:
    with served.client() as client:
        form = client.get(f"{PREFIX}/login")
        assert form.status_code == 200 and 'for="secret"' in form.text
        for user, secret in (("", "wrong"), (USER, "wrong"), ("nobody", PASSWORD), (USER, TOKEN)):
            response = client.post(f"{PREFIX}/login", data={"user": user, "secret": secret})
            assert response.status_code == 401, (user, secret)
            assert "Wrong token, user name or password" in response.text
            assert COOKIE not in response.cookies
        response = client.post(
            f"{PREFIX}/login",
            data={"user": USER, "secret": PASSWORD, "next": f"{PREFIX}/sessions"},
        )
        assert response.status_code == 303
        assert response.headers["location"] == f"{PREFIX}/sessions"
        cookie = response.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and f"Path={PREFIX}" in cookie
        page = client.get(f"{PREFIX}/sessions")
        assert page.status_code == 200 and ">ops<" in page.text
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert client.post(f"{PREFIX}/logout").status_code == 303
        client.cookies.clear()
        client.cookies.set(COOKIE, response.cookies[COOKIE], path=PREFIX)
        assert client.get(f"{PREFIX}/sessions").status_code == 303  # that session has ended


def test_login_redirects_only_within_the_console(served: Served) -> None:
    with served.client() as client:
        for target in ("https://elsewhere.example/", "//elsewhere.example/", "/api/v1/status"):
            response = client.post(
                f"{PREFIX}/login", data={"user": "", "secret": TOKEN, "next": target}
            )
            assert response.headers["location"] == f"{PREFIX}/"


def test_a_change_with_the_cookie_needs_the_console_header(served: Served) -> None:
    with served.logged_in() as client:
        del client.headers["X-OpenGate-Console"]
        response = client.post(f"{PREFIX}/data/spms/spm1/drain")
        assert response.status_code == 403
        assert served.controller.spms is not None
        assert not served.controller.spms.states["spm1"].drained


def test_passwords_are_kept_as_salted_scrypt_hashes(tmp_path: Path) -> None:
    stored = hash_password(PASSWORD)
    assert stored.startswith("scrypt$") and PASSWORD not in stored
    assert stored != hash_password(PASSWORD)  # salted
    assert check_password(PASSWORD, stored) and not check_password("other", stored)
    users = tmp_path / "users"
    users.write_text(f"# console users\n{USER}:{stored}\n")
    assert load_users(users) == {USER: stored}
    users.write_text(f"{USER}:{PASSWORD}\n")
    with pytest.raises(ConfigError) as error:
        load_users(users)
    assert f"{users}:1:" in str(error.value)


def _session_rows(count: int) -> list[dict[str, object]]:
    base = int(ipaddress.IPv4Address("10.1.0.0"))
    out = int(ipaddress.IPv4Address(OUT1))
    now = dt.datetime.now(dt.UTC)
    rows = []
    for i in range(count):
        src = base + i // 1000
        rows.append(
            {
                "id": 100_000 + i,
                "npm": "npm1",
                "proto": pc.IP_PROTO_TCP if i % 3 else pc.IP_PROTO_UDP,
                "src": src,
                "dst": out,
                "sport": 10_000 + i % 1000,
                "dport": 443,
                "r_src": out,
                "r_dst": src,
                "r_sport": 443,
                "r_dport": 10_000 + i % 1000,
                "class_id": 1,
                "spm_port": 3,
                "spm_mac": SPM1_MAC,
                "nat_kind": 0,
                "nat_addr": 0,
                "nat_port": 0,
                "acl_rule": 0,
                "ingress_port": 1,
                "state": "blocked" if i % 1000 == 7 else "active",
                "idle_timeout": 30.0,
                "created_at": now - dt.timedelta(seconds=i),
            }
        )
    return rows


def test_sessions_page_over_50000_sessions(served: Served) -> None:
    served.controller.db.insert_sessions(_session_rows(50_000))
    with served.logged_in() as client:
        timings = []
        for _ in range(5):
            began = time.perf_counter()
            page = client.get(f"{PREFIX}/sessions")
            data = client.get(f"{PREFIX}/data/sessions", params={"page": 400, "size": 50})
            timings.append(time.perf_counter() - began)
            assert page.status_code == 200 and data.status_code == 200
        body = data.json()
        assert body["total"] == 50_000
        assert [s["id"] for s in body["sessions"]] == list(range(119_950, 120_000))
        print(
            f"\nsessions page + its data (page 400 of 1,000), 50,000 sessions: "
            f"best {min(timings) * 1000:.1f} ms, worst {max(timings) * 1000:.1f} ms"
        )

        found = client.get(f"{PREFIX}/data/sessions", params={"q": "10.1.0.3:10005"}).json()
        assert [s["id"] for s in found["sessions"]] == [103_005]
        assert found["sessions"][0]["src"] == "10.1.0.3"
        assert found["sessions"][0]["class"] is not None and found["sessions"][0]["spm"] == "spm1"
        blocked = client.get(
            f"{PREFIX}/data/sessions", params={"q": "blocked udp", "size": 500}
        ).json()
        assert blocked["total"] == len([i for i in range(50_000) if i % 1000 == 7 and i % 3 == 0])
        assert {(s["state"], s["proto"]) for s in blocked["sessions"]} == {("blocked", "udp")}
        newest = client.get(
            f"{PREFIX}/data/sessions", params={"sort": "created", "order": "desc", "size": 3}
        ).json()
        assert [s["id"] for s in newest["sessions"]] == [100_000, 100_001, 100_002]
        by_source = client.get(
            f"{PREFIX}/data/sessions", params={"sort": "src", "order": "desc", "size": 1}
        ).json()
        assert by_source["sessions"][0]["src"] == "10.1.0.49"
        assert client.get(f"{PREFIX}/data/sessions", params={"sort": "x"}).status_code == 422


def test_block_a_session_from_the_console(served: Served, switch: SwitchDouble) -> None:
    controller = served.controller
    flow = key(H1, OUT1, pc.IP_PROTO_TCP, 40000, 80)
    switch.inject_digest(
        pc.D_SESSION_REQUEST_T, [request(flow, ids_class=1, spm_port=3, spm_mac=SPM1_MAC)]
    )
    wait_until("the session", lambda: len(switch.table_entries(pc.T_SESSION)) == 2)
    with served.logged_in() as client:
        (row,) = wait_until(
            "the session in the DB",
            lambda: client.get(f"{PREFIX}/data/sessions").json()["sessions"],
        )
        assert (row["src"], row["sport"], row["state"]) == (H1, 40000, "active")
        assert row["bytes"] == 0  # read from the session table's direct counter
        result = client.post(f"{PREFIX}/data/sessions/{row['id']}/block")
        assert result.json() == {"blocked": row["id"]}
        schema = controller.npms["npm1"].schema
        actions = {
            schema.actions.get_id(e.action.action.action_id).name
            for e in switch.table_entries(pc.T_SESSION)
        }
        assert actions == {pc.A_SESSION_BLOCK}
        assert client.post(f"{PREFIX}/data/sessions/999/block").status_code == 404


def test_alerts_are_filtered_and_link_to_their_rule(served: Served) -> None:
    controller = served.controller
    for sid, classtype, src in (
        (1000001, "policy-violation", H1),
        (1000002, "web-application-attack", "10.0.1.11"),
        (1000001, "policy-violation", "10.0.1.11"),
    ):
        controller.db.add_alert(
            spm="spm1",
            sid=sid,
            msg=f"rule {sid}",
            classtype=classtype,
            action="alert",
            proto="tcp",
            src=src,
            dst=OUT1,
            sport=40000,
            dport=80,
        )
    with served.logged_in() as client:
        everything = client.get(f"{PREFIX}/data/alerts").json()
        assert [a["sid"] for a in everything["alerts"]] == [1000001, 1000002, 1000001]
        assert everything["classtypes"] == ["policy-violation", "web-application-attack"]
        by_sid = client.get(f"{PREFIX}/data/alerts", params={"sid": 1000001}).json()
        assert by_sid["total"] == 2
        by_host = client.get(f"{PREFIX}/data/alerts", params={"host": H1}).json()
        assert [a["src"] for a in by_host["alerts"]] == [H1]
        by_class = client.get(
            f"{PREFIX}/data/alerts", params={"classtype": "web-application-attack"}
        ).json()
        assert [a["sid"] for a in by_class["alerts"]] == [1000002]
        rule = client.get(f"{PREFIX}/data/rules/1000001").json()
        assert "sid:1000001;" in rule["text"] and rule["path"].endswith("lab.rules")
        assert client.get(f"{PREFIX}/data/rules/7").status_code == 404


def test_policy_errors_name_the_file_and_line_and_a_good_one_applies(
    served: Served, lab: Path
) -> None:
    text = lab.read_text()
    with served.logged_in() as client:
        running = client.get(f"{PREFIX}/data/policy").json()
        assert running["text"] == text and running["version"] == 1
        broken = text.replace("role: outside", "role: outsid")
        response = client.post(
            f"{PREFIX}/data/policy/apply", json={"text": broken, "name": "upload.yaml"}
        )
        assert response.status_code == 422
        error = response.json()
        assert (Path(error["path"]).name, error["line"], error["field"]) == (
            "upload.yaml",
            11,
            "ports[1].role",
        )
        changed = text.replace("closing_linger: 0.2", "closing_linger: 1")
        diff = client.post(f"{PREFIX}/data/policy/diff", json={"text": changed}).json()
        assert "+  closing_linger: 1" in diff["text_diff"]
        applied = client.post(
            f"{PREFIX}/data/policy/apply", json={"text": changed, "name": lab.name}
        )
        assert applied.json()["version"] == 2
        versions = client.get(f"{PREFIX}/data/policy").json()["versions"]
        assert [(v["version"], v["status"]) for v in versions] == [
            (2, "applied"),
            (1, "superseded"),
        ]
        assert versions[0]["source"].startswith("console")
        old = client.get(f"{PREFIX}/data/policy/versions/1").json()
        assert old["text"] == text
        hsm = client.get(f"{PREFIX}/data/hsm").json()
        assert hsm["npm1"]["lookups_per_packet"] is not None


def test_drain_and_restore_an_spm(served: Served) -> None:
    pool = served.controller.spms
    assert pool is not None
    with served.logged_in() as client:
        drained = client.post(f"{PREFIX}/data/spms/spm1/drain").json()
        assert drained == {"spm": "spm1", "drained": True, "weight": 0}
        spms = {s["name"]: s for s in client.get(f"{PREFIX}/data/spms").json()["spms"]}
        assert spms["spm1"]["drained"] is True and spms["spm1"]["weight"] == 0
        # a load report does not bring a drained SPM's weight back
        api = {"Authorization": f"Bearer {TOKEN}"}
        client.post("/api/v1/spm/spm1/load", json={"cpu": 5, "queue_depth": 0}, headers=api)
        assert pool.states["spm1"].weight == 0
        restored = client.post(f"{PREFIX}/data/spms/spm1/restore").json()
        assert restored["drained"] is False and restored["weight"] > 0
        assert client.post(f"{PREFIX}/data/spms/nope/drain").status_code == 404


def test_overview_samples_sessions_and_counters(served: Served) -> None:
    with served.logged_in() as client:
        data = wait_until(
            "two samples",
            lambda: (d := client.get(f"{PREFIX}/data/overview").json())["samples"][1:] and d,
        )
        sample = data["samples"][-1]
        assert sample["counters_read"] is True  # the switch double's counters, over P4Runtime
        assert {"sessions", "new_per_s", "rx_per_s", "drops_per_s", "alerts_per_min"} <= set(sample)
        (npm,) = data["npms"]
        assert [p["port"] for p in npm["ports"]] == [1, 2, 3, 4]
        assert all(p["rx"] == 0 and p["tx"] == 0 for p in npm["ports"])  # read, nothing sent
        assert {s["name"] for s in data["spms"]} == {"spm1", "spm2"}
