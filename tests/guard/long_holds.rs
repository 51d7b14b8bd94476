//! Long holds (DESIGN §5): past `keepalive_after`, the client gets the head
//! and SSE comments, then whatever is decided, under the original head; with
//! live thinking, the thinking streams at once and a recovered turn continues
//! the same message.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use refusal_guard::{Outcome, Refusal, RefusalGuardLayer, RefusalHandle};
use serde_json::json;
use support::events::*;
use support::*;
use tokio::sync::oneshot;
use tower::{Layer, ServiceExt};

fn thinking_then(tail: Vec<serde_json::Value>) -> (Bytes, Bytes) {
    let head = anthropic_stream(&[
        message_start("m"),
        block_start(0, json!({"type":"thinking","thinking":""})),
        thinking_delta(0, "Considering the request..."),
    ]);
    (head, anthropic_stream(&tail))
}

/// Thinking, then an empty `cyber` refusal.
fn thinking_then_refusal() -> (Bytes, Bytes) {
    thinking_then(vec![
        block_stop(0),
        refusal(Some("cyber"), None),
        message_stop(),
    ])
}

/// An upstream whose first answer thinks, waits for the gate, then ends with
/// `tail`; later answers are `later`.
fn upstream(
    head: Bytes,
    tail: Bytes,
    later: Bytes,
    gate: oneshot::Receiver<()>,
) -> Answering<impl MockInner> {
    let gate = Arc::new(Mutex::new(Some(gate)));
    answering(move |_req: http::Request<Full<Bytes>>| {
        let gate = gate.lock().unwrap().take();
        let body = match gate {
            // Yields `head`, then waits for the gate, then yields `tail`.
            Some(gate) => Chunked::steps(
                vec![
                    Step::Data(head.clone()),
                    Step::Gate(gate),
                    Step::Data(tail.clone()),
                ],
                Duration::ZERO,
            ),
            None => Chunked::chunks(vec![later.clone()]),
        };
        async move {
            http::Response::builder()
                .header("content-type", "text/event-stream")
                .header("request-id", "req_original")
                .body(body)
                .unwrap()
        }
    })
}

fn comments_then(body: &Bytes) -> (usize, Bytes) {
    let mut rest = body.clone();
    let mut comments = 0;
    while rest.starts_with(b": keep-alive\n\n") {
        rest = rest.slice(14..);
        comments += 1;
    }
    (comments, rest)
}

#[tokio::test]
async fn a_long_hold_sends_comments_then_the_rescued_stream_under_the_original_head() {
    let (head, tail) = thinking_then_refusal();
    let answer = fixture("anthropic/anthropic-sdk-python/basic_response.txt");
    let (open, gate) = oneshot::channel();
    let scripted = upstream(head, tail, answer.clone(), gate);
    let guard = RefusalGuardLayer::new()
        .keepalive_after(Duration::from_millis(50))
        .keepalive_interval(Duration::from_millis(20))
        .layer(scripted.service());
    let request = messages("m", true, "x");
    // The answer comes while upstream is still thinking (the gate is shut).
    let response = tokio::time::timeout(Duration::from_secs(5), guard.oneshot(request))
        .await
        .expect("answered before the decision")
        .unwrap();
    assert_eq!(response.headers()["request-id"], "req_original");
    assert!(
        response.extensions().get::<Refusal>().is_none(),
        "not known yet"
    );
    let handle = response
        .extensions()
        .get::<RefusalHandle>()
        .unwrap()
        .clone();
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, Bytes::from_static(b": keep-alive\n\n"));
    tokio::time::sleep(Duration::from_millis(70)).await;
    open.send(()).unwrap();
    let rest = body.collect().await.unwrap().to_bytes();
    let (comments, served) = comments_then(&rest);
    assert!(comments >= 1, "more comments while the hold went on");
    assert_eq!(
        served, answer,
        "the rescued stream, whole, after the comments"
    );
    assert_eq!(handle.settled().await.unwrap().outcome, Outcome::Rescued);
}

#[tokio::test]
async fn a_long_hold_that_ends_in_output_is_the_original_after_the_comments() {
    let (head, tail) = thinking_then(vec![
        block_stop(0),
        block_start(1, json!({"type":"text","text":""})),
        text_delta(1, "Here you go."),
        block_stop(1),
        stop("end_turn"),
        message_stop(),
    ]);
    let (open, gate) = oneshot::channel();
    let scripted = upstream(head.clone(), tail.clone(), Bytes::new(), gate);
    let guard = RefusalGuardLayer::new()
        .keepalive_after(Duration::from_millis(30))
        .layer(scripted.service());
    let response = guard.oneshot(messages("m", true, "x")).await.unwrap();
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, Bytes::from_static(b": keep-alive\n\n"));
    open.send(()).unwrap();
    let body = body.collect().await.unwrap().to_bytes();
    let (_, served) = comments_then(&body);
    let mut original = head.to_vec();
    original.extend_from_slice(&tail);
    assert_eq!(served, Bytes::from(original));
}

#[tokio::test]
async fn a_quick_decision_sends_no_comment() {
    let stream = fixture("anthropic/anthropic-sdk-python/basic_response.txt");
    let layer = RefusalGuardLayer::new().keepalive_after(Duration::from_secs(30));
    let done = exchange(layer, vec![Reply::sse(&stream)], messages("m", true, "x")).await;
    assert_eq!(done.body, stream);
}

