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
use std::time::Instant;

use http::{Request, Response};
use http_body::Body;
use tower_service::Service;

use crate::chunks::Chunks;
use crate::dialect::skim::Located;
use crate::dialect::{self, Dialect};
use crate::guard::answer::answer;
use crate::guard::body::GuardBody;
use crate::guard::call::Call;
use crate::guard::config::Config;
use crate::guard::errors::{overloaded, timed_out, unreadable, Shape};
use crate::guard::exchange::Exchange;
use crate::guard::request::original::with_body;
use crate::guard::request::{
    forward_request_body, prepare_forwarded, read_first, read_request_body, Forwarding, Outbound,
    ReadRequest, RequestBody,
};
use crate::guard::timeout::{IdleTimeout, TimeoutKind, UpstreamTimeout};
use crate::guard::upstream::{Inner, InnerService, SendError, Timeouts};
use crate::refusal::{AttemptResult, AttemptStep};
use crate::replay::copy::{Copied, CopyOutcome};
use crate::replay::ReplayBody;
use crate::reserve::Share;
use crate::telemetry::metrics::AttemptSpan;
use crate::BoxError;

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
        // A guarded request, in its request's span: the span wraps the box
        // rather than the box the span, so that the guard's state, the
        // largest part of a call, is moved once, into its box.
        Guarded {
            #[pin]
            future: tracing::instrument::Instrumented<GuardedFuture<R, E>>,
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
            KindProj::Guarded { future } => future.poll(cx),
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
                    future: inner.call(without_conversation_header(&self.config, request)),
                    head: None,
                    timeouts,
                },
            },
            Some(recognised) => ResponseFuture {
                kind: Kind::Guarded {
                    future: tracing::Instrument::instrument(
                        Box::pin(guard(
                            Inner::primed(inner, timeouts),
                            self.config.clone(),
                            recognised.dialect,
                            recognised.path_model,
                            request,
                        )) as GuardedFuture<R, S::Error>,
                        crate::telemetry::metrics::request_span(recognised.dialect.wire_api()),
                    ),
                },
            },
        }
    }
}

async fn guard<U: InnerService>(
    mut upstream: U,
    config: Arc<Config>,
    dialect: &'static dyn Dialect,
    path_model: Option<String>,
    request: Request<U::Body>,
) -> Result<Response<GuardBody<U::Out>>, U::Error> {
    let started = Instant::now();
    let (mut parts, body) = request.into_parts();
    // From here on, the tenant's settings are the call's.
    let config = config.for_request(&parts);
    // The conversation header is the guard's own: it never goes upstream,
    // whether or not the request turns out to be guardable.
    let named = config
        .conversation_header
        .as_ref()
        .and_then(|name| parts.headers.remove(name))
        .and_then(|v| v.to_str().ok().map(str::to_owned));
    let share = config.held.share();
    let api = Shape::Api(dialect.wire_api());
    let limit = config.max_request_body;
    let (body, mut share) = if read_first(&config, dialect, &parts.uri, path_model.as_deref()) {
        (body, share)
    } else {
        match forward_request_body(&parts.headers, body, limit, share).await {
            Forwarding::ReadFirst(body, share) => (body, share),
            Forwarding::Unguarded(body) => {
                return pass(upstream, api, Request::from_parts(parts, body)).await
            }
            Forwarding::Failed(error) => return Ok(unreadable(api, &error)),
            Forwarding::NoRoom => return Ok(overloaded(api)),
            Forwarding::Sending { body, copy } => {
                let request = Request::from_parts(parts, body);
                let known = Known {
                    config,
                    dialect,
                    path_model,
                    named,
                    started,
                };
                return forward(upstream, request, copy, known).await;
            }
        }
    };
    let bytes = match read_request_body(&parts.headers, body, limit, &mut share).await {
        RequestBody::Read(bytes) => bytes,
        RequestBody::Unguarded(body) => {
            return pass(upstream, api, Request::from_parts(parts, body)).await
        }
        RequestBody::Failed(error) => return Ok(unreadable(api, &error)),
        RequestBody::NoRoom => return Ok(overloaded(api)),
    };
    let Some(head) = dialect::request_head(&bytes) else {
        // Not a JSON object: nothing to guard, forward the bytes as they were.
        return pass(upstream, api, with_body(parts, bytes, false)).await;
    };
    if let Some(reason) = dialect.unguardable(&head) {
        tracing::debug!(
            wire_api = %dialect.wire_api(),
            reason,
            "request cannot be guarded: forwarded unguarded"
        );
        return pass(upstream, api, with_body(parts, bytes, false)).await;
    }
    let request = ReadRequest {
        parts,
        head,
        body: Chunks::from(bytes),
        members: None,
    };
    let mut outbound = Outbound::new(&config, dialect, path_model.as_deref(), request, named);
    outbound.route_sticky(&config, dialect).await;
    outbound.rewrite(&config, dialect);
    let streaming = outbound.streaming;
    let (named, template) = outbound.into_original(share);
    let call = Call::start(named, config, dialect, started);
    let original = template.request();

    let sent = Instant::now();
    let mut attempt = call
        .request
        .attempt(AttemptStep::Original, call.model.as_deref(), None);
    let response = match upstream.send(original).await {
        Ok(response) => response,
        Err(failed) => {
            attempt.end_with(AttemptResult::TransportError, None);
            return match failed {
                SendError::Inner(error) => Err(error),
                SendError::Timeout(timeout) => Ok(timed_out(api, timeout)),
            };
        }
    };
    let _added = crate::telemetry::metrics::AddedDelay::start(dialect.wire_api());
    let exchange = Exchange::new(upstream, call, template, (streaming, sent), attempt);
    answer(exchange.without_rejected_fallbacks(response).await).await
}

