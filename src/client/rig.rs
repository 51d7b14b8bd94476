//! rig (rig-core 0.44.x, through rig-http 0.44's `HttpClientExt`): an HTTP
//! client that sends every provider request through the guard.
//!
//! rig sends each provider's HTTP through the transport it is given
//! (`with_http` on a provider client, `connect` on a configuration).
//! [`GuardedClient`] is such a transport: its `send` and `send_streaming`
//! run the request through a [`RefusalGuard`] over reqwest, so rig's
//! Anthropic, OpenAI (Chat Completions and Responses) and Gemini providers
//! get recovery on their completions and streaming completions alike.
//! `send_multipart` (audio, images, files: nothing the guard judges) goes
//! through rig-reqwest's client over the same `reqwest::Client`, unguarded.
//!
//! Supported: rig-core 0.44.x (its transport trait lives in rig-http 0.44,
//! which this feature depends on). The feature needs Rust 1.95, rig's own
//! MSRV; the rest of the library does not.
//!
//! ```no_run
//! use refusal_guard::client::rig::GuardedClient;
//! use refusal_guard::reqwest::reqwest;
//! use refusal_guard::RefusalGuardLayer;
//!
//! let http = GuardedClient::new(RefusalGuardLayer::new(), reqwest::Client::new());
//! // Then, with rig-core:
//! // let anthropic = rig_core::providers::anthropic::AnthropicConfig::new(key).connect(http);
//! // let model = anthropic.completion("claude-opus-4-7");
//! # let _ = http;
//! ```
//!
//! A complete agent: `clients/examples/rig.rs`.
//!
//! Like rig-reqwest, a response whose status is not a success comes back
//! as rig's `Error::InvalidStatusCodeWithDetails` (status, headers, body).
//! rig reads the response itself: to know what became of a call, run it
//! inside [`CallHandle::scope`](crate::CallHandle::scope).

use std::future::Future;

use bytes::Bytes;
use http_body_util::BodyExt;
use rig_http::http_client::{
    Error, HttpClientExt, LazyBody, MultipartForm, Request, Response, Result, StreamingResponse,
};
use rig_http::wasm_compat::WasmCompatSend;
use tower::ServiceExt;
use tower_layer::Layer;
use tower_service::Service;

use crate::reqwest::ReqwestService;
use crate::{BoxError, RefusalGuard, RefusalGuardLayer};

/// An `HttpClientExt` that sends through a guard (by default, a
/// [`RefusalGuard`] over reqwest).
///
/// Cheap to clone: clones share the guard's state and the connection pool.
///
/// ```
/// use refusal_guard::client::rig::GuardedClient;
/// use refusal_guard::reqwest::reqwest;
/// use refusal_guard::RefusalGuardLayer;
///
/// let http = GuardedClient::new(RefusalGuardLayer::new(), reqwest::Client::new());
/// # let _ = http;
/// ```
#[derive(Debug, Clone)]
pub struct GuardedClient<S = RefusalGuard<ReqwestService>> {
    guard: S,
    multipart: rig_reqwest::ReqwestClient,
}

impl GuardedClient {
    /// The guard in `layer` over `client`.
    pub fn new(layer: RefusalGuardLayer, client: ::reqwest::Client) -> Self {
        GuardedClient {
            guard: layer.layer(ReqwestService::new(client.clone())),
            multipart: rig_reqwest::ReqwestClient::from(client),
        }
    }
}

impl<S> GuardedClient<S> {
    /// Sends through `guard` (any service of `http::Request<reqwest::Body>`),
    /// multipart requests through `client`.
    ///
    /// ```
    /// use refusal_guard::client::rig::GuardedClient;
    /// use refusal_guard::reqwest::{reqwest, ReqwestService};
    /// use refusal_guard::RefusalGuardLayer;
    /// use tower::ServiceBuilder;
    ///
    /// let client = reqwest::Client::new();
    /// let guard = ServiceBuilder::new()
    ///     .layer(RefusalGuardLayer::new())
    ///     .service(ReqwestService::new(client.clone()));
    /// let http = GuardedClient::over(guard, client);
    /// # let _ = http;
    /// ```
    pub fn over(guard: S, client: ::reqwest::Client) -> Self {
        GuardedClient {
            guard,
            multipart: rig_reqwest::ReqwestClient::from(client),
        }
    }

