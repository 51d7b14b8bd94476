"""The official `openai` SDK through the proxy (Chat Completions): normal
traffic parses as without the proxy, an empty `content_filter` stop reaches
the SDK as the rescued answer, a partial one as the provider sent it."""


import openai
import pytest
from conftest import NOTE
from conftest import openai_client as client

STREAM = "e2e/openai_chat_text_e2aad469.bin"
EMPTY_FILTER = "openai/hand-written/chat_content_filter_empty.sse"
EMPTY_FILTER_JSON = "openai/hand-written/chat_content_filter_empty.json"
PARTIAL_FILTER = "openai/hand-written/chat_content_filter_partial.sse"
TOOLS = "e2e/openai_chat_tools_2018feb6.bin"
JSON = "e2e/chat_completion.json"


def chunks(c: openai.OpenAI):
    stream = c.chat.completions.create(
        model="gpt-4o-2024-08-06",
        messages=[{"role": "user", "content": "What's the weather?"}],
        stream=True,
    )
    return [chunk.model_dump() for chunk in stream]


@pytest.mark.parametrize("script", [STREAM, TOOLS])
def test_stream_parses_as_without_the_proxy(harness, script_id, script):
    through = chunks(client(harness.proxy, script, script_id))
    direct = chunks(client(harness.mock, script, script_id + "-direct"))
    assert through == direct and through
    seen = harness.seen(script_id)
    assert len(seen) == 1
    assert seen[0]["header"]["authorization"] == "Bearer sk-openai-dummy"
    assert seen[0]["path"] == "/v1/chat/completions"


def test_tool_call_arrives_intact(harness, script_id):
    calls = {}
    for chunk in chunks(client(harness.proxy, TOOLS, script_id)):
        for choice in chunk["choices"]:
            for call in choice["delta"].get("tool_calls") or []:
                entry = calls.setdefault(call["index"], {"name": "", "arguments": ""})
                fn = call.get("function") or {}
                entry["name"] += fn.get("name") or ""
                entry["arguments"] += fn.get("arguments") or ""
    assert calls[0]["name"] == "get_weather"
    assert calls[0]["arguments"].startswith("{")


def test_json_parses_as_without_the_proxy(harness, script_id):
    def call(base, sid):
        return client(base, JSON, sid).chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
        )

    through = call(harness.proxy, script_id)
    assert through.model_dump() == call(harness.mock, script_id + "-direct").model_dump()
    assert through.choices[0].message.content == "Hello from the mock upstream."


@pytest.mark.parametrize("stream", [True, False])
def test_simulated_content_filter(harness, stream):
    c = openai.OpenAI(base_url=harness.simulated + "/v1", api_key="dummy", max_retries=0)
    messages = [{"role": "user", "content": f"filtered first attempt, stream={stream}"}]
    if stream:
        parts = list(c.chat.completions.create(model="gpt-4o", messages=messages, stream=True))
        finish = [ch.choices[0].finish_reason for ch in parts if ch.choices and ch.choices[0].finish_reason]
        text = "".join(ch.choices[0].delta.content or "" for ch in parts if ch.choices)
    else:
        done = c.chat.completions.create(model="gpt-4o", messages=messages)
        finish = [done.choices[0].finish_reason]
        text = done.choices[0].message.content or ""
    assert finish == ["stop"]
    assert text.startswith("Simulated answer")


@pytest.mark.parametrize("stream", [True, False])
def test_simulated_responses_incomplete_is_rescued(harness, stream):
    c = openai.OpenAI(base_url=harness.simulated + "/v1", api_key="dummy", max_retries=0, timeout=30)
    prompt = f"responses: incomplete first attempt, stream={stream}"
    if stream:
        events = list(c.responses.create(model="gpt-4o", input=prompt, stream=True))
        kinds = [e.type for e in events]
        assert "response.incomplete" not in kinds
        assert kinds[-1] == "response.completed"
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        status = events[-1].response.status
    else:
        done = c.responses.create(model="gpt-4o", input=prompt)
        text = done.output_text
        status = done.status
    assert status == "completed"
    assert text.startswith("Simulated answer")


def test_empty_content_filter_stream_reaches_the_sdk_rescued(harness, script_id):
    parts = chunks(client(harness.proxy, f"{EMPTY_FILTER},{STREAM}", script_id))
    direct = chunks(client(harness.mock, STREAM, script_id + "-direct"))
    assert parts == direct, "the SDK sees only the rescued stream"
    seen = harness.seen(script_id)
    assert len(seen) == 2
    continuation = seen[1]["json"]
    assert continuation["messages"][-1]["role"] == "user"
    assert NOTE in continuation["messages"][-1]["content"]
    assert continuation["messages"][:-1] == seen[0]["json"]["messages"]


def test_empty_content_filter_json_reaches_the_sdk_rescued(harness, script_id):
    done = client(harness.proxy, f"{EMPTY_FILTER_JSON},{JSON}", script_id).chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
    )
    assert done.choices[0].finish_reason == "stop"
    assert done.choices[0].message.content == "Hello from the mock upstream."
    assert len(harness.seen(script_id)) == 2


def test_partial_content_filter_reaches_the_sdk_as_sent(harness, script_id):
    through = chunks(client(harness.proxy, PARTIAL_FILTER, script_id))
    direct = chunks(client(harness.mock, PARTIAL_FILTER, script_id + "-direct"))
    assert through == direct
    finish = [c["choices"][0]["finish_reason"] for c in through if c["choices"] and c["choices"][0]["finish_reason"]]
    assert finish == ["content_filter"]
    assert len(harness.seen(script_id)) == 1
