//! What refused attempts cost: the usage a refused response reports reaches
//! its attempt in the record, the record's total, the JSONL log and the
//! report read from it, and the refused-tokens metric. Driven through the
//! proxy on loopback in front of the scripted mock upstream.
//!
//! The Prometheus recorder is process-wide: only the Anthropic test reads
//! it, and only the Claude models' samples, which no other test here makes.

use std::path::PathBuf;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use refusal_guard::refusal::{AttemptResult, AttemptStep, Outcome, Usage};
use refusal_guard::telemetry::{JsonlSink, MemorySink, MetricsSink, RefusalRecord};
use refusal_guard::RefusalGuardLayer;
use refusal_guard_proxy::Report;
use serde_json::{json, Value};
use support::chains;
use support::mock_upstream::MockUpstream;
use support::prometheus::sample;
use support::proxy::{bind_proxy, client, post_messages};

const STREAM_REFUSAL: &str = "usage/anthropic-refusal.sse";
const JSON_REFUSAL: &str = "usage/anthropic-refusal.json";
const STREAM_ANSWER: &str = "anthropic/anthropic-sdk-python/basic_response.txt";
const JSON_ANSWER: &str = "usage/anthropic-answer.json";

/// The stream refusal's cost: `message_start` said 1200 fresh input, 800
/// read from and 100 written to the cache and 1 output token; its
/// `message_delta` raised the output to 7.
fn stream_refusal_usage() -> Usage {
    Usage::new()
        .input_tokens(1200)
        .output_tokens(7)
        .cache_read_tokens(800)
        .cache_write_tokens(100)
}

/// The JSON refusal's `usage`.
fn json_refusal_usage() -> Usage {
    Usage::new()
        .input_tokens(300)
        .output_tokens(2)
        .cache_read_tokens(50)
        .cache_write_tokens(0)
}

