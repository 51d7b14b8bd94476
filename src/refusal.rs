//! Typed refusal metadata: what a provider declined, and what the guard did about it.
//!
//! A refusal is a *policy* failure with a provider code (for example `cyber` or
//! `content_filter`), never a generic warning. The guard places a [`Refusal`]
//! in the response extensions when it is known before the response is
//! returned, and always places a [`RefusalHandle`] that is filled once the
//! response body has been read to its end.

use std::fmt;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

/// The company whose model produced the response.
///
/// Its facts (its name, the prefix a chain entry names it by, the API a
/// fallback to it is sent in) are declared by its folder of the private
/// `dialect` module, as are [`WireApi`]'s: `as_str` and the other methods
/// are defined there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Provider {
    /// Anthropic (first party or Claude on Vertex AI).
    Anthropic,
    /// OpenAI or Azure OpenAI.
    #[serde(rename = "openai")]
    OpenAi,
    /// Google (Gemini API or Vertex AI).
    Google,
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The HTTP API a request was made against.
///
/// Its facts (its name, provider, platform, error shape, translation) are
/// declared by its provider's folder of the private `dialect` module, where
/// `as_str`, [`provider`](WireApi::provider) and
/// [`platform`](WireApi::platform) are defined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum WireApi {
    /// Anthropic Messages (`POST /v1/messages`, or Vertex `:rawPredict`).
    AnthropicMessages,
    /// OpenAI Chat Completions (`POST /v1/chat/completions`). Spelt
    /// `openai_chat_completions`, as its dialect names it; records written
    /// before read as `open_ai_chat_completions` too.
    #[serde(rename = "openai_chat_completions", alias = "open_ai_chat_completions")]
    OpenAiChatCompletions,
    /// OpenAI Responses (`POST /v1/responses`).
    #[serde(rename = "openai_responses", alias = "open_ai_responses")]
    OpenAiResponses,
    /// Google Gemini `generateContent` / `streamGenerateContent` (and Vertex AI).
    GeminiGenerateContent,
    /// Amazon Bedrock InvokeModel / InvokeModelWithResponseStream
    /// (`POST /model/{modelId}/invoke[-with-response-stream]`).
    BedrockInvokeModel,
    /// Amazon Bedrock Converse / ConverseStream
    /// (`POST /model/{modelId}/converse[-stream]`).
    BedrockConverse,
    /// The Anthropic Messages API on Amazon Bedrock
    /// (`POST /anthropic/v1/messages` on Bedrock's hosts).
    BedrockMessages,
}

impl fmt::Display for WireApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether real output came before the refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RefusalKind {
    /// Nothing real was emitted before the refusal (thinking does not count).
    /// Only an empty refusal may be recovered.
    Empty,
    /// Text or a tool call came first; the response is left alone.
    Partial,
}

/// How the provider expressed the refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RefusalSignal {
    /// A refusal stop reason from a safety classifier (Anthropic
    /// `stop_reason: "refusal"`, OpenAI `finish_reason: "content_filter"`,
    /// Gemini `finishReason: "SAFETY"`, ...).
    StopReason,
    /// The prompt itself was blocked (Gemini `promptFeedback.blockReason`,
    /// Azure HTTP 400 `content_filter`).
    BlockedPrompt,
    /// The model declined in words in a field the provider marks as a refusal
    /// (OpenAI `refusal`).
    ModelRefusal,
    /// The model declined in ordinary prose, found by the opt-in text detector.
    Text,
    /// The provider answered with an error that says its filter blocked the
    /// output (Anthropic's HTTP 400, or a stream `error` event, "Output
    /// blocked by content filtering policy").
    BlockedOutput,
    /// The provider answered with an error whose code names the safety
    /// policy that blocked the turn (OpenAI `cyber_policy`, `bio_policy`,
    /// `invalid_prompt`, `image_content_policy_violation`: an HTTP 400, a
    /// Responses stream's `response.failed` or `error` event). The category
    /// says which policy.
    PolicyError,
    /// The provider served the request with another model than the one it
    /// asked for, and said nothing of it: no refusal, no fallback of its
    /// own (an Anthropic server-side fallback is signalled, and is none).
    /// The guard calls this a reroute and records it under
    /// [`REROUTED_CATEGORY`]; see
    /// [`recover_reroutes`](crate::RefusalGuardLayer::recover_reroutes).
    Rerouted,
}

