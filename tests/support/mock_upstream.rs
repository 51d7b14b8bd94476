//! A scripted mock provider: a real HTTP server on loopback that serves
//! recorded fixtures and records every request it receives.
//!
//! Used by the proxy tests and by the test tools (the e2e harness, the load
//! check, the soak).
//!
//! Each request names its script in headers:
//!
//! - `x-mock-script: a,b,c`: the replies for the 1st, 2nd, 3rd request of
//!   this script id, each a fixture path under `tests/fixtures/` (`.json`
//!   files are served as `application/json`, anything else as
//!   `text/event-stream`, split at frame boundaries and sent as separate
//!   chunks), or `marker` (a text stream of 20 chunks, 2 ms apart, that
//!   repeats the `x-mock-marker` header, for load tests), or
//!   `redirect=URL` (a 307 to URL), or `status=CODE` (that status with an
//!   Anthropic-shaped error body);
//! - `x-mock-id: ID`: which requests count as one script run (default: the
//!   script itself).
//!
//! A request without the header may name its script in its body instead,
//! as `[mock-script=a,b,c;mock-id=ID]` anywhere in it (in a user turn's
//! text): a fallback the guard translates into another provider's API
//! carries the conversation's text but none of the client's headers.
//!
//! Every request is first checked against the provider's documented rules
//! ([`contract`]): one that breaks a rule is answered with the provider's
//! 400 (404 for a path no API serves), recorded, and makes dropping the
//! mock panic (outside a panic).
//!
//! `GET /__mock/seen[?id=ID]` returns what was received as JSON (method,
//! path, headers, body), so clients in other languages can check it too;
//! `GET /__mock/violations` returns the contract violations recorded since
//! the last call (each as a line of text; also those of the upstreams given
//! to [`MockUpstream::report_also`]) and forgets them, so that a harness in
//! another language can fail the test that caused them.

// Loaded here and in the other standalone upstream: each must stand alone.
use crate::contract;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};

/// The script (and id) a body names as `[mock-script=a,b;mock-id=ID]`.
fn script_in_body(body: &[u8]) -> Option<(String, Option<String>)> {
    let text = std::str::from_utf8(body).ok()?;
    let start = text.find("[mock-script=")? + "[mock-script=".len();
    let named = &text[start..start + text[start..].find(']')?];
    let (script, id) = match named.split_once(";mock-id=") {
        Some((script, id)) => (script, Some(id.to_owned())),
        None => (named, None),
    };
    Some((script.to_owned(), id))
}

/// One request the mock received.
#[derive(Debug, Clone)]
pub struct SeenRequest {
    pub id: String,
    pub method: String,
    /// Path and query.
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl SeenRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "method": self.method,
            "path": self.path,
            "headers": self.headers.iter().map(|(n, v)| json!([n, v])).collect::<Vec<_>>(),
            "body": String::from_utf8_lossy(&self.body),
        })
    }
}

/// More violations to report at `/__mock/violations`: those of another
/// upstream of the same harness, each as a line of text, taken.
type Reporter = Box<dyn Fn() -> Vec<String> + Send + Sync>;

#[derive(Default)]
struct State {
    seen: Vec<SeenRequest>,
    violations: contract::Violations,
    others: Vec<Reporter>,
}

/// The running mock. Dropping it stops accepting connections.
pub struct MockUpstream {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for MockUpstream {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if !std::thread::panicking() {
            self.violations().assert_none();
        }
    }
}

