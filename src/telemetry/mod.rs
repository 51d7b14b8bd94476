//! Telemetry: one [`RefusalRecord`] per refusal, handed to a [`TelemetrySink`].
//!
//! The guard builds a record when it has settled what became of a refusal and
//! passes it to the configured sink. Sinks never fail the request: they return
//! nothing and report their own trouble through `tracing::warn!`.
//!
//! Sinks that ship with the crate:
//!
//! - [`JsonlSink`]: appends one JSON object per line to a file, by default
//!   `~/.refusal-guard/refusals.jsonl` (the same file and line shape that
//!   pi-refusal-guard writes, so both tools share one log).
//! - [`MemorySink`]: keeps the most recent records in memory (tests, dashboards).
//! - [`MetricsSink`]: counts refusals through the [`metrics`] facade.
//! - [`TracingSink`]: one `tracing` event per record.
//! - `()` does nothing; any `Fn(&RefusalRecord)` closure is a sink; and
//!   [`Fanout`], `Vec<S>`, `(A, B)` and `(A, B, C)` send each record to
//!   several sinks.
//!
//! The proxy crate (`refusal-guard-proxy`) reads them back: its `Report`
//! summarises a JSONL log, its `Dashboard` renders one as an HTML page.
//!
//! ```
//! use refusal_guard::telemetry::{Fanout, MemorySink, RefusalRecord, TelemetrySink};
//!
//! let memory = MemorySink::new();
//! let sink = Fanout::new()
//!     .and(memory.clone())
//!     .and(|record: &RefusalRecord| println!("refusal: {}", record.outcome));
//! # use refusal_guard::refusal::{Outcome, Refusal, WireApi};
//! # let refusal = Refusal::new(WireApi::AnthropicMessages, Outcome::Dead).category("cyber");
//! sink.record(&RefusalRecord::new(&refusal).latency_ms(12));
//! assert_eq!(memory.len(), 1);
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};

use crate::refusal::{
    Attempt, DeadReason, Outcome, Prefill, Provider, Refusal, RefusalKind, RefusalSignal, Usage,
    WireApi,
};

mod jsonl;
mod memory;
pub mod metrics;
mod metrics_sink;
mod restored;
mod trace;

pub use jsonl::JsonlSink;
pub use memory::MemorySink;
pub use metrics_sink::{record_refusal, recovery_attempts, MetricsSink};
pub use restored::RouteRestored;
pub use trace::TracingSink;