/// Why a refusal could not be recovered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DeadReason {
    /// Rescue is switched off and no fallback served.
    RescueOff,
    /// The conversation already had its one rescue since its last real output.
    RescueCap,
    /// Every recovery attempt refused as well.
    StillRefused,
    /// A recovery attempt failed at the transport or returned a non-2xx status.
    UpstreamError,
    /// A recovery attempt ended without real output and without a refusal.
    NoOutput,
    /// The per-call attempt budget or deadline ran out.
    BudgetExhausted,
    /// The original response could not be held whole within the configured
    /// bounds, so it had to be passed through as it was.
    HoldLimit,
    /// The request could not be rebuilt for a recovery attempt.
    Unrecoverable,
    /// The recovery policy chose to recover no further (see
    /// `recovery::RecoveryPolicy`).
    PolicyStop,
    /// The client went away before the refusal was decided; the guard
    /// stopped every piece of work for it and sent nothing more upstream.
    ClientGone,
    /// The request demands structured output (a JSON schema, JSON mode, a
    /// forced tool call), which a rescue note appended in prose would break,
    /// so the rescue step was skipped and nothing else recovered.
    StructuredOutput,
    /// The response ended without output on a stop reason the guard does
    /// not know (the category holds it as it came). It may be no policy
    /// stop at all, so nothing was tried; it is recorded so that it is
    /// seen.
    UnknownStop,
    /// The refusal's category is no safety decline (a copyright stop,
    /// [`RECITATION_CATEGORY`]): the rescue, whose note tells the model a
    /// safety classifier stopped it, was not sent, and no fallback served.
    /// See `recovery::category::CategoryKind`.
    NotSafety,
    /// A fallback chain entry named a provider (`openai:gpt-5`) no endpoint
    /// was configured for, so nothing was sent there.
    NoEndpoint,
    /// A fallback chain entry named another provider's API, and the request
    /// used a feature that API cannot express (the log says which), so
    /// nothing was sent there.
    Untranslatable,
    /// A fallback went to a model or provider outside the tenant's
    /// allowlist (see `tenant::FallbackAllowlist`), so nothing was sent there.
    NotAllowed,
    /// The tenant had used its recovery attempts for the hour (see
    /// `tenant::Tenant::recovery_attempts_per_hour`): the refusal was served as it came.
    Capped,
}

impl DeadReason {
    /// The snake-case name used in logs (`rescue_cap`, `still_refused`, ...).
    ///
    /// ```
    /// use refusal_guard::refusal::DeadReason;
    /// assert_eq!(DeadReason::StillRefused.as_str(), "still_refused");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            DeadReason::RescueOff => "rescue_off",
            DeadReason::RescueCap => "rescue_cap",
            DeadReason::StillRefused => "still_refused",
            DeadReason::UpstreamError => "upstream_error",
            DeadReason::NoOutput => "no_output",
            DeadReason::BudgetExhausted => "budget_exhausted",
            DeadReason::HoldLimit => "hold_limit",
            DeadReason::Unrecoverable => "unrecoverable",
            DeadReason::PolicyStop => "policy_stop",
            DeadReason::ClientGone => "client_gone",
            DeadReason::StructuredOutput => "structured_output",
            DeadReason::UnknownStop => "unknown_stop",
            DeadReason::NotSafety => "not_safety",
            DeadReason::NoEndpoint => "no_endpoint",
            DeadReason::Untranslatable => "untranslatable",
            DeadReason::NotAllowed => "not_allowed",
            DeadReason::Capped => "capped",
        }
    }
}

impl fmt::Display for DeadReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What became of a refusal. Serialises as pi-refusal-guard's outcome words
/// (`fallback`, `rescued`, `partial`, `dead`), and `rerouted` for a reroute
/// only recorded; the dead reason travels separately as [`Refusal::reason`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Outcome {
    /// A fallback model answered (the fallback chain, or the provider's own
    /// server-side fallback).
    Fallback,
    /// The reframed continuation produced real output.
    Rescued,
    /// Real output came before the refusal; the response was left alone.
    Partial,
    /// Nothing was recovered; the client received the refusal as sent.
    Dead,
    /// A reroute ([`RefusalSignal::Rerouted`]) only recorded: the answer
    /// of the model the provider put in place of the requested one reached
    /// the client as it came. A reroute the layer treats as a refusal
    /// ([`recover_reroutes`](crate::RefusalGuardLayer::recover_reroutes))
    /// ends as any refusal does instead (`fallback`, `dead`, ...).
    Rerouted,
}

impl Outcome {
    /// The word used in logs.
    ///
    /// ```
    /// assert_eq!(refusal_guard::refusal::Outcome::Rescued.as_str(), "rescued");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Fallback => "fallback",
            Outcome::Rescued => "rescued",
            Outcome::Partial => "partial",
            Outcome::Dead => "dead",
            Outcome::Rerouted => "rerouted",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error family a refusal belongs to, for callers that sort failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCategory {
    /// A provider policy decision (classifier decline, content filter, blocked prompt).
    Policy,
}

/// What one recovery step was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AttemptStep {
    /// The request as the client sent it (after any outbound rewrite).
    Original,
    /// A fallback of the fallback chain.
    Fallback,
    /// The reframed continuation.
    Rescue,
    /// The refused request sent again with the retarget list as
    /// server-side fallbacks (a policy's `retarget` step).
    Retarget,
    /// The request sent again as the client wrote it, after the provider
    /// answered HTTP 400 to the server-side fallbacks the guard wrote into
    /// it (the attempt before, step `original`, result `http_error`).
    WithoutFallbacks,
}

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AttemptResult {
    /// It produced real output (or ended normally) and was served to the client.
    Served,
    /// It refused before any real output.
    Refused,
    /// The upstream answered with a non-2xx status.
    HttpError,
    /// The inner service failed (connection refused, timeout, body error).
    TransportError,
    /// It ended without real output and without a refusal.
    NoOutput,
    /// It was being served when its stream stopped short (the client went
    /// away, or the connection broke): the client got part of it, and what
    /// its end would have said (final usage, a credit's fate) is unknown.
    Cut,
    /// It was never sent: a cross-provider fallback with no endpoint configured,
    /// or a request that provider's API cannot express.
    Skipped,
}

