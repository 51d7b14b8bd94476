//! Fallbacks to another provider's API: the request translated, sent to
//! the operator's endpoint with the operator's key (the strict contract of
//! the target API checks it), and the answer translated back so that the
//! client reads one response of its own API.

use bytes::Bytes;
use http_body_util::Full;
use refusal_guard::header;
use refusal_guard::recovery::{ApiKey, Endpoint, FallbackChains};
use refusal_guard::refusal::{AttemptResult, AttemptStep, DeadReason, Provider, RefusalSignal};
use refusal_guard::{Outcome, RefusalGuardLayer};
use serde_json::{json, Value};
use support::anthropic::events;
use support::*;

const ANTHROPIC_URL: &str = "https://api.anthropic.com/v1/messages";
const CHAT_URL: &str = "https://api.openai.com/v1/chat/completions";
const GEMINI_STREAM_URL: &str =
    "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse";

const OPERATOR_OPENAI: &str = "http://127.0.0.1:9/openai";
const OPERATOR_ANTHROPIC: &str = "http://127.0.0.1:9/anthropic";

fn post(url: &str, body: &Value, auth: (&str, &str)) -> http::Request<Full<Bytes>> {
    let bytes = serde_json::to_vec(body).unwrap();
    http::Request::post(url)
        .header("content-type", "application/json")
        .header(auth.0, auth.1)
        .body(Full::new(Bytes::from(bytes)))
        .unwrap()
}

fn endpoint(base: &str, key: &str) -> Endpoint {
    Endpoint::new(base.parse().unwrap(), ApiKey::new(key))
}

fn claude_request(stream: bool) -> Value {
    json!({
        "model": "claude-opus-4-7", "max_tokens": 512, "stream": stream,
        "system": "You audit systems.",
        "tools": [{"name": "run", "description": "Runs a command",
            "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}}}],
        "messages": [{"role": "user", "content": "Audit my SSH config"}]
    })
}

fn refused_claude() -> Reply {
    Reply::Sse(vec![anthropic_stream(&events::think_then_refuse(
        "claude-opus-4-7",
        "cyber",
    ))])
}

/// A Chat stream calling `run`, its arguments split over three deltas.
fn chat_tool_call_stream() -> Reply {
    let chunk = |delta: Value, finish: Value| {
        let chunk = json!({"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 1,
            "model": "gpt-5", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        Bytes::from(format!("data: {chunk}\n\n"))
    };
    Reply::Sse(vec![
        chunk(
            json!({"role": "assistant", "content": "Checking."}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_7", "type": "function",
            "function": {"name": "run", "arguments": ""}}]}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"cmd\":"}}]}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"cat /etc/ssh/"}}]}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "sshd_config\"}"}}]}),
            Value::Null,
        ),
        chunk(json!({}), json!("tool_calls")),
        Bytes::from(format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-9", "object": "chat.completion.chunk",
            "created": 1, "model": "gpt-5", "choices": [],
            "usage": {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}})
        )),
        Bytes::from_static(b"data: [DONE]\n\n"),
    ])
}

fn openai_chain() -> RefusalGuardLayer {
    RefusalGuardLayer::new()
        .fallback_chains(FallbackChains::new().chain("claude-opus-4-7", ["openai:gpt-5"]))
        .cross_provider(Provider::OpenAi, endpoint(OPERATOR_OPENAI, "sk-operator"))
        .rescue(false)
}

