//! The standalone proxy (feature `proxy`, on by default): an HTTP server that
//! forwards every request to one upstream through the guard.
//!
//! `examples/proxy.rs` is the command line around it; this module is the
//! server, so that tests and other binaries can run it in-process.
//!
//! What it does with each request:
//!
//! - the URL becomes the upstream's base URL plus the request's path and
//!   query; `Host` is set to the upstream's;
//! - hop-by-hop headers (`Connection` and those it names, `Keep-Alive`,
//!   `Proxy-*`, `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`) are dropped,
//!   both ways; everything else, credentials included, goes to the one
//!   configured upstream and nowhere else (the client built by [`client`]
//!   follows no redirects);
//! - bodies are streamed through unchanged, except where the guard rewrites
//!   a request or serves a recovered response; a response stream is
//!   forwarded chunk by chunk as it arrives once the guard has committed;
//! - if the upstream cannot be reached, the client gets a 502 with a JSON
//!   error in the provider's shape;
//! - one line per request goes to stderr: time, method, path (never the
//!   query, which may hold a key), status, outcome and latency. Headers and
//!   bodies are never logged.
//!
//! ```no_run
//! use refusal_guard::proxy::{Proxy, Upstream};
//! use refusal_guard::RefusalGuardLayer;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let upstream = Upstream::parse("https://api.anthropic.com")?;
//! let proxy = Proxy::new(upstream, &RefusalGuardLayer::new())?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8787").await?;
//! proxy.serve(listener, std::future::pending()).await?;
//! # Ok(())
//! # }
//! ```

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tower::ServiceExt;
use tower_layer::Layer;
use tower_service::Service;

use crate::body::BoxError;
use crate::refusal::RefusalHandle;
use crate::reqwest::ReqwestService;
use crate::service::RefusalGuard;
use crate::RefusalGuardLayer;

/// The body of the proxy's responses.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// Where the proxy forwards: a base URL (`scheme://host[:port][/prefix]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
    prefix: String,
}

/// Why an upstream URL was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamError(String);

impl fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UpstreamError {}

impl Upstream {
    /// Parses a base URL: `http` or `https`, a host, an optional port and an
    /// optional path prefix; no query, no user info.
    ///
    /// ```
    /// use refusal_guard::proxy::Upstream;
    ///
    /// let up = Upstream::parse("http://127.0.0.1:9000/base/").unwrap();
    /// assert_eq!(up.to_string(), "http://127.0.0.1:9000/base");
    /// assert_eq!(up.target(Some("/v1/messages?beta=true")).to_string(),
    ///            "http://127.0.0.1:9000/base/v1/messages?beta=true");
    /// assert!(Upstream::parse("ftp://example.com").is_err());
    /// ```
    pub fn parse(url: &str) -> Result<Upstream, UpstreamError> {
        let bad = |why: &str| UpstreamError(format!("bad upstream URL `{url}`: {why}"));
        let uri: Uri = url.trim().parse().map_err(|_| bad("not a URL"))?;
        let scheme = uri
            .scheme()
            .cloned()
            .ok_or_else(|| bad("it needs a scheme, http:// or https://"))?;
        if scheme != http::uri::Scheme::HTTP && scheme != http::uri::Scheme::HTTPS {
            return Err(bad("the scheme must be http or https"));
        }
        let authority = uri.authority().cloned().ok_or_else(|| bad("no host"))?;
        if authority.as_str().contains('@') {
            return Err(bad(
                "credentials in the URL are not supported; send them as headers",
            ));
        }
        if authority.host().is_empty() {
            return Err(bad("no host"));
        }
        if uri.query().is_some() {
            return Err(bad("a base URL takes no query"));
        }
        let prefix = uri.path().trim_end_matches('/').to_owned();
        Ok(Upstream {
            scheme,
            authority,
            prefix,
        })
    }

