//! Partial-refusal continuation (`continue_partial(true)`), through the
//! layer over the scripted inner service: a stream refused after text, whose
//! refusal offers the prefill claim and a credit token, continues on the
//! chain's next model inside the same message; anything else is the
//! original, byte for byte. Then the same through the proxy, against the
//! scripted mock upstream on loopback.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use refusal_guard::recovery::FallbackChains;
use refusal_guard::refusal::{AttemptResult, AttemptStep, RefusalKind};
use refusal_guard::{GuardBody, Outcome, RefusalGuardLayer};
use serde_json::{json, Value};
use support::events::*;
use support::mock_upstream::{frames, MockUpstream};
use support::proxy::{bind_proxy, post_messages};
use support::*;
use tower::{Layer, Service, ServiceExt};

/// A recorded stream (the Go SDK's fallback test data): thinking, the text
/// "Hi", then a refusal with the prefill claim and `credit-token-a`.
const RECORDED: &str = "anthropic/anthropic-sdk-go/refusal.sse";

fn layer() -> RefusalGuardLayer {
    RefusalGuardLayer::new()
        .fallback_chains(chains())
        .continue_partial(true)
}

/// A refusal `message_delta` with these fallback-credit details.
fn refusal_with(details: Value) -> Value {
    let mut stop = json!({"type":"refusal","category":"cyber","explanation":null});
    for (key, value) in details.as_object().unwrap() {
        stop[key] = value.clone();
    }
    json!({"type":"message_delta","delta":{"stop_reason":"refusal","stop_sequence":null,"stop_details":stop},"usage":{"output_tokens":12}})
}

fn claim() -> Value {
    json!({"fallback_credit_token":"tok-partial","fallback_has_prefill_claim":true})
}

/// Text, then a refusal carrying `details`.
fn text_then_refusal(details: Value) -> Bytes {
    anthropic_stream(&[
        message_start("claude-opus-4-7"),
        block_start(0, json!({"type":"text","text":""})),
        text_delta(0, "Step one: list the listening "),
        text_delta(0, "services. "),
        block_stop(0),
        refusal_with(details),
        message_stop(),
    ])
}

/// The fallback's answer: one text block.
fn continuation() -> Bytes {
    anthropic_stream(&text_answer(
        "claude-sonnet-4-5",
        "Step two: close what you do not use.",
    ))
}

/// What the client should read: the original up to its refusal, then the
/// continuation without its `message_start`, its blocks from `offset` on.
fn spliced(original: &Bytes, offset: u64) -> Bytes {
    let text = String::from_utf8_lossy(original);
    let cut = text.find("event: message_delta").unwrap();
    let mut out = text[..cut].as_bytes().to_vec();
    out.extend_from_slice(&anthropic_stream(&[
        block_start(offset, json!({"type":"text","text":""})),
        text_delta(offset, "Step two: close what you do not use."),
        block_stop(offset),
        stop("end_turn"),
        message_stop(),
    ]));
    Bytes::from(out)
}

fn one_byte_chunks(bytes: &Bytes) -> Vec<Bytes> {
    (0..bytes.len()).map(|i| bytes.slice(i..i + 1)).collect()
}

