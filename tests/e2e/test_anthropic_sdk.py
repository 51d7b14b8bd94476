"""The official `anthropic` SDK through the proxy, streaming and not."""

import json
import time

import anthropic
import pytest
from conftest import NOTE
from conftest import anthropic_client as client

MODEL = "claude-opus-4-7"
TEXT = "anthropic/anthropic-sdk-python/basic_response.txt"
EMPTY_REFUSAL = "anthropic/anthropic-sdk-python/refusal_response.txt"
PARTIAL = "anthropic/anthropic-sdk-python/stream-a-refusal.sse"
TOOL_USE = "anthropic/anthropic-sdk-python/tool_use_response.txt"


def stream_final(c: anthropic.Anthropic, model: str = MODEL, **extra):
    with c.messages.stream(
        model=model,
        max_tokens=1024,
        messages=[{"role": "user", "content": "Check my SSH setup"}],
        **extra,
    ) as stream:
        return stream.get_final_message()


def create(c: anthropic.Anthropic, model: str = MODEL, **extra):
    return c.messages.create(
        model=model,
        max_tokens=1024,
        messages=[{"role": "user", "content": "Check my SSH setup"}],
        **extra,
    )


@pytest.mark.parametrize("script,call", [(TEXT, stream_final), ("e2e/message_text.json", create)])
def test_normal_traffic_parses_as_without_the_proxy(harness, script_id, script, call):
    through = call(client(harness.proxy, script, script_id))
    direct = call(client(harness.mock, script, script_id + "-direct"))
    assert through.model_dump() == direct.model_dump()
    assert through.stop_reason == "end_turn"
    assert through.content[0].type == "text" and through.content[0].text.strip()
    seen = harness.seen(script_id)
    assert len(seen) == 1
    # Credentials reach the configured upstream (this SDK version sends a
    # bearer token; older ones send x-api-key).
    auth = seen[0]["header"].get("x-api-key") or seen[0]["header"].get("authorization", "")
    assert auth.endswith("sk-ant-dummy-key")
    assert seen[0]["header"]["host"] == harness.mock.removeprefix("http://")


def test_normal_stream_events_unchanged(harness, script_id):
    """The raw event sequence, not just the final message, is the provider's."""

    def events(base, sid):
        c = client(base, TEXT, sid)
        stream = c.messages.create(
            model=MODEL, max_tokens=64, stream=True, messages=[{"role": "user", "content": "hi"}]
        )
        return [event.model_dump() for event in stream]

    assert events(harness.proxy, script_id) == events(harness.mock, script_id + "-direct")


def assert_rescue_continuation(harness, script_id):
    seen = harness.seen(script_id)
    assert len(seen) == 2, "the original, then one rescue continuation"
    first, rescue = seen[0]["json"], seen[1]["json"]
    assert NOTE not in json.dumps(first)
    assert NOTE in json.dumps(rescue) and "cyber" in json.dumps(rescue)
    assert rescue["model"] == MODEL
    assert rescue["messages"][-1]["role"] == "user"


def test_empty_refusal_stream_reaches_the_sdk_rescued(harness, script_id):
    message = stream_final(client(harness.proxy, f"{EMPTY_REFUSAL},{TOOL_USE}", script_id))
    assert message.stop_reason == "tool_use"
    kinds = [block.type for block in message.content]
    assert kinds == ["text", "tool_use"]
    tool = message.content[1]
    assert tool.name == "get_weather"
    # The fixture's input_json_delta fragments, joined and parsed by the SDK.
    assert tool.input == {"location": "Paris"}
    assert_rescue_continuation(harness, script_id)


def test_empty_refusal_json_reaches_the_sdk_rescued(harness, script_id):
    c = client(harness.proxy, "e2e/anthropic-refusal.json,e2e/message_tool_use.json", script_id)
    message = create(c)
    assert message.stop_reason == "tool_use"
    assert message.content[0].text == "I'll check the SSH configuration."
    assert message.content[1].type == "tool_use"
    assert message.content[1].input == {"path": "/etc/ssh/sshd_config"}
    assert_rescue_continuation(harness, script_id)


