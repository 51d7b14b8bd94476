//! Running the proxy from [`Options`]: the process-wide parts (the tracing
//! subscriber, the file-descriptor limit, signals) and the server.

use std::io::Write;
use std::process::ExitCode;
use std::sync::OnceLock;
use std::time::Duration;

use tower_layer::Layer;

use std::sync::Arc;

use super::admin::{Draining, Probe, RedisStoreProbe};
use super::export;
use super::options::LevelFilter;
use super::tenants::TenantsProbe;
use super::{LogFormat, Options, Proxy, RouteBy, ServerLimits, State, Tenants, Upstream};
use refusal_guard::env::LogSetting;
use refusal_guard::recovery::{chain_prefix, fallback_api, parse_entry, providers, Endpoint};
use refusal_guard::refusal::Provider;
use refusal_guard::routing::LearnedRouting;
use refusal_guard::store::failover::FailoverStore;
use refusal_guard::store::redis::RedisStore;
use refusal_guard::telemetry::{JsonlSink, MetricsSink};
use refusal_guard::tenant::FromExtensions;
use refusal_guard::RefusalGuardLayer;
use refusal_guard_testkit::{Simulator, CONTRACT_VIOLATIONS};

/// File descriptors kept for everything but client connections (the
/// listener, the log, stdio, the runtime).
const RESERVED_FDS: u64 = 64;
/// How often the shared store is checked for `refusal_guard_store_up`: as
/// often as the shipped Deployment probes readiness.
const STORE_CHECK_EVERY: Duration = Duration::from_secs(5);
/// How long one such check may take before it counts as no answer (the
/// admin listener's readiness probes allow as long).
const STORE_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// Runs the proxy until SIGINT or SIGTERM: installs the tracing subscriber,
/// raises the file-descriptor limit, binds, serves, drains. `examples/proxy.rs`
/// is `run(Options::from_args())`; the `refusal-guard` binary runs it when
/// no subcommand is named.
///
/// ```no_run
/// use refusal_guard_proxy::{run, Options};
///
/// fn main() -> std::process::ExitCode {
///     run(Options::from_args())
/// }
/// ```
pub fn run(options: Options) -> ExitCode {
    let _ = FORMAT.set(options.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            say(
                "ERROR",
                &format!("proxy: cannot start the runtime: {error}"),
            );
            return ExitCode::FAILURE;
        }
    };
    // The export's tasks run on the runtime: it is set up inside it.
    let entered = runtime.enter();
    let set_up = export::start(&options).and_then(|export| {
        install_subscriber(&options, export.as_ref());
        let metrics = export::install_metrics(&options, export.as_ref())?;
        Ok((export, metrics))
    });
    drop(entered);
    let (export, metrics) = match set_up {
        Ok(set_up) => set_up,
        Err(message) => {
            say("ERROR", &format!("proxy: {message}"));
            return ExitCode::from(2);
        }
    };
    // The multi-thread runtime even on one CPU: a task woken by another
    // (a chunk handed from the upstream connection to the client's) runs
    // next, from the worker's LIFO slot, while its data is still in cache;
    // the current-thread runtime queues it behind every other connection.
    // The accept loop runs on the workers too, not on this thread, so that
    // no wake-up crosses threads.
    let served = runtime.block_on(async {
        let served = runtime.spawn(serve(options, metrics)).await;
        export::finish(export).await;
        served
    });
    match served {
        Ok(code) => code,
        Err(error) => {
            say("ERROR", &format!("proxy: stopped abnormally: {error}"));
            ExitCode::FAILURE
        }
    }
}

