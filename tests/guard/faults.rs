//! Faults at the layer: an upstream that hangs, resets or stalls, a client
//! that leaves or sends a broken body, and the layer-wide bound on held
//! bytes. Each test checks what the client got, what the upstream saw (and
//! whether its body was dropped, which closes its connection), and the
//! record.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use refusal_guard::recovery::FallbackChains;
use refusal_guard::refusal::DeadReason;
use refusal_guard::telemetry::MemorySink;
use refusal_guard::timeout::{TimeoutKind, UpstreamTimeout};
use refusal_guard::{Outcome, RefusalGuardLayer, RefusalHandle};
use serde_json::{json, Value};
use tower::{BoxError, Layer, Service, ServiceExt};

use support::anthropic::{anthropic_stream as events, events as ev};

/// One step of a scripted upstream body.
#[derive(Clone)]
enum Step {
    Data(Bytes),
    Wait(Duration),
    /// Never yields again.
    Stall,
    /// A transport error (a reset).
    Reset,
}

/// One scripted answer.
#[derive(Clone)]
enum Reply {
    /// Never answers with a head.
    NoHead,
    /// 200 `text/event-stream` with this body.
    Sse(Vec<Step>),
}

/// A body that plays steps and counts itself dropped.
struct Played {
    steps: VecDeque<Step>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    dropped: Arc<AtomicUsize>,
}

impl Drop for Played {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

impl Body for Played {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        loop {
            if let Some(sleep) = self.sleep.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.sleep = None;
            }
            match self.steps.front().cloned() {
                None => return Poll::Ready(None),
                Some(Step::Stall) => return Poll::Pending,
                Some(Step::Data(bytes)) => {
                    self.steps.pop_front();
                    return Poll::Ready(Some(Ok(Frame::data(bytes))));
                }
                Some(Step::Reset) => {
                    self.steps.pop_front();
                    return Poll::Ready(Some(Err("connection reset by peer".into())));
                }
                Some(Step::Wait(gap)) => {
                    self.steps.pop_front();
                    self.sleep = Some(Box::pin(tokio::time::sleep(gap)));
                }
            }
        }
    }
}

use std::future::Future;

/// A scripted upstream: answers in order, remembers each request's body, and
/// counts the bodies dropped. A request the real API rejects gets its
/// error, and fails the test when the script the test made goes (its
/// clones, the guard's, only record).
#[derive(Clone, Default)]
struct Script {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    seen: Arc<Mutex<Vec<(http::HeaderMap, Value)>>>,
    /// Requests whose head arrived, their bodies whole or not yet.
    called: Arc<AtomicUsize>,
    dropped: Arc<AtomicUsize>,
    violations: support::contract::Checked,
}

impl Script {
    fn new(replies: Vec<Reply>) -> Self {
        Script {
            replies: Arc::new(Mutex::new(replies.into())),
            ..Script::default()
        }
    }

    fn seen(&self) -> Vec<(http::HeaderMap, Value)> {
        self.seen.lock().unwrap().clone()
    }

    fn requests(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    fn called(&self) -> usize {
        self.called.load(Ordering::SeqCst)
    }

    fn dropped(&self) -> usize {
        self.dropped.load(Ordering::SeqCst)
    }
}

type ScriptFuture = Pin<Box<dyn Future<Output = Result<Response<Played>, BoxError>> + Send>>;

impl Service<Request<BoxBody<Bytes, BoxError>>> for Script {
    type Response = Response<Played>;
    type Error = BoxError;
    type Future = ScriptFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<BoxBody<Bytes, BoxError>>) -> ScriptFuture {
        self.called.fetch_add(1, Ordering::SeqCst);
        let this = self.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let bytes = body.collect().await?.to_bytes();
            let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            let verdict =
                this.violations
                    .check(parts.method.as_str(), path, &parts.headers, &bytes);
            if let Err(broken) = verdict {
                return Ok(broken.response().map(|body| Played {
                    steps: VecDeque::from([Step::Data(body)]),
                    sleep: None,
                    dropped: this.dropped.clone(),
                }));
            }
            let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            this.seen.lock().unwrap().push((parts.headers, json));
            let reply = this.replies.lock().unwrap().pop_front();
            let steps = match reply {
                Some(Reply::NoHead) => std::future::pending().await,
                Some(Reply::Sse(steps)) => steps,
                None => return Err("script exhausted".into()),
            };
            Ok(Response::builder()
                .header("content-type", "text/event-stream")
                .body(Played {
                    steps: steps.into(),
                    sleep: None,
                    dropped: this.dropped.clone(),
                })
                .unwrap())
        })
    }
}

