//! The refusal-guard proxy: an HTTP server that forwards every request
//! through the guard ([`refusal_guard::RefusalGuardLayer`]) to one upstream,
//! or, with routing on, each provider's API to that provider's upstream (see
//! [`Routes`]).
//!
//! The `refusal-guard` binary (`cargo install refusal-guard-proxy`) and
//! `proxy/examples/proxy.rs` are the command line around it; this crate is the
//! server, so that tests and other binaries can run it in-process, with the
//! refusal report ([`Report`]) and dashboard ([`Dashboard`]) the binary and
//! the admin listener serve, and [`eval`], the `refusal-guard eval`
//! subcommand: a prompt set through this proxy once per variant of its
//! options, measured.
//!
//! What it does with each request:
//!
//! - the URL becomes the upstream's base URL plus the request's path and
//!   query; `Host` is set to the upstream's;
//! - hop-by-hop headers (`Connection` and those it names, `Keep-Alive`,
//!   `Proxy-*`, `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`) are dropped,
//!   both ways; everything else, credentials included, goes to the
//!   request's upstream and nowhere else (the client built by [`client`]
//!   follows no redirects);
//! - bodies are streamed through unchanged, except where the guard rewrites
//!   a request or serves a recovered response; a response stream is
//!   forwarded chunk by chunk as it arrives once the guard has committed;
//! - `CONNECT`, targets that are not a path (absolute, authority or
//!   asterisk form) and paths with dot segments in any spelling are answered
//!   405 / 400 and never forwarded (see [`Upstream::target`]);
//! - compressed responses (gzip, deflate, br) are decoded under the guard,
//!   so it judges what the provider said; the client gets identity bytes;
//! - if the upstream cannot be reached, the client gets a 502 with a JSON
//!   error in the provider's shape;
//! - one line per request goes to stderr, also for a client that leaves
//!   before the response head: time, method, path (never the query, which
//!   may hold a key), status, outcome and latency. Headers and bodies are
//!   never logged.
//!
//! The server bounds what a client can hold: a header-read timeout, an idle
//! keep-alive timeout, a cap on concurrent connections and a drain deadline
//! at shutdown (see [`ServerLimits`]). [`Options`] is the command line of
//! the `refusal-guard` binary, flags and environment variables, and [`run`] runs it.
//!
//! ```no_run
//! use refusal_guard_proxy::{Proxy, Upstream};
//! use refusal_guard::RefusalGuardLayer;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let upstream = Upstream::parse("https://api.anthropic.com")?;
//! let proxy = Proxy::new(upstream, &RefusalGuardLayer::new())?
//!     .max_connections(1024)
//!     .drain_timeout(std::time::Duration::from_secs(10));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8787").await?;
//! proxy.serve(listener, std::future::pending()).await?;
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]
#![deny(unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

mod access_log;
pub mod admin;
pub mod cli;
mod client;
mod client_key;
mod dashboard;
mod errors;
pub mod eval;
mod export;
mod headers;
mod local;
mod options;
#[cfg(feature = "otlp")]
#[cfg_attr(docsrs, doc(cfg(feature = "otlp")))]
pub mod otlp;
mod report;
mod routes;
mod run;
mod server;
mod tenants;
mod upstream;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::BodyExt;
use tower::ServiceExt;
use tower_http::decompression::{Decompression, DecompressionLayer};
use tower_layer::Layer;
use tower_service::Service;

use refusal_guard::refusal::RefusalHandle;
use refusal_guard::BoxError;
use refusal_guard::RefusalGuard;
use refusal_guard::RefusalGuardLayer;

pub use access_log::LogFormat;
pub use client::{client, UpstreamBody, UpstreamClient, UPSTREAM_READ_BYTES};
pub use client_key::ClientKey;
pub use dashboard::Dashboard;
pub use local::RunningProxy;
pub use options::{Options, RouteBy, State};
pub use report::{Report, TenantSummary, TenantsTable};
pub use routes::{Route, Routes};
pub use run::run;
pub use server::ServerLimits;
pub use tenants::{hash_key, TenantTable, Tenants, MAX_FILE_BYTES, MAX_TENANTS};
pub use upstream::{TargetError, Upstream, UpstreamError};

use access_log::{AccessLog, LogLine, Tracked};
use errors::error_response;
use headers::strip_hop_by_hop;

/// The body of the proxy's responses.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// The service [`Proxy::new`] builds: the guard over response decoding over
/// the [`UpstreamClient`].
pub type GuardedClient = RefusalGuard<Decompression<UpstreamClient>>;