impl AttemptStep {
    /// The snake_case word the record and the metrics use.
    ///
    /// ```
    /// assert_eq!(refusal_guard::refusal::AttemptStep::Retarget.as_str(), "retarget");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptStep::Original => "original",
            AttemptStep::Fallback => "fallback",
            AttemptStep::Rescue => "rescue",
            AttemptStep::Retarget => "retarget",
            AttemptStep::WithoutFallbacks => "without_fallbacks",
        }
    }
}

impl AttemptResult {
    /// The snake_case word the record and the metrics use.
    ///
    /// ```
    /// assert_eq!(refusal_guard::refusal::AttemptResult::HttpError.as_str(), "http_error");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptResult::Served => "served",
            AttemptResult::Refused => "refused",
            AttemptResult::HttpError => "http_error",
            AttemptResult::TransportError => "transport_error",
            AttemptResult::NoOutput => "no_output",
            AttemptResult::Cut => "cut",
            AttemptResult::Skipped => "skipped",
        }
    }
}

/// Tokens a provider reported for one response: what an attempt cost.
///
/// Every count is `None` when the response did not say. The words mean the
/// same for every provider, so totals add up across them:
///
/// - `input_tokens`: prompt tokens read fresh, *not* from the cache (OpenAI's
///   and Gemini's prompt counts include cached tokens; they are subtracted).
/// - `output_tokens`: generated tokens, reasoning or thinking included
///   (Gemini's `thoughtsTokenCount` is added to its candidates' count).
/// - `cache_read_tokens`: prompt tokens served from the cache (Anthropic
///   `cache_read_input_tokens`, OpenAI `cached_tokens`, Gemini
///   `cachedContentTokenCount`).
/// - `cache_write_tokens`: prompt tokens written to the cache (Anthropic
///   `cache_creation_input_tokens`; the others do not report it).
///
/// ```
/// use refusal_guard::refusal::Usage;
///
/// let first = Usage::new().input_tokens(1200).output_tokens(3);
/// let second = Usage::new().input_tokens(1200).cache_read_tokens(800);
/// let total = first + second;
/// assert_eq!(total.input_tokens, Some(2400));
/// assert_eq!(total.cache_read_tokens, Some(800));
/// assert_eq!(total.cache_write_tokens, None);
/// assert_eq!(total.total_tokens(), 3203);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Usage {
    /// Prompt tokens read fresh (not from the cache).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Generated tokens, reasoning included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Prompt tokens read from the cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    /// Prompt tokens written to the cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
}

impl Usage {
    /// No counts known.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// assert_eq!(Usage::new(), Usage::default());
    /// ```
    pub fn new() -> Self {
        Usage::default()
    }

    /// With `tokens` prompt tokens read fresh.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// assert_eq!(Usage::new().input_tokens(3).input_tokens, Some(3));
    /// ```
    pub fn input_tokens(mut self, tokens: u64) -> Self {
        self.input_tokens = Some(tokens);
        self
    }

    /// With `tokens` generated tokens.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// assert_eq!(Usage::new().output_tokens(3).output_tokens, Some(3));
    /// ```
    pub fn output_tokens(mut self, tokens: u64) -> Self {
        self.output_tokens = Some(tokens);
        self
    }

    /// With `tokens` prompt tokens read from the cache.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// assert_eq!(Usage::new().cache_read_tokens(3).cache_read_tokens, Some(3));
    /// ```
    pub fn cache_read_tokens(mut self, tokens: u64) -> Self {
        self.cache_read_tokens = Some(tokens);
        self
    }

    /// With `tokens` prompt tokens written to the cache.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// assert_eq!(Usage::new().cache_write_tokens(3).cache_write_tokens, Some(3));
    /// ```
    pub fn cache_write_tokens(mut self, tokens: u64) -> Self {
        self.cache_write_tokens = Some(tokens);
        self
    }

    /// Whether no count is known.
    ///
    /// ```
    /// use refusal_guard::refusal::Usage;
    /// assert!(Usage::new().is_empty());
    /// assert!(!Usage::new().output_tokens(0).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.kinds().iter().all(|(_, count)| count.is_none())
    }

    /// The sum of every known count.
    ///
    /// ```
    /// use refusal_guard::refusal::Usage;
    /// assert_eq!(Usage::new().input_tokens(10).output_tokens(2).total_tokens(), 12);
    /// ```
    pub fn total_tokens(&self) -> u64 {
        self.kinds()
            .iter()
            .filter_map(|(_, count)| *count)
            .fold(0, u64::saturating_add)
    }

    /// Each count with its short name (`input`, `output`, `cache_read`,
    /// `cache_write`), the `kind` label of the
    /// `refusal_guard_refused_tokens_total` metric.
    ///
    /// ```
    /// use refusal_guard::refusal::Usage;
    /// let usage = Usage::new().output_tokens(7);
    /// assert_eq!(usage.kinds()[1], ("output", Some(7)));
    /// ```
    pub fn kinds(&self) -> [(&'static str, Option<u64>); 4] {
        [
            ("input", self.input_tokens),
            ("output", self.output_tokens),
            ("cache_read", self.cache_read_tokens),
            ("cache_write", self.cache_write_tokens),
        ]
    }

    /// `later` laid over `self`: the counts `later` knows replace these.
    /// Providers that repeat usage during a response report running totals,
    /// so the last report of each count is the response's.
    pub(crate) fn update(&mut self, later: Usage) {
        let pairs = [
            (&mut self.input_tokens, later.input_tokens),
            (&mut self.output_tokens, later.output_tokens),
            (&mut self.cache_read_tokens, later.cache_read_tokens),
            (&mut self.cache_write_tokens, later.cache_write_tokens),
        ];
        for (count, later) in pairs {
            if later.is_some() {
                *count = later;
            }
        }
    }
}