/// A fresh log path under the system temp dir.
fn log_path(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("refusal-guard-usage-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir.join("refusals.jsonl")
}

async fn serve(upstream: &str, layer: RefusalGuardLayer) -> String {
    let (proxy, listener, url) = bind_proxy(upstream, &layer).await;
    tokio::spawn(proxy.serve(listener, std::future::pending()));
    url
}

/// Waits (bounded) until `memory` holds `count` records, and returns them.
async fn records(memory: &MemorySink, count: usize) -> Vec<RefusalRecord> {
    let waited = tokio::time::timeout(Duration::from_secs(5), async {
        while memory.len() < count {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "only {} records", memory.len());
    memory.records()
}

/// Posts a Messages request for `claude-opus-4-7` and reads the answer.
async fn ask(proxy: &str, script: &str, id: &str, stream: bool) -> String {
    let body = json!({
        "model": "claude-opus-4-7", "max_tokens": 64, "stream": stream,
        "messages": [{"role": "user", "content": format!("usage test {id}")}],
    });
    ok_text(post_messages(proxy, script, id, &body)).await
}

/// Sends `request`, expects a 200 and reads the answer's text.
async fn ok_text(request: reqwest::RequestBuilder) -> String {
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.text().await.unwrap()
}

#[tokio::test]
async fn refused_anthropic_attempts_are_accounted_in_records_report_and_metrics() {
    let metrics = PrometheusBuilder::new().install_recorder().unwrap();
    let mock = MockUpstream::start().await.unwrap();
    let memory = MemorySink::new();
    let path = log_path("anthropic");
    let layer = RefusalGuardLayer::new()
        .fallback_chains(chains())
        .telemetry((
            memory.clone(),
            MetricsSink::new(),
            JsonlSink::open(&path).unwrap(),
        ));
    let proxy = serve(&mock.url(), layer).await;

    // A stream: Opus refuses, Sonnet refuses the same way, Haiku answers.
    let script = format!("{STREAM_REFUSAL},{STREAM_REFUSAL},{STREAM_ANSWER}");
    let text = ask(&proxy, &script, "stream", true).await;
    assert!(text.contains("message_stop"), "{text}");
    assert!(
        !text.contains("\"refusal\""),
        "the client got the answer: {text}"
    );
    // A JSON body: Opus refuses, Sonnet answers.
    let text = ask(
        &proxy,
        &format!("{JSON_REFUSAL},{JSON_ANSWER}"),
        "json",
        false,
    )
    .await;
    assert!(text.contains("Here is a careful answer."), "{text}");

    let records = records(&memory, 2).await;
    let (stream, whole) = (&records[0], &records[1]);
    assert_eq!(stream.outcome, Outcome::Fallback);
    let steps: Vec<_> = stream
        .attempts
        .iter()
        .map(|a| (a.step, a.model.as_deref().unwrap(), a.result, a.usage))
        .collect();
    assert_eq!(
        steps,
        [
            (
                AttemptStep::Original,
                "claude-opus-4-7",
                AttemptResult::Refused,
                Some(stream_refusal_usage())
            ),
            (
                AttemptStep::Fallback,
                "claude-sonnet-4-5",
                AttemptResult::Refused,
                Some(stream_refusal_usage())
            ),
            // Served answers are the client's to account.
            (
                AttemptStep::Fallback,
                "claude-haiku-4-5",
                AttemptResult::Served,
                None
            ),
        ]
    );
    assert_eq!(
        stream.usage,
        Some(stream_refusal_usage() + stream_refusal_usage())
    );
    assert_eq!(whole.category.as_deref(), Some("bio"));
    assert_eq!(whole.attempts[0].usage, Some(json_refusal_usage()));
    assert_eq!(whole.attempts[1].usage, None);
    assert_eq!(whole.usage, Some(json_refusal_usage()));

    // The log carries the same, and the report read from it totals it by
    // model and category.
    let (report, skipped) = Report::read_path(&path).unwrap();
    assert_eq!((report.total, skipped), (2, 0));
    let total = stream_refusal_usage() + stream_refusal_usage() + json_refusal_usage();
    assert_eq!(report.refused_tokens, total);
    assert_eq!(
        report.refused_tokens_by_model["claude-opus-4-7"],
        stream_refusal_usage() + json_refusal_usage()
    );
    assert_eq!(
        report.refused_tokens_by_model["claude-sonnet-4-5"],
        stream_refusal_usage()
    );
    assert_eq!(
        report.refused_tokens_by_category["cyber"],
        stream_refusal_usage() + stream_refusal_usage()
    );
    assert_eq!(
        report.refused_tokens_by_category["bio"],
        json_refusal_usage()
    );
    let shown = report.to_string();
    assert!(
        shown.contains(
            "Tokens spent on refused attempts: 4566 (input 2700, output 16, cache read 1650, cache write 200)"
        ),
        "{shown}"
    );
    assert!(
        shown.contains(
            "claude-sonnet-4-5: 2107 (input 1200, output 7, cache read 800, cache write 100)"
        ),
        "{shown}"
    );
    let _ = std::fs::remove_dir_all(path.parent().unwrap());

    // The metric counts each refused attempt's tokens under the model that
    // refused, the category and the kind.
    let text = metrics.render();
    let name = "refusal_guard_refused_tokens_total";
    let tokens = |model: &str, category: &str, kind: &str| {
        sample(
            &text,
            name,
            &[("model", model), ("category", category), ("kind", kind)],
        )
    };
    assert_eq!(tokens("claude-opus-4-7", "cyber", "input"), Some(1200.0));
    assert_eq!(
        tokens("claude-opus-4-7", "cyber", "cache_read"),
        Some(800.0)
    );
    assert_eq!(
        tokens("claude-opus-4-7", "cyber", "cache_write"),
        Some(100.0)
    );
    assert_eq!(tokens("claude-sonnet-4-5", "cyber", "output"), Some(7.0));
    assert_eq!(tokens("claude-opus-4-7", "bio", "input"), Some(300.0));
    assert_eq!(tokens("claude-opus-4-7", "bio", "output"), Some(2.0));
    assert_eq!(
        tokens("claude-opus-4-7", "bio", "cache_write"),
        None,
        "zero counts nothing"
    );
    assert_eq!(
        tokens("claude-haiku-4-5", "cyber", "input"),
        None,
        "served: not counted"
    );
    assert_eq!(
        sample(&text, name, &[("model", "claude-opus-4-7")]),
        Some(2459.0),
        "{text}"
    );
}

/// Posts `body` to `path` on the proxy, playing `script`, and reads the answer.
async fn post(proxy: &str, path: &str, script: &str, body: Value) -> String {
    let request = client()
        .post(format!("{proxy}{path}"))
        .header("content-type", "application/json")
        .header("x-mock-script", script)
        .header("x-mock-id", path)
        .body(body.to_string());
    ok_text(request).await
}

#[tokio::test]
async fn openai_and_gemini_refusals_report_their_usage_in_the_same_words() {
    let mock = MockUpstream::start().await.unwrap();
    let memory = MemorySink::new();
    let proxy = serve(
        &mock.url(),
        RefusalGuardLayer::new().telemetry(memory.clone()),
    )
    .await;

    // Chat Completions stream: the usage comes in a last chunk without
    // choices, after the content filter's finish reason.
    let chat = json!({
        "model": "gpt-4o", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "usage test chat"}],
    });
    let script = "openai/hand-written/chat_content_filter_empty.sse,usage/chat-answer.sse";
    let text = post(&proxy, "/v1/chat/completions", script, chat).await;
    assert!(text.contains("Here is a careful answer."), "{text}");

    // Responses, as JSON: `input_tokens` counts the cached ones too.
    let responses = json!({"model": "gpt-4o", "input": "usage test responses"});
    let script = "usage/responses-filtered.json,usage/responses-answer.json";
    let text = post(&proxy, "/v1/responses", script, responses).await;
    assert!(text.contains("Here is a careful answer."), "{text}");

    // Gemini stream: every chunk repeats `usageMetadata`; thinking counts as
    // output, cached prompt tokens are not fresh input.
    let gemini = json!({"contents": [{"role": "user", "parts": [{"text": "usage test gemini"}]}]});
    let path = "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse";
    let script = "usage/gemini-safety.sse,usage/gemini-answer.sse";
    let text = post(&proxy, path, script, gemini).await;
    assert!(text.contains("Here is a careful answer."), "{text}");

    let records = records(&memory, 3).await;
    let expected = [
        Usage::new().input_tokens(12).output_tokens(0),
        Usage::new()
            .input_tokens(300)
            .output_tokens(3)
            .cache_read_tokens(600),
        Usage::new()
            .input_tokens(30)
            .output_tokens(25)
            .cache_read_tokens(10),
    ];
    for (record, usage) in records.iter().zip(expected) {
        assert_eq!(record.outcome, Outcome::Rescued, "{record:?}");
        assert_eq!(record.attempts[0].result, AttemptResult::Refused);
        assert_eq!(record.attempts[0].usage, Some(usage), "{record:?}");
        assert_eq!(record.attempts[1].usage, None);
        assert_eq!(record.usage, Some(usage));
    }
}
