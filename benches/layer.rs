//! The guard against the bare inner service, measured in the same run.
//!
//! `cargo bench -p refusal-guard-proxy --features bedrock --bench layer`. Each group has a `bare` baseline (the mock
//! inner service alone), the same traffic through `RefusalGuard`, and through
//! it with the opt-in text detector on; `docs/speed.md` reports the ratios.
//! `long_stream` is the framing and judging of a long stream (its throughput
//! is the answer's bytes); `request_400kb` an agent-sized request (a long
//! history and tool definitions) answered at once with a short stream, its
//! throughput the request's bytes: what reading the request's head costs;
//! `request_400kb_forwarded` the same request as a network client sends it
//! (16 KiB chunks, forwarded upstream as they arrive, the copy kept as its
//! chunks and its head located in them), to an upstream that reads it all.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use refusal_guard::{RefusalGuardLayer, RefusalHandle};
use serde_json::json;
use tower::{Layer, Service, ServiceExt};

/// A body that yields prepared chunks, as a network client would.
struct Chunks(VecDeque<Bytes>);

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(|c| Ok(http_body::Frame::data(c))))
    }
}

/// A long Anthropic answer: 4,000 text deltas with a ping every 200.
fn long_answer() -> Vec<String> {
    let event =
        |v: serde_json::Value| format!("event: {}\ndata: {}\n\n", v["type"].as_str().unwrap(), v);
    let mut events = vec![
        event(
            json!({"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"model":"claude","usage":{"input_tokens":1,"output_tokens":1}}}),
        ),
        event(
            json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        ),
    ];
    for i in 0..4000 {
        events.push(event(
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":format!("token {i} of a long answer ")}}),
        ));
        if i % 200 == 0 {
            events.push(event(json!({"type":"ping"})));
        }
    }
    events.push(event(json!({"type":"content_block_stop","index":0})));
    events.push(event(
        json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":4000}}),
    ));
    events.push(event(json!({"type":"message_stop"})));
    events
}

/// The long answer in 1 KiB network chunks, cut anywhere.
fn long_stream() -> Vec<Bytes> {
    let bytes = Bytes::from(long_answer().concat());
    (0..bytes.len())
        .step_by(1024)
        .map(|at| bytes.slice(at..(at + 1024).min(bytes.len())))
        .collect()
}

/// The long answer one event to a chunk, as a provider flushes it and as
/// the proxy mostly receives it.
fn event_chunks() -> Vec<Bytes> {
    long_answer().into_iter().map(Bytes::from).collect()
}

fn json_body() -> Vec<Bytes> {
    let text: String = (0..4000).map(|i| format!("word{i} ")).collect();
    let body = json!({"id":"m","type":"message","role":"assistant","model":"claude","content":[{"type":"text","text":text}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":4000}});
    vec![Bytes::from(body.to_string())]
}

fn request(body: &Bytes) -> http::Request<Full<Bytes>> {
    http::Request::post("https://api.anthropic.com/v1/messages")
        .header("content-type", "application/json")
        .body(Full::new(body.clone()))
        .unwrap()
}

/// A request body as a network client sends it, in 16 KiB chunks: the
/// guard forwards a boxed body as it arrives.
type Streamed = BoxBody<Bytes, Infallible>;

fn streamed_request(body: &Bytes) -> http::Request<Streamed> {
    let chunks = (0..body.len())
        .step_by(16 * 1024)
        .map(|at| body.slice(at..body.len().min(at + 16 * 1024)));
    http::Request::post("https://api.anthropic.com/v1/messages")
        .header("content-type", "application/json")
        .body(Chunks(chunks.collect()).boxed())
        .unwrap()
}

fn short_body(stream: bool) -> Bytes {
    let body = json!({"model":"claude","max_tokens":1024,"stream":stream,"messages":[{"role":"user","content":"Write a long answer."}]});
    Bytes::from(body.to_string())
}

/// About 400 KB, as an agent's turn carries: a system prompt, 40 tool
/// definitions and 60 turns of history, `"stream": true` last (as the
/// Python SDK orders it).
fn agent_body() -> Bytes {
    let prose =
        "The build failed in the linker; retry with the cache cleared and \"quoted\" paths.\n";
    let tools: Vec<_> = (0..40)
        .map(|i| json!({"name": format!("tool_{i}"), "description": prose.repeat(8), "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}))
        .collect();
    let messages: Vec<_> = (0..60)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            json!({"role": role, "content": [{"type": "text", "text": format!("Turn {i}. {}", prose.repeat(70))}]})
        })
        .collect();
    let body = json!({"model": "claude", "max_tokens": 4096, "system": prose.repeat(40), "tools": tools, "messages": messages, "stream": true});
    Bytes::from(body.to_string())
}

/// An upstream that reads the whole request, as a real one does, then
/// answers with `chunks`.
fn inner<Q>(
    chunks: Vec<Bytes>,
    content_type: &'static str,
) -> impl Service<
    http::Request<Q>,
    Response = http::Response<Chunks>,
    Error = Infallible,
    Future = impl Send,
> + Clone
       + Send
       + 'static
where
    Q: http_body::Body + Send + 'static,
    Q::Data: Send,
    Q::Error: std::fmt::Debug,
{
    tower::service_fn(move |request: http::Request<Q>| {
        let chunks = chunks.clone();
        async move {
            let read = request.into_body().collect().await.unwrap();
            assert!(!read.to_bytes().is_empty());
            Ok(http::Response::builder()
                .header("content-type", content_type)
                .body(Chunks(chunks.into()))
                .unwrap())
        }
    })
}

/// Sends `request`; `guarded` says whether the guard must have read its
/// head (a guarded response carries a handle), so that a guarded figure
/// never measures a request the guard let through unread.
async fn drive<S, Q, B>(service: S, request: http::Request<Q>, guarded: bool) -> usize
where
    S: Service<http::Request<Q>, Response = http::Response<B>>,
    S::Error: std::fmt::Debug,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let response = service.oneshot(request).await.unwrap();
    let handled = response.extensions().get::<RefusalHandle>().is_some();
    assert_eq!(handled, guarded, "guarded as expected");
    let answer = response.into_body().collect().await.unwrap();
    answer.to_bytes().len()
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let short_stream = short_body(true);
    let short_json = short_body(false);
    let agent = agent_body();
    let answer = event_chunks()[..24].to_vec();
    for (name, chunks, content_type, body, per_request) in [
        (
            "long_stream",
            long_stream(),
            "text/event-stream",
            &short_stream,
            false,
        ),
        (
            "event_chunks",
            event_chunks(),
            "text/event-stream",
            &short_stream,
            false,
        ),
        ("json", json_body(), "application/json", &short_json, false),
        ("request_400kb", answer, "text/event-stream", &agent, true),
    ] {
        let total: usize = if per_request {
            body.len()
        } else {
            chunks.iter().map(Bytes::len).sum()
        };
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Bytes(total as u64));
        let bare = inner(chunks.clone(), content_type);
        group.bench_function("bare", |b| {
            b.to_async(&runtime)
                .iter(|| drive(bare.clone(), request(body), false))
        });
        let guarded = RefusalGuardLayer::new().layer(inner(chunks.clone(), content_type));
        group.bench_function("guarded", |b| {
            b.to_async(&runtime)
                .iter(|| drive(guarded.clone(), request(body), true))
        });
        // The opt-in text detector's hold-back on an ordinary answer, against
        // the guard without it just above.
        let detecting = RefusalGuardLayer::new()
            .detect_text_refusals(true)
            .layer(inner(chunks.clone(), content_type));
        group.bench_function("guarded_text_detection", |b| {
            b.to_async(&runtime)
                .iter(|| drive(detecting.clone(), request(body), true))
        });
        group.finish();
    }
    let answer = event_chunks()[..24].to_vec();
    let mut group = c.benchmark_group("request_400kb_forwarded");
    group.throughput(Throughput::Bytes(agent.len() as u64));
    let bare = inner(answer.clone(), "text/event-stream");
    group.bench_function("bare", |b| {
        b.to_async(&runtime)
            .iter(|| drive(bare.clone(), streamed_request(&agent), false))
    });
    let guarded = RefusalGuardLayer::new().layer(inner(answer, "text/event-stream"));
    group.bench_function("guarded", |b| {
        b.to_async(&runtime)
            .iter(|| drive(guarded.clone(), streamed_request(&agent), true))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
