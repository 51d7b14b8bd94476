//! The proxy's command line: flags, each with a `REFUSAL_GUARD_*` variable
//! (a flag wins over its variable), parsed with clap.
//!
//! `RESCUE`, `FALLBACKS` and `LOG` are also read under pi-refusal-guard's
//! `OMP_REFUSAL_*` and `PI_REFUSAL_*` names, below `REFUSAL_GUARD_*`, as
//! [`refusal_guard::env`] reads them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{ArgAction, CommandFactory, Parser};

use super::{LogFormat, Route, Routes, Upstream};
use refusal_guard::env::{self, EnvConfig, LogSetting};
use refusal_guard::recovery::category::CategoryPolicy;
use refusal_guard::recovery::{AllowedFallbacks, ApiKey, FallbackChains};
use refusal_guard::refusal::Provider;

const ENVIRONMENT: &str = "\
Each option also reads the REFUSAL_GUARD_ variable shown with it; a flag wins \
over its variable. --retarget also reads REFUSAL_GUARD_FALLBACKS. RESCUE, \
FALLBACKS and LOG are also read as pi-refusal-guard's OMP_REFUSAL_* and \
PI_REFUSAL_* (REFUSAL_GUARD_ wins over OMP_, OMP_ over PI_). An off value \
for --log means no log. Several chains in REFUSAL_GUARD_CHAIN are separated \
by `;`. The level of the proxy's own messages: --log-level, else RUST_LOG, \
else warn (info for refusal_guard; under --quiet, without the per-request \
settled event).";

