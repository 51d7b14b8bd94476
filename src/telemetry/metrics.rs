//! Metrics through the [`metrics`] facade: what the guard counts and times,
//! under Prometheus names.
//!
//! The crate only records; the application installs the recorder it wants
//! (the proxy's admin listener installs `metrics-exporter-prometheus`). With
//! no recorder installed every call here is a cheap no-op.
//!
//! | name | type | labels |
//! |---|---|---|
//! | [`REFUSALS`] | counter | `provider`, `wire_api`, `category`, `kind`, `outcome`, `model`, `tenant` |
//! | [`RECOVERY_ATTEMPTS`] | counter | `step`, `result`, `tenant` |
//! | [`REFUSED_TOKENS`] | counter | `model`, `category`, `kind`, `tenant` |
//! | [`FALLBACK_CREDIT`] | counter | `status`, `reason`, `tenant` |
//! | [`RECOVERY_LATENCY`] | histogram (s) | `outcome`, `tenant` |
//! | [`REQUESTS`] | counter | `wire_api`, `outcome`, `tenant` |
//! | [`HOLD_DURATION`] | histogram (s) | `wire_api` |
//! | [`HELD_BYTES`] | histogram (bytes) | `wire_api` |
//! | [`ADDED_TTFB`] | histogram (s) | `wire_api` |
//! | [`STREAMS_IN_FLIGHT`] | gauge | `wire_api` |
//! | [`STORE_ERRORS`] | counter | `store`, `operation` |
//! | [`STORE_FALLBACKS`] | counter | `store` |
//! | [`STORE_UP`] | gauge | `store` |
//! | [`ROUTES_RESTORED`] | counter | `wire_api` |
//! | [`PROXY_REQUESTS`] | counter | `route` |
//! | [`PROXY_RESPONSES`] | counter | `class` |
//! | [`TOTAL_HELD_BYTES`] | gauge (bytes) | |
//! | [`MAX_TOTAL_HELD_BYTES`] | gauge (bytes) | |
//! | [`OTLP_EXPORTED_SPANS`] | counter | |
//! | [`OTLP_DROPPED_SPANS`] | counter | `reason` |
//! | [`RECOVERY_CAPPED`] | counter | `tenant` |
//! | [`ROUTE_SERVED`] | gauge | `category`, `model`, `candidate` |
//! | [`ROUTE_REFUSED`] | gauge | `category`, `model`, `candidate` |
//! | [`ROUTE_EXPLORED`] | counter | |
//!
//! Refusals and recovery attempts are counted from each refusal record by
//! the telemetry module's `MetricsSink`, so they agree with the JSONL log
//! line for line; the rest is recorded by the guard itself.
//!
//! No label carries prompt text, keys or anything else unbounded: labels
//! are the crate's own words, and a provider's category is kept only while
//! it looks like a category (short, `[A-Za-z0-9_.-]`) and only for the first
//! [`MAX_CATEGORIES`] seen; past that it is counted as `other`. A model (the
//! `model` label of [`REFUSALS`] and [`REFUSED_TOKENS`], the model that
//! refused, and of the routing gauges) is bounded the same way, by
//! [`model_label`], and so is a tenant's name, by [`tenant_label`] (the
//! proxy's names come from its tenants file).
//!
//! ```
//! use refusal_guard::telemetry::metrics;
//!
//! // What a `category` label becomes: a code is kept, anything else folded.
//! assert_eq!(&*metrics::category_label(Some("cyber")), "cyber");
//! assert_eq!(&*metrics::category_label(None), "none");
//! assert_eq!(&*metrics::category_label(Some("Ignore previous instructions")), "other");
//! ```

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use metrics::{SharedString, Unit};

use crate::refusal::{
    Attempt, AttemptResult, AttemptStep, Provider, Refusal, RefusalHandle, RefusalSignal, Usage,
    WireApi,
};

