//! What the proxy adds to a streamed request, against a bare forwarder, in
//! the same run, over loopback.
//!
//! `cargo bench -p refusal-guard-proxy --features bedrock --bench proxy` (about a minute). An in-process mock upstream
//! streams a 200-event Anthropic answer (each event its own chunk) to a
//! `"stream": true` request, in three shapes: `proxy_200_events` (a ~20 KB
//! request, the answer as fast as it goes), `proxy_400kb_request` (a ~405 KB
//! request, an agent's turn: the guard forwards it as it arrives) and
//! `proxy_paced` (the ~20 KB request, one event every 500 µs: a long stream
//! at model speed, shortened); and `proxy_first_text` times the first
//! `text_delta` of an answer paced at one event a millisecond (what a user
//! waits for: the guard holds `message_start` until it has seen text), with
//! the difference to the floor in event intervals. The same request goes
//! `direct` to the mock, through `floor` (a bare hyper forwarder: hyper's
//! server, hyper-util's pooled client, bodies passed straight through) and
//! through `guard` (the crate's proxy with the default layer, access log
//! off). Each server runs
//! on its own thread and single-threaded runtime, like a process of its own;
//! the client sends one request at a time on a keep-alive connection. At the
//! end the bench prints the mean time per request of each and the ratio
//! guard ÷ floor, which is what the project tracks (the shared perf harness,
//! `../shared/perf/bench.sh`, measures the same thing across processes).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use http::{Request, Response};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use refusal_guard::RefusalGuardLayer;
use refusal_guard_proxy::{Proxy, Upstream};
use serde_json::json;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Events of text in the answer.
const EVENTS: usize = 200;

/// How every answer ends.
const LAST_EVENT: &[u8] = b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

/// The pace of the answer whose first text is timed: one event a
/// millisecond, the mock's timer's grain, far above the loopback's noise.
const FIRST_TEXT_PACE_US: u64 = 1_000;

/// A body that yields prepared chunks, each its own frame.
struct Chunks(VecDeque<Bytes>);

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(|chunk| Ok(Frame::data(chunk))))
    }
}

/// A body that yields prepared chunks, one every `pace` (the first at once).
struct Paced {
    chunks: VecDeque<Bytes>,
    pace: Duration,
    next: Pin<Box<tokio::time::Sleep>>,
}

impl Body for Paced {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        std::task::ready!(self.next.as_mut().poll(cx));
        let at = tokio::time::Instant::now() + self.pace;
        self.next.as_mut().reset(at);
        Poll::Ready(self.chunks.pop_front().map(|chunk| Ok(Frame::data(chunk))))
    }
}

/// The mock's answer: message_start, a text block of `EVENTS` 20-byte
/// deltas, message_delta and message_stop, one event per chunk.
fn answer() -> Vec<Bytes> {
    let event = |v: serde_json::Value| {
        Bytes::from(format!(
            "event: {}\ndata: {}\n\n",
            v["type"].as_str().unwrap(),
            v
        ))
    };
    let mut events = vec![
        event(
            json!({"type":"message_start","message":{"id":"msg_bench","type":"message","role":"assistant","content":[],"model":"claude-mock-1","stop_reason":null,"usage":{"input_tokens":5000,"output_tokens":1}}}),
        ),
        event(
            json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        ),
    ];
    for i in 0..EVENTS {
        events.push(event(
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":format!("word {i:04} of reply ")}}),
        ));
    }
    events.push(event(json!({"type":"content_block_stop","index":0})));
    events.push(event(
        json!({"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":EVENTS}}),
    ));
    events.push(event(json!({"type":"message_stop"})));
    events
}

/// A streamed request of a system prompt and `turns` turns: ~20 KB at 5,
/// ~405 KB at 120.
fn request_body(turns: usize) -> Bytes {
    let filler = "The quick brown fox jumps over the lazy dog. ".repeat(75);
    let turns: Vec<_> = (0..turns)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            json!({"role": role, "content": format!("Turn {i}. {filler}")})
        })
        .collect();
    let body = json!({
        "model": "claude-mock-1", "max_tokens": 1024, "stream": true,
        "system": format!("You are a helpful assistant. {filler}"),
        "messages": turns,
    });
    Bytes::from(body.to_string())
}

/// Runs `serve` on a thread of its own with a single-threaded runtime (as a
/// process of its own would) and returns the address it listens on.
fn spawn_server<F, Fut>(serve: F) -> SocketAddr
where
    F: FnOnce(tokio::net::TcpListener) -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            sender.send(listener.local_addr().unwrap()).unwrap();
            serve(listener).await;
        });
    });
    receiver.recv().unwrap()
}