    /// The upstream URL for a request's path and query.
    pub fn target(&self, path_and_query: Option<&str>) -> Uri {
        let tail = path_and_query.unwrap_or("/");
        let tail = if tail.starts_with('/') {
            tail.to_owned()
        } else {
            format!("/{tail}")
        };
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(format!("{}{}", self.prefix, tail))
            .build()
            .unwrap_or_else(|_| Uri::from_static("/"))
    }

    /// The `Host` header value for the upstream.
    pub fn host(&self) -> HeaderValue {
        HeaderValue::from_str(self.authority.as_str())
            .unwrap_or(HeaderValue::from_static("localhost"))
    }
}

impl fmt::Display for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.authority, self.prefix)
    }
}

impl std::str::FromStr for Upstream {
    type Err = UpstreamError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Upstream::parse(s)
    }
}

/// The reqwest client the proxy uses by default: rustls, HTTP/1 and HTTP/2,
/// no redirects (a redirect would carry credentials elsewhere), no system
/// proxy, a 10 s connect timeout and no overall timeout (streams may run
/// long).
pub fn client() -> Result<::reqwest::Client, ::reqwest::Error> {
    ::reqwest::Client::builder()
        .redirect(::reqwest::redirect::Policy::none())
        .no_proxy()
        .connect_timeout(Duration::from_secs(10))
        .pool_idle_timeout(Duration::from_secs(60))
        .build()
}

/// The proxy: a guarded service and the upstream it forwards to.
pub struct Proxy<S> {
    inner: Arc<Shared<S>>,
}

struct Shared<S> {
    service: S,
    upstream: Upstream,
    access_log: bool,
}

impl<S> Clone for Proxy<S> {
    fn clone(&self) -> Self {
        Proxy {
            inner: self.inner.clone(),
        }
    }
}

impl<S> fmt::Debug for Proxy<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy")
            .field("upstream", &self.inner.upstream)
            .field("access_log", &self.inner.access_log)
            .finish_non_exhaustive()
    }
}

impl Proxy<RefusalGuard<ReqwestService>> {
    /// A proxy to `upstream` through `layer`, over the client of [`client`].
    pub fn new(upstream: Upstream, layer: &RefusalGuardLayer) -> Result<Self, ::reqwest::Error> {
        let service = layer.layer(ReqwestService::new(client()?));
        Ok(Proxy::with_service(upstream, service))
    }
}

impl<S> Proxy<S> {
    /// A proxy that hands every request, rewritten for `upstream`, to
    /// `service` (usually a [`RefusalGuard`]; for the simulated provider,
    /// `layer.layer(Simulator::new())`).
    pub fn with_service(upstream: Upstream, service: S) -> Self {
        Proxy {
            inner: Arc::new(Shared {
                service,
                upstream,
                access_log: true,
            }),
        }
    }

    /// Turns the per-request line on stderr on or off (on by default).
    pub fn access_log(self, on: bool) -> Self {
        let shared = match Arc::try_unwrap(self.inner) {
            Ok(shared) => shared,
            Err(_) => panic!("access_log must be set before the proxy is cloned"),
        };
        Proxy {
            inner: Arc::new(Shared {
                access_log: on,
                ..shared
            }),
        }
    }

    /// The upstream.
    pub fn upstream(&self) -> &Upstream {
        &self.inner.upstream
    }
}

