//! Core behaviour on Anthropic Messages, through the public API.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use refusal_guard::refusal::{
    AttemptResult, AttemptStep, DeadReason, ErrorCategory, RefusalKind, RefusalSignal,
};
use refusal_guard::telemetry::MemorySink;
use refusal_guard::{Outcome, Refusal, RefusalGuard, RefusalGuardLayer, RefusalHandle};
use serde_json::{json, Value};
use support::events::*;
use support::*;
use tower::{Layer, Service, ServiceExt};

const TEXT: &str = "anthropic/anthropic-sdk-python/basic_response.txt";
const EMPTY_REFUSAL: &str = "anthropic/anthropic-sdk-python/refusal_response.txt";

#[tokio::test]
async fn non_refusal_stream_is_byte_identical() {
    let fixture = fixture(TEXT);
    let replies = vec![Reply::sse(&fixture)];
    let request = messages("m", true, "hi");
    let done = exchange(RefusalGuardLayer::new(), replies, request).await;
    done.assert_untouched(&fixture);
    let handle = done
        .parts
        .extensions
        .get::<RefusalHandle>()
        .expect("handle");
    assert!(handle.is_settled());
    assert_eq!(handle.get(), None);
}

#[tokio::test]
async fn empty_refusal_is_rescued_with_one_continuation() {
    let replies = Reply::fixtures(&[EMPTY_REFUSAL, TEXT]);
    let request = messages("claude-opus-4-7", true, "scan my host");
    let done = exchange(RefusalGuardLayer::new(), replies, request).await;
    let seen = done.assert_served_on_the_second_call(
        &fixture(TEXT),
        "the client receives only the continuation",
    );
    let note = last_user_text(&seen[1].json());
    assert!(note.contains("cyber"), "{note}");
    let refusal = done.refusal().expect("typed refusal");
    assert_eq!(refusal.outcome, Outcome::Rescued);
    assert_eq!(refusal.kind, RefusalKind::Empty);
    assert_eq!(refusal.category.as_deref(), Some("cyber"));
    let records = done.sink.records();
    assert_rescued_on_the_second_attempt(&records);
}

#[tokio::test]
async fn rescue_off_delivers_original_dead() {
    let refusal = fixture(EMPTY_REFUSAL);
    let layer = RefusalGuardLayer::new().rescue(false);
    let done = exchange(layer, vec![Reply::sse(&refusal)], messages("m", true, "x")).await;
    assert_eq!(done.body, refusal);
    assert_eq!(done.upstream.seen().len(), 1);
    let records = done.sink.records();
    assert_eq!(records[0].outcome, Outcome::Dead);
    assert_eq!(records[0].reason, Some(DeadReason::RescueOff));
}

fn guard_with(
    upstream: &Upstream,
    sink: &MemorySink,
) -> impl Service<
    http::Request<Full<Bytes>>,
    Response = http::Response<refusal_guard::GuardBody<Chunked>>,
    Error = tower::BoxError,
> {
    RefusalGuardLayer::new()
        .telemetry(sink.clone())
        .layer(upstream.service())
}

fn note_of(seen: &Seen) -> String {
    last_user_text(&seen.json())
}

