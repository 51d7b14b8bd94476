//! The recovery ladder (issue 3): retarget, fallback chains, budget, sticky
//! routing, handoff marker, fallback credit and environment configuration.

use std::time::Duration;

use bytes::Bytes;
use refusal_guard::env::{EnvConfig, LogSetting};
use refusal_guard::recovery::{AllowedFallbacks, FallbackChains, RescueModel};
use refusal_guard::refusal::{AttemptResult, AttemptStep, DeadReason, StickyRoute};
use refusal_guard::telemetry::MemorySink;
use refusal_guard::{Outcome, RefusalGuardLayer};
use serde_json::{json, Value};
use support::events::*;
use support::*;
use tower::Layer;

const OPUS: &str = "claude-opus-4-7";
const SONNET: &str = "claude-sonnet-4-5";
const HAIKU: &str = "claude-haiku-4-5";

fn refusal_stream() -> Bytes {
    anthropic_stream(&think_then_refuse(OPUS, "cyber"))
}

fn refusal_with_token(token: &str) -> Bytes {
    anthropic_stream(&[
        message_start(OPUS),
        json!({"type":"message_delta","delta":{"stop_reason":"refusal","stop_details":{"type":"refusal","category":"cyber","explanation":null,"fallback_credit_token":token,"fallback_has_prefill_claim":false}},"usage":{"output_tokens":0}}),
        message_stop(),
    ])
}

fn answer(model: &str) -> Bytes {
    anthropic_stream(&text_answer(model, &format!("answer from {model}")))
}

// ---- retarget -------------------------------------------------------------

fn with_fallbacks(models: &[&str]) -> Value {
    let mut request = messages_request(OPUS, true, "x");
    request["fallbacks"] = json!(models
        .iter()
        .map(|m| json!({"model": m}))
        .collect::<Vec<_>>());
    request
}

#[tokio::test]
async fn retarget_replaces_an_existing_fallbacks_list() {
    let layer =
        RefusalGuardLayer::new().retarget_fallbacks([OPUS, SONNET, HAIKU, "claude-a", "claude-b"]);
    let replies = vec![Reply::sse(&answer(OPUS))];
    let request = carrying(with_fallbacks(&["old-model"])["fallbacks"].clone(), true);
    let done = exchange(layer, replies, request).await;
    let sent = done.upstream.seen()[0].json();
    assert_eq!(
        sent["fallbacks"],
        json!([{"model": SONNET}, {"model": HAIKU}, {"model": "claude-a"}]),
        "own model dropped, capped at three"
    );
    assert_eq!(
        done.upstream.seen()[0].headers["anthropic-beta"],
        "server-side-fallback-2026-07-01",
        "the client's beta, unchanged"
    );
}

#[tokio::test]
async fn retarget_keeps_the_clients_options_for_a_model_it_listed() {
    let fallbacks = json!([{"model": SONNET, "max_tokens": 99}, {"model": "other"}]);
    let layer = RefusalGuardLayer::new().retarget_fallbacks([SONNET]);
    let replies = vec![Reply::sse(&answer(OPUS))];
    let request = carrying(fallbacks, true);
    let done = exchange(layer, replies, request).await;
    assert_eq!(
        done.upstream.seen()[0].json()["fallbacks"],
        json!([{"model": SONNET, "max_tokens": 99}])
    );
}

#[tokio::test]
async fn retarget_leaves_a_request_without_fallbacks_byte_identical() {
    let request = messages_request(OPUS, true, "x");
    let layer = RefusalGuardLayer::new().retarget_fallbacks([SONNET]);
    let replies = vec![Reply::sse(&answer(OPUS))];
    let done = exchange(layer, replies, post("/v1/messages", &request)).await;
    assert_eq!(
        done.upstream.seen()[0].body,
        Bytes::from(serde_json::to_vec(&request).unwrap())
    );
}

#[tokio::test]
async fn inject_mode_adds_the_list_and_merges_the_beta_header() {
    let mut request = messages(OPUS, true, "x");
    request.headers_mut().insert(
        "anthropic-beta",
        "prompt-caching-2024-07-31".parse().unwrap(),
    );
    let layer = RefusalGuardLayer::new()
        .retarget_fallbacks([SONNET])
        .inject_server_fallbacks(true);
    let done = exchange(layer, vec![Reply::sse(&answer(OPUS))], request).await;
    let seen = &done.upstream.seen()[0];
    assert_eq!(seen.json()["fallbacks"], json!([{"model": SONNET}]));
    assert_eq!(
        seen.headers["anthropic-beta"],
        "prompt-caching-2024-07-31,server-side-fallback-2026-07-01"
    );
    // The mock checks Content-Length against the body for every request.
    assert_eq!(
        seen.headers["content-length"],
        seen.body.len().to_string().as_str()
    );
}

// ---- client-side chains ---------------------------------------------------

/// Opus refuses, the chain's first fallback (Sonnet) answers, and that answer is
/// what the client gets.
async fn sonnet_answers_after_a_refusal() -> Exchange {
    let layer = RefusalGuardLayer::new().fallback_chains(chains());
    let replies = vec![Reply::sse(&refusal_stream()), Reply::sse(&answer(SONNET))];
    let done = exchange(layer, replies, messages(OPUS, true, "x")).await;
    assert_eq!(done.body, answer(SONNET));
    done
}

#[tokio::test]
async fn the_first_fallback_that_answers_is_served() {
    let done = sonnet_answers_after_a_refusal().await;
    let seen = done.upstream.seen();
    assert_eq!(seen[1].json()["model"], SONNET);
    assert_eq!(
        seen[1].json()["messages"],
        seen[0].json()["messages"],
        "same request, no note"
    );
    let refusal = done.refusal().unwrap();
    assert_eq!(refusal.outcome, Outcome::Fallback);
    assert_eq!(refusal.served_model.as_deref(), Some(SONNET));
    assert_eq!(refusal.model.as_deref(), Some(OPUS));
    assert_eq!(
        done.sink.records()[0].attempts[1].step,
        AttemptStep::Fallback
    );
}

