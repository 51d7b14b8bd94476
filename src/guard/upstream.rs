//! The inner service as every stage of a guarded call uses it.
//!
//! [`InnerService`] is the one alias of the service bound: its associated
//! types carry the request body, the response body and the error, so that a
//! stage is generic over one `U: InnerService` and no `where` clause spells
//! the service, request body and response body out again. Rust implies a
//! trait's supertraits on its users, never its `where` clauses on other
//! parameters, so an alias generic over `<B, R>` would have every user
//! restate `B: ReplayBody, R: InnerBody`; associated types need no
//! restating.

use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

use http::{Request, Response};
use http_body::Body;
use tower::ServiceExt;
use tower_service::Service;

use crate::dialect::cross::Translated;
use crate::guard::config::Config;
use crate::guard::timeout::{IdleTimeout, TimeoutKind, UpstreamTimeout};
use crate::replay::ReplayBody;
use crate::BoxError;

/// The inner service of a guarded call: what it is sent, what it answers,
/// how it fails.
pub(crate) trait InnerService: Send + 'static {
    /// The request body it takes (the client's, or a rebuilt one).
    type Body: ReplayBody;
    /// The response body it answers with.
    type Out: InnerBody;
    /// Its error.
    type Error: Send + 'static;

    /// Sends `request`: its head within the head timeout, its body then
    /// bounded by the idle timeout.
    fn send(
        &mut self,
        request: Request<Self::Body>,
    ) -> impl Future<Output = Result<Response<UpstreamBody<Self::Out>>, SendError<Self::Error>>> + Send;
}

/// A response body of the inner service as every stage reads it: bounded by
/// the idle timeout and, for a fallback to another provider's API,
/// translated into the client's API as it arrives.
pub(crate) type UpstreamBody<R> = Translated<IdleTimeout<R>>;

/// A response body of the inner service the guard can hold, judge and
/// forward.
pub(crate) trait InnerBody: Body<Error: Into<BoxError>> + Send + 'static {}

impl<R> InnerBody for R
where
    R: Body + Send + 'static,
    R::Error: Into<BoxError>,
{
}

/// The bounds on waiting for the upstream.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub(crate) head: Duration,
    pub(crate) idle: Duration,
}

impl Timeouts {
    pub(crate) fn of(config: &Config) -> Self {
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

/// The inner service, remembering whether it was already polled ready;
/// `B` is the request body it takes.
pub(crate) struct Inner<S, B> {
    inner: S,
    primed: bool,
    timeouts: Timeouts,
    body: PhantomData<fn(B)>,
}

impl<S, B> Inner<S, B> {
    /// The inner service, already polled ready.
    pub(crate) fn primed(inner: S, timeouts: Timeouts) -> Self {
        Inner {
            inner,
            primed: true,
            timeouts,
            body: PhantomData,
        }
    }
}

impl<S, B, R> InnerService for Inner<S, B>
where
    S: Service<Request<B>, Response = Response<R>> + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
    B: ReplayBody,
    R: InnerBody,
{
    type Body = B;
    type Out = R;
    type Error = S::Error;

    fn send(
        &mut self,
        request: Request<B>,
    ) -> impl Future<Output = Result<Response<UpstreamBody<R>>, SendError<S::Error>>> + Send {
        let Timeouts { head, idle } = self.timeouts;
        let primed = std::mem::take(&mut self.primed);
        let inner = &mut self.inner;
        async move {
            let sent = async move {
                if !primed {
                    inner.ready().await?;
                }
                inner.call(request).await
            };
            match tokio::time::timeout(head, sent).await {
                Ok(Ok(response)) => {
                    Ok(response.map(|body| Translated::new(IdleTimeout::new(body, idle))))
                }
                Ok(Err(error)) => Err(SendError::Inner(error)),
                Err(_elapsed) => Err(SendError::Timeout(UpstreamTimeout::new(
                    TimeoutKind::Head,
                    head,
                ))),
            }
        }
    }
}
