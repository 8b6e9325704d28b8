"""The web console in a real browser: Debian's chromium, headless, driven by Selenium through
Debian's chromedriver, against the gateway topology with real traffic (tests/e2e's fixtures).

Selenium rather than Playwright: Playwright's Python package wants its own browser builds,
which are downloaded at install time (these machines cannot), while Selenium drives the
distribution's chromium through the distribution's chromedriver of the same version.

Each test checks that the browser logged no error (console errors, failed loads)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from opengate import p4constants as pc
from opengate.target import repo_root
from tests.helpers import wait_for
from topo.net import GatewayNetwork, stop_family

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

OUT1 = "198.51.100.20"
H1 = "10.0.1.10"
# docs/console.png is this test's screenshot: OPENGATE_SCREENSHOT=docs/console.png updates it;
# by default a run leaves the committed picture alone and writes run/console.png.
SCREENSHOT = repo_root() / os.environ.get("OPENGATE_SCREENSHOT", "run/console.png")
WAIT = 30.0


def _chromium() -> tuple[str, str]:
    browser = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        missing = " and ".join(
            name
            for name, found in (("chromium", browser), ("chromedriver", driver))
            if found is None
        )
        pytest.skip(
            f"{missing} not installed: the console's browser tests need Debian's chromium and "
            "chromium-driver (make setup installs them)"
        )
    return browser, driver


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    browser, chromedriver = _chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in (
        "--headless=new",
        "--no-sandbox",  # chromium refuses to run as root with its sandbox
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1440,1000",
        "--lang=en",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    chrome = webdriver.Chrome(options=options, service=Service(chromedriver))
    try:
        yield chrome
    finally:
        chrome.quit()


class Console:
    """The console of a running topology in the browser."""

    def __init__(self, driver: Any, gateway: GatewayNetwork) -> None:
        self.driver = driver
        self.gateway = gateway
        self.base = f"http://{gateway.api_address}/console"
        # log lines a test expects (Chromium logs every 4xx response as an error)
        self.expected: list[re.Pattern[str]] = []

    def open(self, page: str) -> None:
        url = f"{self.base}/{page}".rstrip("/")
        for _ in range(3):  # a navigation may race a redirect still under way (seen under load)
            self.driver.get(url)
            if self.driver.current_url.split("?")[0].rstrip("/") == url:
                return

    def find(self, css: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return list(self.driver.find_elements(By.CSS_SELECTOR, css))

    def wait(self, what: str, condition: Any, timeout: float = WAIT) -> Any:
        """Poll `condition` (given the driver) until truthy; fail naming `what`."""
        from selenium.common.exceptions import (
            NoSuchElementException,
            StaleElementReferenceException,
        )

        def check() -> Any:
            try:
                return condition(self.driver)
            # not there yet, or the page redrew what we looked at
            except (NoSuchElementException, StaleElementReferenceException):
                return None

        try:
            return wait_for(what, check, timeout)
        except pytest.fail.Exception:
            log = [e["message"] for e in self.driver.get_log("browser")]
            pytest.fail(f"timed out waiting for {what} on {self.driver.current_url}; log: {log}")

    def text(self, css: str) -> str:
        return str(self.find(css).text)

    def log_in(self) -> None:
        """With the keyboard only: type the token, Enter."""
        from selenium.webdriver.common.keys import Keys

        self.driver.delete_all_cookies()
        self.open("")
        self.wait("the login page", lambda d: "/console/login" in d.current_url)
        secret = self.find("#secret")
        assert self.driver.switch_to.active_element == secret  # focus starts on the token
        secret.send_keys(self.gateway.api_token, Keys.ENTER)
        self.wait("the overview", lambda d: d.current_url.rstrip("/").endswith("/console"))

    def errors(self) -> list[str]:
        return [
            entry["message"]
            for entry in self.driver.get_log("browser")
            if entry["level"] in ("SEVERE", "ERROR")
            and not any(p.search(entry["message"]) for p in self.expected)
        ]


@pytest.fixture
def console(driver: Any, gateway: GatewayNetwork) -> Iterator[Console]:
    page = Console(driver, gateway)
    page.errors()  # what earlier tests left in the log
    page.log_in()
    yield page
    assert page.errors() == []


def _int(text: str) -> int:
    return int(text.replace(",", "")) if re.fullmatch(r"[\d,]+", text) else -1


def _udp_flows(gateway: GatewayNetwork, first_port: int, count: int) -> None:
    """`count` UDP flows from h1 to out1's echo service, each answered."""
    script = (
        "import socket\n"
        f"for port in range({first_port}, {first_port + count}):\n"
        "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "    s.bind(('', port)); s.settimeout(5)\n"
        f"    s.sendto(b'console', ('{OUT1}', 7)); s.recv(100); s.close()\n"
    )
    result = gateway.run("h1", f'python3 -c "{script}"', timeout=120)
    assert result.returncode == 0, result.output