#[tokio::test]
async fn every_fallback_refusing_leads_to_the_rescue_then_dead_with_every_attempt_listed() {
    let original = refusal_stream();
    let upstream = Upstream::new(vec![
        Reply::sse(&original),
        Reply::sse(&refusal_stream()),
        Reply::sse(&refusal_stream()),
        Reply::sse(&refusal_stream()),
    ]);
    let sink = MemorySink::new();
    let mut guard = RefusalGuardLayer::new()
        .fallback_chains(chains())
        .telemetry(sink.clone())
        .layer(upstream.service());
    let (_, body) = call(&mut guard, messages(OPUS, true, "x")).await;
    assert_eq!(body, original);
    let record = &sink.records()[0];
    assert_eq!(record.outcome, Outcome::Dead);
    assert_eq!(record.reason, Some(DeadReason::StillRefused));
    let attempts: Vec<_> = record
        .attempts
        .iter()
        .map(|a| (a.step, a.model.clone().unwrap(), a.result))
        .collect();
    assert_eq!(
        attempts,
        [
            (
                AttemptStep::Original,
                OPUS.to_owned(),
                AttemptResult::Refused
            ),
            (
                AttemptStep::Fallback,
                SONNET.to_owned(),
                AttemptResult::Refused
            ),
            (
                AttemptStep::Fallback,
                HAIKU.to_owned(),
                AttemptResult::Refused
            ),
            (AttemptStep::Rescue, OPUS.to_owned(), AttemptResult::Refused),
        ]
    );
    // The rescue goes to the original model by default, with the note.
    let rescue = upstream.seen()[3].json();
    assert_eq!(rescue["model"], OPUS);
    assert!(rescue.to_string().contains("[refusal-guard]"));
}

#[tokio::test]
async fn the_rescue_can_ask_the_last_fallback() {
    let layer = RefusalGuardLayer::new()
        .fallback_chains(chains())
        .rescue_model(RescueModel::LastFallback);
    let replies = vec![
        Reply::sse(&refusal_stream()),
        Reply::sse(&refusal_stream()),
        Reply::sse(&refusal_stream()),
        Reply::sse(&answer(HAIKU)),
    ];
    let done = exchange(layer, replies, messages(OPUS, true, "x")).await;
    assert_eq!(done.body, answer(HAIKU));
    assert_eq!(done.upstream.seen()[3].json()["model"], HAIKU);
    assert_eq!(done.sink.records()[0].outcome, Outcome::Rescued);
}

#[tokio::test]
async fn a_failing_fallback_moves_on_to_the_next_step() {
    let layer = RefusalGuardLayer::new().fallback_chains(chains());
    let replies = vec![
        Reply::sse(&refusal_stream()),
        Reply::Status(
            429,
            Bytes::from_static(
                br#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#,
            ),
        ),
        Reply::Status(
            500,
            Bytes::from_static(
                br#"{"type":"error","error":{"type":"api_error","message":"boom"}}"#,
            ),
        ),
        Reply::sse(&answer(OPUS)),
    ];
    let done = exchange(layer, replies, messages(OPUS, true, "x")).await;
    assert_eq!(done.body, answer(OPUS));
    let record = &done.sink.records()[0];
    assert_eq!(record.outcome, Outcome::Rescued);
    let statuses: Vec<_> = record
        .attempts
        .iter()
        .map(|a| (a.result, a.status))
        .collect();
    assert_eq!(
        statuses,
        [
            (AttemptResult::Refused, Some(200)),
            (AttemptResult::HttpError, Some(429)),
            (AttemptResult::HttpError, Some(500)),
            (AttemptResult::Served, Some(200)),
        ]
    );
}

#[tokio::test]
async fn nothing_succeeding_delivers_the_original() {
    let original = refusal_stream();
    let layer = RefusalGuardLayer::new().fallback_chains(chains());
    let replies = vec![Reply::sse(&original), Reply::Fail, Reply::Fail, Reply::Fail];
    let done = exchange(layer, replies, messages(OPUS, true, "x")).await;
    assert_eq!(done.body, original);
    assert_eq!(done.parts.status, 200);
    assert_eq!(
        done.sink.records()[0].reason,
        Some(DeadReason::UpstreamError)
    );
}

#[tokio::test]
async fn the_attempt_budget_stops_the_ladder() {
    let original = refusal_stream();
    let layer = RefusalGuardLayer::new()
        .fallback_chains(chains())
        .max_attempts(2);
    let replies = vec![Reply::sse(&original), Reply::sse(&refusal_stream())];
    let done = exchange(layer, replies, messages(OPUS, true, "x")).await;
    assert_eq!(done.body, original);
    assert_eq!(done.upstream.seen().len(), 2);
    let record = &done.sink.records()[0];
    assert_eq!(record.reason, Some(DeadReason::BudgetExhausted));
    assert_eq!(record.attempts.len(), 2);
}

#[tokio::test]
async fn the_deadline_abandons_a_slow_attempt() {
    let original = refusal_stream();
    let slow = answering({
        let original = original.clone();
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        move |_req: http::Request<http_body_util::Full<Bytes>>| {
            let original = original.clone();
            let n = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                if n > 0 {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
                sse_response(Chunked::chunks(vec![original]))
            }
        }
    });
    let sink = MemorySink::new();
    let mut guard = RefusalGuardLayer::new()
        .recovery_deadline(Duration::from_millis(100))
        .telemetry(sink.clone())
        .layer(slow.service());
    let (_, body) = call(&mut guard, messages(OPUS, true, "x")).await;
    assert_eq!(body, original);
    assert_eq!(sink.records()[0].reason, Some(DeadReason::BudgetExhausted));
}

