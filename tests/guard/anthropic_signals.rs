//! The signals Anthropic's API sends with refusals and fallbacks, read and
//! used: `stop_details.recommended_model`, `usage.iterations` of a
//! server-side chain, `usage.fallback_credit`, the prefill claim's three
//! states; and the same shape written for a chain the guard climbed itself.

use bytes::Bytes;
use refusal_guard::refusal::{AttemptResult, DeadReason, FallbackCredit, Prefill};
use refusal_guard::{Outcome, RefusalGuardLayer};
use refusal_guard_proxy::Report;
use serde_json::{json, Value};
use support::events::*;
use support::*;

const OPUS: &str = "claude-opus-4-7";
const SONNET: &str = "claude-sonnet-4-5";
const HAIKU: &str = "claude-haiku-4-5";

/// An empty refusal of `model` whose `stop_details` also carry `extra`.
fn refusal_with(model: &str, id: &str, extra: Value) -> Bytes {
    let mut details = json!({"type": "refusal", "category": "cyber", "explanation": null});
    details
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let mut start = message_start(model);
    start["message"]["id"] = json!(id);
    anthropic_stream(&[
        start,
        json!({"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_details": details},
               "usage": {"output_tokens": 2}}),
        message_stop(),
    ])
}

fn answer(model: &str) -> Bytes {
    let mut events = text_answer(model, &format!("answer from {model}"));
    events[0]["message"]["id"] = json!(format!("msg_{model}"));
    anthropic_stream(&events)
}

fn one_chain() -> refusal_guard::recovery::FallbackChains {
    refusal_guard::recovery::FallbackChains::new().chain(OPUS, [SONNET])
}

// ---- recommended_model ------------------------------------------------------

#[tokio::test]
async fn a_recommended_model_is_recorded_and_followed_after_the_chain_only_when_allowed() {
    let recommending = || refusal_with(OPUS, "msg_a", json!({"recommended_model": HAIKU}));
    let replies = || {
        vec![
            Reply::sse(&recommending()),
            Reply::sse(&refusal_with(SONNET, "msg_b", json!({}))),
            Reply::sse(&answer(HAIKU)),
        ]
    };
    let layer = || {
        RefusalGuardLayer::new()
            .fallback_chains(one_chain())
            .rescue(false)
    };

    // Off by default: recorded, not followed.
    let done = exchange(layer(), replies(), messages(OPUS, true, "x")).await;
    assert_eq!(done.upstream.seen().len(), 2);
    let record = &done.sink.records()[0];
    assert_eq!(record.outcome, Outcome::Dead);
    assert_eq!(record.recommended_model.as_deref(), Some(HAIKU));
    assert_eq!(
        done.sink.records()[0]
            .refusal()
            .recommended_model
            .as_deref(),
        Some(HAIKU)
    );

    let allowed = layer().try_recommended_model(true);
    let done = exchange(allowed, replies(), messages(OPUS, true, "x")).await;
    let seen = done.upstream.seen();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[2].json()["model"], HAIKU, "tried after the chain");
    assert_eq!(done.body, answer(HAIKU));
    let record = &done.sink.records()[0];
    assert_eq!(record.outcome, Outcome::Fallback);
    assert_eq!(record.served_model.as_deref(), Some(HAIKU));
}

// ---- a server-side chain ------------------------------------------------------