/// One refusal as it is logged: one JSON object per line.
///
/// The first five fields (`ts`, `model`, `category`, `explanation`,
/// `outcome`) are exactly the fields pi-refusal-guard writes, in the same
/// order, with `null` for an unknown `model`, `category` or `explanation`.
/// The fields after them are this crate's additions and are left out of the
/// JSON when unknown. `usage`, the tokens the refused attempts cost, comes
/// next, then `tenant`, the tenant whose request it was; lines written
/// before they existed read them as `None`.
///
/// Reading is lenient so that a log written by pi-refusal-guard (or by an
/// older or newer version of this crate) can be reported on: only `ts` and
/// `outcome` are required; any other field may be missing (it becomes `None`,
/// empty or `0`), unknown fields are ignored, and an enum field holding a
/// value this version does not know reads as `None` instead of rejecting the
/// line.
///
/// `provider` and `wire_api` are `Option`s because a pi-refusal-guard line does
/// not say which provider refused; [`RefusalRecord::refusal`] documents the
/// defaults it assumes for such lines.
///
/// ```
/// use refusal_guard::refusal::Outcome;
/// use refusal_guard::telemetry::RefusalRecord;
///
/// let line = r#"{"ts":"2026-11-29T17:44:06.123Z","model":"claude-x","category":"cyber","explanation":null,"outcome":"dead"}"#;
/// let record: RefusalRecord = serde_json::from_str(line).unwrap();
/// assert_eq!(record.outcome, Outcome::Dead);
/// assert_eq!(record.provider, None);
/// assert!(record.attempts.is_empty());
/// assert_eq!(record.usage, None);
/// ```
///
/// The guard builds one per refusal with [`RefusalRecord::new`]; so can
/// sinks and tests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RefusalRecord {
    /// When the record was made: RFC 3339 in UTC with milliseconds and a `Z`
    /// (`2026-11-29T17:44:06.123Z`), the shape JavaScript's `toISOString`
    /// writes. See [`format_ts`].
    pub ts: String,
    /// The model that refused.
    #[serde(default)]
    pub model: Option<String>,
    /// The provider's category (`cyber`, `content_filter`, `SAFETY`, ...).
    #[serde(default)]
    pub category: Option<String>,
    /// The provider's explanation.
    #[serde(default)]
    pub explanation: Option<String>,
    /// What became of the refusal.
    pub outcome: Outcome,
    /// Why it stayed dead, for [`Outcome::Dead`].
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient"
    )]
    pub reason: Option<DeadReason>,
    /// The provider that refused; `None` for lines that do not say.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient"
    )]
    pub provider: Option<Provider>,
    /// The wire API of the request; `None` for lines that do not say.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient"
    )]
    pub wire_api: Option<WireApi>,
    /// How the refusal was expressed.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient"
    )]
    pub signal: Option<RefusalSignal>,
    /// Empty or partial.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient"
    )]
    pub kind: Option<RefusalKind>,
    /// The model whose response the client received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_model: Option<String>,
    /// The model the provider suggested retrying on
    /// ([`Refusal::recommended_model`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommended_model: Option<String>,
    /// Whether the refusal's credit token carried a prefill claim; left out
    /// when unknown.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient"
    )]
    pub prefill: Option<Prefill>,
    /// The provider's request id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// A hashed key of the conversation (never the conversation itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<String>,
    /// Every request the guard sent upstream for the call, in order.
    #[serde(default, deserialize_with = "lenient_vec")]
    pub attempts: Vec<Attempt>,
    /// Milliseconds from the original request to the settled outcome
    /// (`0` when the line did not say).
    #[serde(default)]
    pub latency_ms: u64,
    /// The tokens the attempts cost, added up over those that reported
    /// usage (see [`Attempt::usage`]); `None` when none did.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient"
    )]
    pub usage: Option<Usage>,
    /// The name of the tenant whose request refused (see
    /// [`crate::tenant`]; `default` without tenants); `None` for lines that
    /// do not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

impl RefusalRecord {
    /// The record of `refusal`, stamped with the current time, with no
    /// attempts, no conversation and a latency of `0` until the methods
    /// named after them set them.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// use refusal_guard::telemetry::RefusalRecord;
    ///
    /// let refusal = Refusal::new(WireApi::OpenAiChatCompletions, Outcome::Fallback)
    ///     .category("content_filter")
    ///     .model("gpt-x")
    ///     .request_id("req_1")
    ///     .served_model("gpt-y");
    /// let refused = Attempt::new(AttemptStep::Original, AttemptResult::Refused)
    ///     .model("gpt-x")
    ///     .status(200)
    ///     .usage(Usage::new().input_tokens(1500).output_tokens(1));
    /// let served = Attempt::new(AttemptStep::Fallback, AttemptResult::Served).model("gpt-y");
    /// let record = RefusalRecord::new(&refusal)
    ///     .attempts(vec![refused, served])
    ///     .conversation("c0ffee")
    ///     .latency_ms(840);
    /// assert_eq!(record.provider, Some(Provider::OpenAi));
    /// assert_eq!(record.refusal(), refusal);
    /// assert_eq!(record.usage.unwrap().input_tokens, Some(1500));
    /// assert!(record.ts.ends_with('Z'));
    /// ```
    pub fn new(refusal: &Refusal) -> Self {
        RefusalRecord {
            ts: format_ts(SystemTime::now()),
            model: refusal.model.clone(),
            category: refusal.category.clone(),
            explanation: refusal.explanation.clone(),
            outcome: refusal.outcome,
            reason: refusal.reason,
            provider: Some(refusal.provider),
            wire_api: Some(refusal.wire_api),
            signal: Some(refusal.signal),
            kind: Some(refusal.kind),
            served_model: refusal.served_model.clone(),
            recommended_model: refusal.recommended_model.clone(),
            prefill: Some(refusal.prefill).filter(|p| *p != Prefill::Unknown),
            request_id: refusal.request_id.clone(),
            conversation: None,
            attempts: Vec::new(),
            latency_ms: 0,
            usage: None,
            tenant: None,
        }
    }