pub fn fixtures_dir() -> PathBuf {
    // This crate sits in tests/support, beside the fixtures.
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

pub fn fixture(name: &str) -> Bytes {
    let path = fixtures_dir().join(name);
    Bytes::from(std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

impl MockUpstream {
    /// Starts the mock on `127.0.0.1`, on a free port.
    pub async fn start() -> std::io::Result<MockUpstream> {
        Self::start_on("127.0.0.1:0".parse().unwrap()).await
    }

    pub async fn start_on(addr: SocketAddr) -> std::io::Result<MockUpstream> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let shared = state.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    _ = &mut stopped => break,
                };
                let Ok((stream, _)) = accepted else { continue };
                let state = shared.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(serve(state, request).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(MockUpstream {
            addr,
            state,
            stop: Some(stop),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn seen(&self) -> Vec<SeenRequest> {
        self.state.lock().unwrap().seen.clone()
    }

    /// The requests answered with a contract 400.
    pub fn violations(&self) -> contract::Violations {
        self.state.lock().unwrap().violations.clone()
    }

    /// Reports at `/__mock/violations` what `taken` returns too (another
    /// upstream's violations since its last call, as lines of text).
    pub fn report_also(&self, taken: impl Fn() -> Vec<String> + Send + Sync + 'static) {
        self.state.lock().unwrap().others.push(Box::new(taken));
    }

    pub fn seen_for(&self, id: &str) -> Vec<SeenRequest> {
        self.seen().into_iter().filter(|s| s.id == id).collect()
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type MockBody = http_body_util::combinators::BoxBody<Bytes, BoxError>;

fn reply(status: StatusCode, content_type: &str, body: MockBody) -> Response<MockBody> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        // Hop-by-hop headers the proxy must not pass on.
        .header("keep-alive", "timeout=30")
        .header("x-mock-fallback", "1")
        .header("connection", "x-mock-fallback")
        .body(body)
        .unwrap()
}

fn full(bytes: Bytes) -> MockBody {
    http_body_util::Full::new(bytes)
        .map_err(|never| match never {})
        .boxed()
}

fn error(status: StatusCode, message: &str) -> Response<MockBody> {
    let body = json!({"type":"error","error":{"type":"mock_error","message":message}});
    reply(
        status,
        "application/json",
        full(Bytes::from(body.to_string())),
    )
}

async fn serve(
    state: Arc<Mutex<State>>,
    request: Request<hyper::body::Incoming>,
) -> Response<MockBody> {
    let (parts, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return error(StatusCode::BAD_REQUEST, "request body failed"),
    };
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".to_owned());
    if parts.uri.path() == "/__mock/violations" {
        let state = state.lock().unwrap();
        let taken = state.violations.take();
        let mut lines: Vec<String> = taken.iter().map(ToString::to_string).collect();
        lines.extend(state.others.iter().flat_map(|taken| taken()));
        return reply(
            StatusCode::OK,
            "application/json",
            full(Bytes::from(json!(lines).to_string())),
        );
    }
    if parts.uri.path() == "/__mock/seen" {
        let want = parts
            .uri
            .query()
            .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("id=")))
            .map(str::to_owned);
        let seen: Vec<Value> = state
            .lock()
            .unwrap()
            .seen
            .iter()
            .filter(|s| want.as_ref().map_or(true, |want| *want == s.id))
            .map(SeenRequest::to_json)
            .collect();
        return reply(
            StatusCode::OK,
            "application/json",
            full(Bytes::from(Value::from(seen).to_string())),
        );
    }
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (script, id) = match header("x-mock-script") {
        Some(script) => (script, header("x-mock-id")),
        None => match script_in_body(&body) {
            Some(named) => named,
            None => return error(StatusCode::BAD_REQUEST, "no x-mock-script header"),
        },
    };
    let id = id.unwrap_or_else(|| script.clone());
    let marker = header("x-mock-marker").unwrap_or_default();
    let headers: Vec<(String, String)> = parts
        .headers
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let violations = state.lock().unwrap().violations.clone();
    let verdict = violations.check(parts.method.as_str(), &path, &parts.headers, &body);
    let nth = {
        let mut state = state.lock().unwrap();
        let nth = state.seen.iter().filter(|s| s.id == id).count();
        state.seen.push(SeenRequest {
            id: id.clone(),
            method: parts.method.to_string(),
            path,
            headers,
            body,
        });
        nth
    };
    if let Err(violation) = verdict {
        return violation.response().map(full);
    }
    let Some(entry) = script.split(',').map(str::trim).nth(nth) else {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("script `{script}` has no reply for request {}", nth + 1),
        );
    };
    if let Some(location) = entry.strip_prefix("redirect=") {
        let mut response = reply(
            StatusCode::TEMPORARY_REDIRECT,
            "application/json",
            full(Bytes::new()),
        );
        response
            .headers_mut()
            .insert("location", location.parse().unwrap());
        return response;
    }
    if let Some(status) = entry.strip_prefix("status=") {
        let status = status
            .parse()
            .ok()
            .and_then(|s| StatusCode::from_u16(s).ok());
        return error(
            status.unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            "scripted error status",
        );
    }
    if entry == "marker" {
        return reply(
            StatusCode::OK,
            "text/event-stream",
            Drip::new(marker_stream(&marker), Duration::from_millis(2)).boxed(),
        );
    }
    let path = fixtures_dir().join(entry);
    let Ok(bytes) = std::fs::read(&path) else {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("no fixture `{entry}`"),
        );
    };
    let bytes = Bytes::from(bytes);
    if entry.ends_with(".json") {
        return reply(StatusCode::OK, "application/json", full(bytes));
    }
    reply(
        StatusCode::OK,
        "text/event-stream",
        Drip::new(frames(&bytes), Duration::from_millis(1)).boxed(),
    )
}

/// Splits a stream after each blank line, keeping every byte.
pub fn frames(bytes: &Bytes) -> Vec<Bytes> {
    let mut chunks = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i + 1 < bytes.len() {
        if bytes[i] == b'\n' && bytes[i + 1] == b'\n' {
            chunks.push(bytes.slice(start..i + 2));
            start = i + 2;
            i += 2;
        } else {
            i += 1;
        }
    }
    if start < bytes.len() {
        chunks.push(bytes.slice(start..));
    }
    chunks
}

/// The Anthropic text stream the `marker` script serves.
pub fn marker_stream(marker: &str) -> Vec<Bytes> {
    let event = |name: &str, data: Value| Bytes::from(format!("event: {name}\ndata: {data}\n\n"));
    let mut chunks = vec![
        event(
            "message_start",
            json!({"type":"message_start","message":{"id":"msg_marker","type":"message","role":"assistant","content":[],"model":"claude-opus-4-7","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":1}}}),
        ),
        event(
            "content_block_start",
            json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        ),
    ];
    for i in 0..20 {
        chunks.push(event(
            "content_block_delta",
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":format!("{marker}-{i} ")}}),
        ));
    }
    chunks.push(event(
        "content_block_stop",
        json!({"type":"content_block_stop","index":0}),
    ));
    chunks.push(event("message_delta", json!({"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":20}})));
    chunks.push(event("message_stop", json!({"type":"message_stop"})));
    chunks
}

