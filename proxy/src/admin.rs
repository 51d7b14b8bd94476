//! The admin listener: metrics, health and the refusals
//! dashboard, on a port of its own.
//!
//! | route | answer |
//! |---|---|
//! | `GET /metrics` | every [`metrics`](refusal_guard::telemetry::metrics) series in the Prometheus text format |
//! | `GET /healthz` | `200 ok` while the process serves (liveness) |
//! | `GET /readyz` | `200` when every [`Probe`] passes (the upstream accepts a TCP connection, the conversation store answers), else `503`; one line per probe; `503` once the proxy is [`Draining`] |
//! | `GET /` | the [`Dashboard`] of the refusal log, live (it reloads every 30 s) |
//!
//! It never forwards anything upstream, and the proxy's API port never
//! serves these routes. Bind it to loopback unless something in front of it
//! guards it: the dashboard shows models and categories from the log.
//!
//! ```no_run
//! use refusal_guard_proxy::admin::{self, AdminState};
//! use refusal_guard_proxy::Upstream;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let metrics = admin::install_recorder()?;
//! let state = AdminState::new()
//!     .metrics(metrics)
//!     .log("/var/log/refusals.jsonl")
//!     .probe_upstream(&Upstream::parse("https://api.anthropic.com")?);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9787").await?;
//! admin::serve(listener, state, std::future::pending()).await?;
//! # Ok(())
//! # }
//! ```

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use metrics_exporter_prometheus::{
    BuildError, Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};
use tokio::net::TcpListener;

use crate::dashboard::Dashboard;
use crate::Upstream;

/// How much of each log the live dashboard reads: its newest 8 MiB.
const DASHBOARD_LOG_BYTES: u64 = 8 << 20;
/// How often the live dashboard reloads itself.
const DASHBOARD_REFRESH: Duration = Duration::from_secs(30);
/// How long a readiness probe may take before it counts as failed.
const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a client may take to send a request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Installs `metrics-exporter-prometheus` as the process's metrics recorder,
/// with histogram buckets for the crate's seconds and bytes, registers the
/// metric descriptions, and returns the handle that renders `/metrics`.
///
/// Fails if a recorder is already installed.
///
/// ```
/// let handle = refusal_guard_proxy::admin::install_recorder().unwrap();
/// assert!(refusal_guard_proxy::admin::install_recorder().is_err()); // one per process
/// # let _ = handle;
/// ```
pub fn install_recorder() -> Result<PrometheusHandle, BuildError> {
    let recorder = prometheus_recorder()?;
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)?;
    refusal_guard::telemetry::metrics::describe();
    Ok(handle)
}

/// The Prometheus recorder [`install_recorder`] installs, not installed:
/// for a process that records to it and to something else at once (the
/// proxy with `--otlp` sends its metrics over OTLP too). Its
/// [`handle`](metrics_exporter_prometheus::PrometheusRecorder::handle)
/// renders `/metrics`.
///
/// ```
/// let recorder = refusal_guard_proxy::admin::prometheus_recorder().unwrap();
/// assert_eq!(recorder.handle().render(), "");
/// ```
pub fn prometheus_recorder() -> Result<PrometheusRecorder, BuildError> {
    use refusal_guard::telemetry::metrics::{BYTES_BUCKETS, SECONDS_BUCKETS};
    Ok(PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &SECONDS_BUCKETS)?
        .set_buckets_for_metric(Matcher::Suffix("_bytes".into()), &BYTES_BUCKETS)?
        .build_recorder())
}

/// The outcome of one readiness check: `Err` says what is wrong.
pub type ProbeResult = Result<(), String>;

/// One readiness check for `/readyz`.
///
/// ```
/// use std::pin::Pin;
/// use std::future::Future;
/// use refusal_guard_proxy::admin::{Probe, ProbeResult};
///
/// struct AlwaysReady;
///
/// impl Probe for AlwaysReady {
///     fn name(&self) -> String { "always".into() }
///     fn check(&self) -> Pin<Box<dyn Future<Output = ProbeResult> + Send + '_>> {
///         Box::pin(async { Ok(()) })
///     }
/// }
/// # let _ = refusal_guard_proxy::admin::AdminState::new().probe(AlwaysReady);
/// ```
pub trait Probe: Send + Sync + 'static {
    /// What is checked, as `/readyz` names it (`upstream api.anthropic.com:443`).
    fn name(&self) -> String;
    /// Checks once. The admin listener bounds it with its probe timeout.
    fn check(&self) -> Pin<Box<dyn Future<Output = ProbeResult> + Send + '_>>;

    /// What `/readyz` adds after `ok` (default: nothing): for what is
    /// ready but worth a look, such as a tenants file whose last reload
    /// failed while the one before it is served.
    fn note(&self) -> Option<String> {
        None
    }
}