/// The service [`Proxy::signed`] builds: the guard over decoding over
/// SigV4 signing over the [`UpstreamClient`].
#[cfg(feature = "bedrock")]
pub type SignedClient = RefusalGuard<Decompression<refusal_guard::aws::SigV4<UpstreamClient>>>;

/// What [`Proxy`] asks of the service it forwards to (usually a
/// [`RefusalGuard`]), spelt once: it takes the proxy's [`UpstreamBody`]
/// requests, can be cloned and shared across connections, and answers with
/// a body of [`Bytes`]. Every service that does is one.
///
/// ```
/// use refusal_guard_proxy::{GuardedClient, UpstreamService};
///
/// fn forwards_to<S: UpstreamService>(_service: &S) {}
/// # fn check(client: &GuardedClient) {
/// forwards_to(client);
/// # }
/// ```
pub trait UpstreamService:
    Service<
        Request<UpstreamBody>,
        Response = Response<<Self as UpstreamService>::ResponseBody>,
        Future: Send + 'static,
        Error: Into<BoxError>,
    > + Clone
    + Send
    + Sync
    + 'static
{
    /// The body of its responses.
    type ResponseBody: Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static;
}

impl<S, B> UpstreamService for S
where
    S: Service<Request<UpstreamBody>, Response = Response<B>> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type ResponseBody = B;
}

/// The proxy: a guarded service, the routes it forwards by and the
/// server's limits.
pub struct Proxy<S> {
    inner: Arc<Shared<S>>,
    limits: ServerLimits,
}

struct Shared<S> {
    service: S,
    routes: Routes,
    access_log: AccessLog,
    admission: Admission,
}

/// Who the proxy serves.
enum Admission {
    /// Anyone who can reach it.
    Open,
    /// Clients presenting the one proxy key.
    Key(ClientKey),
    /// Clients presenting a key of the tenants file, each as its tenant.
    Tenants(Arc<Tenants>),
}

impl Admission {
    /// Why a request is refused before it goes anywhere (no client key the
    /// proxy knows), else `None`; an admitted tenant goes into its
    /// extensions, its key out of its headers.
    fn refuses(&self, parts: &mut http::request::Parts) -> Option<&'static str> {
        match self {
            Admission::Open => None,
            Admission::Key(key) => (!key.admits(&mut parts.headers)).then_some(
                "refusal-guard: this proxy spends its own credentials; present its client key \
                 (x-refusal-guard-key, x-api-key or Authorization: Bearer)",
            ),
            Admission::Tenants(tenants) => match tenants.table().admit(&mut parts.headers) {
                Some(tenant) => {
                    parts.extensions.insert(tenant);
                    None
                }
                None => Some(
                    "refusal-guard: present a client key this proxy's tenants file lists \
                     (x-refusal-guard-key, x-api-key or Authorization: Bearer)",
                ),
            },
        }
    }
}

impl<S> Clone for Proxy<S> {
    fn clone(&self) -> Self {
        Proxy {
            inner: self.inner.clone(),
            limits: self.limits,
        }
    }
}

impl<S> fmt::Debug for Proxy<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy")
            .field("routes", &self.inner.routes)
            .field("access_log", &!self.inner.access_log.off)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Proxy<GuardedClient> {
    /// A proxy to `upstream` (an [`Upstream`], or [`Routes`]) through
    /// `layer`, over the client of [`client`]; `Err` when the platform's
    /// certificate verifier cannot be set up.
    ///
    /// Under the guard sits tower-http's decompression, so a gzip-encoded
    /// refusal is seen (and recovered) like any other; the client receives
    /// the decoded bytes, which is valid whatever encoding it accepted.
    pub fn new(
        upstream: impl Into<Routes>,
        layer: &RefusalGuardLayer,
    ) -> Result<Self, std::io::Error> {
        let client = DecompressionLayer::new().layer(client()?);
        Ok(Proxy::with_service(upstream, layer.layer(client)))
    }
}

#[cfg(feature = "bedrock")]
impl Proxy<SignedClient> {
    /// [`Proxy::new`] with `signer` below the decompression, so that every
    /// attempt the guard makes is signed as sent (Bedrock gateway mode).
    pub fn signed(
        upstream: impl Into<Routes>,
        layer: &RefusalGuardLayer,
        signer: refusal_guard::aws::SigV4Layer,
    ) -> Result<Self, std::io::Error> {
        let client = DecompressionLayer::new().layer(signer.layer(client()?));
        Ok(Proxy::with_service(upstream, layer.layer(client)))
    }
}