fn thinking() -> Vec<Value> {
    vec![
        ev::message_start("claude-x"),
        ev::block_start(0, json!({"type":"thinking","thinking":""})),
        ev::thinking_delta(0, "Considering..."),
    ]
}

fn refused() -> Bytes {
    events(&[
        ev::message_start("claude-x"),
        ev::refusal(Some("cyber"), None),
        ev::message_stop(),
    ])
}

fn answer() -> Bytes {
    events(&ev::text_answer("claude-x", "Hello"))
}

fn request(path: &str) -> Request<BoxBody<Bytes, BoxError>> {
    let body = json!({"model":"claude-x","max_tokens":64,"stream":true,
        "messages":[{"role":"user","content":"Audit my SSH config"}]});
    Request::post(format!("https://api.anthropic.com{path}"))
        .header("content-type", "application/json")
        .header("accept-encoding", "gzip, br")
        .body(
            Full::new(Bytes::from(body.to_string()))
                .map_err(|never| match never {})
                .boxed(),
        )
        .unwrap()
}

/// Reads a body to its end: the bytes, and the error it ended with, if any.
async fn read<B>(body: B) -> (Vec<u8>, Option<BoxError>)
where
    B: Body<Data = Bytes, Error = BoxError> + Unpin,
{
    let mut body = body;
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => bytes.extend_from_slice(frame.data_ref().map_or(&[][..], |d| &d[..])),
            Err(error) => return (bytes, Some(error)),
        }
    }
    (bytes, None)
}

/// A 200 of unknown length whose body is `sent`, then the upstream's reset:
/// never a clean end.
async fn cut_by_a_reset<B>(response: Response<B>, sent: &[u8])
where
    B: Body<Data = Bytes, Error = BoxError> + Unpin,
{
    assert_eq!(response.status(), 200);
    let body = response.into_body();
    assert_eq!(
        body.size_hint().exact(),
        None,
        "no exact length before an error"
    );
    assert!(!body.is_end_stream());
    let (bytes, error) = read(body).await;
    assert_eq!(bytes, sent);
    assert!(error.unwrap().to_string().contains("reset"));
}

fn layer() -> RefusalGuardLayer {
    RefusalGuardLayer::new()
        .upstream_head_timeout(Duration::from_millis(300))
        .upstream_idle_timeout(Duration::from_millis(300))
}

/// Waits (bounded) until `done` holds.
async fn eventually(what: &str, done: impl Fn() -> bool) {
    for _ in 0..200 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}

#[tokio::test]
async fn no_head_gets_a_504_in_the_api_shape() {
    let script = Script::new(vec![Reply::NoHead, Reply::NoHead]);
    let guard = layer().layer(script.clone());

    let response = guard
        .clone()
        .oneshot(request("/v1/messages"))
        .await
        .unwrap();
    assert_eq!(response.status(), 504);
    let (bytes, error) = read(response.into_body()).await;
    assert!(error.is_none());
    let json: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(json["type"], "error");
    assert_eq!(json["error"]["type"], "timeout_error");

    // A request the guard does not judge is bounded the same way.
    let listing = Request::get("https://api.openai.com/v1/chat/completions/list")
        .body(BoxBody::new(
            Full::new(Bytes::new()).map_err(|n| match n {}),
        ))
        .unwrap();
    let response = guard.oneshot(listing).await.unwrap();
    assert_eq!(response.status(), 504);
    let (bytes, _) = read(response.into_body()).await;
    let json: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(json["error"]["code"], "upstream_head_timeout");
}