fn add_counts(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.saturating_add(b)),
        (a, b) => a.or(b),
    }
}

impl std::ops::Add for Usage {
    type Output = Usage;

    /// Adds the counts; a count known on one side only is kept as it is.
    fn add(self, other: Usage) -> Usage {
        Usage {
            input_tokens: add_counts(self.input_tokens, other.input_tokens),
            output_tokens: add_counts(self.output_tokens, other.output_tokens),
            cache_read_tokens: add_counts(self.cache_read_tokens, other.cache_read_tokens),
            cache_write_tokens: add_counts(self.cache_write_tokens, other.cache_write_tokens),
        }
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        *self = *self + other;
    }
}

impl std::iter::Sum for Usage {
    fn sum<I: Iterator<Item = Usage>>(iter: I) -> Usage {
        iter.fold(Usage::default(), |total, usage| total + usage)
    }
}

/// One request the guard sent upstream for a call.
///
/// ```
/// use refusal_guard::refusal::{Attempt, AttemptResult, AttemptStep, Usage};
///
/// let attempt = Attempt::new(AttemptStep::Fallback, AttemptResult::Refused)
///     .model("claude-fallback")
///     .status(200)
///     .latency_ms(12)
///     .usage(Usage::new().input_tokens(900).output_tokens(4));
/// assert_eq!(attempt.model.as_deref(), Some("claude-fallback"));
/// assert_eq!(attempt.usage.unwrap().output_tokens, Some(4));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Attempt {
    /// What the attempt was.
    pub step: AttemptStep,
    /// The model it asked for, when known, as the fallback chain names it
    /// (`openai:gpt-5` for a fallback to another provider).
    pub model: Option<String>,
    /// The provider a fallback to another provider's API went to (or would have
    /// gone to, when it was skipped); `None` for an attempt on the refusing
    /// provider's own API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<Provider>,
    /// How it ended.
    pub result: AttemptResult,
    /// The HTTP status, when a response arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Milliseconds from sending the request to the decision about it.
    pub latency_ms: u64,
    /// The tokens the provider reported for a refused response, when it
    /// reported any. The guard reads usage only from responses it judged
    /// refused: answers it served are the client's to account. For a
    /// response a provider's server-side fallbacks served, the tokens its
    /// declined iterations cost (Anthropic `usage.iterations`), the serving
    /// attempt's left out. A value this version cannot read is `None`, not
    /// a reason to drop the attempt.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_usage"
    )]
    pub usage: Option<Usage>,
    /// What became of the Anthropic fallback credit token this attempt
    /// presented (`usage.fallback_credit`), when the response said.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_credit"
    )]
    pub fallback_credit: Option<FallbackCredit>,
    /// The model the response said served it, when that was another model
    /// than [`model`](Attempt::model) under any of its names: the provider
    /// rerouted the attempt ([`RefusalSignal::Rerouted`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerouted_to: Option<String>,
    /// Why an attempt was never sent ([`AttemptResult::Skipped`]): a
    /// fallback outside the tenant's allowlist (`not_allowed`), to a
    /// provider with no endpoint (`no_endpoint`) or that cannot express the
    /// request (`untranslatable`), or past the tenant's hourly cap
    /// (`capped`). Set on every skipped attempt, whatever came after it:
    /// the refusal's own [`Refusal::reason`] is only the last one's, and
    /// only when nothing served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<DeadReason>,
}

/// Reads an attempt's credit outcome, turning one this version cannot read
/// into `None`.
fn lenient_credit<'de, D>(deserializer: D) -> Result<Option<FallbackCredit>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let value = Option::<serde_json::Value>::deserialize(deserializer)?;
    Ok(value.and_then(|value| serde_json::from_value(value).ok()))
}

/// Reads an attempt's usage, turning one this version cannot read (a newer
/// writer's, a hand-edited line's) into `None`.
fn lenient_usage<'de, D>(deserializer: D) -> Result<Option<Usage>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let value = Option::<serde_json::Value>::deserialize(deserializer)?;
    Ok(value.and_then(|value| serde_json::from_value(value).ok()))
}

impl Attempt {
    /// An attempt of this step that ended so, with nothing else known.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// let attempt = Attempt::new(AttemptStep::Original, AttemptResult::Refused);
    /// assert_eq!((attempt.model, attempt.status, attempt.usage), (None, None, None));
    /// ```
    pub fn new(step: AttemptStep, result: AttemptResult) -> Self {
        Attempt {
            step,
            model: None,
            provider: None,
            result,
            status: None,
            latency_ms: 0,
            usage: None,
            fallback_credit: None,
            rerouted_to: None,
            reason: None,
        }
    }