    /// With these attempts, in order; [`usage`](RefusalRecord::usage)
    /// becomes their total.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// use refusal_guard::telemetry::RefusalRecord;
    ///
    /// let refused = Attempt::new(AttemptStep::Original, AttemptResult::Refused)
    ///     .usage(Usage::new().input_tokens(10));
    /// let again = Attempt::new(AttemptStep::Rescue, AttemptResult::Refused)
    ///     .usage(Usage::new().input_tokens(12).output_tokens(1));
    /// let refusal = Refusal::new(WireApi::AnthropicMessages, Outcome::Dead);
    /// let record = RefusalRecord::new(&refusal).attempts(vec![refused, again]);
    /// assert_eq!(record.usage, Some(Usage::new().input_tokens(22).output_tokens(1)));
    /// ```
    pub fn attempts(mut self, attempts: Vec<Attempt>) -> Self {
        self.usage = attempts.iter().filter_map(|a| a.usage).reduce(|a, b| a + b);
        self.attempts = attempts;
        self
    }

    /// Of the conversation with this key. It should already be hashed:
    /// records end up in files that outlive the conversation.
    ///
    /// ```
    /// # use refusal_guard::refusal::*;
    /// # use refusal_guard::telemetry::RefusalRecord;
    /// # let refusal = Refusal::new(WireApi::AnthropicMessages, Outcome::Dead);
    /// let record = RefusalRecord::new(&refusal).conversation("9f86d081");
    /// assert_eq!(record.conversation.as_deref(), Some("9f86d081"));
    /// ```
    pub fn conversation(mut self, key: impl Into<String>) -> Self {
        self.conversation = Some(key.into());
        self
    }

    /// Of the tenant named `name`.
    ///
    /// ```
    /// # use refusal_guard::refusal::*;
    /// # use refusal_guard::telemetry::RefusalRecord;
    /// # let refusal = Refusal::new(WireApi::AnthropicMessages, Outcome::Dead);
    /// let record = RefusalRecord::new(&refusal).tenant("team-a");
    /// assert!(String::from_utf8(record.to_json_line()).unwrap().contains(r#""tenant":"team-a""#));
    /// ```
    pub fn tenant(mut self, name: impl Into<String>) -> Self {
        self.tenant = Some(name.into());
        self
    }

    /// Settled `latency_ms` milliseconds after the original request.
    ///
    /// ```
    /// # use refusal_guard::refusal::*;
    /// # use refusal_guard::telemetry::RefusalRecord;
    /// # let refusal = Refusal::new(WireApi::AnthropicMessages, Outcome::Dead);
    /// assert_eq!(RefusalRecord::new(&refusal).latency_ms(840).latency_ms, 840);
    /// ```
    pub fn latency_ms(mut self, latency_ms: u64) -> Self {
        self.latency_ms = latency_ms;
        self
    }

    /// Replaces the timestamp with `time` (formatted by [`format_ts`]).
    ///
    /// ```
    /// # use refusal_guard::refusal::*;
    /// # use refusal_guard::telemetry::RefusalRecord;
    /// use std::time::{Duration, UNIX_EPOCH};
    /// # let refusal = Refusal::new(WireApi::GeminiGenerateContent, Outcome::Dead);
    /// let record = RefusalRecord::new(&refusal)
    ///     .at(UNIX_EPOCH + Duration::from_secs(86_400));
    /// assert_eq!(record.ts, "1970-01-02T00:00:00.000Z");
    /// ```
    pub fn at(mut self, time: SystemTime) -> Self {
        self.ts = format_ts(time);
        self
    }

