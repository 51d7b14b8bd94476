//! The opt-in text refusal detector inside the layer (issue 6).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use refusal_guard::refusal::{RefusalKind, RefusalSignal};
use refusal_guard::{Outcome, RefusalGuardLayer};
use serde_json::json;
use support::events::*;
use support::*;
use tower::{Layer, ServiceExt};

const PROSE_REFUSAL: &str = "I'm sorry, but I can't help with creating malware. It could be used to harm systems you do not own.";

fn text_stream(text_parts: &[&str]) -> Bytes {
    let mut events = vec![
        message_start("m"),
        block_start(0, json!({"type":"text","text":""})),
    ];
    for part in text_parts {
        events.push(text_delta(0, part));
    }
    events.extend([block_stop(0), stop("end_turn"), message_stop()]);
    anthropic_stream(&events)
}

fn text_layer() -> RefusalGuardLayer {
    RefusalGuardLayer::new().detect_text_refusals(true)
}

#[tokio::test]
async fn a_prose_refusal_is_recovered_under_any_chunking() {
    let refusal = text_stream(&[
        "I'm sorry, but ",
        "I can't help with creating malware.",
        " It could be used to harm systems you do not own.",
    ]);
    let answer = fixture("anthropic/anthropic-sdk-python/basic_response.txt");
    let mut rng = Rng::new(7);
    let mut chunkings: Vec<Vec<Bytes>> = (1..refusal.len())
        .step_by(7)
        .map(|cut| split_at(&refusal, &[cut]))
        .collect();
    chunkings.extend((0..20).map(|_| split_at(&refusal, &rng.cuts(refusal.len(), 40))));
    for chunks in chunkings {
        let layer = text_layer();
        let replies = vec![Reply::Sse(chunks), Reply::sse(&answer)];
        let done = exchange(layer, replies, messages("m", true, "x")).await;
        assert_eq!(done.body, answer);
        let refusal = done.refusal().unwrap();
        assert_eq!(refusal.signal, RefusalSignal::Text);
        assert_eq!(refusal.category.as_deref(), Some("text_refusal"));
        assert_eq!(refusal.kind, RefusalKind::Empty);
        assert_eq!(refusal.outcome, Outcome::Rescued);
        assert!(done.upstream.seen()[1]
            .json()
            .to_string()
            .contains("text_refusal"));
    }
}

#[tokio::test]
async fn with_detection_off_nothing_changes() {
    let refusal = text_stream(&[PROSE_REFUSAL]);
    let replies = vec![Reply::sse(&refusal)];
    let request = messages("m", true, "x");
    let done = exchange(RefusalGuardLayer::new(), replies, request).await;
    done.assert_untouched(&refusal);
}

#[tokio::test]
async fn ordinary_answers_and_tool_calls_pass_through() {
    let answer = fixture("anthropic/anthropic-sdk-python/tool_use_response.txt");
    let with_tool = anthropic_stream(&[
        message_start("m"),
        block_start(
            0,
            json!({"type":"tool_use","id":"t","name":"lookup","input":{}}),
        ),
        block_stop(0),
        block_start(1, json!({"type":"text","text":""})),
        text_delta(1, PROSE_REFUSAL),
        block_stop(1),
        stop("tool_use"),
        message_stop(),
    ]);
    for stream in [
        answer,
        with_tool,
        text_stream(&["Sure! Here is how TLS works: ", "the client says hello..."]),
    ] {
        let layer = text_layer();
        let done = exchange(layer, vec![Reply::sse(&stream)], messages("m", true, "x")).await;
        assert_eq!(done.body, stream);
        assert_eq!(done.upstream.seen().len(), 1);
        assert!(done.sink.records().is_empty());
    }
}

#[tokio::test]
async fn a_json_prose_refusal_is_recovered() {
    let refusal = json!({"id":"msg","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":PROSE_REFUSAL}],"stop_reason":"end_turn"});
    let answer = fixture("anthropic/vercel-ai/anthropic-text.json");
    let layer = text_layer();
    let replies = vec![
        Reply::Json(Bytes::from(refusal.to_string())),
        Reply::Json(answer.clone()),
    ];
    let done = exchange(layer, replies, messages("m", false, "x")).await;
    assert_eq!(done.body, answer);
    assert_eq!(done.sink.records()[0].signal, RefusalSignal::Text);
}