    /// The guard it sends through.
    pub fn guard(&self) -> &S {
        &self.guard
    }
}

/// Sends `request` through `guard`: the response, or rig's error for a
/// failed send or a status that is not a success.
async fn exchange<S, B>(
    guard: S,
    request: http::Request<::reqwest::Body>,
) -> Result<http::Response<B>>
where
    S: Service<http::Request<::reqwest::Body>, Response = http::Response<B>>,
    S::Error: Into<BoxError>,
    B: http_body::Body,
    B::Error: Into<BoxError>,
{
    let response = guard
        .oneshot(request)
        .await
        .map_err(|error| Error::Instance(error.into()))?;
    if response.status().is_success() {
        return Ok(response);
    }
    let (parts, body) = response.into_parts();
    let body = match body.collect().await {
        Ok(collected) => String::from_utf8_lossy(&collected.to_bytes()).into_owned(),
        Err(error) => format!("failed to read error response body: {}", error.into()),
    };
    Err(Error::non_success_with_details(
        parts.status,
        parts.headers,
        body,
    ))
}

/// One chunk of a streamed body, in rig's terms.
// rig's error type is what it is: large, and rig's to choose.
#[allow(clippy::result_large_err)]
fn rig_chunk<D: Into<Bytes>, E: Into<BoxError>>(chunk: std::result::Result<D, E>) -> Result<Bytes> {
    chunk
        .map(Into::into)
        .map_err(|error| Error::Instance(error.into()))
}

fn reqwest_request<T: Into<Bytes>>(request: Request<T>) -> http::Request<::reqwest::Body> {
    request.map(|body| ::reqwest::Body::from(body.into()))
}

impl<S, B> HttpClientExt for GuardedClient<S>
where
    S: Service<http::Request<::reqwest::Body>, Response = http::Response<B>>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: http_body::Body + Send + 'static,
    B::Data: Into<Bytes> + Send,
    B::Error: Into<BoxError>,
{
    fn send<T, U>(
        &self,
        req: Request<T>,
    ) -> impl Future<Output = Result<Response<LazyBody<U>>>> + WasmCompatSend + 'static
    where
        T: Into<Bytes>,
        T: WasmCompatSend,
        U: From<Bytes>,
        U: WasmCompatSend + 'static,
    {
        let guard = self.guard.clone();
        let request = reqwest_request(req);
        async move {
            let (parts, body) = exchange(guard, request).await?.into_parts();
            let body: LazyBody<U> = Box::pin(async move {
                let collected = body
                    .collect()
                    .await
                    .map_err(|error| Error::Instance(error.into()))?;
                Ok(U::from(collected.to_bytes()))
            });
            Ok(Response::from_parts(parts, body))
        }
    }

    fn send_multipart<U>(
        &self,
        req: Request<MultipartForm>,
    ) -> impl Future<Output = Result<Response<LazyBody<U>>>> + WasmCompatSend + 'static
    where
        U: From<Bytes>,
        U: WasmCompatSend + 'static,
    {
        self.multipart.send_multipart(req)
    }

    fn send_streaming<T>(
        &self,
        req: Request<T>,
    ) -> impl Future<Output = Result<StreamingResponse>> + WasmCompatSend
    where
        T: Into<Bytes> + WasmCompatSend,
    {
        let guard = self.guard.clone();
        let request = reqwest_request(req);
        async move {
            let (parts, body) = exchange(guard, request).await?.into_parts();
            let chunks = http_body_util::BodyDataStream::new(body);
            let chunks = futures_util::StreamExt::map(chunks, rig_chunk);
            Ok(Response::from_parts(parts, Box::pin(chunks) as _))
        }
    }
}
