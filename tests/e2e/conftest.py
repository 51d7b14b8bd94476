"""Starts the Rust e2e harness (mock upstream + proxies on loopback) once per
session, and fails each test whose requests broke the providers' request
contract: the harness's mock and strict simulator report what they answered
with a contract error (`GET /__mock/violations`), and every `refusal-guard
--simulate --strict` process started here logs it; both are read after each
test."""

import contextlib
import json
import os
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))


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

# What a strict simulator logs for a request that broke a rule.
VIOLATION = "contract violation"


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
    file; `env` replaces the environment it inherits where given."""

    def __init__(self, name: str, args: list, tmp: Path, env: dict | None = None):
        binary = refusal_guard_binary()
        if not binary.exists():
            pytest.fail(f"{binary} is missing: run `cargo build --workspace --all-features --bins` first")
        self.name = name
        self.reported = 0
        self.err = tmp / f"{name}.err"
        STARTED.append(self)
        self.process = subprocess.Popen(
            [str(binary), "--listen", "127.0.0.1:0", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.err.open("w"),
            env=env,
        )
        deadline = time.time() + 30
        while time.time() < deadline:
            for line in self.stderr().splitlines():
                if "listening on http://" in line:
                    self.url = line.split("listening on ")[1].split()[0]
                    return
            if self.process.poll() is not None:
                pytest.fail(f"{name} exited: {self.stderr()}")
            time.sleep(0.05)
        self.process.kill()
        pytest.fail(f"{name} did not start: {self.stderr()}")

    def stderr(self) -> str:
        return self.err.read_text()

    def new_violations(self) -> list:
        """The contract violations it logged (a strict simulator) since the
        last call."""
        try:
            logged = self.stderr()
        except FileNotFoundError:
            return []
        lines = [line for line in logged.splitlines() if VIOLATION in line]
        new, self.reported = lines[self.reported:], len(lines)
        return new

    def paths(self) -> list:
        """The paths of the requests it answered (its access lines)."""
        paths = []
        for line in self.stderr().splitlines():
            parts = line.split()
            if len(parts) > 3 and parts[1] in ("GET", "POST"):
                paths.append(parts[2])
        return paths

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


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
    process = subprocess.Popen(
        [str(binary), "--log", str(log)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = process.stdout.readline()
    if not line:
        process.kill()
        pytest.fail("the e2e harness exited before printing its addresses")
    info = json.loads(line)
    MOCKS.append(info["mock"])
    try:
        yield info
    finally:
        MOCKS.remove(info["mock"])
    process.stdin.close()  # the harness stops when stdin closes
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        raise


@pytest.fixture(scope="session")
def harness(tmp_path_factory):
    with running_harness(tmp_path_factory.mktemp("log") / "refusals.jsonl") as info:
        yield Harness(info)


@pytest.fixture(autouse=True)
def no_contract_violations():
    """Fails the test (at its teardown) if a request it caused broke a
    rule of the providers' request contract: the harness's mock and strict
    simulator answered it with the provider's 400 (404, 501), or a strict
    `refusal-guard --simulate` logged it. A tolerated 400 never stays green."""
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
        if cannot and os.environ.get("CI") != "true":
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