#[tokio::test]
async fn text_then_a_claimed_refusal_continues_in_the_same_message() {
    let original = text_then_refusal(claim());
    for chunks in [vec![original.clone()], one_byte_chunks(&original)] {
        let replies = vec![Reply::Sse(chunks), Reply::sse(&continuation())];
        let done = exchange(
            layer(),
            replies,
            messages("claude-opus-4-7", true, "Harden my server"),
        )
        .await;
        assert_eq!(done.body, spliced(&original, 1));
        assert_eq!(done.parts.status, 200);
        assert!(done.parts.headers.get("content-length").is_none());

        let seen = done.upstream.seen();
        assert_eq!(seen.len(), 2);
        let (first, second) = (seen[0].json(), seen[1].json());
        assert_eq!(second["model"], "claude-sonnet-4-5");
        assert_eq!(
            second["fallback_credit_token"],
            json!({"token":"tok-partial","mode":"best_effort"})
        );
        // The same body, plus one assistant turn holding the text sent so
        // far (its trailing whitespace trimmed, as the API requires).
        assert_eq!(second["messages"][0], first["messages"][0]);
        assert_eq!(second["messages"].as_array().unwrap().len(), 2);
        assert_eq!(
            seen[1].last_message(),
            json!({"role":"assistant","content":[{"type":"text","text":"Step one: list the listening services."}]})
        );
        assert_eq!(second["system"], first["system"]);
        let beta = seen[1]
            .headers
            .get("anthropic-beta")
            .unwrap()
            .to_str()
            .unwrap();
        assert!(beta.contains("fallback-credit-2026-07-01"), "{beta}");

        let records = done.sink.records();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].outcome, Outcome::Fallback);
        assert_eq!(records[0].kind, RefusalKind::Partial);
        assert_eq!(records[0].category.as_deref(), Some("cyber"));
        let attempts = &records[0].attempts;
        assert_eq!(attempts.len(), 2);
        assert_eq!(attempts[0].result, AttemptResult::Refused);
        assert_eq!(attempts[1].step, AttemptStep::Fallback);
        assert_eq!(attempts[1].model.as_deref(), Some("claude-sonnet-4-5"));
        assert_eq!(attempts[1].result, AttemptResult::Served);
    }
}

/// A continuation to a model that rejects prefill keeps its appended
/// assistant turn: the credit token it presents authorises that one
/// prefill (the Anthropic contract's A15 takes it only so).
#[tokio::test]
async fn a_continuation_to_a_model_that_rejects_prefill_keeps_its_turn_beside_the_token() {
    let layer = RefusalGuardLayer::new()
        .fallback_chains(FallbackChains::new().chain("claude-opus-4-7", ["claude-opus-4-8"]))
        .continue_partial(true);
    let original = text_then_refusal(claim());
    let replies = vec![Reply::sse(&original), Reply::sse(&continuation())];
    let request = messages("claude-opus-4-7", true, "Harden my server");
    let done = exchange(layer, replies, request).await;
    assert_eq!(done.body, spliced(&original, 1));
    let fallback = &done.upstream.seen()[1];
    assert_eq!(fallback.json()["model"], "claude-opus-4-8");
    assert_eq!(fallback.last_message()["role"], "assistant");
    assert_eq!(
        fallback.json()["fallback_credit_token"]["token"],
        "tok-partial"
    );
}

#[tokio::test]
async fn a_recorded_refusal_after_thinking_and_text_continues_after_both_blocks() {
    let original = fixture(RECORDED);
    let replies = vec![Reply::sse(&original), Reply::sse(&continuation())];
    let done = exchange(layer(), replies, messages("claude-opus-4-7", true, "hi")).await;
    // Thinking at 0 and text at 1 went out: the continuation starts at 2.
    assert_eq!(done.body, spliced(&original, 2));
    let seen = done.upstream.seen();
    assert_eq!(
        seen[1].last_message(),
        json!({"role":"assistant","content":[{"type":"text","text":"Hi"}]}),
        "thinking is not carried"
    );
    assert_eq!(
        seen[1].json()["fallback_credit_token"]["token"],
        "credit-token-a"
    );
}

/// The fallback's answers that must leave the client with the original.
fn failed_continuations() -> Vec<(&'static str, Reply, AttemptResult)> {
    let error = Bytes::from_static(
        br#"{"type":"error","error":{"type":"invalid_request_error","message":"prefill rejected"}}"#,
    );
    vec![
        (
            "a 400 to the prefill",
            Reply::Status(400, error),
            AttemptResult::HttpError,
        ),
        (
            "a refusal again",
            Reply::sse(&anthropic_stream(&think_then_refuse(
                "claude-sonnet-4-5",
                "cyber",
            ))),
            AttemptResult::Refused,
        ),
        (
            "a failing inner service",
            Reply::Fail,
            AttemptResult::TransportError,
        ),
        (
            "a stream without output",
            Reply::sse(&anthropic_stream(&[
                message_start("claude-sonnet-4-5"),
                stop("end_turn"),
                message_stop(),
            ])),
            AttemptResult::NoOutput,
        ),
    ]
}