// ---- live thinking ----------------------------------------------------

fn live_layer(sink: &refusal_guard::telemetry::MemorySink) -> RefusalGuardLayer {
    RefusalGuardLayer::new()
        .live_thinking(true)
        .telemetry(sink.clone())
}

#[tokio::test]
async fn live_thinking_continues_the_message_with_the_rescued_turn() {
    let original = anthropic_stream(&think_then_refuse("m", "cyber"));
    let answer = anthropic_stream(&text_answer("m", "Here is the hardening guide."));
    let mut rng = Rng::new(11);
    for round in 0..30 {
        let chunks = if round == 0 {
            vec![original.clone()]
        } else {
            split_at(&original, &rng.cuts(original.len(), 1 + round * 3))
        };
        let upstream = Upstream::new(vec![Reply::Sse(chunks), Reply::sse(&answer)]);
        let sink = refusal_guard::telemetry::MemorySink::new();
        let mut guard = live_layer(&sink).layer(upstream.service());
        let (parts, body) = call(&mut guard, messages("m", true, "x")).await;
        let handle = parts.extensions.get::<RefusalHandle>().unwrap();
        assert_eq!(handle.settled().await.unwrap().outcome, Outcome::Rescued);
        let events = stream_events(&body);
        let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds.iter().filter(|k| **k == "message_start").count(),
            1,
            "{kinds:?}"
        );
        assert_eq!(
            kinds.iter().filter(|k| **k == "message_delta").count(),
            1,
            "{kinds:?}"
        );
        assert_eq!(
            kinds.iter().filter(|k| **k == "message_stop").count(),
            1,
            "{kinds:?}"
        );
        // The thinking block the client saw first is block 0; the rescued
        // text follows as block 1.
        let starts: Vec<(u64, &str)> = events
            .iter()
            .filter(|e| e["type"] == "content_block_start")
            .map(|e| {
                (
                    e["index"].as_u64().unwrap(),
                    e["content_block"]["type"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(starts, [(0, "thinking"), (1, "text")]);
        let delta = events
            .iter()
            .find(|e| e["type"] == "message_delta")
            .unwrap();
        assert_eq!(delta["delta"]["stop_reason"], "end_turn");
        assert!(
            body.starts_with(&original[..original.len() / 4]),
            "the thinking went out as sent"
        );
        assert!(upstream.seen()[1]
            .json()
            .to_string()
            .contains("[refusal-guard]"));
    }
}

#[tokio::test]
async fn live_thinking_delivers_the_original_whole_when_nothing_recovers_or_it_answers() {
    let refused = anthropic_stream(&think_then_refuse("m", "cyber"));
    let answered = anthropic_stream(&[
        message_start("m"),
        block_start(0, json!({"type":"thinking","thinking":""})),
        thinking_delta(0, "Let me think."),
        block_stop(0),
        block_start(1, json!({"type":"text","text":""})),
        text_delta(1, "Answer."),
        block_stop(1),
        stop("end_turn"),
        message_stop(),
    ]);
    let mut rng = Rng::new(5);
    for (stream, rescue, outcome) in [
        (refused.clone(), false, Some(Outcome::Dead)),
        (answered.clone(), true, None),
    ] {
        for round in 0..20 {
            let chunks = split_at(&stream, &rng.cuts(stream.len(), 1 + round * 5));
            let upstream = Upstream::new(vec![Reply::Sse(chunks)]);
            let sink = refusal_guard::telemetry::MemorySink::new();
            let mut guard = live_layer(&sink).rescue(rescue).layer(upstream.service());
            let (parts, body) = call(&mut guard, messages("m", true, "x")).await;
            assert_eq!(body, stream, "byte for byte");
            let handle = parts.extensions.get::<RefusalHandle>().unwrap();
            assert_eq!(handle.settled().await.map(|r| r.outcome), outcome);
            assert_eq!(upstream.seen().len(), 1);
        }
    }
}

#[tokio::test]
async fn live_thinking_streams_thinking_before_the_decision() {
    let (head, tail) = thinking_then_refusal();
    let (open, gate) = oneshot::channel();
    let scripted = upstream(head.clone(), tail.clone(), Bytes::new(), gate);
    let guard = RefusalGuardLayer::new()
        .live_thinking(true)
        .rescue(false)
        .layer(scripted.service());
    let response = tokio::time::timeout(
        Duration::from_secs(5),
        guard.oneshot(messages("m", true, "x")),
    )
    .await
    .expect("answered at once")
    .unwrap();
    let mut body = response.into_body();
    // Upstream is still thinking (the gate is shut), yet the thinking is here.
    let mut seen = Vec::new();
    while seen.len() < head.len() {
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("thinking arrives before the decision")
            .unwrap()
            .unwrap();
        seen.extend_from_slice(frame.data_ref().unwrap());
    }
    assert_eq!(Bytes::from(seen), head);
    open.send(()).unwrap();
    let rest = body.collect().await.unwrap().to_bytes();
    assert_eq!(rest, tail, "then the rest of the original, as sent");
}
