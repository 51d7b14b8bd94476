"""google-genai, the official Gemini SDK, through the real `refusal-guard`
binary in front of the scripted mock (which checks every request against
the Gemini contract): a copyright stop is no safety refusal, so the guard
falls back for it without the rescue note, and records it as `recitation`."""

import json

import pytest
from conftest import NOTE, logging_proxy

MODEL = "gemini-recite"
FALLBACK = "gemini-recite-fallback"
RECITATION = "e2e/gemini_recitation.sse"
ANSWER = "usage/gemini-answer.sse"


@pytest.fixture(scope="module")
def gemini(harness, tmp_path_factory):
    args = ["--upstream", harness.mock, "--chain", f"{MODEL}={FALLBACK}"]
    with logging_proxy("genai", args, tmp_path_factory.mktemp("genai")) as running:
        yield running


def stream_text(base_url: str, model: str, script: str, script_id: str):
    from google import genai
    from google.genai import types

    client = genai.Client(
        api_key="gemini-e2e-dummy",
        http_options=types.HttpOptions(base_url=base_url, timeout=30_000),
    )
    contents = f"Print the lyrics of that song. [mock-script={script};mock-id={script_id}]"
    chunks = list(client.models.generate_content_stream(model=model, contents=contents))
    return chunks


def records(log) -> list:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_a_recitation_is_served_by_the_chain_without_the_rescue_note(harness, gemini, script_id):
    proxy, log = gemini
    chunks = stream_text(proxy.url, MODEL, f"{RECITATION},{ANSWER}", script_id)
    assert "".join(chunk.text or "" for chunk in chunks) == "Here is a careful answer."
    seen = harness.seen(script_id)
    assert len(seen) == 2, [s["path"] for s in seen]
    assert f"/models/{FALLBACK}:streamGenerateContent" in seen[1]["path"], seen[1]["path"]
    assert seen[1]["json"] == seen[0]["json"], "the fallback sends the client's request as it was"
    assert NOTE not in seen[1]["body"]
    record = [r for r in records(log) if r["model"] == MODEL][-1]
    assert (record["category"], record["outcome"]) == ("recitation", "fallback"), record
    assert record["explanation"] == "cites: https://www.example.com/lyrics/song", record


def test_a_recitation_nothing_serves_reaches_the_sdk_as_sent_without_a_rescue(harness, gemini, script_id):
    from google.genai import types

    proxy, log = gemini
    # No chain for this model: the stop is served as the provider sent it.
    chunks = stream_text(proxy.url, "gemini-recite-alone", RECITATION, script_id)
    assert "".join(chunk.text or "" for chunk in chunks if not _thought(chunk)) == ""
    reasons = [c.candidates[0].finish_reason for c in chunks if c.candidates and c.candidates[0].finish_reason]
    assert reasons == [types.FinishReason.RECITATION], reasons
    assert len(harness.seen(script_id)) == 1, "no rescue was sent"
    record = [r for r in records(log) if r["model"] == "gemini-recite-alone"][-1]
    assert (record["category"], record["outcome"], record["reason"]) == ("recitation", "dead", "not_safety"), record


def _thought(chunk) -> bool:
    parts = chunk.candidates[0].content.parts if chunk.candidates and chunk.candidates[0].content else None
    return bool(parts) and all(part.thought for part in parts)