/// What a call forwarded as it arrives knows of itself besides the request.
struct Known {
    config: Arc<Config>,
    dialect: &'static dyn Dialect,
    /// The model its path names.
    path_model: Option<String>,
    /// The conversation its header names.
    named: Option<String>,
    started: Instant,
}

/// A guarded request forwarded as it arrives: sent at once, its head read
/// from the copy once the copy is whole (while the upstream is still
/// answering), then held and decided like any other. A request whose copy
/// could not be kept (over the bounds, cut short) is served unguarded, as
/// a request too large to read is.
async fn forward<U: InnerService>(
    mut upstream: U,
    request: Request<U::Body>,
    copy: CopyOutcome,
    known: Known,
) -> Result<Response<GuardBody<U::Out>>, U::Error> {
    let Known {
        config,
        dialect,
        path_model,
        named,
        started,
    } = known;
    let api = Shape::Api(dialect.wire_api());
    let (mut parts, body) = request.into_parts();
    prepare_forwarded(&mut parts, &config, dialect, path_model.as_deref());
    let sent_parts = parts.clone();
    let sent = Instant::now();
    let mut attempt = AttemptSpan::forwarded(dialect.provider(), dialect.wire_api());
    let request = Request::from_parts(parts, body);
    let (response, learned) = send_learning(&mut upstream, request, copy).await;
    let (response, head, bytes, members, share) = match (response, learned) {
        // The client's body failed after forwarding began: the upstream
        // request was aborted with its error, whatever it answered.
        (_, Learned::Failed) => {
            let error: BoxError = "the client's body failed while it was forwarded".into();
            return Ok(unreadable(api, &error));
        }
        (Err(failed), learned) => {
            // Counted and logged as a guarded request that never settled,
            // as one read whole first is.
            let model = match &learned {
                Learned::Head { head, .. } => head.get("model").and_then(|m| m.as_str()),
                _ => None,
            };
            let model = model.or(path_model.as_deref());
            let handle = crate::refusal::RefusalHandle::default();
            let tenant = config.tenant.name();
            drop(crate::telemetry::metrics::GuardedRequest::start(
                dialect.provider(),
                dialect.wire_api(),
                model,
                false,
                &handle,
                tenant,
            ));
            if let Some(model) = model {
                attempt.model(model);
            }
            attempt.end_with(AttemptResult::TransportError, None);
            return match failed {
                SendError::Inner(error) => Err(error),
                SendError::Timeout(timeout) => Ok(timed_out(api, timeout)),
            };
        }
        (Ok(response), Learned::Unguarded(reason)) => {
            tracing::debug!(wire_api = %dialect.wire_api(), reason, "forwarded unguarded");
            return Ok(response.map(GuardBody::passthrough));
        }
        (
            Ok(response),
            Learned::Head {
                head,
                bytes,
                members,
                share,
            },
        ) => (response, head, bytes, members, share),
    };
    if let Some(reason) = dialect.unguardable(&head) {
        tracing::debug!(
            wire_api = %dialect.wire_api(),
            reason,
            "request cannot be guarded: forwarded unguarded"
        );
        return Ok(response.map(GuardBody::passthrough));
    }
    let request = ReadRequest {
        parts: sent_parts,
        head,
        body: bytes,
        members,
    };
    let outbound = Outbound::new(&config, dialect, path_model.as_deref(), request, named);
    let streaming = outbound.streaming;
    let (named, template) = outbound.into_original(share);
    let call = Call::start(named, config, dialect, started);
    let _added = crate::telemetry::metrics::AddedDelay::start(dialect.wire_api());
    if let Some(model) = &call.model {
        attempt.model(model);
    }
    let exchange = Exchange::new(upstream, call, template, (streaming, sent), attempt);
    answer(exchange.without_rejected_fallbacks(response).await).await
}