/// Ready when a TCP connection to a host and port opens.
#[derive(Debug, Clone)]
pub struct TcpProbe {
    label: String,
    host: String,
    port: u16,
}

impl TcpProbe {
    /// A probe of `host:port`, named `label` in `/readyz`.
    ///
    /// ```
    /// use refusal_guard_proxy::admin::{AdminState, TcpProbe};
    ///
    /// let state = AdminState::new().probe(TcpProbe::new("redis", "127.0.0.1", 6379));
    /// # let _ = state;
    /// ```
    pub fn new(label: impl Into<String>, host: impl Into<String>, port: u16) -> Self {
        TcpProbe {
            label: label.into(),
            host: host.into(),
            port,
        }
    }

    /// A probe of the upstream's host and port (443 or 80 when the URL
    /// names none).
    ///
    /// ```
    /// use refusal_guard_proxy::admin::{Probe, TcpProbe};
    /// use refusal_guard_proxy::Upstream;
    ///
    /// let probe = TcpProbe::upstream(&Upstream::parse("https://api.anthropic.com").unwrap());
    /// assert_eq!(probe.name(), "upstream api.anthropic.com:443");
    /// ```
    pub fn upstream(upstream: &Upstream) -> Self {
        let uri: http::Uri = upstream.to_string().parse().unwrap_or_default();
        let host = uri.host().unwrap_or("localhost");
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
            Some("https") => 443,
            _ => 80,
        });
        let label = format!("upstream {}", upstream.host().to_str().unwrap_or("?"));
        let label = if uri.port_u16().is_none() {
            format!("{label}:{port}")
        } else {
            label
        };
        TcpProbe::new(label, host, port)
    }

    /// [`TcpProbe::upstream`] for one route of a routed proxy, named after
    /// it.
    ///
    /// ```
    /// use refusal_guard_proxy::admin::{Probe, TcpProbe};
    /// use refusal_guard_proxy::{Route, Upstream};
    ///
    /// let probe = TcpProbe::route(Route::OpenAi, &Upstream::parse("https://api.openai.com").unwrap());
    /// assert_eq!(probe.name(), "upstream openai api.openai.com:443");
    /// ```
    pub fn route(route: super::Route, upstream: &Upstream) -> Self {
        let mut probe = TcpProbe::upstream(upstream);
        probe.label = probe
            .label
            .replacen("upstream ", &format!("upstream {route} "), 1);
        probe
    }
}

impl Probe for TcpProbe {
    fn name(&self) -> String {
        self.label.clone()
    }

    fn check(&self) -> Pin<Box<dyn Future<Output = ProbeResult> + Send + '_>> {
        Box::pin(async move {
            tokio::net::TcpStream::connect((self.host.as_str(), self.port))
                .await
                .map(drop)
                .map_err(|error| format!("cannot connect: {error}"))
        })
    }
}

/// The conversation store kept in the process's memory: always reachable.
///
/// ```
/// use refusal_guard_proxy::admin::{MemoryStoreProbe, Probe};
///
/// assert_eq!(MemoryStoreProbe.name(), "store memory");
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct MemoryStoreProbe;

impl Probe for MemoryStoreProbe {
    fn name(&self) -> String {
        "store memory".to_owned()
    }

    fn check(&self) -> Pin<Box<dyn Future<Output = ProbeResult> + Send + '_>> {
        Box::pin(async { Ok(()) })
    }
}

/// A Redis conversation store (`--state redis://...`): reachable when it
/// answers `PING` within the probe timeout. Requests go on while it is down
/// (decisions fall back to memory), but the replicas no longer share state,
/// which is what readiness reports.
///
/// Every check sets [`STORE_UP`](refusal_guard::telemetry::metrics::STORE_UP)
/// (`store="redis"`), a check cut short by its timeout to `0`; with
/// [`watch`](Self::watch) the checks also run on a timer, so the gauge stays
/// current when nothing probes readiness.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use refusal_guard_proxy::admin::{Probe, RedisStoreProbe};
/// use refusal_guard::store::redis::RedisStore;
///
/// let store = RedisStore::open("redis://127.0.0.1:6379/0").unwrap();
/// let probe = RedisStoreProbe::new(store, "redis://127.0.0.1:6379/0");
/// assert_eq!(probe.name(), "store redis://127.0.0.1:6379/0");
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RedisStoreProbe {
    store: refusal_guard::store::redis::RedisStore,
    shown: String,
}

