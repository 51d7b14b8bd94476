//! [`RefusalGuard`]: the tower service.
//!
//! A guarded call reads the request body (bounded), sends the request,
//! holds the response back while no real output has been seen, and on an
//! empty refusal walks the recovery ladder before it answers. Everything the
//! guard does not recognise passes straight through.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;
use tower_service::Service;

use crate::body::{BoxError, GuardBody, Settle, Splice, StreamWatch};
use crate::dialect::{self, Dialect, Handoff, RefusalInfo};
use crate::layer::Config;
use crate::ledger::ConversationKey;
use crate::recovery::RescueModel;
use crate::refusal::{
    Attempt, AttemptResult, AttemptStep, DeadReason, Outcome, Refusal, RefusalHandle, RefusalKind,
    RefusalSignal,
};
use crate::replay::ReplayBody;
use crate::soft::PrefixVerdict;
use crate::telemetry::RefusalRecord;

/// How long a fallback credit token stays redeemable after its refusal.
const CREDIT_TOKEN_LIFETIME: Duration = Duration::from_secs(5 * 60);

/// The middleware service. Built by [`RefusalGuardLayer`](crate::RefusalGuardLayer).
///
/// ```
/// use bytes::Bytes;
/// use http_body_util::Full;
/// use refusal_guard::RefusalGuardLayer;
/// use tower::{service_fn, ServiceBuilder};
///
/// let client = ServiceBuilder::new()
///     .layer(RefusalGuardLayer::new())
///     .service(service_fn(|_req: http::Request<Full<Bytes>>| async {
///         Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from("{}"))))
///     }));
/// # let _ = client;
/// ```
pub struct RefusalGuard<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S: Clone> Clone for RefusalGuard<S> {
    fn clone(&self) -> Self {
        RefusalGuard {
            inner: self.inner.clone(),
            config: self.config.clone(),
        }
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for RefusalGuard<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RefusalGuard")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .finish()
    }
}

impl<S> RefusalGuard<S> {
    pub(crate) fn new(inner: S, config: Arc<Config>) -> Self {
        RefusalGuard { inner, config }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

type GuardedFuture<R, E> = Pin<Box<dyn Future<Output = Result<Response<GuardBody<R>>, E>> + Send>>;

pin_project_lite::pin_project! {
    /// The response future of [`RefusalGuard`].
    pub struct ResponseFuture<F, R, E> {
        #[pin]
        kind: Kind<F, R, E>,
    }
}

pin_project_lite::pin_project! {
    #[project = KindProj]
    enum Kind<F, R, E> {
        // A request the guard does not guard.
        Passthrough {
            #[pin]
            future: F,
        },
        // A guarded request.
        Guarded {
            future: GuardedFuture<R, E>,
        },
    }
}

impl<F, R, E> Future for ResponseFuture<F, R, E>
where
    F: Future<Output = Result<Response<R>, E>>,
{
    type Output = Result<Response<GuardBody<R>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Passthrough { future } => future
                .poll(cx)
                .map(|result| result.map(|response| response.map(GuardBody::passthrough))),
            KindProj::Guarded { future } => future.as_mut().poll(cx),
        }
    }
}

impl<F, R, E> std::fmt::Debug for ResponseFuture<F, R, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<S, B, R> Service<Request<B>> for RefusalGuard<S>
where
    S: Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: ReplayBody,
    B::Data: Send,
    B::Error: Into<BoxError>,
    R: Body + Send + 'static,
    R::Data: Send,
    R::Error: Into<BoxError>,
{
    type Response = Response<GuardBody<R>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, R, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The clone-and-swap idiom: the service that was polled ready is the
        // one that serves this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        match dialect::recognise(request.method(), request.uri()) {
            None => ResponseFuture {
                kind: Kind::Passthrough {
                    future: inner.call(request),
                },
            },
            Some(recognised) => ResponseFuture {
                kind: Kind::Guarded {
                    future: Box::pin(guard(
                        Upstream {
                            inner,
                            primed: true,
                        },
                        self.config.clone(),
                        recognised.dialect,
                        recognised.path_model,
                        request,
                    )),
                },
            },
        }
    }
}

/// The inner service, remembering whether it was already polled ready.
struct Upstream<S> {
    inner: S,
    primed: bool,
}

impl<S> Upstream<S> {
    async fn send<B, R>(&mut self, request: Request<B>) -> Result<Response<R>, S::Error>
    where
        S: Service<Request<B>, Response = Response<R>>,
    {
        if !std::mem::take(&mut self.primed) {
            self.inner.ready().await?;
        }
        self.inner.call(request).await
    }
}

/// The request as the guard will send it, before any recovery rewrite.
#[derive(Clone)]
struct Template {
    parts: http::request::Parts,
    json: Value,
}

