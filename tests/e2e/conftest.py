"""Starts the Rust e2e harness (mock upstream + proxies on loopback) once per
session, and fails each test whose requests broke the providers' request
contract: the harness's mock and strict simulator report what they answered
with a contract error (`GET /__mock/violations`), and every `refusal-guard
--simulate --strict` process started here counts it on its admin listener
(`refusal_guard_contract_violations_total` on `/metrics`); both are read
after each test. Neither is a log line, so no `RUST_LOG` hides them. Every
such process, and the harness, must also exit with status 0 when stopped:
non-zero is what they say when any request broke a rule."""

import contextlib
import json
import os
import re
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))


def in_ci() -> bool:
    """Whether this is CI: CI set to anything but empty, 0 or false (as
    .ci/e2e.sh reads it), where a check that cannot run fails."""
    return os.environ.get("CI", "") not in ("", "0", "false")


def harness_binary() -> Path:
    explicit = os.environ.get("REFUSAL_GUARD_E2E_HARNESS")
    if explicit:
        return Path(explicit)
    return TARGET / "debug" / "e2e-harness"


def refusal_guard_binary() -> Path:
    """The `refusal-guard` command (its `report` subcommand)."""
    explicit = os.environ.get("REFUSAL_GUARD_BIN")
    if explicit:
        return Path(explicit)
    return TARGET / "debug" / "refusal-guard"


# The note the guard adds to a rescue request.
NOTE = "[refusal-guard]"

# The counter a strict simulator keeps of the requests that broke a rule.
VIOLATIONS = "refusal_guard_contract_violations_total"