#[tokio::test]
async fn think_then_refuse_is_an_empty_refusal_and_the_note_names_it() {
    let answer = anthropic_stream(&text_answer(
        "claude-opus-4-7",
        "Here is the hardening checklist.",
    ));
    let upstream = Upstream::new(vec![
        Reply::sse(&anthropic_stream(&think_then_refuse(
            "claude-opus-4-7",
            "bio",
        ))),
        Reply::sse(&answer),
    ]);
    let sink = MemorySink::new();
    let mut guard = guard_with(&upstream, &sink);
    let request = messages_request("claude-opus-4-7", true, "explain lab biosafety levels");
    let (parts, body) = call(&mut guard, post("/v1/messages", &request)).await;
    assert_eq!(body, answer);
    let seen = upstream.seen();
    assert_eq!(seen.len(), 2);
    let note = note_of(&seen[1]);
    assert!(
        note.contains("bio") && note.contains("Declined under the usage policy."),
        "{note}"
    );
    // The continuation is the same request plus the note.
    let mut continuation = seen[1].json();
    let content = continuation["messages"][0]["content"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(
        content[0],
        json!({"type":"text","text":"explain lab biosafety levels"})
    );
    continuation["messages"][0]["content"] = json!("explain lab biosafety levels");
    assert_eq!(continuation, request);
    let refusal = parts.extensions.get::<Refusal>().unwrap();
    assert_eq!(refusal.error_category(), ErrorCategory::Policy);
    assert_eq!(refusal.code(), "bio");
    assert_eq!(refusal.signal, RefusalSignal::StopReason);
    assert_eq!(refusal.request_id.as_deref(), Some("req_test_123"));
}

#[tokio::test]
async fn whitespace_text_and_redacted_thinking_are_not_output() {
    let refusal = anthropic_stream(&[
        message_start("m"),
        block_start(
            0,
            json!({"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix"}),
        ),
        block_stop(0),
        block_start(1, json!({"type":"text","text":""})),
        text_delta(1, "  \n\t "),
        block_stop(1),
        refusal(Some("cyber"), None),
        message_stop(),
    ]);
    let answer = anthropic_stream(&text_answer("m", "ok"));
    let replies = vec![Reply::sse(&refusal), Reply::sse(&answer)];
    let done = exchange(RefusalGuardLayer::new(), replies, messages("m", true, "x")).await;
    assert_eq!(done.body, answer);
    assert_eq!(done.sink.records()[0].outcome, Outcome::Rescued);
}

#[tokio::test]
async fn dangling_tool_use_is_a_partial_refusal_left_alone() {
    let stream = anthropic_stream(&[
        message_start("m"),
        block_start(
            0,
            json!({"type":"tool_use","id":"toolu_1","name":"run","input":{}}),
        ),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"cmd\": \"nm"}}),
        refusal(Some("cyber"), None),
        message_stop(),
    ]);
    let replies = vec![Reply::sse(&stream)];
    let request = messages("m", true, "x");
    let done = exchange(RefusalGuardLayer::new(), replies, request).await;
    assert_eq!(done.body, stream);
    assert_eq!(done.upstream.seen().len(), 1);
    let records = done.sink.records();
    assert_eq!(records[0].outcome, Outcome::Partial);
    // Known only once the done.body ended: through the handle, not up front.
    assert!(done.refusal().is_none());
    let handle = done.parts.extensions.get::<RefusalHandle>().unwrap();
    assert_eq!(handle.settled().await.unwrap().kind, RefusalKind::Partial);
}

#[tokio::test]
async fn refused_continuation_delivers_the_original_byte_exact() {
    let original = anthropic_stream(&think_then_refuse("m", "cyber"));
    let again = fixture(EMPTY_REFUSAL);
    let replies = vec![Reply::sse(&original), Reply::sse(&again)];
    let done = exchange(RefusalGuardLayer::new(), replies, messages("m", true, "x")).await;
    assert_eq!(done.body, original);
    let record = &done.sink.records()[0];
    assert_eq!(record.outcome, Outcome::Dead);
    assert_eq!(record.reason, Some(DeadReason::StillRefused));
    let results: Vec<_> = record.attempts.iter().map(|a| (a.step, a.result)).collect();
    assert_eq!(
        results,
        [
            (AttemptStep::Original, AttemptResult::Refused),
            (AttemptStep::Rescue, AttemptResult::Refused)
        ]
    );
    assert_eq!(
        done.refusal().unwrap().reason,
        Some(DeadReason::StillRefused)
    );
}

#[tokio::test]
async fn failing_continuation_delivers_the_original() {
    for failure in [
        Reply::Status(
            500,
            Bytes::from_static(
                br#"{"type":"error","error":{"type":"api_error","message":"boom"}}"#,
            ),
        ),
        Reply::Status(
            429,
            Bytes::from_static(
                br#"{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}"#,
            ),
        ),
        Reply::Fail,
    ] {
        let original = fixture(EMPTY_REFUSAL);
        let replies = vec![Reply::sse(&original), failure];
        let request = messages("m", true, "x");
        let done = exchange(RefusalGuardLayer::new(), replies, request).await;
        assert_eq!(done.body, original);
        assert_eq!(done.parts.status, 200);
        assert_eq!(
            done.sink.records()[0].reason,
            Some(DeadReason::UpstreamError)
        );
        assert_eq!(done.upstream.seen().len(), 2);
    }
}

