//! Refusals that arrive as errors (Anthropic's "Output blocked by content
//! filtering policy", as an HTTP 400 or a stream `error` event; OpenAI's
//! policy error codes, as a 400, a Responses `response.failed` or `error`
//! event, a Chat stream's error chunk), and side calls that demand structured output, which the rescue
//! step leaves alone, through the public API.

use bytes::Bytes;
use http_body_util::Full;
use refusal_guard::refusal::{AttemptResult, AttemptStep, DeadReason, RefusalKind, RefusalSignal};
use refusal_guard::{Outcome, RefusalGuardLayer};
use serde_json::{json, Value};
use support::anthropic::{anthropic_stream, events};
use support::*;

const MESSAGES_URL: &str = "https://api.anthropic.com/v1/messages";
const CHAT_URL: &str = "https://api.openai.com/v1/chat/completions";
const RESPONSES_URL: &str = "https://api.openai.com/v1/responses";
const GEMINI_URL: &str =
    "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:generateContent";

/// The body Anthropic answers a classifier block with, as Claude Code users
/// report it (HTTP 400).
const BLOCKED_400: &str = r#"{"type":"error","error":{"details":null,"type":"invalid_request_error","message":"Output blocked by content filtering policy"},"request_id":"req_011CaxpBxEpLvE6AvvuDD5BW"}"#;

fn post(url: &str, body: &Value) -> http::Request<Full<Bytes>> {
    let bytes = serde_json::to_vec(body).unwrap();
    http::Request::post(url)
        .header("content-type", "application/json")
        .header("content-length", bytes.len())
        .body(Full::new(Bytes::from(bytes)))
        .unwrap()
}

fn messages_request(stream: bool) -> Value {
    json!({"model": "claude-opus-4-7", "max_tokens": 1024, "stream": stream,
        "system": "You are a coding assistant.",
        "messages": [{"role": "user", "content": "Write the GitHub issue template config."}]})
}

/// The Messages request of these tests, as a POST.
fn messages_post(stream: bool) -> http::Request<Full<Bytes>> {
    post(MESSAGES_URL, &messages_request(stream))
}

/// `done` delivered `sent` byte for byte after its one upstream call, and
/// recorded a refusal of this `signal` nothing recovered (the rescue off).
fn assert_delivered_as_sent(done: &Exchange, sent: &[u8], signal: RefusalSignal) {
    assert_eq!(done.body, sent, "byte for byte");
    assert_eq!(done.upstream.seen().len(), 1);
    let record = &done.sink.records()[0];
    assert_eq!(record.outcome, Outcome::Dead);
    assert_eq!(record.reason, Some(DeadReason::RescueOff));
    assert_eq!(record.signal, signal);
}

/// `done` passed `partial` through byte for byte after its one upstream
/// call, and recorded a partial refusal of this `signal`.
fn assert_left_alone(done: &Exchange, partial: &Bytes, signal: RefusalSignal) {
    assert_eq!(done.body, partial, "passed through byte for byte");
    assert_eq!(done.upstream.seen().len(), 1, "no fallback after text");
    let record = &done.sink.records()[0];
    assert_eq!(record.outcome, Outcome::Partial);
    assert_eq!(record.kind, RefusalKind::Partial);
    assert_eq!(record.signal, signal);
}

fn answer() -> Bytes {
    anthropic_stream(&events::text_answer(
        "claude-opus-4-7",
        "blank_issues_enabled: true",
    ))
}

fn blocked_event() -> Value {
    json!({"type": "error", "error": {"type": "invalid_request_error",
        "message": "Output blocked by content filtering policy"}})
}

// ------------------------------------------------------- refusals as errors