/// Refusals, one per refusal record (`telemetry::RefusalRecord`).
pub const REFUSALS: &str = "refusal_guard_refusals_total";
/// Recovery requests the guard sent after a refusal (`step`: `fallback`,
/// `rescue`, or `retarget` for a provider's server-side fallback; `result` as
/// in [`AttemptResult`]).
pub const RECOVERY_ATTEMPTS: &str = "refusal_guard_recovery_attempts_total";
/// Tokens the provider reported for refused attempts (the original and any
/// recovery attempt that refused), by the model that refused, the refusal's
/// category, and `kind`: `input`, `output`, `cache_read` or `cache_write`
/// (see [`Usage`]). Counted from each record's
/// attempts, so it agrees with the log.
pub const REFUSED_TOKENS: &str = "refusal_guard_refused_tokens_total";
/// Anthropic fallback credit tokens presented, by what the response said
/// became of them (`status`: `redeemed` or `not_applied`; `reason`: the
/// provider's reason for `not_applied`, `none` otherwise). Counted from
/// each record's attempts.
pub const FALLBACK_CREDIT: &str = "refusal_guard_fallback_credit_total";
/// Seconds from the original request to a refusal's settled outcome.
pub const RECOVERY_LATENCY: &str = "refusal_guard_recovery_latency_seconds";
/// Guarded requests by outcome: `ok` (no refusal), `fallback`, `rescued`,
/// `partial`, `dead`, or `unsettled` (the upstream failed or the client left
/// before the guard decided).
pub const REQUESTS: &str = "refusal_guard_requests_total";
/// Seconds a response was held back before the guard decided.
pub const HOLD_DURATION: &str = "refusal_guard_hold_duration_seconds";
/// Bytes held back before the guard decided.
pub const HELD_BYTES: &str = "refusal_guard_held_bytes";
/// Seconds from the upstream's response head to the client's: what the hold
/// (and any recovery) added to the time to first byte.
pub const ADDED_TTFB: &str = "refusal_guard_added_ttfb_seconds";
/// Guarded streaming requests not yet settled.
pub const STREAMS_IN_FLIGHT: &str = "refusal_guard_streams_in_flight";
/// Errors from a conversation store (`store`: its name; `operation`).
pub const STORE_ERRORS: &str = "refusal_guard_store_errors_total";
/// Times a conversation store was unreachable and memory served instead.
pub const STORE_FALLBACKS: &str = "refusal_guard_store_fallbacks_total";
/// Whether the shared conversation store answered its last health check
/// (1) or not (0). Checked on a timer and by each readiness probe, not by
/// requests: with every replica unready no request reaches the store, and
/// the fallbacks counter stands still through the outage.
pub const STORE_UP: &str = "refusal_guard_store_up";
/// Sticky routes that ended, the conversation's primary model restored
/// (`wire_api`).
pub const ROUTES_RESTORED: &str = "refusal_guard_routes_restored_total";
/// Requests the standalone proxy forwarded with routing on, by the route
/// they took (`anthropic`, `openai`, `gemini` or `default`; see
/// `proxy::Routes`). Counted before the guard, so every request counts,
/// guarded or not.
pub const PROXY_REQUESTS: &str = "refusal_guard_proxy_requests_total";
/// Responses the standalone proxy gave its clients, by status class
/// (`class`: `2xx`, `3xx`, `4xx`, `5xx`; `502` for an upstream it could not
/// reach counts as `5xx`, as does a `504` for an upstream that went quiet).
pub const PROXY_RESPONSES: &str = "refusal_guard_proxy_responses_total";
/// Bytes held now across every layer of the process: held responses and
/// buffered request bodies (see [`publish_held_bytes`]).
pub const TOTAL_HELD_BYTES: &str = "refusal_guard_total_held_bytes";
/// The most bytes those layers may hold at once
/// (`max_total_held_bytes`, added up over the layers).
pub const MAX_TOTAL_HELD_BYTES: &str = "refusal_guard_max_total_held_bytes";
/// Spans the OTLP export delivered to the collector (feature `otlp`).
pub const OTLP_EXPORTED_SPANS: &str = "refusal_guard_otlp_exported_spans_total";
/// Spans the OTLP export dropped (`reason`: `queue_full` when the bounded
/// queue had no room, `export_failed` when the collector did not take a
/// batch, `timeout` when it did not answer in time).
pub const OTLP_DROPPED_SPANS: &str = "refusal_guard_otlp_dropped_spans_total";

/// Histogram buckets for the metrics in seconds.
///
/// ```
/// assert_eq!(refusal_guard::telemetry::metrics::SECONDS_BUCKETS[0], 0.005);
/// ```
pub const SECONDS_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];
/// Histogram buckets for the metrics in bytes.
///
/// ```
/// assert_eq!(refusal_guard::telemetry::metrics::BYTES_BUCKETS[1], 1024.0);
/// ```
pub const BYTES_BUCKETS: [f64; 10] = [
    256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0, 67108864.0,
];

