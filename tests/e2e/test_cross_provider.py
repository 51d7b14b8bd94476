"""Fallbacks that cross providers, read by the official SDKs: the real
`refusal-guard` binary with chains naming another provider's models
(`claude-cross-source=openai:gpt-5`) and the operator's keys for them in
its environment, in front of the scripted mock, which checks every request
against the provider contract of the API it arrives on.

A fallback the guard translates carries none of the client's headers, so these
scripts are named in the conversation's text (`[mock-script=...]`), which
the translation keeps."""

import json
import os
import subprocess

import pytest
from conftest import logging_proxy, refusal_guard_binary

CHAINS = ";".join(
    [
        "claude-cross-source=openai:gpt-5",
        "gpt-cross-source=anthropic:claude-sonnet-4-5",
        "gemini-cross-source=anthropic:claude-sonnet-4-5",
    ]
)
OPERATOR = {
    "ANTHROPIC_API_KEY": "sk-ant-operator-e2e-secret",
    "OPENAI_API_KEY": "sk-openai-operator-e2e-secret",
    "GEMINI_API_KEY": "gemini-operator-e2e-secret",
}
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "The current weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
CLAUDE_TEXT = " Then close the ones you do not need."
RECOVERY_HEADER = "refusal-guard-recovery"


@pytest.fixture(scope="module")
def cross(harness, tmp_path_factory):
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(OPERATOR)
    args = ["--upstream", harness.mock, "--chain", CHAINS, "--rescue", "off"]
    with logging_proxy("cross", args, tmp_path_factory.mktemp("cross"), env=env) as running:
        yield running


def scripted(text: str, script: str, script_id: str) -> str:
    return f"{text} [mock-script={script};mock-id={script_id}]"


def fallback_of(harness, script_id: str) -> dict:
    """The second request the mock saw for this script: the fallback."""
    seen = harness.seen(script_id)
    assert len(seen) == 2, [(s["path"], s["header"]) for s in seen]
    return seen[1]


def assert_operator_credentials_only(fallback: dict, key_header: str, key: str, client_key: str):
    assert key_header in fallback["header"], fallback["header"]
    assert key in fallback["header"][key_header], fallback["header"]
    for name, value in fallback["header"].items():
        assert client_key not in value, f"the client's key went to another provider in {name}"


def anthropic_sdk(base_url: str):
    import anthropic

    return anthropic.Anthropic(base_url=base_url, api_key="sk-ant-client-e2e", max_retries=0, timeout=30)


def test_an_anthropic_refusal_streams_an_openai_tool_call_to_the_anthropic_sdk(harness, cross, script_id):
    proxy, _ = cross
    script = "e2e/think_then_refuse.sse,e2e/openai_chat_tools_2018feb6.bin"
    with anthropic_sdk(proxy.url).messages.stream(
        model="claude-cross-source",
        max_tokens=256,
        system="You answer weather questions.",
        tools=[WEATHER_TOOL],
        messages=[{"role": "user", "content": scripted("Weather in New York?", script, script_id)}],
    ) as stream:
        headers = stream.response.headers
        message = stream.get_final_message()

    assert headers[RECOVERY_HEADER] == "fallback; category=cyber; served-by=openai:gpt-5"
    assert message.stop_reason == "tool_use"
    [tool] = [block for block in message.content if block.type == "tool_use"]
    assert tool.name == "get_weather"
    assert tool.id == "call_4XzlGBLtUe9dy3GVNV4jhq7h"
    assert tool.input == {"city": "New York City"}
    assert message.usage.output_tokens == 16

    fallback = fallback_of(harness, script_id)
    assert fallback["path"] == "/v1/chat/completions"
    assert_operator_credentials_only(fallback, "authorization", OPERATOR["OPENAI_API_KEY"], "sk-ant-client-e2e")
    assert "x-api-key" not in fallback["header"] and "anthropic-version" not in fallback["header"]
    body = fallback["json"]
    assert body["model"] == "gpt-5" and body["stream"] is True
    assert body["messages"][0] == {"role": "system", "content": "You answer weather questions."}
    assert body["messages"][1]["role"] == "user"
    assert "Weather in New York?" in json.dumps(body["messages"][1])
    assert [t["function"]["name"] for t in body["tools"]] == ["get_weather"]
    assert body["tools"][0]["function"]["parameters"] == WEATHER_TOOL["input_schema"]