impl<S> Proxy<S> {
    /// A proxy that hands every request, rewritten for `upstream` (an
    /// [`Upstream`], or [`Routes`]), to `service` (usually a
    /// [`RefusalGuard`]; for the simulated provider,
    /// `layer.layer(Simulator::new().shared())`).
    pub fn with_service(upstream: impl Into<Routes>, service: S) -> Self {
        Proxy {
            inner: Arc::new(Shared {
                service,
                routes: upstream.into(),
                access_log: AccessLog::default(),
                admission: Admission::Open,
            }),
            limits: ServerLimits::default(),
        }
    }

    fn shared_mut(self, change: impl FnOnce(&mut Shared<S>)) -> Self {
        let mut shared = match Arc::try_unwrap(self.inner) {
            Ok(shared) => shared,
            Err(_) => panic!("the access log must be set before the proxy is cloned"),
        };
        change(&mut shared);
        Proxy {
            inner: Arc::new(shared),
            limits: self.limits,
        }
    }

    /// Turns the per-request line on stderr on or off (on by default).
    pub fn access_log(self, on: bool) -> Self {
        self.shared_mut(|shared| shared.access_log.off = !on)
    }

    /// Writes the per-request line as text (the default) or as JSON.
    pub fn log_format(self, format: LogFormat) -> Self {
        self.shared_mut(|shared| shared.access_log.format = format)
    }

    /// Hands each per-request line (ending in a newline) to `writer`
    /// instead of writing it on stderr.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use refusal_guard_proxy::{Proxy, Upstream};
    /// use refusal_guard::RefusalGuardLayer;
    ///
    /// let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    /// let seen = lines.clone();
    /// let upstream = Upstream::parse("http://127.0.0.1:9").unwrap();
    /// let proxy = Proxy::new(upstream, &RefusalGuardLayer::new())
    ///     .unwrap()
    ///     .access_log_to(move |line| seen.lock().unwrap().push(line.to_owned()));
    /// # let _ = proxy;
    /// ```
    pub fn access_log_to<W>(self, writer: W) -> Self
    where
        W: Fn(&str) + Send + Sync + 'static,
    {
        self.shared_mut(|shared| shared.access_log.writer = Some(Arc::new(writer)))
    }

    /// Answers 401 (in the API's error shape, nothing forwarded) to every
    /// request that does not present `key`; see [`ClientKey`].
    pub fn client_key(self, key: ClientKey) -> Self {
        self.shared_mut(|shared| shared.admission = Admission::Key(key))
    }

    /// Answers 401 (in the API's error shape, nothing forwarded) to every
    /// request that does not present a key of `tenants`, and marks each
    /// other request with its [`Tenant`](refusal_guard::tenant::Tenant) (in its
    /// extensions) for a layer built with
    /// [`tenants(FromExtensions)`](refusal_guard::RefusalGuardLayer::tenants) to
    /// apply. Replaces [`client_key`](Self::client_key).
    pub fn tenants(self, tenants: Arc<Tenants>) -> Self {
        self.shared_mut(|shared| shared.admission = Admission::Tenants(tenants))
    }

    /// Replaces all the server's limits at once.
    pub fn limits(mut self, limits: ServerLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Closes a connection whose client has not sent a complete request head
    /// this long after the connection opened or its last response ended
    /// (HTTP/1; default 30 s).
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.limits.header_read_timeout = timeout;
        self
    }

    /// Closes a connection with no request in flight for this long (default
    /// 60 s).
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.limits.idle_timeout = timeout;
        self
    }

    /// At shutdown, cuts the connections still open this long after it began
    /// (default 30 s).
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.limits.drain_timeout = timeout;
        self
    }

    /// Serves at most this many connections at once (default 4096); past
    /// it, a few more get a 503 in the API's shape, then accepting waits.
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.limits.max_connections = connections.max(1);
        self
    }

    /// Reads request heads (request line and headers) of at most this
    /// many bytes, answering `431` past it (default and least 8 KiB). The bound also caps each HTTP/1 connection's read buffer.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let _runtime = tokio::runtime::Builder::new_current_thread().build()?;
    /// use refusal_guard_proxy::{Proxy, Upstream};
    /// use refusal_guard::RefusalGuardLayer;
    ///
    /// let upstream = Upstream::parse("https://api.anthropic.com")?;
    /// let proxy = Proxy::new(upstream, &RefusalGuardLayer::new())?.max_head_bytes(64 * 1024);
    /// assert_eq!(proxy.server_limits().max_head_bytes, 64 * 1024);
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_head_bytes(mut self, bytes: usize) -> Self {
        self.limits.max_head_bytes = bytes.max(ServerLimits::MIN_HEAD_BYTES);
        self
    }

    /// The default upstream (the only one without routing).
    pub fn upstream(&self) -> &Upstream {
        self.inner.routes.default_upstream()
    }

    /// The route table.
    pub fn routes(&self) -> &Routes {
        &self.inner.routes
    }

    /// The server's limits.
    pub fn server_limits(&self) -> ServerLimits {
        self.limits
    }

    fn log_line<B>(&self, request: &Request<B>) -> LogLine {
        LogLine::new(
            self.inner.access_log.clone(),
            request.method().clone(),
            request.uri().path().to_owned(),
        )
    }
}