impl<S, RB> Proxy<S>
where
    S: Service<Request<::reqwest::Body>, Response = Response<RB>> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    /// Serves connections from `listener` until `shutdown` completes, then
    /// stops accepting and waits for the requests in flight (streams
    /// included) to finish.
    pub async fn serve<F>(self, listener: TcpListener, shutdown: F) -> std::io::Result<()>
    where
        F: Future<Output = ()> + Send,
    {
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        let builder = auto::Builder::new(TokioExecutor::new());
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let (stream, _peer) = match accepted {
                        Ok(accepted) => accepted,
                        Err(error) => {
                            // Out of file descriptors and the like: back off.
                            eprintln!("refusal-guard: accept failed: {error}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    let proxy = self.clone();
                    let service = hyper::service::service_fn(move |request| {
                        let proxy = proxy.clone();
                        async move { Ok::<_, Infallible>(proxy.handle(request).await) }
                    });
                    let connection = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .into_owned();
                    let connection = graceful.watch(connection);
                    tokio::spawn(async move {
                        if let Err(error) = connection.await {
                            tracing::debug!(%error, "connection ended with an error");
                        }
                    });
                }
                () = &mut shutdown => break,
            }
        }
        drop(listener);
        graceful.shutdown().await;
        Ok(())
    }

    /// Handles one request: forwards it and returns what the client gets.
    pub async fn handle<B>(&self, request: Request<B>) -> Response<ProxyBody>
    where
        B: Body<Data = Bytes> + Send + Sync + 'static,
        B::Error: Into<BoxError>,
    {
        let started = Instant::now();
        let shared = &self.inner;
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        let (mut parts, body) = request.into_parts();
        parts.uri = shared
            .upstream
            .target(parts.uri.path_and_query().map(|p| p.as_str()));
        parts.version = http::Version::HTTP_11;
        strip_hop_by_hop(&mut parts.headers);
        parts.headers.insert(header::HOST, shared.upstream.host());
        let outbound = Request::from_parts(parts, ::reqwest::Body::wrap(body));

        let line = LogLine {
            on: shared.access_log,
            method,
            path,
            started,
        };
        let service = shared.service.clone();
        let result = match service.oneshot(outbound).await {
            Ok(response) => Ok(response),
            Err(error) => Err(error.into()),
        };
        match result {
            Ok(response) => {
                let (mut parts, body) = response.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                let handle = parts.extensions.get::<RefusalHandle>().cloned();
                let (done, finished) = tokio::sync::oneshot::channel();
                let status = parts.status;
                tokio::spawn(line.after(status, handle, finished));
                let body = Tracked {
                    body: Box::pin(body),
                    done: Some(done),
                };
                Response::from_parts(parts, body.boxed_unsync())
            }
            Err(error) => {
                let message = describe(error);
                let text = format!(
                    "refusal-guard: upstream {} unreachable: {message}",
                    shared.upstream
                );
                line.write(StatusCode::BAD_GATEWAY, "upstream_unreachable", "");
                bad_gateway(&line.path, &text)
            }
        }
    }
}