/// Refusals served as they came because their tenant had used its recovery
/// attempts for the hour (dead reason `capped`).
pub const RECOVERY_CAPPED: &str = "refusal_guard_recovery_capped_total";
/// Learned routing: a candidate's decayed count of fallbacks that served
/// instead of refusing the category on the requested model, as last read
/// or written by this process (with shared counts, every replica's).
pub const ROUTE_SERVED: &str = "refusal_guard_route_served";
/// Learned routing: a candidate's decayed count of fallbacks that refused too.
pub const ROUTE_REFUSED: &str = "refusal_guard_route_refused";
/// Learned routing: refusals whose first fallback was drawn for
/// exploration instead of the best candidate.
pub const ROUTE_EXPLORED: &str = "refusal_guard_route_explored_total";

/// The tracing target of the one event logged when a guarded request
/// settles (`guarded request settled`, in its `guarded_request` span): a
/// line per request, so a subscriber can turn it off on its own, as the
/// proxy's `--quiet` does.
///
/// ```
/// let filter = format!("info,{}=off", refusal_guard::telemetry::metrics::SETTLED_TARGET);
/// assert_eq!(filter, "info,refusal_guard::settled=off");
/// ```
pub const SETTLED_TARGET: &str = "refusal_guard::settled";

/// How many distinct categories get their own label value.
pub const MAX_CATEGORIES: usize = 32;
/// How many distinct models get their own label value.
pub const MAX_MODELS: usize = 32;
/// How many distinct tenants get their own label value (the proxy's
/// tenants file holds at most as many).
pub const MAX_TENANTS: usize = 256;
/// The longest model name kept as a label value.
const MAX_MODEL_LEN: usize = 96;
/// The longest category kept as a label value.
const MAX_CATEGORY_LEN: usize = 48;

/// Registers the description and unit of every metric with the installed
/// recorder. Call it once, after installing the recorder.
///
/// ```
/// refusal_guard::telemetry::metrics::describe(); // harmless without a recorder
/// ```
pub fn describe() {
    describe_counter!(REFUSALS, Unit::Count, "Refusals, one per refusal record");
    describe_counter!(
        RECOVERY_ATTEMPTS,
        Unit::Count,
        "Recovery requests sent after a refusal, by step and result"
    );
    describe_counter!(
        REFUSED_TOKENS,
        Unit::Count,
        "Tokens the provider reported for refused attempts, by model, category and kind"
    );
    describe_counter!(
        FALLBACK_CREDIT,
        Unit::Count,
        "Fallback credit tokens presented, by whether they were redeemed"
    );
    describe_histogram!(
        RECOVERY_LATENCY,
        Unit::Seconds,
        "From the original request to the refusal's settled outcome"
    );
    describe_counter!(REQUESTS, Unit::Count, "Guarded requests, by outcome");
    describe_histogram!(
        HOLD_DURATION,
        Unit::Seconds,
        "Time a response was held back before the decision"
    );
    describe_histogram!(
        HELD_BYTES,
        Unit::Bytes,
        "Bytes held back before the decision"
    );
    describe_histogram!(
        ADDED_TTFB,
        Unit::Seconds,
        "Time to first byte added by the hold and any recovery"
    );
    describe_gauge!(
        STREAMS_IN_FLIGHT,
        Unit::Count,
        "Guarded streaming requests not yet settled"
    );
    describe_counter!(STORE_ERRORS, Unit::Count, "Conversation store errors");
    describe_counter!(
        ROUTES_RESTORED,
        Unit::Count,
        "Sticky routes that ended, the primary model restored"
    );
    describe_counter!(
        PROXY_REQUESTS,
        Unit::Count,
        "Requests the proxy forwarded with routing on, by route"
    );
    describe_counter!(
        RECOVERY_CAPPED,
        Unit::Count,
        "Refusals served as they came: their tenant used its recovery attempts for the hour"
    );
    describe_gauge!(
        ROUTE_SERVED,
        Unit::Count,
        "Decayed count of fallbacks that served, per category, requested model and candidate"
    );
    describe_gauge!(
        ROUTE_REFUSED,
        Unit::Count,
        "Decayed count of fallbacks that refused, per category, requested model and candidate"
    );
    describe_counter!(
        ROUTE_EXPLORED,
        Unit::Count,
        "Refusals whose first fallback was drawn for exploration"
    );
    describe_counter!(
        STORE_FALLBACKS,
        Unit::Count,
        "Times memory stood in for an unreachable conversation store"
    );
    describe_gauge!(
        STORE_UP,
        Unit::Count,
        "Whether the shared conversation store answered its last health check (1) or not (0)"
    );
    describe_counter!(
        PROXY_RESPONSES,
        Unit::Count,
        "Responses the proxy gave its clients, by status class"
    );
    describe_gauge!(
        TOTAL_HELD_BYTES,
        Unit::Bytes,
        "Bytes held now by the guard, across its layers"
    );
    describe_gauge!(
        MAX_TOTAL_HELD_BYTES,
        Unit::Bytes,
        "The most bytes the guard may hold at once"
    );
    describe_counter!(
        OTLP_EXPORTED_SPANS,
        Unit::Count,
        "Spans the OTLP export delivered"
    );
    describe_counter!(
        OTLP_DROPPED_SPANS,
        Unit::Count,
        "Spans the OTLP export dropped, by reason"
    );
}