    /// Asking for `model`.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// let attempt = Attempt::new(AttemptStep::Rescue, AttemptResult::Served).model("m");
    /// assert_eq!(attempt.model.as_deref(), Some("m"));
    /// ```
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// A fallback to `provider`'s API (another provider's than the refusing one).
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// let attempt = Attempt::new(AttemptStep::Fallback, AttemptResult::Served)
    ///     .model("openai:gpt-5")
    ///     .provider(Provider::OpenAi);
    /// assert_eq!(attempt.provider, Some(Provider::OpenAi));
    /// ```
    pub fn provider(mut self, provider: Provider) -> Self {
        self.provider = Some(provider);
        self
    }

    /// Answered with this HTTP status.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// let attempt = Attempt::new(AttemptStep::Fallback, AttemptResult::HttpError).status(529);
    /// assert_eq!(attempt.status, Some(529));
    /// ```
    pub fn status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    /// Decided `latency_ms` milliseconds after it was sent.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// let attempt = Attempt::new(AttemptStep::Fallback, AttemptResult::Served).latency_ms(40);
    /// assert_eq!(attempt.latency_ms, 40);
    /// ```
    pub fn latency_ms(mut self, latency_ms: u64) -> Self {
        self.latency_ms = latency_ms;
        self
    }

    /// Costing these tokens.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// let attempt = Attempt::new(AttemptStep::Original, AttemptResult::Refused)
    ///     .usage(Usage::new().input_tokens(12));
    /// assert_eq!(attempt.usage.unwrap().total_tokens(), 12);
    /// ```
    pub fn usage(mut self, usage: Usage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// Whose fallback credit token came to this.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// let attempt = Attempt::new(AttemptStep::Fallback, AttemptResult::Served)
    ///     .fallback_credit(FallbackCredit::Redeemed);
    /// assert!(attempt.fallback_credit.unwrap().redeemed());
    /// ```
    pub fn fallback_credit(mut self, credit: FallbackCredit) -> Self {
        self.fallback_credit = Some(credit);
        self
    }

    /// Served by `model`, which the provider put in place of the one asked
    /// for.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// let attempt = Attempt::new(AttemptStep::Original, AttemptResult::Served)
    ///     .model("gpt-5.3-codex")
    ///     .rerouted_to("gpt-5.2");
    /// assert_eq!(attempt.rerouted_to.as_deref(), Some("gpt-5.2"));
    /// ```
    pub fn rerouted_to(mut self, model: impl Into<String>) -> Self {
        self.rerouted_to = Some(model.into());
        self
    }

    /// Never sent, for this reason.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// let attempt = Attempt::new(AttemptStep::Fallback, AttemptResult::Skipped)
    ///     .model("claude-haiku-4-5")
    ///     .reason(DeadReason::NotAllowed);
    /// assert_eq!(attempt.reason, Some(DeadReason::NotAllowed));
    /// ```
    pub fn reason(mut self, reason: DeadReason) -> Self {
        self.reason = Some(reason);
        self
    }
}

/// What became of an Anthropic fallback credit token a request presented,
/// as the response's `usage.fallback_credit` said: redeemed (the retry is
/// billed as if the conversation had been on its model all along), or not
/// applied, with the provider's reason (`expired`, `body_mismatch`, ...)
/// and, for `variant_fields_present`, the request fields to remove so that
/// a corrected request redeems it (`remove_to_redeem`; the guard's next fallback
/// leaves them out).
///
/// Serialises as `{"status":"redeemed"}`,
/// `{"status":"not_applied","reason":"expired"}` or
/// `{"status":"not_applied","reason":"variant_fields_present","remove_to_redeem":["speed"]}`.
///
/// ```
/// use refusal_guard::refusal::FallbackCredit;
///
/// let missed = FallbackCredit::not_applied("expired");
/// assert_eq!(missed.reason(), Some("expired"));
/// assert_eq!(
///     serde_json::to_string(&missed).unwrap(),
///     r#"{"status":"not_applied","reason":"expired"}"#
/// );
/// assert_eq!(FallbackCredit::Redeemed.as_str(), "redeemed");
/// let variant = FallbackCredit::not_applied("variant_fields_present").redeemable_without(["speed"]);
/// assert_eq!(variant.remove_to_redeem(), ["speed"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
#[non_exhaustive]
pub enum FallbackCredit {
    /// The credit was applied.
    Redeemed,
    /// The credit was not applied.
    #[non_exhaustive]
    NotApplied {
        /// The provider's reason, when it gave one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// The request fields the provider named as keeping the token from
        /// being redeemed (`remove_to_redeem`, sent with the reason
        /// `variant_fields_present`); empty when it named none.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        remove_to_redeem: Vec<String>,
    },
}

impl FallbackCredit {
    /// Not applied, for `reason`.
    pub fn not_applied(reason: impl Into<String>) -> Self {
        FallbackCredit::NotApplied {
            reason: Some(reason.into()),
            remove_to_redeem: Vec::new(),
        }
    }

    /// Not applied, and redeemable by a request without these `fields`
    /// (the provider's `remove_to_redeem`); [`Redeemed`](Self::Redeemed)
    /// stays as it is.
    pub fn redeemable_without<I, F>(self, fields: I) -> Self
    where
        I: IntoIterator<Item = F>,
        F: Into<String>,
    {
        match self {
            FallbackCredit::NotApplied { reason, .. } => FallbackCredit::NotApplied {
                reason,
                remove_to_redeem: fields.into_iter().map(Into::into).collect(),
            },
            redeemed => redeemed,
        }
    }