impl RedisStoreProbe {
    /// Probes `store`, named by `shown` (an address without its password).
    pub fn new(store: refusal_guard::store::redis::RedisStore, shown: impl Into<String>) -> Self {
        RedisStoreProbe {
            store,
            shown: shown.into(),
        }
    }

    /// Checks the store every `every`, each check bounded by `timeout`,
    /// until dropped. Readiness probes alone would leave the gauge stale
    /// where nothing calls `/readyz`, and requests cannot stand in for them:
    /// a replica taken out of its load balancer for failing readiness gets
    /// none, so only a check of its own sees the outage go on (or end).
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::Duration;
    /// use refusal_guard_proxy::admin::RedisStoreProbe;
    /// use refusal_guard::store::redis::RedisStore;
    ///
    /// let store = RedisStore::open("redis://127.0.0.1:6379/0").unwrap();
    /// let probe = RedisStoreProbe::new(store, "redis://127.0.0.1:6379/0");
    /// tokio::spawn(probe.watch(Duration::from_secs(5), Duration::from_secs(2)));
    /// # }
    /// ```
    pub async fn watch(self, every: Duration, timeout: Duration) {
        let mut ticks = tokio::time::interval(every);
        // After a stall, one check is news enough: no burst to catch up.
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            // The check sets the gauge itself, a timed-out one included.
            let _ = tokio::time::timeout(timeout, self.check()).await;
        }
    }
}

/// Sets [`STORE_UP`](refusal_guard::telemetry::metrics::STORE_UP) when dropped: to
/// whether the check it belongs to got an answer, so that a check dropped
/// by its caller's timeout before an answer counts as none.
struct StoreAnswered(bool);

impl Drop for StoreAnswered {
    fn drop(&mut self) {
        refusal_guard::telemetry::metrics::store_up("redis", self.0);
    }
}

impl Probe for RedisStoreProbe {
    fn name(&self) -> String {
        format!("store {}", self.shown)
    }

    fn check(&self) -> Pin<Box<dyn Future<Output = ProbeResult> + Send + '_>> {
        Box::pin(async move {
            let mut answered = StoreAnswered(false);
            let pinged = self.store.ping().await;
            answered.0 = pinged.is_ok();
            pinged.map_err(|e| e.to_string())
        })
    }
}

/// What the admin listener serves from: the metrics handle, the refusal
/// logs and the readiness probes.
///
/// ```
/// use std::time::Duration;
/// use refusal_guard_proxy::admin::AdminState;
/// use refusal_guard_proxy::Upstream;
///
/// let state = AdminState::new()
///     .log("refusals.jsonl")
///     .probe_upstream(&Upstream::parse("http://127.0.0.1:9000").unwrap())
///     .probe_timeout(Duration::from_millis(500));
/// # let _ = state;
/// ```
pub struct AdminState {
    metrics: Option<PrometheusHandle>,
    draining: Draining,
    logs: Vec<PathBuf>,
    /// The store's probe first, then the others.
    probes: Vec<Box<dyn Probe>>,
    probe_timeout: Duration,
}

impl fmt::Debug for AdminState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminState")
            .field("metrics", &self.metrics.is_some())
            .field("draining", &self.draining.is_draining())
            .field("logs", &self.logs)
            .field(
                "probes",
                &self.probes.iter().map(|p| p.name()).collect::<Vec<_>>(),
            )
            .field("probe_timeout", &self.probe_timeout)
            .finish()
    }
}

impl Default for AdminState {
    fn default() -> Self {
        AdminState::new()
    }
}

impl AdminState {
    /// No metrics, no log, and the in-memory store as the only probe.
    ///
    /// ```
    /// let state = refusal_guard_proxy::admin::AdminState::new();
    /// # let _ = state;
    /// ```
    pub fn new() -> Self {
        AdminState {
            metrics: None,
            draining: Draining::new(),
            logs: Vec::new(),
            probes: vec![Box::new(MemoryStoreProbe)],
            probe_timeout: DEFAULT_PROBE_TIMEOUT,
        }
    }