/// The `category` label value for a provider's category: `none` when there
/// is none, the category itself while it looks like one and is among the
/// first [`MAX_CATEGORIES`] seen by this process, `other` otherwise.
///
/// ```
/// use refusal_guard::telemetry::metrics::category_label;
///
/// assert_eq!(&*category_label(Some("SAFETY")), "SAFETY");
/// assert_eq!(&*category_label(Some("</script>")), "other");
/// ```
pub fn category_label(category: Option<&str>) -> SharedString {
    static SEEN: OnceLock<Mutex<BTreeSet<String>>> = OnceLock::new();
    let Some(category) = category else {
        return SharedString::const_str("none");
    };
    let plausible = !category.is_empty()
        && category.len() <= MAX_CATEGORY_LEN
        && category
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if !plausible || category == "other" || category == "none" {
        return SharedString::const_str("other");
    }
    let mut seen = SEEN
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if seen.contains(category) || seen.len() < MAX_CATEGORIES {
        seen.insert(category.to_owned());
        SharedString::from(category.to_owned())
    } else {
        SharedString::const_str("other")
    }
}

/// The `model` label value for a model name: `none` when there is none,
/// the name itself while it looks like one (`[A-Za-z0-9_.:/@-]`, at most 96
/// bytes) and is among the first [`MAX_MODELS`] seen by this process,
/// `other` otherwise.
///
/// ```
/// use refusal_guard::telemetry::metrics::model_label;
///
/// assert_eq!(&*model_label(Some("claude-opus-4-7")), "claude-opus-4-7");
/// assert_eq!(&*model_label(Some("no spaces, please")), "other");
/// ```
pub fn model_label(model: Option<&str>) -> SharedString {
    static SEEN: OnceLock<Mutex<BTreeSet<String>>> = OnceLock::new();
    bounded_label(&SEEN, MAX_MODELS, model)
}

/// The `tenant` label value for a tenant's name: bounded as
/// [`model_label`] is, to the first [`MAX_TENANTS`] names seen.
///
/// ```
/// use refusal_guard::telemetry::metrics::tenant_label;
///
/// assert_eq!(&*tenant_label("team-a"), "team-a");
/// assert_eq!(&*tenant_label("not a name"), "other");
/// ```
pub fn tenant_label(tenant: &str) -> SharedString {
    static SEEN: OnceLock<Mutex<BTreeSet<String>>> = OnceLock::new();
    bounded_label(&SEEN, MAX_TENANTS, Some(tenant))
}

/// `name` while it looks like a name (`[A-Za-z0-9_.:/@-]`, at most 96
/// bytes) and is among the first `most` seen in `seen`; `none`, `other`.
fn bounded_label(
    seen: &OnceLock<Mutex<BTreeSet<String>>>,
    most: usize,
    name: Option<&str>,
) -> SharedString {
    let Some(name) = name else {
        return SharedString::const_str("none");
    };
    let plausible = !name.is_empty()
        && name.len() <= MAX_MODEL_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.:/@".contains(&b));
    if !plausible || name == "other" || name == "none" {
        return SharedString::const_str("other");
    }
    let mut seen = seen
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if seen.contains(name) || seen.len() < most {
        seen.insert(name.to_owned());
        SharedString::from(name.to_owned())
    } else {
        SharedString::const_str("other")
    }
}

