//! The recovery ladder on OpenAI Chat Completions, OpenAI Responses and
//! Azure OpenAI, through the public API.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use refusal_guard::refusal::{
    AttemptResult, AttemptStep, DeadReason, RefusalKind, RefusalSignal, WireApi,
};
use refusal_guard::telemetry::MemorySink;
use refusal_guard::{Outcome, Refusal, RefusalGuardLayer, RefusalHandle};
use serde_json::{json, Value};
use support::*;
use tower::{Layer, Service, ServiceExt};

const CHAT_URL: &str = "https://api.openai.com/v1/chat/completions";
const RESPONSES_URL: &str = "https://api.openai.com/v1/responses";
const AZURE_URL: &str =
    "https://example.openai.azure.com/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21";

const CHAT_FILTERED: &str = "openai/hand-written/chat_content_filter_empty.sse";
const CHAT_PARTIAL: &str = "openai/hand-written/chat_content_filter_partial.sse";
const CHAT_REFUSAL: &str =
    "openai/openai-python/173417d553406f034f643e5db3f8d591fb691ebac56f5ae39a22cc7d455c5353.bin";
const CHAT_TEXT: &str =
    "openai/openai-python/83b060bae42eb41c4f1edbb7c1542b954b37d9dfd1910b964ddebc9677e6ae85.bin";
const RESPONSES_REFUSAL: &str = "openai/hand-written/responses_refusal.sse";
const RESPONSES_FILTERED: &str = "openai/hand-written/responses_incomplete_content_filter.sse";
const RESPONSES_PARTIAL: &str = "openai/hand-written/responses_incomplete_partial.sse";
const AZURE_FILTERED: &str = "azure/hand-written/chat_stream_content_filter_empty.sse";
const AZURE_400: &str = "azure/hand-written/chat_prompt_content_filter_400.json";

fn post_to(url: &str, body: &Value) -> http::Request<Full<Bytes>> {
    let bytes = serde_json::to_vec(body).unwrap();
    http::Request::post(url)
        .header("content-type", "application/json")
        .header("content-length", bytes.len())
        .header("authorization", "Bearer sk-test")
        .body(Full::new(Bytes::from(bytes)))
        .unwrap()
}

fn chat_request(stream: bool) -> Value {
    json!({
        "model": "gpt-4o",
        "stream": stream,
        "messages": [
            {"role": "developer", "content": "You are a security assistant."},
            {"role": "user", "content": "What is the weather?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ],
    })
}

fn responses_request(input: Value) -> Value {
    json!({"model": "gpt-4o", "stream": true, "instructions": "Be brief.", "input": input})
}

/// The vercel/ai Responses text stream, framed as the API sends it.
fn responses_text() -> Bytes {
    let file = fixture("openai/vercel-ai/responses/openai-phase.1.chunks.txt");
    let mut out = String::new();
    for line in std::str::from_utf8(&file).unwrap().lines() {
        let event: Value = serde_json::from_str(line).unwrap();
        out.push_str(&format!(
            "event: {}\ndata: {line}\n\n",
            event["type"].as_str().unwrap()
        ));
    }
    Bytes::from(out)
}

fn guard_with(
    upstream: &Upstream,
    layer: RefusalGuardLayer,
) -> (
    MemorySink,
    impl Service<
        http::Request<Full<Bytes>>,
        Response = http::Response<refusal_guard::GuardBody<Chunked>>,
        Error = tower::BoxError,
    >,
) {
    let sink = MemorySink::new();
    let guard = layer.telemetry(sink.clone()).layer(upstream.service());
    (sink, guard)
}

// ---------------------------------------------------------------- rescue

#[tokio::test]
async fn chat_empty_filter_is_rescued_with_a_user_message_at_the_end() {
    let request = chat_request(true);
    let replies = Reply::fixtures(&[CHAT_FILTERED, CHAT_TEXT]);
    let done = exchange(
        RefusalGuardLayer::new(),
        replies,
        post_to(CHAT_URL, &request),
    )
    .await;
    let seen = done
        .assert_served_on_the_second_call(&fixture(CHAT_TEXT), "the client gets the continuation");
    assert_eq!(seen[1].uri, CHAT_URL);
    let continuation = seen[1].json();
    let messages = continuation["messages"].as_array().unwrap();
    let original = request["messages"].as_array().unwrap();
    assert_eq!(messages.len(), original.len() + 1);
    assert_eq!(
        &messages[..original.len()],
        &original[..],
        "history untouched"
    );
    let note = messages.last().unwrap();
    assert_eq!(note["role"], "user");
    let text = note["content"].as_str().expect("plain string content");
    assert!(text.contains("content_filter"), "{text}");
    assert_eq!(continuation["model"], "gpt-4o");
    assert_eq!(continuation["stream"], true);

    let refusal = done.refusal().expect("typed refusal");
    assert_eq!(refusal.outcome, Outcome::Rescued);
    assert_eq!(refusal.wire_api, WireApi::OpenAiChatCompletions);
    assert_eq!(refusal.signal, RefusalSignal::StopReason);
    let records = done.sink.records();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].attempts.len(), 2);
    assert_eq!(records[0].attempts[1].step, AttemptStep::Rescue);
    assert_eq!(records[0].attempts[1].result, AttemptResult::Served);
}