#[tokio::test]
async fn an_output_blocked_400_is_a_refusal_the_rescue_recovers() {
    let replies = vec![
        Reply::Status(400, Bytes::from(BLOCKED_400)),
        Reply::Sse(vec![answer()]),
    ];
    let done = exchange(RefusalGuardLayer::new(), replies, messages_post(true)).await;
    assert_eq!(done.parts.status, 200);
    let seen = done.assert_served_on_the_second_call(&answer(), "the rescue is served");
    let note = seen[1].last_message().to_string();
    assert!(note.contains("content_filter"), "{note}");
    let refusal = done.refusal().unwrap();
    assert_eq!(refusal.signal, RefusalSignal::BlockedOutput);
    assert_eq!(refusal.category.as_deref(), Some("content_filter"));
    assert_eq!(refusal.outcome, Outcome::Rescued);
    let record = &done.sink.records()[0];
    assert_eq!(record.attempts[0].status, Some(400));
    assert_eq!(record.attempts[0].result, AttemptResult::Refused);
    let line: Value = serde_json::from_slice(&record.to_json_line()).unwrap();
    assert_eq!(line["signal"], "blocked_output");
}

#[tokio::test]
async fn an_output_blocked_400_nothing_recovers_reaches_the_client_as_sent() {
    let replies = vec![Reply::Status(400, Bytes::from(BLOCKED_400))];
    let layer = RefusalGuardLayer::new().rescue(false);
    let done = exchange(layer, replies, messages_post(false)).await;
    assert_eq!(done.parts.status, 400);
    assert_eq!(done.parts.headers["content-type"], "application/json");
    assert_delivered_as_sent(&done, BLOCKED_400.as_bytes(), RefusalSignal::BlockedOutput);
}

#[tokio::test]
async fn a_real_invalid_request_400_is_no_refusal() {
    for message in [
        "messages.0.content: Field required",
        "prompt is too long: 212000 tokens > 200000 maximum",
    ] {
        let body = json!({"type": "error",
            "error": {"type": "invalid_request_error", "message": message}});
        let sent = Bytes::from(body.to_string());
        let replies = vec![Reply::Status(400, sent.clone()), Reply::Sse(vec![answer()])];
        let done = exchange(RefusalGuardLayer::new(), replies, messages_post(true)).await;
        assert_eq!(done.parts.status, 400, "{message}");
        done.assert_untouched(&sent);
    }
}

#[tokio::test]
async fn an_output_blocked_event_before_any_output_is_rescued() {
    let refused = anthropic_stream(&[events::message_start("claude-opus-4-7"), blocked_event()]);
    let replies = vec![Reply::Sse(vec![refused]), Reply::Sse(vec![answer()])];
    let done = exchange(RefusalGuardLayer::new(), replies, messages_post(true)).await;
    done.assert_served_on_the_second_call(&answer(), "the rescue is served");
    let refusal = done.refusal().unwrap();
    assert_eq!(refusal.signal, RefusalSignal::BlockedOutput);
    assert_eq!(refusal.outcome, Outcome::Rescued);
}

#[tokio::test]
async fn an_output_blocked_event_after_text_is_a_partial_refusal_left_alone() {
    let partial = anthropic_stream(&[
        events::message_start("claude-opus-4-7"),
        events::block_start(0, json!({"type": "text", "text": ""})),
        events::text_delta(0, "blank_issues_enabled: true\n"),
        blocked_event(),
    ]);
    let replies = vec![
        Reply::Sse(vec![partial.clone()]),
        Reply::Sse(vec![answer()]),
    ];
    let done = exchange(RefusalGuardLayer::new(), replies, messages_post(true)).await;
    assert_left_alone(&done, &partial, RefusalSignal::BlockedOutput);
}

// ------------------------------------------------- OpenAI's policy errors

const FAILED_CYBER: &str = "openai/hand-written/responses_failed_cyber_policy.sse";
const FAILED_CYBER_PARTIAL: &str = "openai/hand-written/responses_failed_cyber_policy_partial.sse";
const ERROR_EVENT_BIO: &str = "openai/hand-written/responses_error_event_bio_policy.sse";
const CYBER_400: &str = "openai/hand-written/responses_cyber_policy_400.json";
const INVALID_PROMPT_400: &str = "openai/hand-written/chat_invalid_prompt_400.json";
const PLAIN_400: &str = "openai/hand-written/responses_invalid_request_400.json";
const RESPONSES_ANSWER: &str = "e2e/responses_text.sse";
const CHAT_ANSWER: &str =
    "openai/openai-python/83b060bae42eb41c4f1edbb7c1542b954b37d9dfd1910b964ddebc9677e6ae85.bin";

