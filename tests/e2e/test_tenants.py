"""Two tenants behind one `refusal-guard` binary (`--tenants`), read by the
official SDKs, in front of the scripted mock (which checks every request
against the provider's contract): the same refusal is recovered for one
tenant and reaches the other as the refusal it is; a fallback outside a
tenant's allowlist is never sent; the operator's keys are spent only for
a tenant allowed them; a key the file does not list is an SDK
authentication error (anthropic, openai, google-genai), with nothing sent
upstream."""

import hashlib
import json
import os

import pytest
from conftest import logging_proxy

RED_KEY = "red-team-e2e-client-key-0001"
BLUE_KEY = "blue-team-e2e-client-key-0002"
GREEN_KEY = "green-team-e2e-client-key-0005"
OPENAI_OPERATOR_KEY = "sk-openai-operator-tenants-e2e"


def sha256(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


TENANTS = f"""
[[tenant]]
name = "red-team"
key_sha256 = ["{sha256(RED_KEY)}"]
chains = {{ "claude-opus-4-7" = ["claude-haiku-4-5", "claude-sonnet-4-5"], "claude-cross-source" = ["openai:gpt-5"] }}
allow_models = ["claude-sonnet-*", "gpt-5"]
allow_providers = ["anthropic", "openai"]
operator_keys = ["openai"]
rescue = false

[[tenant]]
name = "blue-team"
key_sha256 = ["{sha256(BLUE_KEY)}"]
policy = "cyber=stop;*=fallback"

[[tenant]]
name = "green-team"
key_sha256 = ["{sha256(GREEN_KEY)}"]
rescue = false
"""


@pytest.fixture(scope="module")
def tenants(harness, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tenants")
    path = tmp / "tenants.toml"
    path.write_text(TENANTS)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["OPENAI_API_KEY"] = OPENAI_OPERATOR_KEY
    args = [
        "--upstream", harness.mock, "--tenants", str(path),
        "--chain", "claude-cross-source=openai:gpt-5",
    ]
    with logging_proxy("tenants", args, tmp, env=env) as running:
        yield running


def anthropic_sdk(base_url: str, tenant_key: str, script: str, script_id: str):
    import anthropic

    headers = {"x-refusal-guard-key": tenant_key, "x-mock-script": script, "x-mock-id": script_id}
    return anthropic.Anthropic(
        base_url=base_url, api_key="sk-ant-client-own-key", max_retries=0, timeout=30, default_headers=headers
    )


def records(log) -> list:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def models_seen(harness, script_id: str) -> list:
    return [seen["json"]["model"] for seen in harness.seen(script_id)]


REFUSED = "e2e/anthropic-refusal.json,e2e/message_text.json,e2e/message_text.json"


def ask(client):
    return client.messages.create(
        model="claude-opus-4-7", max_tokens=128, messages=[{"role": "user", "content": "Audit my SSH config"}]
    )


def test_the_same_refusal_is_recovered_for_red_team_and_reaches_blue_team_as_a_refusal(harness, tenants, script_id):
    proxy, log = tenants
    red = ask(anthropic_sdk(proxy.url, RED_KEY, REFUSED, script_id + "-red"))
    assert red.stop_reason == "end_turn"
    assert red.content[0].text.startswith("Hardening checklist")
    # Haiku is on red team's chain, outside its allowlist: never sent.
    assert models_seen(harness, script_id + "-red") == ["claude-opus-4-7", "claude-sonnet-4-5"]

    blue = ask(anthropic_sdk(proxy.url, BLUE_KEY, REFUSED, script_id + "-blue"))
    assert blue.stop_reason == "refusal"
    assert blue.content == []
    assert models_seen(harness, script_id + "-blue") == ["claude-opus-4-7"]

    for seen in harness.seen(script_id + "-red") + harness.seen(script_id + "-blue"):
        assert "x-refusal-guard-key" not in seen["header"]
        # The client's own key goes on (newer SDKs send it as a bearer token).
        auth = seen["header"].get("x-api-key") or seen["header"].get("authorization", "")
        assert auth.endswith("sk-ant-client-own-key"), seen["header"]
    by_tenant = {r["tenant"]: r for r in records(log) if r.get("tenant")}
    assert by_tenant["red-team"]["outcome"] == "fallback"
    skipped = by_tenant["red-team"]["attempts"][1]
    assert (skipped["model"], skipped["result"]) == ("claude-haiku-4-5", "skipped")
    assert (by_tenant["blue-team"]["outcome"], by_tenant["blue-team"]["reason"]) == ("dead", "policy_stop")


def test_the_operator_key_is_spent_only_for_the_tenant_allowed_it(harness, tenants, script_id):
    proxy, log = tenants
    script = "e2e/anthropic-refusal.json,e2e/chat_completion.json"
    body = {
        "model": "claude-cross-source",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": f"Audit my SSH config [mock-script={script};mock-id={script_id}-red]"}],
    }
    red = anthropic_sdk(proxy.url, RED_KEY, script, script_id + "-red").messages.create(**body)
    assert red.stop_reason == "end_turn"
    [original, fallback] = harness.seen(script_id + "-red")
    assert fallback["path"] == "/v1/chat/completions"
    assert fallback["header"]["authorization"] == f"Bearer {OPENAI_OPERATOR_KEY}"

    # Green team takes the proxy's chain, to OpenAI, but holds no operator
    # key: the fallback is skipped, never sent, and the refusal reaches it.
    body["messages"][0]["content"] = f"Audit my SSH config [mock-script={script};mock-id={script_id}-green]"
    green = anthropic_sdk(proxy.url, GREEN_KEY, script, script_id + "-green").messages.create(**body)
    assert green.stop_reason == "refusal"
    assert len(harness.seen(script_id + "-green")) == 1, "no fallback spent the operator's key"
    [record] = [r for r in records(log) if r.get("tenant") == "green-team"]
    assert (record["reason"], record["attempts"][1]["result"]) == ("no_endpoint", "skipped")


def test_a_key_the_file_does_not_list_is_an_authentication_error_in_each_sdk(harness, tenants, script_id):
    import anthropic
    import openai

    proxy, _ = tenants
    client = anthropic_sdk(proxy.url, "someone-elses-key-0003", REFUSED, script_id)
    with pytest.raises(anthropic.AuthenticationError) as raised:
        ask(client)
    assert raised.value.status_code == 401
    chat = openai.OpenAI(base_url=proxy.url + "/v1", api_key="not-a-tenant-key-0004", max_retries=0, timeout=30)
    with pytest.raises(openai.AuthenticationError):
        chat.chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.AuthenticationError):
        chat.responses.create(model="gpt-5", input="hi")
    # google-genai sends its key as `x-goog-api-key`, which admits no
    # tenant: Google's 401 shape, which the SDK reads as UNAUTHENTICATED.
    from google import genai
    from google.genai import errors, types

    gemini = genai.Client(
        api_key="not-a-tenant-key-0006",
        http_options=types.HttpOptions(base_url=proxy.url, timeout=30_000),
    )
    with pytest.raises(errors.ClientError) as raised:
        gemini.models.generate_content(
            model="gemini-2.5-pro", contents=f"hi [mock-script={REFUSED};mock-id={script_id}]"
        )
    assert (raised.value.code, raised.value.status) == (401, "UNAUTHENTICATED")
    assert harness.seen(script_id) == []