#[tokio::test]
async fn a_head_then_silence_gets_a_504_and_the_upstream_body_is_dropped() {
    let sink = MemorySink::new();
    let script = Script::new(vec![Reply::Sse(vec![
        Step::Data(events(&thinking())),
        Step::Stall,
    ])]);
    let guard = layer().telemetry(sink.clone()).layer(script.clone());

    let response = guard.oneshot(request("/v1/messages")).await.unwrap();
    assert_eq!(response.status(), 504);
    assert_eq!(
        response.headers()["x-refusal-guard-error"],
        "upstream_idle_timeout"
    );
    assert_eq!(script.dropped(), 1, "the stalled upstream body is let go");
    assert_eq!(script.requests(), 1);
    assert!(sink.records().is_empty(), "nothing was refused");
}

/// The start of an answer: real output ("Hello"), not yet ended.
fn hello() -> Bytes {
    events(&[
        ev::message_start("claude-x"),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}),
    ])
}

#[tokio::test]
async fn a_hang_after_a_committed_head_cuts_the_stream() {
    let text = hello();
    let script = Script::new(vec![Reply::Sse(vec![
        Step::Data(text.clone()),
        Step::Stall,
    ])]);
    let guard = layer().layer(script.clone());

    let response = guard.oneshot(request("/v1/messages")).await.unwrap();
    assert_eq!(response.status(), 200);
    let (bytes, error) = read(response.into_body()).await;
    assert_eq!(bytes, &text[..]);
    let error = error.expect("the stream is cut, never ended cleanly");
    let timeout = error.downcast_ref::<UpstreamTimeout>().unwrap();
    assert_eq!(timeout.kind(), TimeoutKind::Idle);
}

#[tokio::test]
async fn a_reset_before_output_is_a_cut_stream_of_unknown_length() {
    let script = Script::new(vec![Reply::Sse(vec![
        Step::Data(events(&[ev::message_start("claude-x")])),
        Step::Reset,
    ])]);
    let guard = layer().layer(script.clone());

    let response = guard.oneshot(request("/v1/messages")).await.unwrap();
    cut_by_a_reset(response, &events(&[ev::message_start("claude-x")])).await;
}

#[tokio::test]
async fn a_reset_after_output_is_a_cut_stream_of_unknown_length() {
    let text = hello();
    // Output and the reset in the held part: the error is pending when the
    // response is built.
    let script = Script::new(vec![Reply::Sse(vec![
        Step::Data(text.clone()),
        Step::Reset,
    ])]);
    let guard = layer().detect_text_refusals(true).layer(script.clone());

    let response = guard.oneshot(request("/v1/messages")).await.unwrap();
    cut_by_a_reset(response, &text).await;
}

#[tokio::test]
async fn a_hold_past_the_deadline_gets_a_504() {
    let mut steps = vec![Step::Data(events(&[ev::message_start("claude-x")]))];
    for _ in 0..100 {
        steps.push(Step::Wait(Duration::from_millis(20)));
        steps.push(Step::Data(events(&[json!({"type":"ping"})])));
    }
    let script = Script::new(vec![Reply::Sse(steps)]);
    let guard = layer()
        .recovery_deadline(Duration::from_millis(200))
        .layer(script.clone());

    let response = guard.oneshot(request("/v1/messages")).await.unwrap();
    assert_eq!(response.status(), 504);
    assert_eq!(
        response.headers()["x-refusal-guard-error"],
        "recovery_deadline"
    );
    assert_eq!(script.dropped(), 1);
}

#[tokio::test]
async fn a_stalled_rescue_is_bounded_and_the_refusal_served_as_sent() {
    let sink = MemorySink::new();
    let script = Script::new(vec![
        Reply::Sse(vec![Step::Data(refused())]),
        Reply::Sse(vec![
            Step::Data(events(&[ev::message_start("claude-x")])),
            Step::Stall,
        ]),
    ]);
    let guard = layer().telemetry(sink.clone()).layer(script.clone());

    let response = guard.oneshot(request("/v1/messages")).await.unwrap();
    assert_eq!(response.status(), 200);
    let (bytes, error) = read(response.into_body()).await;
    assert!(error.is_none());
    assert_eq!(bytes, &refused()[..], "the original, byte for byte");
    assert_eq!(script.requests(), 2);
    assert_eq!(script.dropped(), 2);
    let record = &sink.records()[0];
    assert_eq!(record.outcome, Outcome::Dead);
    assert_eq!(record.reason, Some(DeadReason::UpstreamError));
}

