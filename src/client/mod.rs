//! The guard inside the LLM client crates Rust agents use, each behind a
//! feature of its own (all off by default):
//!
//! - [`async_openai`] (feature `async-openai`): a tower service for
//!   async-openai 0.43's `Client::with_http_service`;
//! - [`rig`] (feature `rig`): an HTTP client implementing rig 0.44's
//!   `HttpClientExt`, for its providers' `with_http`;
//! - [`reqwest_middleware`] (feature `reqwest-middleware`): a `Middleware`
//!   for reqwest-middleware 0.5's `ClientWithMiddleware`.
//!
//! Each sends through reqwest 0.13 (the `reqwest` feature, which each
//! turns on) and runs every request through a [`RefusalGuard`], so what the
//! guard does is the same whichever crate made the request: the same
//! recovery, records and telemetry sink. These crates read the response
//! themselves, so the response's [`Refusal`](crate::Refusal) does not reach
//! the caller; a [`CallHandle`](crate::CallHandle) does (see
//! [`outcome`](crate::outcome)).
//!
//! [`RefusalGuard`]: crate::RefusalGuard

#[cfg(feature = "async-openai")]
#[cfg_attr(docsrs, doc(cfg(feature = "async-openai")))]
pub mod async_openai;
#[cfg(feature = "reqwest-middleware")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest-middleware")))]
pub mod reqwest_middleware;
#[cfg(feature = "rig")]
#[cfg_attr(docsrs, doc(cfg(feature = "rig")))]
pub mod rig;

/// A guarded response as a `reqwest::Response` whose `url()` is `url`, for
/// the client crates that read one: the body goes as it is
/// (`reqwest::Body::wrap`), the head and extensions with it.
#[cfg(any(feature = "async-openai", feature = "reqwest-middleware"))]
fn reqwest_response<B>(response: http::Response<B>, url: ::reqwest::Url) -> ::reqwest::Response
where
    B: http_body::Body + Send + Sync + 'static,
    B::Data: Into<bytes::Bytes>,
    B::Error: Into<crate::BoxError>,
{
    use ::reqwest::ResponseBuilderExt;
    let (mut parts, body) = response.into_parts();
    // reqwest keeps a response's URL in an extension only its builder sets.
    if let Ok(tagged) = http::Response::builder().url(url).body(()) {
        parts.extensions.extend(tagged.into_parts().0.extensions);
    }
    ::reqwest::Response::from(http::Response::from_parts(
        parts,
        ::reqwest::Body::wrap(body),
    ))
}