#[tokio::test]
async fn chat_structured_outputs_refusal_is_rescued_and_the_note_quotes_it() {
    let replies = Reply::fixtures(&[CHAT_REFUSAL, CHAT_TEXT]);
    let request = post_to(CHAT_URL, &chat_request(true));
    let done = exchange(RefusalGuardLayer::new(), replies, request).await;
    assert_eq!(done.body, fixture(CHAT_TEXT));
    let note = done.upstream.seen()[1].last_message()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(note.contains("model_refusal"), "{note}");
    assert!(
        note.contains("I'm sorry, I can't assist with that request."),
        "{note}"
    );
    let records = done.sink.records();
    assert_eq!(records[0].signal, RefusalSignal::ModelRefusal);
    assert_eq!(records[0].outcome, Outcome::Rescued);
}

#[tokio::test]
async fn responses_refusal_with_string_input_is_rescued_through_an_input_array() {
    let replies = vec![
        Reply::sse(&fixture(RESPONSES_REFUSAL)),
        Reply::sse(&responses_text()),
    ];
    let request = post_to(RESPONSES_URL, &responses_request(json!("scan my host")));
    let done = exchange(RefusalGuardLayer::new(), replies, request).await;
    assert_eq!(done.body, responses_text());
    let seen = done.upstream.seen();
    assert_eq!(seen.len(), 2);
    let continuation = seen[1].json();
    let input = continuation["input"]
        .as_array()
        .expect("input became an array");
    assert_eq!(input.len(), 2);
    assert_eq!(input[0], json!({"role": "user", "content": "scan my host"}));
    assert_eq!(input[1]["role"], "user");
    let note = input[1]["content"].as_str().unwrap();
    assert!(
        note.contains("I'm sorry, but I can't help with that."),
        "{note}"
    );
    assert_eq!(continuation["instructions"], "Be brief.");
    let refusal = done.refusal().unwrap();
    assert_eq!(refusal.outcome, Outcome::Rescued);
    assert_eq!(refusal.wire_api, WireApi::OpenAiResponses);
    assert_eq!(refusal.signal, RefusalSignal::ModelRefusal);
    assert_eq!(done.sink.records()[0].outcome, Outcome::Rescued);
}