/// The format of the proxy's own lines, set once at start.
static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Writes one of the proxy's own lines on stderr: as given, or as a JSON
/// object shaped like the subscriber's when the format is JSON (so that
/// every line of a JSON log parses). These lines bypass the level filter:
/// scripts read the address from the first one.
fn say(level: &str, text: &str) {
    let line = match FORMAT.get() {
        Some(LogFormat::Json) => {
            let message = text.strip_prefix("proxy: ").unwrap_or(text);
            let object = serde_json::json!({
                "timestamp": refusal_guard::telemetry::format_ts(std::time::SystemTime::now()),
                "level": level, "target": "refusal_guard::proxy",
                "fields": {"message": message},
            });
            format!("{object}\n")
        }
        _ => format!("{text}\n"),
    };
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Messages go to stderr, as text or one JSON object per line (with the
/// fields of the spans they happened in), filtered by `--log-level`, else
/// `RUST_LOG`, else warnings (and refusal-guard's own information, less the
/// per-request settled event under `--quiet`). With `--otlp` the export's
/// layer goes beside them, each with its own filter.
fn install_subscriber(options: &Options, export: Option<&export::Export>) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    let filter = options
        .log_level
        .clone()
        .or_else(|| std::env::var("RUST_LOG").ok())
        .and_then(|spec| LevelFilter::parse(&spec).ok())
        .or_else(|| LevelFilter::parse(&default_filter(options.quiet)).ok());
    let (targets, env) = match filter {
        Some(LevelFilter::Targets(targets)) => (Some(*targets), None),
        Some(LevelFilter::Env(env)) => (None, Some(*env)),
        None => (None, None),
    };
    let installed = match export {
        None => tracing_subscriber::registry()
            .with(targets)
            .with(env)
            .with(lines(options.log_format))
            .try_init(),
        #[cfg(feature = "otlp")]
        Some(export) => {
            use tracing_subscriber::Layer as _;
            let lines = match (targets, env) {
                (Some(targets), _) => lines(options.log_format).with_filter(targets).boxed(),
                (None, Some(env)) => lines(options.log_format).with_filter(env).boxed(),
                (None, None) => lines(options.log_format),
            };
            tracing_subscriber::registry()
                .with(lines)
                .with(export.layer())
                .try_init()
        }
        #[cfg(not(feature = "otlp"))]
        Some(export) => match *export {},
    };
    if let Err(error) = installed {
        say(
            "ERROR",
            &format!("proxy: warning: no tracing subscriber installed: {error}"),
        );
    }
}

/// The layer that writes the proxy's messages on stderr, in `format`.
fn lines<S>(format: LogFormat) -> Box<dyn tracing_subscriber::Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    use tracing_subscriber::Layer as _;
    let lines = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => lines
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .boxed(),
        _ => lines.boxed(),
    }
}