/// What a forwarded request's copy told of it.
enum Learned {
    /// The whole body, its head, and the pool's part for the copy.
    Head {
        head: serde_json::Value,
        bytes: Chunks,
        members: Option<Vec<Located>>,
        share: Share,
    },
    /// Nothing to guard it with, and why.
    Unguarded(&'static str),
    /// The client's body failed.
    Failed,
}

impl Learned {
    fn of(copied: Option<Copied>) -> Self {
        match copied {
            Some(Copied::Whole(bytes, share)) => match dialect::forwarded_head(bytes.as_slice()) {
                Some((head, members)) => Learned::Head {
                    head,
                    bytes,
                    members,
                    share,
                },
                None => Learned::Unguarded("not a JSON object"),
            },
            Some(Copied::OverLimit) => Learned::Unguarded("over max_request_body: no copy kept"),
            Some(Copied::NoRoom) => Learned::Unguarded("no room left for a copy"),
            Some(Copied::Failed) => Learned::Failed,
            None => Learned::Unguarded("the upstream answered before the request was whole"),
        }
    }
}

/// Sends `request` and, meanwhile, reads the head of its body from the
/// copy as soon as the copy is whole: usually while the upstream is still
/// answering, so the read adds nothing to the wait. A response that comes
/// before the copy is whole leaves the call with nothing to guard it with
/// (`Unguarded`).
async fn send_learning<U: InnerService>(
    upstream: &mut U,
    request: Request<U::Body>,
    copy: CopyOutcome,
) -> (
    Result<Response<IdleTimeout<U::Out>>, SendError<U::Error>>,
    Learned,
) {
    let mut sending = std::pin::pin!(upstream.send(request));
    // Unconstrained: tokio's cooperative budget would otherwise make a copy
    // already told look pending once a busy task has spent its budget, and
    // a request whose copy is whole would go unguarded.
    let learning = tokio::task::unconstrained(async move { Learned::of(copy.wait().await) });
    let mut learning = std::pin::pin!(learning);
    let mut learned = None;
    let response = std::future::poll_fn(|cx| {
        let mut learn = |cx: &mut Context<'_>| {
            if learned.is_none() {
                if let Poll::Ready(known) = learning.as_mut().poll(cx) {
                    learned = Some(known);
                }
            }
        };
        learn(cx);
        let response = ready!(sending.as_mut().poll(cx));
        // Sending may have ended the body within this poll.
        learn(cx);
        Poll::Ready(response)
    })
    .await;
    let learned = learned.unwrap_or(Learned::Unguarded(
        "the upstream answered before the request was whole",
    ));
    (response, learned)
}

/// A request the guard does not judge (a token count, a listing, a GET),
/// without the guard's own conversation header: it never goes upstream, on
/// any path.
fn without_conversation_header<B>(config: &Config, mut request: Request<B>) -> Request<B> {
    if let Some(name) = &config.conversation_header {
        request.headers_mut().remove(name);
    }
    request
}

/// Forwards a request the guard will not judge.
async fn pass<U: InnerService>(
    mut upstream: U,
    api: Shape<'_>,
    request: Request<U::Body>,
) -> Result<Response<GuardBody<U::Out>>, U::Error> {
    match upstream.send(request).await {
        Ok(response) => Ok(response.map(GuardBody::passthrough)),
        Err(SendError::Inner(error)) => Err(error),
        Err(SendError::Timeout(timeout)) => Ok(timed_out(api, timeout)),
    }
}