#[tokio::test]
async fn responses_filter_with_item_input_and_previous_response_is_rescued() {
    let mut request = responses_request(json!([
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
    ]));
    request["previous_response_id"] = json!("resp_prev");
    let replies = vec![
        Reply::sse(&fixture(RESPONSES_FILTERED)),
        Reply::sse(&responses_text()),
    ];
    let done = exchange(
        RefusalGuardLayer::new(),
        replies,
        post_to(RESPONSES_URL, &request),
    )
    .await;
    assert_eq!(done.body, responses_text());
    let continuation = done.upstream.seen()[1].json();
    assert_eq!(continuation["previous_response_id"], "resp_prev");
    let input = continuation["input"].as_array().unwrap();
    assert_eq!(input.len(), 2);
    assert_eq!(input[0], request["input"][0], "the tool output stays first");
    assert_eq!(input[1]["role"], "user");
    assert!(input[1]["content"]
        .as_str()
        .unwrap()
        .contains("content_filter"));
    let refusal = done.refusal().unwrap();
    assert_eq!(refusal.category.as_deref(), Some("content_filter"));
    assert_eq!(refusal.outcome, Outcome::Rescued);
}

#[tokio::test]
async fn chat_json_refusal_is_rescued_with_a_json_continuation() {
    let replies = vec![
        Reply::Json(fixture(
            "openai/semantic-kernel/chat_completion_refusal_test_response.json",
        )),
        Reply::Json(fixture("openai/vercel-ai/chat/openai-text.json")),
    ];
    let request = post_to(CHAT_URL, &chat_request(false));
    let done = exchange(RefusalGuardLayer::new(), replies, request).await;
    assert_eq!(done.body, fixture("openai/vercel-ai/chat/openai-text.json"));
    let continuation = done.upstream.seen()[1].json();
    assert_eq!(continuation["stream"], false);
    assert_eq!(
        continuation["messages"].as_array().unwrap().last().unwrap()["role"],
        "user"
    );
    assert_eq!(done.refusal().unwrap().outcome, Outcome::Rescued);
}

// ---------------------------------------------------------------- partial

#[tokio::test]
async fn partial_refusals_are_left_alone() {
    for (url, request, file) in [
        (CHAT_URL, chat_request(true), CHAT_PARTIAL),
        (
            RESPONSES_URL,
            responses_request(json!("hi")),
            RESPONSES_PARTIAL,
        ),
        (
            AZURE_URL,
            chat_request(true),
            "azure/hand-written/chat_stream_content_filter_partial.sse",
        ),
    ] {
        let replies = vec![Reply::sse(&fixture(file))];
        let done = exchange(RefusalGuardLayer::new(), replies, post_to(url, &request)).await;
        assert_eq!(done.body, fixture(file), "{file}");
        assert_eq!(done.upstream.seen().len(), 1, "{file}: no extra request");
        assert!(done.refusal().is_none());
        let settled = done
            .parts
            .extensions
            .get::<RefusalHandle>()
            .unwrap()
            .get()
            .expect("partial refusal recorded");
        assert_eq!(settled.kind, RefusalKind::Partial, "{file}");
        assert_eq!(settled.outcome, Outcome::Partial, "{file}");
        assert_eq!(done.sink.records()[0].outcome, Outcome::Partial);
    }
}

// ---------------------------------------------------------------- fallback

/// Sends `request` to `url` with the test chains: the upstream refuses with
/// `refused`, the first fallback answers `answer`, and the client gets `answer`.
async fn fallback(url: &str, request: &Value, refused: Bytes, answer: Bytes) -> Exchange {
    let layer = RefusalGuardLayer::new().fallback_chains(chains());
    let replies = vec![Reply::sse(&refused), Reply::sse(&answer)];
    let done = exchange(layer, replies, post_to(url, request)).await;
    assert_eq!(done.body, answer);
    done
}

#[tokio::test]
async fn chat_fallback_swaps_the_body_model() {
    let request = chat_request(true);
    let done = fallback(
        CHAT_URL,
        &request,
        fixture(CHAT_FILTERED),
        fixture(CHAT_TEXT),
    )
    .await;
    let fallback = done.upstream.seen()[1].json();
    assert_eq!(fallback["model"], "gpt-4o-mini");
    assert_eq!(
        fallback["messages"], request["messages"],
        "no note on a fallback"
    );
    let refusal = done.refusal().unwrap();
    assert_eq!(refusal.outcome, Outcome::Fallback);
    assert_eq!(
        done.sink.records()[0].attempts[1].step,
        AttemptStep::Fallback
    );
    assert_eq!(
        done.sink.records()[0].attempts[1].model.as_deref(),
        Some("gpt-4o-mini")
    );
}

