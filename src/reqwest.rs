//! [`ReqwestService`]: a [`reqwest::Client`] as a tower service (feature
//! `reqwest`, off by default).
//!
//! The feature builds on reqwest 0.13 (rustls, HTTP/2), re-exported here as
//! [`reqwest`](mod@reqwest): a client built with
//! `refusal_guard::reqwest::reqwest::Client` is always the version the
//! adapter takes, whatever else the application depends on.
//!
//! `reqwest::Client` already speaks HTTP; this adapter makes it speak
//! `tower::Service<http::Request<B>>`, returning `http::Response<reqwest::Body>`
//! whose body streams as the bytes arrive. With it, the guard goes in front
//! of reqwest with one `ServiceBuilder` line:
//!
//! ```no_run
//! use refusal_guard::reqwest::ReqwestService;
//! use refusal_guard::RefusalGuardLayer;
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let client = ServiceBuilder::new()
//!     .layer(RefusalGuardLayer::new())
//!     .service(ReqwestService::new(reqwest::Client::new()));
//!
//! let body = r#"{"model":"claude-opus-4-7","max_tokens":1024,"stream":true,
//!               "messages":[{"role":"user","content":"Hello"}]}"#;
//! let request = http::Request::post("https://api.anthropic.com/v1/messages")
//!     .header("x-api-key", std::env::var("ANTHROPIC_API_KEY")?)
//!     .header("anthropic-version", "2023-06-01")
//!     .header("content-type", "application/json")
//!     .body(reqwest::Body::from(body))?;
//! let response = client.oneshot(request).await?;
//! println!("{}", response.status());
//! # Ok(())
//! # }
//! ```
//!
//! The request body type is [`reqwest::Body`]: it implements
//! [`ReplayBody`], so the guard can read it and send rebuilt copies. Any other
//! `http_body::Body` can be turned into one with [`reqwest::Body::wrap`],
//! the guard's own [`GuardBody`](crate::GuardBody) included (it is `Send +
//! Sync` when the inner body is): a guarded response becomes a
//! `reqwest::Response` with `reqwest::Response::from(response.map(reqwest::Body::wrap))`.

/// The reqwest crate this adapter is built on (0.13).
pub use ::reqwest;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use tower_service::Service;

use crate::replay::{prefixed, ForwardedBody, ReplayBody};

/// The streaming response body of [`ReqwestService`]: `reqwest`'s own body,
/// an `http_body::Body` with `Data = Bytes` and `Error = reqwest::Error`.
pub type ReqwestBody = ::reqwest::Body;

/// A [`reqwest::Client`] as a `tower::Service<http::Request<B>>`.
///
/// Cheap to clone (the client is shared, connection pool included). Every
/// request is sent exactly as given (method, URL, headers, body); the
/// response comes back as soon as its head has arrived, with a body that
/// streams. Redirects, proxies and timeouts are whatever the client was
/// built with: for a proxy that forwards credentials, build the client
/// without redirects (see `refusal_guard_proxy::client`), or a redirect
/// could carry an API key header to another host.
///
/// ```
/// use refusal_guard::reqwest::ReqwestService;
/// use refusal_guard::RefusalGuard;
/// use refusal_guard::RefusalGuardLayer;
/// use tower::Layer;
///
/// let guarded: RefusalGuard<ReqwestService> =
///     RefusalGuardLayer::new().layer(ReqwestService::new(reqwest::Client::new()));
/// # let _ = guarded;
/// ```
#[derive(Debug, Clone, Default)]
pub struct ReqwestService {
    client: ::reqwest::Client,
}

impl ReqwestService {
    /// Wraps `client`.
    pub fn new(client: ::reqwest::Client) -> Self {
        ReqwestService { client }
    }

    /// The wrapped client.
    pub fn client(&self) -> &::reqwest::Client {
        &self.client
    }
}

impl From<::reqwest::Client> for ReqwestService {
    fn from(client: ::reqwest::Client) -> Self {
        ReqwestService::new(client)
    }
}

/// The response future of [`ReqwestService`].
pub struct ResponseFuture {
    inner:
        Pin<Box<dyn Future<Output = Result<http::Response<ReqwestBody>, ::reqwest::Error>> + Send>>,
}

impl std::fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl Future for ResponseFuture {
    type Output = Result<http::Response<ReqwestBody>, ::reqwest::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<B> Service<http::Request<B>> for ReqwestService
where
    B: Into<::reqwest::Body>,
{
    type Response = http::Response<ReqwestBody>;
    type Error = ::reqwest::Error;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // reqwest queues internally; it is always ready to take a request.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let client = self.client.clone();
        let request = ::reqwest::Request::try_from(request);
        ResponseFuture {
            inner: Box::pin(async move {
                let response = client.execute(request?).await?;
                Ok(http::Response::from(response))
            }),
        }
    }
}

impl ReplayBody for ::reqwest::Body {
    fn from_bytes(bytes: Bytes) -> Self {
        ::reqwest::Body::from(bytes)
    }

    fn prefixed(prefix: Bytes, rest: Self) -> Self {
        ::reqwest::Body::wrap(prefixed(prefix, rest))
    }

    fn forwarded(body: ForwardedBody<Self>) -> Result<Self, ForwardedBody<Self>> {
        Ok(::reqwest::Body::wrap(body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn prefixed_body_yields_prefix_then_rest() {
        let rest = ::reqwest::Body::from(Bytes::from_static(b" world"));
        let body = <::reqwest::Body as ReplayBody>::prefixed(Bytes::from_static(b"hello"), rest);
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"hello world");
    }
}