// ---- sticky ---------------------------------------------------------------

// On a paused clock: the TTL is kept on tokio's clock, so the test steps
// past it without waiting, and no step inside it can run late.
#[tokio::test(start_paused = true)]
async fn sticky_routing_applies_within_its_ttl_and_stops_after() {
    let upstream = Upstream::new(vec![
        Reply::sse(&refusal_stream()),
        Reply::sse(&answer(SONNET)),
    ]);
    let sink = MemorySink::new();
    let mut guard = RefusalGuardLayer::new()
        .fallback_chains(chains())
        .sticky_fallback(Duration::from_millis(400))
        .telemetry(sink.clone())
        .layer(upstream.service());
    let request = || messages(OPUS, true, "same conversation");
    call(&mut guard, request()).await;
    // Within the TTL: straight to the fallback, and the response says so.
    upstream.push(Reply::sse(&answer(SONNET)));
    let (parts, _) = call(&mut guard, request()).await;
    assert_eq!(upstream.seen()[2].json()["model"], SONNET);
    assert_eq!(
        parts.extensions.get::<StickyRoute>(),
        Some(&StickyRoute {
            requested: Some(OPUS.to_owned()),
            routed_to: SONNET.to_owned()
        })
    );
    // Another conversation is not routed.
    upstream.push(Reply::sse(&answer(OPUS)));
    call(&mut guard, messages(OPUS, true, "other")).await;
    assert_eq!(upstream.seen()[3].json()["model"], OPUS);
    // Just before the TTL ends: still routed.
    tokio::time::advance(Duration::from_millis(390)).await;
    upstream.push(Reply::sse(&answer(SONNET)));
    call(&mut guard, request()).await;
    assert_eq!(upstream.seen()[4].json()["model"], SONNET);
    // After the TTL: back to the model asked for.
    tokio::time::advance(Duration::from_millis(20)).await;
    upstream.push(Reply::sse(&answer(OPUS)));
    let (parts, _) = call(&mut guard, request()).await;
    assert_eq!(upstream.seen()[5].json()["model"], OPUS);
    assert!(parts.extensions.get::<StickyRoute>().is_none());
}

// ---- handoff marker -------------------------------------------------------

#[tokio::test]
async fn the_handoff_marker_keeps_the_stream_one_valid_message() {
    let served = fixture("anthropic/anthropic-sdk-python/tool_use_response.txt");
    let layer = RefusalGuardLayer::new()
        .fallback_chains(chains())
        .handoff_marker(true);
    let replies = vec![
        Reply::sse(&refusal_stream()),
        Reply::Sse(split_at(&served, &[7, 100, 101, 555, 900])),
    ];
    let done = exchange(layer, replies, messages(OPUS, true, "x")).await;
    let events = stream_events(&done.body);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "message_start").count(), 1);
    assert_eq!(kinds.iter().filter(|k| **k == "message_delta").count(), 1);
    assert_eq!(kinds.iter().filter(|k| **k == "message_stop").count(), 1);
    assert_eq!(kinds[0], "message_start");
    assert_eq!(events[1]["content_block"]["type"], "fallback");
    assert_eq!(events[1]["content_block"]["from"]["model"], OPUS);
    assert_eq!(events[1]["content_block"]["to"]["model"], SONNET);
    assert_eq!(events[1]["content_block"]["trigger"]["category"], "cyber");
    // Block indices start at 0 and are contiguous, each started and stopped.
    let starts: Vec<u64> = events
        .iter()
        .filter(|e| e["type"] == "content_block_start")
        .map(|e| e["index"].as_u64().unwrap())
        .collect();
    let original_blocks = stream_events(&served)
        .iter()
        .filter(|e| e["type"] == "content_block_start")
        .count();
    assert_eq!(starts, (0..=original_blocks as u64).collect::<Vec<_>>());
    let stops = events
        .iter()
        .filter(|e| e["type"] == "content_block_stop")
        .count();
    assert_eq!(stops, starts.len());
}

#[tokio::test]
async fn the_handoff_marker_in_json_goes_first_in_content() {
    let refusal = fixture("anthropic/vercel-ai/anthropic-refusal.json");
    let answer = fixture("anthropic/vercel-ai/anthropic-text.json");
    let layer = RefusalGuardLayer::new()
        .fallback_chains(chains())
        .handoff_marker(true);
    let replies = vec![Reply::Json(refusal), Reply::Json(answer.clone())];
    let done = exchange(layer, replies, messages(OPUS, false, "x")).await;
    let json: Value = serde_json::from_slice(&done.body).unwrap();
    let original: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(json["content"][0]["type"], "fallback");
    assert_eq!(json["content"][1], original["content"][0]);
    assert_eq!(
        done.parts.headers["content-length"],
        done.body.len().to_string().as_str()
    );
}

#[tokio::test]
async fn without_the_marker_the_fallback_is_served_as_sent() {
    sonnet_answers_after_a_refusal().await;
}

// ---- fallback credit ------------------------------------------------------

#[tokio::test]
async fn a_chain_asks_for_credit_and_the_token_goes_to_the_next_fallback_once() {
    let upstream = Upstream::new(vec![
        Reply::sse(&refusal_with_token("tok-1")),
        Reply::sse(&refusal_stream()), // mints no token
        Reply::sse(&answer(HAIKU)),
    ]);
    let mut guard = RefusalGuardLayer::new()
        .fallback_chains(chains())
        .layer(upstream.service());
    let mut request = messages(OPUS, true, "x");
    request.headers_mut().insert(
        "anthropic-beta",
        "fallback-credit-2026-07-01,other-beta".parse().unwrap(),
    );
    let (_, body) = call(&mut guard, request).await;
    assert_eq!(body, answer(HAIKU));
    let seen = upstream.seen();
    assert_eq!(
        seen[0].headers["anthropic-beta"], "fallback-credit-2026-07-01,other-beta",
        "never duplicated"
    );
    assert_eq!(
        seen[1].json()["fallback_credit_token"],
        json!({"token": "tok-1", "mode": "best_effort"})
    );
    assert!(seen[1].headers["anthropic-beta"]
        .to_str()
        .unwrap()
        .contains("fallback-credit-2026-07-01"));
    assert!(
        seen[2].json().get("fallback_credit_token").is_none(),
        "a token is redeemed once"
    );
}