#[tokio::test]
async fn responses_fallback_swaps_the_body_model() {
    let request = responses_request(json!("hi"));
    let done = fallback(
        RESPONSES_URL,
        &request,
        fixture(RESPONSES_FILTERED),
        responses_text(),
    )
    .await;
    let fallback = done.upstream.seen()[1].json();
    assert_eq!(fallback["model"], "gpt-4o-mini");
    assert_eq!(fallback["input"], "hi");
    assert_eq!(done.refusal().unwrap().outcome, Outcome::Fallback);
}

#[tokio::test]
async fn azure_fallback_swaps_the_deployment_in_the_path() {
    let mut request = chat_request(true);
    request.as_object_mut().unwrap().remove("model");
    let done = fallback(
        AZURE_URL,
        &request,
        fixture(AZURE_FILTERED),
        fixture(CHAT_TEXT),
    )
    .await;
    let seen = done.upstream.seen();
    assert_eq!(
        seen[1].uri.path(),
        "/openai/deployments/gpt-4o-mini/chat/completions"
    );
    assert_eq!(seen[1].uri.query(), Some("api-version=2024-10-21"));
    assert_eq!(seen[1].uri.host(), Some("example.openai.azure.com"));
    assert!(
        seen[1].json().get("model").is_none(),
        "no model added to an Azure deployment body"
    );
    let record = &done.sink.records()[0];
    assert_eq!(record.model.as_deref(), Some("gpt-4o"));
    assert_eq!(record.outcome, Outcome::Fallback);
    assert_eq!(record.explanation.as_deref(), Some("filtered: violence"));
}

/// Azure's protected material filter cutting the output is a copyright
/// stop: recorded `recitation`, it climbs the chain with no note, and with
/// no fallback to serve it is dead for `not_safety`, never rescued.
#[tokio::test]
async fn azures_protected_material_stop_falls_back_without_the_rescue_note() {
    // The hand-written filter stream, its filter the protected material
    // code one (citation and all, as Azure reports it) instead of violence.
    let violence = r#""violence":{"filtered":true,"severity":"medium"}"#;
    let code = r#""violence":{"filtered":false,"severity":"safe"},"protected_material_code":{"filtered":true,"detected":true,"citation":{"URL":"https://github.com/o/r","license":"GPL-3.0"}}"#;
    let stream = String::from_utf8(fixture(AZURE_FILTERED).to_vec()).unwrap();
    assert!(stream.contains(violence));
    let refused = Bytes::from(stream.replace(violence, code));
    let mut request = chat_request(true);
    request.as_object_mut().unwrap().remove("model");

    let done = fallback(AZURE_URL, &request, refused.clone(), fixture(CHAT_TEXT)).await;
    let fallback = done.upstream.seen()[1].json();
    assert_eq!(
        fallback["messages"], request["messages"],
        "no note on the fallback"
    );
    let record = &done.sink.records()[0];
    assert_eq!(record.outcome, Outcome::Fallback);
    assert_eq!(record.category.as_deref(), Some("recitation"));
    assert_eq!(
        record.explanation.as_deref(),
        Some("filtered: protected_material_code")
    );

    let url = AZURE_URL.replace("/gpt-4o/", "/gpt-4o-unchained/");
    let replies = vec![Reply::sse(&refused)];
    let done = exchange(RefusalGuardLayer::new(), replies, post_to(&url, &request)).await;
    assert_eq!(done.body, refused, "the original, as sent");
    assert_eq!(done.upstream.seen().len(), 1, "no rescue");
    let record = &done.sink.records()[0];
    assert_eq!(record.reason, Some(DeadReason::NotSafety));
    assert_eq!(record.category.as_deref(), Some("recitation"));
}

// ---------------------------------------------------------------- refused again