#[tokio::test]
async fn one_rescue_per_conversation_until_real_output() {
    let upstream = Upstream::new(vec![]);
    let sink = MemorySink::new();
    let mut guard = guard_with(&upstream, &sink);
    let request = || messages("m", true, "the same first turn");
    let refusal = fixture(EMPTY_REFUSAL);

    // 1: refused, rescue refused too.
    upstream.push(Reply::sse(&refusal));
    upstream.push(Reply::sse(&refusal));
    call(&mut guard, request()).await;
    // 2: refused again before any output: no rescue.
    upstream.push(Reply::sse(&refusal));
    call(&mut guard, request()).await;
    assert_eq!(upstream.seen().len(), 3);
    assert_eq!(sink.records()[1].reason, Some(DeadReason::RescueCap));
    // Another conversation is not affected.
    upstream.push(Reply::sse(&refusal));
    upstream.push(Reply::sse(&fixture(TEXT)));
    call(&mut guard, messages("m", true, "another conversation")).await;
    assert_eq!(sink.records()[2].outcome, Outcome::Rescued);
    // 3: real output in the first conversation clears its count...
    upstream.push(Reply::sse(&fixture(TEXT)));
    call(&mut guard, request()).await;
    // 4: ...so the next refusal may be rescued again.
    upstream.push(Reply::sse(&refusal));
    upstream.push(Reply::sse(&fixture(TEXT)));
    let (_, body) = call(&mut guard, request()).await;
    assert_eq!(body, fixture(TEXT));
    assert_eq!(sink.records()[3].outcome, Outcome::Rescued);
    assert_eq!(upstream.seen().len(), 8);
}

/// A guard recording into a fresh sink over [`judging_upstream`], with the
/// count of the requests that upstream received, and that upstream's
/// check, which the test holds.
fn judged_guard(
    continuation_answers: bool,
) -> (
    Arc<AtomicUsize>,
    MemorySink,
    RefusalGuard<impl MockInner>,
    Answering<impl MockInner>,
) {
    let requests = Arc::new(AtomicUsize::new(0));
    let sink = MemorySink::new();
    let upstream = judging_upstream(continuation_answers, requests.clone());
    let guard = RefusalGuardLayer::new()
        .telemetry(sink.clone())
        .layer(upstream.service());
    (requests, sink, guard, upstream)
}