/// Serves every connection on `listener` with `service` (HTTP/1).
async fn accept_loop<S, B>(listener: tokio::net::TcpListener, service: S)
where
    S: Fn(Request<Incoming>) -> Pin<Box<dyn Future<Output = Response<B>>>> + Clone + 'static,
    B: Body<Data = Bytes> + 'static,
    B::Error: Into<BoxError>,
{
    loop {
        let (stream, _) = listener.accept().await.unwrap();
        let _ = stream.set_nodelay(true);
        let service = service.clone();
        tokio::task::spawn_local(async move {
            let service = hyper::service::service_fn(move |request| {
                let response = service(request);
                async move { Ok::<_, Infallible>(response.await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Runs `accept_loop` inside a `LocalSet` (its tasks are not `Send`).
async fn local_accept_loop<S, B>(listener: tokio::net::TcpListener, service: S)
where
    S: Fn(Request<Incoming>) -> Pin<Box<dyn Future<Output = Response<B>>>> + Clone + 'static,
    B: Body<Data = Bytes> + 'static,
    B::Error: Into<BoxError>,
{
    tokio::task::LocalSet::new()
        .run_until(accept_loop(listener, service))
        .await;
}

/// The header that asks the mock for one event every so many µs.
const PACE_HEADER: &str = "x-bench-pace-us";

/// The mock upstream: reads the request whole, then streams the answer, one
/// event every [`PACE_HEADER`] µs if the request asks.
fn mock_upstream() -> SocketAddr {
    let answer = Arc::new(answer());
    spawn_server(move |listener| {
        local_accept_loop(listener, move |request: Request<Incoming>| {
            let answer = answer.clone();
            Box::pin(async move {
                let pace = request
                    .headers()
                    .get(PACE_HEADER)
                    .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
                let _ = request.into_body().collect().await;
                let chunks: VecDeque<Bytes> = answer.iter().cloned().collect();
                let body = match pace {
                    Some(us) => Paced {
                        chunks,
                        pace: Duration::from_micros(us),
                        next: Box::pin(tokio::time::sleep(Duration::ZERO)),
                    }
                    .boxed_unsync(),
                    None => Chunks(chunks).boxed_unsync(),
                };
                Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(body)
                    .unwrap()
            })
        })
    })
}

/// The floor: hyper's server and hyper-util's pooled client, bodies passed
/// straight through, the URL and `Host` rewritten.
fn floor(upstream: SocketAddr) -> SocketAddr {
    spawn_server(move |listener| {
        let client: Client<HttpConnector, Incoming> =
            Client::builder(TokioExecutor::new()).build(HttpConnector::new());
        local_accept_loop(listener, move |request: Request<Incoming>| {
            let client = client.clone();
            Box::pin(async move {
                let (mut parts, body) = request.into_parts();
                let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
                parts.uri = format!("http://{upstream}{path}").parse().unwrap();
                parts
                    .headers
                    .insert(http::header::HOST, upstream.to_string().parse().unwrap());
                match client.request(Request::from_parts(parts, body)).await {
                    Ok(response) => response.map(|body| body.map_err(BoxError::from).boxed()),
                    Err(error) => Response::builder()
                        .status(502)
                        .body(
                            Full::new(Bytes::from(error.to_string()))
                                .map_err(|never| match never {})
                                .boxed(),
                        )
                        .unwrap(),
                }
            })
        })
    })
}

/// The crate's proxy with the default layer, access log off.
fn guard(upstream: SocketAddr) -> SocketAddr {
    spawn_server(move |listener| async move {
        let upstream = Upstream::parse(&format!("http://{upstream}")).unwrap();
        let proxy = Proxy::new(upstream, &RefusalGuardLayer::new())
            .unwrap()
            .access_log(false);
        let _ = proxy.serve(listener, std::future::pending()).await;
    })
}

/// One shape of traffic: the request's body and the mock's pace (µs per
/// event, if paced).
struct Shape {
    group: &'static str,
    body: Bytes,
    pace_us: Option<u64>,
}

/// The request of `shape` to `target`.
fn request(target: &http::Uri, shape: &Shape) -> Request<Full<Bytes>> {
    let mut request = Request::post(target.clone())
        .header("content-type", "application/json")
        .header("anthropic-version", "2023-06-01")
        .header("x-api-key", "bench");
    if let Some(us) = shape.pace_us {
        request = request.header(PACE_HEADER, us);
    }
    request.body(Full::new(shape.body.clone())).unwrap()
}

/// Sends the request to `target` and reads the answer to its end.
async fn exchange(client: &Client<HttpConnector, Full<Bytes>>, target: &http::Uri, shape: &Shape) {
    let response = client.request(request(target, shape)).await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    assert!(bytes.ends_with(LAST_EVENT));
}

/// Sends the request to `target`, reads the answer to its end and returns
/// how long its first `text_delta` took to arrive: what a user waits for
/// (the guard holds `message_start` back until it has seen real output, so
/// its first byte comes with the first text).
async fn first_text(
    client: &Client<HttpConnector, Full<Bytes>>,
    target: &http::Uri,
    shape: &Shape,
) -> Duration {
    let started = Instant::now();
    let response = client.request(request(target, shape)).await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let mut body = response.into_body();
    let mut seen = Vec::new();
    let mut text_at = None;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            seen.extend_from_slice(&data);
            if text_at.is_none() && seen.windows(10).any(|w| w == b"text_delta") {
                text_at = Some(started.elapsed());
            }
        }
    }
    assert!(seen.ends_with(LAST_EVENT));
    text_at.expect("the answer has text")
}

/// The measured time and request count of each benchmark.
type Tally = Arc<Mutex<Vec<(&'static str, Duration, u64)>>>;

/// The three shapes the project tracks.
fn shapes() -> [Shape; 3] {
    [
        Shape {
            group: "proxy_200_events",
            body: request_body(5),
            pace_us: None,
        },
        Shape {
            group: "proxy_400kb_request",
            body: request_body(120),
            pace_us: None,
        },
        Shape {
            group: "proxy_paced",
            body: request_body(5),
            pace_us: Some(500),
        },
    ]
}

fn bench(c: &mut Criterion) {
    let upstream = mock_upstream();
    let targets = [
        ("direct", upstream),
        ("floor", floor(upstream)),
        ("guard", guard(upstream)),
    ];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    for shape in shapes() {
        let tally: Tally = Arc::default();
        let mut group = c.benchmark_group(shape.group);
        for (name, addr) in targets {
            let target: http::Uri = format!("http://{addr}/v1/messages").parse().unwrap();
            runtime.block_on(exchange(&client, &target, &shape));
            group.bench_function(name, |b| {
                b.iter_custom(|iters| {
                    let started = Instant::now();
                    runtime.block_on(async {
                        for _ in 0..iters {
                            exchange(&client, &target, &shape).await;
                        }
                    });
                    let elapsed = started.elapsed();
                    tally.lock().unwrap().push((name, elapsed, iters));
                    elapsed
                })
            });
        }
        group.finish();
        report(&shape, &tally.lock().unwrap());
    }
    bench_first_text(c, &runtime, &client, &targets);
}

/// Time to the first text of a paced answer through each target, summed
/// over the requests (the rest of each answer is read but not counted).
fn bench_first_text(
    c: &mut Criterion,
    runtime: &tokio::runtime::Runtime,
    client: &Client<HttpConnector, Full<Bytes>>,
    targets: &[(&'static str, SocketAddr)],
) {
    let shape = Shape {
        group: "proxy_first_text",
        body: request_body(5),
        pace_us: Some(FIRST_TEXT_PACE_US),
    };
    let tally: Tally = Arc::default();
    let mut group = c.benchmark_group(shape.group);
    // Each answer takes about 200 event intervals: the fewest samples.
    group.sample_size(10);
    for &(name, addr) in targets {
        let target: http::Uri = format!("http://{addr}/v1/messages").parse().unwrap();
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let waited = runtime.block_on(async {
                    let mut waited = Duration::ZERO;
                    for _ in 0..iters {
                        waited += first_text(client, &target, &shape).await;
                    }
                    waited
                });
                tally.lock().unwrap().push((name, waited, iters));
                waited
            })
        });
    }
    group.finish();
    let mean = |name: &str| mean_of(&tally.lock().unwrap(), name);
    let (floor, guard) = (mean("floor"), mean("guard"));
    println!(
        "proxy_first_text (one event every {FIRST_TEXT_PACE_US} µs) mean time to first text: \
         direct {:.1} µs, floor {:.1} µs, guard {:.1} µs; guard - floor = {:.2} event intervals",
        mean("direct") * 1e6,
        floor * 1e6,
        guard * 1e6,
        (guard - floor) * 1e6 / FIRST_TEXT_PACE_US as f64
    );
}

/// The mean time per request `name` took, in seconds.
fn mean_of(tally: &[(&'static str, Duration, u64)], name: &str) -> f64 {
    let (time, count) = tally
        .iter()
        .filter(|(n, _, _)| *n == name)
        .fold((0.0, 0u64), |(t, c), (_, d, i)| {
            (t + d.as_secs_f64(), c + i)
        });
    time / count.max(1) as f64
}

/// Prints the mean time per request of each and guard ÷ floor.
fn report(shape: &Shape, tally: &[(&'static str, Duration, u64)]) {
    let mean = |name: &str| mean_of(tally, name);
    let (direct, floor, guard) = (mean("direct"), mean("floor"), mean("guard"));
    println!(
        "{} ({} KB request) mean per request: direct {:.1} µs, floor {:.1} µs, guard {:.1} µs; \
         guard ÷ floor = {:.2}x",
        shape.group,
        shape.body.len() / 1000,
        direct * 1e6,
        floor * 1e6,
        guard * 1e6,
        guard / floor
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    targets = bench
}
criterion_main!(benches);