    /// The request fields to remove so that the token redeems, as the
    /// provider named them; empty when it named none.
    pub fn remove_to_redeem(&self) -> &[String] {
        match self {
            FallbackCredit::NotApplied {
                remove_to_redeem, ..
            } => remove_to_redeem,
            FallbackCredit::Redeemed => &[],
        }
    }

    /// Whether the credit was applied.
    pub fn redeemed(&self) -> bool {
        matches!(self, FallbackCredit::Redeemed)
    }

    /// The status word: `redeemed` or `not_applied`.
    pub fn as_str(&self) -> &'static str {
        match self {
            FallbackCredit::Redeemed => "redeemed",
            FallbackCredit::NotApplied { .. } => "not_applied",
        }
    }

    /// Why it was not applied, when the provider said.
    pub fn reason(&self) -> Option<&str> {
        match self {
            FallbackCredit::Redeemed => None,
            FallbackCredit::NotApplied { reason, .. } => reason.as_deref(),
        }
    }
}

/// Whether an Anthropic refusal's fallback credit token carries a prefill
/// claim (`stop_details.fallback_has_prefill_claim`): may another model
/// continue the refused response's partial output, sent back as an
/// appended assistant turn?
///
/// Some platforms leave the field out: that is [`Prefill::Unknown`], not
/// [`Prefill::NotClaimed`]. Only [`Prefill::Claimed`] allows the appended
/// turn; without it the credit is redeemed, if at all, by the unchanged
/// request.
///
/// ```
/// use refusal_guard::refusal::Prefill;
///
/// assert_eq!(Prefill::default(), Prefill::Unknown);
/// assert!(Prefill::Claimed.allows_continuation());
/// assert!(!Prefill::Unknown.allows_continuation());
/// assert_eq!(Prefill::from_field(None), Prefill::Unknown);
/// assert_eq!(Prefill::from_field(Some(false)), Prefill::NotClaimed);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Prefill {
    /// `true`: the partial output may be continued by another model.
    Claimed,
    /// `false`: resend the request unchanged.
    NotClaimed,
    /// Absent (or not a boolean): the shape of a redeeming retry is not known.
    #[default]
    Unknown,
}

impl Prefill {
    /// The value of a `fallback_has_prefill_claim` field, `None` when absent.
    pub fn from_field(value: Option<bool>) -> Self {
        match value {
            Some(true) => Prefill::Claimed,
            Some(false) => Prefill::NotClaimed,
            None => Prefill::Unknown,
        }
    }

    /// Whether the refused response may be continued with an appended
    /// assistant turn.
    pub fn allows_continuation(self) -> bool {
        self == Prefill::Claimed
    }

    pub(crate) fn is_unknown(&self) -> bool {
        *self == Prefill::Unknown
    }
}

/// A provider refusal as a typed value.
///
/// Found in `http::Response::extensions()` when the guard knew it before it
/// returned the response (an empty refusal, recovered or not), and through
/// the [`RefusalHandle`] in every guarded response once its body has ended.
///
/// ```
/// use refusal_guard::refusal::{ErrorCategory, Refusal};
///
/// fn explain(refusal: &Refusal) -> String {
///     assert_eq!(refusal.error_category(), ErrorCategory::Policy);
///     format!("{} refused ({}): {}", refusal.provider, refusal.code(), refusal.outcome)
/// }
/// ```
///
/// Sinks and tests build one with [`Refusal::new`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Refusal {
    /// The provider that refused.
    pub provider: Provider,
    /// The wire API of the request.
    pub wire_api: WireApi,
    /// How the refusal was expressed.
    pub signal: RefusalSignal,
    /// The provider's category in its own words (`cyber`, `content_filter`,
    /// `SAFETY`, ...), when it gave one.
    pub category: Option<String>,
    /// The provider's explanation, when it gave one.
    pub explanation: Option<String>,
    /// The model that refused (for a reroute, the one the request asked
    /// for).
    pub model: Option<String>,
    /// The provider's request id (`request-id`, `x-request-id`), when sent.
    pub request_id: Option<String>,
    /// Empty or partial.
    pub kind: RefusalKind,
    /// What the guard did about it.
    pub outcome: Outcome,
    /// Why it stayed dead, for [`Outcome::Dead`].
    pub reason: Option<DeadReason>,
    /// The model whose response the client received.
    pub served_model: Option<String>,
    /// The model Anthropic suggests retrying on
    /// (`stop_details.recommended_model`): set when the request carried
    /// server-side `fallbacks` and the fallback could not be tried (rate
    /// limited or overloaded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommended_model: Option<String>,
    /// Whether the refusal's credit token carries a prefill claim.
    #[serde(default, skip_serializing_if = "Prefill::is_unknown")]
    pub prefill: Prefill,
}