#[tokio::test]
async fn credit_is_requested_only_with_a_chain_and_can_be_turned_off() {
    for (chain, credit, expect) in [
        (true, true, true),
        (false, true, false),
        (true, false, false),
    ] {
        let upstream = Upstream::new(vec![Reply::sse(&answer(OPUS))]);
        let mut layer = RefusalGuardLayer::new().fallback_credit(credit);
        if chain {
            layer = layer.fallback_chains(chains());
        }
        let mut guard = layer.layer(upstream.service());
        call(&mut guard, messages(OPUS, true, "x")).await;
        let beta = upstream.seen()[0]
            .headers
            .get("anthropic-beta")
            .map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(
            beta.as_deref() == Some("fallback-credit-2026-07-01"),
            expect,
            "{chain} {credit}"
        );
    }
}

// ---- the providers' rules on rewritten requests ------------------------

/// A Messages request carrying `fallbacks` (a list or `"default"`), with the
/// beta both forms need.
fn carrying(fallbacks: Value, stream: bool) -> http::Request<http_body_util::Full<Bytes>> {
    let mut body = messages_request(OPUS, stream, "x");
    body["fallbacks"] = fallbacks;
    let mut request = post("/v1/messages", &body);
    request.headers_mut().insert(
        "anthropic-beta",
        "server-side-fallback-2026-07-01".parse().unwrap(),
    );
    request
}

fn json_refusal_with_token(token: &str) -> Bytes {
    Bytes::from(
        json!({"id":"msg_r","type":"message","role":"assistant","model":OPUS,"content":[],
            "stop_reason":"refusal","stop_sequence":null,
            "stop_details":{"type":"refusal","category":"cyber","explanation":null,
                "fallback_credit_token":token,"fallback_has_prefill_claim":false},
            "usage":{"input_tokens":5,"output_tokens":0}})
        .to_string(),
    )
}

fn json_answer(model: &str) -> Bytes {
    Bytes::from(
        json!({"id":"msg_a","type":"message","role":"assistant","model":model,
            "content":[{"type":"text","text":format!("answer from {model}")}],
            "stop_reason":"end_turn","stop_sequence":null,
            "usage":{"input_tokens":5,"output_tokens":3}})
        .to_string(),
    )
}

/// The real API rejects `fallbacks` next to `fallback_credit_token` (in
/// either mode), so a fallback that presents a token drops the request's
/// `fallbacks`: the client's list, its `"default"`, or the list the guard
/// injected. Streams and JSON alike. (Failed before the fix: the fallback kept
/// `fallbacks` and the upstream answered it with the provider's 400.)
#[tokio::test]
async fn a_fallback_presenting_a_credit_token_drops_every_kind_of_fallbacks() {
    for stream in [true, false] {
        let cases = [
            (
                "the client's list",
                Some(json!([{"model": "claude-other"}])),
                false,
            ),
            ("the client's default", Some(json!("default")), false),
            ("an injected list", None, true),
        ];
        for (what, fallbacks, inject) in cases {
            let (refusal, served) = if stream {
                (
                    Reply::sse(&refusal_with_token("tok-1")),
                    Reply::sse(&answer(SONNET)),
                )
            } else {
                (
                    Reply::Json(json_refusal_with_token("tok-1")),
                    Reply::Json(json_answer(SONNET)),
                )
            };
            let upstream = Upstream::new(vec![refusal, served]);
            let mut layer = RefusalGuardLayer::new().fallback_chains(chains());
            if inject {
                layer = layer
                    .retarget_fallbacks(["claude-other"])
                    .inject_server_fallbacks(true);
            }
            let mut guard = layer.layer(upstream.service());
            let request = match fallbacks {
                Some(fallbacks) => carrying(fallbacks, stream),
                None => messages(OPUS, stream, "x"),
            };
            let (parts, _) = call(&mut guard, request).await;
            assert_eq!(parts.status, 200, "{what}, stream {stream}");
            let seen = upstream.seen();
            assert_eq!(seen.len(), 2, "{what}, stream {stream}");
            assert!(
                seen[0].json().get("fallbacks").is_some(),
                "{what}: the original keeps them"
            );
            let fallback = seen[1].json();
            assert_eq!(
                fallback["fallback_credit_token"]["token"], "tok-1",
                "{what}"
            );
            assert!(
                fallback.get("fallbacks").is_none(),
                "{what}, stream {stream}: {fallback}"
            );
            assert!(upstream.take_violations().is_empty(), "{what}");
        }
    }
}

const VERTEX_OPUS: &str =
    "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-opus-4-7:streamRawPredict";

fn vertex_request() -> Value {
    json!({"anthropic_version":"vertex-2023-10-16","max_tokens":1024,"stream":true,
        "messages":[{"role":"user","content":"x"}]})
}

