//! [`RefusalGuard`]: the tower service.
//!
//! A guarded call reads the request body (bounded), applies the outbound
//! rewrites and sends the request; holding the response back (`hold.rs`) and
//! climbing the ladder (`recovery.rs`) decide what the client gets, and
//! `respond.rs` turns that into the response and the record. Everything the
//! guard does not recognise passes straight through.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use http::header::{ACCEPT_ENCODING, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;
use tower_service::Service;

use crate::body::{BoxError, GuardBody, Splice};
use crate::dialect::{self, Dialect, LiveSplice};
use crate::hold::{hold, is_event_stream, Forward};
use crate::layer::Config;
use crate::recovery::{conclude, decide};
use crate::refusal::{RefusalHandle, StickyRoute};
use crate::replay::ReplayBody;
use crate::reserve::Share;
use crate::respond::{error_response, pump, timed_out, unless_gone, Call, ServedRecovery, Shape};
use crate::store::ConversationKey;
use crate::timeout::{IdleTimeout, TimeoutKind, UpstreamTimeout};

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
        // A request the guard does not guard: bounded by the head timeout,
        // its body by the idle timeout.
        Passthrough {
            #[pin]
            future: F,
            // Started at the first poll, so that calling needs no runtime.
            #[pin]
            head: Option<tokio::time::Sleep>,
            timeouts: Timeouts,
            path: String,
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
            KindProj::Passthrough {
                future,
                mut head,
                timeouts,
                path,
            } => {
                if let Poll::Ready(result) = future.poll(cx) {
                    let idle = timeouts.idle;
                    return Poll::Ready(result.map(|response| {
                        response.map(|body| GuardBody::passthrough(IdleTimeout::new(body, idle)))
                    }));
                }
                if head.is_none() {
                    head.set(Some(tokio::time::sleep(timeouts.head)));
                }
                if let Some(sleep) = head.as_pin_mut() {
                    ready!(sleep.poll(cx));
                }
                let timeout = UpstreamTimeout::new(TimeoutKind::Head, timeouts.head);
                Poll::Ready(Ok(timed_out(Shape::Path(path), timeout)))
            }
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
        let timeouts = Timeouts::of(&self.config);
        match dialect::recognise(request.method(), request.uri()) {
            None => ResponseFuture {
                kind: Kind::Passthrough {
                    path: request.uri().path().to_owned(),
                    future: inner.call(request),
                    head: None,
                    timeouts,
                },
            },
            Some(recognised) => ResponseFuture {
                kind: Kind::Guarded {
                    future: Box::pin(tracing::Instrument::instrument(
                        guard(
                            Upstream {
                                inner,
                                primed: true,
                                timeouts,
                            },
                            self.config.clone(),
                            recognised.dialect,
                            recognised.path_model,
                            request,
                        ),
                        crate::metrics::request_span(recognised.dialect.wire_api()),
                    )),
                },
            },
        }
    }
}

/// The bounds on waiting for the upstream.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub(crate) head: Duration,
    pub(crate) idle: Duration,
}

impl Timeouts {
    fn of(config: &Config) -> Self {
        Timeouts {
            head: config.head_timeout,
            idle: config.idle_timeout,
        }
    }
}

/// Why a request sent upstream got no response.
pub(crate) enum SendError<E> {
    /// The inner service failed.
    Inner(E),
    /// No response head within the head timeout.
    Timeout(UpstreamTimeout),
}

/// The inner service, remembering whether it was already polled ready.
pub(crate) struct Upstream<S> {
    inner: S,
    primed: bool,
    timeouts: Timeouts,
}

impl<S> Upstream<S> {
    /// Sends `request`: its head within the head timeout, its body then
    /// bounded by the idle timeout.
    pub(crate) async fn send<B, R>(
        &mut self,
        request: Request<B>,
    ) -> Result<Response<IdleTimeout<R>>, SendError<S::Error>>
    where
        S: Service<Request<B>, Response = Response<R>>,
    {
        let Timeouts { head, idle } = self.timeouts;
        let primed = std::mem::take(&mut self.primed);
        let inner = &mut self.inner;
        let sent = async move {
            if !primed {
                inner.ready().await?;
            }
            inner.call(request).await
        };
        match tokio::time::timeout(head, sent).await {
            Ok(Ok(response)) => Ok(response.map(|body| IdleTimeout::new(body, idle))),
            Ok(Err(error)) => Err(SendError::Inner(error)),
            Err(_elapsed) => Err(SendError::Timeout(UpstreamTimeout::new(
                TimeoutKind::Head,
                head,
            ))),
        }
    }
}