/// How the client reads in each mode.
#[derive(Clone, Copy, Debug)]
enum Mode {
    Default,
    KeepAlive,
    LiveThinking,
}

impl Mode {
    fn layer(self) -> RefusalGuardLayer {
        let layer = layer().upstream_idle_timeout(Duration::from_secs(60));
        match self {
            Mode::Default => layer,
            Mode::KeepAlive => layer
                .keepalive_after(Duration::from_millis(20))
                .keepalive_interval(Duration::from_millis(10)),
            Mode::LiveThinking => layer.live_thinking(true),
        }
    }
}

/// The client leaves while the rescue stalls: the rescue's body is dropped,
/// nothing more is sent upstream, and the record says the client left.
async fn client_leaves_during_the_rescue(mode: Mode) {
    let sink = MemorySink::new();
    let script = Script::new(vec![
        Reply::Sse(vec![Step::Data(refused())]),
        Reply::Sse(vec![
            Step::Data(events(&[ev::message_start("claude-x")])),
            Step::Stall,
        ]),
        Reply::Sse(vec![Step::Data(answer())]),
    ]);
    let guard = mode
        .layer()
        .fallback_chains(
            refusal_guard::recovery::FallbackChains::new().chain("claude-x", ["claude-y"]),
        )
        .telemetry(sink.clone())
        .layer(script.clone());

    let call = guard.oneshot(request("/v1/messages"));
    match mode {
        Mode::Default => {
            let pending = tokio::time::timeout(Duration::from_millis(200), call).await;
            assert!(pending.is_err(), "still held while the fallback stalls");
        }
        Mode::KeepAlive | Mode::LiveThinking => {
            let response = call.await.unwrap();
            assert_eq!(response.status(), 200);
            let mut body = response.into_body();
            let first = body.frame().await.unwrap().unwrap();
            assert!(!first.data_ref().unwrap().is_empty());
            eventually("the fallback was sent", || script.requests() == 2).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(body);
        }
    }
    eventually("both upstream bodies were dropped", || {
        script.dropped() == 2
    })
    .await;
    // The positive control: the record is the ladder's last act (written as
    // its work is dropped), so no rescue can follow it.
    eventually("the record was written", || sink.len() == 1).await;
    assert_eq!(
        script.requests(),
        2,
        "{mode:?}: no rescue after the client left"
    );
    let record = &sink.records()[0];
    assert_eq!(record.outcome, Outcome::Dead);
    assert_eq!(record.reason, Some(DeadReason::ClientGone));
    assert_eq!(record.attempts.len(), 1, "{mode:?}: {:?}", record.attempts);
}

#[tokio::test]
async fn a_client_that_leaves_during_the_rescue_stops_it_in_default_mode() {
    client_leaves_during_the_rescue(Mode::Default).await;
}

#[tokio::test]
async fn a_client_that_leaves_during_the_rescue_stops_it_with_keepalive() {
    client_leaves_during_the_rescue(Mode::KeepAlive).await;
}

#[tokio::test]
async fn a_client_that_leaves_during_the_rescue_stops_it_with_live_thinking() {
    client_leaves_during_the_rescue(Mode::LiveThinking).await;
}

