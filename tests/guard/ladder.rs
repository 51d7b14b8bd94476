//! The recovery ladder (issue 3): retarget, fallback chains, budget, sticky
//! routing, handoff marker, fallback credit and environment configuration.

use std::time::Duration;

use bytes::Bytes;
use refusal_guard::env::{EnvConfig, LogSetting};
use refusal_guard::recovery::RescueModel;
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

/// Opus refuses, the chain's first hop (Sonnet) answers, and that answer is
/// what the client gets.
async fn sonnet_answers_after_a_refusal() -> Exchange {
    let layer = RefusalGuardLayer::new().fallback_chains(chains());
    let replies = vec![Reply::sse(&refusal_stream()), Reply::sse(&answer(SONNET))];
    let done = exchange(layer, replies, messages(OPUS, true, "x")).await;
    assert_eq!(done.body, answer(SONNET));
    done
}

#[tokio::test]
async fn the_first_hop_that_answers_is_served() {
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
async fn every_hop_refusing_leads_to_the_rescue_then_dead_with_every_attempt_listed() {
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
async fn a_failing_hop_moves_on_to_the_next_step() {
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
        .layer(slow);
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

fn events_of(body: &Bytes) -> Vec<Value> {
    String::from_utf8(body.to_vec())
        .unwrap()
        .split("\n\n")
        .filter_map(|frame| frame.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

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
    let events = events_of(&done.body);
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
    let original_blocks = events_of(&served)
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
async fn without_the_marker_the_hop_is_served_as_sent() {
    sonnet_answers_after_a_refusal().await;
}

// ---- fallback credit ------------------------------------------------------

#[tokio::test]
async fn a_chain_asks_for_credit_and_the_token_goes_to_the_next_hop_once() {
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
/// either mode), so a hop that presents a token drops the request's
/// `fallbacks`: the client's list, its `"default"`, or the list the guard
/// injected. Streams and JSON alike. (Failed before the fix: the hop kept
/// `fallbacks` and the upstream answered it with the provider's 400.)
#[tokio::test]
async fn a_hop_presenting_a_credit_token_drops_every_kind_of_fallbacks() {
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
            let hop = seen[1].json();
            assert_eq!(hop["fallback_credit_token"]["token"], "tok-1", "{what}");
            assert!(
                hop.get("fallbacks").is_none(),
                "{what}, stream {stream}: {hop}"
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
    assert_eq!(done.upstream.seen().len(), 1, "no retarget hop on Vertex");
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