/// The text a client assembles from the `marker` stream.
pub fn marker_text(marker: &str) -> String {
    (0..20).map(|i| format!("{marker}-{i} ")).collect()
}

/// The text deltas of an Anthropic stream as a client received it, joined.
pub fn stream_text(stream: &str) -> String {
    stream
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter_map(|event| event["delta"]["text"].as_str().map(str::to_owned))
        .collect()
}

/// One step of a [`Drip`] body.
pub enum Step {
    /// Send these bytes.
    Data(Bytes),
    /// Fail the body with this error.
    Fail(String),
    /// Wait until this gate opens (or its sender is dropped).
    Gate(tokio::sync::oneshot::Receiver<()>),
}

/// A body that takes its steps one at a time, `gap` apart, and counts the
/// bytes pulled from it.
pub struct Drip {
    steps: VecDeque<Step>,
    gap: Duration,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    pulled: Arc<AtomicUsize>,
}

impl Drip {
    /// These chunks, `gap` apart.
    pub fn new(chunks: Vec<Bytes>, gap: Duration) -> Self {
        Self::steps(chunks.into_iter().map(Step::Data).collect(), gap)
    }

    /// These steps, `gap` apart.
    pub fn steps(steps: Vec<Step>, gap: Duration) -> Self {
        Drip {
            steps: steps.into(),
            gap,
            sleep: None,
            pulled: Arc::default(),
        }
    }

    /// Counts the bytes pulled from this body into `pulled`.
    pub fn counting(self, pulled: Arc<AtomicUsize>) -> Self {
        Drip { pulled, ..self }
    }

    /// Waits out the gap or the gate ahead, if any.
    fn wait(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(sleep) = self.sleep.as_mut() {
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.sleep = None;
        }
        if let Some(Step::Gate(gate)) = self.steps.front_mut() {
            if Pin::new(gate).poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.steps.pop_front();
        }
        Poll::Ready(())
    }
}

impl Body for Drip {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.wait(cx).is_pending() {
            return Poll::Pending;
        }
        let chunk = match self.steps.pop_front() {
            None => return Poll::Ready(None),
            Some(Step::Fail(error)) => return Poll::Ready(Some(Err(error.into()))),
            Some(Step::Gate(_)) => unreachable!("waited out above"),
            Some(Step::Data(chunk)) => chunk,
        };
        self.pulled.fetch_add(chunk.len(), Ordering::SeqCst);
        if !self.steps.is_empty() && !self.gap.is_zero() {
            self.sleep = Some(Box::pin(tokio::time::sleep(self.gap)));
        }
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }
}
