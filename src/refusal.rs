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

impl Provider {
    /// The lower-case name used in logs (`anthropic`, `openai`, `google`).
    ///
    /// ```
    /// assert_eq!(refusal_guard::refusal::Provider::OpenAi.as_str(), "openai");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::OpenAi => "openai",
            Provider::Google => "google",
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The HTTP API a request was made against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum WireApi {
    /// Anthropic Messages (`POST /v1/messages`, or Vertex `:rawPredict`).
    AnthropicMessages,
    /// OpenAI Chat Completions (`POST /v1/chat/completions`).
    OpenAiChatCompletions,
    /// OpenAI Responses (`POST /v1/responses`).
    OpenAiResponses,
    /// Google Gemini `generateContent` / `streamGenerateContent` (and Vertex AI).
    GeminiGenerateContent,
}

impl WireApi {
    /// The snake-case name used in logs.
    ///
    /// ```
    /// use refusal_guard::refusal::WireApi;
    /// assert_eq!(WireApi::AnthropicMessages.as_str(), "anthropic_messages");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            WireApi::AnthropicMessages => "anthropic_messages",
            WireApi::OpenAiChatCompletions => "openai_chat_completions",
            WireApi::OpenAiResponses => "openai_responses",
            WireApi::GeminiGenerateContent => "gemini_generate_content",
        }
    }
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
        }
    }
}

impl fmt::Display for DeadReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What became of a refusal. Serialises as pi-refusal-guard's outcome words
/// (`fallback`, `rescued`, `partial`, `dead`); the dead reason travels
/// separately as [`Refusal::reason`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Outcome {
    /// A fallback model answered (client-side chain, or the provider's own
    /// server-side fallback).
    Fallback,
    /// The reframed continuation produced real output.
    Rescued,
    /// Real output came before the refusal; the response was left alone.
    Partial,
    /// Nothing was recovered; the client received the refusal as sent.
    Dead,
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
    /// A hop of the client-side fallback chain.
    Fallback,
    /// The reframed continuation.
    Rescue,
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
}

/// One request the guard sent upstream for a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// What the attempt was.
    pub step: AttemptStep,
    /// The model it asked for, when known.
    pub model: Option<String>,
    /// How it ended.
    pub result: AttemptResult,
    /// The HTTP status, when a response arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Milliseconds from sending the request to the decision about it.
    pub latency_ms: u64,
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// The model that refused.
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
}

impl Refusal {
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