def test_login_page_and_every_control_is_labelled(console: Console) -> None:
    """Every form control of every page has a label; the pages are keyboard-reachable."""
    for page in ("", "sessions", "alerts", "policy", "spms"):
        console.open(page)
        console.wait(f"page {page or 'overview'}", lambda d: d.find_element("css selector", "h1"))
        unlabelled = console.driver.execute_script(
            "return [...document.querySelectorAll('input:not([type=hidden]), select, textarea')]"
            ".filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label'))"
            ".map(e => e.id || e.outerHTML)"
        )
        assert unlabelled == [], page
        nameless = console.driver.execute_script(
            "return [...document.querySelectorAll('button, a')]"
            ".filter(e => !(e.getAttribute('aria-label') || e.textContent.trim()))"
            ".map(e => e.outerHTML)"
        )
        assert nameless == [], page
    # the skip link is the first thing the keyboard reaches
    from selenium.webdriver.common.keys import Keys

    console.open("sessions")
    console.find("body").send_keys(Keys.TAB)
    assert console.driver.switch_to.active_element.text == "Skip to the content"


def test_live_session_count_moves_with_traffic(console: Console) -> None:
    gateway = console.gateway
    console.open("")
    before = console.wait(
        "a session count", lambda d: (n := _int(console.text("#kpi-sessions"))) >= 0 and (n,)
    )[0]
    page_id = console.driver.execute_script("return performance.timeOrigin")
    _udp_flows(gateway, 31000, 24)
    # the count on the page moves without a reload (the same document, updated in place)
    console.wait(
        "the page's session count to grow by the new flows",
        lambda d: _int(console.text("#kpi-sessions")) >= before + 24,
    )
    assert console.driver.execute_script("return performance.timeOrigin") == page_id
    console.wait(
        "the sessions chart to draw a line",
        lambda d: console.find_all("#chart-sessions polyline"),
    )
    console.wait(
        "new sessions per second in the chart",
        lambda d: console.driver.execute_script(
            "return document.querySelector('#chart-new polyline')"
            ".getAttribute('points').split(' ').length > 1"
        ),
    )
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    console.driver.save_screenshot(str(SCREENSHOT))


