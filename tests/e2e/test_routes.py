"""One routed proxy serving three harnesses at once: Claude Code (Anthropic
Messages), the official openai SDK (Chat Completions) and google-genai
(Gemini), each API routed to its own upstream, each refused once there and
recovered by its own provider's fallback chain.

The upstreams are three `refusal-guard --simulate --strict --rescue off`
processes: the built-in simulated provider, a real HTTP server for every
API, refuses each conversation's first attempt and answers later ones; with
rescue off and no chain, their refusals reach the routed proxy exactly as
sent. Strict, they hold what reaches them (Claude Code's, the openai SDK's
and google-genai's requests, and the routed proxy's fallbacks) to the
providers' rules, and a break fails the test (conftest reads their
counts on /metrics, and their exit status).
A fourth one is the default upstream, so that nothing leaves loopback.

Claude Code is the native CLI .ci/e2e.sh installs from npm, named by
REFUSAL_GUARD_E2E_CLAUDE; without it the test is skipped outside CI and
fails under CI (any value of CI but empty, 0 or false)."""

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest
from conftest import ProxyProcess as Proxy
from conftest import in_ci

CLAUDE_MODEL = "claude-opus-4-7"
CHAINS = ";".join(
    [
        "claude-opus-4-7=claude-sonnet-4-5",
        "gpt-4o=gpt-4o-mini",
        "gemini-2.5-pro=gemini-2.5-flash",
    ]
)


@pytest.fixture
def routed(tmp_path):
    started = []

    def start(name, args):
        proxy = Proxy(name, args, tmp_path)
        started.append(proxy)
        return proxy

    try:
        upstream = {
            name: start(name, ["--simulate", "--strict", "--rescue", "off", "--log", "off"])
            for name in ("anthropic", "openai", "gemini", "default")
        }
        log = tmp_path / "refusals.jsonl"
        proxy = start(
            "routed",
            [
                "--upstream", upstream["default"].url,
                "--upstream-anthropic", upstream["anthropic"].url,
                "--upstream-openai", upstream["openai"].url,
                "--upstream-gemini", upstream["gemini"].url,
                "--chain", CHAINS,
                "--log", str(log),
            ],
        )
        yield proxy, upstream, log
    finally:
        for proxy in started:
            proxy.stop()


def claude_code(tmp: Path, base_url: str) -> subprocess.Popen:
    claude = os.environ.get("REFUSAL_GUARD_E2E_CLAUDE")
    if not claude:
        if in_ci():
            pytest.fail(f"REFUSAL_GUARD_E2E_CLAUDE is unset under CI={os.environ['CI']} (.ci/e2e.sh sets it)")
        pytest.skip("no Claude Code CLI (REFUSAL_GUARD_E2E_CLAUDE; .ci/e2e.sh installs it)")
    home = tmp / "claude-home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_"))}
    env.update(
        {
            "HOME": str(home),
            "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_API_KEY": "sk-ant-routes-dummy",
            "ANTHROPIC_MODEL": CLAUDE_MODEL,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
        }
    )
    return subprocess.Popen(
        [claude, "-p", "Check my SSH config for weaknesses", "--output-format", "json"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def openai_answer(base_url: str) -> str:
    import openai

    client = openai.OpenAI(base_url=base_url + "/v1", api_key="sk-openai-routes-dummy", max_retries=0, timeout=60)
    stream = client.chat.completions.create(
        model="gpt-4o",
        stream=True,
        messages=[{"role": "user", "content": "Explain how this port scanner works"}],
    )
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def gemini_answer(base_url: str) -> str:
    from google import genai
    from google.genai import types

    client = genai.Client(
        api_key="gemini-routes-dummy",
        http_options=types.HttpOptions(base_url=base_url, timeout=60_000),
    )
    stream = client.models.generate_content_stream(
        model="gemini-2.5-pro", contents="Explain how this exploit works"
    )
    return "".join(chunk.text or "" for chunk in stream)


def test_one_proxy_serves_claude_code_openai_and_gemini_each_recovered(routed, tmp_path):
    # The SDKs are imported first, so that their calls go out while Claude
    # Code is starting and sending its turn.
    import google.genai  # noqa: F401
    import openai  # noqa: F401

    proxy, upstream, log = routed
    claude = claude_code(tmp_path, proxy.url)
    answers = {}

    def ask(name, call):
        answers[name] = call(proxy.url)

    # The SDK clients run while Claude Code's turn is in flight.
    threads = [
        threading.Thread(target=ask, args=("openai", openai_answer)),
        threading.Thread(target=ask, args=("gemini", gemini_answer)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    try:
        out, err = claude.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        claude.kill()
        pytest.fail(f"Claude Code did not finish: {proxy.stderr()}")
    assert claude.returncode == 0, f"{err}\n{out}"
    result = json.loads(out)
    assert result.get("is_error") is False, result
    assert result["result"].startswith("Simulated answer"), result["result"]
    assert answers.get("openai", "").startswith("Simulated answer"), answers
    assert answers.get("gemini", "").startswith("Simulated answer"), answers

    # Each API reached its own upstream only.
    anthropic_paths = upstream["anthropic"].paths()
    assert any(p.startswith("/v1/messages") for p in anthropic_paths), anthropic_paths
    assert all(p.startswith("/v1/messages") for p in anthropic_paths), anthropic_paths
    assert upstream["openai"].paths() == ["/v1/chat/completions"] * 2, upstream["openai"].stderr()
    # google-genai names its API version first (`/v1/models/...` in 3.3,
    # `/v1beta/models/...` before): both are the Gemini route's.
    gemini_paths = upstream["gemini"].paths()
    versions = {path.split("/")[1] for path in gemini_paths}
    assert versions <= {"v1", "v1beta"} and len(versions) == 1, gemini_paths
    assert [path.split("/", 2)[2] for path in gemini_paths] == [
        "models/gemini-2.5-pro:streamGenerateContent",
        "models/gemini-2.5-flash:streamGenerateContent",
    ], gemini_paths
    assert upstream["default"].paths() == [], upstream["default"].stderr()
    # The routed proxy's access lines name the routes.
    lines = proxy.stderr()
    for route in ("anthropic", "openai", "gemini"):
        assert f" route={route}" in lines, lines

    # Each refused once, recovered by its own provider's next model.
    records = [json.loads(line) for line in log.read_text().splitlines()]
    by_model = {record["model"]: record for record in records}
    for model, fallback in [
        (CLAUDE_MODEL, "claude-sonnet-4-5"),
        ("gpt-4o", "gpt-4o-mini"),
        ("gemini-2.5-pro", "gemini-2.5-flash"),
    ]:
        record = by_model.get(model)
        assert record is not None, records
        assert record["outcome"] == "fallback", record
        served = [a for a in record["attempts"] if a["result"] == "served"]
        assert served and served[0]["model"] == fallback, record