/// Counts a refusal served as it came because `tenant` used its fallbacks.
pub(crate) fn recovery_capped(tenant: &str) {
    counter!(RECOVERY_CAPPED, "tenant" => tenant_label(tenant)).increment(1);
}

/// Sets the routing gauges of `candidate` for refusals of `category` on
/// `model`: its decayed served and refused counts.
pub(crate) fn route_counts(
    (category, model): (&str, &str),
    candidate: &str,
    served: f64,
    refused: f64,
) {
    let labels = [
        ("category", category_label(Some(category))),
        ("model", model_label(Some(model))),
        ("candidate", model_label(Some(candidate))),
    ];
    gauge!(ROUTE_SERVED, &labels).set(served);
    gauge!(ROUTE_REFUSED, &labels).set(refused);
}

/// Counts a refusal whose first fallback was drawn for exploration.
pub(crate) fn route_explored() {
    counter!(ROUTE_EXPLORED).increment(1);
}

pub(crate) fn label_or_unknown(word: Option<&'static str>) -> SharedString {
    SharedString::const_str(word.unwrap_or("unknown"))
}

/// Records one hold: how long it took and how many bytes it kept back.
pub(crate) fn record_hold(
    wire_api: WireApi,
    took: Duration,
    frames: &std::collections::VecDeque<http_body::Frame<bytes::Bytes>>,
) {
    let bytes: usize = frames
        .iter()
        .filter_map(|f| f.data_ref())
        .map(|d| d.len())
        .sum();
    histogram!(HOLD_DURATION, "wire_api" => wire_api.as_str()).record(took.as_secs_f64());
    histogram!(HELD_BYTES, "wire_api" => wire_api.as_str()).record(bytes as f64);
}

/// Records, when dropped, the time since it was made as time to first byte
/// added by the guard: make it when the upstream's head arrives and drop it
/// when the client's head leaves.
pub(crate) struct AddedDelay {
    wire_api: WireApi,
    since: Instant,
}

impl AddedDelay {
    pub(crate) fn start(wire_api: WireApi) -> Self {
        AddedDelay {
            wire_api,
            since: Instant::now(),
        }
    }
}

impl Drop for AddedDelay {
    fn drop(&mut self) {
        histogram!(ADDED_TTFB, "wire_api" => self.wire_api.as_str())
            .record(self.since.elapsed().as_secs_f64());
    }
}

/// Counts a conversation store error (for stores other than memory).
///
/// ```
/// refusal_guard::telemetry::metrics::store_error("redis", "reserve_rescue");
/// ```
pub fn store_error(store: &'static str, operation: &'static str) {
    counter!(STORE_ERRORS, "store" => store, "operation" => operation).increment(1);
}

/// Counts a time memory served because the conversation store was
/// unreachable.
///
/// ```
/// refusal_guard::telemetry::metrics::store_fallback("redis");
/// ```
pub fn store_fallback(store: &'static str) {
    counter!(STORE_FALLBACKS, "store" => store).increment(1);
}

/// Sets whether the shared conversation store answered its last health
/// check.
///
/// ```
/// refusal_guard::telemetry::metrics::store_up("redis", false);
/// ```
pub fn store_up(store: &'static str, up: bool) {
    gauge!(STORE_UP, "store" => store).set(if up { 1.0 } else { 0.0 });
}

/// Every layer's count of bytes held and its limit, while the layer lives.
static HELD: Mutex<Vec<(std::sync::Weak<AtomicUsize>, usize)>> = Mutex::new(Vec::new());

/// Watches a layer's count of held bytes (and its limit) for
/// [`publish_held_bytes`], for as long as the count lives.
pub(crate) fn watch_held_bytes(used: &std::sync::Arc<AtomicUsize>, limit: usize) {
    let mut held = HELD.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    held.retain(|(used, _)| used.strong_count() > 0);
    held.push((std::sync::Arc::downgrade(used), limit));
}