def contract_violations(admin: str) -> float:
    """The contract violations a strict simulator counted so far, read from
    its admin listener's /metrics with the official Prometheus parser; fails
    the test when the counter is not there (a check that read nothing would
    pass anything)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{admin}/metrics", timeout=10) as r:
        text = r.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == VIOLATIONS:
                return sample.value
    pytest.fail(f"{admin}/metrics has no {VIOLATIONS}:\n{text}")


def client_options(script: str, script_id: str) -> dict:
    """SDK client options for the mock: no retries, a bounded wait, and the
    script (fixtures to serve, in turn) named in headers."""
    return {
        "max_retries": 0,
        "timeout": 30,
        "default_headers": {"x-mock-script": script, "x-mock-id": script_id},
    }


def anthropic_client(base_url: str, script: str, script_id: str):
    import anthropic

    options = client_options(script, script_id)
    return anthropic.Anthropic(base_url=base_url, api_key="sk-ant-dummy-key", **options)


def openai_client(base_url: str, script: str, script_id: str):
    import openai

    options = client_options(script, script_id)
    return openai.OpenAI(base_url=base_url + "/v1", api_key="sk-openai-dummy", **options)


class Harness:
    def __init__(self, info: dict):
        self.mock = info["mock"]
        self.proxy = info["proxy"]
        self.simulated = info["simulated"]
        self.unreachable = info["unreachable"]
        self.live = info["live"]
        self.partial = info["partial"]
        self.marked = info["marked"]
        self.log = Path(info["log"])

    def seen(self, script_id: str) -> list:
        """What the mock upstream received for this script id."""
        with urllib.request.urlopen(f"{self.mock}/__mock/seen?id={script_id}", timeout=10) as r:
            seen = json.load(r)
        for request in seen:
            request["json"] = json.loads(request["body"]) if request["body"] else None
            request["header"] = {k.lower(): v for k, v in request["headers"]}
        return seen


# Every proxy process started, for the check after each test.
STARTED = []


class ProxyProcess:
    """A `refusal-guard` process on a free loopback port, its stderr in a
    file; `env` replaces the environment it inherits where given. A strict
    simulator (`--strict`) gets an admin listener too, where it counts its
    contract violations."""

    def __init__(self, name: str, args: list, tmp: Path, env: dict | None = None):
        binary = refusal_guard_binary()
        if not binary.exists():
            pytest.fail(f"{binary} is missing: run `cargo build --workspace --all-features --bins` first")
        self.name = name
        self.strict = "--strict" in args
        self.reported = 0.0
        self.admin = None
        self.err = tmp / f"{name}.err"
        admin = ["--admin", "127.0.0.1:0"] if self.strict else []
        STARTED.append(self)
        self.process = subprocess.Popen(
            [str(binary), "--listen", "127.0.0.1:0", *admin, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.err.open("w"),
            env=env,
        )
        deadline = time.time() + 30
        while time.time() < deadline:
            text = self.stderr()
            listening = re.search(r"listening on (http://[0-9.]+:[0-9]+)", text)
            on_admin = re.search(r"admin on (http://[0-9.]+:[0-9]+)", text)
            if listening and (on_admin or not self.strict):
                self.url = listening.group(1)
                self.admin = on_admin.group(1) if on_admin else None
                return
            if self.process.poll() is not None:
                pytest.fail(f"{name} exited: {text}")
            time.sleep(0.05)
        self.process.kill()
        pytest.fail(f"{name} did not start: {self.stderr()}")

    def stderr(self) -> str:
        return self.err.read_text()

    def new_violations(self) -> list:
        """What a strict simulator counted since the last call: the count
        on its /metrics (none for a proxy in front of the mock, whose
        violations the mock reports), with its stderr for the details."""
        if not self.strict or self.process.poll() is not None:
            return []
        counted = contract_violations(self.admin)
        new, self.reported = counted - self.reported, counted
        if new == 0:
            return []
        return [f"{new:.0f} request(s) broke a rule; its stderr:\n{self.stderr()}"]

    def paths(self) -> list:
        """The paths of the requests it answered (its access lines)."""
        paths = []
        for line in self.stderr().splitlines():
            parts = line.split()
            if len(parts) > 3 and parts[1] in ("GET", "POST"):
                paths.append(parts[2])
        return paths

    def stop(self):
        """Stops it (SIGTERM); a strict simulator that answered any request
        with a contract error exits non-zero, and fails the test."""
        self.process.terminate()
        try:
            code = self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise
        if code != 0:
            pytest.fail(f"{self.name} exited with status {code}:\n{self.stderr()}")


@contextlib.contextmanager
def logging_proxy(name: str, args: list, tmp: Path, env: dict | None = None):
    """A ProxyProcess that logs its refusal records to `refusals.jsonl` in
    `tmp`, with that log; stopped when the block ends."""
    log = tmp / "refusals.jsonl"
    proxy = ProxyProcess(name, [*args, "--log", str(log)], tmp, env=env)
    try:
        yield proxy, log
    finally:
        proxy.stop()


# The mocks of the harnesses running now, for the check after each test.
MOCKS = []


@contextlib.contextmanager
def running_harness(log: Path):
    """Runs the e2e harness writing refusals to `log`; yields the addresses
    it prints, and stops it (closing its stdin) on exit."""
    binary = harness_binary()
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run `cargo build -p refusal-guard-tools` first")
    err = log.with_suffix(".harness.err")
    process = subprocess.Popen(
        [str(binary), "--log", str(log)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=err.open("w"),
        text=True,
    )
    line = process.stdout.readline()
    if not line:
        process.kill()
        pytest.fail(f"the e2e harness exited before printing its addresses:\n{err.read_text()}")
    info = json.loads(line)
    MOCKS.append(info["mock"])
    try:
        yield info
    finally:
        MOCKS.remove(info["mock"])
    process.stdin.close()  # the harness stops when stdin closes
    try:
        code = process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    # Non-zero: a request broke the providers' rules (or the harness failed).
    if code != 0:
        pytest.fail(f"the e2e harness exited with status {code}:\n{err.read_text()}")


@pytest.fixture(scope="session")
def harness(tmp_path_factory):
    with running_harness(tmp_path_factory.mktemp("log") / "refusals.jsonl") as info:
        yield Harness(info)


@pytest.fixture(autouse=True)
def no_contract_violations():
    """Fails the test (at its teardown) if a request it caused broke a
    rule of the providers' request contract: the harness's mock and strict
    simulator answered it with the provider's 400 (404, 501), or a strict
    `refusal-guard --simulate` counted it on its /metrics. A tolerated 400
    never stays green."""
    yield
    found = []
    for mock in MOCKS:
        with urllib.request.urlopen(f"{mock}/__mock/violations", timeout=10) as r:
            found += [f"harness: {line}" for line in json.load(r)]
    for proxy in STARTED:
        found += [f"{proxy.name}: {line}" for line in proxy.new_violations()]
    if found:
        pytest.fail("requests broke the providers' request contract:\n  " + "\n  ".join(found))


@pytest.fixture
def script_id() -> str:
    return f"py-{uuid.uuid4().hex[:12]}"


# Pages in a real browser: Debian's chromium, driven by Playwright; never a
# downloaded browser.
CHROMIUM = "/usr/bin/chromium"
BROWSER_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
ARTEFACTS = TARGET / "e2e"


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        # Skipped only where .ci/e2e.sh found it missing, and never in CI.
        cannot = os.environ.get("REFUSAL_GUARD_E2E_NO_CHROMIUM")
        if cannot and not in_ci():
            pytest.skip(f"a page in a browser: {cannot}")
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/e2e.sh does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        yield browser
        browser.close()


def open_page(browser, url: str, screenshot: str, ready: str = "#kpi-total"):
    """The page at `url` once `ready` is drawn, its screenshot in
    target/e2e/, and the console errors and requests it made (kept up to
    date as the page goes on)."""
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.set_default_timeout(10_000)
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    # Anything fetched from the network would show here.
    requests = []
    page.on("request", lambda r: requests.append(r.url))
    response = page.goto(url, wait_until="load")
    assert response is not None and response.ok
    page.wait_for_selector(ready)
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTEFACTS / screenshot), full_page=True)
    return page, errors, requests