#[tokio::test]
async fn a_refused_continuation_delivers_the_original_byte_exact() {
    for (url, request, first, second) in [
        (
            CHAT_URL,
            chat_request(true),
            fixture(CHAT_FILTERED),
            fixture(CHAT_REFUSAL),
        ),
        (
            RESPONSES_URL,
            responses_request(json!("hi")),
            fixture(RESPONSES_REFUSAL),
            fixture(RESPONSES_FILTERED),
        ),
    ] {
        let replies = vec![Reply::sse(&first), Reply::sse(&second)];
        let done = exchange(RefusalGuardLayer::new(), replies, post_to(url, &request)).await;
        assert_eq!(
            done.body, first,
            "{url}: the original, not the second refusal"
        );
        assert_eq!(done.upstream.seen().len(), 2);
        let refusal = done.refusal().unwrap();
        assert_eq!(refusal.outcome, Outcome::Dead);
        assert_eq!(refusal.reason, Some(DeadReason::StillRefused));
        assert_eq!(
            done.sink.records()[0].attempts[1].result,
            AttemptResult::Refused
        );
    }
}

// ---------------------------------------------------------------- Azure 400

#[tokio::test]
async fn azure_blocked_prompt_goes_through_the_ladder() {
    let replies = vec![
        Reply::Status(400, fixture(AZURE_400)),
        Reply::sse(&fixture(CHAT_TEXT)),
    ];
    let request = post_to(AZURE_URL, &chat_request(true));
    let done = exchange(RefusalGuardLayer::new(), replies, request).await;
    assert_eq!(done.parts.status, 200, "the rescue is served");
    assert_eq!(done.body, fixture(CHAT_TEXT));
    let seen = done.upstream.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].uri, AZURE_URL);
    let note = seen[1].last_message()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(note.contains("ResponsibleAIPolicyViolation"), "{note}");
    let refusal = done.refusal().unwrap();
    assert_eq!(refusal.signal, RefusalSignal::BlockedPrompt);
    assert_eq!(refusal.category.as_deref(), Some("content_filter"));
    assert_eq!(refusal.outcome, Outcome::Rescued);
    assert_eq!(done.sink.records()[0].attempts[0].status, Some(400));
}

#[tokio::test]
async fn azure_blocked_prompt_without_rescue_reaches_the_client_as_sent() {
    let layer = RefusalGuardLayer::new().rescue(false);
    let replies = vec![Reply::Status(400, fixture(AZURE_400))];
    let done = exchange(layer, replies, post_to(AZURE_URL, &chat_request(true))).await;
    assert_eq!(done.parts.status, 400);
    assert_eq!(done.parts.headers["content-type"], "application/json");
    assert_eq!(done.body, fixture(AZURE_400));
    assert_eq!(done.upstream.seen().len(), 1);
    let record = &done.sink.records()[0];
    assert_eq!(record.outcome, Outcome::Dead);
    assert_eq!(record.reason, Some(DeadReason::RescueOff));
    assert_eq!(record.signal, RefusalSignal::BlockedPrompt);
}

#[tokio::test]
async fn azure_blocked_again_is_still_refused_and_the_first_400_is_delivered() {
    let layer = RefusalGuardLayer::new().fallback_chains(chains());
    let replies = vec![
        Reply::Status(400, fixture(AZURE_400)),
        Reply::Status(400, fixture(AZURE_400)),
        Reply::Status(400, fixture(AZURE_400)),
    ];
    let done = exchange(layer, replies, post_to(AZURE_URL, &chat_request(true))).await;
    assert_eq!(done.parts.status, 400);
    assert_eq!(done.body, fixture(AZURE_400));
    let seen = done.upstream.seen();
    assert_eq!(seen.len(), 3, "original, fallback, rescue");
    assert!(seen[1].uri.path().contains("/deployments/gpt-4o-mini/"));
    let record = &done.sink.records()[0];
    assert_eq!(record.reason, Some(DeadReason::StillRefused));
    assert_eq!(record.attempts[1].result, AttemptResult::Refused);
    assert_eq!(record.attempts[2].result, AttemptResult::Refused);
}