/// The standalone proxy's options (the `refusal-guard` binary,
/// `examples/proxy.rs`).
///
/// ```
/// use clap::Parser;
/// use refusal_guard_proxy::Options;
///
/// let options = Options::try_parse_from(["proxy", "--listen", "127.0.0.1:9999", "--rescue=off"])?;
/// assert_eq!(options.listen.port(), 9999);
/// assert_eq!(options.rescue, Some(false));
/// # Ok::<(), clap::Error>(())
/// ```
#[derive(Debug, Clone, Parser)]
#[command(name = "refusal-guard", long_about = None, about = "refusal-guard: an HTTP proxy that recovers LLM refusals", after_help = ENVIRONMENT)]
#[non_exhaustive]
pub struct Options {
    /// Address to listen on
    #[arg(
        long,
        env = "REFUSAL_GUARD_LISTEN",
        value_name = "ADDR",
        default_value = "127.0.0.1:8787"
    )]
    pub listen: SocketAddr,
    /// Base URL to forward to
    #[arg(
        long,
        env = "REFUSAL_GUARD_UPSTREAM",
        value_name = "URL",
        default_value = "https://api.anthropic.com"
    )]
    pub upstream: Upstream,
    /// Route each provider's API to its own upstream (the providers' public endpoints unless set below); the rest goes to --upstream [default: off, on with any --upstream-PROVIDER]
    #[arg(long, env = "REFUSAL_GUARD_ROUTES", value_name = "on|off", action = ArgAction::Set, value_parser = switch, num_args = 0..=1, default_missing_value = "on")]
    pub routes: Option<bool>,
    /// Base URL for Anthropic's API (/v1/messages, ...); turns routing on
    #[arg(long, env = "REFUSAL_GUARD_UPSTREAM_ANTHROPIC", value_name = "URL")]
    pub upstream_anthropic: Option<Upstream>,
    /// Base URL for OpenAI's API (/v1/chat/completions, /v1/responses, ...); turns routing on
    #[arg(long, env = "REFUSAL_GUARD_UPSTREAM_OPENAI", value_name = "URL")]
    pub upstream_openai: Option<Upstream>,
    /// Base URL for Google's Gemini API (/v1beta/..., /v1/models/M:generateContent, /upload/...); turns routing on
    #[arg(long, env = "REFUSAL_GUARD_UPSTREAM_GEMINI", value_name = "URL")]
    pub upstream_gemini: Option<Upstream>,
    /// Refusal log, JSON lines; an off value for none [default: ~/.refusal-guard/refusals.jsonl]
    #[arg(long, env = "REFUSAL_GUARD_LOG", value_name = "PATH", value_parser = log_setting)]
    pub log: Option<LogSetting>,
    /// The reframed rescue continuation [default: on]
    #[arg(long, env = "REFUSAL_GUARD_RESCUE", value_name = "on|off", value_parser = switch)]
    pub rescue: Option<bool>,
    /// Rewrite Anthropic server-side `fallbacks` to these models
    #[arg(long, env = "REFUSAL_GUARD_RETARGET", value_name = "M1,M2", value_parser = models)]
    pub retarget: Option<::std::vec::Vec<String>>,
    /// Also add them to requests that carry no `fallbacks`
    #[arg(long, env = "REFUSAL_GUARD_INJECT_FALLBACKS", action = ArgAction::SetTrue, value_parser = switch)]
    pub inject_fallbacks: bool,
    /// The models --retarget may name in MODEL's `fallbacks`: its allowed fallback models (repeatable; MODEL= for none) [default: any]
    #[arg(long = "allow-fallbacks", env = "REFUSAL_GUARD_ALLOW_FALLBACKS", value_name = "MODEL=M1,M2", value_delimiter = ';', value_parser = allowed_fallbacks)]
    pub allow_fallbacks: Vec<AllowedFallbacks>,
    /// Client-side fallback chain for MODEL (repeatable)
    #[arg(long = "chain", env = "REFUSAL_GUARD_CHAIN", value_name = "MODEL=M1,M2", value_delimiter = ';', value_parser = chains)]
    pub chains: Vec<FallbackChains>,
    /// Steps per refusal category, in order: retarget, fallback, rescue, stop; `*` for the rest [default: fallback,rescue; recitation (not safety) fallback only; guardrail_intervened and MODEL_ARMOR (the operator's policy) stop]
    #[arg(long, env = "REFUSAL_GUARD_POLICY", value_name = "CATEGORY=STEP,..;..", value_parser = policy)]
    pub policy: Option<CategoryPolicy>,
    /// Ask Anthropic for fallback credit and present its tokens on the next fallback
    #[arg(long, env = "REFUSAL_GUARD_FALLBACK_CREDIT", value_name = "on|off", action = ArgAction::Set, value_parser = switch, default_value = "on")]
    pub fallback_credit: bool,
    /// Treat prose refusals (I can't help with that) as refusals
    #[arg(long, env = "REFUSAL_GUARD_DETECT_TEXT", value_name = "on|off", action = ArgAction::Set, value_parser = switch, default_value = "off")]
    pub detect_text: bool,
    /// Stream thinking before the decision; a recovered turn continues the same message
    #[arg(long, env = "REFUSAL_GUARD_LIVE_THINKING", value_name = "on|off", action = ArgAction::Set, value_parser = switch, default_value = "off")]
    pub live_thinking: bool,
    /// After a model's chain, try the model an Anthropic refusal recommends (stop_details.recommended_model)
    #[arg(long, env = "REFUSAL_GUARD_TRY_RECOMMENDED_MODEL", value_name = "on|off", action = ArgAction::Set, value_parser = switch, default_value = "off", num_args = 0..=1, default_missing_value = "on")]
    pub try_recommended_model: bool,
    /// Continue an Anthropic stream refused after text on the chain's next model, when the refusal offers the prefill claim
    #[arg(long, env = "REFUSAL_GUARD_CONTINUE_PARTIAL", value_name = "on|off", action = ArgAction::Set, value_parser = switch, default_value = "off", num_args = 0..=1, default_missing_value = "on")]
    pub continue_partial: bool,
    /// After SECS of holding a stream, send the head and SSE keep-alive comments until the guard decides [default: off]
    #[arg(long, env = "REFUSAL_GUARD_KEEPALIVE", value_name = "SECS", value_parser = seconds)]
    pub keepalive: Option<Duration>,
    /// No upstream: a built-in provider that refuses each conversation's first attempt
    #[arg(long, env = "REFUSAL_GUARD_SIMULATE", action = ArgAction::SetTrue, value_parser = switch)]
    pub simulate: bool,
    /// With --simulate: hold every request to the providers' documented rules, answering a broken one with the provider's 400 and a warning line
    #[arg(long, env = "REFUSAL_GUARD_STRICT", action = ArgAction::SetTrue, value_parser = switch)]
    pub strict: bool,
    /// No per-request line on stderr (neither the access line nor the settled event)
    #[arg(long, env = "REFUSAL_GUARD_QUIET", action = ArgAction::SetTrue, value_parser = switch)]
    pub quiet: bool,
    /// Format of the proxy's own lines on stderr (access log and messages)
    #[arg(
        long,
        env = "REFUSAL_GUARD_LOG_FORMAT",
        value_name = "FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
    /// Level of the proxy's messages, as a tracing filter (e.g. info, debug) [default: RUST_LOG, else warn]
    #[arg(long, env = "REFUSAL_GUARD_LOG_LEVEL", value_name = "FILTER", value_parser = log_filter)]
    pub log_level: Option<String>,
    /// Time for a client to send a complete request head (HTTP/1)
    #[arg(long, env = "REFUSAL_GUARD_HEADER_READ_TIMEOUT", value_name = "SECS", value_parser = seconds, default_value = "30")]
    pub header_read_timeout: Duration,
    /// Close a connection with no request in flight after SECS
    #[arg(long, env = "REFUSAL_GUARD_IDLE_TIMEOUT", value_name = "SECS", value_parser = seconds, default_value = "60")]
    pub idle_timeout: Duration,
    /// At shutdown, cut connections still open after SECS
    #[arg(long, env = "REFUSAL_GUARD_DRAIN_TIMEOUT", value_name = "SECS", value_parser = seconds, default_value = "30")]
    pub drain_timeout: Duration,
    /// Connections served at once (lowered to fit the file-descriptor limit)
    #[arg(long, env = "REFUSAL_GUARD_MAX_CONNECTIONS", value_name = "N", value_parser = clap::value_parser!(u32).range(1..), default_value = "4096")]
    pub max_connections: u32,
    /// Largest request head (request line and headers) read, in bytes; larger ones get 431
    #[arg(long, env = "REFUSAL_GUARD_MAX_HEAD_BYTES", value_name = "BYTES", value_parser = clap::value_parser!(u32).range(8192..), default_value = "8192")]
    pub max_head_bytes: u32,
    /// Time for the upstream to send its response head [default: the layer's]
    #[arg(long, env = "REFUSAL_GUARD_UPSTREAM_HEAD_TIMEOUT", value_name = "SECS", value_parser = seconds)]
    pub upstream_head_timeout: Option<Duration>,
    /// Longest silence between upstream body chunks [default: the layer's]
    #[arg(long, env = "REFUSAL_GUARD_UPSTREAM_IDLE_TIMEOUT", value_name = "SECS", value_parser = seconds)]
    pub upstream_idle_timeout: Option<Duration>,
    /// Total time for a held call and its recovery [default: the layer's, 600]
    #[arg(long, env = "REFUSAL_GUARD_RECOVERY_DEADLINE", value_name = "SECS", value_parser = seconds)]
    pub recovery_deadline: Option<Duration>,
    /// Bytes held across all streams at once [default: the layer's]
    #[arg(long, env = "REFUSAL_GUARD_MAX_TOTAL_HELD_BYTES", value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_total_held_bytes: Option<u64>,
    /// Export spans and metrics over OTLP, to the collector the OTEL_EXPORTER_OTLP_* variables name (feature `otlp`)
    #[arg(long, env = "REFUSAL_GUARD_OTLP", action = ArgAction::SetTrue, value_parser = switch)]
    pub otlp: bool,
    /// Serve /metrics, /healthz, /readyz and the refusals dashboard on ADDR [default: off]
    #[arg(long, env = "REFUSAL_GUARD_ADMIN", value_name = "ADDR")]
    pub admin: Option<SocketAddr>,
    /// Where conversation state lives: this process's memory, or a Redis server shared by replicas
    #[arg(long, env = "REFUSAL_GUARD_STATE", value_name = "memory|redis://HOST:PORT/DB", value_parser = state, default_value = "memory")]
    pub state: State,
    /// Longest wait for the shared store before deciding from memory
    #[arg(long, env = "REFUSAL_GUARD_STATE_TIMEOUT", value_name = "SECS", value_parser = seconds, default_value = "0.05")]
    pub state_timeout: Duration,
    /// The key clients must present (x-refusal-guard-key, x-api-key or Authorization: Bearer); required when the proxy holds credentials and listens beyond loopback
    #[arg(
        long,
        env = "REFUSAL_GUARD_CLIENT_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    pub client_key: Option<super::ClientKey>,
    /// Tenants file (TOML): the client keys admitted, as SHA-256 hashes, each with its tenant's own policy, chains, allowlists and recovery cap; reloaded on SIGHUP and when it changes
    #[arg(
        long,
        env = "REFUSAL_GUARD_TENANTS",
        value_name = "PATH",
        conflicts_with = "client_key"
    )]
    pub tenants: Option<PathBuf>,
    /// How often the tenants file is looked at for changes
    #[arg(long, env = "REFUSAL_GUARD_TENANTS_POLL", value_name = "SECS", value_parser = seconds, default_value = "2")]
    pub tenants_poll: Duration,
    /// Order of a refusal's fallback candidates: the chain's own, or learned from which served its category (shared in Redis with --state redis://)
    #[arg(
        long,
        env = "REFUSAL_GUARD_ROUTE_BY",
        value_name = "HOW",
        value_enum,
        default_value = "fixed"
    )]
    pub route_by: RouteBy,
    /// Learned routing: the share of refusals whose first fallback is another candidate than the best
    #[arg(long, env = "REFUSAL_GUARD_ROUTE_EXPLORE", value_name = "SHARE", value_parser = share, default_value = "0.1")]
    pub route_explore: f64,
    /// Learned routing: the time in which a count halves
    #[arg(long, env = "REFUSAL_GUARD_ROUTE_HALF_LIFE", value_name = "SECS", value_parser = seconds, default_value = "86400")]
    pub route_half_life: Duration,
    /// The operator's Anthropic key, for `anthropic:MODEL` chain entries from other APIs (never logged)
    #[arg(long, env = "ANTHROPIC_API_KEY", value_name = "KEY", hide_env_values = true, value_parser = api_key)]
    pub anthropic_api_key: Option<ApiKey>,
    /// The operator's OpenAI key, for `openai:MODEL` chain entries (Chat Completions; never logged)
    #[arg(long, env = "OPENAI_API_KEY", value_name = "KEY", hide_env_values = true, value_parser = api_key)]
    pub openai_api_key: Option<ApiKey>,
    /// The operator's Gemini key, for `gemini:MODEL` chain entries (never logged)
    #[arg(long, env = "GEMINI_API_KEY", value_name = "KEY", hide_env_values = true, value_parser = api_key)]
    pub gemini_api_key: Option<ApiKey>,
    /// Amazon Bedrock gateway mode: sign every request for this region with the AWS_* credentials (or send AWS_BEARER_TOKEN_BEDROCK); the upstream defaults to bedrock-runtime.REGION.amazonaws.com
    #[cfg(feature = "bedrock")]
    #[arg(long, env = "REFUSAL_GUARD_BEDROCK_REGION", value_name = "REGION")]
    pub bedrock_region: Option<String>,
}