/// Server-side fallback is first-party only: on Claude on Vertex neither the
/// request nor a retarget step ever gets `fallbacks`, whatever the layer is
/// told. (Failed before the fix: `--retarget` with `--inject-fallbacks`
/// added the list to the Vertex request, which Vertex rejects.)
#[tokio::test]
async fn server_side_fallbacks_are_never_added_on_vertex() {
    let layer = RefusalGuardLayer::new()
        .retarget_fallbacks([SONNET])
        .inject_server_fallbacks(true);
    let body = vertex_request();
    let done = exchange(
        layer,
        vec![Reply::sse(&answer(OPUS))],
        post(VERTEX_OPUS, &body),
    )
    .await;
    assert_eq!(done.parts.status, 200);
    assert_eq!(
        done.upstream.seen()[0].body,
        Bytes::from(serde_json::to_vec(&body).unwrap()),
        "byte-identical"
    );

    // A policy whose step is the retarget skips it on Vertex.
    let layer = RefusalGuardLayer::new()
        .retarget_fallbacks([SONNET])
        .category_policy("cyber=retarget".parse().unwrap());
    let done = exchange(
        layer,
        vec![Reply::sse(&refusal_stream())],
        post(VERTEX_OPUS, &body),
    )
    .await;
    assert_eq!(
        done.upstream.seen().len(),
        1,
        "no retarget fallback on Vertex"
    );
    assert_eq!(done.body, refusal_stream(), "the refusal as sent");
}

/// `fallbacks: "default"` is server-side fallbacks: the provider's own
/// choice, which the client made. A retarget list leaves it alone, and the
/// retarget step does not resend a request that had it. (Failed before the
/// fix: the list replaced `"default"`.)
#[tokio::test]
async fn retarget_keeps_the_clients_default_fallbacks() {
    let layer = RefusalGuardLayer::new()
        .retarget_fallbacks([SONNET])
        .inject_server_fallbacks(true);
    let request = carrying(json!("default"), true);
    let sent = request.body().clone();
    let sent = http_body_util::BodyExt::collect(sent)
        .await
        .unwrap()
        .to_bytes();
    let done = exchange(layer, vec![Reply::sse(&answer(OPUS))], request).await;
    assert_eq!(done.upstream.seen()[0].body, sent, "byte-identical");

    let layer = RefusalGuardLayer::new()
        .retarget_fallbacks([SONNET])
        .category_policy("cyber=retarget".parse().unwrap());
    let replies = vec![Reply::sse(&refusal_stream())];
    let done = exchange(layer, replies, carrying(json!("default"), true)).await;
    assert_eq!(
        done.upstream.seen().len(),
        1,
        "the provider climbed its own"
    );
}

#[tokio::test]
async fn a_refusal_without_a_token_still_falls_back() {
    let layer = RefusalGuardLayer::new().fallback_chains(chains());
    let replies = vec![Reply::sse(&refusal_stream()), Reply::sse(&answer(SONNET))];
    let done = exchange(layer, replies, messages(OPUS, true, "x")).await;
    assert!(done.upstream.seen()[1]
        .json()
        .get("fallback_credit_token")
        .is_none());
}

// ---- server-side fallback -------------------------------------------------

#[tokio::test]
async fn a_provider_fallback_block_is_recorded_and_passed_through() {
    let stream = fixture("anthropic/anthropic-sdk-python/fallback_response.txt");
    let replies = vec![Reply::sse(&stream)];
    let request = messages(OPUS, true, "x");
    let done = exchange(RefusalGuardLayer::new(), replies, request).await;
    assert_eq!(done.body, stream);
    let record = &done.sink.records()[0];
    assert_eq!(record.outcome, Outcome::Fallback);
    assert_eq!(record.model.as_deref(), Some("claude-opus-4-7"));
    assert_eq!(record.served_model.as_deref(), Some("claude-sonnet-4-5"));
    assert_eq!(done.upstream.seen().len(), 1);
}

// ---- environment ----------------------------------------------------------

#[test]
fn every_variable_is_read() {
    let config = EnvConfig::from_vars([
        ("REFUSAL_GUARD_RESCUE", "off"),
        ("REFUSAL_GUARD_FALLBACKS", "a, b"),
        ("REFUSAL_GUARD_LOG", "~/logs/r.jsonl"),
        ("REFUSAL_GUARD_CHAIN", "m1=f1,f2; m2=f3"),
        ("HOME", "/home/u"),
    ])
    .unwrap();
    assert_eq!(config.rescue, Some(false));
    assert_eq!(config.retarget, Some(vec!["a".to_owned(), "b".to_owned()]));
    assert_eq!(
        config.log,
        Some(LogSetting::Path("/home/u/logs/r.jsonl".into()))
    );
    let chains = config.chains.unwrap();
    assert_eq!(chains.for_model("m1"), ["f1".to_owned(), "f2".to_owned()]);
    assert_eq!(chains.for_model("m2"), ["f3".to_owned()]);
}

#[test]
fn compatibility_prefixes_and_precedence() {
    for (vars, expect) in [
        (vec![("PI_REFUSAL_RESCUE", "no")], Some(false)),
        (vec![("OMP_REFUSAL_RESCUE", "YES")], Some(true)),
        (
            vec![("PI_REFUSAL_RESCUE", "on"), ("OMP_REFUSAL_RESCUE", "0")],
            Some(false),
        ),
        (
            vec![
                ("OMP_REFUSAL_RESCUE", "false"),
                ("REFUSAL_GUARD_RESCUE", "True"),
            ],
            Some(true),
        ),
        (vec![], None),
    ] {
        assert_eq!(
            EnvConfig::from_vars(vars.clone()).unwrap().rescue,
            expect,
            "{vars:?}"
        );
    }
    let config =
        EnvConfig::from_vars([("PI_REFUSAL_FALLBACKS", "x"), ("OMP_REFUSAL_LOG", "OFF")]).unwrap();
    assert_eq!(config.retarget, Some(vec!["x".to_owned()]));
    assert_eq!(config.log, Some(LogSetting::Off));
    // A shadowed variable is not read, so its bad value does not matter.
    let config = EnvConfig::from_vars([
        ("PI_REFUSAL_RESCUE", "garbage"),
        ("OMP_REFUSAL_RESCUE", "on"),
    ])
    .unwrap();
    assert_eq!(config.rescue, Some(true));
    // CHAIN has no compatibility names.
    assert_eq!(
        EnvConfig::from_vars([("OMP_REFUSAL_CHAIN", "a=b")])
            .unwrap()
            .chains,
        None
    );
    // Off values empty the lists.
    let config = EnvConfig::from_vars([
        ("REFUSAL_GUARD_FALLBACKS", "off"),
        ("REFUSAL_GUARD_CHAIN", "0"),
    ])
    .unwrap();
    assert_eq!(config.retarget, Some(vec![]));
    assert!(config.chains.unwrap().is_empty());
}