def test_partial_refusal_stream_arrives_as_sent(harness, script_id):
    through = stream_final(client(harness.proxy, PARTIAL, script_id))
    direct = stream_final(client(harness.mock, PARTIAL, script_id + "-direct"))
    assert through.stop_reason == "refusal"
    assert through.model_dump() == direct.model_dump()
    assert len(harness.seen(script_id)) == 1, "a partial refusal is never retried"


def test_partial_refusal_json_arrives_as_sent(harness, script_id):
    message = create(client(harness.proxy, "e2e/message_partial_refusal.json", script_id))
    assert message.stop_reason == "refusal"
    assert message.content[0].text == "Here is the start of an answer"
    assert len(harness.seen(script_id)) == 1


def test_retarget_and_chain_models_are_as_configured(harness, script_id):
    c = client(harness.proxy, f"{EMPTY_REFUSAL},{TEXT}", script_id)
    # The server-side fallbacks list needs its beta, as the real API says
    # (the mock upstream keeps that rule).
    message = stream_final(
        c,
        model="claude-chain-source",
        extra_body={"fallbacks": [{"model": "claude-own-choice"}]},
        extra_headers={"anthropic-beta": "server-side-fallback-2026-07-01"},
    )
    assert message.content[0].text == "Hello there!"
    seen = harness.seen(script_id)
    assert len(seen) == 2
    first, fallback = seen[0]["json"], seen[1]["json"]
    assert [f["model"] for f in first["fallbacks"]] == ["claude-retarget-a", "claude-retarget-b"]
    assert first["model"] == "claude-chain-source"
    assert fallback["model"] == "claude-chain-target", "the chain's next model answers"
    assert NOTE not in json.dumps(fallback), "a fallback is the same request on another model"


def test_refusals_are_logged(harness, script_id):
    # A model name of this test's own: its record is the one naming it, not
    # one an earlier test left in the shared log.
    model = f"claude-opus-4-7-{script_id}"
    stream_final(client(harness.proxy, f"{EMPTY_REFUSAL},{TEXT}", script_id), model=model)
    deadline = time.monotonic() + 10
    while True:
        lines = [json.loads(l) for l in harness.log.read_text().splitlines() if l.strip()]
        mine = [l for l in lines if l["model"] == model]
        if mine or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert [(l["outcome"], l["category"]) for l in mine] == [("rescued", "cyber")], mine
    assert [a["step"] for a in mine[0]["attempts"]] == ["original", "rescue"], mine
    assert all("sk-ant" not in json.dumps(l) for l in lines), "no keys in the log"


def test_simulated_provider_is_rescued(harness):
    c = anthropic.Anthropic(base_url=harness.simulated, api_key="dummy", max_retries=0)
    message = stream_final(c)
    assert message.stop_reason == "end_turn"
    assert message.content[0].text.startswith("Simulated answer")