    /// The typed refusal this record describes.
    ///
    /// For a line that lacks this crate's fields (one written by
    /// pi-refusal-guard, which only logged Anthropic classifier refusals in
    /// detail), the missing parts are assumed: provider
    /// [`Provider::Anthropic`], wire API [`WireApi::AnthropicMessages`],
    /// signal [`RefusalSignal::StopReason`], and kind
    /// [`RefusalKind::Partial`] when the outcome is `partial`,
    /// [`RefusalKind::Empty`] otherwise. Check [`RefusalRecord::provider`]
    /// first when that assumption matters.
    pub fn refusal(&self) -> Refusal {
        let kind = self.kind.unwrap_or(match self.outcome {
            Outcome::Partial => RefusalKind::Partial,
            _ => RefusalKind::Empty,
        });
        Refusal {
            provider: self.provider.unwrap_or(Provider::Anthropic),
            wire_api: self.wire_api.unwrap_or(WireApi::AnthropicMessages),
            signal: self.signal.unwrap_or(RefusalSignal::StopReason),
            category: self.category.clone(),
            explanation: self.explanation.clone(),
            model: self.model.clone(),
            request_id: self.request_id.clone(),
            kind,
            outcome: self.outcome,
            reason: self.reason,
            served_model: self.served_model.clone(),
            recommended_model: self.recommended_model.clone(),
            prefill: self.prefill.unwrap_or_default(),
        }
    }

    /// The record as one JSON line, ending in `\n`.
    ///
    /// ```
    /// # use refusal_guard::refusal::*;
    /// # use refusal_guard::telemetry::RefusalRecord;
    /// # let refusal = Refusal::new(WireApi::AnthropicMessages, Outcome::Rescued);
    /// let line = RefusalRecord::new(&refusal).latency_ms(5).to_json_line();
    /// assert!(line.starts_with(br#"{"ts":""#));
    /// assert!(line.ends_with(b"}\n"));
    /// assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
    /// ```
    pub fn to_json_line(&self) -> Vec<u8> {
        // Serialising plain data with string keys cannot fail; the fallback
        // only keeps this function total.
        let mut line = serde_json::to_vec(self).unwrap_or_else(|_| b"{}".to_vec());
        line.push(b'\n');
        line
    }
}

/// Reads an optional field, turning a value this version cannot parse into
/// `None` rather than rejecting the whole record.
fn lenient<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    let value = Option::<serde_json::Value>::deserialize(deserializer)?;
    Ok(value.and_then(|value| serde_json::from_value(value).ok()))
}

/// Reads the attempts list, keeping the attempts this version can parse.
fn lenient_vec<'de, D>(deserializer: D) -> Result<Vec<Attempt>, D::Error>
where
    D: Deserializer<'de>,
{
    let value = Option::<serde_json::Value>::deserialize(deserializer)?;
    Ok(match value {
        Some(serde_json::Value::Array(items)) => items
            .into_iter()
            .filter_map(|item| serde_json::from_value(item).ok())
            .collect(),
        _ => Vec::new(),
    })
}

/// Formats `time` as RFC 3339 in UTC with milliseconds and a `Z`, the shape
/// of JavaScript's `Date.prototype.toISOString` (`2026-11-29T17:44:06.123Z`).
///
/// Times before 1970 are handled; sub-millisecond digits are truncated.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use refusal_guard::telemetry::format_ts;
///
/// let t = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
/// assert_eq!(format_ts(t), "2023-11-14T22:13:20.123Z");
/// ```
pub fn format_ts(time: SystemTime) -> String {
    let millis: i128 = match time.duration_since(UNIX_EPOCH) {
        Ok(after) => after.as_millis() as i128,
        // Round towards negative infinity so the clock fields stay in range.
        Err(before) => -(ceil_millis(before.duration()) as i128),
    };
    let days = millis.div_euclid(86_400_000) as i64;
    let of_day = millis.rem_euclid(86_400_000) as u64;
    let (year, month, day) = civil_from_days(days);
    let (hour, minute) = (of_day / 3_600_000, of_day / 60_000 % 60);
    let (second, milli) = (of_day / 1000 % 60, of_day % 1000);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{milli:03}Z")
}

/// Milliseconds since the epoch of a `2026-11-29T17:44:06.123Z` time (the
/// shape [`format_ts`] writes; fractions of other lengths and no fraction
/// are read too).
pub fn parse_ts(ts: &str) -> Option<i64> {
    let ts = ts.strip_suffix('Z')?;
    let (date, time) = ts.split_once('T')?;
    let mut date = date.splitn(3, '-');
    let year: i64 = date.next()?.parse().ok()?;
    let month: u32 = date.next()?.parse().ok()?;
    let day: u32 = date.next()?.parse().ok()?;
    let (clock, fraction) = time.split_once('.').unwrap_or((time, "0"));
    let mut clock = clock.splitn(3, ':');
    let hour: i64 = clock.next()?.parse().ok()?;
    let minute: i64 = clock.next()?.parse().ok()?;
    let second: i64 = clock.next()?.parse().ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let millis: i64 = format!("{fraction:0<3}").get(..3)?.parse().ok()?;
    let days = days_from_civil(year, month, day);
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis)
}

