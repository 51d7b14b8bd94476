//! Bedrock event streams through the guard at every split point: the same
//! verdict, and the bytes the client gets, whatever the network's chunking
//! (every cut in two, and random chunkings as a property check).

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use refusal_guard::recovery::FallbackChains;
use refusal_guard::{Outcome, RefusalGuardLayer};
use serde_json::{json, Value};
use support::bedrock as br;
use support::chunking::every_chunking;
use support::{exchange, Reply};

const OPUS: &str = "us.anthropic.claude-opus-4-7-v1:0";
const SONNET: &str = "us.anthropic.claude-sonnet-4-5-v1:0";
const EVENTSTREAM: &str = "application/vnd.amazon.eventstream";

fn request(path: &str, body: Value) -> Request<Full<Bytes>> {
    Request::post(format!(
        "https://bedrock-runtime.us-east-1.amazonaws.com{path}"
    ))
    .header("content-type", "application/json")
    .body(Full::new(Bytes::from(body.to_string())))
    .unwrap()
}

fn invoke() -> Request<Full<Bytes>> {
    request(
        &format!("/model/{OPUS}/invoke-with-response-stream"),
        json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64,
            "messages": [{"role": "user", "content": "hi"}]}),
    )
}

fn stream(chunks: &[Bytes]) -> Bytes {
    chunks.concat().into()
}

fn chained() -> RefusalGuardLayer {
    RefusalGuardLayer::new().fallback_chains(FallbackChains::new().chain(OPUS, [SONNET]))
}

#[tokio::test]
async fn an_answer_reaches_the_client_byte_exact_at_every_split() {
    let answer = stream(&br::invoke_stream(&br::answer_events(OPUS, "Hello there.")));
    for chunks in every_chunking(&answer) {
        let replies = vec![Reply::raw(200, EVENTSTREAM, chunks)];
        let done = exchange(chained(), replies, invoke()).await;
        done.assert_untouched(&answer);
    }
}

#[tokio::test]
async fn a_refusal_is_recovered_at_every_split_and_the_fallback_served_as_sent() {
    let refusal = stream(&br::invoke_stream(&br::refusal_events(OPUS, true)));
    let answer = stream(&br::invoke_stream(&br::answer_events(SONNET, "Recovered.")));
    for chunks in every_chunking(&refusal) {
        let replies = vec![
            Reply::raw(200, EVENTSTREAM, chunks),
            Reply::raw(200, EVENTSTREAM, vec![answer.clone()]),
        ];
        let done = exchange(chained(), replies, invoke()).await;
        let seen = done.assert_served_on_the_second_call(&answer, "the fallback's frames");
        assert!(seen[1].uri.to_string().contains(SONNET), "{}", seen[1].uri);
        assert_eq!(done.sink.records()[0].outcome, Outcome::Fallback);
    }
}

#[tokio::test]
async fn a_converse_stream_filter_is_seen_at_every_split() {
    let filtered = stream(
        &[
            br::converse_event("messageStart", &json!({"role": "assistant"})),
            br::converse_event("messageStop", &json!({"stopReason": "content_filtered"})),
            br::converse_event(
                "metadata",
                &json!({"usage": {"inputTokens": 3, "outputTokens": 0}}),
            ),
        ]
        .map(Bytes::from),
    );
    let body = json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}]});
    let path = format!("/model/{OPUS}/converse-stream");
    for chunks in every_chunking(&filtered) {
        // Rescue off, no chain: the refusal reaches the client as sent.
        let layer = RefusalGuardLayer::new().rescue(false);
        let done = exchange(
            layer,
            vec![Reply::raw(200, EVENTSTREAM, chunks)],
            request(&path, body.clone()),
        )
        .await;
        assert_eq!(done.body, filtered);
        let records = done.sink.records();
        assert_eq!(records[0].outcome, Outcome::Dead);
        assert_eq!(records[0].category.as_deref(), Some("content_filtered"));
    }
}