/// In which order a refusal's fallback candidates are tried (`--route-by`).
///
/// ```
/// use clap::Parser;
/// use refusal_guard_proxy::{Options, RouteBy};
///
/// assert_eq!(Options::try_parse_from(["proxy"])?.route_by, RouteBy::Fixed);
/// let learned = Options::try_parse_from(["proxy", "--route-by", "learned"])?;
/// assert_eq!(learned.route_by, RouteBy::Learned);
/// # Ok::<(), clap::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
#[non_exhaustive]
pub enum RouteBy {
    /// The chain's own order, as the operator wrote it.
    #[default]
    Fixed,
    /// Best first by what served each category (`routing::LearnedRouting`).
    Learned,
}

/// Where the proxy keeps conversation state (`--state`).
///
/// ```
/// use clap::Parser;
/// use refusal_guard_proxy::{Options, State};
///
/// let options = Options::try_parse_from(["proxy", "--state", "redis://10.0.0.5:6379/0"])?;
/// assert_eq!(options.state, State::Redis("redis://10.0.0.5:6379/0".to_owned()));
/// assert_eq!(Options::try_parse_from(["proxy"])?.state, State::Memory);
/// # Ok::<(), clap::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum State {
    /// This process's [`MemoryStore`](refusal_guard::store::MemoryStore).
    Memory,
    /// A Redis server at this URL, shared by every replica that names it,
    /// through a [`FailoverStore`](refusal_guard::store::failover::FailoverStore).
    Redis(String),
}