/// The client leaves while the original stalls: its body is dropped, no
/// other request is made, and nothing is recorded (nothing was refused).
async fn client_leaves_during_the_hold(mode: Mode) {
    let sink = MemorySink::new();
    let script = Script::new(vec![
        Reply::Sse(vec![Step::Data(events(&thinking())), Step::Stall]),
        Reply::Sse(vec![Step::Data(answer())]),
    ]);
    let guard = mode.layer().telemetry(sink.clone()).layer(script.clone());

    let call = guard.oneshot(request("/v1/messages"));
    match mode {
        Mode::Default => {
            // Dropped when the wait ends: the guard's work with it, at once.
            let pending = tokio::time::timeout(Duration::from_millis(100), call).await;
            assert!(pending.is_err());
        }
        Mode::KeepAlive | Mode::LiveThinking => {
            let response = call.await.unwrap();
            let handle = response
                .extensions()
                .get::<RefusalHandle>()
                .cloned()
                .unwrap();
            let mut body = response.into_body();
            body.frame().await.unwrap().unwrap();
            drop(body);
            // The positive control: the guard's task settled the call (its
            // last act, as its work is dropped), finding nothing refused.
            let settled = tokio::time::timeout(Duration::from_secs(10), handle.settled()).await;
            assert_eq!(
                settled.unwrap_or_else(|_| panic!("{mode:?}: never settled")),
                None,
                "{mode:?}"
            );
        }
    }
    eventually("the upstream body was dropped", || script.dropped() == 1).await;
    assert_eq!(script.requests(), 1, "{mode:?}");
    assert!(sink.records().is_empty(), "{mode:?}");
}

#[tokio::test]
async fn a_client_that_leaves_during_the_hold_ends_it_in_every_mode() {
    for mode in [Mode::Default, Mode::KeepAlive, Mode::LiveThinking] {
        client_leaves_during_the_hold(mode).await;
    }
}

#[tokio::test]
async fn a_stall_past_the_head_cuts_keepalive_and_live_thinking_streams() {
    for mode in [Mode::KeepAlive, Mode::LiveThinking] {
        let script = Script::new(vec![Reply::Sse(vec![
            Step::Data(events(&thinking())),
            Step::Stall,
        ])]);
        let guard = mode
            .layer()
            .upstream_idle_timeout(Duration::from_millis(150))
            .layer(script.clone());
        let response = guard.oneshot(request("/v1/messages")).await.unwrap();
        assert_eq!(response.status(), 200, "{mode:?}: the head went out early");
        let (_bytes, error) = read(response.into_body()).await;
        let error = error.unwrap_or_else(|| panic!("{mode:?}: cut, not ended"));
        assert!(
            error.downcast_ref::<UpstreamTimeout>().is_some(),
            "{mode:?}: {error}"
        );
        assert_eq!(script.dropped(), 1);
    }
}

/// A request body as a client sends it: its pieces at once, one a frame,
/// then its end or, if `aborted`, the client's error.
struct Pieces {
    pieces: VecDeque<Bytes>,
    aborted: bool,
}

impl Body for Pieces {
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.pieces.pop_front() {
            Some(piece) => Poll::Ready(Some(Ok(Frame::data(piece)))),
            None if self.aborted => Poll::Ready(Some(Err("client aborted the upload".into()))),
            None => Poll::Ready(None),
        }
    }
}

#[tokio::test]
async fn a_broken_request_body_is_a_400_and_never_reaches_the_upstream_whole() {
    let script = Script::new(vec![Reply::Sse(vec![Step::Data(answer())])]);
    let guard = layer().layer(script.clone());
    let request = Request::post("https://api.openai.com/v1/chat/completions")
        .header("content-type", "application/json")
        .body(
            Pieces {
                pieces: [Bytes::from_static(b"{\"model\":\"gpt-x\",\"mess")].into(),
                aborted: true,
            }
            .boxed(),
        )
        .unwrap();

    let response = guard.oneshot(request).await.unwrap();
    assert_eq!(response.status(), 400);
    let (bytes, _) = read(response.into_body()).await;
    let json: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        json["error"]["type"], "invalid_request_error",
        "OpenAI's shape"
    );
    // A boxed body goes upstream as it arrives: the script got its first
    // bytes, then the error (it records only a body it read whole).
    assert_eq!(script.requests(), 0);
}

