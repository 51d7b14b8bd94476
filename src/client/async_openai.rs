//! async-openai (0.43, with its `middleware` feature): the guard as the
//! tower service `async_openai::Client::with_http_service` takes.
//!
//! async-openai hands its HTTP service an
//! [`HttpRequestFactory`]
//! (a request it can build again) and wants a `reqwest::Response` back.
//! [`FactoryService`] builds the request once, runs it through the service
//! it wraps (a [`RefusalGuard`] over reqwest, from [`guarded`]) as an
//! `http::Request<reqwest::Body>`, and hands the guarded response back as a
//! `reqwest::Response`. Every call async-openai makes goes through it: Chat
//! Completions and Responses, streamed or not; the guard judges the wire
//! APIs it knows (a policy error such as `cyber_policy` included) and
//! passes everything else (files, models, audio) through.
//!
//! ```no_run
//! use async_openai::config::OpenAIConfig;
//! use refusal_guard::client::async_openai::guarded;
//! use refusal_guard::reqwest::reqwest;
//! use refusal_guard::RefusalGuardLayer;
//!
//! let client = async_openai::Client::with_config(OpenAIConfig::new())
//!     .with_http_service(guarded(RefusalGuardLayer::new(), reqwest::Client::new()));
//! # let _ = client;
//! ```
//!
//! async-openai reads the response itself: its `Refusal` and
//! `RefusalHandle` extensions stop there. To know what became of a call,
//! run it inside [`CallHandle::scope`](crate::CallHandle::scope); the
//! handle holds the call's outcome once the response (or the stream) has
//! been read.
//!
//! `with_http_service` replaces async-openai's own stack, its retry layer
//! included: stack `async_openai::middleware::retry::OpenAIRetryLayer`
//! above this service to keep retrying rate limits and server errors (each
//! retry is then a call of its own to the guard).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use ::async_openai::error::OpenAIError;
use ::async_openai::middleware::HttpRequestFactory;
use bytes::Bytes;
use tower_layer::Layer;
use tower_service::Service;

use crate::reqwest::ReqwestService;
use crate::{BoxError, RefusalGuard, RefusalGuardLayer};

/// The guard in `layer` over `client`, as the service
/// `async_openai::Client::with_http_service` takes.
///
/// ```
/// use refusal_guard::client::async_openai::guarded;
/// use refusal_guard::reqwest::reqwest;
/// use refusal_guard::RefusalGuardLayer;
///
/// let service = guarded(RefusalGuardLayer::new(), reqwest::Client::new());
/// # let _ = service;
/// ```
pub fn guarded(
    layer: RefusalGuardLayer,
    client: ::reqwest::Client,
) -> FactoryService<RefusalGuard<ReqwestService>> {
    FactoryService::new(layer.layer(ReqwestService::new(client)))
}

/// A tower service taking async-openai's request factory, over a service
/// of `http::Request<reqwest::Body>` (a guard, usually).
///
/// ```
/// use refusal_guard::client::async_openai::FactoryService;
/// use refusal_guard::reqwest::{reqwest, ReqwestService};
/// use refusal_guard::RefusalGuardLayer;
/// use tower::ServiceBuilder;
///
/// let service = FactoryService::new(
///     ServiceBuilder::new()
///         .layer(RefusalGuardLayer::new())
///         .service(ReqwestService::new(reqwest::Client::new())),
/// );
/// # let _ = service;
/// ```
#[derive(Debug, Clone)]
pub struct FactoryService<S> {
    inner: S,
}

impl<S> FactoryService<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        FactoryService { inner }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

/// The layer of [`FactoryService`], for a `tower::ServiceBuilder` stack.
///
/// ```
/// use refusal_guard::client::async_openai::FactoryLayer;
/// use refusal_guard::reqwest::{reqwest, ReqwestService};
/// use refusal_guard::RefusalGuardLayer;
/// use tower::ServiceBuilder;
///
/// let service = ServiceBuilder::new()
///     .layer(FactoryLayer)
///     .layer(RefusalGuardLayer::new())
///     .service(ReqwestService::new(reqwest::Client::new()));
/// # let _ = service;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct FactoryLayer;

impl<S> Layer<S> for FactoryLayer {
    type Service = FactoryService<S>;

    fn layer(&self, inner: S) -> FactoryService<S> {
        FactoryService::new(inner)
    }
}

/// The response future of [`FactoryService`].
pub type FactoryFuture =
    Pin<Box<dyn Future<Output = Result<::reqwest::Response, OpenAIError>> + Send>>;

impl<S, B> Service<HttpRequestFactory> for FactoryService<S>
where
    S: Service<http::Request<::reqwest::Body>, Response = http::Response<B>>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: http_body::Body + Send + Sync + 'static,
    B::Data: Into<Bytes>,
    B::Error: Into<BoxError>,
{
    type Response = ::reqwest::Response;
    type Error = OpenAIError;
    type Future = FactoryFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), OpenAIError>> {
        self.inner
            .poll_ready(cx)
            .map_err(|error| OpenAIError::Boxed(error.into()))
    }

    fn call(&mut self, factory: HttpRequestFactory) -> FactoryFuture {
        // The service that was polled ready serves this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let request = factory.build().await?;
            let url = request.url().clone();
            let request = http::Request::<::reqwest::Body>::try_from(request)
                .map_err(OpenAIError::Reqwest)?;
            let response = inner
                .call(request)
                .await
                .map_err(|error| OpenAIError::Boxed(error.into()))?;
            Ok(super::reqwest_response(response, url))
        })
    }
}