/// Days from 1970-01-01 to a proleptic Gregorian date (the inverse of the
/// date part of [`format_ts`]).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let march_month = (i64::from(month) + 9) % 12;
    let day_of_year = (153 * march_month + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

fn ceil_millis(d: Duration) -> u128 {
    let nanos = d.as_nanos();
    nanos.div_ceil(1_000_000)
}

/// The proleptic Gregorian date `days` after 1970-01-01.
///
/// Works in 400-year eras (146 097 days each) counted from 0000-03-01, so
/// that the leap day is the last day of each shifted year.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    const ERA_DAYS: i64 = 146_097;
    // Days from 0000-03-01 to 1970-01-01.
    let shifted = days + 719_468;
    let era = shifted.div_euclid(ERA_DAYS);
    let day_of_era = shifted.rem_euclid(ERA_DAYS); // 0..=146_096
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    // Months counted from March = 0; 153 days per five months.
    let march_month = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * march_month + 2) / 5 + 1) as u32;
    let month = if march_month < 10 {
        march_month + 3
    } else {
        march_month - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Receives one [`RefusalRecord`] per refusal.
///
/// Implemented by `()` (ignores records), by any
/// `Fn(&RefusalRecord) + Send + Sync + 'static` closure, by `Arc<T>`,
/// `Box<dyn TelemetrySink>`, `Vec<S>`, `(A, B)`, `(A, B, C)` and [`Fanout`]
/// (each record goes to every sink, in order), and by the sinks in this module.
///
/// `record` runs on the request's task, so it should be quick. It returns
/// nothing: a sink that fails must log its failure (`tracing::warn!`) and
/// carry on, never fail or delay the request.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// use refusal_guard::telemetry::{RefusalRecord, TelemetrySink};
///
/// struct Counter(AtomicUsize);
///
/// impl TelemetrySink for Counter {
///     fn record(&self, _record: &RefusalRecord) {
///         self.0.fetch_add(1, Ordering::Relaxed);
///     }
/// }
///
/// let counter = Arc::new(Counter(AtomicUsize::new(0)));
/// let sink: Box<dyn TelemetrySink> = Box::new(counter.clone());
/// # let record: RefusalRecord = serde_json::from_str(r#"{"ts":"2026-01-01T00:00:00.000Z","outcome":"dead"}"#).unwrap();
/// sink.record(&record);
/// assert_eq!(counter.0.load(Ordering::Relaxed), 1);
/// ```
pub trait TelemetrySink: Send + Sync + 'static {
    /// Handles one record. Must not panic on I/O or encoding failures.
    fn record(&self, record: &RefusalRecord);

    /// Handles a sticky route that ended: the conversation's next request
    /// went to its primary model again. Does nothing unless implemented.
    fn route_restored(&self, _event: &RouteRestored) {}
}

impl TelemetrySink for () {
    fn record(&self, _record: &RefusalRecord) {}
}

impl<F> TelemetrySink for F
where
    F: Fn(&RefusalRecord) + Send + Sync + 'static,
{
    fn record(&self, record: &RefusalRecord) {
        self(record)
    }
}

impl<T: TelemetrySink + ?Sized> TelemetrySink for Arc<T> {
    fn record(&self, record: &RefusalRecord) {
        (**self).record(record)
    }
    fn route_restored(&self, event: &RouteRestored) {
        (**self).route_restored(event)
    }
}

impl TelemetrySink for Box<dyn TelemetrySink> {
    fn record(&self, record: &RefusalRecord) {
        (**self).record(record)
    }
    fn route_restored(&self, event: &RouteRestored) {
        (**self).route_restored(event)
    }
}

impl<S: TelemetrySink> TelemetrySink for Vec<S> {
    fn record(&self, record: &RefusalRecord) {
        for sink in self {
            sink.record(record);
        }
    }
    fn route_restored(&self, event: &RouteRestored) {
        for sink in self {
            sink.route_restored(event);
        }
    }
}