/// The request as the guard will send it, before any recovery rewrite.
#[derive(Clone)]
pub(crate) struct Template {
    pub(crate) parts: http::request::Parts,
    pub(crate) json: Value,
    /// The layer-wide pool's part for the buffered request body, given back
    /// when the call is decided.
    pub(crate) _share: Arc<Share>,
}

impl Template {
    pub(crate) fn request<B: ReplayBody>(&self, json: &Value) -> Request<B> {
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
    /// Too large to guard: forward as it is, streaming.
    Forward(B),
    /// The client's body failed while read: nothing goes upstream.
    Failed(BoxError),
    /// The layer-wide bound on held bytes leaves no room to buffer it.
    NoRoom,
}

async fn read_request_body<B>(
    headers: &HeaderMap,
    mut body: B,
    limit: usize,
    share: &mut Share,
) -> RequestBody<B>
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
                    if !share.grow(data.remaining()) {
                        tracing::warn!(
                            "the bound on bytes held across requests is reached: request refused"
                        );
                        return RequestBody::NoRoom;
                    }
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
                // A truncated request must never reach the upstream as if
                // it were complete.
                let error: BoxError = error.into();
                tracing::warn!(%error, "request body failed while read: not forwarded");
                return RequestBody::Failed(error);
            }
        }
    }
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
    let mut share = config.held.share();
    let api = Shape::Api(dialect.wire_api());
    let bytes =
        match read_request_body(&parts.headers, body, config.max_request_body, &mut share).await {
            RequestBody::Read(bytes) => bytes,
            RequestBody::Forward(body) => {
                return pass(upstream, api, Request::from_parts(parts, body)).await
            }
            RequestBody::Failed(error) => {
                let message = format!("the request body could not be read: {error}");
                let status = StatusCode::BAD_REQUEST;
                return Ok(error_response(api, status, "request_body_error", &message));
            }
            RequestBody::NoRoom => {
                let message = "the guard holds as many bytes as it may; retry shortly";
                let status = StatusCode::SERVICE_UNAVAILABLE;
                return Ok(error_response(api, status, "guard_overloaded", message));
            }
        };
    let mut json = match serde_json::from_slice::<Value>(&bytes) {
        Ok(json @ Value::Object(_)) => json,
        // Not a JSON object: nothing to guard, forward the bytes as they were.
        _ => return pass(upstream, api, with_body(parts, bytes, false)).await,
    };
    if let Some(reason) = dialect.unguardable(&json) {
        tracing::debug!(
            wire_api = %dialect.wire_api(),
            reason,
            "request cannot be guarded: forwarded unguarded"
        );
        return pass(upstream, api, with_body(parts, bytes, false)).await;
    }
    // The guard must read what comes back: a compressed stream would pass
    // unjudged.
    parts
        .headers
        .insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));

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
    let mut route = None;

    // Sticky fallback: a conversation a fallback served goes there directly.
    if let (Some(_), Some(key)) = (config.sticky_ttl, &conversation) {
        let asked = config.store.sticky_route(key);
        let bound = config.budget.deadline;
        if let Some(sticky) = tokio::time::timeout(bound, asked).await.ok().flatten() {
            if model.as_deref() != Some(sticky.as_str())
                && dialect
                    .swap_model(&mut parts.uri, &mut json, &sticky)
                    .is_ok()
            {
                tracing::info!(from = ?model, to = %sticky, "sticky fallback route");
                route = Some(StickyRoute {
                    requested: model.clone(),
                    routed_to: sticky.clone(),
                });
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

    let handle = RefusalHandle::default();
    let call = Call {
        request: crate::metrics::GuardedRequest::start(
            dialect,
            model.as_deref(),
            streaming,
            &handle,
        ),
        route,
        config: config.clone(),
        dialect,
        model: model.clone(),
        conversation,
        started,
        handle,
    };
    let template = Template {
        parts,
        json,
        _share: Arc::new(share),
    };
    let original = if rewritten {
        template.request(&template.json)
    } else {
        with_body(template.parts.clone(), bytes, false)
    };

    let sent = Instant::now();
    let response = match upstream.send(original).await {
        Ok(response) => response,
        Err(SendError::Inner(error)) => return Err(error),
        Err(SendError::Timeout(timeout)) => return Ok(timed_out(api, timeout)),
    };
    let _added = crate::metrics::AddedDelay::start(dialect.wire_api());
    let live = config.live_thinking
        && response.status().is_success()
        && is_event_stream(response.headers());
    if let Some(splice) = live.then(|| dialect.live_splice()).flatten() {
        return Ok(live_thinking(
            upstream, call, template, chain, streaming, response, sent, splice,
        ));
    }
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
/// comes, SSE comments meanwhile. The decision is dropped, and with it every
/// upstream request it made, as soon as the client goes.
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
        if let Some(served) = unless_gone(&sender, decision).await {
            pump(served, &sender, None).await;
        }
    });
    // The body that follows is not the one this length was for.
    head.headers.remove(CONTENT_LENGTH);
    let mut response = Response::from_parts(head, GuardBody::channel(receiver, Some(interval)));
    call.mark(&mut response);
    response
}