impl Refusal {
    /// An empty refusal on `wire_api` (its provider's), expressed by a stop
    /// reason, that became `outcome`; nothing else known. The other parts
    /// are set with the methods named after them.
    ///
    /// ```
    /// use refusal_guard::refusal::{DeadReason, Outcome, Provider, Refusal, WireApi};
    ///
    /// let refusal = Refusal::new(WireApi::AnthropicMessages, Outcome::Dead)
    ///     .category("cyber")
    ///     .model("claude-x")
    ///     .reason(DeadReason::RescueOff);
    /// assert_eq!(refusal.provider, Provider::Anthropic);
    /// assert_eq!(refusal.to_string(), "policy refusal by anthropic (cyber): dead (rescue_off)");
    /// ```
    pub fn new(wire_api: WireApi, outcome: Outcome) -> Self {
        Refusal {
            provider: wire_api.provider(),
            wire_api,
            signal: RefusalSignal::StopReason,
            category: None,
            explanation: None,
            model: None,
            request_id: None,
            kind: RefusalKind::Empty,
            outcome,
            reason: None,
            served_model: None,
            recommended_model: None,
            prefill: Prefill::Unknown,
        }
    }

    /// Refused by `provider` (by default, the one `wire_api` belongs to).
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// let refusal = Refusal::new(WireApi::AnthropicMessages, Outcome::Dead).provider(Provider::Google);
    /// assert_eq!(refusal.provider, Provider::Google);
    /// ```
    pub fn provider(mut self, provider: Provider) -> Self {
        self.provider = provider;
        self
    }

    /// Expressed this way.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// let refusal = Refusal::new(WireApi::GeminiGenerateContent, Outcome::Dead).signal(RefusalSignal::BlockedPrompt);
    /// assert_eq!(refusal.signal, RefusalSignal::BlockedPrompt);
    /// ```
    pub fn signal(mut self, signal: RefusalSignal) -> Self {
        self.signal = signal;
        self
    }

    /// In the provider's `category`.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// let refusal = Refusal::new(WireApi::AnthropicMessages, Outcome::Dead).category("cyber");
    /// assert_eq!(refusal.code(), "cyber");
    /// ```
    pub fn category(mut self, category: impl Into<String>) -> Self {
        self.category = Some(category.into());
        self
    }

    /// With the provider's `explanation`.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// let refusal = Refusal::new(WireApi::AnthropicMessages, Outcome::Dead).explanation("policy");
    /// assert_eq!(refusal.explanation.as_deref(), Some("policy"));
    /// ```
    pub fn explanation(mut self, explanation: impl Into<String>) -> Self {
        self.explanation = Some(explanation.into());
        self
    }

    /// By `model`.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// let refusal = Refusal::new(WireApi::OpenAiResponses, Outcome::Dead).model("gpt-x");
    /// assert_eq!(refusal.model.as_deref(), Some("gpt-x"));
    /// ```
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// With the provider's request id.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// let refusal = Refusal::new(WireApi::OpenAiResponses, Outcome::Dead).request_id("req_1");
    /// assert_eq!(refusal.request_id.as_deref(), Some("req_1"));
    /// ```
    pub fn request_id(mut self, request_id: impl Into<String>) -> Self {
        self.request_id = Some(request_id.into());
        self
    }

    /// Empty or partial.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// let refusal = Refusal::new(WireApi::AnthropicMessages, Outcome::Partial).kind(RefusalKind::Partial);
    /// assert_eq!(refusal.kind, RefusalKind::Partial);
    /// ```
    pub fn kind(mut self, kind: RefusalKind) -> Self {
        self.kind = kind;
        self
    }

    /// Dead for this reason.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// let refusal = Refusal::new(WireApi::AnthropicMessages, Outcome::Dead).reason(DeadReason::RescueCap);
    /// assert_eq!(refusal.reason, Some(DeadReason::RescueCap));
    /// ```
    pub fn reason(mut self, reason: DeadReason) -> Self {
        self.reason = Some(reason);
        self
    }

    /// Served to the client by `model`.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// let refusal = Refusal::new(WireApi::AnthropicMessages, Outcome::Fallback).served_model("claude-y");
    /// assert!(refusal.recovered());
    /// assert_eq!(refusal.served_model.as_deref(), Some("claude-y"));
    /// ```
    pub fn served_model(mut self, model: impl Into<String>) -> Self {
        self.served_model = Some(model.into());
        self
    }

    /// With the provider's suggested retry model.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// let refusal = Refusal::new(WireApi::AnthropicMessages, Outcome::Dead).recommended_model("claude-y");
    /// assert_eq!(refusal.recommended_model.as_deref(), Some("claude-y"));
    /// ```
    pub fn recommended_model(mut self, model: impl Into<String>) -> Self {
        self.recommended_model = Some(model.into());
        self
    }

    /// With what the refusal said of a prefill claim.
    ///
    /// ```
    /// use refusal_guard::refusal::*;
    /// let refusal = Refusal::new(WireApi::AnthropicMessages, Outcome::Dead).prefill(Prefill::NotClaimed);
    /// assert_eq!(refusal.prefill, Prefill::NotClaimed);
    /// ```
    pub fn prefill(mut self, prefill: Prefill) -> Self {
        self.prefill = prefill;
        self
    }

    /// Refusals are always [`ErrorCategory::Policy`].
    pub fn error_category(&self) -> ErrorCategory {
        ErrorCategory::Policy
    }

    /// The provider's code for the refusal: its category, or `refusal` when it
    /// gave none.
    pub fn code(&self) -> &str {
        self.category.as_deref().unwrap_or("refusal")
    }