/// The bytes the guard's layers in this process hold now, and the most they
/// may hold at once, added up over the layers alive.
///
/// ```
/// let (held, limit) = refusal_guard::telemetry::metrics::held_bytes();
/// assert!(held <= limit);
/// ```
pub fn held_bytes() -> (u64, u64) {
    let held = HELD.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    held.iter()
        .filter_map(|(used, limit)| Some((used.upgrade()?.load(Ordering::Relaxed), *limit)))
        .fold((0, 0), |(used, limit), (u, l)| {
            (used + u as u64, limit.saturating_add(l as u64))
        })
}

/// Sets the [`TOTAL_HELD_BYTES`] and [`MAX_TOTAL_HELD_BYTES`] gauges from
/// [`held_bytes`]. The guard counts held bytes in a plain atomic on every
/// chunk; the gauges are set from it when they are read (the proxy's
/// `/metrics` does it before it renders, its OTLP export every few
/// seconds), so that holding costs no metric update per chunk.
///
/// ```
/// refusal_guard::telemetry::metrics::publish_held_bytes(); // harmless without a recorder
/// ```
pub fn publish_held_bytes() {
    let (used, limit) = held_bytes();
    gauge!(TOTAL_HELD_BYTES).set(used as f64);
    gauge!(MAX_TOTAL_HELD_BYTES).set(limit as f64);
}

/// Counts a sticky route that ended: the conversation's primary model is
/// asked for again.
pub(crate) fn route_restored(wire_api: WireApi) {
    counter!(ROUTES_RESTORED, "wire_api" => wire_api.as_str()).increment(1);
}

/// Guarded requests settled in this process, by outcome, for pages that
/// show totals without a metrics recorder (the dashboard).
///
/// ```
/// let tally = refusal_guard::telemetry::metrics::request_tally();
/// assert!(tally.total() >= tally.refused());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestTally {
    /// Requests that ended without a refusal.
    pub ok: u64,
    /// Requests with a refusal, whatever became of it.
    pub refused: u64,
    /// Requests that ended before the guard decided.
    pub unsettled: u64,
}

impl RequestTally {
    /// Every settled or abandoned guarded request.
    pub fn total(&self) -> u64 {
        self.ok + self.refused + self.unsettled
    }

    /// Requests with a refusal.
    pub fn refused(&self) -> u64 {
        self.refused
    }
}

static TALLY: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

/// The guarded requests this process has finished so far.
///
/// ```
/// let before = refusal_guard::telemetry::metrics::request_tally();
/// assert!(refusal_guard::telemetry::metrics::request_tally().total() >= before.total());
/// ```
pub fn request_tally() -> RequestTally {
    RequestTally {
        ok: TALLY[0].load(Ordering::Relaxed),
        refused: TALLY[1].load(Ordering::Relaxed),
        unsettled: TALLY[2].load(Ordering::Relaxed),
    }
}

/// One guarded request, from the parsed request to its settled outcome: it
/// carries the request's span and, when the last part of the call lets go of
/// it, counts the request, closes its place among the streams in flight and
/// logs its outcome in the span.
pub(crate) struct GuardedRequest {
    span: tracing::Span,
    wire_api: WireApi,
    provider: &'static str,
    streaming: bool,
    handle: RefusalHandle,
    attempts: AtomicU64,
    tenant: SharedString,
}

impl std::fmt::Debug for GuardedRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedRequest")
            .field("wire_api", &self.wire_api)
            .finish_non_exhaustive()
    }
}

/// The span of a guarded request, its GenAI fields still empty. The guard
/// runs the request inside it and fills the fields as they become known.
pub(crate) fn request_span(wire_api: WireApi) -> tracing::Span {
    tracing::info_span!(
        "guarded_request",
        gen_ai.system = tracing::field::Empty,
        gen_ai.provider.name = tracing::field::Empty,
        gen_ai.operation.name = "chat",
        gen_ai.request.model = tracing::field::Empty,
        gen_ai.response.model = tracing::field::Empty,
        gen_ai.response.finish_reasons = tracing::field::Empty,
        refusal_guard.wire_api = wire_api.as_str(),
        refusal_guard.outcome = tracing::field::Empty,
        refusal_guard.attempts = tracing::field::Empty,
        refusal_guard.category = tracing::field::Empty,
    )
}