#[tokio::test]
async fn past_the_total_held_bound_a_stream_commits_and_a_body_gets_a_503() {
    let stream = events(&thinking());
    let script = Script::new(vec![Reply::Sse(vec![
        Step::Data(stream.clone()),
        Step::Data(answer()),
    ])]);
    let guard = layer()
        .max_total_held_bytes(stream.len() - 1)
        .layer(script.clone());
    let response = guard
        .clone()
        .oneshot(request("/v1/messages"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let (bytes, error) = read(response.into_body()).await;
    assert!(error.is_none());
    assert_eq!(
        &bytes[..stream.len()],
        &stream[..],
        "let through as it came"
    );

    let small = layer().max_total_held_bytes(16).layer(script.clone());
    let response = small.oneshot(request("/v1/messages")).await.unwrap();
    assert_eq!(response.status(), 503);
    let (bytes, _) = read(response.into_body()).await;
    let json: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(json["error"]["type"], "overloaded_error");
    assert_eq!(script.requests(), 1, "the refused body never went upstream");
}

#[tokio::test]
async fn guarded_requests_ask_for_identity_encoding() {
    let script = Script::new(vec![Reply::Sse(vec![Step::Data(answer())])]);
    let guard = layer().layer(script.clone());
    let response = guard.oneshot(request("/v1/messages")).await.unwrap();
    read(response.into_body()).await;
    let (headers, _) = &script.seen()[0];
    assert_eq!(headers["accept-encoding"], "identity");
}

/// A task that never waits spends tokio's cooperative budget within one
/// poll, after which every budgeted resource looks pending once. A
/// forwarded request's copy, told whole before the upstream answered, must
/// still be seen then: otherwise the request goes unguarded, and a refusal
/// in its answer is neither recovered nor recorded.
#[tokio::test(flavor = "current_thread")]
async fn forwarded_requests_stay_guarded_when_their_task_never_waits() {
    const REQUESTS: usize = 300;
    let replies = (0..REQUESTS).map(|_| Reply::Sse(vec![Step::Data(answer())]));
    let script = Script::new(replies.collect());
    let guard = RefusalGuardLayer::new().layer(script.clone());
    for n in 0..REQUESTS {
        let response = guard.clone().oneshot(in_pieces()).await.unwrap();
        let guarded = response.extensions().get::<RefusalHandle>().is_some();
        assert!(guarded, "request {n} went unguarded");
        let (bytes, error) = read(response.into_body()).await;
        assert!(error.is_none());
        assert_eq!(bytes, answer());
    }
    assert_eq!(script.requests(), REQUESTS);
}

/// A request as a network client sends it: its body in 16 KiB pieces.
fn in_pieces() -> Request<BoxBody<Bytes, BoxError>> {
    let history = "The build failed in the linker; retry it. ".repeat(2000);
    let body = json!({"model":"claude-x","max_tokens":64,"stream":true,
        "messages":[{"role":"user","content":history}]});
    let body = Bytes::from(body.to_string());
    let pieces = (0..body.len())
        .step_by(16 * 1024)
        .map(|at| body.slice(at..body.len().min(at + 16 * 1024)));
    Request::post("https://api.anthropic.com/v1/messages")
        .header("content-type", "application/json")
        .body(
            Pieces {
                pieces: pieces.collect(),
                aborted: false,
            }
            .boxed(),
        )
        .unwrap()
}

/// A request body that arrives as a client on a slow link sends it: each
/// piece when the test sends it, the end when the test drops the sender.
struct Arriving(tokio::sync::mpsc::Receiver<Bytes>);

impl Body for Arriving {
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.0
            .poll_recv(cx)
            .map(|piece| piece.map(|piece| Ok(Frame::data(piece))))
    }
}

/// `body` posted to `url` as it arrives: the request, and the sender of its
/// pieces.
fn arriving(
    url: &str,
) -> (
    Request<BoxBody<Bytes, BoxError>>,
    tokio::sync::mpsc::Sender<Bytes>,
) {
    let (pieces, arrived) = tokio::sync::mpsc::channel(4);
    let request = Request::post(url)
        .header("content-type", "application/json")
        .body(Arriving(arrived).boxed())
        .unwrap();
    (request, pieces)
}

/// `body` in two pieces, cut in the middle.
fn halves(body: &Value) -> (Bytes, Bytes) {
    let bytes = Bytes::from(body.to_string());
    let middle = bytes.len() / 2;
    (bytes.slice(..middle), bytes.slice(middle..))
}

fn chat_answer() -> Bytes {
    let chunk = |delta: Value, finish: Value| {
        json!({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-x",
            "choices":[{"index":0,"delta":delta,"finish_reason":finish}]})
    };
    let events = [
        chunk(json!({"role":"assistant","content":"Hello"}), Value::Null),
        chunk(json!({}), json!("stop")),
    ];
    let mut sse: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    sse.push_str("data: [DONE]\n\n");
    Bytes::from(sse)
}

/// Nothing the layer configures rewrites a Chat request: a retarget list
/// changes only Anthropic's server-side fallbacks, and fallback credit is
/// asked only of Anthropic. So the request goes upstream as it arrives,
/// its copy filling alongside, and is guarded all the same.
#[tokio::test]
async fn a_chat_request_with_a_chain_and_a_retarget_list_reaches_the_upstream_before_its_body_is_whole(
) {
    let script = Script::new(vec![Reply::Sse(vec![Step::Data(chat_answer())])]);
    let guard = RefusalGuardLayer::new()
        .fallback_chains(FallbackChains::new().chain("gpt-x", ["gpt-y"]))
        .retarget_fallbacks(["claude-y"])
        .layer(script.clone());
    let body = json!({"model":"gpt-x","stream":true,
        "messages":[{"role":"user","content":"Audit my SSH config"}]});
    let (first, rest) = halves(&body);
    let (request, pieces) = arriving("https://api.openai.com/v1/chat/completions");
    let answered = tokio::spawn(guard.oneshot(request));
    pieces.send(first).await.unwrap();
    eventually("the upstream gets the request", || script.called() == 1).await;
    assert_eq!(script.requests(), 0, "its body is not whole yet");
    pieces.send(rest).await.unwrap();
    drop(pieces);

    let response = answered.await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.extensions().get::<RefusalHandle>().is_some(),
        "guarded"
    );
    let (bytes, error) = read(response.into_body()).await;
    assert!(error.is_none());
    assert_eq!(bytes, chat_answer());
    let (headers, sent) = &script.seen()[0];
    assert_eq!(sent, &body, "the body as the client sent it");
    assert_eq!(headers["accept-encoding"], "identity");
}