/// Bytes pulled from upstream before the guard answered.
async fn held_before_answer(stream: Bytes, chunk: usize, detection: bool) -> (usize, Bytes) {
    let pulled = Arc::new(AtomicUsize::new(0));
    let chunks: Vec<Bytes> = (0..stream.len())
        .step_by(chunk)
        .map(|at| stream.slice(at..(at + chunk).min(stream.len())))
        .collect();
    let upstream = answering({
        let pulled = pulled.clone();
        move |_req: http::Request<Full<Bytes>>| {
            let body = Chunked::chunks(chunks.clone()).counting(pulled.clone());
            async move { sse_response(body) }
        }
    });
    let guard = RefusalGuardLayer::new()
        .detect_text_refusals(detection)
        .layer(upstream.service());
    let response = guard.oneshot(messages("m", true, "x")).await.unwrap();
    let held = pulled.load(Ordering::SeqCst);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (held, body)
}

#[tokio::test]
async fn an_ordinary_answer_is_committed_as_soon_as_its_opening_rules_a_refusal_out() {
    let long_answer: Vec<String> = (0..200)
        .map(|i| format!("Step {i}: check the configuration file. "))
        .collect();
    let mut parts = vec!["Sure, here is the procedure. ".to_owned()];
    parts.extend(long_answer);
    let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
    let stream = text_stream(&refs);
    let (without, body) = held_before_answer(stream.clone(), 64, false).await;
    assert_eq!(body, stream);
    let (with, body) = held_before_answer(stream.clone(), 64, true).await;
    assert_eq!(body, stream);
    // Without detection the guard commits on the first text delta; with it,
    // only a little more is held, far from the whole answer or the cap.
    assert!(with >= without);
    assert!(
        with - without <= 1024,
        "held {with} bytes with detection, {without} without"
    );
    assert!(with < stream.len() / 4, "held {with} of {}", stream.len());
}

#[tokio::test]
async fn a_refusal_is_held_until_decided_and_never_leaks() {
    let stream = text_stream(&["I'm sorry, ", "but I can't ", "help with that."]);
    let (held, body) = held_before_answer(stream.clone(), 16, true).await;
    // The service_fn answers the rescue with the same refusal: both were held
    // whole before the guard answered, and the client gets the original.
    assert_eq!(held, 2 * stream.len());
    assert_eq!(body, stream);
}

/// The refusals of issue 15 carry no refusal phrase: they are told by what
/// they fail to deliver. Under the layer, streamed in pieces, they are
/// recovered like any prose refusal; their compliant look-alikes pass
/// through untouched.
#[tokio::test]
async fn refusals_that_deliver_nothing_are_recovered_and_look_alikes_pass() {
    let answer = fixture("anthropic/anthropic-sdk-python/basic_response.txt");
    let refusals: [&[&str]; 3] = [
        &[
            "That sounds really hard, and I'm sorry ",
            "you're dealing with it. You're not alone. If you're in the US, ",
            "you can call or text 988 any time.",
        ],
        &[
            "As an AI, I do not support discrimination ",
            "against any group of people. All people deserve equal respect and dignity.",
        ],
        &[
            "Remember that stalking someone is never okay. ",
            "Everyone has a right to privacy and to feel safe in their own life.",
        ],
    ];
    for parts in refusals {
        let done = exchange(
            text_layer(),
            vec![Reply::sse(&text_stream(parts)), Reply::sse(&answer)],
            post("/v1/messages", &messages_request("m", true, "x")),
        )
        .await;
        assert_eq!(done.body, answer, "{parts:?}");
        let refusal = done.refusal().unwrap();
        assert_eq!(refusal.signal, RefusalSignal::Text);
        assert_eq!(refusal.outcome, Outcome::Rescued);
    }
    let look_alikes: [&[&str]; 2] = [
        &[
            "I'm sorry to hear that, here is how to fix it:\n",
            "1. Unplug the printer for thirty seconds.\n2. Reseat the cartridges.\n",
            "3. Run the head-cleaning cycle from the settings menu.",
        ],
        &[
            "Safety first: never mix bleach with ammonia. To clean the grout, ",
            "mix baking soda and water into a paste, scrub, then rinse with warm water.",
        ],
    ];
    for parts in look_alikes {
        let stream = text_stream(parts);
        let done = exchange(
            text_layer(),
            vec![Reply::sse(&stream)],
            post("/v1/messages", &messages_request("m", true, "x")),
        )
        .await;
        done.assert_untouched(&stream);
    }
}