impl GuardedRequest {
    /// Starts watching a guarded request in the current span (the one
    /// [`request_span`] made).
    pub(crate) fn start(
        provider: Provider,
        wire_api: WireApi,
        model: Option<&str>,
        streaming: bool,
        handle: &RefusalHandle,
        tenant: &str,
    ) -> std::sync::Arc<Self> {
        let span = tracing::Span::current();
        let provider = gen_ai_system(provider, wire_api);
        span.record("gen_ai.system", provider);
        span.record("gen_ai.provider.name", provider);
        if let Some(model) = model {
            span.record("gen_ai.request.model", model);
        }
        if streaming {
            gauge!(STREAMS_IN_FLIGHT, "wire_api" => wire_api.as_str()).increment(1.0);
        }
        std::sync::Arc::new(GuardedRequest {
            span,
            wire_api,
            provider,
            streaming,
            handle: handle.clone(),
            attempts: AtomicU64::new(1),
            tenant: tenant_label(tenant),
        })
    }

    /// The span of one attempt of this request, a child of its span, open
    /// until [`AttemptSpan::end`]: `model` as the step asks for it, `to` the
    /// provider of a fallback to another provider's API.
    pub(crate) fn attempt(
        &self,
        step: AttemptStep,
        model: Option<&str>,
        to: Option<Provider>,
    ) -> AttemptSpan {
        let system = match to {
            Some(provider) => gen_ai_system(provider, provider_api(provider)),
            None => self.provider,
        };
        AttemptSpan::start(&self.span, system, step, model)
    }

    /// Notes what the guard settled on: the refusal and how many requests
    /// it sent upstream for it.
    pub(crate) fn settled(&self, refusal: &Refusal, attempts: usize) {
        self.attempts.store(attempts as u64, Ordering::Relaxed);
        let served = refusal.served_model.as_ref().or(refusal.model.as_ref());
        if let Some(model) = served {
            self.span.record("gen_ai.response.model", model.as_str());
        }
        self.span
            .record("gen_ai.response.finish_reasons", finish_reason(refusal));
        self.span.record("refusal_guard.category", refusal.code());
    }
}

impl Drop for GuardedRequest {
    fn drop(&mut self) {
        let (outcome, slot) = match self.handle.get() {
            Some(refusal) => (refusal.outcome.as_str(), 1),
            None if self.handle.is_settled() => ("ok", 0),
            None => ("unsettled", 2),
        };
        TALLY[slot].fetch_add(1, Ordering::Relaxed);
        let tenant = self.tenant.clone();
        counter!(REQUESTS, "wire_api" => self.wire_api.as_str(), "outcome" => outcome, "tenant" => tenant)
            .increment(1);
        if self.streaming {
            gauge!(STREAMS_IN_FLIGHT, "wire_api" => self.wire_api.as_str()).decrement(1.0);
        }
        let attempts = self.attempts.load(Ordering::Relaxed);
        self.span.record("refusal_guard.outcome", outcome);
        if slot != 2 {
            self.span.record("refusal_guard.attempts", attempts);
        }
        tracing::info!(
            target: SETTLED_TARGET,
            parent: &self.span,
            outcome,
            attempts,
            system = self.provider,
            "guarded request settled"
        );
    }
}

/// The span of one attempt ([`GuardedRequest::attempt`]): it ends, with
/// what the attempt came to, when the guard has judged the attempt (or when
/// dropped, unjudged: the client left).
#[derive(Debug, Default)]
pub(crate) struct AttemptSpan(Option<tracing::Span>);

impl AttemptSpan {
    /// An attempt's span under `parent` (the request's span), to the
    /// `gen_ai` system `system`.
    fn start(
        parent: &tracing::Span,
        system: &'static str,
        step: AttemptStep,
        model: Option<&str>,
    ) -> Self {
        let span = tracing::debug_span!(
            parent: parent,
            "attempt",
            otel.name = "chat",
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            gen_ai.operation.name = "chat",
            gen_ai.system = system,
            gen_ai.provider.name = system,
            gen_ai.request.model = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            http.response.status_code = tracing::field::Empty,
            error.type = tracing::field::Empty,
            refusal_guard.attempt.step = step.as_str(),
            refusal_guard.attempt.result = tracing::field::Empty,
        );
        let attempt = AttemptSpan(Some(span));
        if let Some(model) = model {
            attempt.model(model);
        }
        attempt
    }

