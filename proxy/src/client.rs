//! The proxy's upstream client: hyper-util's pooled client over rustls.
//!
//! The proxy forwards through hyper's client directly rather than through
//! reqwest (whose [`ReqwestService`](crate::reqwest::ReqwestService) stays
//! for the layer's users): per request, reqwest converts the request into
//! its own type and back and wraps both bodies in its own, which cost the
//! proxy measurable CPU on every request (see the commit that made this
//! change for the figures). The settings are those the proxy had with
//! reqwest: rustls with the platform's verifier for `https` upstreams
//! (HTTP/2 by ALPN, else HTTP/1.1), no redirects (hyper's client never
//! follows one, so credentials never go to another host), no system proxy,
//! `TCP_NODELAY`, a 10 s connect timeout, pooled connections kept 60 s when
//! idle, HTTP/1 responses read [`UPSTREAM_READ_BYTES`] at a time (heads
//! larger than that are refused) and no overall timeout (streams may run
//! long; the guard bounds the waits for a head and between chunks).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::BoxBody;
use http_body_util::BodyExt;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use refusal_guard::replay::{prefixed, ForwardedBody, ReplayBody};
use refusal_guard::BoxError;

/// The body of the requests the proxy sends upstream: any body, boxed.
///
/// A named type rather than an alias of the boxed body, so that the
/// server's futures can be proven `Send` (an alias of a type holding a
/// `dyn Error` trips the compiler's higher-ranked lifetime check).
///
/// ```
/// use refusal_guard_proxy::UpstreamBody;
///
/// let body = UpstreamBody::new(http_body_util::Full::new(bytes::Bytes::from("{}")));
/// # let _ = body;
/// ```
pub struct UpstreamBody(BoxBody<Bytes, BoxError>);

impl UpstreamBody {
    /// Boxes `body`.
    pub fn new<B>(body: B) -> Self
    where
        B: Body<Data = Bytes> + Send + Sync + 'static,
        B::Error: Into<BoxError>,
    {
        UpstreamBody(body.map_err(Into::into).boxed())
    }
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody").finish_non_exhaustive()
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.0).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.0.size_hint()
    }
}

impl ReplayBody for UpstreamBody {
    fn from_bytes(bytes: Bytes) -> Self {
        UpstreamBody::new(http_body_util::Full::new(bytes))
    }

    fn prefixed(prefix: Bytes, rest: Self) -> Self {
        UpstreamBody::new(prefixed(prefix, rest))
    }

    fn forwarded(body: ForwardedBody<Self>) -> Result<Self, ForwardedBody<Self>> {
        Ok(UpstreamBody::new(body))
    }
}

/// The proxy's upstream client, a `tower::Service<http::Request<UpstreamBody>>`
/// answering `http::Response<hyper::body::Incoming>`.
pub type UpstreamClient = Client<HttpsConnector<HttpConnector>, UpstreamBody>;

/// How long connecting (TCP) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long an idle pooled connection is kept.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// How much of an HTTP/1 response is read at a time, which also bounds its
/// head (nginx's default for upstream heads is 4 or 8 KiB; providers send
/// 1-3 KiB). A fixed size rather than hyper's adaptive buffer, which grew to
/// 16-32 KiB on every pooled connection and was regrown after each shrink:
/// at 64 concurrent streams, peak RSS about 0.8 MB lower and less CPU per
/// request (see the commit that set it). At 8 KiB the extra reads cost more
/// than they saved.
///
/// ```
/// assert_eq!(refusal_guard_proxy::UPSTREAM_READ_BYTES, 16 * 1024);
/// ```
pub const UPSTREAM_READ_BYTES: usize = 16 * 1024;

/// The client the proxy forwards through (see the module's documentation
/// for its settings); `Err` when the platform's certificate verifier cannot
/// be set up.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let _runtime = tokio::runtime::Builder::new_current_thread().build()?;
/// let client = refusal_guard_proxy::client()?;
/// # let _ = client;
/// # Ok(())
/// # }
/// ```
pub fn client() -> Result<UpstreamClient, std::io::Error> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    let https = HttpsConnectorBuilder::new()
        .try_with_platform_verifier()
        .map_err(std::io::Error::other)?
        .https_or_http()
        .enable_all_versions()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .http1_read_buf_exact_size(UPSTREAM_READ_BYTES)
        .build(https))
}