impl Template {
    fn request<B: ReplayBody>(&self, json: &Value) -> Request<B> {
        let bytes = Bytes::from(serde_json::to_vec(json).unwrap_or_default());
        with_body(self.parts.clone(), bytes, true)
    }
}

/// Builds a request, making its length headers true of the new body.
fn with_body<B: ReplayBody>(
    mut parts: http::request::Parts,
    bytes: Bytes,
    rewritten: bool,
) -> Request<B> {
    if rewritten {
        parts.headers.remove(TRANSFER_ENCODING);
        parts
            .headers
            .insert(CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    }
    Request::from_parts(parts, B::from_bytes(bytes))
}

enum RequestBody<B> {
    Read(Bytes),
    /// Too large to guard, or failed while read: forward as it is.
    Forward(B),
}

async fn read_request_body<B>(headers: &HeaderMap, mut body: B, limit: usize) -> RequestBody<B>
where
    B: ReplayBody,
    B::Error: Into<BoxError>,
{
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .or_else(|| body.size_hint().exact());
    if declared.is_some_and(|len| len > limit as u64) {
        return RequestBody::Forward(body);
    }
    let mut buffer = BytesMut::new();
    loop {
        match body.frame().await {
            None => return RequestBody::Read(buffer.freeze()),
            Some(Ok(frame)) => {
                if let Ok(mut data) = frame.into_data() {
                    while data.has_remaining() {
                        let chunk = data.chunk();
                        buffer.extend_from_slice(chunk);
                        let n = chunk.len();
                        data.advance(n);
                    }
                }
                if buffer.len() > limit {
                    tracing::debug!(limit, "request body over the limit: forwarded unguarded");
                    return RequestBody::Forward(B::prefixed(buffer.freeze(), body));
                }
            }
            Some(Err(error)) => {
                let error: BoxError = error.into();
                tracing::warn!(%error, "request body failed while read: forwarded unguarded");
                return RequestBody::Forward(B::prefixed(buffer.freeze(), body));
            }
        }
    }
}

/// Everything known about the call that records and settles need.
#[derive(Clone)]
struct Call {
    config: Arc<Config>,
    dialect: &'static dyn Dialect,
    model: Option<String>,
    conversation: Option<ConversationKey>,
    started: Instant,
    handle: RefusalHandle,
}

impl Call {
    #[allow(clippy::too_many_arguments)]
    fn refusal(
        &self,
        info: &RefusalInfo,
        kind: RefusalKind,
        outcome: Outcome,
        reason: Option<DeadReason>,
        model: Option<String>,
        served_model: Option<String>,
        request_id: Option<String>,
    ) -> Refusal {
        Refusal {
            provider: self.dialect.provider(),
            wire_api: self.dialect.wire_api(),
            signal: info.signal.unwrap_or(RefusalSignal::StopReason),
            category: info.category.clone(),
            explanation: info.explanation.clone(),
            model: model.or_else(|| self.model.clone()),
            request_id,
            kind,
            outcome,
            reason,
            served_model,
        }
    }

    /// Sends the record to the sink and settles the handle.
    fn emit(&self, refusal: &Refusal, attempts: Vec<Attempt>) {
        let latency_ms = millis(self.started.elapsed());
        tracing::info!(
            provider = %refusal.provider,
            category = refusal.code(),
            outcome = %refusal.outcome,
            reason = refusal.reason.map(DeadReason::as_str),
            attempts = attempts.len(),
            latency_ms,
            "refusal"
        );
        let record = RefusalRecord::new(
            refusal,
            attempts,
            self.conversation.as_ref().map(|k| k.as_str().to_owned()),
            latency_ms,
        );
        // A sink that panics must not take the request down with it.
        let sink = self.config.telemetry.clone();
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink.record(&record))).is_err()
        {
            tracing::warn!("telemetry sink panicked; record dropped");
        }
        self.handle.settle(Some(refusal.clone()));
    }

    fn record_output(&self) {
        if let Some(key) = &self.conversation {
            self.config.ledger.record_output(key);
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// What holding a response back showed.
enum Verdict {
    /// Not something the guard judges (an error status, another content
    /// type): passed through as it is.
    Pass,
    /// Real output: commit.
    Output,
    /// A refusal before any real output. `complete` when the whole response
    /// was read, so it can still be delivered byte-exact.
    Refused { info: RefusalInfo, complete: bool },
    /// The response ended without real output and without a refusal.
    Ended,
    /// A provider error event arrived before any output.
    Errored,
    /// A hold bound was reached first.
    Limit,
}

/// A response held back: its head, what was read of its body, and the rest.
struct Held<R> {
    parts: http::response::Parts,
    frames: VecDeque<Frame<Bytes>>,
    rest: Option<Pin<Box<R>>>,
    error: Option<BoxError>,
    /// For streams: the watch that goes on judging after commit.
    watch: Option<StreamWatch>,
    /// For whole JSON bodies: what the body showed.
    judged: Option<crate::body::Findings>,
    verdict: Verdict,
}

impl<R> Held<R> {
    fn status(&self) -> u16 {
        self.parts.status.as_u16()
    }
}

fn content_type(headers: &HeaderMap) -> &str {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    content_type(headers)
        .trim_start()
        .to_ascii_lowercase()
        .starts_with("text/event-stream")
}

fn is_json(headers: &HeaderMap) -> bool {
    let kind = content_type(headers).to_ascii_lowercase();
    let essence = kind.split(';').next().unwrap_or("").trim();
    essence == "application/json" || essence.ends_with("+json")
}

async fn hold<R>(
    response: Response<R>,
    dialect: &'static dyn Dialect,
    config: &Config,
    streaming: bool,
) -> Held<R>
where
    R: Body,
    R::Error: Into<BoxError>,
{
    let (parts, body) = response.into_parts();
    let mut held = Held {
        parts,
        frames: VecDeque::new(),
        rest: Some(Box::pin(body)),
        error: None,
        watch: None,
        judged: None,
        verdict: Verdict::Pass,
    };
    let success = held.parts.status.is_success();
    // A stream sent without a content type is still judged as the stream the
    // request asked for.
    let untyped = held.parts.headers.get(CONTENT_TYPE).is_none();
    if success && (is_event_stream(&held.parts.headers) || (untyped && streaming)) {
        hold_stream(&mut held, dialect, config).await;
    } else if (success || dialect.refuses_with_errors())
        && (is_json(&held.parts.headers) || (untyped && !streaming))
    {
        hold_json(&mut held, dialect, config, success).await;
    }
    held
}

async fn hold_stream<R>(held: &mut Held<R>, dialect: &'static dyn Dialect, config: &Config)
where
    R: Body,
    R::Error: Into<BoxError>,
{
    let mut watch = StreamWatch::new(dialect.stream_inspector(), config.max_hold_bytes.max(1));
    let mut bytes = 0usize;
    // Whether the text detector still has to rule on this answer.
    let mut text_pending = config.text_detection;
    let Some(body) = held.rest.as_mut() else {
        return;
    };
    let verdict = loop {
        match body.frame().await {
            None => {
                held.rest = None;
                watch.finish();
                if text_pending {
                    watch.findings.judge_text();
                }
                break match &watch.findings.empty_refusal {
                    Some(info) => Verdict::Refused {
                        info: info.clone(),
                        complete: true,
                    },
                    None if watch.findings.output => Verdict::Output,
                    None if watch.findings.error => Verdict::Errored,
                    None => Verdict::Ended,
                };
            }
            Some(Err(error)) => {
                // Reading stops here; the client will see this error after
                // what was read, as the provider's connection delivered it.
                held.rest = None;
                held.error = Some(error.into());
                break match &watch.findings.empty_refusal {
                    Some(info) => Verdict::Refused {
                        info: info.clone(),
                        complete: true,
                    },
                    None => Verdict::Errored,
                };
            }
            Some(Ok(frame)) => {
                let frame = frame.map_data(|mut d| d.copy_to_bytes(d.remaining()));
                if let Some(data) = frame.data_ref() {
                    bytes += data.len();
                    watch.feed(data);
                }
                held.frames.push_back(frame);
                if text_pending {
                    let findings = &mut watch.findings;
                    if findings.tool_call || findings.empty_refusal.is_some() {
                        text_pending = false;
                    } else if findings.output {
                        // Text alone so far: commit as soon as its opening
                        // rules a prose refusal out, else hold up to the cap.
                        if crate::soft::prefix_verdict(&findings.text) == PrefixVerdict::RuledOut {
                            text_pending = false;
                        } else if findings.text.len() >= config.text_hold_bytes {
                            text_pending = false;
                            findings.judge_text();
                        }
                    }
                }
                let findings = &watch.findings;
                if findings.empty_refusal.is_none() {
                    if findings.output && !text_pending {
                        break Verdict::Output;
                    }
                    if findings.error {
                        break Verdict::Errored;
                    }
                }
                if watch.blind
                    || bytes > config.max_hold_bytes
                    || watch.frames > config.max_hold_frames
                {
                    // Committing blind: say why, since a refusal that comes
                    // later can no longer be recovered.
                    tracing::warn!(
                        wire_api = %dialect.wire_api(),
                        held_bytes = bytes,
                        held_frames = watch.frames,
                        oversized_frame = watch.blind,
                        "hold limit reached before a decision; letting the response through"
                    );
                    break match &findings.empty_refusal {
                        Some(info) => Verdict::Refused {
                            info: info.clone(),
                            complete: false,
                        },
                        None => Verdict::Limit,
                    };
                }
            }
        }
    };
    held.verdict = verdict;
    held.watch = Some(watch);
}

async fn hold_json<R>(
    held: &mut Held<R>,
    dialect: &'static dyn Dialect,
    config: &Config,
    success: bool,
) where
    R: Body,
    R::Error: Into<BoxError>,
{
    let Some(body) = held.rest.as_mut() else {
        return;
    };
    let mut buffer = BytesMut::new();
    loop {
        match body.frame().await {
            None => break,
            Some(Err(error)) => {
                held.rest = None;
                held.error = Some(error.into());
                held.verdict = Verdict::Errored;
                return;
            }
            Some(Ok(frame)) => {
                let frame = frame.map_data(|mut d| d.copy_to_bytes(d.remaining()));
                if let Some(data) = frame.data_ref() {
                    buffer.extend_from_slice(data);
                }
                held.frames.push_back(frame);
                if buffer.len() > config.max_response_body {
                    held.verdict = Verdict::Limit;
                    return;
                }
            }
        }
    }
    held.rest = None;
    let Ok(json) = serde_json::from_slice::<Value>(&buffer) else {
        // Not JSON after all: pass it on as it came.
        held.verdict = if success {
            Verdict::Ended
        } else {
            Verdict::Pass
        };
        return;
    };
    if !success {
        held.verdict = match dialect.inspect_error(held.parts.status, &json) {
            Some(info) => Verdict::Refused {
                info,
                complete: true,
            },
            None => Verdict::Pass,
        };
        return;
    }
    let mut findings = crate::body::Findings::default();
    findings.absorb(dialect.inspect_json(&json));
    if config.text_detection {
        findings.judge_text();
    }
    held.verdict = match &findings.empty_refusal {
        Some(info) => Verdict::Refused {
            info: info.clone(),
            complete: true,
        },
        None if findings.output => Verdict::Output,
        None if findings.error => Verdict::Errored,
        None => Verdict::Ended,
    };
    held.judged = Some(findings);
}

/// Settles a response the guard let through: what it showed decides whether
/// there is a refusal to record (partial, a server-side fallback, or an
/// empty refusal that came after the hold bound).
struct Watched {
    call: Call,
    request_id: Option<String>,
    attempts: Vec<Attempt>,
    /// Set when the response served is a recovery attempt committed before
    /// its outcome was known: the original refusal and the outcome should the
    /// attempt produce output.
    recovery: Option<(RefusalInfo, Outcome, Option<String>)>,
}

impl Settle for Watched {
    fn settle(self: Box<Self>, watch: Option<&StreamWatch>, output_before: bool) {
        let Some(watch) = watch else {
            self.call.handle.settle(None);
            return;
        };
        let findings = &watch.findings;
        if findings.output && !output_before {
            self.call.record_output();
        }
        let this = *self;
        let refusal = match this.recovery {
            Some((original, success, served)) => Some(if findings.output {
                this.call.refusal(
                    &original,
                    RefusalKind::Empty,
                    success,
                    None,
                    None,
                    served,
                    this.request_id.clone(),
                )
            } else {
                let reason = if findings.empty_refusal.is_some() {
                    DeadReason::StillRefused
                } else {
                    DeadReason::NoOutput
                };
                this.call.refusal(
                    &original,
                    RefusalKind::Empty,
                    Outcome::Dead,
                    Some(reason),
                    None,
                    served,
                    this.request_id.clone(),
                )
            }),
            None => judge_findings(&this.call, findings, this.request_id.clone(), true),
        };
        match refusal {
            Some(refusal) => this.call.emit(&refusal, this.attempts),
            None => this.call.handle.settle(None),
        }
    }
}

/// The refusal, if any, in a response that was let through as it was.
fn judge_findings(
    call: &Call,
    findings: &crate::body::Findings,
    request_id: Option<String>,
    held_back: bool,
) -> Option<Refusal> {
    let served_model = findings.model.clone().or_else(|| call.model.clone());
    if let Some(info) = &findings.partial_refusal {
        return Some(call.refusal(
            info,
            RefusalKind::Partial,
            Outcome::Partial,
            None,
            None,
            served_model,
            request_id,
        ));
    }
    if let Some(info) = &findings.empty_refusal {
        // Only reachable when the hold bound forced the guard to let the
        // response through before the refusal arrived.
        return Some(call.refusal(
            info,
            RefusalKind::Empty,
            Outcome::Dead,
            Some(if held_back {
                DeadReason::HoldLimit
            } else {
                DeadReason::Unrecoverable
            }),
            None,
            served_model,
            request_id,
        ));
    }
    findings.server_fallback.as_ref().map(|fallback| {
        let info = RefusalInfo {
            signal: Some(RefusalSignal::StopReason),
            category: fallback.category.clone(),
            ..RefusalInfo::default()
        };
        call.refusal(
            &info,
            RefusalKind::Empty,
            Outcome::Fallback,
            None,
            fallback.from.clone(),
            fallback.to.clone().or(served_model),
            request_id,
        )
    })
}

/// Turns a held response into the response the client gets.
fn serve<R>(
    held: Held<R>,
    call: &Call,
    settle: Option<Watched>,
    decided: Option<&Refusal>,
    splice: Option<Splice>,
) -> Response<GuardBody<R>>
where
    R: Body + Send + 'static,
    R::Error: Into<BoxError>,
{
    let Held {
        parts,
        frames,
        rest,
        error,
        watch,
        ..
    } = held;
    let settle = settle.map(|s| Box::new(s) as Box<dyn Settle>);
    let mut response = Response::from_parts(
        parts,
        GuardBody::guarded(frames, rest, error, watch, settle, splice),
    );
    response.extensions_mut().insert(call.handle.clone());
    if let Some(refusal) = decided {
        response.extensions_mut().insert(refusal.clone());
    }
    response
}

/// A response whose refusal question is settled now (JSON, or a decision
/// made before serving).
fn serve_settled<R>(
    held: Held<R>,
    call: &Call,
    refusal: Option<Refusal>,
    attempts: Vec<Attempt>,
    splice: Option<Splice>,
) -> Response<GuardBody<R>>
where
    R: Body + Send + 'static,
    R::Error: Into<BoxError>,
{
    match &refusal {
        Some(refusal) => call.emit(refusal, attempts),
        None => call.handle.settle(None),
    }
    let mut held = held;
    // The decision is made; nothing more to watch.
    held.watch = None;
    serve(held, call, None, refusal.as_ref(), splice)
}

async fn guard<S, B, R>(
    mut upstream: Upstream<S>,
    config: Arc<Config>,
    dialect: &'static dyn Dialect,
    path_model: Option<String>,
    request: Request<B>,
) -> Result<Response<GuardBody<R>>, S::Error>
where
    S: Service<Request<B>, Response = Response<R>> + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: ReplayBody,
    B::Error: Into<BoxError>,
    R: Body + Send + 'static,
    R::Error: Into<BoxError>,
{
    let started = Instant::now();
    let (mut parts, body) = request.into_parts();
    // The conversation header is the guard's own: it never goes upstream,
    // whether or not the request turns out to be guardable.
    let header_key = config
        .conversation_header
        .as_ref()
        .and_then(|name| parts.headers.remove(name))
        .and_then(|v| v.to_str().ok().map(str::to_owned));
    let bytes = match read_request_body(&parts.headers, body, config.max_request_body).await {
        RequestBody::Read(bytes) => bytes,
        RequestBody::Forward(body) => {
            return pass(upstream, Request::from_parts(parts, body)).await
        }
    };
    let mut json = match serde_json::from_slice::<Value>(&bytes) {
        Ok(json @ Value::Object(_)) => json,
        // Not a JSON object: nothing to guard, forward the bytes as they were.
        _ => return pass(upstream, with_body(parts, bytes, false)).await,
    };
    if let Some(reason) = dialect.unguardable(&json) {
        tracing::debug!(
            wire_api = %dialect.wire_api(),
            reason,
            "request cannot be guarded: forwarded unguarded"
        );
        return pass(upstream, with_body(parts, bytes, false)).await;
    }

    // Which conversation: the user's closure, then the header, then a hash of
    // what stays the same across the conversation.
    let conversation = config
        .conversation_fn
        .as_ref()
        .and_then(|key| key(&parts, &json))
        .or(header_key)
        .map(|key| ConversationKey::from_bytes(key.as_bytes()))
        .or_else(|| {
            dialect.conversation_seed(&json).map(|seed| {
                let mut keyed = dialect.wire_api().as_str().as_bytes().to_vec();
                keyed.extend_from_slice(&seed);
                ConversationKey::from_bytes(&keyed)
            })
        });

    let mut model = dialect.request_model(path_model.as_deref(), &json);
    let streaming = dialect.is_streaming(&parts.uri, &json);
    let mut rewritten = false;

    // Sticky fallback: a conversation a fallback served goes there directly.
    if config.sticky_ttl.is_some() {
        if let Some(sticky) = conversation
            .as_ref()
            .and_then(|k| config.ledger.sticky_model(k))
        {
            if model.as_deref() != Some(sticky.as_str())
                && dialect
                    .swap_model(&mut parts.uri, &mut json, &sticky)
                    .is_ok()
            {
                tracing::debug!(from = ?model, to = %sticky, "sticky fallback route");
                model = Some(sticky);
                rewritten = true;
            }
        }
    }
    if !config.retarget.is_empty() {
        rewritten |= dialect.retarget_fallbacks(
            &mut parts.headers,
            &mut json,
            &config.retarget,
            model.as_deref(),
            config.inject_fallbacks,
        );
    }
    let chain: Vec<String> = model
        .as_deref()
        .map(|m| config.chains.for_model(m).to_vec())
        .unwrap_or_default();
    if config.fallback_credit && !chain.is_empty() {
        dialect.request_fallback_credit(&mut parts.headers);
    }

    let call = Call {
        config: config.clone(),
        dialect,
        model: model.clone(),
        conversation,
        started,
        handle: RefusalHandle::default(),
    };
    let template = Template { parts, json };
    let original = if rewritten {
        template.request(&template.json)
    } else {
        with_body(template.parts.clone(), bytes, false)
    };

    let sent = Instant::now();
    let response = upstream.send(original).await?;
    let keepalive = config
        .keepalive_after
        .filter(|_| response.status().is_success() && is_event_stream(response.headers()));
    let (head, body) = response.into_parts();
    let early_head = keepalive.map(|_| head.clone());
    let decision = decide(
        upstream,
        call.clone(),
        template,
        chain,
        streaming,
        Response::from_parts(head, body),
        sent,
    );
    let (Some(after), Some(head)) = (keepalive, early_head) else {
        return Ok(decision.await);
    };
    // A long hold (minutes of extended thinking) must not starve the client:
    // past `after`, answer with the original head and keep the connection
    // busy with SSE comments until the decision is made.
    let mut decision = Box::pin(decision);
    let mut timer = Box::pin(tokio::time::sleep(after));
    let early = std::future::poll_fn(|cx| {
        if let Poll::Ready(served) = decision.as_mut().poll(cx) {
            return Poll::Ready(Some(served));
        }
        timer.as_mut().poll(cx).map(|()| None)
    })
    .await;
    Ok(match early {
        Some(served) => served,
        None => keep_alive(head, decision, &call, config.keepalive_interval),
    })
}

/// Answers with `head` now and streams the decision's response body when it
/// comes, SSE comments meanwhile.
fn keep_alive<R, F>(
    mut head: http::response::Parts,
    decision: Pin<Box<F>>,
    call: &Call,
    interval: Duration,
) -> Response<GuardBody<R>>
where
    F: Future<Output = Response<GuardBody<R>>> + Send + 'static,
    R: Body + Send + 'static,
    R::Error: Into<BoxError>,
{
    let (sender, receiver) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        let mut body = decision.await.into_body();
        while let Some(frame) = body.frame().await {
            if sender.send(frame).await.is_err() {
                // The client went away: dropping the body cancels upstream.
                break;
            }
        }
    });
    // The body that follows is not the one this length was for.
    head.headers.remove(CONTENT_LENGTH);
    let mut response = Response::from_parts(head, GuardBody::keep_alive(receiver, interval));
    response.extensions_mut().insert(call.handle.clone());
    response
}

/// Holds the original response, then serves it or climbs the ladder.
async fn decide<S, B, R>(
    upstream: Upstream<S>,
    call: Call,
    template: Template,
    chain: Vec<String>,
    streaming: bool,
    response: Response<R>,
    sent: Instant,
) -> Response<GuardBody<R>>
where
    S: Service<Request<B>, Response = Response<R>> + Send,
    B: ReplayBody,
    R: Body + Send + 'static,
    R::Error: Into<BoxError>,
{
    let config = call.config.clone();
    let dialect = call.dialect;
    let model = call.model.clone();
    let held = hold(response, dialect, &config, streaming).await;
    let request_id = dialect.request_id(&held.parts.headers);
    let original_attempt = Attempt {
        step: AttemptStep::Original,
        model: model.clone(),
        result: AttemptResult::Served,
        status: Some(held.status()),
        latency_ms: millis(sent.elapsed()),
    };

    match held.verdict {
        Verdict::Refused { ref info, complete } if complete => {
            let info = info.clone();
            let original_attempt = Attempt {
                result: AttemptResult::Refused,
                ..original_attempt
            };
            recover(
                upstream,
                call,
                template,
                chain,
                streaming,
                held,
                info,
                original_attempt,
                request_id,
            )
            .await
        }
        Verdict::Refused { ref info, .. } => {
            // Too much came before or after the refusal to keep it whole:
            // the client gets it as it is, and the log says why.
            let refusal = call.refusal(
                info,
                RefusalKind::Empty,
                Outcome::Dead,
                Some(DeadReason::HoldLimit),
                None,
                model.clone(),
                request_id,
            );
            let attempts = vec![Attempt {
                result: AttemptResult::Refused,
                ..original_attempt
            }];
            call.emit(&refusal, attempts);
            let watch = None;
            let mut held = held;
            held.watch = watch;
            serve(held, &call, None, Some(&refusal), None)
        }
        Verdict::Pass => {
            call.handle.settle(None);
            serve(held, &call, None, None, None)
        }
        _ => {
            let output = matches!(held.verdict, Verdict::Output);
            if output {
                call.record_output();
            }
            if let Some(findings) = held.judged.clone() {
                let refusal = judge_findings(&call, &findings, request_id, false);
                return serve_settled(held, &call, refusal, vec![original_attempt], None);
            }
            let settle = Watched {
                call: call.clone(),
                request_id,
                attempts: vec![original_attempt],
                recovery: None,
            };
            serve(held, &call, Some(settle), None, None)
        }
    }
}

/// Forwards a request the guard will not judge.
async fn pass<S, B, R>(
    mut upstream: Upstream<S>,
    request: Request<B>,
) -> Result<Response<GuardBody<R>>, S::Error>
where
    S: Service<Request<B>, Response = Response<R>>,
{
    let response = upstream.send(request).await?;
    Ok(response.map(GuardBody::passthrough))
}

/// Marks a handoff inside a whole (already read) JSON body.
fn mark_json<R>(held: &mut Held<R>, dialect: &'static dyn Dialect, handoff: &Handoff<'_>) {
    if held.rest.is_some() {
        return;
    }
    let mut whole = BytesMut::new();
    for frame in &held.frames {
        if let Some(data) = frame.data_ref() {
            whole.extend_from_slice(data);
        }
    }
    let Ok(mut json) = serde_json::from_slice::<Value>(&whole) else {
        return;
    };
    if dialect.handoff_json(&mut json, handoff) {
        let bytes = Bytes::from(serde_json::to_vec(&json).unwrap_or_default());
        held.parts
            .headers
            .insert(CONTENT_LENGTH, HeaderValue::from(bytes.len()));
        held.frames = VecDeque::from([Frame::data(bytes)]);
    }
}

/// One rung of the ladder.
enum Step {
    Fallback(String),
    Rescue,
}

#[allow(clippy::too_many_arguments)]
async fn recover<S, B, R>(
    mut upstream: Upstream<S>,
    call: Call,
    template: Template,
    chain: Vec<String>,
    streaming: bool,
    original: Held<R>,
    info: RefusalInfo,
    original_attempt: Attempt,
    original_request_id: Option<String>,
) -> Response<GuardBody<R>>
where
    S: Service<Request<B>, Response = Response<R>> + Send,
    B: ReplayBody,
    R: Body + Send + 'static,
    R::Error: Into<BoxError>,
{
    let config = call.config.clone();
    let dialect = call.dialect;
    let refused_at = Instant::now();
    let mut attempts = vec![original_attempt];
    let mut credit = info.credit_token.clone().map(|token| (token, refused_at));
    let mut last_info = info.clone();
    let mut reason: Option<DeadReason> = None;
    let mut last_hop: Option<String> = None;
    let deadline = call.started + config.budget.deadline;

    let steps = chain
        .iter()
        .cloned()
        .map(Step::Fallback)
        .chain(std::iter::once(Step::Rescue));
    for step in steps {
        if attempts.len() as u32 >= config.budget.max_attempts || Instant::now() >= deadline {
            reason = Some(DeadReason::BudgetExhausted);
            break;
        }
        let mut json = template.json.clone();
        let mut parts = template.parts.clone();
        let (kind, step_model) = match &step {
            Step::Fallback(model) => {
                if dialect
                    .swap_model(&mut parts.uri, &mut json, model)
                    .is_err()
                {
                    reason = Some(DeadReason::Unrecoverable);
                    continue;
                }
                // A token is redeemable once, within its lifetime.
                if let Some((token, minted)) = credit.take() {
                    if minted.elapsed() < CREDIT_TOKEN_LIFETIME {
                        dialect.attach_credit_token(&mut parts.headers, &mut json, &token);
                    }
                }
                last_hop = Some(model.clone());
                (AttemptStep::Fallback, Some(model.clone()))
            }
            Step::Rescue => {
                if !config.rescue.is_on() {
                    reason.get_or_insert(DeadReason::RescueOff);
                    break;
                }
                if let Some(key) = &call.conversation {
                    if !config.ledger.try_reserve_rescue(key, config.rescue_cap) {
                        reason = Some(DeadReason::RescueCap);
                        break;
                    }
                }
                let mut rescue_model = call.model.clone();
                if config.rescue_model == RescueModel::LastFallback {
                    if let Some(hop) = &last_hop {
                        if dialect.swap_model(&mut parts.uri, &mut json, hop).is_ok() {
                            rescue_model = Some(hop.clone());
                        }
                    }
                }
                let note = config.rescue_note.render(
                    last_info.category.as_deref(),
                    last_info.explanation.as_deref(),
                );
                if dialect.append_note(&mut json, &note).is_err() {
                    reason = Some(DeadReason::Unrecoverable);
                    break;
                }
                (AttemptStep::Rescue, rescue_model)
            }
        };
        let template_for_step = Template { parts, json };
        let request: Request<B> = template_for_step.request(&template_for_step.json);
        let sent = Instant::now();
        let remaining = deadline.saturating_duration_since(sent);
        let attempt = tokio::time::timeout(remaining, async {
            match upstream.send(request).await {
                Ok(response) => Ok(hold(response, dialect, &config, streaming).await),
                Err(_) => Err(()),
            }
        })
        .await;
        let mut record = Attempt {
            step: kind,
            model: step_model.clone(),
            result: AttemptResult::TransportError,
            status: None,
            latency_ms: millis(sent.elapsed()),
        };
        let held = match attempt {
            Err(_elapsed) => {
                attempts.push(record);
                reason = Some(DeadReason::BudgetExhausted);
                break;
            }
            Ok(Err(())) => {
                attempts.push(record);
                reason = Some(DeadReason::UpstreamError);
                continue;
            }
            Ok(Ok(held)) => held,
        };
        record.status = Some(held.status());
        // An error status the dialect reads as a refusal (Azure's 400
        // `content_filter`) is a refusal of this attempt, not an upstream error.
        if !held.parts.status.is_success() && !matches!(held.verdict, Verdict::Refused { .. }) {
            record.result = AttemptResult::HttpError;
            attempts.push(record);
            reason = Some(DeadReason::UpstreamError);
            continue;
        }
        let success = match kind {
            AttemptStep::Fallback => Outcome::Fallback,
            _ => Outcome::Rescued,
        };
        let served_model = held
            .watch
            .as_ref()
            .and_then(|w| w.findings.model.clone())
            .or_else(|| held.judged.as_ref().and_then(|f| f.model.clone()))
            .or(step_model.clone());
        let request_id = dialect.request_id(&held.parts.headers);
        match &held.verdict {
            Verdict::Output => {
                record.result = AttemptResult::Served;
                attempts.push(record);
                call.record_output();
                if let (Some(ttl), Some(key), Outcome::Fallback, Some(model)) =
                    (config.sticky_ttl, &call.conversation, success, &step_model)
                {
                    config.ledger.set_sticky_model(key, model, ttl);
                }
                let mut held = held;
                let mut splice = None;
                if let (true, Outcome::Fallback, Some(from), Some(to)) = (
                    config.handoff_marker,
                    success,
                    call.model.as_deref(),
                    step_model.as_deref(),
                ) {
                    let handoff = Handoff {
                        from,
                        to,
                        category: info.category.as_deref(),
                    };
                    if held.watch.is_some() {
                        splice = dialect
                            .handoff_stream(&handoff)
                            .map(|rewrite| Splice::new(rewrite, config.max_hold_bytes.max(1)));
                        held.parts.headers.remove(CONTENT_LENGTH);
                    } else {
                        mark_json(&mut held, dialect, &handoff);
                    }
                }
                let refusal = call.refusal(
                    &info,
                    RefusalKind::Empty,
                    success,
                    None,
                    None,
                    served_model,
                    request_id,
                );
                return serve_settled(held, &call, Some(refusal), attempts, splice);
            }
            Verdict::Limit => {
                // Held as long as allowed without a decision: serve it and
                // let the end of its stream decide the outcome.
                record.result = AttemptResult::Served;
                attempts.push(record);
                let settle = Watched {
                    call: call.clone(),
                    request_id,
                    attempts,
                    recovery: Some((info.clone(), success, served_model)),
                };
                return serve(held, &call, Some(settle), None, None);
            }
            Verdict::Refused { info: again, .. } => {
                record.result = AttemptResult::Refused;
                attempts.push(record);
                credit = again.credit_token.clone().map(|t| (t, Instant::now()));
                last_info = again.clone();
                reason = Some(DeadReason::StillRefused);
            }
            Verdict::Ended => {
                record.result = AttemptResult::NoOutput;
                attempts.push(record);
                reason = Some(DeadReason::NoOutput);
            }
            Verdict::Errored | Verdict::Pass => {
                record.result = AttemptResult::HttpError;
                attempts.push(record);
                reason = Some(DeadReason::UpstreamError);
            }
        }
    }

    let refusal = call.refusal(
        &info,
        RefusalKind::Empty,
        Outcome::Dead,
        Some(reason.unwrap_or(DeadReason::StillRefused)),
        None,
        call.model.clone(),
        original_request_id,
    );
    serve_settled(original, &call, Some(refusal), attempts, None)
}
