"""Operating the proxy: /metrics, /healthz, /readyz and the dashboard.

A harness of its own (its own log, so every count here is this module's)
gets a scripted run through the proxy: normal answers, a rescue, a
client-side fallback, a partial refusal and a dead one. Then:

- /metrics, read with the official Prometheus text parser, counts what the
  JSONL log holds;
- the dashboard, live from the admin listener and written by
  `refusal-guard report --html`, loads in a real browser (Debian's chromium driven by
  Playwright) without console errors and shows the log's numbers; the
  screenshots go to target/e2e/;
- /healthz and /readyz answer for an upstream that is up and one that is
  down, and the API port serves none of the admin routes.
"""

import collections
import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import (
    ARTEFACTS,
    Harness,
    ProxyProcess,
    contract_violations,
    open_page,
    refusal_guard_binary,
    running_harness,
)

TEXT = "anthropic/anthropic-sdk-python/basic_response.txt"
TEXT_JSON = "e2e/message_text.json"
EMPTY_REFUSAL = "anthropic/anthropic-sdk-python/refusal_response.txt"
PARTIAL = "anthropic/anthropic-sdk-python/stream-a-refusal.sse"

# (script, model, stream, expected outcome or None for no refusal)
RUN = [
    # TEXT is Claude 3 Opus's answer: asked of it, no reroute; asked of
    # Sonnet 4.5, a reroute, recorded.
    (TEXT, "claude-3-opus-latest", True, None),
    (TEXT, "claude-sonnet-4-5", True, "rerouted"),
    (TEXT_JSON, "claude-opus-4-7", False, None),
    (f"{EMPTY_REFUSAL},{TEXT}", "claude-opus-4-7", True, "rescued"),
    (f"{EMPTY_REFUSAL},{TEXT}", "claude-sonnet-4-5", True, "rescued"),
    (f"{EMPTY_REFUSAL},{TEXT}", "claude-chain-source", True, "fallback"),
    (PARTIAL, "claude-opus-4-7", True, "partial"),
    (f"{EMPTY_REFUSAL},{EMPTY_REFUSAL}", "claude-opus-4-7", True, "dead"),
]