    /// Serves `/metrics` from `handle` (see [`install_recorder`]).
    pub fn metrics(mut self, handle: PrometheusHandle) -> Self {
        self.metrics = Some(handle);
        self
    }

    /// Adds a JSONL refusal log to the dashboard.
    pub fn log(mut self, path: impl Into<PathBuf>) -> Self {
        self.logs.push(path.into());
        self
    }

    /// Adds a readiness probe.
    pub fn probe(mut self, probe: impl Probe) -> Self {
        self.probes.push(Box::new(probe));
        self
    }

    /// Probes `probe` as the conversation store, in place of the in-memory
    /// store (which is always reachable).
    ///
    /// ```
    /// use refusal_guard_proxy::admin::{AdminState, MemoryStoreProbe};
    ///
    /// let state = AdminState::new().store_probe(MemoryStoreProbe);
    /// # let _ = state;
    /// ```
    pub fn store_probe(mut self, probe: impl Probe) -> Self {
        self.probes[0] = Box::new(probe);
        self
    }

    /// Adds a probe that the upstream accepts TCP connections.
    pub fn probe_upstream(self, upstream: &Upstream) -> Self {
        self.probe(TcpProbe::upstream(upstream))
    }

    /// Adds a probe of each route's upstream: as [`probe_upstream`](Self::probe_upstream)
    /// without routing; with routing, one per route, named after it.
    ///
    /// ```
    /// use refusal_guard_proxy::admin::AdminState;
    /// use refusal_guard_proxy::{Routes, Upstream};
    ///
    /// let routes = Routes::public(Upstream::parse("http://127.0.0.1:9000").unwrap());
    /// let state = AdminState::new().probe_routes(&routes);
    /// # let _ = state;
    /// ```
    pub fn probe_routes(self, routes: &super::Routes) -> Self {
        if !routes.is_routed() {
            return self.probe_upstream(routes.default_upstream());
        }
        routes.iter().fold(self, |state, (route, upstream)| {
            state.probe(TcpProbe::route(route, upstream))
        })
    }

    /// How long each probe may take (2 s unless set).
    pub fn probe_timeout(mut self, timeout: Duration) -> Self {
        self.probe_timeout = timeout;
        self
    }

    /// Answers `/readyz` with `503` once `draining` has started, so that a
    /// load balancer stops sending while requests in flight finish.
    ///
    /// ```
    /// use refusal_guard_proxy::admin::{AdminState, Draining};
    ///
    /// let draining = Draining::new();
    /// let state = AdminState::new().not_ready_when(draining.clone());
    /// draining.start();
    /// # let _ = state;
    /// ```
    pub fn not_ready_when(mut self, draining: Draining) -> Self {
        self.draining = draining;
        self
    }
}

/// Whether the proxy is shutting down: set once the shutdown signal came,
/// while requests in flight drain. Clones share one flag.
///
/// ```
/// use refusal_guard_proxy::admin::Draining;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let draining = Draining::new();
/// let shutdown = draining.clone().after(std::future::ready(()));
/// assert!(!draining.is_draining());
/// shutdown.await;
/// assert!(draining.is_draining());
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Draining(Arc<AtomicBool>);

impl Draining {
    /// Not draining yet.
    pub fn new() -> Self {
        Draining::default()
    }