/// A Responses request as Codex CLI sends one: instructions, a list of
/// input messages of parts, a stream.
fn codex_request(stream: bool) -> Value {
    json!({"model": "gpt-5.5", "stream": stream, "store": false,
        "instructions": "You are a coding agent.",
        "input": [{"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "Audit my SSH config."}]}]})
}

fn chat_request() -> Value {
    json!({"model": "gpt-5.5", "stream": true,
        "messages": [{"role": "user", "content": "Audit my SSH config."}]})
}

fn fallback_layer() -> RefusalGuardLayer {
    RefusalGuardLayer::new()
        .fallback_chains(chains())
        .rescue(false)
}

/// The one record of `done`: an empty refusal of signal policy error and
/// this category, with its first attempt refused with `status`.
fn assert_policy_record(done: &Exchange, category: &str, status: u16) {
    let records = done.sink.records();
    assert_eq!(records.len(), 1);
    let record = &records[0];
    assert_eq!(record.signal, RefusalSignal::PolicyError);
    assert_eq!(record.category.as_deref(), Some(category));
    assert_eq!(record.kind, RefusalKind::Empty);
    assert_eq!(record.attempts[0].status, Some(status));
    assert_eq!(record.attempts[0].result, AttemptResult::Refused);
    let line: Value = serde_json::from_slice(&record.to_json_line()).unwrap();
    assert_eq!(line["signal"], "policy_error");
    assert_eq!(line["category"], category);
}

#[tokio::test]
async fn a_cyber_policy_failure_in_a_responses_stream_is_served_by_the_fallback() {
    let answer = fixture(RESPONSES_ANSWER);
    let replies = vec![Reply::sse(&fixture(FAILED_CYBER)), Reply::sse(&answer)];
    let request = post(RESPONSES_URL, &codex_request(true));
    let done = exchange(fallback_layer(), replies, request).await;
    let seen = done.assert_served_on_the_second_call(&answer, "the fallback's stream");
    let fallback = seen[1].json();
    assert_eq!(fallback["model"], "gpt-5.4-mini");
    assert_eq!(
        fallback["input"],
        codex_request(true)["input"],
        "no note on a fallback"
    );
    let refusal = done.refusal().unwrap();
    assert_eq!(refusal.outcome, Outcome::Fallback);
    assert_eq!(refusal.signal, RefusalSignal::PolicyError);
    assert_eq!(refusal.code(), "cyber");
    assert_eq!(
        refusal.explanation.as_deref(),
        Some("This content was flagged for possible cybersecurity risk. If this seems wrong, try rephrasing your request.")
    );
    assert_policy_record(&done, "cyber", 200);
    let record = &done.sink.records()[0];
    assert_eq!(record.attempts[1].step, AttemptStep::Fallback);
    assert_eq!(record.attempts[1].model.as_deref(), Some("gpt-5.4-mini"));
    assert_eq!(record.attempts[1].result, AttemptResult::Served);
}

#[tokio::test]
async fn a_bio_policy_error_event_is_rescued_with_a_note_naming_it() {
    let answer = fixture(RESPONSES_ANSWER);
    let replies = vec![Reply::sse(&fixture(ERROR_EVENT_BIO)), Reply::sse(&answer)];
    let request = post(RESPONSES_URL, &codex_request(true));
    let done = exchange(RefusalGuardLayer::new(), replies, request).await;
    let seen = done.assert_served_on_the_second_call(&answer, "the rescue's stream");
    let input = seen[1].json()["input"].clone();
    let note = input.as_array().unwrap().last().unwrap().to_string();
    assert!(note.contains("bio"), "{note}");
    assert!(note.contains("possible biological risk"), "{note}");
    assert_eq!(done.refusal().unwrap().outcome, Outcome::Rescued);
    assert_policy_record(&done, "bio", 200);
}

#[tokio::test]
async fn a_cyber_policy_400_is_recovered_and_the_client_gets_the_fallbacks_200() {
    for stream in [true, false] {
        let answer = if stream {
            fixture(RESPONSES_ANSWER)
        } else {
            fixture("usage/responses-answer.json")
        };
        let served = if stream {
            Reply::sse(&answer)
        } else {
            Reply::Json(answer.clone())
        };
        let replies = vec![Reply::Status(400, fixture(CYBER_400)), served];
        let request = post(RESPONSES_URL, &codex_request(stream));
        let done = exchange(fallback_layer(), replies, request).await;
        assert_eq!(done.parts.status, 200, "stream: {stream}");
        let seen = done.assert_served_on_the_second_call(&answer, "the fallback's answer");
        assert_eq!(seen[1].json()["model"], "gpt-5.4-mini");
        assert_eq!(done.refusal().unwrap().outcome, Outcome::Fallback);
        assert_policy_record(&done, "cyber", 400);
    }
}

#[tokio::test]
async fn a_policy_error_nothing_recovers_reaches_the_client_as_sent() {
    // No chain for the model, no rescue: nothing to try.
    let layer = || RefusalGuardLayer::new().rescue(false);
    for (reply, sent, status) in [
        (
            Reply::Status(400, fixture(CYBER_400)),
            fixture(CYBER_400),
            400,
        ),
        (
            Reply::sse(&fixture(FAILED_CYBER)),
            fixture(FAILED_CYBER),
            200,
        ),
        (
            Reply::sse(&fixture(ERROR_EVENT_BIO)),
            fixture(ERROR_EVENT_BIO),
            200,
        ),
    ] {
        let request = post(RESPONSES_URL, &codex_request(true));
        let done = exchange(layer(), vec![reply], request).await;
        assert_eq!(done.parts.status, status);
        assert_eq!(done.parts.headers["request-id"], "req_test_123");
        let kind = if status == 400 {
            "application/json"
        } else {
            "text/event-stream"
        };
        assert_eq!(done.parts.headers["content-type"], kind);
        assert_delivered_as_sent(&done, &sent, RefusalSignal::PolicyError);
    }
}

#[tokio::test]
async fn a_policy_error_on_every_fallback_delivers_the_first_as_sent() {
    let replies = vec![
        Reply::Status(400, fixture(CYBER_400)),
        Reply::sse(&fixture(FAILED_CYBER)),
        Reply::Status(400, fixture(CYBER_400)),
    ];
    let request = post(RESPONSES_URL, &codex_request(true));
    let done = exchange(fallback_layer(), replies, request).await;
    assert_eq!(done.parts.status, 400);
    assert_eq!(done.body, fixture(CYBER_400));
    let seen = done.upstream.seen();
    let models: Vec<Value> = seen.iter().map(|s| s.json()["model"].clone()).collect();
    assert_eq!(
        models,
        [
            json!("gpt-5.5"),
            json!("gpt-5.4-mini"),
            json!("gpt-5.4-nano")
        ]
    );
    let record = &done.sink.records()[0];
    assert_eq!(record.outcome, Outcome::Dead);
    assert_eq!(record.reason, Some(DeadReason::StillRefused));
    let results: Vec<AttemptResult> = record.attempts.iter().map(|a| a.result).collect();
    assert_eq!(results, [AttemptResult::Refused; 3]);
}

#[tokio::test]
async fn a_cyber_policy_failure_after_text_is_a_partial_refusal_left_alone() {
    let partial = fixture(FAILED_CYBER_PARTIAL);
    let replies = vec![Reply::sse(&partial), Reply::sse(&fixture(RESPONSES_ANSWER))];
    let request = post(RESPONSES_URL, &codex_request(true));
    let done = exchange(fallback_layer(), replies, request).await;
    assert_left_alone(&done, &partial, RefusalSignal::PolicyError);
    assert_eq!(done.sink.records()[0].category.as_deref(), Some("cyber"));
}

#[tokio::test]
async fn a_chat_invalid_prompt_400_is_served_by_the_fallback() {
    let answer = fixture(CHAT_ANSWER);
    let replies = vec![
        Reply::Status(400, fixture(INVALID_PROMPT_400)),
        Reply::sse(&answer),
    ];
    let done = exchange(fallback_layer(), replies, post(CHAT_URL, &chat_request())).await;
    assert_eq!(done.parts.status, 200);
    let seen = done.assert_served_on_the_second_call(&answer, "the fallback's stream");
    assert_eq!(seen[1].json()["model"], "gpt-5.4-mini");
    assert_eq!(done.refusal().unwrap().outcome, Outcome::Fallback);
    assert_policy_record(&done, "usage_policy", 400);
    let explanation = done.sink.records()[0].explanation.clone().unwrap();
    assert!(
        explanation.starts_with("Invalid prompt: your prompt was flagged"),
        "{explanation}"
    );
}

/// What OpenAI's cybersecurity check answers with (its message as a
/// Responses failure carries it).
const CYBER_MESSAGE: &str =
    "This content was flagged for possible cybersecurity risk. If this seems wrong, try rephrasing your request.";

#[tokio::test]
async fn a_chat_policy_400_nothing_recovers_reaches_the_client_as_sent() {
    let cyber = Bytes::from(openai::policy_error("cyber_policy", CYBER_MESSAGE).to_string());
    for (sent, category) in [
        (fixture(INVALID_PROMPT_400), "usage_policy"),
        (cyber, "cyber"),
    ] {
        // No rescue, no chain for the model: nothing to try.
        let mut request = chat_request();
        request["model"] = json!("gpt-unchained");
        let layer = RefusalGuardLayer::new().rescue(false);
        let replies = vec![Reply::Status(400, sent.clone())];
        let done = exchange(layer, replies, post(CHAT_URL, &request)).await;
        assert_eq!(done.parts.status, 400, "{category}");
        assert_eq!(done.parts.headers["content-type"], "application/json");
        assert_eq!(done.parts.headers["request-id"], "req_test_123");
        assert_delivered_as_sent(&done, &sent, RefusalSignal::PolicyError);
        assert_policy_record(&done, category, 400);
        // Every fallback refusing alike: the first 400, as sent.
        let replies = vec![
            Reply::Status(400, sent.clone()),
            Reply::Status(400, sent.clone()),
            Reply::Status(400, sent.clone()),
        ];
        let done = exchange(fallback_layer(), replies, post(CHAT_URL, &chat_request())).await;
        assert_eq!(done.parts.status, 400, "{category}");
        assert_eq!(done.body, sent, "{category}: byte for byte");
        assert_eq!(done.upstream.seen().len(), 3, "the chain was climbed");
        let record = &done.sink.records()[0];
        assert_eq!(record.reason, Some(DeadReason::StillRefused));
    }
}

#[tokio::test]
async fn a_chat_policy_error_chunk_before_any_output_is_served_by_the_fallback() {
    // The role chunk, then the error chunk where Chat streams put errors.
    let refused = openai::chat_stream(
        &[
            openai::chat_role_chunk("gpt-5.5"),
            openai::policy_error("cyber_policy", CYBER_MESSAGE),
        ],
        false,
    );
    let answer = fixture(CHAT_ANSWER);
    let replies = vec![Reply::sse(&refused), Reply::sse(&answer)];
    let done = exchange(fallback_layer(), replies, post(CHAT_URL, &chat_request())).await;
    assert_eq!(done.parts.status, 200);
    let seen = done.assert_served_on_the_second_call(&answer, "the fallback's stream");
    let fallback = seen[1].json();
    assert_eq!(fallback["model"], "gpt-5.4-mini");
    assert_eq!(
        fallback["messages"],
        chat_request()["messages"],
        "no note on a fallback"
    );
    let refusal = done.refusal().unwrap();
    assert_eq!(refusal.outcome, Outcome::Fallback);
    assert_eq!(refusal.signal, RefusalSignal::PolicyError);
    assert_eq!(refusal.code(), "cyber");
    assert_eq!(refusal.explanation.as_deref(), Some(CYBER_MESSAGE));
    assert_policy_record(&done, "cyber", 200);
    let record = &done.sink.records()[0];
    assert_eq!(record.attempts[1].step, AttemptStep::Fallback);
    assert_eq!(record.attempts[1].result, AttemptResult::Served);
}

#[tokio::test]
async fn other_openai_error_codes_stay_plain_errors() {
    let bio_on_chat = Bytes::from(
        json!({"error": {"message": "m", "type": "invalid_request_error", "param": null,
            "code": "bio_policy"}})
        .to_string(),
    );
    let failed = Bytes::from_static(
        b"event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"output\":[],\"error\":{\"code\":\"server_error\",\"message\":\"The server had an error.\"}}}\n\n",
    );
    let error_event = Bytes::from_static(
        b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"invalid_request\",\"code\":\"rate_limit_exceeded\",\"message\":\"slow down\"}}\n\n",
    );
    let chat_error = Bytes::from_static(
        b"data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\",\"code\":\"server_error\"}}\n\n",
    );
    for (url, request, reply, sent) in [
        (
            RESPONSES_URL,
            codex_request(false),
            Reply::Status(400, fixture(PLAIN_400)),
            fixture(PLAIN_400),
        ),
        (
            CHAT_URL,
            chat_request(),
            Reply::Status(400, bio_on_chat.clone()),
            bio_on_chat,
        ),
        (
            RESPONSES_URL,
            codex_request(true),
            Reply::sse(&failed),
            failed.clone(),
        ),
        (
            RESPONSES_URL,
            codex_request(true),
            Reply::sse(&error_event),
            error_event.clone(),
        ),
        (
            CHAT_URL,
            chat_request(),
            Reply::sse(&chat_error),
            chat_error.clone(),
        ),
    ] {
        let replies = vec![reply, Reply::sse(&fixture(RESPONSES_ANSWER))];
        let done = exchange(fallback_layer(), replies, post(url, &request)).await;
        done.assert_untouched(&sent);
    }
}

// ------------------------------------------------- structured side calls

/// An empty refusal stream of the Messages API.
fn refused_stream() -> Bytes {
    anthropic_stream(&[
        events::message_start("claude-opus-4-7"),
        events::refusal(Some("cyber"), Some("Declined.")),
        events::message_stop(),
    ])
}

#[tokio::test]
async fn a_forced_tool_call_is_not_rescued_and_says_why() {
    let mut request = messages_request(true);
    request["tools"] = json!([{"name": "title", "input_schema": {"type": "object"}}]);
    request["tool_choice"] = json!({"type": "tool", "name": "title"});
    let replies = vec![
        Reply::Sse(vec![refused_stream()]),
        Reply::Sse(vec![answer()]),
    ];
    let done = exchange(
        RefusalGuardLayer::new(),
        replies,
        post(MESSAGES_URL, &request),
    )
    .await;
    assert_eq!(done.body, refused_stream(), "the refusal as sent");
    assert_eq!(done.upstream.seen().len(), 1, "no rescue was sent");
    let record = &done.sink.records()[0];
    assert_eq!(record.outcome, Outcome::Dead);
    assert_eq!(record.reason, Some(DeadReason::StructuredOutput));
    let line: Value = serde_json::from_slice(&record.to_json_line()).unwrap();
    assert_eq!(line["reason"], "structured_output");
}

#[tokio::test]
async fn a_structured_side_call_still_climbs_its_fallback_chain() {
    let mut request = messages_request(true);
    request["output_config"] = json!({"format": {"type": "json_schema",
        "schema": {"type": "object", "properties": {"title": {"type": "string"}}}}});
    let replies = vec![
        Reply::Sse(vec![refused_stream()]),
        Reply::Sse(vec![answer()]),
    ];
    let layer = RefusalGuardLayer::new().fallback_chains(chains());
    let done = exchange(layer, replies, post(MESSAGES_URL, &request)).await;
    let seen = done.assert_served_on_the_second_call(&answer(), "the fallback answers");
    assert_eq!(seen[1].json()["model"], "claude-sonnet-4-5");
    assert_eq!(seen[1].json()["messages"], request["messages"], "no note");
    assert_eq!(done.refusal().unwrap().outcome, Outcome::Fallback);
}

#[tokio::test]
async fn a_refused_structured_side_call_after_its_chain_is_dead_for_structured_output() {
    let mut request = messages_request(true);
    request["tool_choice"] = json!({"type": "any"});
    request["tools"] = json!([{"name": "title", "input_schema": {"type": "object"}}]);
    let replies = vec![
        Reply::Sse(vec![refused_stream()]),
        Reply::Sse(vec![refused_stream()]),
        Reply::Sse(vec![refused_stream()]),
        Reply::Sse(vec![answer()]),
    ];
    let layer = RefusalGuardLayer::new().fallback_chains(chains());
    let done = exchange(layer, replies, post(MESSAGES_URL, &request)).await;
    assert_eq!(done.body, refused_stream());
    let record = &done.sink.records()[0];
    let steps: Vec<AttemptStep> = record.attempts.iter().map(|a| a.step).collect();
    assert_eq!(
        steps,
        [
            AttemptStep::Original,
            AttemptStep::Fallback,
            AttemptStep::Fallback
        ]
    );
    assert_eq!(record.reason, Some(DeadReason::StructuredOutput));
}

#[tokio::test]
async fn json_modes_of_the_other_apis_are_not_rescued_and_plain_requests_are() {
    let chat_refused = Bytes::from_static(
        br#"{"id":"c","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":null},"finish_reason":"content_filter"}]}"#,
    );
    let chat_answer = Bytes::from_static(
        br#"{"id":"c","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"{\"title\":\"x\"}"},"finish_reason":"stop"}]}"#,
    );
    let responses_refused = Bytes::from_static(
        br#"{"id":"r","object":"response","status":"incomplete","incomplete_details":{"reason":"content_filter"},"model":"gpt-4o","output":[]}"#,
    );
    let gemini_refused = Bytes::from_static(
        br#"{"candidates":[{"finishReason":"SAFETY","index":0}],"modelVersion":"gemini-2.5-pro"}"#,
    );
    let user = json!([{"role": "user", "content": "Title this conversation."}]);
    let cases = [
        (
            CHAT_URL,
            json!({"model": "gpt-4o", "messages": user,
                "response_format": {"type": "json_schema",
                    "json_schema": {"name": "t", "schema": {"type": "object"}}}}),
            chat_refused.clone(),
        ),
        (
            RESPONSES_URL,
            json!({"model": "gpt-4o", "input": "Pick a model for this prompt.",
                "text": {"format": {"type": "json_object"}}}),
            responses_refused,
        ),
        (
            GEMINI_URL,
            json!({"contents": [{"role": "user", "parts": [{"text": "Route this."}]}],
                "generationConfig": {"responseMimeType": "application/json",
                    "responseJsonSchema": {"type": "object"}}}),
            gemini_refused,
        ),
    ];
    for (url, request, refused) in cases {
        let replies = vec![
            Reply::Json(refused.clone()),
            Reply::Json(chat_answer.clone()),
        ];
        let done = exchange(RefusalGuardLayer::new(), replies, post(url, &request)).await;
        assert_eq!(done.body, refused, "{url}");
        assert_eq!(done.upstream.seen().len(), 1, "{url}");
        let record = &done.sink.records()[0];
        assert_eq!(record.reason, Some(DeadReason::StructuredOutput), "{url}");
    }
    // The same refusal without a JSON mode is rescued.
    let plain = json!({"model": "gpt-4o", "messages": user});
    let replies = vec![Reply::Json(chat_refused), Reply::Json(chat_answer.clone())];
    let done = exchange(RefusalGuardLayer::new(), replies, post(CHAT_URL, &plain)).await;
    done.assert_served_on_the_second_call(&chat_answer, "the rescue answers");
}