#[tokio::test]
async fn an_anthropic_refusal_is_served_by_an_openai_model_as_an_anthropic_stream() {
    let request = post(
        ANTHROPIC_URL,
        &claude_request(true),
        ("x-api-key", "sk-ant-client"),
    );
    let done = exchange(
        openai_chain(),
        vec![refused_claude(), chat_tool_call_stream()],
        request,
    )
    .await;

    let seen = done.upstream.seen();
    assert_eq!(seen.len(), 2);
    let fallback = &seen[1];
    assert_eq!(
        fallback.uri,
        "http://127.0.0.1:9/openai/v1/chat/completions"
    );
    assert_eq!(fallback.headers["authorization"], "Bearer sk-operator");
    assert!(
        fallback.headers.get("x-api-key").is_none(),
        "the client's key stays with its provider"
    );
    assert_eq!(
        fallback.json(),
        json!({"model": "gpt-5", "max_completion_tokens": 512, "stream": true,
            "stream_options": {"include_usage": true},
            "messages": [{"role": "system", "content": "You audit systems."},
                {"role": "user", "content": [{"type": "text", "text": "Audit my SSH config"}]}],
            "tools": [{"type": "function", "function": {"name": "run", "description": "Runs a command",
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}}]})
    );

    let events = stream_events(&done.body);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(events[4]["content_block"]["name"], "run");
    let arguments: String = events[5..8]
        .iter()
        .map(|e| e["delta"]["partial_json"].as_str().unwrap())
        .collect();
    assert_eq!(arguments, r#"{"cmd":"cat /etc/ssh/sshd_config"}"#);
    assert_eq!(events[9]["delta"]["stop_reason"], "tool_use");
    assert_eq!(events[9]["usage"]["output_tokens"], 12);

    let refusal = done.refusal().expect("the typed refusal");
    assert_eq!(refusal.outcome, Outcome::Fallback);
    assert_eq!(refusal.served_model.as_deref(), Some("openai:gpt-5"));
    assert_eq!(
        done.parts.headers[header::RECOVERY],
        "fallback; category=cyber; served-by=openai:gpt-5"
    );
    let records = done.sink.records();
    assert_eq!(records.len(), 1);
    let fallback = &records[0].attempts[1];
    assert_eq!(fallback.step, AttemptStep::Fallback);
    assert_eq!(fallback.model.as_deref(), Some("openai:gpt-5"));
    assert_eq!(fallback.provider, Some(Provider::OpenAi));
    assert_eq!(fallback.result, AttemptResult::Served);
    assert_eq!(
        records[0].attempts[0].provider, None,
        "the original is Anthropic's own"
    );
}

#[tokio::test]
async fn an_anthropic_refusal_is_served_by_an_openai_model_as_one_message() {
    let refused = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-opus-4-7",
        "content": [], "stop_reason": "refusal", "stop_sequence": null,
        "stop_details": {"type": "refusal", "category": "cyber", "explanation": "No."},
        "usage": {"input_tokens": 10, "output_tokens": 1}});
    let answer = json!({"id": "chatcmpl-2", "object": "chat.completion", "created": 1, "model": "gpt-5",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant",
            "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "run", "arguments": "{\"cmd\":\"ls\"}"}}]}}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 4, "total_tokens": 24}});
    let request = post(
        ANTHROPIC_URL,
        &claude_request(false),
        ("x-api-key", "sk-ant-client"),
    );
    let replies = vec![
        Reply::Json(Bytes::from(refused.to_string())),
        Reply::Json(Bytes::from(answer.to_string())),
    ];
    let done = exchange(openai_chain(), replies, request).await;
    let body: Value = serde_json::from_slice(&done.body).unwrap();
    assert_eq!(
        body,
        json!({"id": "chatcmpl-2", "type": "message", "role": "assistant", "model": "gpt-5",
            "content": [{"type": "tool_use", "id": "call_1", "name": "run", "input": {"cmd": "ls"}}],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 20, "output_tokens": 4}})
    );
    assert!(done
        .parts
        .headers
        .get("content-length")
        .is_none_or(|len| len == &body.to_string().len().to_string()));
    assert_eq!(done.refusal().unwrap().outcome, Outcome::Fallback);
    assert!(done.upstream.seen()[1].json().get("stream").is_none());
}

#[tokio::test]
async fn an_openai_content_filter_is_served_by_claude_as_a_chat_stream() {
    let request = json!({"model": "gpt-5", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "Explain this exploit"}]});
    let layer = RefusalGuardLayer::new()
        .fallback_chains(FallbackChains::new().chain("gpt-5", ["anthropic:claude-sonnet-4-5"]))
        .cross_provider(
            Provider::Anthropic,
            endpoint(OPERATOR_ANTHROPIC, "sk-ant-operator"),
        )
        .rescue(false);
    let replies = vec![
        Reply::sse(&fixture(
            "openai/hand-written/chat_content_filter_empty.sse",
        )),
        Reply::Sse(vec![anthropic_stream(&events::text_answer(
            "claude-sonnet-4-5",
            "Here is how it works.",
        ))]),
    ];
    let done = exchange(
        layer,
        replies,
        post(CHAT_URL, &request, ("authorization", "Bearer sk-client")),
    )
    .await;
    let fallback = &done.upstream.seen()[1];
    assert_eq!(fallback.uri, "http://127.0.0.1:9/anthropic/v1/messages");
    assert_eq!(fallback.headers["x-api-key"], "sk-ant-operator");
    assert_eq!(fallback.headers["anthropic-version"], "2023-06-01");
    assert!(
        fallback.headers.get("authorization").is_none(),
        "the client's key stays with its provider"
    );
    assert_eq!(fallback.json()["model"], "claude-sonnet-4-5");

    let text = std::str::from_utf8(&done.body).unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let chunks: Vec<Value> = text
        .split("\n\n")
        .filter_map(|f| f.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(chunks[0]["object"], "chat.completion.chunk");
    assert_eq!(
        chunks[0]["choices"][0]["delta"]["content"],
        "Here is how it works."
    );
    assert_eq!(chunks[1]["choices"][0]["finish_reason"], "stop");
    assert_eq!(chunks[2]["usage"]["completion_tokens"], 5);
    assert_eq!(
        done.refusal().unwrap().served_model.as_deref(),
        Some("anthropic:claude-sonnet-4-5")
    );
}