#[tokio::test]
async fn a_failed_continuation_leaves_the_original_partial_refusal_byte_exact() {
    let original = text_then_refusal(claim());
    for (what, reply, result) in failed_continuations() {
        let replies = vec![Reply::Sse(vec![original.clone()]), reply];
        let done = exchange(layer(), replies, messages("claude-opus-4-7", true, "x")).await;
        assert_eq!(done.body, original, "{what}");
        let recovery = done.parts.headers.get("refusal-guard-recovery");
        assert!(recovery.is_none(), "{what}");
        assert_eq!(done.upstream.seen().len(), 2, "{what}");
        let records = done.sink.records();
        assert_eq!(records.len(), 1, "{what}");
        assert_eq!(records[0].outcome, Outcome::Partial, "{what}");
        assert_eq!(records[0].kind, RefusalKind::Partial, "{what}");
        let attempts = &records[0].attempts;
        assert_eq!(attempts.len(), 2, "{what}");
        assert_eq!(attempts[1].step, AttemptStep::Fallback, "{what}");
        assert_eq!(attempts[1].result, result, "{what}");
    }
}

/// One request, the original served as sent, recorded as partial.
async fn assert_untouched(layer: RefusalGuardLayer, original: Bytes, what: &str) {
    let replies = vec![
        Reply::Sse(vec![original.clone()]),
        Reply::sse(&continuation()),
    ];
    let done = exchange(layer, replies, messages("claude-opus-4-7", true, "x")).await;
    assert_eq!(done.body, original, "{what}");
    assert_eq!(done.upstream.seen().len(), 1, "{what}: no second request");
    let records = done.sink.records();
    assert_eq!(records.len(), 1, "{what}");
    assert_eq!(records[0].outcome, Outcome::Partial, "{what}");
    assert_eq!(records[0].attempts.len(), 1, "{what}");
}

#[tokio::test]
async fn an_open_tool_call_leaves_the_refusal_untouched() {
    let open_tool = anthropic_stream(&[
        message_start("claude-opus-4-7"),
        block_start(0, json!({"type":"text","text":""})),
        text_delta(0, "Let me check the config."),
        block_stop(0),
        block_start(
            1,
            json!({"type":"tool_use","id":"toolu_1","name":"read_file","input":{}}),
        ),
        json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"path\":"}}),
        refusal_with(claim()),
        message_stop(),
    ]);
    assert_untouched(layer(), open_tool, "an open tool_use").await;
    // A finished server tool call (recorded: web search, its result, text).
    let recorded = fixture("anthropic/anthropic-sdk-python/stream-a-toolrefusal.sse");
    assert_untouched(layer(), recorded, "a finished server tool call").await;
}

#[tokio::test]
async fn without_the_claim_a_token_the_option_or_a_chain_nothing_is_continued() {
    let no_claim = json!({"fallback_credit_token":"tok","fallback_has_prefill_claim":false});
    let claim_only = json!({"fallback_has_prefill_claim":true});
    let off = RefusalGuardLayer::new().fallback_chains(chains());
    let no_chain = RefusalGuardLayer::new().continue_partial(true);
    let no_credit = layer().fallback_credit(false);
    assert_untouched(layer(), text_then_refusal(no_claim), "claim false").await;
    assert_untouched(layer(), text_then_refusal(claim_only), "no token").await;
    assert_untouched(layer(), text_then_refusal(json!({})), "no details").await;
    assert_untouched(off, text_then_refusal(claim()), "option off").await;
    assert_untouched(no_chain, text_then_refusal(claim()), "no chain").await;
    assert_untouched(no_credit, text_then_refusal(claim()), "credit off").await;
}

#[tokio::test]
async fn thinking_alone_before_the_refusal_is_an_empty_refusal_not_a_continuation() {
    // No text came first: the ordinary ladder recovers it (a fallback
    // without any prefill).
    let original = anthropic_stream(&think_then_refuse("claude-opus-4-7", "cyber"));
    let replies = vec![Reply::sse(&original), Reply::sse(&continuation())];
    let done = exchange(layer(), replies, messages("claude-opus-4-7", true, "x")).await;
    assert_eq!(done.body, continuation());
    let seen = done.upstream.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].last_message()["role"], "user");
    assert_eq!(done.sink.records()[0].kind, RefusalKind::Empty);
}

