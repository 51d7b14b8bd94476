//! reqwest-middleware (0.5, over reqwest 0.13): the guard as a
//! [`Middleware`], so that any `ClientWithMiddleware` stack gets it, and
//! every crate that takes one.
//!
//! ```
//! use refusal_guard::client::reqwest_middleware::RefusalGuardMiddleware;
//! use refusal_guard::reqwest::reqwest;
//! use refusal_guard::RefusalGuardLayer;
//!
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(RefusalGuardMiddleware::new(RefusalGuardLayer::new()))
//!     .build();
//! # let _ = client;
//! ```
//!
//! Every request the guard sends for a call (the original and each
//! recovery attempt) goes down the rest of the chain (the middleware
//! attached after this one, then the client), each with a copy of the
//! call's extensions as they were when the call reached this middleware.
//! The chain is borrowed for as long as the middleware's `handle` runs, so
//! the guard answers only once the call is decided: a layer's keep-alive
//! answers, live thinking and partial continuations (which send after the
//! response went out) are turned off, with a `warn` record saying so.
//!
//! A request whose body cannot be replayed (a stream body: reqwest's
//! `Request::try_clone` gives `None`) is not guarded: it goes down the
//! chain as it came, and a `warn` record and the call's
//! [`CallHandle`] say so. LLM clients send JSON bodies, which can be.
//!
//! To read a call's outcome, attach a [`CallHandle`] with
//! `RequestBuilder::with_extension` (or call inside
//! [`CallHandle::scope`]); the `reqwest::Response` keeps the guard's
//! extensions too ([`Refusal`](crate::Refusal),
//! [`RefusalHandle`](crate::RefusalHandle)).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use ::reqwest_middleware::{Error, Middleware, Next, Result};
use http::Extensions;
use tokio::sync::{mpsc, oneshot};
use tower::ServiceExt;
use tower_layer::Layer;
use tower_service::Service;

use crate::outcome::{CallHandle, CallOutcome};
use crate::RefusalGuardLayer;

/// The guard as a reqwest-middleware [`Middleware`].
///
/// ```
/// use refusal_guard::client::reqwest_middleware::RefusalGuardMiddleware;
/// use refusal_guard::RefusalGuardLayer;
///
/// let middleware = RefusalGuardMiddleware::new(RefusalGuardLayer::new().max_attempts(3));
/// # let _ = middleware;
/// ```
#[derive(Debug, Clone)]
pub struct RefusalGuardMiddleware {
    layer: RefusalGuardLayer,
}

impl RefusalGuardMiddleware {
    /// The guard `layer` builds, answering once each call is decided.
    pub fn new(layer: RefusalGuardLayer) -> Self {
        let (layer, early) = layer.decided_before_answering();
        if early {
            tracing::warn!(
                "reqwest-middleware: keep-alive answers, live thinking and partial \
                 continuations are off: the chain cannot send after the middleware answered"
            );
        }
        RefusalGuardMiddleware { layer }
    }
}

/// Why a request went down the chain unguarded.
const STREAM_BODY: &str = "a request body that cannot be replayed (a stream)";

#[async_trait::async_trait]
impl Middleware for RefusalGuardMiddleware {
    async fn handle(
        &self,
        req: ::reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<::reqwest::Response> {
        let handle = extensions
            .get::<CallHandle>()
            .cloned()
            .or_else(CallHandle::current);
        if req.body().is_some_and(|body| body.as_bytes().is_none()) {
            tracing::warn!(
                method = %req.method(),
                path = req.url().path(),
                "request body cannot be replayed (a stream): sent down the chain unguarded"
            );
            if let Some(handle) = handle {
                handle.settle(CallOutcome::unguarded(STREAM_BODY));
            }
            return next.run(req, extensions).await;
        }
        let url = req.url().clone();
        let mut request = http::Request::<::reqwest::Body>::try_from(req)?;
        if let Some(handle) = handle {
            request.extensions_mut().insert(handle);
        }
        let (chain, attempts) = Chain::new();
        let guarded = self.layer.layer(chain).oneshot(request);
        let response = run(guarded, attempts, next, extensions).await?;
        Ok(super::reqwest_response(response, url))
    }
}

/// One request the guard sends, and where its answer goes.
type Attempt = (
    http::Request<::reqwest::Body>,
    oneshot::Sender<Result<http::Response<::reqwest::Body>>>,
);

/// The guard's inner service: each request it sends is handed to the
/// middleware's `handle`, which runs it down the chain.
#[derive(Debug, Clone)]
struct Chain {
    attempts: mpsc::Sender<Attempt>,
}

impl Chain {
    fn new() -> (Chain, mpsc::Receiver<Attempt>) {
        let (attempts, receiver) = mpsc::channel(1);
        (Chain { attempts }, receiver)
    }
}

/// The error of a request sent once the middleware had answered.
#[derive(Debug)]
struct ChainGone;

impl std::fmt::Display for ChainGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the middleware chain is gone: the call was answered")
    }
}

impl std::error::Error for ChainGone {}

impl Service<http::Request<::reqwest::Body>> for Chain {
    type Response = http::Response<::reqwest::Body>;
    type Error = Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<::reqwest::Body>) -> Self::Future {
        let attempts = self.attempts.clone();
        Box::pin(async move {
            let (reply, answer) = oneshot::channel();
            let gone = |_| Error::middleware(ChainGone);
            attempts.send((request, reply)).await.map_err(gone)?;
            answer.await.map_err(|_| Error::middleware(ChainGone))?
        })
    }
}

/// A request being sent down the chain, and where its answer goes.
type Sending<'a> = (
    Pin<Box<dyn Future<Output = Result<::reqwest::Response>> + Send + 'a>>,
    oneshot::Sender<Result<http::Response<::reqwest::Body>>>,
);

/// Polls the guard until it answers, meanwhile sending each request it
/// hands over down the chain, one at a time (the guard waits for each
/// head before it sends the next).
async fn run<F, B>(
    guarded: F,
    mut attempts: mpsc::Receiver<Attempt>,
    next: Next<'_>,
    extensions: &Extensions,
) -> Result<http::Response<B>>
where
    F: Future<Output = Result<http::Response<B>>>,
{
    let mut guarded = std::pin::pin!(guarded);
    let mut sending: Option<Sending<'_>> = None;
    std::future::poll_fn(|cx| loop {
        if let Poll::Ready(answered) = guarded.as_mut().poll(cx) {
            return Poll::Ready(answered);
        }
        if let Some((future, _)) = sending.as_mut() {
            let sent = std::task::ready!(future.as_mut().poll(cx));
            if let Some((_, reply)) = sending.take() {
                // A guard that stopped waiting (its timeout) has dropped
                // the other end: nothing to tell it.
                let _ = reply.send(sent.map(http::Response::from));
            }
            continue;
        }
        let Some((request, reply)) = std::task::ready!(attempts.poll_recv(cx)) else {
            // The guard holds the sender until it answers.
            return Poll::Pending;
        };
        let request = match ::reqwest::Request::try_from(request) {
            Ok(request) => request,
            Err(error) => {
                let _ = reply.send(Err(Error::Reqwest(error)));
                continue;
            }
        };
        let (next, mut copy) = (next.clone(), extensions.clone());
        let future = Box::pin(async move { next.run(request, &mut copy).await });
        sending = Some((future, reply));
    })
    .await
}