def test_unreachable_upstream_is_a_typed_sdk_error(harness):
    c = anthropic.Anthropic(base_url=harness.unreachable, api_key="dummy", max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as raised:
        create(c)
    assert raised.value.status_code == 502
    assert raised.value.body["error"]["type"] == "api_error"
    assert "unreachable" in raised.value.body["error"]["message"]


THINK_THEN_REFUSE = "e2e/think_then_refuse.sse"


def test_live_thinking_rescue_parses_as_one_message(harness, script_id):
    """With live thinking, the SDK sees the thinking, then the rescued text,
    as one message: the recovered turn continues the message it began."""
    message = stream_final(client(harness.live, f"{THINK_THEN_REFUSE},{TEXT}", script_id))
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert message.content[0].thinking.startswith("The user asks about their SSH")
    assert message.content[1].text == "Hello there!"
    assert message.stop_reason == "end_turn"
    seen = harness.seen(script_id)
    assert len(seen) == 2
    assert NOTE in json.dumps(seen[1]["json"]["messages"][-1])


def test_live_thinking_without_a_rescue_is_the_refusal_as_sent(harness, script_id):
    through = stream_final(client(harness.live, THINK_THEN_REFUSE, script_id))
    direct = stream_final(client(harness.mock, THINK_THEN_REFUSE, script_id + "-direct"))
    # The script has one reply, so the rescue gets the mock's 500 and the
    # client gets the original refusal, byte for byte.
    assert through.model_dump() == direct.model_dump()
    assert through.stop_reason == "refusal"


PARTIAL_CLAIM = "e2e/partial_refusal_claim.sse"
CONTINUATION = "e2e/continuation_text.sse"
PARTIAL_TEXT = "Start by listing the services that listen on the network."
CONTINUED_TEXT = " Then close the ones you do not need."


def test_partial_refusal_with_a_prefill_claim_is_continued_in_one_message(harness, script_id):
    """With --continue-partial, a stream refused after text (claim + token)
    reads, in the SDK, as one message: the partial text, then the fallback's."""
    c = client(harness.partial, f"{PARTIAL_CLAIM},{CONTINUATION}", script_id)
    with c.messages.stream(
        model=MODEL,
        max_tokens=1024,
        messages=[{"role": "user", "content": "Harden my server"}],
    ) as stream:
        events = [event.type for event in stream]
        message = stream.get_final_message()
    assert events.count("message_start") == 1
    assert events.count("message_delta") == 1
    assert [block.type for block in message.content] == ["text", "text"]
    assert "".join(block.text for block in message.content) == PARTIAL_TEXT + CONTINUED_TEXT
    assert message.stop_reason == "end_turn"
    seen = harness.seen(script_id)
    assert len(seen) == 2
    second = seen[1]["json"]
    assert second["model"] == "claude-sonnet-4-5"
    assert second["messages"][-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": PARTIAL_TEXT}],
    }
    assert second["fallback_credit_token"] == {"token": "tok_e2e_partial", "mode": "best_effort"}
    assert "fallback-credit-2026-07-01" in seen[1]["header"]["anthropic-beta"]


def test_a_continuation_presenting_a_credit_token_drops_the_clients_fallbacks(harness, script_id):
    """The API rejects `fallbacks` beside a `fallback_credit_token`: the
    continuation that presents the refusal's token leaves the client's own
    server-side list out (the mock keeps the contract, and the test fails
    on a request it rejected), and the SDK still reads one message."""
    c = client(harness.partial, f"{PARTIAL_CLAIM},{CONTINUATION}", script_id)
    message = stream_final(
        c,
        extra_body={"fallbacks": [{"model": "claude-haiku-4-5"}]},
        extra_headers={"anthropic-beta": "server-side-fallback-2026-07-01"},
    )
    assert "".join(block.text for block in message.content) == PARTIAL_TEXT + CONTINUED_TEXT
    seen = harness.seen(script_id)
    assert len(seen) == 2
    assert seen[0]["json"]["fallbacks"] == [{"model": "claude-haiku-4-5"}]
    assert "fallbacks" not in seen[1]["json"]
    assert seen[1]["json"]["fallback_credit_token"]["token"] == "tok_e2e_partial"


def test_partial_refusal_whose_prefill_is_rejected_is_the_original(harness, script_id):
    through = stream_final(client(harness.partial, f"{PARTIAL_CLAIM},status=400", script_id))
    direct = stream_final(client(harness.mock, PARTIAL_CLAIM, script_id + "-direct"))
    assert through.model_dump() == direct.model_dump()
    assert through.stop_reason == "refusal"
    assert through.content[0].text == PARTIAL_TEXT
    assert len(harness.seen(script_id)) == 2


def test_partial_refusal_after_a_tool_call_is_untouched(harness, script_id):
    script = "anthropic/anthropic-sdk-python/stream-a-toolrefusal.sse"
    through = stream_final(client(harness.partial, f"{script},{CONTINUATION}", script_id))
    direct = stream_final(client(harness.mock, script, script_id + "-direct"))
    assert through.model_dump() == direct.model_dump()
    assert len(harness.seen(script_id)) == 1


def test_json_partial_refusal_with_a_prefill_claim_is_continued_in_one_message(harness, script_id):
    script = "e2e/message_partial_refusal_claim.json,e2e/message_continuation.json"
    message = create(client(harness.partial, script, script_id))
    assert "".join(block.text for block in message.content) == PARTIAL_TEXT + CONTINUED_TEXT
    assert message.stop_reason == "end_turn"
    seen = harness.seen(script_id)
    assert len(seen) == 2
    assert seen[1]["json"]["messages"][-1]["role"] == "assistant"
    assert seen[1]["json"]["fallback_credit_token"]["token"] == "tok_e2e_json"


# The marked proxy: the chain claude-opus-4-7 -> claude-sonnet-4-5, its
# fallbacks marked as the provider marks its own server-side ones.
FALLBACK_MODEL = "claude-sonnet-4-5"


def primary_id(fixture: str) -> str:
    """The message id a recorded stream opens with."""
    from conftest import ROOT

    text = (ROOT / "tests/fixtures" / fixture).read_text()
    for line in text.splitlines():
        if line.startswith("data: ") and '"message_start"' in line:
            return json.loads(line[len("data: ") :])["message"]["id"]
    raise AssertionError(f"no message_start in {fixture}")


def assert_marked_chain(message):
    from anthropic.types.beta import (
        BetaFallbackBlock,
        BetaFallbackMessageIterationUsage,
        BetaMessageIterationUsage,
    )

    marker = message.content[0]
    assert isinstance(marker, BetaFallbackBlock), type(marker)
    assert (marker.from_.model, marker.to.model) == (MODEL, FALLBACK_MODEL)
    assert marker.trigger.type == "refusal"
    assert message.content[1].type == "text"
    iterations = message.usage.iterations
    assert [type(i) for i in iterations] == [
        BetaMessageIterationUsage,
        BetaFallbackMessageIterationUsage,
    ]
    assert [i.model for i in iterations] == [MODEL, FALLBACK_MODEL]


def test_a_marked_chain_streams_as_the_beta_sdk_parses_a_server_side_one(harness, script_id):
    c = client(harness.marked, f"{EMPTY_REFUSAL},{TEXT}", script_id)
    with c.beta.messages.stream(
        model=MODEL,
        max_tokens=1024,
        messages=[{"role": "user", "content": "Check my SSH setup"}],
    ) as stream:
        message = stream.get_final_message()
    assert_marked_chain(message)
    assert message.id == primary_id(EMPTY_REFUSAL), "the primary's message id is kept"
    assert message.model == FALLBACK_MODEL, "the last fallback block names the served model"
    assert message.content[0].trigger.category == "cyber"
    assert message.content[1].text == "Hello there!"
    assert [r["json"]["model"] for r in harness.seen(script_id)] == [MODEL, FALLBACK_MODEL]


def test_a_marked_chain_creates_as_the_beta_sdk_parses_a_server_side_one(harness, script_id):
    c = client(harness.marked, "e2e/anthropic-refusal.json,e2e/message_text.json", script_id)
    message = c.beta.messages.create(
        model=MODEL,
        max_tokens=1024,
        messages=[{"role": "user", "content": "Check my SSH setup"}],
    )
    assert_marked_chain(message)
    assert message.id == "msg_01RefusalExampleAbcdefghijk", "the primary's message id is kept"
    assert message.usage.input_tokens == 20, "top-level usage is the serving attempt's"
    assert message.usage.iterations[0].input_tokens == 18
    assert message.content[1].text.startswith("Hardening checklist")
