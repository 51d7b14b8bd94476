//! Every Anthropic fixture gets its verdict (from `tests/fixtures/README.md`
//! of the shared set), streaming and JSON, under every single split point of
//! its bytes and under random chunkings; what is not recovered comes out
//! byte-identical.
//!
//! Fixtures: `tests/fixtures/anthropic/` (copied from the shared fixture set;
//! sources and licences in its `SOURCES.md` and `LICENSES/`).
mod common;

use bytes::Bytes;
use common::*;
use refusal_guard::refusal::{DeadReason, RefusalKind};
use refusal_guard::telemetry::MemorySink;
use refusal_guard::{Outcome, RefusalGuardLayer, RefusalHandle};
use serde_json::Value;
use tower::Layer;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Verdict {
    None,
    /// A provider-served fallback: no refusal to recover, but one to record.
    ServerFallback,
    Empty(Option<&'static str>),
    Partial,
    Error,
}
use Verdict::*;

/// One recorded response: status, content type, body.
struct Exchange {
    status: u16,
    content_type: &'static str,
    body: Bytes,
}

fn sse(name: &str) -> Vec<Exchange> {
    vec![Exchange {
        status: 200,
        content_type: "text/event-stream",
        body: fixture(name),
    }]
}

fn json(name: &str) -> Vec<Exchange> {
    vec![Exchange {
        status: 200,
        content_type: "application/json",
        body: fixture(name),
    }]
}

/// vercel/ai `*.chunks.txt`: one `data:` payload a line; Anthropic streams
/// name each event, so each becomes `event: <type>` + `data: <line>`.
fn chunks(name: &str) -> Vec<Exchange> {
    let text = String::from_utf8(fixture(name).to_vec()).unwrap();
    let mut body = String::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let kind = serde_json::from_str::<Value>(line)
            .ok()
            .and_then(|v| v["type"].as_str().map(str::to_owned))
            .unwrap_or_default();
        body.push_str(&format!("event: {kind}\ndata: {line}\n\n"));
    }
    vec![Exchange {
        status: 200,
        content_type: "text/event-stream",
        body: Bytes::from(body),
    }]
}

/// Python inline-snapshot cassettes: a list of exchanges whose response body
/// is a string (SSE) or an object (JSON).
fn cassette(name: &str) -> Vec<Exchange> {
    let all: Value = serde_json::from_slice(&fixture(name)).unwrap();
    all.as_array()
        .unwrap()
        .iter()
        .map(|exchange| {
            let response = &exchange["response"];
            let status = response["status_code"].as_u64().unwrap() as u16;
            match &response["body"] {
                Value::String(text) => Exchange {
                    status,
                    content_type: "text/event-stream",
                    body: Bytes::from(text.clone()),
                },
                other => Exchange {
                    status,
                    content_type: "application/json",
                    body: Bytes::from(serde_json::to_vec(other).unwrap()),
                },
            }
        })
        .collect()
}

const P: &str = "anthropic/anthropic-sdk-python/";
const C: &str = "anthropic/anthropic-sdk-python/cassettes/";
const T: &str = "anthropic/anthropic-sdk-typescript/";
const G: &str = "anthropic/anthropic-sdk-go/";
const V: &str = "anthropic/vercel-ai/";