#[tokio::test]
async fn other_error_statuses_pass_through_unjudged() {
    let quota = fixture("openai/vercel-ai/responses/openai-error.1.json");
    let replies = vec![Reply::Status(429, quota.clone())];
    let request = post_to(RESPONSES_URL, &responses_request(json!("hi")));
    let done = exchange(RefusalGuardLayer::new(), replies, request).await;
    assert_eq!(done.parts.status, 429);
    assert_eq!(done.body, quota);
    assert_eq!(done.upstream.seen().len(), 1);
    assert!(done.sink.records().is_empty());
}

// ---------------------------------------------------------------- n > 1

#[tokio::test]
async fn several_choices_are_not_guarded() {
    let refusal = fixture(CHAT_FILTERED);
    let upstream = Upstream::new(vec![Reply::sse(&refusal)]);
    let (sink, mut guard) = guard_with(&upstream, RefusalGuardLayer::new());
    let mut request = chat_request(true);
    request["n"] = json!(2);
    let sent = Bytes::from(serde_json::to_vec(&request).unwrap());
    let (parts, body) = call(&mut guard, post_to(CHAT_URL, &request)).await;
    assert_eq!(body, refusal);
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1, "no recovery");
    assert_eq!(seen[0].body, sent, "request bytes untouched");
    assert!(sink.records().is_empty());
    assert!(
        parts.extensions.get::<RefusalHandle>().is_none(),
        "unguarded"
    );

    // n = 1 is an ordinary guarded request.
    let upstream = Upstream::new(vec![Reply::sse(&refusal)]);
    let (sink, mut guard) = guard_with(&upstream, RefusalGuardLayer::new().rescue(false));
    request["n"] = json!(1);
    let (parts, _) = call(&mut guard, post_to(CHAT_URL, &request)).await;
    assert!(parts.extensions.get::<Refusal>().is_some());
    assert_eq!(sink.records().len(), 1);
}

// ---------------------------------------------------------------- robustness

async fn passes_through(url: &str, request: &Value, stream: &[u8]) {
    let bytes = Bytes::copy_from_slice(stream);
    let replies = vec![Reply::sse(&bytes)];
    let done = exchange(RefusalGuardLayer::new(), replies, post_to(url, request)).await;
    assert_eq!(done.body, bytes, "{}", String::from_utf8_lossy(stream));
    assert_eq!(done.upstream.seen().len(), 1);
    assert!(done.sink.records().is_empty(), "{:?}", done.sink.records());
}

#[tokio::test]
async fn odd_chat_frames_pass_through() {
    let request = chat_request(true);
    for stream in [
        &b"data: {}\n\n"[..],
        b"data: {\"choices\":[]}\n\ndata: [DONE]\n\n",
        b"data: {\"choices\":[{}]}\n\n",
        b"data: {\"choices\":[{\"delta\":null,\"finish_reason\":null}]}\n\n",
        b"data: {\"choices\":[{\"index\":\"x\",\"delta\":{\"content\":7,\"refusal\":[1],\"tool_calls\":{}},\"finish_reason\":3}]}\n\n",
        b"data: {\"choices\":{}}\n\ndata: [1,2]\n\ndata: not json\n\n: comment\n\n",
        b"event: unknown\ndata: {\"type\":\"whatever\"}\n\n",
        b"data: [DONE]\n\n",
        b"data: [DONE]\n\ndata: [DONE]\n\n",
        b"",
        // Truncated mid-frame, before any finish.
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"refusal\":\"I can",
        // Refusal text, then the stream just stops: nothing to judge.
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"refusal\":\"No.\"}}]}\n\n",
        // Mid-stream error before output.
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\ndata: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}\n\n",
        // Whitespace is not output; a normal stop is not a refusal.
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"  \\n\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
    ] {
        passes_through(CHAT_URL, &request, stream).await;
        passes_through(AZURE_URL, &request, stream).await;
    }
}