/// Headers that describe one connection, not the message.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Headers the `Connection` header names are hop-by-hop too.
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    let proxy_headers: Vec<HeaderName> = headers
        .keys()
        .filter(|name| name.as_str().starts_with("proxy-"))
        .cloned()
        .collect();
    for name in proxy_headers {
        headers.remove(name);
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

/// A 502 in the error shape of the API the path belongs to.
fn bad_gateway(path: &str, message: &str) -> Response<ProxyBody> {
    let body = if path.contains("/chat/completions") || path.ends_with("/responses") {
        serde_json::json!({"error": {"message": message, "type": "api_error",
            "param": null, "code": "upstream_unreachable"}})
    } else if path.contains(":generateContent")
        || path.contains(":streamGenerateContent")
        || path.contains("/models/")
    {
        serde_json::json!({"error": {"code": 502, "message": message, "status": "UNAVAILABLE"}})
    } else {
        serde_json::json!({"type": "error", "error": {"type": "api_error", "message": message}})
    };
    let bytes = Bytes::from(body.to_string());
    let mut response = Response::new(
        http_body_util::Full::new(bytes)
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = StatusCode::BAD_GATEWAY;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response.headers_mut().insert(
        HeaderName::from_static("x-refusal-guard-error"),
        HeaderValue::from_static("upstream_unreachable"),
    );
    response
}

/// The access log line of one request.
struct LogLine {
    on: bool,
    method: http::Method,
    path: String,
    started: Instant,
}

/// How a response body ended.
#[derive(Debug, Clone, Copy)]
enum Ending {
    Complete,
    Failed,
    ClientGone,
}

impl LogLine {
    async fn after(
        self,
        status: StatusCode,
        handle: Option<RefusalHandle>,
        finished: tokio::sync::oneshot::Receiver<Ending>,
    ) {
        let ending = finished.await.unwrap_or(Ending::ClientGone);
        let outcome = match handle {
            // The guard settles the handle when its body ends or is dropped,
            // which is at the latest just after the body above signalled.
            Some(handle) => {
                match tokio::time::timeout(Duration::from_secs(5), handle.settled()).await {
                    Ok(Some(refusal)) => {
                        let mut outcome = format!("{}({})", refusal.outcome, refusal.code());
                        if let Some(reason) = refusal.reason {
                            outcome.push_str(&format!(":{reason}"));
                        }
                        outcome
                    }
                    Ok(None) => "ok".to_owned(),
                    Err(_) => "unsettled".to_owned(),
                }
            }
            None => "pass".to_owned(),
        };
        let note = match ending {
            Ending::Complete => "",
            Ending::Failed => " (stream failed)",
            Ending::ClientGone => " (client closed)",
        };
        self.write(status, &outcome, note);
    }

    fn write(&self, status: StatusCode, outcome: &str, note: &str) {
        if !self.on {
            return;
        }
        eprintln!(
            "{} {} {} {} {} {}ms{}",
            crate::telemetry::format_ts(SystemTime::now()),
            self.method,
            self.path,
            status.as_u16(),
            outcome,
            self.started.elapsed().as_millis(),
            note
        );
    }
}

/// A response body that reports once how it ended.
struct Tracked<B> {
    body: Pin<Box<B>>,
    done: Option<tokio::sync::oneshot::Sender<Ending>>,
}

impl<B> Tracked<B> {
    fn finish(&mut self, ending: Ending) {
        if let Some(done) = self.done.take() {
            let _ = done.send(ending);
        }
    }
}

impl<B> Drop for Tracked<B> {
    fn drop(&mut self) {
        self.finish(Ending::ClientGone);
    }
}

impl<B> Body for Tracked<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = self.body.as_mut().poll_frame(cx);
        match polled {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                self.finish(Ending::Complete);
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(error))) => {
                self.finish(Ending::Failed);
                Poll::Ready(Some(Err(error.into())))
            }
            Poll::Ready(Some(Ok(frame))) => {
                if self.body.is_end_stream() {
                    self.finish(Ending::Complete);
                }
                Poll::Ready(Some(Ok(frame)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_go() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "connection",
            HeaderValue::from_static("keep-alive, x-secret-hop"),
        );
        headers.insert("x-secret-hop", HeaderValue::from_static("1"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.insert("proxy-authorization", HeaderValue::from_static("Basic x"));
        headers.insert("proxy-foo", HeaderValue::from_static("1"));
        headers.insert("te", HeaderValue::from_static("trailers"));
        headers.insert("upgrade", HeaderValue::from_static("h2c"));
        headers.insert("x-api-key", HeaderValue::from_static("k"));
        strip_hop_by_hop(&mut headers);
        let left: Vec<_> = headers.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["x-api-key"]);
    }

    #[test]
    fn upstream_urls() {
        assert!(Upstream::parse("127.0.0.1:80").is_err());
        assert!(Upstream::parse("http://user:pw@host").is_err());
        assert!(Upstream::parse("http://host/?q=1").is_err());
        let up = Upstream::parse("https://api.anthropic.com").unwrap();
        assert_eq!(
            up.target(Some("/v1/messages")).to_string(),
            "https://api.anthropic.com/v1/messages"
        );
        assert_eq!(up.host(), "api.anthropic.com");
    }
}