def test_an_anthropic_refusal_creates_an_openai_answer_for_the_anthropic_sdk(harness, cross, script_id):
    proxy, _ = cross
    script = "e2e/anthropic-refusal.json,e2e/chat_completion.json"
    raw = anthropic_sdk(proxy.url).messages.with_raw_response.create(
        model="claude-cross-source",
        max_tokens=128,
        messages=[{"role": "user", "content": scripted("Audit my SSH config", script, script_id)}],
    )
    message = raw.parse()
    assert raw.headers[RECOVERY_HEADER] == "fallback; category=cyber; served-by=openai:gpt-5"
    assert [block.text for block in message.content] == ["Hello from the mock upstream."]
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (9, 6)

    fallback = fallback_of(harness, script_id)
    assert fallback["path"] == "/v1/chat/completions"
    assert fallback["json"]["model"] == "gpt-5" and not fallback["json"].get("stream")
    assert_operator_credentials_only(fallback, "authorization", OPERATOR["OPENAI_API_KEY"], "sk-ant-client-e2e")


def openai_sdk(base_url: str):
    import openai

    return openai.OpenAI(base_url=base_url + "/v1", api_key="sk-openai-client-e2e", max_retries=0, timeout=30)


def assert_claude_fallback(harness, script_id: str, client_key: str) -> dict:
    fallback = fallback_of(harness, script_id)
    assert fallback["path"] == "/v1/messages"
    assert_operator_credentials_only(fallback, "x-api-key", OPERATOR["ANTHROPIC_API_KEY"], client_key)
    assert "authorization" not in fallback["header"] and "x-goog-api-key" not in fallback["header"]
    assert fallback["header"]["anthropic-version"] == "2023-06-01"
    assert fallback["json"]["model"] == "claude-sonnet-4-5"
    assert fallback["json"]["max_tokens"] > 0
    return fallback


def assert_streamed_claude_fallback(harness, script_id: str):
    """The fallback of an openai SDK stream whose instructions were "You audit
    networks.": streamed, with them as the Claude request's system."""
    fallback = assert_claude_fallback(harness, script_id, "sk-openai-client-e2e")
    assert fallback["json"]["stream"] is True
    assert fallback["json"]["system"] in ("You audit networks.", [{"type": "text", "text": "You audit networks."}])


def test_an_openai_content_filter_streams_a_claude_answer_to_the_openai_sdk(harness, cross, script_id):
    proxy, _ = cross
    script = "openai/hand-written/chat_content_filter_empty.sse,e2e/continuation_text.sse"
    stream = openai_sdk(proxy.url).chat.completions.create(
        model="gpt-cross-source",
        stream=True,
        stream_options={"include_usage": True},
        messages=[
            {"role": "system", "content": "You audit networks."},
            {"role": "user", "content": scripted("Which ports should I close?", script, script_id)},
        ],
    )
    headers = stream.response.headers
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    usage = [c.usage for c in chunks if c.usage]

    assert headers[RECOVERY_HEADER].startswith("fallback; ")
    assert headers[RECOVERY_HEADER].endswith("served-by=anthropic:claude-sonnet-4-5")
    assert text == CLAUDE_TEXT
    assert finish == ["stop"]
    assert len(usage) == 1 and usage[0].completion_tokens > 0, usage

    assert_streamed_claude_fallback(harness, script_id)


def test_an_openai_content_filter_creates_a_claude_answer_for_the_openai_sdk(harness, cross, script_id):
    proxy, _ = cross
    script = "openai/hand-written/chat_content_filter_empty.json,e2e/message_text.json"
    completion = openai_sdk(proxy.url).chat.completions.create(
        model="gpt-cross-source",
        messages=[{"role": "user", "content": scripted("Harden my server", script, script_id)}],
    )
    assert completion.choices[0].message.content == (
        "Hardening checklist: disable password logins, keep packages patched."
    )
    assert completion.choices[0].finish_reason == "stop"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (20, 14)
    assert_claude_fallback(harness, script_id, "sk-openai-client-e2e")