impl State {
    /// How the startup line names it: a Redis URL without its password.
    ///
    /// ```
    /// use refusal_guard_proxy::State;
    ///
    /// let state = State::Redis("redis://:hunter2@cache:6379/1".to_owned());
    /// assert_eq!(state.shown(), "redis://cache:6379/1");
    /// assert_eq!(State::Memory.shown(), "memory");
    /// ```
    pub fn shown(&self) -> String {
        match self {
            State::Memory => "memory".to_owned(),
            State::Redis(url) => match (url.split_once("://"), url.rsplit_once('@')) {
                (Some((scheme, _)), Some((_, host))) => format!("{scheme}://{host}"),
                _ => url.clone(),
            },
        }
    }
}

impl Options {
    /// Reads the process's arguments and environment; on a bad value prints
    /// the error and exits with status 2 (`--help` prints help, status 0).
    pub fn from_args() -> Options {
        let args: Vec<String> = std::env::args().collect();
        let vars = |key: &str| std::env::var(key).ok();
        match Options::matches_from(Options::command(), &args)
            .and_then(|matches| Options::from_matches(&matches, vars))
        {
            Ok(options) => options,
            Err(error) => error.exit(),
        }
    }

    /// Parses `args` (the program's name first) with `command`:
    /// [`Options::command`], or a command built on it, as the `refusal-guard`
    /// binary adds its `report` subcommand. A bad value taken from a variable
    /// rather than a flag says so in the error.
    ///
    /// ```
    /// use clap::CommandFactory;
    /// use refusal_guard_proxy::Options;
    ///
    /// let command = Options::command().subcommand(clap::Command::new("report"));
    /// let args = ["refusal-guard".to_owned(), "report".to_owned()];
    /// let matches = Options::matches_from(command, &args)?;
    /// assert_eq!(matches.subcommand_name(), Some("report"));
    /// # Ok::<(), clap::Error>(())
    /// ```
    pub fn matches_from(
        command: clap::Command,
        args: &[String],
    ) -> Result<clap::ArgMatches, clap::Error> {
        command
            .try_get_matches_from(args)
            .map_err(|error| name_the_variable(error, args))
    }