#[tokio::test]
async fn a_response_without_a_refusal_passes_byte_exact() {
    let answer = anthropic_stream(&text_answer("claude-opus-4-7", "All good."));
    let done = exchange(
        layer(),
        vec![Reply::Sse(one_byte_chunks(&answer))],
        messages("claude-opus-4-7", true, "x"),
    )
    .await;
    assert_eq!(done.body, answer);
    assert_eq!(done.upstream.seen().len(), 1);
    assert!(done.sink.records().is_empty());
}

// Through the proxy, against the scripted mock upstream on loopback.

const PARTIAL: &str = "e2e/partial_refusal_claim.sse";
const CONTINUATION: &str = "e2e/continuation_text.sse";

/// The mock, and a continuing proxy in front of it (stopped with the test's
/// runtime).
async fn proxy_over_mock(layer: RefusalGuardLayer) -> (MockUpstream, String) {
    let mock = MockUpstream::start().await.unwrap();
    let (proxy, listener, url) = bind_proxy(&mock.url(), &layer).await;
    tokio::spawn(proxy.serve(listener, std::future::pending::<()>()));
    (mock, url)
}

/// `original` up to its refusal, then `continuation` without its
/// `message_start`, its block indices moved up by `offset`.
fn continued(original: &Bytes, continuation: &Bytes, offset: u64) -> Bytes {
    let text = String::from_utf8_lossy(original);
    let mut out = text[..text.find("event: message_delta").unwrap()]
        .as_bytes()
        .to_vec();
    for frame in frames(continuation) {
        let data = String::from_utf8_lossy(&frame);
        let json = data.lines().find_map(|l| l.strip_prefix("data: "));
        let mut event: Value = serde_json::from_str(json.unwrap()).unwrap();
        match event["type"].as_str().unwrap() {
            "message_start" => {}
            kind if kind.starts_with("content_block_") => {
                event["index"] = json!(event["index"].as_u64().unwrap() + offset);
                out.extend_from_slice(&anthropic_stream(&[event]));
            }
            _ => out.extend_from_slice(&frame),
        }
    }
    Bytes::from(out)
}

fn request_body() -> Value {
    json!({
        "model": "claude-opus-4-7",
        "max_tokens": 1024,
        "stream": true,
        "messages": [{"role": "user", "content": "Harden my server"}],
    })
}

#[tokio::test]
async fn the_proxy_splices_the_continuation_into_the_message() {
    let (mock, url) = proxy_over_mock(layer()).await;
    let script = format!("{PARTIAL},{CONTINUATION}");
    let response = post_messages(&url, &script, "continued", &request_body())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.bytes().await.unwrap();
    assert_eq!(
        body,
        continued(&fixture(PARTIAL), &fixture(CONTINUATION), 1)
    );

    let seen = mock.seen_for("continued");
    assert_eq!(seen.len(), 2);
    let beta = seen[0].header("anthropic-beta").unwrap_or_default();
    assert!(
        beta.contains("fallback-credit-2026-07-01"),
        "asked for: {beta}"
    );
    let second = seen[1].json();
    assert_eq!(second["model"], "claude-sonnet-4-5");
    assert_eq!(
        second["messages"],
        json!([
            {"role": "user", "content": "Harden my server"},
            {"role": "assistant", "content": [{"type": "text", "text": "Start by listing the services that listen on the network."}]},
        ])
    );
    assert_eq!(
        second["fallback_credit_token"],
        json!({"token": "tok_e2e_partial", "mode": "best_effort"})
    );
    let beta = seen[1].header("anthropic-beta").unwrap_or_default();
    assert!(
        beta.contains("fallback-credit-2026-07-01"),
        "presented with: {beta}"
    );
}

#[tokio::test]
async fn the_proxy_serves_the_original_when_the_prefill_is_rejected() {
    let (mock, url) = proxy_over_mock(layer()).await;
    let script = format!("{PARTIAL},status=400");
    let response = post_messages(&url, &script, "rejected", &request_body())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.bytes().await.unwrap(), fixture(PARTIAL));
    assert_eq!(mock.seen_for("rejected").len(), 2);
}