/// A Chat conversation ending in an assistant message (which Chat answers
/// after) never reaches Claude as it is: there the turn would be a prefill
/// to continue, which the Claude 4.6 generation rejects outright. The fallback
/// is skipped as one Claude's API cannot express, and recorded.
#[tokio::test]
async fn a_chat_conversation_ending_in_an_assistant_turn_is_not_sent_to_claude() {
    let request = json!({"model": "gpt-5", "stream": true,
        "messages": [{"role": "user", "content": "Explain this exploit"},
            {"role": "assistant", "content": "The exploit works by"}]});
    let layer = RefusalGuardLayer::new()
        .fallback_chains(FallbackChains::new().chain("gpt-5", ["anthropic:claude-opus-4-8"]))
        .cross_provider(
            Provider::Anthropic,
            endpoint(OPERATOR_ANTHROPIC, "sk-ant-operator"),
        )
        .rescue(false);
    let refused = fixture("openai/hand-written/chat_content_filter_empty.sse");
    let done = exchange(
        layer,
        vec![Reply::sse(&refused)],
        post(CHAT_URL, &request, ("authorization", "Bearer sk-client")),
    )
    .await;
    assert_eq!(done.body, refused, "the refusal, as sent");
    assert_eq!(done.upstream.seen().len(), 1, "nothing sent to Claude");
    let record = &done.sink.records()[0];
    assert_eq!(record.reason, Some(DeadReason::Untranslatable));
    assert_eq!(record.attempts[1].result, AttemptResult::Skipped);
}