    /// The options in `matches` (from [`Options::matches_from`]), then
    /// [`with_compat_env`](Options::with_compat_env) with `lookup`.
    ///
    /// ```
    /// use clap::CommandFactory;
    /// use refusal_guard_proxy::Options;
    ///
    /// let args = ["refusal-guard".to_owned(), "--simulate".to_owned()];
    /// let matches = Options::matches_from(Options::command(), &args)?;
    /// assert!(Options::from_matches(&matches, |_| None)?.simulate);
    /// # Ok::<(), clap::Error>(())
    /// ```
    pub fn from_matches(
        matches: &clap::ArgMatches,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Options, clap::Error> {
        use clap::FromArgMatches;
        Options::from_arg_matches(matches)?.with_compat_env(lookup)
    }

    /// Fills what flags and `REFUSAL_GUARD_*` variables left unset from the
    /// other names [`refusal_guard::env`] reads (`REFUSAL_GUARD_FALLBACKS`,
    /// `OMP_REFUSAL_*`, `PI_REFUSAL_*`), then checks the options together.
    ///
    /// ```
    /// use clap::Parser;
    /// use refusal_guard_proxy::Options;
    ///
    /// let env = |key: &str| (key == "PI_REFUSAL_RESCUE").then(|| "off".to_owned());
    /// let options = Options::try_parse_from(["proxy"])?.with_compat_env(env)?;
    /// assert_eq!(options.rescue, Some(false));
    /// # Ok::<(), clap::Error>(())
    /// ```
    pub fn with_compat_env(
        mut self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Options, clap::Error> {
        let vars = env::variable_names()
            .into_iter()
            .filter_map(|key| lookup(&key).map(|value| (key, value)));
        let found = EnvConfig::from_vars(vars).map_err(|e| invalid(e.to_string()))?;
        self.rescue = self.rescue.or(found.rescue);
        self.retarget = self.retarget.take().or(found.retarget);
        self.log = self.log.take().or(found.log);
        let retargets = !self.retarget.as_ref().map_or(true, Vec::is_empty);
        if self.inject_fallbacks && !retargets {
            return Err(invalid(
                "--inject-fallbacks needs --retarget M1,M2 (the models to inject)".to_owned(),
            ));
        }
        if !self.allowed_fallbacks().is_empty() && !retargets {
            return Err(invalid(
                "--allow-fallbacks limits what --retarget writes: it needs --retarget M1,M2"
                    .to_owned(),
            ));
        }
        self.check_routes().map_err(invalid)?;
        if self.strict && !self.simulate {
            return Err(invalid(
                "--strict holds the simulated provider to the providers' rules: it needs --simulate"
                    .to_owned(),
            ));
        }
        Ok(self)
    }

    /// The provider routes given by flag, in the order of [`Route`].
    fn provider_upstreams(&self) -> [(Route, &'static str, Option<&Upstream>); 3] {
        [
            (
                Route::Anthropic,
                "--upstream-anthropic",
                self.upstream_anthropic.as_ref(),
            ),
            (
                Route::OpenAi,
                "--upstream-openai",
                self.upstream_openai.as_ref(),
            ),
            (
                Route::Gemini,
                "--upstream-gemini",
                self.upstream_gemini.as_ref(),
            ),
        ]
    }

    /// Whether requests are routed by API: `--routes`, else any
    /// `--upstream-PROVIDER`.
    pub fn routed(&self) -> bool {
        let any_provider = self
            .provider_upstreams()
            .iter()
            .any(|(_, _, up)| up.is_some());
        self.routes.unwrap_or(any_provider)
    }

    /// Routing contradicting another option is an error, not a guess.
    fn check_routes(&self) -> Result<(), String> {
        let given = self
            .provider_upstreams()
            .into_iter()
            .find_map(|(_, flag, up)| up.map(|_| flag));
        if let (Some(false), Some(flag)) = (self.routes, given) {
            return Err(format!(
                "{flag} routes requests by API, but --routes is off"
            ));
        }
        if !self.routed() {
            return Ok(());
        }
        let switch = given.unwrap_or("--routes");
        if self.simulate {
            return Err(format!(
                "{switch} needs upstreams; --simulate has none (the simulated provider answers every API)"
            ));
        }
        #[cfg(feature = "bedrock")]
        if self.bedrock_region.is_some() {
            return Err(format!(
                "{switch} cannot be combined with --bedrock-region: Bedrock gateway mode signs every \
                 request for Bedrock; run a second proxy for the other providers"
            ));
        }
        Ok(())
    }

    /// The route table: `--upstream` alone, or with routing on the provider
    /// routes (each `--upstream-PROVIDER`, else the provider's public endpoint)
    /// and `--upstream` for the rest.
    ///
    /// ```
    /// use clap::Parser;
    /// use refusal_guard_proxy::{Options, Route};
    ///
    /// let options = Options::try_parse_from(["proxy", "--upstream-openai", "http://127.0.0.1:9001"])?;
    /// let routes = options.routes();
    /// assert_eq!(routes.base_for(Route::OpenAi).to_string(), "http://127.0.0.1:9001");
    /// assert_eq!(routes.base_for(Route::Gemini).to_string(), "https://generativelanguage.googleapis.com");
    /// assert!(!Options::try_parse_from(["proxy"])?.routes().is_routed());
    /// # Ok::<(), clap::Error>(())
    /// ```
    pub fn routes(&self) -> Routes {
        if !self.routed() {
            return Routes::single(self.upstream.clone());
        }
        self.provider_upstreams().into_iter().fold(
            Routes::public(self.upstream.clone()),
            |routes, (route, _, upstream)| match upstream {
                Some(upstream) => routes.route(route, upstream.clone()),
                None => routes,
            },
        )
    }

    /// The operator's key for `provider`, if given.
    pub(crate) fn api_key(&self, provider: Provider) -> Option<&ApiKey> {
        match provider {
            Provider::Anthropic => self.anthropic_api_key.as_ref(),
            Provider::OpenAi => self.openai_api_key.as_ref(),
            Provider::Google => self.gemini_api_key.as_ref(),
            _ => None,
        }
    }

    /// All `--chain`s as one set.
    pub fn fallback_chains(&self) -> FallbackChains {
        self.chains
            .iter()
            .cloned()
            .fold(FallbackChains::new(), FallbackChains::extend)
    }

    /// All `--allow-fallbacks` as one set.
    pub fn allowed_fallbacks(&self) -> AllowedFallbacks {
        self.allow_fallbacks
            .iter()
            .cloned()
            .fold(AllowedFallbacks::new(), AllowedFallbacks::extend)
    }

    /// Where refusal records go: `--log`, else the default path (none when
    /// `$HOME` is unset).
    pub fn log_setting(&self) -> LogSetting {
        self.log.clone().unwrap_or_else(
            || match refusal_guard::telemetry::JsonlSink::default_path() {
                Some(path) => LogSetting::Path(path),
                None => LogSetting::Off,
            },
        )
    }
}

/// clap names the flag in a bad value's error even when the value came from
/// its variable: then say so.
fn name_the_variable(mut error: clap::Error, args: &[String]) -> clap::Error {
    use clap::error::{ContextKind, ContextValue};
    let Some(ContextValue::String(shown)) = error.get(ContextKind::InvalidArg) else {
        return error;
    };
    let flag = shown
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned();
    let given = args
        .iter()
        .any(|arg| arg == &flag || arg.starts_with(&format!("{flag}=")));
    let command = Options::command();
    let variable = command
        .get_arguments()
        .find(|arg| {
            arg.get_long()
                .is_some_and(|long| flag == format!("--{long}"))
        })
        .and_then(|arg| arg.get_env())
        .map(|env| env.to_string_lossy().into_owned());
    if let (false, Some(variable)) = (given, variable) {
        let tip = format!("the value came from the environment variable {variable}");
        error.insert(
            ContextKind::Suggested,
            ContextValue::StyledStrs(vec![tip.into()]),
        );
    }
    error
}

fn invalid(message: String) -> clap::Error {
    Options::command().error(ErrorKind::ValueValidation, message)
}

fn switch(value: &str) -> Result<bool, String> {
    env::parse_switch("value", value).map_err(|e| format!("expected {}", e.expected))
}

fn api_key(value: &str) -> Result<ApiKey, String> {
    match value.trim() {
        "" => Err("expected a key".to_owned()),
        key => Ok(ApiKey::new(key)),
    }
}

fn models(value: &str) -> Result<Vec<String>, String> {
    if env::parse_switch("", value) == Ok(false) {
        return Ok(Vec::new());
    }
    env::parse_models("value", value).map_err(|e| format!("expected {}", e.expected))
}

fn chains(value: &str) -> Result<FallbackChains, String> {
    if env::parse_switch("", value) == Ok(false) {
        return Ok(FallbackChains::new());
    }
    env::parse_chains("value", value).map_err(|e| format!("expected {}", e.expected))
}

/// `MODEL=M1,M2` (`MODEL=` allows none), or an off value for no limit.
fn allowed_fallbacks(value: &str) -> Result<AllowedFallbacks, String> {
    const EXPECTED: &str = "expected MODEL=M1,M2 (MODEL= for none)";
    if env::parse_switch("", value) == Ok(false) {
        return Ok(AllowedFallbacks::new());
    }
    let (model, models) = value.split_once('=').ok_or(EXPECTED)?;
    let model = model.trim();
    if model.is_empty() {
        return Err(EXPECTED.to_owned());
    }
    let models = match models.trim() {
        "" => Vec::new(),
        list => env::parse_models("value", list).map_err(|_| EXPECTED.to_owned())?,
    };
    Ok(AllowedFallbacks::new().allow(model, models))
}

fn policy(value: &str) -> Result<CategoryPolicy, String> {
    value
        .parse()
        .map_err(|e: refusal_guard::recovery::category::PolicyError| e.to_string())
}

fn seconds(value: &str) -> Result<Duration, String> {
    match value.trim().parse::<f64>() {
        Ok(secs) if secs > 0.0 && secs.is_finite() && secs < 1e9 => {
            Ok(Duration::from_secs_f64(secs))
        }
        _ => Err("expected a positive number of seconds".to_owned()),
    }
}

fn share(value: &str) -> Result<f64, String> {
    match value.trim().parse::<f64>() {
        Ok(share) if (0.0..=1.0).contains(&share) => Ok(share),
        _ => Err("expected a share from 0 to 1".to_owned()),
    }
}

fn state(value: &str) -> Result<State, String> {
    let value = value.trim();
    if value.eq_ignore_ascii_case("memory") {
        return Ok(State::Memory);
    }
    let redis = ["redis://", "rediss://", "redis+unix://", "unix://"];
    if !redis.iter().any(|scheme| value.starts_with(scheme)) {
        return Err("expected memory or redis://HOST:PORT/DB".to_owned());
    }
    redis::Client::open(value)
        .map(|_| State::Redis(value.to_owned()))
        .map_err(|e| format!("expected memory or redis://HOST:PORT/DB: {e}"))
}

fn log_setting(value: &str) -> Result<LogSetting, String> {
    let value = value.trim();
    if env::parse_switch("", value) == Ok(false) {
        return Ok(LogSetting::Off);
    }
    if value.is_empty() {
        return Err("expected a file path, or an off value".to_owned());
    }
    let home = std::env::var("HOME").ok().filter(|home| !home.is_empty());
    Ok(LogSetting::Path(match (value.strip_prefix("~/"), home) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(value),
    }))
}

fn log_filter(value: &str) -> Result<String, String> {
    LevelFilter::parse(value).map(|_| value.to_owned())
}

/// A parsed `--log-level` or `RUST_LOG` filter.
pub(crate) enum LevelFilter {
    /// Levels by target (`warn,refusal_guard=info`), the common case:
    /// parsed without regular expressions, so a proxy run with one never
    /// builds (or maps in the code of) a regex engine.
    Targets(Box<tracing_subscriber::filter::Targets>),
    /// Anything else `EnvFilter` accepts: span and field filters.
    Env(Box<tracing_subscriber::EnvFilter>),
}

impl LevelFilter {
    pub(crate) fn parse(value: &str) -> Result<Self, String> {
        // `Targets` would take a span filter's brackets as part of a target
        // name, so only a plain list of targets and levels goes to it.
        let plain = !value.contains(['[', ']', '{', '}']);
        if let Some(Ok(targets)) = plain.then(|| value.parse()) {
            return Ok(LevelFilter::Targets(Box::new(targets)));
        }
        tracing_subscriber::EnvFilter::try_new(value)
            .map(|env| LevelFilter::Env(Box::new(env)))
            .map_err(|e| format!("expected a level or a tracing filter: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str], env: impl Fn(&str) -> Option<String>) -> Result<Options, clap::Error> {
        let args = std::iter::once("proxy").chain(args.iter().copied());
        Options::try_parse_from(args).and_then(|o| o.with_compat_env(env))
    }

    fn none(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn state_is_memory_or_a_redis_url() {
        assert_eq!(parse(&[], none).unwrap().state, State::Memory);
        let redis = parse(&["--state", "redis://127.0.0.1:6380/2"], none).unwrap();
        assert_eq!(
            redis.state,
            State::Redis("redis://127.0.0.1:6380/2".to_owned())
        );
        assert_eq!(redis.state_timeout, Duration::from_millis(50));
        for bad in ["postgres://db", "redis://host:notaport", ""] {
            let error = parse(&["--state", bad], none).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::ValueValidation, "{bad}");
            assert!(
                error.to_string().contains("redis://HOST:PORT/DB"),
                "{error}"
            );
        }
    }

    #[test]
    fn flags_parse() {
        let o = parse(
            &[
                "--listen",
                "127.0.0.1:2",
                "--retarget=x,y",
                "--chain",
                "a=b,c",
                "--chain=d=e",
            ],
            none,
        )
        .unwrap();
        assert_eq!(o.listen.port(), 2);
        assert_eq!(
            o.retarget.as_deref(),
            Some(&["x".to_owned(), "y".to_owned()][..])
        );
        let chains = o.fallback_chains();
        assert_eq!(chains.for_model("a"), ["b", "c"]);
        assert_eq!(chains.for_model("d"), ["e"]);
        assert_eq!(o.rescue, None);
        assert_eq!(o.header_read_timeout, Duration::from_secs(30));
        assert_eq!(o.max_head_bytes, 8 * 1024);
        assert_eq!(o.max_connections, 4096);
    }

    #[test]
    fn pi_refusal_guard_variables_are_read() {
        let env = |key: &str| match key {
            "OMP_REFUSAL_RESCUE" => Some("off".to_owned()),
            "PI_REFUSAL_RESCUE" => Some("on".to_owned()),
            "PI_REFUSAL_FALLBACKS" => Some("m1,m2".to_owned()),
            "OMP_REFUSAL_LOG" => Some("no".to_owned()),
            _ => None,
        };
        let o = parse(&[], env).unwrap();
        assert_eq!(o.rescue, Some(false), "OMP_ wins over PI_");
        assert_eq!(o.retarget.clone().unwrap(), ["m1", "m2"]);
        assert_eq!(o.log_setting(), LogSetting::Off);
        let o = parse(&["--rescue", "on"], env).unwrap();
        assert_eq!(o.rescue, Some(true), "a flag wins over OMP_");
        let bad = |key: &str| (key == "OMP_REFUSAL_RESCUE").then(|| "perhaps".to_owned());
        let error = parse(&[], bad).unwrap_err().to_string();
        assert!(error.contains("OMP_REFUSAL_RESCUE"), "{error}");
    }

    #[test]
    fn bad_flags_are_errors_with_status_2() {
        for args in [
            &["--bogus"][..],
            &["--rescue", "maybe"],
            &["--chain", "nomodels"],
            &["--listen"],
            &["--upstream", "ftp://x"],
            &["--inject-fallbacks"],
            &["--keepalive", "soon"],
            &["--keepalive", "0"],
            &["--detect-text", "perhaps"],
            &["--simulate=yes"],
            &["--otlp=maybe"],
            &["--strict"],
            &["--max-connections", "0"],
            &["--log-format", "xml"],
            &["--log-level", "info,[=bad"],
            &["--header-read-timeout", "-1"],
            &["--max-head-bytes", "4096"],
        ] {
            let error = parse(args, none).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{args:?}: {error}");
        }
        let help = parse(&["--help"], none).unwrap_err();
        assert_eq!(help.kind(), ErrorKind::DisplayHelp);
        assert_eq!(help.exit_code(), 0);
        assert!(
            help.to_string().contains("REFUSAL_GUARD_KEEPALIVE"),
            "{help}"
        );
    }

    #[test]
    fn keepalive_text_detection_and_timeouts() {
        let o = parse(
            &[
                "--keepalive",
                "20",
                "--detect-text=on",
                "--live-thinking",
                "on",
                "--inject-fallbacks",
                "--retarget",
                "m",
                "--drain-timeout",
                "2.5",
                "--log-format",
                "json",
                "--log-level",
                "debug",
            ],
            none,
        )
        .unwrap();
        assert!(o.live_thinking && o.detect_text && o.inject_fallbacks);
        assert_eq!(o.keepalive, Some(Duration::from_secs(20)));
        assert_eq!(o.drain_timeout, Duration::from_millis(2500));
        assert_eq!(o.log_format, LogFormat::Json);
        assert_eq!(o.log_level.as_deref(), Some("debug"));
        let o = parse(&[], none).unwrap();
        assert!(!o.detect_text && !o.live_thinking && !o.simulate && !o.quiet && !o.otlp);
        assert!(!o.strict);
        assert!(parse(&["--otlp"], none).unwrap().otlp);
        assert_eq!(o.keepalive, None);
    }

    #[test]
    fn routes_are_off_unless_asked_for() {
        let o = parse(&["--upstream", "http://127.0.0.1:9"], none).unwrap();
        assert!(!o.routed());
        assert_eq!(o.routes().to_string(), "http://127.0.0.1:9");
        let o = parse(&["--routes"], none).unwrap();
        assert!(o.routes().is_routed());
        assert_eq!(
            o.routes().base_for(Route::Default).to_string(),
            "https://api.anthropic.com"
        );
        let o = parse(
            &[
                "--upstream-anthropic=http://127.0.0.1:1",
                "--upstream-gemini",
                "http://127.0.0.1:3/google",
            ],
            none,
        )
        .unwrap();
        let routes = o.routes();
        assert_eq!(
            routes.base_for(Route::Anthropic).to_string(),
            "http://127.0.0.1:1"
        );
        assert_eq!(
            routes.base_for(Route::OpenAi).to_string(),
            "https://api.openai.com"
        );
        assert_eq!(
            routes.base_for(Route::Gemini).to_string(),
            "http://127.0.0.1:3/google"
        );
    }

    #[test]
    fn routes_contradicting_other_options_are_errors() {
        for (args, says) in [
            (
                &["--routes=off", "--upstream-openai", "http://127.0.0.1:1"][..],
                "--upstream-openai routes requests by API, but --routes is off",
            ),
            (&["--routes", "--simulate"], "--routes needs upstreams"),
            (
                &["--upstream-gemini", "http://127.0.0.1:1", "--simulate"],
                "--upstream-gemini needs upstreams",
            ),
        ] {
            let error = parse(args, none).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{args:?}");
            assert!(error.to_string().contains(says), "{args:?}: {error}");
        }
        for bad in ["127.0.0.1:1", "ftp://host", "http://", "http://h/?q=1"] {
            let error = parse(&["--upstream-openai", bad], none).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{bad}");
            assert!(error.to_string().contains("bad upstream URL"), "{error}");
        }
    }

    #[test]
    fn tenants_and_routing_flags() {
        let o = parse(&["--tenants", "/etc/t.toml", "--route-by", "learned"], none).unwrap();
        assert_eq!(
            o.tenants.as_deref(),
            Some(std::path::Path::new("/etc/t.toml"))
        );
        assert_eq!(o.route_by, RouteBy::Learned);
        assert_eq!(o.tenants_poll, Duration::from_secs(2));
        assert_eq!(o.route_explore, 0.1);
        assert_eq!(o.route_half_life, Duration::from_secs(86_400));
        for args in [
            &["--route-by", "best"][..],
            &["--route-explore", "1.5"],
            &[
                "--tenants",
                "t.toml",
                "--client-key",
                "a-client-key-of-32-characters-xx",
            ],
        ] {
            let error = parse(args, none).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{args:?}: {error}");
        }
    }

    #[test]
    fn strict_holds_the_simulator_only() {
        let o = parse(&["--simulate", "--strict"], none).unwrap();
        assert!(o.simulate && o.strict);
        let error = parse(&["--strict"], none).unwrap_err();
        assert!(error.to_string().contains("needs --simulate"), "{error}");
    }

    #[test]
    fn continue_partial_as_a_bare_flag_or_a_switch() {
        assert!(!parse(&[], none).unwrap().continue_partial);
        assert!(
            parse(&["--continue-partial"], none)
                .unwrap()
                .continue_partial
        );
        assert!(
            parse(&["--continue-partial", "on"], none)
                .unwrap()
                .continue_partial
        );
        assert!(
            !parse(&["--continue-partial=off"], none)
                .unwrap()
                .continue_partial
        );
        let error = parse(&["--continue-partial=perhaps"], none).unwrap_err();
        assert_eq!(error.exit_code(), 2);
    }

    #[test]
    fn allowed_fallbacks_per_model_and_none_for_a_model() {
        let o = parse(
            &[
                "--retarget=a,b",
                "--allow-fallbacks",
                "claude-fable-5=claude-opus-4-8, b",
                "--allow-fallbacks=claude-sonnet-5=",
            ],
            none,
        )
        .unwrap();
        let allowed = o.allowed_fallbacks();
        assert_eq!(
            allowed.for_model("claude-fable-5"),
            Some(&["claude-opus-4-8".to_owned(), "b".to_owned()][..])
        );
        assert_eq!(allowed.for_model("claude-sonnet-5"), Some(&[][..]));
        assert_eq!(allowed.for_model("claude-opus-4-7"), None);
        for bad in ["nomodel", "=a", "a=b,,c"] {
            let error = parse(&["--retarget=a", "--allow-fallbacks", bad], none).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{bad}");
        }
        let error = parse(&["--allow-fallbacks", "a=b"], none).unwrap_err();
        assert!(error.to_string().contains("needs --retarget"), "{error}");
    }

    #[test]
    fn off_values_clear_lists_and_the_log() {
        let o = parse(
            &["--retarget", "off", "--chain", "off", "--log", "no"],
            none,
        )
        .unwrap();
        assert_eq!(o.retarget, Some(Vec::new()));
        assert!(o.fallback_chains().for_model("a").is_empty());
        assert_eq!(o.log_setting(), LogSetting::Off);
    }

    #[test]
    fn level_filters_by_target_need_no_env_filter() {
        for spec in [
            "warn",
            "warn,refusal_guard=info",
            "refusal_guard::settled=off,info",
        ] {
            assert!(
                matches!(LevelFilter::parse(spec), Ok(LevelFilter::Targets(_))),
                "{spec}"
            );
        }
        // Span and field filters still work, through EnvFilter.
        for spec in [
            "[guarded_request]=debug",
            "refusal_guard[guarded_request{gen_ai.system=anthropic}]=trace",
        ] {
            assert!(
                matches!(LevelFilter::parse(spec), Ok(LevelFilter::Env(_))),
                "{spec}"
            );
        }
        assert!(LevelFilter::parse("info,[=bad").is_err());
    }
}