#[test]
fn invalid_values_name_the_variable() {
    for (variable, value) in [
        ("REFUSAL_GUARD_RESCUE", "maybe"),
        ("OMP_REFUSAL_RESCUE", ""),
        ("PI_REFUSAL_FALLBACKS", "a,,b"),
        ("REFUSAL_GUARD_LOG", "  "),
        ("REFUSAL_GUARD_CHAIN", "no-equals-sign"),
        ("REFUSAL_GUARD_CHAIN", "=f1"),
        ("REFUSAL_GUARD_CHAIN", "m1="),
    ] {
        let error = EnvConfig::from_vars([(variable, value)]).unwrap_err();
        assert_eq!(error.variable, variable);
        assert_eq!(error.value, value);
        assert!(error.to_string().starts_with(variable), "{error}");
    }
}

#[tokio::test]
async fn env_settings_apply_to_a_layer() {
    let dir = std::env::temp_dir().join(format!("rg-env-{}", std::process::id()));
    let log = dir.join("refusals.jsonl");
    let config = EnvConfig::from_vars([
        ("REFUSAL_GUARD_RESCUE", "off"),
        ("REFUSAL_GUARD_LOG", log.to_str().unwrap()),
    ])
    .unwrap();
    let layer = config.apply(RefusalGuardLayer::new()).unwrap();
    assert!(!layer.rescue_switch().is_on());
    let upstream = Upstream::new(vec![Reply::sse(&refusal_stream())]);
    let mut guard = layer.layer(upstream.service());
    call(&mut guard, messages(OPUS, true, "x")).await;
    let written = std::fs::read_to_string(&log).unwrap();
    assert_eq!(written.lines().count(), 1);
    assert!(written.contains("\"rescue_off\""));
    std::fs::remove_dir_all(dir).unwrap();
}

// ---- fallbacks the API accepts ---------------------------------------------

const FABLE: &str = "claude-fable-5";
const OPUS_4_8: &str = "claude-opus-4-8";
const SERVER_FALLBACK_BETA: &str = "server-side-fallback-2026-07-01";

/// The allowed fallback models the test contract knows, as an operator
/// copies them from the Models API.
fn published() -> AllowedFallbacks {
    AllowedFallbacks::new()
        .allow(FABLE, [OPUS_4_8])
        .allow("claude-opus-5", [OPUS_4_8])
        .allow("claude-sonnet-5", Vec::<String>::new())
        .allow(HAIKU, Vec::<String>::new())
}

fn answer_of(model: &str, stream: bool) -> Reply {
    match stream {
        true => Reply::sse(&answer(model)),
        false => Reply::Json(json_answer(model)),
    }
}