def get(url: str, timeout: float = 10):
    """(status, body text) of a GET, error statuses included."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def post_messages(base: str, script: str, model: str, stream: bool) -> bytes:
    # A conversation of its own for each request: the rescue is once per
    # conversation.
    body = {
        "model": model,
        "max_tokens": 256,
        "stream": stream,
        "messages": [{"role": "user", "content": f"Check my SSH setup {uuid.uuid4()}"}],
    }
    request = urllib.request.Request(
        f"{base}/v1/messages",
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "content-type": "application/json",
            "x-api-key": "sk-ant-dummy-key",
            "anthropic-version": "2023-06-01",
            "x-mock-script": script,
            "x-mock-id": f"ops-{uuid.uuid4().hex[:12]}",
        },
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
        return response.read()


class Ops(Harness):
    def __init__(self, info: dict):
        super().__init__(info)
        self.admin = info["admin"]
        self.admin_unreachable = info["admin_unreachable"]

    def records(self) -> list:
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    with running_harness(tmp_path_factory.mktemp("ops") / "refusals.jsonl") as info:
        ops = Ops(info)
        for script, model, stream, _ in RUN:
            post_messages(ops.proxy, script, model, stream)
        yield ops


def samples(text: str) -> dict:
    """Prometheus samples by name: a list of (labels, value)."""
    found = collections.defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name].append((sample.labels, sample.value))
    return found


def metrics_at(admin: str) -> dict:
    status, text = get(f"{admin}/metrics")
    assert status == 200
    return samples(text)


def metrics(ops: Ops) -> dict:
    return metrics_at(ops.admin)


def recovery_steps(record: dict) -> list:
    """The (step, result) pairs the metrics count for a record."""
    steps = [(a["step"], a["result"]) for a in record.get("attempts", []) if a["step"] != "original"]
    if not steps and record["outcome"] == "fallback":
        steps.append(("retarget", "served"))
    return steps


def test_the_scripted_run_is_logged_as_scripted(ops):
    outcomes = sorted(r["outcome"] for r in ops.records())
    assert outcomes == sorted(o for *_, o in RUN if o)


def test_metrics_count_what_the_log_holds(ops):
    records = ops.records()
    found = metrics(ops)

    expected = collections.Counter(
        (r["provider"], r["wire_api"], r["category"] or "none", r["kind"], r["outcome"]) for r in records
    )
    counted = collections.Counter()
    for labels, value in found["refusal_guard_refusals_total"]:
        key = (labels["provider"], labels["wire_api"], labels["category"], labels["kind"], labels["outcome"])
        counted[key] += int(value)
    assert counted == expected

    expected_steps = collections.Counter(s for r in records for s in recovery_steps(r))
    counted_steps = collections.Counter()
    for labels, value in found["refusal_guard_recovery_attempts_total"]:
        counted_steps[(labels["step"], labels["result"])] += int(value)
    assert counted_steps == expected_steps
    assert counted_steps[("rescue", "served")] == 2
    assert counted_steps[("fallback", "served")] == 1

    latency_counts = {l["outcome"]: int(v) for l, v in found["refusal_guard_recovery_latency_seconds_count"]}
    assert latency_counts == collections.Counter(r["outcome"] for r in records)

    # Every guarded request, refused or not, by outcome.
    requests = collections.Counter()
    for labels, value in found["refusal_guard_requests_total"]:
        requests[labels["outcome"]] += int(value)
    assert requests == collections.Counter(o or "ok" for *_, o in RUN)

    # Every request was held at least once; nothing is still streaming.
    holds = sum(v for _, v in found["refusal_guard_hold_duration_seconds_count"])
    assert holds >= len(RUN)
    assert sum(v for _, v in found["refusal_guard_held_bytes_count"]) == holds
    assert sum(v for _, v in found["refusal_guard_added_ttfb_seconds_count"]) == len(RUN)
    assert all(v == 0 for _, v in found["refusal_guard_streams_in_flight"])


# The families (as the parser names them: a counter without `_total`) that
# may carry a `model` label.
MODEL_LABELLED = {
    "refusal_guard_refusals",
    "refusal_guard_refused_tokens",
    "refusal_guard_route_served",
    "refusal_guard_route_refused",
}


def test_no_label_carries_prompt_text_or_keys(ops):
    status, text = get(f"{ops.admin}/metrics")
    assert status == 200
    assert "Check my SSH" not in text and "sk-ant" not in text
    # Only the refusal counters name models (the alert rules watch the
    # refusal rate per category and model, and refused tokens are counted by
    # model) and the learned-routing gauges; the values are model names as
    # sent, bounded, never text.
    models = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if family.name not in MODEL_LABELLED:
                assert "model" not in sample.labels, sample
            elif "model" in sample.labels:
                models.add(sample.labels["model"])
            # Reroutes name the model asked for and the one that served.
            named = {"requested", "served"} & set(sample.labels)
            assert not named or family.name == "refusal_guard_reroutes", sample
            models.update(sample.labels[label] for label in named)
    assert models, "refusals and the refused attempts' tokens are counted by model"
    assert len(models) <= 33
    for model in models:
        assert re.fullmatch(r"[A-Za-z0-9_.:/@-]{1,128}", model), model


def test_health_and_readiness(ops):
    assert get(f"{ops.admin}/healthz") == (200, "ok\n")
    status, text = get(f"{ops.admin}/readyz")
    assert status == 200, text
    assert text.startswith("ready\n") and "upstream 127.0.0.1:" in text and "store memory: ok" in text

    # The upstream of this proxy is down: alive, but not ready.
    assert get(f"{ops.admin_unreachable}/healthz") == (200, "ok\n")
    status, text = get(f"{ops.admin_unreachable}/readyz")
    assert status == 503, text
    assert text.startswith("not ready\n") and "FAIL" in text


def test_admin_routes_are_not_on_the_api_port(ops):
    for route in ["/metrics", "/healthz", "/readyz", "/"]:
        status, text = get(f"{ops.proxy}{route}")
        assert "refusal_guard_" not in text and "<!doctype html>" not in text
        assert text != "ok\n" and not text.startswith("ready")
        # The proxy forwarded it like any other request: the mock answered.
        assert status == 400 and "x-mock-script" in text


def test_admin_listener_refuses_other_methods(ops):
    request = urllib.request.Request(f"{ops.admin}/metrics", data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(request, timeout=10)
    assert error.value.code == 405


# The dashboard in a real browser.


def check_numbers(page, records: list):
    def value(selector: str) -> str:
        return page.locator(selector).inner_text().strip()

    outcomes = collections.Counter(r["outcome"] for r in records)
    assert value("#kpi-total .value") == str(len(records))
    assert value("#kpi-recovered .value") == str(outcomes["fallback"] + outcomes["rescued"])
    for outcome in ["fallback", "rescued", "partial", "dead", "rerouted"]:
        assert value(f"#outcome-{outcome}") == str(outcomes[outcome]), outcome
    cells = collections.Counter((r["model"] or "(none)", r["category"] or "(none)") for r in records)
    for (model, category), count in cells.items():
        cell = page.locator(f'td[data-model="{model}"][data-category="{category}"]')
        assert cell.inner_text().strip() == str(count), (model, category)
    assert page.locator("#recent-rows tr").count() == min(len(records), 15)
    # Each recent refusal lists its attempts.
    newest = max(records, key=lambda r: r["ts"])
    first_row = page.locator("#recent-rows tr").first
    assert first_row.locator(".attempt").count() == len(newest["attempts"])
    # Why the dead ones stayed dead, by reason.
    reasons = collections.Counter(r.get("reason") or "(none)" for r in records if r["outcome"] == "dead")
    text = page.locator("#dead-reasons").inner_text()
    for reason, count in reasons.items():
        assert reason.replace("_", " ") in text and str(count) in text
    # Latency percentiles exist for the outcomes that were timed.
    for outcome in ["fallback", "rescued", "dead"]:
        assert page.locator(f"#latency-{outcome}").count() == (1 if outcomes[outcome] else 0)


def test_live_dashboard_shows_the_log(ops, browser):
    records = ops.records()
    assert records
    page, errors, requests = open_page(browser, f"{ops.admin}/", "dashboard.png")
    assert errors == []
    assert requests == [f"{ops.admin}/"]
    check_numbers(page, records)
    # The live page also counts every guarded request.
    assert page.locator("#kpi-requests .value").inner_text().strip() == str(len(RUN))
    page.close()


def test_refusals_html_report_shows_the_log(ops, browser, tmp_path):
    report = [str(refusal_guard_binary()), "report"]
    # Two logs read as one: this run's, and an older one.
    older = tmp_path / "older.jsonl"
    older.write_text(
        json.dumps(
            {"ts": "2026-11-28T09:00:00.000Z", "model": "gpt-x", "category": "content_filter",
             "explanation": None, "outcome": "dead", "reason": "rescue_off",
             "attempts": [{"step": "original", "model": "gpt-x", "result": "refused", "latency_ms": 40,
                           "usage": {"input_tokens": 1200, "output_tokens": 5}}],
             "latency_ms": 41, "usage": {"input_tokens": 1200, "output_tokens": 5}}
        )
        + "\n"
    )
    out = tmp_path / "report.html"
    done = subprocess.run(
        [*report, "--log", str(ops.log), "--log", str(older), "--html", str(out)],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    records = ops.records() + [json.loads(older.read_text())]
    assert f"{len(records)} refusals" in done.stdout
    # What the older log's refused attempt cost: in its text report, and on the page.
    text = subprocess.run(
        [*report, "--log", str(older)], capture_output=True, text=True, timeout=60,
    )
    assert text.returncode == 0, text.stderr
    assert "Tokens spent on refused attempts: 1205 (input 1200, output 5)" in text.stdout
    assert "gpt-x: 1205 (input 1200, output 5)" in text.stdout
    page, errors, requests = open_page(browser, out.as_uri(), "dashboard-report.png")
    assert errors == []
    assert requests == [out.as_uri()]
    check_numbers(page, records)
    costed = page.locator('.attempt[title="gpt-x · 1205 tokens"]')
    assert costed.count() == 1
    page.close()
    shutil.copy(out, ARTEFACTS / "dashboard-report.html")


# The standalone proxy's --admin flag.


def test_proxy_admin_flag_serves_metrics_of_its_own_log(tmp_path):
    proxy = refusal_guard_binary()
    log = tmp_path / "refusals.jsonl"
    process = subprocess.Popen(
        [str(proxy), "--simulate", "--strict", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
         "--log", str(log)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        lines = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any("admin on http://" in l for l in lines):
            line = process.stderr.readline()
            if not line:
                break
            lines.append(line)
        text = "".join(lines)
        api = re.search(r"listening on (http://127\.0\.0\.1:\d+)", text)
        admin = re.search(r"admin on (http://127\.0\.0\.1:\d+)", text)
        assert api and admin, text
        api, admin = api.group(1), admin.group(1)
        # The simulated provider refuses a conversation's first attempt; the guard rescues it.
        post_messages(api, TEXT, "claude-opus-4-7", True)
        assert get(f"{admin}/healthz") == (200, "ok\n")
        status, ready = get(f"{admin}/readyz")
        assert status == 200 and "upstream" not in ready, ready
        records = [json.loads(l) for l in log.read_text().splitlines()]
        assert [r["outcome"] for r in records] == ["rescued"]
        found = metrics_at(admin)
        rescued = sum(v for l, v in found["refusal_guard_refusals_total"] if l["outcome"] == "rescued")
        assert rescued == 1
        assert get(f"{admin}/")[1].startswith("<!doctype html>")
        # The API port does not serve the admin routes.
        assert "refusal_guard_" not in get(f"{api}/metrics")[1]
        # The strict simulator held the request and its rescue to the rules:
        # it counted no violation (the counter is there, at 0).
        assert contract_violations(admin) == 0
    finally:
        process.terminate()
        try:
            code = process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    # A strict simulator that answered a broken request exits non-zero.
    logged = "".join(lines) + process.stderr.read()
    assert code == 0, logged


def test_the_checks_see_a_strict_simulators_violation_with_logging_at_errors_only(tmp_path):
    """The channel every check here reads is no log line: with RUST_LOG=error
    (the simulator's warning filtered out) a broken request still shows as
    a new violation on /metrics, and the process still exits non-zero."""
    env = {k: v for k, v in os.environ.items() if k != "RUST_LOG"}
    env["RUST_LOG"] = "error"
    proxy = ProxyProcess("strict-quiet", ["--simulate", "--strict", "--log", "off"], tmp_path, env=env)
    try:
        assert proxy.new_violations() == [], "none before a request"
        # No max_tokens: the Messages API's 400.
        request = urllib.request.Request(
            f"{proxy.url}/v1/messages",
            data=json.dumps({"model": "claude-opus-4-7",
                             "messages": [{"role": "user", "content": "hi"}]}).encode(),
            headers={"content-type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as answered:
            urllib.request.urlopen(request, timeout=10)
        assert answered.value.code == 400
        found = proxy.new_violations()
        assert len(found) == 1 and found[0].startswith("1 request(s) broke a rule"), found
        assert "A2" not in proxy.stderr(), "the warning naming the rule was filtered out"
    finally:
        proxy.process.terminate()
        code = proxy.process.wait(timeout=15)
    assert code == 3, proxy.stderr()