fn table() -> Vec<(String, Vec<Exchange>, Vec<Verdict>)> {
    let cyber = Some("cyber");
    let mut rows: Vec<(String, Vec<Exchange>, Vec<Verdict>)> = Vec::new();
    let mut add = |name: String, exchanges: Vec<Exchange>, verdicts: Vec<Verdict>| {
        assert_eq!(exchanges.len(), verdicts.len(), "{name}");
        rows.push((name, exchanges, verdicts));
    };
    for (file, verdict) in [
        ("stream-a-refusal.sse", Partial),
        ("stream-a-toolrefusal.sse", Partial),
        ("stream-b-fallback.sse", None),
        ("basic_response.txt", None),
        ("compaction_response.txt", None),
        ("fallback_credit_response.txt", None),
        ("fallback_response.txt", ServerFallback),
        ("incomplete_partial_json_response.txt", None),
        ("refusal_response.txt", Empty(cyber)),
        ("tool_use_response.txt", None),
    ] {
        add(
            format!("{P}{file}"),
            sse(&format!("{P}{file}")),
            vec![verdict],
        );
    }
    for (file, verdicts) in [
        ("9381e2b7-7fa1-46f7-9f78-46dc8431ea9d.json", vec![None]),
        ("d7092a7d-b723-4470-8fb0-da138cd103a1.json", vec![None]),
        ("924cfccc-c863-44ed-9838-c36b37416eaf.json", vec![None]),
        (
            "d743d628-16aa-4c9f-ae78-51deb578f746.json",
            vec![Error, Error, None],
        ),
        (
            "a8b7dbb8-2321-4624-abdb-7ba2136b5c38.json",
            vec![Error, Error, None],
        ),
        ("bd7029d5-d8d4-4e06-be3a-2ac9c60803a6.json", vec![None]),
        ("c11eefc7-fff0-4466-8453-42eef73b8876.json", vec![None]),
        (
            "092be1de-d3f8-4c22-a4ea-a7ad54689836.json",
            vec![None, None],
        ),
        (
            "10e53c1d-51be-4c64-b5bf-99adb3fa4719.json",
            vec![None, None],
        ),
        ("32da0815-2270-4d29-87be-3b5b63ab42e2.json", vec![None]),
        (
            "555fb399-a54c-455b-9ac5-2c9673f18e12.json",
            vec![None, None],
        ),
        (
            "771c64ff-a0af-4cd9-8080-a5a539da7cb9.json",
            vec![None, None],
        ),
        (
            "956fa2fe-8752-4f7c-8f9a-33735e62b898.json",
            vec![None, None],
        ),
        (
            "a8ac789b-f856-48cd-9ff3-d5f36799e432.json",
            vec![None, None],
        ),
        (
            "b38bbf6c-9a76-40ca-b09d-7a3911776e0f.json",
            vec![None, None],
        ),
        (
            "e075a6c2-de4d-4125-9709-f0e178058190.json",
            vec![None, None],
        ),
        (
            "f59a9391-643b-422c-96dc-1f28bc7ea4d7.json",
            vec![None, Error],
        ),
        (
            "64fe7974-681a-4023-9848-b32ba39c8664.json",
            vec![None, None],
        ),
    ] {
        add(
            format!("{C}{file}"),
            cassette(&format!("{C}{file}")),
            verdicts,
        );
    }
    for file in [
        "basic_response.txt",
        "incomplete_partial_json_response.txt",
        "tool_use_response.txt",
    ] {
        add(format!("{T}{file}"), sse(&format!("{T}{file}")), vec![None]);
    }
    for (file, verdict) in [
        ("fallback-end.sse", None),
        ("fallback-tooluse.sse", None),
        ("refusal.sse", Partial),
        // The go-vcr cassettes' response bodies, extracted verbatim.
        ("tool_runner_next_streaming.0.sse", None),
        ("tool_runner_streaming_all.0.sse", None),
        ("tool_runner_streaming_all.1.sse", None),
    ] {
        add(
            format!("{G}{file}"),
            sse(&format!("{G}{file}")),
            vec![verdict],
        );
    }
    for (file, verdict) in [
        ("anthropic-refusal.chunks.txt", Empty(cyber)),
        ("anthropic-fallback.chunks.txt", ServerFallback),
        ("anthropic-text.chunks.txt", None),
        ("anthropic-tool-no-args.chunks.txt", None),
        ("anthropic-clear-thinking.1.chunks.txt", None),
        ("anthropic-mcp.1.chunks.txt", None),
        ("anthropic-message-delta-input-tokens.chunks.txt", None),
        ("duplicate-message-start.chunks.txt", None),
        ("spliced-message-start.chunks.txt", None),
    ] {
        add(
            format!("{V}{file}"),
            chunks(&format!("{V}{file}")),
            vec![verdict],
        );
    }
    for (file, verdict) in [
        ("anthropic-refusal.json", Empty(cyber)),
        ("anthropic-refusal-no-details.json", Empty(Option::None)),
        ("anthropic-fallback.json", ServerFallback),
        ("anthropic-text.json", None),
        ("anthropic-tool-no-args.json", None),
        ("anthropic-clear-thinking.1.json", None),
        ("anthropic-web-fetch-tool.error.json", None),
    ] {
        add(
            format!("{V}{file}"),
            json(&format!("{V}{file}")),
            vec![verdict],
        );
    }
    rows
}