    /// Whether the client received a recovered response.
    pub fn recovered(&self) -> bool {
        matches!(self.outcome, Outcome::Fallback | Outcome::Rescued)
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "policy refusal by {} ({}): {}",
            self.provider,
            self.code(),
            self.outcome
        )?;
        if let Some(reason) = self.reason {
            write!(f, " ({reason})")?;
        }
        if let Some(explanation) = &self.explanation {
            write!(f, ": {explanation}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Refusal {}

/// The category of a refusal that is the operator's own Amazon Bedrock
/// guardrail intervening (Converse `stopReason: guardrail_intervened`, or
/// `amazon-bedrock-guardrailAction: INTERVENED`).
///
/// The default recovery stops on it: the guard does not work around a
/// content policy its operator configured. An explicit entry for this
/// category in the recovery's per-category policy opts in.
///
/// ```
/// assert_eq!(refusal_guard::refusal::GUARDRAIL_CATEGORY, "guardrail_intervened");
/// ```
pub const GUARDRAIL_CATEGORY: &str = "guardrail_intervened";

/// The category of a copyright stop: the provider cut the output because it
/// may reproduce a source (Gemini and Vertex AI `finishReason` `RECITATION`
/// and `IMAGE_RECITATION`; Azure OpenAI's protected material filters). The
/// dialects record every such stop under this one word.
///
/// It is no safety decline, so the default recovery tries the fallback
/// chain but no rescue, whose note tells the model a safety classifier
/// stopped it (see `recovery::category::CategoryKind`).
///
/// ```
/// assert_eq!(refusal_guard::refusal::RECITATION_CATEGORY, "recitation");
/// ```
pub const RECITATION_CATEGORY: &str = "recitation";

/// The category of a reroute ([`RefusalSignal::Rerouted`]): the provider
/// served the request with another model than the one asked for, and said
/// nothing of it. The guard's own word, not a provider's.
///
/// A reroute is only recorded unless the layer treats reroutes as refusals
/// ([`recover_reroutes`](crate::RefusalGuardLayer::recover_reroutes)); then
/// this category's steps of the per-category policy apply. It is no safety
/// decline the model made, so the default steps leave out the rescue (whose
/// note speaks of a safety classifier) and climb the fallback chain.
///
/// ```
/// assert_eq!(refusal_guard::refusal::REROUTED_CATEGORY, "rerouted");
/// ```
pub const REROUTED_CATEGORY: &str = "rerouted";

/// The category of a refusal by Model Armor, the screening an operator
/// configures for Gemini on Vertex AI (`finishReason` and
/// `promptFeedback.blockReason` `MODEL_ARMOR`), in the provider's words.
///
/// Like [`GUARDRAIL_CATEGORY`], it is the operator's own content policy: the
/// default recovery stops on it.
///
/// ```
/// assert_eq!(refusal_guard::refusal::MODEL_ARMOR_CATEGORY, "MODEL_ARMOR");
/// ```
pub const MODEL_ARMOR_CATEGORY: &str = "MODEL_ARMOR";

/// In the response extensions when sticky fallback routing
/// ([`sticky_fallback`](crate::RefusalGuardLayer::sticky_fallback)) sent a
/// request straight to the model a fallback served its conversation with,
/// instead of the one it asked for.
///
/// ```
/// use refusal_guard::refusal::StickyRoute;
///
/// fn note(response: &http::Response<()>) -> Option<String> {
///     let route = response.extensions().get::<StickyRoute>()?;
///     Some(format!("{:?} -> {}", route.requested, route.routed_to))
/// }
/// assert_eq!(note(&http::Response::new(())), None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StickyRoute {
    /// The model the request asked for.
    pub requested: Option<String>,
    /// The model it was sent to.
    pub routed_to: String,
}

/// A slot in the response extensions that the guard fills once the response
/// body has ended: `Some(refusal)` if the response held one, `None` if not.
///
/// ```
/// use refusal_guard::refusal::RefusalHandle;
///
/// let handle = RefusalHandle::default();
/// assert!(!handle.is_settled());
/// assert_eq!(handle.get(), None);
/// ```
#[derive(Debug, Clone, Default)]
pub struct RefusalHandle {
    inner: Arc<HandleInner>,
}

#[derive(Debug, Default)]
struct HandleInner {
    slot: OnceLock<Option<Refusal>>,
    notify: tokio::sync::Notify,
}

impl RefusalHandle {
    /// Whether the guard has settled the response.
    pub fn is_settled(&self) -> bool {
        self.inner.slot.get().is_some()
    }

    /// The refusal, if the response has settled and held one.
    pub fn get(&self) -> Option<Refusal> {
        self.inner.slot.get().cloned().flatten()
    }

    /// Waits until the response has settled (its body was read to the end or
    /// dropped), then returns the refusal it held, if any.
    pub async fn settled(&self) -> Option<Refusal> {
        loop {
            let notified = self.inner.notify.notified();
            if let Some(value) = self.inner.slot.get() {
                return value.clone();
            }
            notified.await;
        }
    }

    /// Settles the handle. Only the first call has an effect.
    pub(crate) fn settle(&self, refusal: Option<Refusal>) {
        if self.inner.slot.set(refusal).is_ok() {
            self.inner.notify.notify_waiters();
        }
    }
}