fn betas(seen: &Seen) -> String {
    seen.headers
        .get("anthropic-beta")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// With the allowlists given, the list a retarget writes names only the
/// requested model's allowed fallbacks, and a model allowed none gets no
/// list (and no beta) at all; the upstream's contract (A14) checks both.
#[tokio::test]
async fn a_retarget_names_only_the_fallbacks_the_requested_model_allows() {
    let layer = RefusalGuardLayer::new()
        .retarget_fallbacks([FABLE, SONNET, OPUS_4_8, SONNET])
        .inject_server_fallbacks(true)
        .allowed_fallbacks(published());
    let upstream = Upstream::new(vec![
        Reply::sse(&answer(FABLE)),
        Reply::sse(&answer(SONNET)),
    ]);
    let mut guard = layer.layer(upstream.service());
    call(&mut guard, messages(FABLE, true, "x")).await;
    let sonnet_5 = messages_request("claude-sonnet-5", true, "x");
    call(&mut guard, post("/v1/messages", &sonnet_5)).await;
    let seen = upstream.seen();
    assert_eq!(seen[0].json()["fallbacks"], json!([{"model": OPUS_4_8}]));
    assert_eq!(betas(&seen[0]), SERVER_FALLBACK_BETA);
    assert_eq!(
        seen[1].json(),
        sonnet_5,
        "nothing written for a model allowed none"
    );
    assert_eq!(betas(&seen[1]), "");
}

/// Whatever the operator's lists and the client's request, what the guard
/// writes keeps every rule the API checks up front: known keys, no
/// duplicate, never the requested model, at most three, allowed models
/// only, none that rejects the prefill a request ends in. (Each rule is a
/// contract rule of the upstream, whose tripwire fails the test.)
#[tokio::test]
async fn what_a_retarget_writes_never_breaks_the_fallback_rules() {
    let prefill = json!([{"role": "user", "content": "x"}, {"role": "assistant", "content": "{"}]);
    let retargets: [&[&str]; 3] = [
        &[FABLE, OPUS_4_8, SONNET, HAIKU, OPUS_4_8, "claude-opus-4-6"],
        &[SONNET, SONNET, "claude-b", "claude-c", "claude-d"],
        &[OPUS_4_8, HAIKU],
    ];
    let own = json!([{"model": HAIKU, "max_tokens": 99, "temperature": 0.5, "top_k": 3}]);
    for retarget in retargets {
        for model in [
            FABLE,
            "claude-opus-5",
            "claude-sonnet-5",
            SONNET,
            "claude-a",
        ] {
            for (ends_in_prefill, client_list) in [(false, None), (true, None), (true, Some(&own))]
            {
                if ends_in_prefill && matches!(model, FABLE | "claude-opus-5" | "claude-sonnet-5") {
                    continue; // the model itself rejects the client's prefill
                }
                let mut body = messages_request(model, false, "x");
                if ends_in_prefill {
                    body["messages"] = prefill.clone();
                }
                let mut request = post("/v1/messages", &body);
                if let Some(list) = client_list {
                    body["fallbacks"] = list.clone();
                    request = post("/v1/messages", &body);
                    request
                        .headers_mut()
                        .insert("anthropic-beta", SERVER_FALLBACK_BETA.parse().unwrap());
                }
                let layer = RefusalGuardLayer::new()
                    .retarget_fallbacks(retarget.iter().copied())
                    .inject_server_fallbacks(true)
                    .allowed_fallbacks(published());
                let done = exchange(layer, vec![answer_of(model, false)], request).await;
                let what = format!("{model} {retarget:?} prefill {ends_in_prefill}");
                assert!(done.upstream.take_violations().is_empty(), "{what}");
                assert_eq!(done.upstream.seen().len(), 1, "{what}");
            }
        }
    }
}

/// A list the provider rejects all the same (here a model outside Fable's
/// allowed fallbacks, no allowlist given) costs the client nothing: the
/// request goes once more as the client wrote it, and the client gets that
/// answer, never the 400. Streams and JSON alike.
#[tokio::test]
async fn a_400_to_the_guards_own_fallbacks_is_sent_again_without_them() {
    for stream in [true, false] {
        let layer = RefusalGuardLayer::new()
            .retarget_fallbacks([SONNET])
            .inject_server_fallbacks(true);
        let request = messages(FABLE, stream, "x");
        let done = exchange(layer, vec![answer_of(FABLE, stream)], request).await;
        assert_eq!(done.parts.status, 200, "stream {stream}");
        match stream {
            true => assert_eq!(done.body, answer(FABLE)),
            false => assert_eq!(done.body, json_answer(FABLE)),
        }
        let violations = done.upstream.take_violations();
        assert_eq!(violations.len(), 1, "stream {stream}");
        assert_eq!(violations[0].rule, "A14");
        let seen = done.upstream.seen();
        assert_eq!(seen.len(), 2, "one retry, stream {stream}");
        assert_eq!(seen[0].json()["fallbacks"], json!([{"model": SONNET}]));
        assert_eq!(
            seen[1].json(),
            messages_request(FABLE, stream, "x"),
            "as the client wrote it"
        );
        assert_eq!(betas(&seen[1]), "", "without the beta the guard added");
        assert!(done.sink.records().is_empty(), "an answer is no refusal");
    }
}

/// The attempt rejected is in the record: when the request sent again is
/// refused and a chain fallback serves it, the record lists the 400, the request
/// without fallbacks, then the fallback, and the fallback carries none of the
/// guard's fallbacks either.
#[tokio::test]
async fn the_rejected_fallbacks_are_recorded_with_the_attempts_that_followed() {
    let layer = RefusalGuardLayer::new()
        .retarget_fallbacks([SONNET, OPUS_4_8])
        .inject_server_fallbacks(true)
        .fallback_chains(FallbackChains::new().chain(FABLE, [OPUS_4_8]));
    let refused = anthropic_stream(&think_then_refuse(FABLE, "cyber"));
    let replies = vec![Reply::sse(&refused), Reply::sse(&answer(OPUS_4_8))];
    let done = exchange(layer, replies, messages(FABLE, true, "x")).await;
    assert_eq!(done.body, answer(OPUS_4_8));
    assert_eq!(done.upstream.take_violations().len(), 1);
    let seen = done.upstream.seen();
    assert_eq!(seen.len(), 3);
    assert!(seen[1].json().get("fallbacks").is_none());
    assert_eq!(seen[2].json()["model"], OPUS_4_8);
    assert!(
        seen[2].json().get("fallbacks").is_none(),
        "{}",
        seen[2].json()
    );
    let record = &done.sink.records()[0];
    assert_eq!(record.outcome, Outcome::Fallback);
    let steps: Vec<_> = record
        .attempts
        .iter()
        .map(|a| (a.step, a.result, a.status))
        .collect();
    assert_eq!(
        steps,
        [
            (AttemptStep::Original, AttemptResult::HttpError, Some(400)),
            (
                AttemptStep::WithoutFallbacks,
                AttemptResult::Refused,
                Some(200)
            ),
            (AttemptStep::Fallback, AttemptResult::Served, Some(200)),
        ]
    );
}

/// A client's own `fallbacks` are its business: a 400 to them reaches the
/// client as the provider sent it, with nothing sent again.
#[tokio::test]
async fn a_400_to_the_clients_own_fallbacks_reaches_the_client() {
    let mut body = messages_request(FABLE, true, "x");
    body["fallbacks"] = json!([{"model": SONNET}]);
    let mut request = post("/v1/messages", &body);
    request
        .headers_mut()
        .insert("anthropic-beta", SERVER_FALLBACK_BETA.parse().unwrap());
    // Retargeting is on, but Fable's allowlist leaves nothing to write.
    let layer = RefusalGuardLayer::new()
        .retarget_fallbacks([SONNET])
        .allowed_fallbacks(published());
    let done = exchange(layer, vec![], request).await;
    assert_eq!(done.parts.status, 400);
    assert!(std::str::from_utf8(&done.body).unwrap().contains("A14"));
    assert_eq!(done.upstream.take_violations().len(), 1);
    assert_eq!(done.upstream.seen().len(), 1);
}

// ---- fallback credit not applied -------------------------------------------

/// A credit token not redeemed because the request carried fields of a
/// variant (`usage.fallback_credit.status.remove_to_redeem`, with the reason
/// `variant_fields_present`) is redeemed by the next fallback without them: the
/// same token when the refusal minted none (a corrected request within its
/// lifetime still redeems it), or the fresh one. The attempt records what
/// the response said.
#[tokio::test]
async fn the_next_fallback_leaves_out_the_fields_a_credit_token_was_not_redeemed_for() {
    let not_applied = json!({"type": "not_applied", "reason": "variant_fields_present",
        "remove_to_redeem": ["speed", "output_config.effort"]});
    for (fresh, expected) in [(None, "tok-1"), (Some("tok-2"), "tok-2")] {
        let refused_again = anthropic_stream(&[
            message_start(SONNET),
            credited_refusal(fresh, Some(not_applied.clone())),
            message_stop(),
        ]);
        let replies = vec![
            Reply::sse(&refusal_with_token("tok-1")),
            Reply::sse(&refused_again),
            Reply::sse(&answer(HAIKU)),
        ];
        let mut body = messages_request(OPUS, true, "x");
        body["speed"] = json!("fast");
        body["output_config"] = json!({"effort": "high"});
        let layer = RefusalGuardLayer::new().fallback_chains(chains());
        let done = exchange(layer, replies, post("/v1/messages", &body)).await;
        assert_eq!(done.body, answer(HAIKU));
        let seen = done.upstream.seen();
        let (first_fallback, next_fallback) = (seen[1].json(), seen[2].json());
        assert_eq!(first_fallback["speed"], "fast");
        assert_eq!(first_fallback["fallback_credit_token"]["token"], "tok-1");
        assert_eq!(next_fallback["fallback_credit_token"]["token"], expected);
        assert!(next_fallback.get("speed").is_none(), "{next_fallback}");
        assert_eq!(next_fallback["output_config"], json!({}), "{next_fallback}");
        assert_eq!(next_fallback["messages"], body["messages"]);
        let attempts = &done.sink.records()[0].attempts;
        let credit = attempts[1].fallback_credit.as_ref().unwrap();
        assert_eq!(credit.reason(), Some("variant_fields_present"));
        assert_eq!(credit.remove_to_redeem(), ["speed", "output_config.effort"]);
        assert_eq!(attempts[2].result, AttemptResult::Served);
    }
}

// ---- fallbacks to models that reject prefill ------------------------------------

fn prefilled(model: &str) -> Value {
    let mut body = messages_request(model, true, "Rate the config");
    body["messages"] = json!([
        {"role": "user", "content": "Rate the config"},
        {"role": "assistant", "content": "{\"rating\":"},
    ]);
    body
}

/// A client prefill its model takes goes, on a fallback to a model that rejects
/// prefill, as an instruction in the last user turn: the fallback ends in a user
/// turn (the upstream's contract, A15, rejects it otherwise). With a credit
/// token, which authorises that one prefill, the turn stays as sent.
#[tokio::test]
async fn a_fallback_to_a_model_that_rejects_prefill_ends_in_a_user_turn_unless_it_presents_a_token()
{
    let chain = FallbackChains::new().chain(SONNET, [OPUS_4_8]);
    for (refused, token) in [
        (refusal_stream(), false),
        (refusal_with_token("tok-1"), true),
    ] {
        let layer = RefusalGuardLayer::new().fallback_chains(chain.clone());
        let body = prefilled(SONNET);
        let replies = vec![Reply::sse(&refused), Reply::sse(&answer(OPUS_4_8))];
        let done = exchange(layer, replies, post("/v1/messages", &body)).await;
        assert_eq!(done.body, answer(OPUS_4_8), "token {token}");
        let fallback = &done.upstream.seen()[1];
        let last = fallback.last_message();
        if token {
            assert_eq!(
                fallback.json()["messages"],
                body["messages"],
                "kept beside the token"
            );
            assert_eq!(fallback.json()["fallback_credit_token"]["token"], "tok-1");
            continue;
        }
        assert_eq!(last["role"], "user", "{}", fallback.json());
        assert_eq!(fallback.json()["messages"].as_array().unwrap().len(), 1);
        let note = last["content"][1]["text"].as_str().unwrap();
        assert!(note.starts_with("[refusal-guard]"), "{note}");
        assert!(note.ends_with("{\"rating\":"), "{note}");
    }
}

/// A fallback to a model that takes prefill keeps it; so does a rescue, which
/// ends in its own user turn whatever the model.
#[tokio::test]
async fn a_prefill_stays_on_a_fallback_to_a_model_that_takes_it() {
    let layer = RefusalGuardLayer::new()
        .fallback_chains(FallbackChains::new().chain(SONNET, [HAIKU]))
        .rescue_model(RescueModel::LastFallback);
    let body = prefilled(SONNET);
    let replies = vec![
        Reply::sse(&refusal_stream()),
        Reply::sse(&refusal_stream()),
        Reply::sse(&answer(HAIKU)),
    ];
    let done = exchange(layer, replies, post("/v1/messages", &body)).await;
    let seen = done.upstream.seen();
    assert_eq!(seen[1].json()["messages"], body["messages"]);
    assert_eq!(seen[2].json()["model"], HAIKU);
    assert_eq!(seen[2].last_message()["role"], "user", "the rescue's note");
}

/// A sticky route sends a conversation's later requests to the model that
/// served it: a prefill that model rejects is folded there too.
#[tokio::test]
async fn a_sticky_route_to_a_model_that_rejects_prefill_folds_the_prefill() {
    let upstream = Upstream::new(vec![
        Reply::sse(&refusal_stream()),
        Reply::sse(&answer(OPUS_4_8)),
        Reply::sse(&answer(OPUS_4_8)),
    ]);
    let mut guard = RefusalGuardLayer::new()
        .fallback_chains(FallbackChains::new().chain(SONNET, [OPUS_4_8]))
        .sticky_fallback(Duration::from_secs(60))
        .layer(upstream.service());
    call(&mut guard, messages(SONNET, true, "Rate the config")).await;
    call(&mut guard, post("/v1/messages", &prefilled(SONNET))).await;
    let routed = &upstream.seen()[2];
    assert_eq!(routed.json()["model"], OPUS_4_8);
    assert_eq!(routed.last_message()["role"], "user", "{}", routed.json());
}