/// Runs one exchange through a guard with rescue off (so an empty refusal is
/// delivered as sent) and checks the verdict.
async fn check(name: &str, exchange: &Exchange, chunks: Vec<Bytes>, verdict: Verdict) {
    let upstream = Upstream::new(vec![Reply::Raw {
        status: exchange.status,
        content_type: exchange.content_type.to_owned(),
        chunks,
    }]);
    let sink = MemorySink::new();
    let mut guard = RefusalGuardLayer::new()
        .rescue(false)
        .telemetry(sink.clone())
        .layer(upstream.service());
    let stream = exchange.content_type == "text/event-stream";
    let request = post(
        "/v1/messages",
        &messages_request("claude-opus-4-7", stream, "hi"),
    );
    let (parts, body) = call(&mut guard, request).await;
    assert_eq!(body, exchange.body, "{name}: bytes changed");
    assert_eq!(parts.status.as_u16(), exchange.status, "{name}");
    assert_eq!(upstream.seen().len(), 1, "{name}: extra request");
    let handle = parts.extensions.get::<RefusalHandle>().cloned();
    let records = sink.records();
    match verdict {
        None | Error => assert!(records.is_empty(), "{name}: {records:?}"),
        ServerFallback => {
            assert_eq!(records.len(), 1, "{name}");
            assert_eq!(records[0].outcome, Outcome::Fallback, "{name}");
            assert!(records[0].served_model.is_some(), "{name}: fallback target");
        }
        Partial => {
            assert_eq!(records.len(), 1, "{name}: {records:?}");
            assert_eq!(records[0].outcome, Outcome::Partial, "{name}");
            assert_eq!(records[0].kind, Some(RefusalKind::Partial), "{name}");
        }
        Empty(category) => {
            assert_eq!(records.len(), 1, "{name}: {records:?}");
            assert_eq!(records[0].outcome, Outcome::Dead, "{name}");
            assert_eq!(records[0].reason, Some(DeadReason::RescueOff), "{name}");
            assert_eq!(records[0].kind, Some(RefusalKind::Empty), "{name}");
            assert_eq!(records[0].category.as_deref(), category, "{name}");
        }
    }
    if exchange.status == 200 {
        let handle = handle.expect("guarded responses carry a handle");
        assert!(
            handle.is_settled(),
            "{name}: handle not settled after the body ended"
        );
        assert_eq!(handle.get().is_some(), !records.is_empty(), "{name}");
    }
}

#[tokio::test]
async fn every_fixture_whole() {
    let mut count = 0;
    for (name, exchanges, verdicts) in table() {
        for (exchange, verdict) in exchanges.iter().zip(verdicts) {
            check(&name, exchange, vec![exchange.body.clone()], verdict).await;
            count += 1;
        }
    }
    assert!(count >= 60, "only {count} exchanges");
}

#[tokio::test]
async fn every_fixture_at_every_split_point() {
    for (name, exchanges, verdicts) in table() {
        for (exchange, verdict) in exchanges.iter().zip(verdicts) {
            for cut in 1..exchange.body.len() {
                let chunks = split_at(&exchange.body, &[cut]);
                check(&format!("{name} @{cut}"), exchange, chunks, verdict).await;
            }
        }
    }
}

#[tokio::test]
async fn every_fixture_under_random_chunkings() {
    let mut rng = Rng::new(0x5eed);
    for (name, exchanges, verdicts) in table() {
        for (exchange, verdict) in exchanges.iter().zip(verdicts) {
            for round in 0..24 {
                let max = [1, 3, 7, 64, 512][round % 5];
                let cuts = rng.cuts(exchange.body.len(), max);
                let chunks = split_at(&exchange.body, &cuts);
                check(&format!("{name} round {round}"), exchange, chunks, verdict).await;
            }
        }
    }
}