/// A guard over an inner service that answers the original with `original`
/// and the continuation with a head whose body waits on a gate that never
/// opens; the gate's sender tells when that body is dropped. The last is
/// the inner service's check, which the test holds.
fn stalling_continuation(
    layer: RefusalGuardLayer,
    original: Bytes,
) -> (
    impl MockGuard,
    tokio::sync::oneshot::Sender<()>,
    Arc<AtomicUsize>,
    Answering<impl MockInner>,
) {
    let (gate, stalled) = tokio::sync::oneshot::channel::<()>();
    let stalled = Arc::new(Mutex::new(Some(stalled)));
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let inner = answering(move |_request| {
        let first = calls.fetch_add(1, Ordering::SeqCst) == 0;
        let stalled = if first {
            None
        } else {
            stalled.lock().unwrap().take()
        };
        let original = original.clone();
        async move {
            match stalled {
                Some(gate) => sse_response(Drip::steps(vec![Step::Gate(gate)], Duration::ZERO)),
                None => sse_response(Chunked::chunks(vec![original])),
            }
        }
    });
    (layer.layer(inner.service()), gate, counted, inner)
}

/// What [`stalling_continuation`] builds.
trait MockGuard:
    Service<Request<Full<Bytes>>, Response = Response<GuardBody<Chunked>>, Error = tower::BoxError>
{
}
impl<S> MockGuard for S where
    S: Service<
        Request<Full<Bytes>>,
        Response = Response<GuardBody<Chunked>>,
        Error = tower::BoxError,
    >
{
}

#[tokio::test]
async fn a_continuation_that_never_answers_ends_at_the_deadline_with_the_original() {
    let original = text_then_refusal(claim());
    let layer = layer().recovery_deadline(Duration::from_millis(300));
    let (mut guard, mut gate, _, _upstream) = stalling_continuation(layer, original.clone());
    let request = messages("claude-opus-4-7", true, "x");
    let (parts, body) = tokio::time::timeout(Duration::from_secs(10), call(&mut guard, request))
        .await
        .expect("bounded by the recovery deadline");
    assert_eq!(parts.status, 200);
    assert_eq!(body, original);
    // The stalled continuation was given up, its body dropped.
    tokio::time::timeout(Duration::from_secs(5), gate.closed())
        .await
        .expect("the stalled continuation is dropped");
}

#[tokio::test]
async fn a_client_that_leaves_during_the_continuation_stops_it() {
    let original = text_then_refusal(claim());
    let (mut guard, mut gate, calls, _upstream) = stalling_continuation(layer(), original.clone());
    let request = messages("claude-opus-4-7", true, "x");
    let response = guard.ready().await.unwrap().call(request).await.unwrap();
    let mut body = response.into_body();
    // Read what the client gets before the refusal: all of it up to the
    // held `message_delta`.
    let before = String::from_utf8_lossy(&original)
        .find("event: message_delta")
        .unwrap();
    let mut read = 0;
    while read < before {
        let frame = body.frame().await.unwrap().unwrap();
        read += frame.data_ref().map_or(0, |d| d.len());
    }
    assert_eq!(read, before);
    // Leave once the continuation is on its way.
    for _ in 0..500 {
        if calls.load(Ordering::SeqCst) == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2, "the continuation was sent");
    drop(body);
    tokio::time::timeout(Duration::from_secs(5), gate.closed())
        .await
        .expect("the continuation's request is dropped with the client");
}

/// A whole JSON message: these content blocks, then a refusal carrying the
/// claim and a token.
fn json_partial(content: Value) -> Bytes {
    let message = json!({
        "id": "msg_json", "type": "message", "role": "assistant", "model": "claude-opus-4-7",
        "content": content,
        "stop_reason": "refusal", "stop_sequence": null,
        "stop_details": {"type": "refusal", "category": "cyber", "explanation": null,
            "fallback_credit_token": "tok-json", "fallback_has_prefill_claim": true},
        "usage": {"input_tokens": 20, "output_tokens": 9},
    });
    Bytes::from(serde_json::to_vec(&message).unwrap())
}

fn json_answer() -> Bytes {
    let message = json!({
        "id": "msg_next", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "Step two: close what you do not use."}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 30, "output_tokens": 11},
    });
    Bytes::from(serde_json::to_vec(&message).unwrap())
}