    /// Marks the drain as started.
    pub fn start(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether the drain has started.
    pub fn is_draining(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Waits for `shutdown`, then marks the drain as started: wraps the
    /// shutdown future handed to [`Proxy::serve`](crate::Proxy::serve).
    pub async fn after(self, shutdown: impl Future<Output = ()>) {
        shutdown.await;
        self.start();
    }
}

/// Starts the admin listener of the standalone proxy (`--admin ADDR`):
/// binds `addr` and serves `/metrics` from `handle`, with the
/// proxy's refusal log on the dashboard and its upstreams, one per route
/// (none for the simulated provider), among the readiness probes. Returns the bound address.
/// It serves until the process ends.
pub(crate) async fn start_for_proxy(
    addr: std::net::SocketAddr,
    handle: PrometheusHandle,
    routes: Option<&super::Routes>,
    log: Option<PathBuf>,
    store: Option<Box<dyn Probe>>,
    tenants: Option<Box<dyn Probe>>,
    draining: Draining,
) -> Result<std::net::SocketAddr, String> {
    let mut state = AdminState::new().metrics(handle).not_ready_when(draining);
    if let Some(store) = store {
        state.probes[0] = store;
    }
    if let Some(log) = log {
        state = state.log(log);
    }
    if let Some(routes) = routes {
        state = state.probe_routes(routes);
    }
    if let Some(tenants) = tenants {
        state.probes.push(tenants);
    }
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr} for --admin: {e}"))?;
    let local = listener.local_addr().unwrap_or(addr);
    tokio::spawn(serve(listener, state, std::future::pending()));
    Ok(local)
}

type AdminBody = Full<Bytes>;

/// Serves the admin routes on `listener` until `shutdown` completes, then
/// waits for the requests in flight.
///
/// ```
/// use refusal_guard_proxy::admin::{self, AdminState};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// let addr = listener.local_addr()?;
/// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// let server = tokio::spawn(admin::serve(listener, AdminState::new(), async {
///     let _ = stopped.await;
/// }));
/// let response = reqwest::get(format!("http://{addr}/healthz")).await.unwrap();
/// assert_eq!(response.text().await.unwrap(), "ok\n");
/// let _ = stop.send(());
/// server.await.unwrap()?;
/// # Ok(())
/// # }
/// ```
pub async fn serve<F>(listener: TcpListener, state: AdminState, shutdown: F) -> std::io::Result<()>
where
    F: Future<Output = ()> + Send,
{
    let state = Arc::new(state);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let state = state.clone();
                let service = hyper::service::service_fn(move |request| {
                    let state = state.clone();
                    async move { Ok::<_, Infallible>(route(&state, request).await) }
                });
                let connection = builder.serve_connection(TokioIo::new(stream), service).into_owned();
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    if let Err(error) = connection.await {
                        tracing::debug!(%error, "admin connection ended with an error");
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

/// Answers one admin request.
async fn route<B>(state: &AdminState, request: Request<B>) -> Response<AdminBody> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
    }
    match request.uri().path() {
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" => readiness(state).await,
        "/metrics" => match &state.metrics {
            Some(handle) => {
                refusal_guard::telemetry::metrics::publish_held_bytes();
                let mut response = text(StatusCode::OK, &handle.render());
                response.headers_mut().insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                response
            }
            None => text(StatusCode::NOT_FOUND, "no metrics recorder installed\n"),
        },
        "/" => dashboard(state).await,
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: try /, /metrics, /healthz or /readyz\n",
        ),
    }
}

/// Runs every probe, each bounded by the probe timeout.
async fn readiness(state: &AdminState) -> Response<AdminBody> {
    let mut ready = !state.draining.is_draining();
    let mut report = String::new();
    if !ready {
        report.push_str("draining: shutting down\n");
    }
    for probe in &state.probes {
        let result = match tokio::time::timeout(state.probe_timeout, probe.check()).await {
            Ok(result) => result,
            Err(_) => Err(format!("no answer within {:?}", state.probe_timeout)),
        };
        match result {
            Ok(()) => match probe.note() {
                Some(note) => report.push_str(&format!("{}: ok ({note})\n", probe.name())),
                None => report.push_str(&format!("{}: ok\n", probe.name())),
            },
            Err(why) => {
                ready = false;
                report.push_str(&format!("{}: FAIL {why}\n", probe.name()));
            }
        }
    }
    let (status, head) = if ready {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    };
    text(status, &format!("{head}{report}"))
}

async fn dashboard(state: &AdminState) -> Response<AdminBody> {
    let logs = state.logs.clone();
    let read =
        tokio::task::spawn_blocking(move || Dashboard::from_logs(&logs, DASHBOARD_LOG_BYTES))
            .await
            .map_err(|error| std::io::Error::other(error.to_string()))
            .and_then(|read| read);
    let dashboard = match read {
        Ok(dashboard) => dashboard
            .with_requests(refusal_guard::telemetry::metrics::request_tally())
            .refresh_every(DASHBOARD_REFRESH),
        Err(error) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("cannot read the refusal log: {error}\n"),
            )
        }
    };
    let mut response = Response::new(Full::new(Bytes::from(dashboard.to_html())));
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // The page is self-contained: it may run its inline script and styles
    // and fetch nothing at all.
    headers.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:",
        ),
    );
    response
}

fn text(status: StatusCode, body: &str) -> Response<AdminBody> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_owned())));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