fn served_by_chain_json() -> Value {
    json!({
        "id": "msg_chain", "type": "message", "role": "assistant", "model": HAIKU,
        "stop_reason": "end_turn", "stop_sequence": null,
        "content": [
            {"type": "fallback", "from": {"model": OPUS}, "to": {"model": SONNET},
             "trigger": {"type": "refusal", "category": "cyber"}},
            {"type": "fallback", "from": {"model": SONNET}, "to": {"model": HAIKU},
             "trigger": {"type": "refusal", "category": "cyber"}},
            {"type": "text", "text": "answer"},
        ],
        "usage": {"input_tokens": 40, "output_tokens": 9, "iterations": [
            {"type": "message", "model": OPUS, "input_tokens": 40, "output_tokens": 1,
             "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
            {"type": "message", "model": SONNET, "input_tokens": 40, "output_tokens": 2,
             "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
            {"type": "fallback_message", "model": HAIKU, "input_tokens": 40, "output_tokens": 9,
             "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
        ]},
    })
}

#[tokio::test]
async fn a_server_side_chain_is_recorded_with_the_last_fallbacks_model_and_the_declined_tokens() {
    let body = Bytes::from(served_by_chain_json().to_string());
    let done = exchange(
        RefusalGuardLayer::new(),
        vec![Reply::Json(body.clone())],
        messages(OPUS, false, "x"),
    )
    .await;
    assert_eq!(done.body, body, "passed through byte for byte");
    let record = &done.sink.records()[0];
    assert_eq!(record.outcome, Outcome::Fallback);
    assert_eq!(record.model.as_deref(), Some(OPUS));
    assert_eq!(record.served_model.as_deref(), Some(HAIKU));
    let usage = record.usage.expect("the declined fallbacks' tokens");
    assert_eq!(
        (usage.input_tokens, usage.output_tokens),
        (Some(80), Some(3))
    );
    let report = Report::from_records(done.sink.records());
    assert_eq!(report.refused_tokens.input_tokens, Some(80));

    // The same chain streamed: the blocks as they come, the iterations on
    // the final message_delta.
    let chain = served_by_chain_json();
    let mut start = message_start(HAIKU);
    start["message"]["id"] = json!("msg_chain");
    let stream = anthropic_stream(&[
        start,
        block_start(0, chain["content"][0].clone()),
        block_stop(0),
        block_start(1, chain["content"][1].clone()),
        block_stop(1),
        block_start(2, json!({"type": "text", "text": ""})),
        text_delta(2, "answer"),
        block_stop(2),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": chain["usage"]}),
        message_stop(),
    ]);
    let done = exchange(
        RefusalGuardLayer::new(),
        vec![Reply::sse(&stream)],
        messages(OPUS, true, "x"),
    )
    .await;
    assert_eq!(done.body, stream);
    let record = &done.sink.records()[0];
    assert_eq!(record.served_model.as_deref(), Some(HAIKU));
    assert_eq!(record.usage.unwrap().output_tokens, Some(3));
}

#[tokio::test]
async fn a_sticky_routed_turn_with_only_the_serving_iteration_is_no_refusal() {
    let mut chain = served_by_chain_json();
    chain["content"] = json!([{"type": "text", "text": "answer"}]);
    chain["usage"]["iterations"] = json!([chain["usage"]["iterations"][2].clone()]);
    let body = Bytes::from(chain.to_string());
    let done = exchange(
        RefusalGuardLayer::new(),
        vec![Reply::Json(body.clone())],
        messages(OPUS, false, "x"),
    )
    .await;
    done.assert_untouched(&body);
}

// ---- fallback credit --------------------------------------------------------

#[tokio::test]
async fn what_became_of_a_credit_token_is_recorded_on_its_fallback_and_counted() {
    let refusal = json!({"id": "msg_a", "type": "message", "role": "assistant", "model": OPUS,
        "content": [], "stop_reason": "refusal", "stop_sequence": null,
        "stop_details": {"type": "refusal", "category": "cyber", "explanation": null,
            "fallback_credit_token": "tok-1", "fallback_has_prefill_claim": false},
        "usage": {"input_tokens": 10, "output_tokens": 0}});
    let served = json!({"id": "msg_b", "type": "message", "role": "assistant", "model": SONNET,
        "content": [{"type": "text", "text": "answer"}], "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 4,
            "fallback_credit": {"status": {"type": "not_applied", "reason": "expired"}}}});
    let replies = vec![
        Reply::Json(Bytes::from(refusal.to_string())),
        Reply::Json(Bytes::from(served.to_string())),
    ];
    let layer = RefusalGuardLayer::new().fallback_chains(one_chain());
    let done = exchange(layer, replies, messages(OPUS, false, "x")).await;
    assert_eq!(
        done.upstream.seen()[1].json()["fallback_credit_token"]["token"],
        "tok-1"
    );
    let record = &done.sink.records()[0];
    assert_eq!(record.prefill, Some(Prefill::NotClaimed));
    assert_eq!(record.attempts[0].fallback_credit, None);
    assert_eq!(
        record.attempts[1].fallback_credit,
        Some(FallbackCredit::not_applied("expired"))
    );
    let line = String::from_utf8(record.to_json_line()).unwrap();
    assert!(
        line.contains(r#""fallback_credit":{"status":"not_applied","reason":"expired"}"#),
        "{line}"
    );
    let report = Report::from_records(done.sink.records());
    assert_eq!(report.fallback_credit["not_applied:expired"], 1);

    // A fallback that refuses says what became of the token too.
    let replies = vec![
        Reply::sse(&refusal_with(
            OPUS,
            "msg_a",
            json!({"fallback_credit_token": "tok-2"}),
        )),
        Reply::sse(&anthropic_stream(&[
            message_start(SONNET),
            json!({"type": "message_delta", "delta": {"stop_reason": "refusal",
                "stop_details": {"type": "refusal", "category": "cyber"}},
                "usage": {"output_tokens": 1, "fallback_credit": {"status": {"type": "redeemed"}}}}),
            message_stop(),
        ])),
    ];
    let layer = RefusalGuardLayer::new()
        .fallback_chains(one_chain())
        .rescue(false);
    let done = exchange(layer, replies, messages(OPUS, true, "x")).await;
    let record = &done.sink.records()[0];
    assert_eq!(record.reason, Some(DeadReason::StillRefused));
    assert_eq!(record.attempts[1].result, AttemptResult::Refused);
    assert_eq!(
        record.attempts[1].fallback_credit,
        Some(FallbackCredit::Redeemed)
    );
    assert_eq!(
        record.prefill, None,
        "absent: unknown, left out of the line"
    );
}

// ---- a client-side chain marked as a server-side one --------------------------

#[tokio::test]
async fn the_handoff_marker_names_every_fallback_keeps_the_primarys_id_and_lists_iterations() {
    let replies = vec![
        Reply::sse(&refusal_with(OPUS, "msg_primary", json!({}))),
        Reply::sse(&refusal_with(SONNET, "msg_second", json!({}))),
        Reply::sse(&answer(HAIKU)),
    ];
    let layer = RefusalGuardLayer::new()
        .fallback_chains(chains())
        .handoff_marker(true);
    let done = exchange(layer, replies, messages(OPUS, true, "x")).await;
    let events = stream_events(&done.body);
    assert_eq!(events[0]["type"], "message_start");
    assert_eq!(events[0]["message"]["id"], "msg_primary");
    let blocks: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "content_block_start")
        .collect();
    let indices: Vec<u64> = blocks
        .iter()
        .map(|e| e["index"].as_u64().unwrap())
        .collect();
    assert_eq!(indices, [0, 1, 2]);
    assert_eq!(blocks[0]["content_block"]["from"]["model"], OPUS);
    assert_eq!(blocks[0]["content_block"]["to"]["model"], SONNET);
    assert_eq!(blocks[1]["content_block"]["from"]["model"], SONNET);
    assert_eq!(blocks[1]["content_block"]["to"]["model"], HAIKU);
    assert_eq!(blocks[2]["content_block"]["type"], "text");
    let delta = events
        .iter()
        .find(|e| e["type"] == "message_delta")
        .unwrap();
    let iterations: Vec<(&str, &str)> = delta["usage"]["iterations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["type"].as_str().unwrap(), e["model"].as_str().unwrap()))
        .collect();
    assert_eq!(
        iterations,
        [
            ("message", OPUS),
            ("message", SONNET),
            ("fallback_message", HAIKU)
        ]
    );
    // The primary's refused output: message_start's input, the delta's output.
    assert_eq!(delta["usage"]["iterations"][0]["input_tokens"], 10);
    assert_eq!(delta["usage"]["iterations"][0]["output_tokens"], 2);
}

// ---- a fallback served as a stream ----------------------------------------

/// A fallback's streamed answer in two chunks: the first has the output
/// the hold decides on, the second the end, whose `message_delta` says what
/// became of the credit token the fallback presented.
fn fallback_answer_in_two_chunks() -> Vec<Bytes> {
    let events = text_answer(SONNET, "answer from the fallback");
    let mut end = events[4].clone();
    end["usage"] = json!({"output_tokens": 6, "fallback_credit": {"status": {"type": "redeemed"}}});
    vec![
        anthropic_stream(&events[..3]),
        anthropic_stream(&[events[3].clone(), end, events[5].clone()]),
    ]
}

fn credit_refusal() -> Reply {
    Reply::sse(&refusal_with(
        OPUS,
        "msg_a",
        json!({"fallback_credit_token": "tok-3", "fallback_has_prefill_claim": false}),
    ))
}

#[tokio::test]
async fn a_streamed_fallback_is_recorded_when_its_stream_ends_with_what_its_end_said() {
    let replies = vec![
        credit_refusal(),
        Reply::Sse(fallback_answer_in_two_chunks()),
    ];
    let layer = RefusalGuardLayer::new().fallback_chains(one_chain());
    let done = exchange(layer, replies, messages(OPUS, true, "x")).await;
    assert_eq!(
        done.body,
        fallback_answer_in_two_chunks().concat(),
        "the fallback as it came"
    );
    let records = done.sink.records();
    assert_eq!(records.len(), 1);
    let record = &records[0];
    assert_eq!(record.outcome, Outcome::Fallback);
    assert_eq!(record.attempts[1].result, AttemptResult::Served);
    assert_eq!(
        record.attempts[1].fallback_credit,
        Some(FallbackCredit::Redeemed),
        "read from the message_delta that came after the hold decided"
    );
    let report = Report::from_records(records.clone());
    assert_eq!(report.fallback_credit["redeemed"], 1);
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        refusal_guard::telemetry::record_refusal(record)
    });
    let text = handle.render();
    let redeemed = [("status", "redeemed")];
    assert_eq!(
        support::prometheus::sample(&text, "refusal_guard_fallback_credit_total", &redeemed),
        Some(1.0),
        "{text}"
    );
}

#[tokio::test]
async fn a_client_that_leaves_a_served_fallback_mid_stream_still_gets_one_record() {
    use http_body_util::BodyExt;
    use tower::{Layer, ServiceExt};

    let upstream = Upstream::new(vec![
        credit_refusal(),
        Reply::Sse(fallback_answer_in_two_chunks()),
    ]);
    let sink = refusal_guard::telemetry::MemorySink::new();
    let guard = RefusalGuardLayer::new()
        .fallback_chains(one_chain())
        .telemetry(sink.clone())
        .layer(upstream.service());
    let response = guard.oneshot(messages(OPUS, true, "x")).await.unwrap();
    let handle = response
        .extensions()
        .get::<refusal_guard::RefusalHandle>()
        .cloned()
        .unwrap();
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap();
    assert_eq!(
        first.data_ref().unwrap(),
        &fallback_answer_in_two_chunks()[0]
    );
    assert!(sink.is_empty(), "not recorded before the stream ends");
    assert!(!handle.is_settled());
    drop(body);
    let records = sink.records();
    assert_eq!(records.len(), 1, "one record, written as the body went");
    let record = &records[0];
    assert_eq!(
        record.outcome,
        Outcome::Fallback,
        "the fallback did serve output"
    );
    // A drop cannot tell an abandoned stream from a finished one (SDKs
    // close on the last event), so the attempt stays served; its end's
    // figures are not invented.
    assert_eq!(record.attempts[1].result, AttemptResult::Served);
    assert_eq!(
        record.attempts[1].fallback_credit, None,
        "its end never came"
    );
    let line = String::from_utf8(record.to_json_line()).unwrap();
    assert!(!line.contains(r#""result":"cut""#), "{line}");
    assert!(handle.is_settled());
}