impl<A: TelemetrySink, B: TelemetrySink> TelemetrySink for (A, B) {
    fn record(&self, record: &RefusalRecord) {
        self.0.record(record);
        self.1.record(record);
    }
    fn route_restored(&self, event: &RouteRestored) {
        self.0.route_restored(event);
        self.1.route_restored(event);
    }
}

impl<A: TelemetrySink, B: TelemetrySink, C: TelemetrySink> TelemetrySink for (A, B, C) {
    fn record(&self, record: &RefusalRecord) {
        self.0.record(record);
        self.1.record(record);
        self.2.record(record);
    }
    fn route_restored(&self, event: &RouteRestored) {
        self.0.route_restored(event);
        self.1.route_restored(event);
        self.2.route_restored(event);
    }
}

/// Sends each record to several sinks of different types, in the order they
/// were added.
///
/// ```
/// use refusal_guard::telemetry::{Fanout, MemorySink, TelemetrySink, TracingSink};
///
/// let recent = MemorySink::with_capacity(100);
/// let sink = Fanout::new().and(TracingSink::new()).and(recent.clone());
/// assert_eq!(sink.len(), 2);
/// # let record = serde_json::from_str(r#"{"ts":"2026-01-01T00:00:00.000Z","outcome":"partial"}"#).unwrap();
/// sink.record(&record);
/// assert_eq!(recent.len(), 1);
/// ```
#[derive(Default)]
pub struct Fanout {
    sinks: Vec<Box<dyn TelemetrySink>>,
}

impl Fanout {
    /// A fanout with no sinks (records go nowhere until sinks are added).
    pub fn new() -> Self {
        Fanout::default()
    }

    /// Adds `sink` after the sinks already present.
    pub fn and<S: TelemetrySink>(mut self, sink: S) -> Self {
        self.push(sink);
        self
    }

    /// Adds `sink` after the sinks already present.
    pub fn push<S: TelemetrySink>(&mut self, sink: S) {
        self.sinks.push(Box::new(sink));
    }

    /// How many sinks records are sent to.
    pub fn len(&self) -> usize {
        self.sinks.len()
    }

    /// Whether there are no sinks.
    pub fn is_empty(&self) -> bool {
        self.sinks.is_empty()
    }
}

impl fmt::Debug for Fanout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fanout")
            .field("sinks", &self.sinks.len())
            .finish()
    }
}

impl TelemetrySink for Fanout {
    fn record(&self, record: &RefusalRecord) {
        for sink in &self.sinks {
            sink.record(record);
        }
    }
    fn route_restored(&self, event: &RouteRestored) {
        for sink in &self.sinks {
            sink.route_restored(event);
        }
    }
}

/// The snake-case word for a signal, as serialised.
pub(crate) fn signal_str(signal: RefusalSignal) -> &'static str {
    match signal {
        RefusalSignal::StopReason => "stop_reason",
        RefusalSignal::BlockedPrompt => "blocked_prompt",
        RefusalSignal::ModelRefusal => "model_refusal",
        RefusalSignal::Text => "text",
        RefusalSignal::BlockedOutput => "blocked_output",
        RefusalSignal::PolicyError => "policy_error",
    }
}

/// The snake-case word for a kind, as serialised.
pub(crate) fn kind_str(kind: RefusalKind) -> &'static str {
    match kind {
        RefusalKind::Empty => "empty",
        RefusalKind::Partial => "partial",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_match_known_days() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(11_017), (2000, 3, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(-719_468), (0, 3, 1));
    }

    #[test]
    fn signal_and_kind_words_match_serde() {
        for signal in [
            RefusalSignal::StopReason,
            RefusalSignal::BlockedPrompt,
            RefusalSignal::ModelRefusal,
            RefusalSignal::Text,
            RefusalSignal::BlockedOutput,
            RefusalSignal::PolicyError,
        ] {
            let json = serde_json::to_value(signal).unwrap();
            assert_eq!(json.as_str(), Some(signal_str(signal)));
        }
        for kind in [RefusalKind::Empty, RefusalKind::Partial] {
            let json = serde_json::to_value(kind).unwrap();
            assert_eq!(json.as_str(), Some(kind_str(kind)));
        }
    }
}
