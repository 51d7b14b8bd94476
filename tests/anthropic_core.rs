//! Core behaviour on Anthropic Messages, through the public API.
mod common;

use common::*;
use refusal_guard::refusal::{AttemptResult, AttemptStep, DeadReason, RefusalKind};
use refusal_guard::telemetry::MemorySink;
use refusal_guard::{Outcome, Refusal, RefusalGuardLayer, RefusalHandle};
use tower::Layer;

const TEXT: &str = "anthropic/basic_response.txt";
const EMPTY_REFUSAL: &str = "anthropic/refusal_response.txt";

#[tokio::test]
async fn non_refusal_stream_is_byte_identical() {
    let fixture = fixture(TEXT);
    let upstream = Upstream::new(vec![Reply::sse(&fixture)]);
    let sink = MemorySink::new();
    let mut guard = RefusalGuardLayer::new()
        .telemetry(sink.clone())
        .layer(upstream.service());
    let (parts, body) = call(
        &mut guard,
        post("/v1/messages", &messages_request("m", true, "hi")),
    )
    .await;
    assert_eq!(body, fixture);
    assert_eq!(upstream.seen().len(), 1);
    assert!(sink.records().is_empty());
    let handle = parts.extensions.get::<RefusalHandle>().expect("handle");
    assert!(handle.is_settled());
    assert_eq!(handle.get(), None);
}

#[tokio::test]
async fn empty_refusal_is_rescued_with_one_continuation() {
    let upstream = Upstream::new(vec![
        Reply::sse(&fixture(EMPTY_REFUSAL)),
        Reply::sse(&fixture(TEXT)),
    ]);
    let sink = MemorySink::new();
    let mut guard = RefusalGuardLayer::new()
        .telemetry(sink.clone())
        .layer(upstream.service());
    let (parts, body) = call(
        &mut guard,
        post(
            "/v1/messages",
            &messages_request("claude-opus-4-7", true, "scan my host"),
        ),
    )
    .await;
    assert_eq!(
        body,
        fixture(TEXT),
        "the client receives only the continuation"
    );
    let seen = upstream.seen();
    assert_eq!(seen.len(), 2);
    let continuation = seen[1].json();
    let last = continuation["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "user");
    let note = last["content"].as_array().unwrap().last().unwrap()["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(note.contains("cyber"), "{note}");
    let refusal = parts.extensions.get::<Refusal>().expect("typed refusal");
    assert_eq!(refusal.outcome, Outcome::Rescued);
    assert_eq!(refusal.kind, RefusalKind::Empty);
    assert_eq!(refusal.category.as_deref(), Some("cyber"));
    let records = sink.records();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].outcome, Outcome::Rescued);
    assert_eq!(records[0].attempts.len(), 2);
    assert_eq!(records[0].attempts[1].step, AttemptStep::Rescue);
    assert_eq!(records[0].attempts[1].result, AttemptResult::Served);
}

#[tokio::test]
async fn rescue_off_delivers_original_dead() {
    let refusal = fixture(EMPTY_REFUSAL);
    let upstream = Upstream::new(vec![Reply::sse(&refusal)]);
    let sink = MemorySink::new();
    let mut guard = RefusalGuardLayer::new()
        .rescue(false)
        .telemetry(sink.clone())
        .layer(upstream.service());
    let (_, body) = call(
        &mut guard,
        post("/v1/messages", &messages_request("m", true, "x")),
    )
    .await;
    assert_eq!(body, refusal);
    assert_eq!(upstream.seen().len(), 1);
    let records = sink.records();
    assert_eq!(records[0].outcome, Outcome::Dead);
    assert_eq!(records[0].reason, Some(DeadReason::RescueOff));
}