/// A retarget list may rewrite a first-party Anthropic request's
/// server-side fallbacks, so its body is read whole before anything goes
/// upstream.
#[tokio::test]
async fn an_anthropic_request_with_a_retarget_list_is_read_whole_before_it_is_sent() {
    let script = Script::new(vec![Reply::Sse(vec![Step::Data(answer())])]);
    let guard = RefusalGuardLayer::new()
        .retarget_fallbacks(["claude-y"])
        .layer(script.clone());
    let body = json!({"model":"claude-x","max_tokens":64,"stream":true,
        "messages":[{"role":"user","content":"Audit my SSH config"}]});
    let (first, rest) = halves(&body);
    let (request, pieces) = arriving("https://api.anthropic.com/v1/messages");
    let answered = tokio::spawn(guard.oneshot(request));
    pieces.send(first).await.unwrap();
    // The positive control: the first half was taken off the channel, so
    // the request is being read. A forwarded request reaches the upstream
    // before its body is read at all (the chat test above), so only now is
    // "not called" news.
    eventually("the first half was read", || {
        pieces.capacity() == pieces.max_capacity()
    })
    .await;
    assert_eq!(script.called(), 0, "nothing sent before the body is whole");
    pieces.send(rest).await.unwrap();
    drop(pieces);

    let response = answered.await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    let (bytes, error) = read(response.into_body()).await;
    assert!(error.is_none());
    assert_eq!(bytes, answer());
    assert_eq!(script.called(), 1);
    assert_eq!(script.seen()[0].1, body);
}