    /// The original's span of a request forwarded as it arrives, under the
    /// current span (the request's), before its model is known.
    pub(crate) fn forwarded(provider: Provider, wire_api: WireApi) -> Self {
        let system = gen_ai_system(provider, wire_api);
        let parent = tracing::Span::current();
        AttemptSpan::start(&parent, system, AttemptStep::Original, None)
    }

    /// Names the model the attempt asked for (its span is named after it,
    /// `chat MODEL`, as the GenAI conventions name a call).
    pub(crate) fn model(&self, model: &str) {
        let Some(span) = self.0.as_ref().filter(|span| !span.is_disabled()) else {
            return;
        };
        span.record("gen_ai.request.model", model);
        span.record("otel.name", format!("chat {model}").as_str());
    }

    /// Records what `attempt` came to and ends the span; later calls do
    /// nothing.
    pub(crate) fn end(&mut self, attempt: &Attempt) {
        self.end_as(attempt.result, attempt.status, attempt.usage);
    }

    /// Ends the span of an attempt that came to `result`, with `status`.
    pub(crate) fn end_with(&mut self, result: AttemptResult, status: Option<u16>) {
        self.end_as(result, status, None);
    }

    fn end_as(&mut self, result: AttemptResult, status: Option<u16>, usage: Option<Usage>) {
        let Some(span) = self.0.take() else {
            return;
        };
        span.record("refusal_guard.attempt.result", result.as_str());
        if let Some(status) = status {
            span.record("http.response.status_code", status);
        }
        if let Some(usage) = usage {
            if let Some(tokens) = usage.input_tokens {
                span.record("gen_ai.usage.input_tokens", tokens);
            }
            if let Some(tokens) = usage.output_tokens {
                span.record("gen_ai.usage.output_tokens", tokens);
            }
        }
        // `error.type`: the status code of an error status, as the HTTP
        // conventions have it, else the result's word.
        match (result, status) {
            (AttemptResult::HttpError, Some(status)) => {
                span.record("error.type", tracing::field::display(status));
            }
            (AttemptResult::HttpError | AttemptResult::TransportError, _) => {
                span.record("error.type", result.as_str());
            }
            _ => return,
        }
        span.record("otel.status_code", "error");
    }
}

/// The wire API a fallback to `provider` speaks (for its `gen_ai` system).
fn provider_api(provider: Provider) -> WireApi {
    match provider {
        Provider::Anthropic => WireApi::AnthropicMessages,
        Provider::OpenAi => WireApi::OpenAiChatCompletions,
        Provider::Google => WireApi::GeminiGenerateContent,
    }
}

/// The OpenTelemetry `gen_ai.system` value for a provider and wire API.
fn gen_ai_system(provider: Provider, wire_api: WireApi) -> &'static str {
    match (provider, wire_api) {
        (_, WireApi::BedrockInvokeModel | WireApi::BedrockConverse | WireApi::BedrockMessages) => {
            "aws.bedrock"
        }
        (Provider::Anthropic, _) => "anthropic",
        (Provider::OpenAi, _) => "openai",
        (Provider::Google, _) => "gcp.gemini",
    }
}

/// The provider's finish reason for a refusal, as OpenTelemetry's
/// `gen_ai.response.finish_reasons` would list it.
fn finish_reason(refusal: &Refusal) -> &str {
    match (refusal.signal, refusal.provider) {
        (RefusalSignal::Text, _) => "stop",
        (RefusalSignal::BlockedPrompt, _) => "blocked_prompt",
        (RefusalSignal::BlockedOutput | RefusalSignal::PolicyError, _) => "content_filter",
        (_, Provider::Anthropic) => "refusal",
        (RefusalSignal::ModelRefusal, Provider::OpenAi) => "refusal",
        (_, Provider::OpenAi) => "content_filter",
        (_, Provider::Google) => refusal.category.as_deref().unwrap_or("SAFETY"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_past_the_bound_fold_into_other() {
        // Fill the table (other tests in this process may have added some).
        for i in 0..MAX_CATEGORIES {
            let _ = category_label(Some(&format!("bound_test_{i}")));
        }
        assert_eq!(&*category_label(Some("one_too_many_category")), "other");
        assert_eq!(&*category_label(Some("bound_test_0")), "bound_test_0");
        assert_eq!(&*category_label(Some("a b")), "other");
        assert_eq!(&*category_label(Some(&"x".repeat(49))), "other");
        assert_eq!(&*category_label(Some("")), "other");
    }
}