impl<S: UpstreamService> Proxy<S> {
    /// Handles one request: forwards it and returns what the client gets.
    pub async fn handle<B>(&self, request: Request<B>) -> Response<ProxyBody>
    where
        B: Body<Data = Bytes> + Send + Sync + 'static,
        B::Error: Into<BoxError>,
    {
        let shared = &self.inner;
        let mut line = self.log_line(&request);
        let (mut parts, body) = request.into_parts();
        if let Some(message) = shared.admission.refuses(&mut parts) {
            line.write(401, "client_key_required", "");
            let status = StatusCode::UNAUTHORIZED;
            return error_response(line.path(), status, "client_key_required", message);
        }
        let (route, upstream) = shared.routes.select(&parts.uri, &parts.headers);
        if shared.routes.is_routed() {
            line.route(route);
            routed(route.as_str());
        }
        parts.uri = match upstream.target(&parts.method, &parts.uri, parts.version) {
            Ok(uri) => uri,
            Err(refused) => {
                line.write(refused.status().as_u16(), refused.code(), "");
                let (status, code) = (refused.status(), refused.code());
                let mut response = error_response(line.path(), status, code, &refused.to_string());
                // What follows a refused target (a tunnel's bytes, say) is
                // not an HTTP request: close the connection after answering.
                response
                    .headers_mut()
                    .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
                return response;
            }
        };
        parts.version = http::Version::HTTP_11;
        strip_hop_by_hop(&mut parts.headers);
        parts.headers.insert(http::header::HOST, upstream.host());
        let outbound = Request::from_parts(parts, UpstreamBody::new(body));

        match shared.service.clone().oneshot(outbound).await {
            Ok(response) => {
                let (mut parts, body) = response.into_parts();
                proxy_response(parts.status);
                strip_hop_by_hop(&mut parts.headers);
                let body = if shared.access_log.off {
                    body.map_err(Into::into).boxed_unsync()
                } else {
                    let handle = parts.extensions.get::<RefusalHandle>().cloned();
                    Tracked::new(body, line, parts.status, handle).boxed_unsync()
                };
                Response::from_parts(parts, body)
            }
            Err(error) => {
                let message = format!(
                    "refusal-guard: upstream {} unreachable: {}",
                    upstream,
                    describe(error.into())
                );
                line.write(502, "upstream_unreachable", "");
                proxy_response(StatusCode::BAD_GATEWAY);
                error_response(
                    line.path(),
                    StatusCode::BAD_GATEWAY,
                    "upstream_unreachable",
                    &message,
                )
            }
        }
    }
}

/// A transport error as one line, without the URL (which may carry a key in
/// its query).
fn describe(error: BoxError) -> String {
    let error: BoxError = match error.downcast::<::reqwest::Error>() {
        Ok(error) => Box::new(error.without_url()),
        Err(error) => error,
    };
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

/// Counts a request the proxy forwarded on `route` (routing on).
fn routed(route: &'static str) {
    metrics::counter!(refusal_guard::telemetry::metrics::PROXY_REQUESTS, "route" => route)
        .increment(1);
}

/// Counts a response the proxy gave a client, by its status class.
fn proxy_response(status: http::StatusCode) {
    let class = match status.as_u16() {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    };
    metrics::counter!(refusal_guard::telemetry::metrics::PROXY_RESPONSES, "class" => class)
        .increment(1);
}

/// The crate's README and the pages of `docs/` about the proxy, so that
/// their Rust examples compile (and, unless `no_run`, run) as doc tests.
/// rustdoc reads a code block without a language as Rust, so every other
/// block names its own.
#[cfg(doctest)]
mod pages {
    #[doc = include_str!("../README.md")]
    struct Readme;
    #[doc = include_str!("../../docs/deploy.md")]
    struct Deploy;
    #[doc = include_str!("../../docs/eval.md")]
    struct Eval;
    #[doc = include_str!("../../docs/operating.md")]
    struct Operating;
    #[doc = include_str!("../../docs/proxy.md")]
    struct Proxy;
    #[doc = include_str!("../../docs/tenants.md")]
    struct Tenants;
}