def test_find_a_session_and_block_it(console: Console, tmp_path: Path) -> None:
    """A ping runs; its session is found by searching, blocked from the page, and the replies
    stop while the NPM counts the blocked session's drops."""
    gateway = console.gateway
    log = tmp_path / "ping.log"
    with log.open("wb") as out:
        ping = gateway.net.get("h1").popen(
            ["ping", "-n", "-i", "0.2", "-w", "120", OUT1], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        replies: Callable[[], int] = lambda: log.read_text().count("bytes from")  # noqa: E731
        wait_for("ping replies", lambda: replies() >= 3)
        console.open("sessions")
        search = console.find("#q")
        search.clear()
        search.send_keys(f"icmp {H1} {OUT1}")
        console.find("#session-search button[type=submit]").click()
        row = console.wait(
            "the ping's session in the table",
            lambda d: [r for r in console.find_all("#sessions tbody tr") if "icmp" in r.text],
        )[0]
        session_id = row.get_attribute("data-id")
        assert f"{H1}:" in row.text and OUT1 in row.text and "active" in row.text
        blocked_drops = gateway.counter(pc.C_DROP_COUNTER, pc.DROP_SESSION_BLOCKED)
        row.find_element("css selector", "button").click()
        console.wait(
            "the row to say blocked",
            lambda d: (
                "blocked"
                in console.find(f'#sessions tr[data-id="{session_id}"] td.state-blocked').text
            ),
        )
        # the flow stops: the NPM drops its packets as blocked, and no reply comes back
        wait_for(
            "the NPM to drop the blocked ping",
            lambda: (
                gateway.counter(pc.C_DROP_COUNTER, pc.DROP_SESSION_BLOCKED) >= blocked_drops + 2
            ),
        )
        after_block = replies()
        wait_for(
            "more blocked echo requests",
            lambda: (
                gateway.counter(pc.C_DROP_COUNTER, pc.DROP_SESSION_BLOCKED) >= blocked_drops + 8
            ),
        )
        assert replies() == after_block
    finally:
        stop_family(ping)


def test_alert_appears_and_links_to_its_rule_and_flow(console: Console) -> None:
    gateway = console.gateway
    console.open("alerts")
    console.wait("the alert table", lambda d: console.text("#alert-count"))
    result = gateway.run(
        "h1", f"curl -s --max-time 5 -o /dev/null http://{OUT1}/opengate-forbidden", timeout=30
    )
    del result  # the SPM blocks the request: curl's status does not matter
    row = console.wait(
        "the alert on the page (it refreshes itself)",
        lambda d: console.find_all('#alerts tbody tr[data-sid="1000101"]'),
    )[0]
    assert "OPENGATE test: forbidden URI" in row.text
    row.find_element("css selector", "a[href^='#rule-']").click()
    console.wait("the rule text", lambda d: "sid:1000101;" in console.text("#rule-text"))
    assert "spm-local.rules:" in console.text("#rule-where")
    flow = row.find_element("css selector", "a[href^='/console/sessions']")
    flow.click()
    console.wait(
        "the alert's session",
        lambda d: (
            "/console/sessions" in d.current_url
            and [r for r in console.find_all("#sessions tbody tr") if ":80" in r.text]
        ),
    )


def test_broken_policy_shows_its_error_and_a_good_one_applies(
    console: Console, tmp_path: Path
) -> None:
    gateway = console.gateway
    text = gateway.spec.policy.read_text()
    broken_lines = text.replace("role: outside", "role: outsde", 1)
    line = next(i for i, t in enumerate(broken_lines.splitlines(), 1) if "outsde" in t)
    broken = tmp_path / "broken.yaml"
    broken.write_text(broken_lines)
    good = tmp_path / "good.yaml"
    good.write_text(text + "# applied from the web console's test\n")
    version_before = gateway.api("GET", "/api/v1/status")["policy"]["version"]

    # the refused apply's answer, which Chromium logs as a failed load
    console.expected.append(re.compile(r"/console/data/policy/apply - .* status of 422"))
    console.open("policy")
    console.wait("the running policy", lambda d: "Running: version" in console.text("#running"))
    console.find("#upload").send_keys(str(broken))
    console.wait("the uploaded file", lambda d: "editing broken.yaml" in console.text("#file-name"))
    console.find("#apply").click()
    error = console.wait("the error", lambda d: console.find_all("#result .errors li"))[0]
    assert error.text.startswith(f"broken.yaml:{line}: "), error.text
    assert "ports[1].role" in error.text
    error.find_element("css selector", "button").click()  # goes to the line in the editor
    assert console.driver.switch_to.active_element.get_attribute("id") == "policy-text"
    assert console.text("#gutter b") == str(line)
    assert gateway.api("GET", "/api/v1/status")["policy"]["version"] == version_before

    console.find("#upload").send_keys(str(good))
    console.wait("the good file", lambda d: "editing good.yaml" in console.text("#file-name"))
    console.find("#diff").click()
    console.wait(
        "the diff",
        lambda d: "+# applied from the web console's test" in console.text("#result pre.diff"),
    )
    console.find("#apply").click()
    console.wait("the apply", lambda d: "Applied: version" in console.text("#result"))
    version = gateway.api("GET", "/api/v1/status")["policy"]["version"]
    assert version > version_before
    console.wait(
        "the new version in the list",
        lambda d: console.text("#versions tbody tr td").strip() == str(version),
    )


def test_drain_and_restore_an_spm_from_the_page(console: Console) -> None:
    gateway = console.gateway
    console.open("spms")
    button = console.wait(
        "spm1's row", lambda d: console.find_all('#spm-table tr[data-spm="spm1"] button')
    )[0]
    assert button.text == "Drain"
    button.click()
    console.wait(
        "spm1 drained",
        lambda d: "drained" in console.text('#spm-table tr[data-spm="spm1"]'),
    )
    spms = gateway.api("GET", "/api/v1/spms")["spms"]
    assert spms["spm1"]["weight"] == 0 and spms["spm1"]["drained"] is True
    console.find('#spm-table tr[data-spm="spm1"] button').click()
    console.wait(
        "spm1 restored",
        lambda d: (
            gateway.api("GET", "/api/v1/spms")["spms"]["spm1"]["weight"] > 0
            and "Drain" in console.text('#spm-table tr[data-spm="spm1"] button')
        ),
    )


def test_logout_ends_the_session(console: Console) -> None:
    console.open("")
    console.wait("the log-out button", lambda d: console.find(".logout button")).click()
    console.wait("the login page", lambda d: "/console/login" in d.current_url)
    console.open("sessions")
    console.wait("a redirect to the login", lambda d: "/console/login" in d.current_url)
    console.log_in()  # so that the fixture's check of the log sees a logged-in page