#[tokio::test]
async fn a_json_message_refused_after_text_is_continued_as_one_message() {
    let original = json_partial(json!([{"type": "text", "text": "Step one: list services. "}]));
    let replies = vec![Reply::Json(original), Reply::Json(json_answer())];
    let done = exchange(layer(), replies, messages("claude-opus-4-7", false, "x")).await;
    let body: Value = serde_json::from_slice(&done.body).unwrap();
    assert_eq!(
        body["content"],
        json!([
            {"type": "text", "text": "Step one: list services. "},
            {"type": "text", "text": "Step two: close what you do not use."},
        ])
    );
    assert_eq!(body["id"], "msg_json");
    assert_eq!(body["stop_reason"], "end_turn");
    assert!(body.get("stop_details").is_none());
    assert_eq!(
        body["usage"],
        json!({"input_tokens": 30, "output_tokens": 11})
    );
    let length = done.parts.headers["content-length"].to_str().unwrap();
    assert_eq!(length, done.body.len().to_string());
    let recovery = done.parts.headers["refusal-guard-recovery"]
        .to_str()
        .unwrap();
    assert!(recovery.starts_with("fallback;"), "{recovery}");
    assert!(
        recovery.contains("served-by=claude-sonnet-4-5"),
        "{recovery}"
    );

    let seen = done.upstream.seen();
    assert_eq!(seen.len(), 2);
    let second = seen[1].json();
    assert_eq!(second["model"], "claude-sonnet-4-5");
    assert_eq!(second["stream"], false);
    assert_eq!(
        seen[1].last_message(),
        json!({"role": "assistant", "content": [{"type": "text", "text": "Step one: list services."}]})
    );
    assert_eq!(
        second["fallback_credit_token"],
        json!({"token": "tok-json", "mode": "best_effort"})
    );
    let records = done.sink.records();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].outcome, Outcome::Fallback);
    assert_eq!(records[0].kind, RefusalKind::Partial);
    assert_eq!(records[0].attempts.len(), 2);
    assert_eq!(done.refusal().map(|r| r.outcome), Some(Outcome::Fallback));
}

#[tokio::test]
async fn a_json_continuation_that_fails_leaves_the_original_byte_exact() {
    let original = json_partial(json!([{"type": "text", "text": "Step one."}]));
    for (what, reply, result) in failed_continuations() {
        let replies = vec![Reply::Json(original.clone()), reply];
        let done = exchange(layer(), replies, messages("claude-opus-4-7", false, "x")).await;
        assert_eq!(done.body, original, "{what}");
        let recovery = done.parts.headers.get("refusal-guard-recovery");
        assert!(recovery.is_none(), "{what}");
        assert_eq!(done.upstream.seen().len(), 2, "{what}");
        let records = done.sink.records();
        assert_eq!(records[0].outcome, Outcome::Partial, "{what}");
        assert_eq!(records[0].attempts[1].result, result, "{what}");
    }
}

#[tokio::test]
async fn a_json_message_with_a_tool_call_is_untouched() {
    let original = json_partial(json!([
        {"type": "text", "text": "Reading it."},
        {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "/etc/ssh"}},
    ]));
    let replies = vec![Reply::Json(original.clone()), Reply::Json(json_answer())];
    let done = exchange(layer(), replies, messages("claude-opus-4-7", false, "x")).await;
    assert_eq!(done.body, original);
    assert_eq!(done.upstream.seen().len(), 1);
    assert_eq!(done.sink.records()[0].outcome, Outcome::Partial);
}

#[tokio::test]
async fn other_providers_partial_refusals_stay_untouched() {
    // OpenAI's filter cut after text: no prefill claim, no credit token.
    let cut = Bytes::from_static(
        b"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Step one: list services.\"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"content_filter\"}]}\n\n\
data: [DONE]\n\n",
    );
    let body =
        json!({"model": "gpt-4o", "stream": true, "messages": [{"role": "user", "content": "x"}]});
    let replies = vec![Reply::Sse(vec![cut.clone()]), Reply::Sse(vec![cut.clone()])];
    let done = exchange(layer(), replies, post("/v1/chat/completions", &body)).await;
    assert_eq!(done.body, cut);
    assert_eq!(done.upstream.seen().len(), 1);
    assert_eq!(done.sink.records()[0].outcome, Outcome::Partial);
}