def test_a_responses_content_filter_streams_a_claude_answer_to_responses_stream(harness, cross, script_id):
    """The openai SDK's typed Responses stream rebuilds the translated events
    (items by output index, parts by content index) and parses the final
    `response.completed`."""
    proxy, _ = cross
    script = "openai/hand-written/responses_incomplete_content_filter.sse,e2e/continuation_text.sse"
    with openai_sdk(proxy.url).responses.stream(
        model="gpt-cross-source",
        instructions="You audit networks.",
        input=[{"role": "user", "content": scripted("Which ports should I close?", script, script_id)}],
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()

    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert "".join(e.delta for e in deltas) == CLAUDE_TEXT
    assert deltas[-1].snapshot == CLAUDE_TEXT
    numbers = [e.sequence_number for e in events]
    assert numbers == list(range(len(events))), numbers
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert final.status == "completed"
    assert final.id.startswith("resp_")
    assert final.output_text == CLAUDE_TEXT
    assert final.usage.output_tokens > 0

    assert_streamed_claude_fallback(harness, script_id)


def test_a_responses_refusal_creates_a_claude_answer_for_the_openai_sdk(harness, cross, script_id):
    proxy, _ = cross
    script = "openai/hand-written/responses_refusal.json,e2e/message_text.json"
    raw = openai_sdk(proxy.url).responses.with_raw_response.create(
        model="gpt-cross-source",
        input=scripted("Harden my server", script, script_id),
    )
    response = raw.parse()
    assert raw.headers[RECOVERY_HEADER].endswith("served-by=anthropic:claude-sonnet-4-5")
    assert response.status == "completed"
    assert response.output_text == "Hardening checklist: disable password logins, keep packages patched."
    assert (response.usage.input_tokens, response.usage.output_tokens) == (20, 14)
    fallback = assert_claude_fallback(harness, script_id, "sk-openai-client-e2e")
    assert not fallback["json"].get("stream")


def test_a_gemini_block_streams_a_claude_answer_to_google_genai(harness, cross, script_id):
    from google import genai
    from google.genai import types

    proxy, _ = cross
    client = genai.Client(
        api_key="gemini-client-e2e",
        http_options=types.HttpOptions(base_url=proxy.url, timeout=30_000),
    )
    script = "usage/gemini-safety.sse,e2e/continuation_text.sse"
    chunks = list(
        client.models.generate_content_stream(
            model="gemini-cross-source",
            contents=scripted("Explain how this exploit works", script, script_id),
        )
    )
    assert "".join(chunk.text or "" for chunk in chunks) == CLAUDE_TEXT
    reasons = [c.candidates[0].finish_reason for c in chunks if c.candidates and c.candidates[0].finish_reason]
    assert [str(r) for r in reasons] == [str(types.FinishReason.STOP)]
    fallback = assert_claude_fallback(harness, script_id, "gemini-client-e2e")
    assert fallback["json"]["stream"] is True


def test_every_cross_provider_fallback_is_in_the_record_and_the_report(cross):
    """Runs after the fallbacks above (pytest keeps file order): the log names
    each fallback's provider, and the report counts them from -> to."""
    proxy, log = cross
    records = [json.loads(line) for line in log.read_text().splitlines()]
    fallbacks = {
        (record["provider"], attempt["provider"], attempt["result"])
        for record in records
        for attempt in record["attempts"]
        if "provider" in attempt
    }
    assert fallbacks == {
        ("anthropic", "openai", "served"),
        ("openai", "anthropic", "served"),
        ("google", "anthropic", "served"),
    }, records
    report = subprocess.run(
        [str(refusal_guard_binary()), "report", "--log", str(log)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert report.returncode == 0, report.stderr
    assert "Fallbacks to another provider:" in report.stdout, report.stdout
    assert "anthropic -> openai [cyber] served" in report.stdout, report.stdout
    assert "openai -> anthropic [content_filter] served" in report.stdout, report.stdout
    assert "google -> anthropic [" in report.stdout, report.stdout
    # The operator's keys are spent, never shown.
    for key in OPERATOR.values():
        assert key not in proxy.stderr()
        assert key not in log.read_text()