/// The level filter when neither `--log-level` nor `RUST_LOG` gives one.
/// `--quiet` promises no line per request, so it also drops the event each
/// guarded request logs when it settles.
fn default_filter(quiet: bool) -> String {
    let filter = "warn,refusal_guard=info";
    if quiet {
        format!(
            "{filter},{}=off",
            refusal_guard::telemetry::metrics::SETTLED_TARGET
        )
    } else {
        filter.to_owned()
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, and returns how many
/// connections fit in what is allowed (each uses a descriptor for the client
/// and one for the upstream).
fn fit_connections(wanted: usize) -> usize {
    let limit = match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit,
        Err(error) => {
            tracing::warn!(%error, "could not raise the file-descriptor limit");
            match rlimit::getrlimit(rlimit::Resource::NOFILE) {
                Ok((soft, _)) => soft,
                Err(_) => return wanted,
            }
        }
    };
    let fit = usize::try_from(limit.saturating_sub(RESERVED_FDS) / 2)
        .unwrap_or(usize::MAX)
        .max(1);
    if fit < wanted {
        tracing::warn!(
            file_descriptors = limit,
            max_connections = fit,
            "the file-descriptor limit lowers --max-connections"
        );
    }
    fit.min(wanted)
}

/// The layer the options describe; `Err` when the log cannot be opened or
/// the `--state` URL is malformed.
pub(crate) fn layer(options: &Options) -> Result<(RefusalGuardLayer, String), String> {
    let mut layer = RefusalGuardLayer::new()
        .rescue(options.rescue.unwrap_or(true))
        .retarget_fallbacks(options.retarget.clone().unwrap_or_default())
        .inject_server_fallbacks(options.inject_fallbacks)
        .allowed_fallbacks(options.allowed_fallbacks())
        .fallback_chains(options.fallback_chains())
        .try_recommended_model(options.try_recommended_model)
        .fallback_credit(options.fallback_credit)
        .detect_text_refusals(options.detect_text)
        .live_thinking(options.live_thinking)
        .continue_partial(options.continue_partial)
        .recover_reroutes(options.recover_reroutes)
        .reroute_header(options.reroute_header);
    if let Some(policy) = options.policy.clone() {
        layer = layer.category_policy(policy);
    }
    for (provider, endpoint) in cross_providers(options)? {
        layer = layer.cross_provider(provider, endpoint);
    }
    if let Some(after) = options.keepalive {
        layer = layer.keepalive_after(after);
    }
    if let Some(deadline) = options.recovery_deadline {
        layer = layer.recovery_deadline(deadline);
    }
    if let Some(timeout) = options.upstream_head_timeout {
        layer = layer.upstream_head_timeout(timeout);
    }
    if let Some(timeout) = options.upstream_idle_timeout {
        layer = layer.upstream_idle_timeout(timeout);
    }
    if let Some(bytes) = options.max_total_held_bytes {
        layer = layer.max_total_held_bytes(usize::try_from(bytes).unwrap_or(usize::MAX));
    }
    if let State::Redis(url) = &options.state {
        let shared = RedisStore::open(url).map_err(|e| format!("--state: {e}"))?;
        layer = layer.store(FailoverStore::new(shared).timeout(options.state_timeout));
    }
    if options.tenants.is_some() {
        layer = layer.tenants(FromExtensions);
    }
    if options.route_by == RouteBy::Learned {
        layer = layer.route_by(learned_routing(options)?);
    }
    match options.log_setting() {
        // Metrics count the records the log gets (nothing without --admin).
        LogSetting::Off => Ok((layer.telemetry(MetricsSink::new()), "off".to_owned())),
        LogSetting::Path(path) => match JsonlSink::open(&path) {
            Ok(sink) => Ok((
                layer.telemetry((sink, MetricsSink::new())),
                path.display().to_string(),
            )),
            Err(error) => Err(format!(
                "cannot open the refusal log {}: {error}",
                path.display()
            )),
        },
    }
}

/// Learned routing as the options set it: counts in this process, or in
/// the `--state` Redis, shared by every replica.
fn learned_routing(options: &Options) -> Result<LearnedRouting, String> {
    let routing = LearnedRouting::new()
        .exploration(options.route_explore)
        .half_life(options.route_half_life);
    Ok(match &options.state {
        State::Memory => routing,
        State::Redis(url) => {
            let stats = refusal_guard::routing::redis::RedisRouteStats::open(url)
                .map_err(|e| format!("--state: {e}"))?;
            routing.stats(stats)
        }
    })
}

/// The operator's endpoints for cross-provider fallbacks: the upstream's
/// base URL and the operator's key for each provider the command line's
/// chains name (`openai:gpt-5`) and a key was given for. With `--tenants`,
/// for every provider a key was given for: a tenant's own chains may name
/// any, in the file now or after a reload, and only the tenants whose
/// `operator_keys` name a provider spend its key. Without tenants, keys
/// for providers no chain names are not held. A proxy that holds any and
/// listens beyond loopback must have a client key, since clients would
/// otherwise spend them.
fn cross_providers(options: &Options) -> Result<Vec<(Provider, Endpoint)>, String> {
    let chains = options.fallback_chains();
    let named = |provider: Provider| {
        chains
            .entries()
            .any(|entry| parse_entry(entry).is_some_and(|(p, _)| p == provider))
    };
    let held: Vec<Provider> = providers()
        .filter(|provider| named(*provider) || options.tenants.is_some())
        .collect();
    let mut endpoints = Vec::new();
    for provider in held {
        let prefix = chain_prefix(provider);
        let Some(key) = options.api_key(provider) else {
            if !named(provider) {
                continue;
            }
            say(
                "WARN",
                &format!(
                    "proxy: a chain names `{prefix}:` models but no {provider} key was given \
                     (--{prefix}-api-key); those fallbacks will be skipped"
                ),
            );
            continue;
        };
        // The provider's route when the proxy routes by API (its flag, else
        // the provider's public endpoint), else the one upstream.
        let route = super::Route::serving(fallback_api(provider));
        let base = match options.routes().base_for(route).base_uri() {
            Some(base) => base,
            None if !named(provider) => continue,
            None => {
                return Err(format!(
                    "the {provider} upstream URL cannot be a cross-provider endpoint"
                ))
            }
        };
        endpoints.push((provider, Endpoint::new(base, key.clone())));
    }
    if !endpoints.is_empty() && !admits_only_clients(options) && !options.listen.ip().is_loopback()
    {
        return Err(format!(
            "the proxy holds provider API keys for cross-provider chains and listens on {}: set \
             --client-key (REFUSAL_GUARD_CLIENT_KEY) so that only your clients can spend them (or \
             --tenants PATH, a key per tenant)",
            options.listen
        ));
    }
    Ok(endpoints)
}

/// Whether only clients with a key are served (`--client-key`, `--tenants`).
fn admits_only_clients(options: &Options) -> bool {
    options.client_key.is_some() || options.tenants.is_some()
}

/// The tenants file, read and watched, when `--tenants` names one.
pub(crate) fn tenants(options: &Options) -> Result<Option<Arc<Tenants>>, String> {
    let Some(path) = &options.tenants else {
        return Ok(None);
    };
    let tenants = Tenants::load(path).map_err(|e| format!("--tenants: {e}"))?;
    // With tenants, every key given is held (see `cross_providers`).
    let keyed = providers().filter(|p| options.api_key(*p).is_some());
    for unkeyed in tenants.holding_keys_for(keyed) {
        say("WARN", &format!("proxy: {unkeyed}"));
    }
    tenants.watch(options.tenants_poll);
    Ok(Some(tenants))
}

/// What the proxy is built from, read from the options before it listens.
struct Setup {
    tenants: Option<Arc<Tenants>>,
    layer: RefusalGuardLayer,
    /// Where the refusal log goes, as the start line says it.
    log_shown: String,
    signer: Option<Signer>,
    store: Option<RedisStoreProbe>,
}

/// The signing layer of gateway mode (none without the `bedrock` feature).
#[cfg(feature = "bedrock")]
type Signer = refusal_guard::aws::SigV4Layer;
#[cfg(not(feature = "bedrock"))]
type Signer = std::convert::Infallible;

impl Setup {
    /// Reads the tenants file, builds the layer, the gateway's signer and
    /// the store's probe: what is wrong is said as a bad option would be.
    fn read(options: &mut Options) -> Result<Setup, String> {
        let tenants = tenants(options)?;
        let (layer, log_shown) = layer(options)?;
        let signer = gateway(options)?;
        let store = store_probe(options)?;
        Ok(Setup {
            tenants,
            layer,
            log_shown,
            signer,
            store,
        })
    }
}

async fn serve(
    mut options: Options,
    metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
) -> ExitCode {
    let setup = match Setup::read(&mut options) {
        Ok(setup) => setup,
        Err(message) => {
            say("ERROR", &format!("proxy: {message}"));
            return ExitCode::from(2);
        }
    };
    let listener = match tokio::net::TcpListener::bind(options.listen).await {
        Ok(listener) => listener,
        Err(error) => {
            say(
                "ERROR",
                &format!("proxy: cannot listen on {}: {error}", options.listen),
            );
            return ExitCode::FAILURE;
        }
    };
    // Set at the shutdown signal: `/readyz` turns not-ready while draining.
    let draining = Draining::new();
    let admin = match (options.admin, metrics) {
        (Some(addr), Some(metrics)) => {
            let probes = (setup.store.clone(), setup.tenants.clone());
            match start_admin(&options, addr, metrics, draining.clone(), probes).await {
                Ok(local) => Some(local),
                Err(message) => {
                    say("ERROR", &format!("proxy: {message}"));
                    return ExitCode::FAILURE;
                }
            }
        }
        _ => None,
    };
    // The store's gauge on a timer of its own: readiness may be probed
    // seldom or never (no --admin, metrics over OTLP only), and a replica
    // its load balancer took out for failing readiness gets no requests
    // that would reach the store.
    if let Some(store) = setup.store.clone() {
        tokio::spawn(store.watch(STORE_CHECK_EVERY, STORE_CHECK_TIMEOUT));
    }
    let limits = server_limits(&options);
    let local = listener.local_addr().unwrap_or(options.listen);
    let tenants = setup.tenants.as_deref();
    announce(&options, local, &setup.log_shown, &limits, tenants);
    if let Some(admin) = admin {
        let line = format!(
            "refusal-guard admin on http://{admin}: /metrics, /healthz, /readyz, / (dashboard)"
        );
        say("INFO", &line);
    }
    let simulator = simulator(&options);
    let served = match listen(&options, setup, limits, &simulator, listener, draining).await {
        Some(served) => served,
        None => return ExitCode::FAILURE,
    };
    stopped(served, simulator.as_ref())
}

/// The server's bounds, from the options.
fn server_limits(options: &Options) -> ServerLimits {
    ServerLimits {
        header_read_timeout: options.header_read_timeout,
        idle_timeout: options.idle_timeout,
        drain_timeout: options.drain_timeout,
        max_connections: fit_connections(options.max_connections as usize),
        max_head_bytes: options.max_head_bytes as usize,
    }
}

/// The simulated providers of `--simulate`. `--strict` checks requests
/// against the contract; the simulator checks them unless told otherwise.
/// Kept to count, at the end, what it refused.
fn simulator(options: &Options) -> Option<Simulator> {
    options.simulate.then(|| {
        if options.strict {
            // At 0 from the start: a reader tells "none" from "not counted".
            metrics::counter!(CONTRACT_VIOLATIONS).increment(0);
            Simulator::new()
        } else {
            Simulator::new().lenient()
        }
    })
}

/// Serves until the shutdown signal: in front of the simulator, signing
/// for Bedrock (gateway mode), or in front of the routes' upstreams.
/// `None` when it could not start (said).
async fn listen(
    options: &Options,
    setup: Setup,
    limits: ServerLimits,
    simulator: &Option<Simulator>,
    listener: tokio::net::TcpListener,
    draining: Draining,
) -> Option<std::io::Result<()>> {
    let shutdown = draining.after(shutdown());
    let Setup {
        tenants,
        layer,
        signer,
        ..
    } = setup;
    if let Some(simulator) = simulator {
        let upstream = Upstream::parse("http://simulated.invalid").expect("a valid URL");
        let proxy = Proxy::with_service(upstream, layer.layer(simulator.shared()));
        return Some(
            configure(proxy, options, limits, tenants)
                .serve(listener, shutdown)
                .await,
        );
    }
    if let Some(signer) = signer {
        let upstream = options.upstream.clone();
        let admitted = (limits, tenants);
        return serve_signed(
            upstream, &layer, signer, options, admitted, listener, shutdown,
        )
        .await;
    }
    match Proxy::new(options.routes(), &layer) {
        Ok(proxy) => Some(
            configure(proxy, options, limits, tenants)
                .serve(listener, shutdown)
                .await,
        ),
        Err(error) => {
            say(
                "ERROR",
                &format!("proxy: cannot build the HTTP client: {error}"),
            );
            None
        }
    }
}

/// Status 3: a strict simulator answered requests that broke the
/// providers' rules (contract violations), however the run was logged.
const VIOLATED: u8 = 3;

/// The proxy's status once it stopped serving: a failure to serve, else
/// the contract violations a strict simulator answered (said whatever
/// the level filter: a test bed that saw a broken request fails the run
/// that made it), else success.
fn stopped(served: std::io::Result<()>, simulator: Option<&Simulator>) -> ExitCode {
    if let Err(error) = served {
        say("ERROR", &format!("proxy: {error}"));
        return ExitCode::FAILURE;
    }
    let violations = simulator.map_or(0, Simulator::violations);
    if violations > 0 {
        say(
            "ERROR",
            &format!(
                "proxy: stopped; the strict simulated provider answered {violations} \
                 request(s) that break the providers' rules (contract violations): exit status \
                 {VIOLATED}"
            ),
        );
        return ExitCode::from(VIOLATED);
    }
    say("INFO", "proxy: stopped");
    ExitCode::SUCCESS
}

/// The first line on stderr (scripts read the address from it), and a
/// warning when the address is reachable from elsewhere.
fn announce(
    options: &Options,
    local: std::net::SocketAddr,
    log_shown: &str,
    limits: &ServerLimits,
    tenants: Option<&Tenants>,
) {
    if !local.ip().is_loopback() {
        let warning = format!(
            "proxy: warning: listening on {local}, reachable from other machines; \
             anyone who can reach it can spend your API key"
        );
        say("WARN", &warning);
    }
    let target = if options.strict {
        "the built-in simulated provider (no network), strict: requests are held to the providers' rules".to_owned()
    } else if options.simulate {
        "the built-in simulated provider (no network)".to_owned()
    } else {
        options.routes().to_string()
    };
    let rescue = if options.rescue.unwrap_or(true) {
        "on"
    } else {
        "off"
    };
    let policy = options
        .policy
        .as_ref()
        .map_or_else(String::new, |policy| format!(", policy {policy}"));
    let tenants = tenants.map_or_else(String::new, |tenants| {
        let count = tenants.table().names().len();
        format!(", {count} tenants from {}", tenants.path().display())
    });
    let routing = match options.route_by {
        RouteBy::Learned => ", learned routing",
        _ => "",
    };
    let banner = format!(
        "refusal-guard proxy listening on http://{local} -> {target} \
         (rescue {rescue}, log {log_shown}, state {}, max connections {}{policy}{tenants}{routing})",
        options.state.shown(),
        limits.max_connections
    );
    say("INFO", &banner);
}

/// What signs for the proxy in Bedrock gateway mode (`--bedrock-region`):
/// the AWS credentials of the environment, required then. The upstream
/// left at its default becomes the region's Bedrock runtime. A proxy that
/// holds credentials and listens beyond loopback must have a client key.
#[cfg(feature = "bedrock")]
fn gateway(options: &mut Options) -> Result<Option<refusal_guard::aws::SigV4Layer>, String> {
    use refusal_guard::aws::{Credentials, SigV4Layer};
    let Some(region) = options.bedrock_region.clone() else {
        return Ok(None);
    };
    if !is_region_name(&region) {
        return Err(format!(
            "--bedrock-region: `{region}` is not an AWS region name \
             (lower-case letters, digits and dashes, e.g. us-east-1)"
        ));
    }
    let credentials = Credentials::from_env()
        .map_err(|e| format!("--bedrock-region: {e}"))?
        .ok_or_else(|| {
            "--bedrock-region needs credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY \
             (and AWS_SESSION_TOKEN), AWS_PROFILE, or AWS_BEARER_TOKEN_BEDROCK"
                .to_owned()
        })?;
    if !admits_only_clients(options) && !options.listen.ip().is_loopback() {
        return Err(format!(
            "the proxy holds AWS credentials and listens on {}: set --client-key \
             (REFUSAL_GUARD_CLIENT_KEY) so that only your clients can spend them (or --tenants \
             PATH, a key per tenant)",
            options.listen
        ));
    }
    let default = Upstream::parse("https://api.anthropic.com").expect("a valid URL");
    if options.upstream == default {
        let runtime = format!("https://bedrock-runtime.{region}.amazonaws.com");
        options.upstream =
            Upstream::parse(&runtime).map_err(|e| format!("--bedrock-region: {e}"))?;
    }
    Ok(Some(SigV4Layer::new(credentials, region)))
}

/// An AWS region's name as it appears in a host (`us-east-1`,
/// `ap-southeast-2`, `us-gov-west-1`): what SigV4 signs and the runtime's
/// host name carry.
#[cfg(feature = "bedrock")]
fn is_region_name(region: &str) -> bool {
    let chars = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    !region.is_empty()
        && region.chars().all(chars)
        && !region.starts_with('-')
        && !region.ends_with('-')
}

/// Serves with every request signed (Bedrock gateway mode); `None` when
/// the HTTP client cannot be built.
#[cfg(feature = "bedrock")]
async fn serve_signed(
    upstream: Upstream,
    layer: &RefusalGuardLayer,
    signer: refusal_guard::aws::SigV4Layer,
    options: &Options,
    (limits, tenants): (ServerLimits, Option<Arc<Tenants>>),
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Option<std::io::Result<()>> {
    match Proxy::signed(upstream, layer, signer) {
        Ok(proxy) => Some(
            configure(proxy, options, limits, tenants)
                .serve(listener, shutdown)
                .await,
        ),
        Err(error) => {
            say(
                "ERROR",
                &format!("proxy: cannot build the HTTP client: {error}"),
            );
            None
        }
    }
}

#[cfg(not(feature = "bedrock"))]
async fn serve_signed(
    _upstream: Upstream,
    _layer: &RefusalGuardLayer,
    signer: std::convert::Infallible,
    _options: &Options,
    _admitted: (ServerLimits, Option<Arc<Tenants>>),
    _listener: tokio::net::TcpListener,
    _shutdown: impl std::future::Future<Output = ()> + Send,
) -> Option<std::io::Result<()>> {
    match signer {}
}

/// Without the `bedrock` feature the proxy never holds credentials.
#[cfg(not(feature = "bedrock"))]
fn gateway(_options: &mut Options) -> Result<Option<std::convert::Infallible>, String> {
    Ok(None)
}

/// The readiness probe of the store `--state` names (`None`: the in-memory
/// store, always ready).
fn store_probe(options: &Options) -> Result<Option<RedisStoreProbe>, String> {
    match &options.state {
        State::Memory => Ok(None),
        State::Redis(url) => {
            let store = RedisStore::open(url).map_err(|e| format!("--state: {e}"))?;
            Ok(Some(RedisStoreProbe::new(store, options.state.shown())))
        }
    }
}

/// Starts the admin listener (`--admin`): the proxy's upstreams among its
/// readiness probes (none for `--simulate`), its refusal log on the dashboard.
async fn start_admin(
    options: &Options,
    addr: std::net::SocketAddr,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
    draining: Draining,
    (store, tenants): (Option<RedisStoreProbe>, Option<Arc<Tenants>>),
) -> Result<std::net::SocketAddr, String> {
    let routes = (!options.simulate).then(|| options.routes());
    let log = match options.log_setting() {
        LogSetting::Path(path) => Some(path),
        LogSetting::Off => None,
    };
    let local = crate::admin::start_for_proxy(
        addr,
        metrics,
        routes.as_ref(),
        log,
        store.map(|store| Box::new(store) as Box<dyn Probe>),
        tenants.map(|tenants| Box::new(TenantsProbe(tenants)) as Box<dyn Probe>),
        draining,
    )
    .await?;
    if !local.ip().is_loopback() {
        let warning = format!(
            "proxy: warning: the admin listener on {local} is reachable from other machines; \
             its dashboard shows models and categories from the refusal log"
        );
        say("WARN", &warning);
    }
    Ok(local)
}

pub(crate) fn configure<S>(
    proxy: Proxy<S>,
    options: &Options,
    limits: ServerLimits,
    tenants: Option<Arc<Tenants>>,
) -> Proxy<S> {
    let proxy = match (options.client_key.clone(), tenants) {
        (_, Some(tenants)) => proxy.tenants(tenants),
        (Some(key), None) => proxy.client_key(key),
        (None, None) => proxy,
    };
    proxy
        .access_log(!options.quiet)
        .log_format(options.log_format)
        .limits(limits)
}

/// Completes at the first SIGINT or SIGTERM; a second one exits at once.
async fn shutdown() {
    signal().await;
    say(
        "INFO",
        "proxy: shutting down; finishing requests in flight (signal again to quit now)",
    );
    tokio::spawn(async {
        signal().await;
        say("INFO", "proxy: quitting now");
        std::process::exit(130);
    });
}

pub(crate) async fn signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            },
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Options;

    fn layer_for(args: &[&str]) -> String {
        let args = ["proxy", "--log", "off"]
            .into_iter()
            .chain(args.iter().copied());
        let options = Options::try_parse_from(args).unwrap();
        format!("{:?}", super::layer(&options).unwrap().0)
    }

    #[test]
    fn try_recommended_model_reaches_the_ladder() {
        assert!(layer_for(&[]).contains("recommended: false"));
        let on = layer_for(&["--try-recommended-model"]);
        assert!(on.contains("recommended: true"), "{on}");
    }

    #[test]
    fn provider_keys_reach_the_layer_only_for_providers_a_chain_names() {
        let chain = ["--chain", "claude-opus-4-7=openai:gpt-5"];
        let keys = [
            "--openai-api-key",
            "sk-operator",
            "--gemini-api-key",
            "g-operator",
        ];
        let layer = layer_for(&[&chain[..], &keys[..]].concat());
        assert!(layer.contains("OpenAi: Endpoint"), "{layer}");
        assert!(!layer.contains("Gemini: Endpoint"), "{layer}");
        assert!(
            !layer.contains("sk-operator") && !layer.contains("g-operator"),
            "{layer}"
        );
        assert!(layer_for(&chain).contains("cross_provider: {}"));
        // With a tenants file, whose chains (now or after a reload) may name
        // any provider: every key given, spent by the tenants allowed to.
        let tenants = ["--tenants", "/nonexistent/tenants.toml"];
        let layer = layer_for(&[&tenants[..], &keys[..]].concat());
        assert!(layer.contains("OpenAi: Endpoint"), "{layer}");
        assert!(layer.contains("Google: Endpoint"), "{layer}");
        assert!(
            !layer.contains("Anthropic: Endpoint"),
            "no key given: {layer}"
        );
    }

    #[test]
    fn a_cross_provider_fallback_goes_to_its_providers_route() {
        let endpoint_of = |extra: &[&str]| {
            let args = ["proxy", "--log", "off", "--chain", "a=openai:gpt-5"];
            let all: Vec<&str> = args.iter().chain(extra).copied().collect();
            let options = Options::try_parse_from(all).unwrap();
            let endpoints = super::cross_providers(&options).unwrap();
            endpoints[0].1.base().to_string()
        };
        let key = ["--openai-api-key", "sk-operator"];
        let routed = [
            &key[..],
            &["--upstream-openai", "http://127.0.0.1:9001"][..],
        ]
        .concat();
        assert_eq!(endpoint_of(&routed), "http://127.0.0.1:9001/");
        let public = [
            &key[..],
            &["--routes", "--upstream", "http://127.0.0.1:9002"][..],
        ]
        .concat();
        assert_eq!(endpoint_of(&public), "https://api.openai.com/");
        let single = [&key[..], &["--upstream", "http://127.0.0.1:9003"][..]].concat();
        assert_eq!(endpoint_of(&single), "http://127.0.0.1:9003/");
    }

    #[test]
    fn a_proxy_holding_provider_keys_beyond_loopback_needs_a_client_key() {
        let args = |extra: &[&'static str]| {
            let base = [
                "proxy",
                "--log",
                "off",
                "--listen",
                "0.0.0.0:0",
                "--chain",
                "a=openai:gpt-5",
            ];
            let all: Vec<&str> = base.iter().chain(extra).copied().collect();
            Options::try_parse_from(all).unwrap()
        };
        let error = super::layer(&args(&["--openai-api-key", "sk-operator"]))
            .err()
            .unwrap();
        assert!(error.contains("--client-key"), "{error}");
        assert!(!error.contains("sk-operator"));
        let keyed = args(&[
            "--openai-api-key",
            "sk-operator",
            "--client-key",
            "a-client-key-of-32-characters-xx",
        ]);
        assert!(super::layer(&keyed).is_ok());
        // No key held: nothing to protect.
        assert!(super::layer(&args(&[])).is_ok());
    }

    #[test]
    fn continue_partial_reaches_the_layer() {
        assert!(layer_for(&[]).contains("continue_partial: false"));
        let on = layer_for(&["--continue-partial"]);
        assert!(on.contains("continue_partial: true"), "{on}");
    }
}