#[tokio::test]
async fn a_gemini_block_is_served_by_claude_as_a_gemini_stream() {
    let request =
        json!({"contents": [{"role": "user", "parts": [{"text": "Write a port scanner"}]}]});
    let layer = RefusalGuardLayer::new()
        .fallback_chains(
            FallbackChains::new().chain("gemini-2.5-pro", ["anthropic:claude-sonnet-4-5"]),
        )
        .cross_provider(
            Provider::Anthropic,
            endpoint(OPERATOR_ANTHROPIC, "sk-ant-operator"),
        )
        .rescue(false);
    let blocked = json!({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
        "usageMetadata": {"promptTokenCount": 6, "totalTokenCount": 6}});
    let replies = vec![
        Reply::sse(format!("data: {blocked}\r\n\r\n").as_bytes()),
        Reply::Sse(vec![anthropic_stream(&events::text_answer(
            "claude-sonnet-4-5",
            "import socket",
        ))]),
    ];
    let done = exchange(
        layer,
        replies,
        post(GEMINI_STREAM_URL, &request, ("x-goog-api-key", "g-client")),
    )
    .await;
    let fallback = &done.upstream.seen()[1];
    assert!(fallback.headers.get("x-goog-api-key").is_none());
    assert_eq!(
        fallback.json(),
        json!({"model": "claude-sonnet-4-5", "max_tokens": 8192, "stream": true,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Write a port scanner"}]}]})
    );
    let text = std::str::from_utf8(&done.body).unwrap();
    let chunks: Vec<Value> = text
        .split("\n\n")
        .filter_map(|f| f.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(
        chunks[0]["candidates"][0]["content"]["parts"][0]["text"],
        "import socket"
    );
    assert_eq!(chunks[1]["candidates"][0]["finishReason"], "STOP");
    assert_eq!(done.refusal().unwrap().outcome, Outcome::Fallback);
}

#[tokio::test]
async fn a_provider_without_an_endpoint_is_skipped_and_recorded() {
    let layer = RefusalGuardLayer::new()
        .fallback_chains(FallbackChains::new().chain("claude-opus-4-7", ["gemini:gemini-2.5-pro"]))
        .rescue(false);
    let request = post(
        ANTHROPIC_URL,
        &claude_request(true),
        ("x-api-key", "sk-ant-client"),
    );
    let done = exchange(layer, vec![refused_claude()], request).await;
    assert_eq!(
        done.upstream.seen().len(),
        1,
        "nothing went to the unnamed provider"
    );
    let records = done.sink.records();
    assert_eq!(records[0].outcome, Outcome::Dead);
    assert_eq!(records[0].reason, Some(DeadReason::NoEndpoint));
    let fallback = &records[0].attempts[1];
    assert_eq!(fallback.model.as_deref(), Some("gemini:gemini-2.5-pro"));
    assert_eq!(
        fallback.provider,
        Some(Provider::Google),
        "where it would have gone"
    );
    assert_eq!(fallback.result, AttemptResult::Skipped);
    // The client gets its refusal as sent.
    assert_eq!(
        done.body,
        anthropic_stream(&events::think_then_refuse("claude-opus-4-7", "cyber"))
    );
}

#[tokio::test]
async fn a_request_the_target_cannot_express_is_skipped_and_recorded() {
    let mut body = claude_request(true);
    body["messages"][0]["content"] = json!([{"type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "secret"}}]);
    let request = post(ANTHROPIC_URL, &body, ("x-api-key", "sk-ant-client"));
    let done = exchange(openai_chain(), vec![refused_claude()], request).await;
    assert_eq!(done.upstream.seen().len(), 1, "the document never left");
    let records = done.sink.records();
    assert_eq!(records[0].reason, Some(DeadReason::Untranslatable));
    assert_eq!(records[0].attempts[1].result, AttemptResult::Skipped);
}

const RESPONSES_URL: &str = "https://api.openai.com/v1/responses";
const RESPONSES_FILTERED: &str = "openai/hand-written/responses_incomplete_content_filter.sse";

/// A Responses client's request: instructions, a function tool, one user
/// message of parts.
fn responses_request(stream: bool) -> Value {
    json!({"model": "gpt-5", "stream": stream, "store": false,
        "instructions": "You audit systems.", "max_output_tokens": 400,
        "tools": [{"type": "function", "name": "run", "description": "Runs a command",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
            "strict": false}],
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Audit my SSH config"}]}]})
}

fn claude_chain() -> RefusalGuardLayer {
    RefusalGuardLayer::new()
        .fallback_chains(FallbackChains::new().chain("gpt-5", ["anthropic:claude-sonnet-4-5"]))
        .cross_provider(
            Provider::Anthropic,
            endpoint(OPERATOR_ANTHROPIC, "sk-ant-operator"),
        )
        .rescue(false)
}

/// Claude's stream: text, then a call to `run` with its input in two
/// pieces.
fn claude_tool_call_stream() -> Reply {
    let input = |json: &str| {
        json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": json}})
    };
    Reply::Sse(vec![anthropic_stream(&[
        events::message_start("claude-sonnet-4-5"),
        events::block_start(0, json!({"type": "text", "text": ""})),
        events::text_delta(0, "Checking."),
        events::block_stop(0),
        events::block_start(
            1,
            json!({"type": "tool_use", "id": "toolu_7", "name": "run", "input": {}}),
        ),
        input("{\"cmd\":"),
        input("\"cat /etc/ssh/sshd_config\"}"),
        events::block_stop(1),
        events::stop("tool_use"),
        events::message_stop(),
    ])])
}

/// The events of a Responses stream as JSON, each checked to name its type
/// in its `event:` line and to carry the next sequence number from 0.
fn responses_events(body: &Bytes) -> Vec<Value> {
    let text = std::str::from_utf8(body).unwrap();
    let frames: Vec<&str> = text.split("\n\n").filter(|f| !f.is_empty()).collect();
    frames
        .iter()
        .enumerate()
        .map(|(at, frame)| {
            let line = |prefix: &str| frame.lines().find_map(|l| l.strip_prefix(prefix));
            let data: Value = serde_json::from_str(line("data: ").unwrap()).unwrap();
            assert_eq!(line("event: "), data["type"].as_str(), "{frame}");
            assert_eq!(data["sequence_number"], json!(at), "{frame}");
            data
        })
        .collect()
}

#[tokio::test]
async fn a_responses_content_filter_is_served_by_claude_as_a_responses_stream() {
    let request = post(
        RESPONSES_URL,
        &responses_request(true),
        ("authorization", "Bearer sk-client"),
    );
    let replies = vec![
        Reply::sse(&fixture(RESPONSES_FILTERED)),
        claude_tool_call_stream(),
    ];
    let done = exchange(claude_chain(), replies, request).await;

    let seen = done.upstream.seen();
    assert_eq!(seen.len(), 2);
    let fallback = &seen[1];
    assert_eq!(fallback.uri, "http://127.0.0.1:9/anthropic/v1/messages");
    assert_eq!(fallback.headers["x-api-key"], "sk-ant-operator");
    assert!(
        fallback.headers.get("authorization").is_none(),
        "the client's key stays with its provider"
    );
    assert_eq!(
        fallback.json(),
        json!({"model": "claude-sonnet-4-5", "max_tokens": 400, "stream": true,
            "system": "You audit systems.",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Audit my SSH config"}]}],
            "tools": [{"name": "run", "description": "Runs a command",
                "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]})
    );

    // One coherent Responses stream, the refused one nowhere in it.
    let text = std::str::from_utf8(&done.body).unwrap();
    assert!(!text.contains("resp_hand0001"), "{text}");
    let events = responses_events(&done.body);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert_eq!(events[4]["delta"], "Checking.");
    assert_eq!(events[9]["output_index"], 1);
    let response = &events[13]["response"];
    assert_eq!(response["status"], "completed");
    assert_eq!(response["model"], "claude-sonnet-4-5");
    assert_eq!(
        response["output"][0]["content"],
        json!([{"type": "output_text", "text": "Checking.", "annotations": []}])
    );
    assert_eq!(
        response["output"][1],
        json!({"id": events[8]["item"]["id"], "type": "function_call", "status": "completed",
            "call_id": "toolu_7", "name": "run", "arguments": "{\"cmd\":\"cat /etc/ssh/sshd_config\"}"})
    );
    assert_eq!(response["usage"]["output_tokens"], 5);

    assert_eq!(
        done.parts.headers[header::RECOVERY],
        "fallback; category=content_filter; served-by=anthropic:claude-sonnet-4-5"
    );
    let records = done.sink.records();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].outcome, Outcome::Fallback);
    let fallback = &records[0].attempts[1];
    assert_eq!(
        fallback.model.as_deref(),
        Some("anthropic:claude-sonnet-4-5")
    );
    assert_eq!(fallback.provider, Some(Provider::Anthropic));
    assert_eq!(fallback.result, AttemptResult::Served);
    let refusal = done.refusal().unwrap();
    assert_eq!(refusal.category.as_deref(), Some("content_filter"));
    assert_eq!(
        refusal.served_model.as_deref(),
        Some("anthropic:claude-sonnet-4-5")
    );
}

#[tokio::test]
async fn a_responses_policy_error_is_served_by_claude_as_a_responses_stream() {
    for refused in [
        Reply::Status(
            400,
            fixture("openai/hand-written/responses_cyber_policy_400.json"),
        ),
        Reply::sse(&fixture(
            "openai/hand-written/responses_failed_cyber_policy.sse",
        )),
    ] {
        let request = post(
            RESPONSES_URL,
            &responses_request(true),
            ("authorization", "Bearer sk-client"),
        );
        let done = exchange(
            claude_chain(),
            vec![refused, claude_tool_call_stream()],
            request,
        )
        .await;
        assert_eq!(done.parts.status, 200);
        assert_eq!(done.parts.headers["content-type"], "text/event-stream");
        let seen = done.upstream.seen();
        assert_eq!(seen[1].uri, "http://127.0.0.1:9/anthropic/v1/messages");
        assert_eq!(seen[1].json()["model"], "claude-sonnet-4-5");
        let events = responses_events(&done.body);
        let last = events.last().unwrap();
        assert_eq!(last["type"], "response.completed");
        assert_eq!(last["response"]["model"], "claude-sonnet-4-5");
        assert!(!std::str::from_utf8(&done.body)
            .unwrap()
            .contains("cyber_policy"));
        let records = done.sink.records();
        assert_eq!(records[0].outcome, Outcome::Fallback);
        assert_eq!(records[0].signal, RefusalSignal::PolicyError);
        assert_eq!(records[0].category.as_deref(), Some("cyber"));
        assert_eq!(records[0].attempts[1].provider, Some(Provider::Anthropic));
        assert_eq!(records[0].attempts[1].result, AttemptResult::Served);
    }
}

#[tokio::test]
async fn a_responses_refusal_is_served_by_claude_as_one_response() {
    let answer = json!({"id": "msg_9", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-5", "content": [{"type": "text", "text": "Disable password logins."}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 20, "output_tokens": 6}});
    let replies = vec![
        Reply::Json(fixture("openai/hand-written/responses_refusal.json")),
        Reply::Json(Bytes::from(answer.to_string())),
    ];
    let request = post(
        RESPONSES_URL,
        &responses_request(false),
        ("authorization", "Bearer sk-client"),
    );
    let done = exchange(claude_chain(), replies, request).await;
    assert!(done.upstream.seen()[1].json().get("stream").is_none());
    let mut body: Value = serde_json::from_slice(&done.body).unwrap();
    assert!(body["created_at"].as_u64().unwrap() > 0);
    body.as_object_mut().unwrap().remove("created_at");
    assert_eq!(
        body,
        json!({"id": "resp_msg_9", "object": "response", "status": "completed", "error": null,
            "incomplete_details": null, "model": "claude-sonnet-4-5",
            "parallel_tool_calls": true, "tool_choice": "auto", "tools": [],
            "output": [{"id": "msg_msg_9_0", "type": "message", "status": "completed",
                "role": "assistant", "content": [{"type": "output_text",
                    "text": "Disable password logins.", "annotations": []}]}],
            "usage": {"input_tokens": 20, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 6, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 26}})
    );
    assert!(done
        .parts
        .headers
        .get("content-length")
        .is_none_or(|len| len == &done.body.len().to_string()));
    let refusal = done.refusal().unwrap();
    assert_eq!(refusal.outcome, Outcome::Fallback);
    assert_eq!(refusal.category.as_deref(), Some("model_refusal"));
}

#[tokio::test]
async fn a_responses_request_claude_cannot_express_is_skipped_and_its_refusal_served() {
    let mut body = responses_request(true);
    body["tools"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "web_search"}));
    let request = post(RESPONSES_URL, &body, ("authorization", "Bearer sk-client"));
    let refused = fixture(RESPONSES_FILTERED);
    let done = exchange(claude_chain(), vec![Reply::sse(&refused)], request).await;
    assert_eq!(done.upstream.seen().len(), 1, "nothing went to Anthropic");
    assert_eq!(done.body, refused, "the refusal reaches the client as sent");
    let records = done.sink.records();
    assert_eq!(records[0].outcome, Outcome::Dead);
    assert_eq!(records[0].reason, Some(DeadReason::Untranslatable));
    let fallback = &records[0].attempts[1];
    assert_eq!(
        fallback.model.as_deref(),
        Some("anthropic:claude-sonnet-4-5")
    );
    assert_eq!(fallback.provider, Some(Provider::Anthropic));
    assert_eq!(fallback.result, AttemptResult::Skipped);
}

#[tokio::test]
async fn a_responses_clients_openai_entry_stays_on_responses_with_its_own_key() {
    let layer = RefusalGuardLayer::new()
        .fallback_chains(FallbackChains::new().chain("gpt-5", ["openai:gpt-5-mini"]))
        .rescue(false);
    // Chained to an earlier response: a translation could not carry it.
    let mut body = responses_request(false);
    body["previous_response_id"] = json!("resp_0");
    let answer = fixture("usage/responses-answer.json");
    let replies = vec![
        Reply::Json(fixture("openai/hand-written/responses_refusal.json")),
        Reply::Json(answer.clone()),
    ];
    let request = post(RESPONSES_URL, &body, ("authorization", "Bearer sk-client"));
    let done = exchange(layer, replies, request).await;
    let fallback = &done.upstream.seen()[1];
    assert_eq!(fallback.uri, RESPONSES_URL);
    assert_eq!(fallback.headers["authorization"], "Bearer sk-client");
    let mut expected = body.clone();
    expected["model"] = json!("gpt-5-mini");
    assert_eq!(fallback.json(), expected);
    assert_eq!(done.body, answer);
    let records = done.sink.records();
    assert_eq!(records[0].outcome, Outcome::Fallback);
    assert_eq!(records[0].attempts[1].result, AttemptResult::Served);
    assert_eq!(records[0].attempts[1].provider, None);
}
