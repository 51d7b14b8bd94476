//! [`RefusalGuard`]: the tower service.
//!
//! A request of a wire API the guard recognises is guarded: its body taken
//! in (`request/`), its original sent (`send`), its response answered
//! (`answer` and the steps after it). Everything else passes straight
//! through, bounded by the head and idle timeouts.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use http::{Request, Response};
use http_body::Body;
use tower_service::Service;

use crate::dialect::{self, Dialect};
use crate::guard::answer::answer;
use crate::guard::body::GuardBody;
use crate::guard::config::Config;
use crate::guard::errors::{timed_out, Shape};
use crate::guard::exchange::Exchange;
use crate::guard::request::intake::take_in;
use crate::guard::request::Incoming;
use crate::guard::send::{send, Sent};
use crate::guard::timeout::{IdleTimeout, TimeoutKind, UpstreamTimeout};
use crate::guard::upstream::{Inner, InnerService, Timeouts};
use crate::outcome::{CallHandle, CallOutcome};
use crate::replay::ReplayBody;
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

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        // The clone-and-swap idiom: the service that was polled ready is the
        // one that serves this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let timeouts = Timeouts::of(&self.config);
        let recognised = dialect::recognise(request.method(), request.uri());
        attach_scoped_handle(&mut request);
        match recognised {
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

/// One guarded call: its body taken in, its original sent, and what comes
/// back answered.
async fn guard<U: InnerService>(
    mut upstream: U,
    config: Arc<Config>,
    dialect: &'static dyn Dialect,
    path_model: Option<String>,
    request: Request<U::Body>,
) -> Result<Response<GuardBody<U::Out>>, U::Error> {
    let (mut parts, body) = request.into_parts();
    let incoming = Incoming::new(&config, dialect, path_model, &mut parts);
    let intake = take_in(&incoming, &parts, body).await;
    match send(&mut upstream, incoming, parts, intake).await {
        Sent::Answered(answered) => answered,
        Sent::Original(sent) => {
            let _added = crate::telemetry::metrics::AddedDelay::start(dialect.wire_api());
            let (exchange, response) = Exchange::new(*sent, upstream);
            answer(exchange.without_rejected_fallbacks(response).await).await
        }
    }
}

/// The handle of the [`CallHandle::scope`] this call is made in, attached
/// to the request unless it carries its own: from here on, the request's
/// extensions are the one place the guard looks for it.
fn attach_scoped_handle<B>(request: &mut Request<B>) {
    if request.extensions().get::<CallHandle>().is_some() {
        return;
    }
    if let Some(handle) = CallHandle::current() {
        request.extensions_mut().insert(handle);
    }
}

/// A request the guard does not judge (a token count, a listing, a GET),
/// without the guard's own conversation header: it never goes upstream, on
/// any path. A handle the caller attached is settled at once.
fn without_conversation_header<B>(config: &Config, mut request: Request<B>) -> Request<B> {
    if let Some(handle) = request.extensions().get::<CallHandle>() {
        handle.settle(CallOutcome::unguarded(
            "not a request the guard judges (its method or path)",
        ));
    }
    if let Some(name) = &config.conversation_header {
        request.headers_mut().remove(name);
    }
    request
}