/// Live thinking: answers with the original head at once and streams the
/// original's thinking as it comes, holding back only what a decision
/// depends on (text, tool use, the stop). A recovered turn then continues
/// the same message: its blocks follow the thinking the client has seen.
#[allow(clippy::too_many_arguments)]
fn live_thinking<S, B, R>(
    upstream: Upstream<S>,
    call: Call,
    template: Template,
    chain: Vec<String>,
    streaming: bool,
    response: Response<IdleTimeout<R>>,
    sent: Instant,
    splice: Box<dyn LiveSplice>,
) -> Response<GuardBody<R>>
where
    S: Service<Request<B>, Response = Response<R>> + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: ReplayBody,
    B::Error: Into<BoxError>,
    R: Body + Send + 'static,
    R::Error: Into<BoxError>,
{
    let config = call.config.clone();
    let max_frame = config.max_hold_bytes.max(1);
    let (sender, receiver) = tokio::sync::mpsc::channel(64);
    let mut head = response.headers().clone();
    head.remove(CONTENT_LENGTH);
    let (parts, body) = response.into_parts();
    let mut client = Response::from_parts(parts.clone(), ());
    *client.headers_mut() = head;
    let marks = call.clone();
    let keepalive = config.keepalive_after.map(|_| config.keepalive_interval);
    tokio::spawn(async move {
        let mut forward = Forward::new(sender.clone(), splice, max_frame);
        let dialect = call.dialect;
        let original = Response::from_parts(parts, body);
        let deadline = call.deadline();
        let work = async {
            let held = hold(original, dialect, &config, streaming, Some(&mut forward));
            let Ok(held) = tokio::time::timeout_at(deadline, held).await else {
                let timeout = UpstreamTimeout::new(TimeoutKind::Hold, config.budget.deadline);
                return (timed_out(Shape::Api(dialect.wire_api()), timeout), None);
            };
            let served = conclude(upstream, call, template, chain, streaming, held, sent).await;
            let continuation = served
                .extensions()
                .get::<ServedRecovery>()
                .map(|_| Splice::new(forward.splice.continuation(), max_frame));
            (served, continuation)
        };
        if let Some((served, continuation)) = unless_gone(&sender, work).await {
            pump(served, &sender, continuation).await;
        }
    });
    let (parts, ()) = client.into_parts();
    let mut response = Response::from_parts(parts, GuardBody::channel(receiver, keepalive));
    marks.mark(&mut response);
    response
}

/// Forwards a request the guard will not judge.
async fn pass<S, B, R>(
    mut upstream: Upstream<S>,
    api: Shape<'_>,
    request: Request<B>,
) -> Result<Response<GuardBody<R>>, S::Error>
where
    S: Service<Request<B>, Response = Response<R>>,
{
    match upstream.send(request).await {
        Ok(response) => Ok(response.map(GuardBody::passthrough)),
        Err(SendError::Inner(error)) => Err(error),
        Err(SendError::Timeout(timeout)) => Ok(timed_out(api, timeout)),
    }
}