#[tokio::test]
async fn odd_responses_events_pass_through() {
    let request = responses_request(json!("hi"));
    for stream in [
        &b"event: response.new_thing\ndata: {\"type\":\"response.new_thing\"}\n\n"[..],
        b"data: {\"no_type\":true}\n\n",
        b"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\"}\n\n",
        b"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"item\":{\"type\":\"reasoning\"}}\n\n",
        b"event: response.content_part.added\ndata: {\"type\":\"response.content_part.added\",\"part\":7}\n\n",
        b"event: response.incomplete\ndata: {\"type\":\"response.incomplete\"}\n\n",
        b"event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"response\":{\"incomplete_details\":{\"reason\":\"max_output_tokens\"}}}\n\n",
        b"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"output\":\"x\"}}\n\n",
        b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\" \"}\n\n",
        b"event: response.reasoning_summary_text.delta\ndata: {\"type\":\"response.reasoning_summary_text.delta\",\"delta\":\"thinking hard\"}\n\n",
        b"event: response.refusal.delta\ndata: {\"type\":\"response.refusal.delta\",\"delta\":\"I can",
        b"data: [DONE]\n\n",
        b"event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\"}\n\n",
    ] {
        passes_through(RESPONSES_URL, &request, stream).await;
    }
}

#[tokio::test]
async fn a_connection_reset_after_refusal_text_does_not_panic() {
    let refusal = fixture(CHAT_REFUSAL);
    let cut = refusal.len() / 2;
    let upstream = Upstream::new(vec![Reply::SseThenError(vec![refusal.slice(..cut)])]);
    let (sink, mut guard) = guard_with(&upstream, RefusalGuardLayer::new());
    let response = guard
        .ready()
        .await
        .unwrap()
        .call(post_to(CHAT_URL, &chat_request(true)))
        .await
        .unwrap();
    let mut body = response.into_body();
    let mut got = Vec::new();
    let mut failed = false;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => got.extend_from_slice(frame.data_ref().unwrap()),
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    assert!(failed, "the client sees the connection error");
    assert_eq!(got, refusal.slice(..cut), "after what was read");
    assert_eq!(upstream.seen().len(), 1);
    assert!(sink.records().is_empty());
}

#[tokio::test]
async fn other_openai_endpoints_are_not_guarded() {
    for (method, url) in [
        (
            http::Method::GET,
            "https://api.openai.com/v1/responses/resp_1",
        ),
        (
            http::Method::POST,
            "https://api.openai.com/v1/responses/resp_1/cancel",
        ),
        (http::Method::POST, "https://api.openai.com/v1/embeddings"),
        (
            http::Method::GET,
            "https://api.openai.com/v1/chat/completions",
        ),
    ] {
        let refusal = fixture(CHAT_FILTERED);
        let mut request = post_to(url, &chat_request(true));
        *request.method_mut() = method;
        let path = url.trim_start_matches("https://api.openai.com");
        let upstream = Upstream::new(vec![Reply::sse(&refusal)]).serving(path);
        let done = exchange_on(upstream, RefusalGuardLayer::new(), request).await;
        assert_eq!(done.body, refusal);
        assert!(
            done.parts.extensions.get::<RefusalHandle>().is_none(),
            "{url}"
        );
    }
}

#[tokio::test]
async fn one_rescue_until_output_per_conversation() {
    // The same conversation refuses twice in a row: the second time no
    // rescue is tried, since the first rescue produced no output.
    let upstream = Upstream::new(Reply::fixtures(&[
        CHAT_FILTERED,
        CHAT_FILTERED,
        CHAT_FILTERED,
    ]));
    let (sink, mut guard) = guard_with(&upstream, RefusalGuardLayer::new());
    let request = chat_request(true);
    call(&mut guard, post_to(CHAT_URL, &request)).await;
    let (_, body) = call(&mut guard, post_to(CHAT_URL, &request)).await;
    assert_eq!(body, fixture(CHAT_FILTERED));
    assert_eq!(upstream.seen().len(), 3);
    let records = sink.records();
    assert_eq!(records[0].reason, Some(DeadReason::StillRefused));
    assert_eq!(records[1].reason, Some(DeadReason::RescueCap));
    assert_eq!(records[0].conversation, records[1].conversation);
    assert!(records[0].conversation.is_some());
}
