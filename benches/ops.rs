//! What metrics cost per guarded request: a short Anthropic stream through
//! the guard with no recorder installed (the library default) and with the
//! Prometheus recorder the admin listener installs, against the bare inner
//! service, in the same run.
//!
//! `cargo bench -p refusal-guard-proxy --features bedrock --bench ops`. Each request is driven to its end on a
//! current-thread runtime inside `metrics::with_local_recorder`, so that the
//! variants differ only in the recorder.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use http_body_util::{BodyExt, Full};
use metrics_exporter_prometheus::PrometheusBuilder;
use refusal_guard::telemetry::MetricsSink;
use refusal_guard::RefusalGuardLayer;
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

/// A short answer: one event per chunk.
fn short_stream() -> Vec<Bytes> {
    let event = |v: serde_json::Value| {
        Bytes::from(format!(
            "event: {}\ndata: {}\n\n",
            v["type"].as_str().unwrap(),
            v
        ))
    };
    let mut chunks = vec![
        event(
            json!({"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"model":"claude","usage":{"input_tokens":1,"output_tokens":1}}}),
        ),
        event(
            json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        ),
    ];
    for i in 0..20 {
        chunks.push(event(
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":format!("token {i} ")}}),
        ));
    }
    chunks.push(event(json!({"type":"content_block_stop","index":0})));
    chunks.push(event(
        json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":20}}),
    ));
    chunks.push(event(json!({"type":"message_stop"})));
    chunks
}

fn request() -> http::Request<Full<Bytes>> {
    let body = json!({"model":"claude","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"Answer briefly."}]});
    http::Request::post("https://api.anthropic.com/v1/messages")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

fn inner(
    chunks: Vec<Bytes>,
) -> impl Service<
    http::Request<Full<Bytes>>,
    Response = http::Response<Chunks>,
    Error = Infallible,
    Future = impl Send,
> + Clone
       + Send
       + 'static {
    tower::service_fn(move |_request: http::Request<Full<Bytes>>| {
        let chunks = chunks.clone();
        async move {
            Ok(http::Response::builder()
                .header("content-type", "text/event-stream")
                .body(Chunks(chunks.into()))
                .unwrap())
        }
    })
}

async fn drive<S, B>(service: S) -> usize
where
    S: Service<http::Request<Full<Bytes>>, Response = http::Response<B>>,
    S::Error: std::fmt::Debug,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let response = service.oneshot(request()).await.unwrap();
    let body = response.into_body().collect().await.unwrap();
    body.to_bytes().len()
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let prometheus = PrometheusBuilder::new().build_recorder();
    let noop = metrics::NoopRecorder;
    let chunks = short_stream();
    let mut group = c.benchmark_group("short_stream");
    let bare = inner(chunks.clone());
    group.bench_function("bare", |b| b.iter(|| runtime.block_on(drive(bare.clone()))));
    let guarded = RefusalGuardLayer::new()
        .telemetry(MetricsSink::new())
        .layer(inner(chunks.clone()));
    group.bench_function("guarded_no_recorder", |b| {
        b.iter(|| metrics::with_local_recorder(&noop, || runtime.block_on(drive(guarded.clone()))))
    });
    group.bench_function("guarded_prometheus", |b| {
        b.iter(|| {
            metrics::with_local_recorder(&prometheus, || runtime.block_on(drive(guarded.clone())))
        })
    });
    group.finish();
    // The series the recorder kept, so a run shows what was recorded.
    let rendered = prometheus.handle().render();
    assert!(rendered.contains("refusal_guard_requests_total"));
}

criterion_group!(benches, bench);
criterion_main!(benches);