/// An upstream that refuses originals and answers continuations, whatever
/// order concurrent requests arrive in.
fn judging_upstream(
    continuation_answers: bool,
    requests: Arc<AtomicUsize>,
) -> Answering<impl MockInner> {
    answering(move |request: http::Request<Full<Bytes>>| {
        let requests = requests.clone();
        async move {
            requests.fetch_add(1, Ordering::SeqCst);
            let body = request.into_body().collect().await.unwrap().to_bytes();
            let json: Value = serde_json::from_slice(&body).unwrap();
            let first = json["messages"][0]["content"].to_string();
            let is_continuation = json.to_string().contains("[refusal-guard]");
            tokio::task::yield_now().await;
            let stream = if is_continuation && continuation_answers {
                anthropic_stream(&text_answer("m", &format!("answer to {first}")))
            } else {
                anthropic_stream(&think_then_refuse("m", "cyber"))
            };
            sse_response(Chunked::chunks(vec![stream]))
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_conversations_are_rescued_independently() {
    let (requests, sink, guard, _upstream) = judged_guard(true);
    let mut tasks = Vec::new();
    for i in 0..40 {
        let guard = guard.clone();
        tasks.push(tokio::spawn(async move {
            let request = post(
                "/v1/messages",
                &messages_request("m", true, &format!("task {i}")),
            );
            let response = guard.oneshot(request).await.unwrap();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            (i, body)
        }));
    }
    for task in tasks {
        let (i, body) = task.await.unwrap();
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert!(
            text.contains(&format!("task {i}")),
            "task {i} got another stream"
        );
    }
    assert_eq!(requests.load(Ordering::SeqCst), 80);
    assert!(sink.records().iter().all(|r| r.outcome == Outcome::Rescued));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_refusals_in_one_conversation_get_one_rescue() {
    let (requests, sink, guard, _upstream) = judged_guard(false);
    let tasks: Vec<_> = (0..12)
        .map(|_| {
            let guard = guard.clone();
            tokio::spawn(async move {
                let request = messages("m", true, "same");
                let response = guard.oneshot(request).await.unwrap();
                response.into_body().collect().await.unwrap().to_bytes()
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(
        requests.load(Ordering::SeqCst),
        13,
        "12 originals and exactly one rescue"
    );
    let records = sink.records();
    assert_eq!(
        records
            .iter()
            .filter(|r| r.reason == Some(DeadReason::RescueCap))
            .count(),
        11
    );
    assert_eq!(
        records
            .iter()
            .filter(|r| r.reason == Some(DeadReason::StillRefused))
            .count(),
        1
    );
}

#[tokio::test]
async fn the_runtime_switch_turns_rescue_off_and_on() {
    let upstream = Upstream::new(vec![]);
    let sink = MemorySink::new();
    let layer = RefusalGuardLayer::new().telemetry(sink.clone());
    let switch = layer.rescue_switch();
    let mut guard = layer.layer(upstream.service());
    switch.set(false);
    upstream.push(Reply::sse(&fixture(EMPTY_REFUSAL)));
    call(&mut guard, messages("m", true, "a")).await;
    assert_eq!(sink.records()[0].reason, Some(DeadReason::RescueOff));
    switch.set(true);
    upstream.push(Reply::sse(&fixture(EMPTY_REFUSAL)));
    upstream.push(Reply::sse(&fixture(TEXT)));
    call(&mut guard, messages("m", true, "b")).await;
    assert_eq!(sink.records()[1].outcome, Outcome::Rescued);
}

#[tokio::test]
async fn bad_streams_pass_through_untouched() {
    let cases: Vec<(&str, Bytes)> = vec![
        ("garbage", Bytes::from_static(b"\x00\xff not sse at all {{{")),
        (
            "broken json",
            Bytes::from_static(b"event: message_start\ndata: {\"type\":\"message_st\n\nevent: content_block_delta\ndata: {nope}\n\n"),
        ),
        (
            "unknown events and blocks",
            anthropic_stream(&[
                message_start("m"),
                json!({"type":"brand_new_event","x":1}),
                block_start(0, json!({"type":"hologram","data":"?"})),
                block_stop(0),
                block_start(1, json!({"type":"text","text":""})),
                text_delta(1, "fine"),
                block_stop(1),
                stop("end_turn"),
                message_stop(),
            ]),
        ),
        (
            "error event mid-stream",
            anthropic_stream(&[
                message_start("m"),
                ping(),
                json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
            ]),
        ),
        ("truncated", anthropic_stream(&[message_start("m"), block_start(0, json!({"type":"thinking","thinking":""})), thinking_delta(0, "hmm")])),
        ("empty", Bytes::new()),
    ];
    for (name, stream) in cases {
        let replies = vec![Reply::Sse(vec![stream.clone()])];
        let request = messages("m", true, "x");
        let done = exchange(RefusalGuardLayer::new(), replies, request).await;
        assert_eq!(done.body, stream, "{name}");
        assert_eq!(done.upstream.seen().len(), 1, "{name}");
        assert!(done.sink.records().is_empty(), "{name}");
    }
}

#[tokio::test]
async fn upstream_errors_are_propagated_as_they_came() {
    // The inner service fails: the caller gets that error.
    let upstream = Upstream::new(vec![Reply::Fail]);
    let sink = MemorySink::new();
    let guard = guard_with(&upstream, &sink);
    let error = guard.oneshot(messages("m", true, "x")).await.unwrap_err();
    assert_eq!(error.to_string(), "connection refused");

    // The body fails while held: what arrived, then the error.
    let head = anthropic_stream(&[message_start("m"), ping()]);
    let upstream = Upstream::new(vec![Reply::SseThenError(vec![head.clone()])]);
    let guard = guard_with(&upstream, &sink);
    let response = guard.oneshot(messages("m", true, "x")).await.unwrap();
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, head);
    let error = body.frame().await.unwrap().unwrap_err();
    assert_eq!(error.to_string(), "connection reset");
    assert!(sink.records().is_empty());
}

#[tokio::test]
async fn other_endpoints_pass_through_unread() {
    let refusal = fixture(EMPTY_REFUSAL);
    // What the guard would read were these Messages requests: `stream`.
    let streamed = b"{\"model\":\"m\",\"stream\":true,\"messages\":[]}";
    // Token counting is checked by the contract: a body it takes.
    let count = b"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    for (method, path, body) in [
        ("POST", "/v1/messages/count_tokens", &count[..]),
        ("POST", "/v1/messages/batches", &streamed[..]),
        ("GET", "/v1/models", &streamed[..]),
        ("GET", "/v1/messages", &streamed[..]),
        ("POST", "/v1/complete", &streamed[..]),
    ] {
        let body = Bytes::from_static(body);
        let request = http::Request::builder()
            .method(method)
            .uri(format!("https://api.anthropic.com{path}"))
            .body(Full::new(body.clone()))
            .unwrap();
        // This upstream serves them all (token counting under the contract).
        let upstream = Upstream::new(vec![Reply::sse(&refusal)]).serving(path);
        let done = exchange_on(upstream, RefusalGuardLayer::new(), request).await;
        assert_eq!(done.body, refusal, "{path}");
        assert_eq!(done.upstream.seen()[0].body, body, "{path}");
        assert_eq!(done.upstream.seen().len(), 1, "{path}");
        assert!(
            done.parts.extensions.get::<RefusalHandle>().is_none(),
            "{path}"
        );
        assert!(done.sink.records().is_empty());
    }
}

#[tokio::test]
async fn a_base_path_prefix_is_still_guarded() {
    let replies = Reply::fixtures(&[EMPTY_REFUSAL, TEXT]);
    let done = exchange(
        RefusalGuardLayer::new(),
        replies,
        post(
            "/proxy/anthropic/v1/messages",
            &messages_request("m", true, "x"),
        ),
    )
    .await;
    assert_eq!(done.body, fixture(TEXT));
}

#[tokio::test]
async fn the_rescue_of_a_conversation_ending_in_a_system_message_keeps_it_last() {
    // Claude Code ends a turn with a mid-conversation system message; the
    // API takes one only after a user turn, as the last message or before
    // an assistant turn. The rescue note joins the user turn before it (the
    // upstream keeps the contract: a note after it would be a 400).
    let mut request = messages_request("m", true, "Audit my SSH config");
    request["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "system", "content": "Reminder: the user is on macOS."}));
    let replies = Reply::fixtures(&[EMPTY_REFUSAL, TEXT]);
    let done = exchange(
        RefusalGuardLayer::new(),
        replies,
        post("/v1/messages", &request),
    )
    .await;
    let seen = done.assert_served_on_the_second_call(&fixture(TEXT), "the rescue is answered");
    let rescue = seen[1].json();
    let messages = rescue["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(
        messages[1], request["messages"][1],
        "the system message, last"
    );
    let note = messages[0]["content"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(note["text"].as_str().unwrap().contains("[refusal-guard]"));
}

#[tokio::test]
async fn a_request_over_the_body_limit_is_forwarded_unguarded() {
    let refusal = fixture(EMPTY_REFUSAL);
    let request = messages_request("m", true, &"long prompt ".repeat(20));
    let bytes = serde_json::to_vec(&request).unwrap();
    let layer = RefusalGuardLayer::new().max_request_body(64);
    let replies = vec![Reply::sse(&refusal)];
    let request = post("/v1/messages", &request);
    let done = exchange(layer, replies, request).await;
    assert_eq!(done.body, refusal, "not judged, so not recovered");
    assert_eq!(done.upstream.seen().len(), 1);
    assert_eq!(done.upstream.seen()[0].body, bytes);
    assert!(done.sink.records().is_empty());
}

#[tokio::test]
async fn unrewritten_requests_reach_upstream_byte_identical() {
    // Odd spacing and key order that a re-serialisation would change.
    let raw = Bytes::from_static(b"{ \"stream\" : true, \"model\":\"m\",  \"max_tokens\": 5, \"messages\": [{\"role\":\"user\",\"content\":\"hi\"}] }");
    let request = http::Request::post("https://api.anthropic.com/v1/messages")
        .header("x-api-key", "k")
        .body(Full::new(raw.clone()))
        .unwrap();
    let replies = vec![Reply::sse(&fixture(TEXT))];
    let done = exchange(RefusalGuardLayer::new(), replies, request).await;
    assert_eq!(done.upstream.seen()[0].body, raw);
    assert_eq!(done.upstream.seen()[0].headers["x-api-key"], "k");
}

#[tokio::test]
async fn the_conversation_header_keys_the_ledger_and_is_not_forwarded() {
    let upstream = Upstream::new(vec![]);
    let sink = MemorySink::new();
    let mut guard = guard_with(&upstream, &sink);
    let refusal = fixture(EMPTY_REFUSAL);
    for (i, first_turn) in ["one", "two"].iter().enumerate() {
        let mut request = messages("m", true, first_turn);
        request.headers_mut().insert(
            "x-refusal-guard-conversation",
            "session-42".parse().unwrap(),
        );
        upstream.push(Reply::sse(&refusal));
        if i == 0 {
            upstream.push(Reply::sse(&refusal));
        }
        call(&mut guard, request).await;
    }
    let records = sink.records();
    assert_eq!(
        records[1].reason,
        Some(DeadReason::RescueCap),
        "same header, same conversation"
    );
    assert_eq!(records[0].conversation, records[1].conversation);
    assert!(upstream
        .seen()
        .iter()
        .all(|s| !s.headers.contains_key("x-refusal-guard-conversation")));
    assert_ne!(
        records[0].conversation.as_deref(),
        Some("session-42"),
        "logged hashed"
    );
}

#[tokio::test]
async fn a_closure_can_name_the_conversation() {
    let upstream = Upstream::new(vec![]);
    let sink = MemorySink::new();
    let mut guard = RefusalGuardLayer::new()
        .telemetry(sink.clone())
        .conversation_key(|parts, _body| {
            parts
                .headers
                .get("x-user")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        })
        .layer(upstream.service());
    let refusal = fixture(EMPTY_REFUSAL);
    upstream.push(Reply::sse(&refusal));
    upstream.push(Reply::sse(&refusal));
    upstream.push(Reply::sse(&refusal));
    for first_turn in ["a", "b"] {
        let mut request = messages("m", true, first_turn);
        request
            .headers_mut()
            .insert("x-user", "alice".parse().unwrap());
        call(&mut guard, request).await;
    }
    assert_eq!(sink.records()[1].reason, Some(DeadReason::RescueCap));
}

#[tokio::test]
async fn json_empty_refusal_is_rescued_with_json() {
    let refusal = fixture("anthropic/vercel-ai/anthropic-refusal.json");
    let answer = fixture("anthropic/vercel-ai/anthropic-text.json");
    let replies = vec![Reply::Json(refusal), Reply::Json(answer.clone())];
    let done = exchange(RefusalGuardLayer::new(), replies, messages("m", false, "x")).await;
    assert_eq!(done.body, answer);
    assert_eq!(done.refusal().unwrap().outcome, Outcome::Rescued);
    assert!(note_of(&done.upstream.seen()[1]).contains("cyber"));
    assert_eq!(done.upstream.seen()[1].json()["stream"], false);
}

#[tokio::test]
async fn the_note_follows_tool_results_in_the_last_user_turn() {
    let upstream = Upstream::new(Reply::fixtures(&[EMPTY_REFUSAL, TEXT]));
    let sink = MemorySink::new();
    let request = json!({
        "model": "m", "stream": true, "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "check the host"},
            {"role": "assistant", "content": [{"type":"tool_use","id":"t1","name":"scan","input":{}}]},
            {"role": "user", "content": [{"type":"tool_result","tool_use_id":"t1","content":"22/tcp open"}]},
        ]
    });
    call(
        &mut guard_with(&upstream, &sink),
        post("/v1/messages", &request),
    )
    .await;
    let sent = upstream.seen()[1].json();
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "merged into the last user turn");
    let content = messages[2]["content"].as_array().unwrap();
    assert_eq!(content[0]["type"], "tool_result");
    assert_eq!(content[1]["type"], "text");
    assert!(content[1]["text"]
        .as_str()
        .unwrap()
        .contains("[refusal-guard]"));
}

#[tokio::test]
async fn the_note_becomes_a_new_turn_after_an_assistant_prefill() {
    let request = json!({
        "model": "m", "stream": true, "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Sure,"},
        ]
    });
    let replies = Reply::fixtures(&[EMPTY_REFUSAL, TEXT]);
    let request = post("/v1/messages", &request);
    let done = exchange(RefusalGuardLayer::new(), replies, request).await;
    let sent = done.upstream.seen()[1].json();
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[2]["role"], "user");
}

#[tokio::test]
async fn a_custom_note_is_used() {
    let layer = RefusalGuardLayer::new().rescue_note(
        refusal_guard::recovery::RescueNote::template("CUSTOM {category}"),
    );
    let replies = Reply::fixtures(&[EMPTY_REFUSAL, TEXT]);
    let done = exchange(layer, replies, messages("m", true, "x")).await;
    assert_eq!(note_of(&done.upstream.seen()[1]), "CUSTOM cyber");
}

#[tokio::test]
async fn a_long_hold_commits_and_a_late_refusal_is_recorded() {
    let mut events = vec![
        message_start("m"),
        block_start(0, json!({"type":"thinking","thinking":""})),
    ];
    for _ in 0..50 {
        events.push(thinking_delta(0, "thinking about it at some length"));
    }
    events.push(block_stop(0));
    events.push(refusal(Some("cyber"), None));
    events.push(message_stop());
    let stream = anthropic_stream(&events);
    let layer = RefusalGuardLayer::new().max_hold_bytes(1024);
    let replies = vec![Reply::Sse(split_at(
        &stream,
        &(1..40).map(|i| i * 200).collect::<Vec<_>>(),
    ))];
    let done = exchange(layer, replies, messages("m", true, "x")).await;
    assert_eq!(done.body, stream);
    assert_eq!(done.upstream.seen().len(), 1);
    assert_eq!(done.sink.records()[0].reason, Some(DeadReason::HoldLimit));
}

#[tokio::test]
async fn a_panicking_sink_does_not_fail_the_request() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let upstream = Upstream::new(Reply::fixtures(&[EMPTY_REFUSAL, TEXT, EMPTY_REFUSAL, TEXT]));
    let calls = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let mut guard = RefusalGuardLayer::new()
        .telemetry(move |_: &refusal_guard::telemetry::RefusalRecord| {
            counted.fetch_add(1, Ordering::SeqCst);
            panic!("sink broke")
        })
        .layer(upstream.service());
    let (_, body) = call(&mut guard, messages("m", true, "x")).await;
    assert_eq!(body, fixture(TEXT));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the sink ran, and panicked"
    );
    // The guard goes on recording after the panic.
    let (_, body) = call(&mut guard, messages("m", true, "another")).await;
    assert_eq!(body, fixture(TEXT));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_unreadable_body_is_forwarded_as_sent_without_the_guards_header() {
    let refusal = fixture(EMPTY_REFUSAL);
    let upstream = Upstream::new(vec![Reply::sse(&refusal)]);
    let sink = MemorySink::new();
    let raw = Bytes::from_static(b"{\"model\": \"m\", \"stream\": tru");
    let request = http::Request::post("https://api.anthropic.com/v1/messages")
        .header("x-refusal-guard-conversation", "abc")
        .body(Full::new(raw.clone()))
        .unwrap();
    let (parts, body) = call(&mut guard_with(&upstream, &sink), request).await;
    // The provider answers such a body with its 400 (the contract upstream
    // does too), which reaches the client as sent, not judged.
    assert_eq!(parts.status, 400);
    let error: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert_eq!(upstream.take_violations().len(), 1);
    let seen = &upstream.seen()[0];
    assert_eq!(seen.body, raw);
    assert!(!seen.headers.contains_key("x-refusal-guard-conversation"));
    assert!(sink.records().is_empty());
    drop(refusal);
}

#[tokio::test]
async fn claude_on_vertex_is_found_under_a_base_path_that_says_models() {
    let body = json!({"anthropic_version": "vertex-2023-10-16", "max_tokens": 64, "stream": true,
        "messages": [{"role": "user", "content": "x"}]});
    let bytes = serde_json::to_vec(&body).unwrap();
    let path = "https://gw.example/models/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-opus-4-7:streamRawPredict";
    let request = http::Request::post(path)
        .body(Full::new(Bytes::from(bytes)))
        .unwrap();
    let layer = RefusalGuardLayer::new().fallback_chains(
        refusal_guard::recovery::FallbackChains::new()
            .chain("claude-opus-4-7", ["claude-sonnet-4-5"]),
    );
    let replies = Reply::fixtures(&[EMPTY_REFUSAL, TEXT]);
    let done = exchange(layer, replies, request).await;
    assert_eq!(done.body, fixture(TEXT));
    assert_eq!(
        done.upstream.seen()[1].uri.path(),
        "/models/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5:streamRawPredict"
    );
    assert_eq!(done.sink.records()[0].outcome, Outcome::Fallback);
}

#[tokio::test]
async fn a_frame_over_the_framer_limit_is_skipped_and_a_later_refusal_still_recorded() {
    let huge = "x".repeat(1_500_000);
    let stream = anthropic_stream(&[
        message_start("m"),
        block_start(0, json!({"type":"thinking","thinking":""})),
        thinking_delta(0, &huge),
        block_stop(0),
        refusal(Some("cyber"), None),
        message_stop(),
    ]);
    let chunks = split_at(
        &stream,
        &(1..stream.len() / 65_536)
            .map(|i| i * 65_536)
            .collect::<Vec<_>>(),
    );
    let layer = RefusalGuardLayer::new().max_hold_bytes(1000);
    let done = exchange(layer, vec![Reply::Sse(chunks)], messages("m", true, "x")).await;
    assert_eq!(done.body, stream, "every byte, as sent");
    let records = done.sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].reason, Some(DeadReason::HoldLimit));
    assert_eq!(records[0].category.as_deref(), Some("cyber"));
}

#[tokio::test]
async fn a_partial_refusal_at_the_end_of_a_long_stream_names_the_conversation_as_an_empty_one_does()
{
    // Once the first stream is decided (its text shows) the guard keeps only
    // the part of the request the key reads; the key must not change.
    let upstream = Upstream::new(vec![]);
    let sink = MemorySink::new();
    let mut guard = guard_with(&upstream, &sink);
    let history = "an earlier answer ".repeat(2_000);
    let turn = |last: &str| {
        json!({"model": "m", "max_tokens": 64, "stream": true,
            "tools": [{"name": "run", "description": history, "input_schema": {"type": "object"}}],
            "messages": [
                {"role": "user", "content": "audit the service"},
                {"role": "assistant", "content": history},
                {"role": "user", "content": last},
            ],
            "system": [{"type": "text", "text": "You are a careful reviewer."}]})
    };
    let partial = anthropic_stream(&[
        message_start("m"),
        block_start(0, json!({"type": "text", "text": ""})),
        text_delta(0, "Here is the first half"),
        refusal(Some("cyber"), None),
        message_stop(),
    ]);
    upstream.push(Reply::sse(&partial));
    call(&mut guard, post("/v1/messages", &turn("go on"))).await;
    upstream.push(Reply::sse(&fixture(EMPTY_REFUSAL)));
    upstream.push(Reply::sse(&anthropic_stream(&text_answer("m", "ok"))));
    call(&mut guard, post("/v1/messages", &turn("and the rest"))).await;
    let records = sink.records();
    assert_eq!(records[0].outcome, Outcome::Partial);
    assert_eq!(records[1].outcome, Outcome::Rescued);
    assert!(records[0].conversation.is_some());
    assert_eq!(records[0].conversation, records[1].conversation);
}

#[tokio::test]
async fn a_conversation_keeps_its_rescue_count_when_the_client_moves_its_cache_mark() {
    // Clients put a prompt-caching mark on the newest user turn of every
    // request: the first turn has it on the first request only.
    let upstream = Upstream::new(vec![]);
    let sink = MemorySink::new();
    let mut guard = guard_with(&upstream, &sink);
    let mark = json!({"type": "ephemeral"});
    let first = json!({"model": "m", "max_tokens": 64, "stream": true, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "the task", "cache_control": mark}]},
    ]});
    let second = json!({"model": "m", "max_tokens": 64, "stream": true, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "the task"}]},
        {"role": "assistant", "content": "thinking it over"},
        {"role": "user", "content": [{"type": "text", "text": "go on", "cache_control": mark}]},
    ]});
    let refusal = fixture(EMPTY_REFUSAL);
    upstream.push(Reply::sse(&refusal));
    upstream.push(Reply::sse(&refusal));
    call(&mut guard, post("/v1/messages", &first)).await;
    upstream.push(Reply::sse(&refusal));
    call(&mut guard, post("/v1/messages", &second)).await;
    assert_eq!(upstream.seen().len(), 3, "no second rescue");
    assert_eq!(sink.records()[1].reason, Some(DeadReason::RescueCap));
    assert_eq!(
        sink.records()[0].conversation,
        sink.records()[1].conversation
    );
}
