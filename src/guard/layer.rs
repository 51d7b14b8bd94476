//! [`RefusalGuardLayer`]: all configuration of the guard, as a builder.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::header::HeaderName;
use serde_json::Value;
use tower_layer::Layer;

use crate::guard::config::Config;
use crate::guard::service::RefusalGuard;
use crate::recovery::category::CategoryPolicy;
use crate::recovery::{
    AllowedFallbacks, Budget, Endpoint, FallbackChains, Ladder, RecoveryPolicy, RescueModel,
    RescueNote, RescueSwitch,
};
use crate::refusal::Provider;
use crate::replay::reserve::BytePool;
use crate::routing::{FixedRouting, RoutingSource};
use crate::store::{ConversationStore, MemoryStore};
use crate::telemetry::TelemetrySink;
use crate::tenant::{OneTenant, Tenant, TenantResolver};

/// Wraps an HTTP client service so that provider refusals are seen, told
/// apart (empty or partial), recovered where possible and recorded.
///
/// Every limit has a default that suits a single agent or a small proxy; each
/// builder method documents its own.
///
/// # What reaches the upstream, and what comes back
///
/// Responses are byte-exact: everything that is not a recovered refusal,
/// and every refusal nothing recovers, reaches the client exactly as the
/// provider sent it. Requests are forwarded as sent, except for these
/// changes, made on purpose:
///
/// - **`accept-encoding: identity`** on every guarded request (one of the
///   wire APIs the guard reads), replacing what the client asked for: the
///   guard must read the response, and a compressed stream would pass
///   unjudged. Requests on other paths keep their header; so do requests
///   read whole before sending that turn out unguardable (`n` > 1, not
///   JSON). A request forwarded as it arrives gets `identity` before its
///   body is known, so one that turns out unguardable has it too.
/// - **The conversation header removed** (`x-refusal-guard-conversation`,
///   see [`conversation_header`](Self::conversation_header)) from every
///   request, guarded or not: it is for the guard, not the provider.
/// - **What you configure**: server-side `fallbacks` rewritten
///   ([`retarget_fallbacks`](Self::retarget_fallbacks)), a sticky route's
///   model ([`sticky_fallback`](Self::sticky_fallback)), and, on Anthropic
///   requests whose model has a fallback chain, the fallback-credit beta
///   ([`fallback_credit`](Self::fallback_credit), on by default). A
///   recovery attempt is a request of the guard's own: the original on
///   another model, or with the rescue note.
///
/// ```
/// use std::time::Duration;
/// use refusal_guard::{recovery::RescueNote, telemetry::TelemetrySink, RefusalGuardLayer};
///
/// let layer = RefusalGuardLayer::new()
///     .rescue_note(RescueNote::template("Declined ({category}). Restate defensively or say what you cannot do."))
///     .max_hold_bytes(2 << 20)
///     .telemetry(|record: &refusal_guard::telemetry::RefusalRecord| {
///         eprintln!("refusal: {:?}", record.refusal().outcome);
///     });
/// # let _ = layer;
/// ```
#[derive(Clone)]
pub struct RefusalGuardLayer {
    config: Arc<Config>,
}

impl fmt::Debug for RefusalGuardLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RefusalGuardLayer")
            .field("config", &self.config)
            .finish()
    }
}

impl Default for RefusalGuardLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl RefusalGuardLayer {
    /// Default cap on a buffered request body (16 MiB). A larger request is
    /// forwarded unguarded.
    pub const DEFAULT_MAX_REQUEST_BODY: usize = 16 << 20;
    /// Default cap on a buffered non-streaming response body (16 MiB).
    pub const DEFAULT_MAX_RESPONSE_BODY: usize = 16 << 20;
    /// Default cap on the bytes of a stream held back before real output (4 MiB).
    pub const DEFAULT_MAX_HOLD_BYTES: usize = 4 << 20;
    /// Default cap on the answer text held back while the opt-in text
    /// detector cannot yet rule out a prose refusal (2 KiB).
    pub const DEFAULT_TEXT_HOLD_BYTES: usize = 2 << 10;
    /// Default time between keep-alive comments (15 s).
    pub const DEFAULT_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(15);
    /// Default cap on the SSE frames held back before real output.
    pub const DEFAULT_MAX_HOLD_FRAMES: usize = 20_000;
    /// Default time from sending a request upstream to its response head
    /// (10 minutes, the official SDKs' default request timeout).
    pub const DEFAULT_UPSTREAM_HEAD_TIMEOUT: Duration = Duration::from_secs(10 * 60);
    /// Default longest gap between two chunks of an upstream body (5 minutes).
    pub const DEFAULT_UPSTREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(5 * 60);
    /// Default cap on the bytes held across every stream and buffered
    /// request body of one layer (256 MiB).
    pub const DEFAULT_MAX_TOTAL_HELD_BYTES: usize = 256 << 20;

    /// A guard with rescue on, no fallbacks, an in-memory store and no
    /// telemetry.
    pub fn new() -> Self {
        RefusalGuardLayer {
            config: Arc::new(Config {
                rescue: RescueSwitch::default(),
                rescue_cap: 1,
                ladder: Ladder::new(),
                policy: None,
                store: Arc::new(MemoryStore::new()),
                telemetry: Arc::new(()),
                conversation_header: Some(HeaderName::from_static(crate::header::CONVERSATION)),
                conversation_fn: None,
                max_request_body: Self::DEFAULT_MAX_REQUEST_BODY,
                max_response_body: Self::DEFAULT_MAX_RESPONSE_BODY,
                max_hold_bytes: Self::DEFAULT_MAX_HOLD_BYTES,
                max_hold_frames: Self::DEFAULT_MAX_HOLD_FRAMES,
                retarget: Vec::new(),
                inject_fallbacks: false,
                allowed_fallbacks: AllowedFallbacks::new(),
                fallback_credit: true,
                budget: Budget::default(),
                sticky_ttl: None,
                handoff_marker: false,
                text_detection: false,
                text_hold_bytes: Self::DEFAULT_TEXT_HOLD_BYTES,
                keepalive_after: None,
                keepalive_interval: Self::DEFAULT_KEEPALIVE_INTERVAL,
                live_thinking: false,
                continue_partial: false,
                head_timeout: Self::DEFAULT_UPSTREAM_HEAD_TIMEOUT,
                idle_timeout: Self::DEFAULT_UPSTREAM_IDLE_TIMEOUT,
                held: BytePool::new(Self::DEFAULT_MAX_TOTAL_HELD_BYTES),
                cross_provider: Default::default(),
                routing: Arc::new(FixedRouting),
                resolver: Arc::new(OneTenant::default()),
                tenant: Tenant::default(),
                tenants: Arc::default(),
            }),
        }
    }

    /// The configuration built so far, for the engine's unit tests.
    #[cfg(test)]
    pub(crate) fn config(&self) -> Arc<Config> {
        self.config.clone()
    }

    /// This layer answering only once a call is decided: no keep-alive
    /// answer, live thinking or partial continuation, each of which may
    /// send upstream after the response went out; and whether any was on.
    /// For an inner service that can send only while its caller waits.
    #[cfg(feature = "reqwest-middleware")]
    pub(crate) fn decided_before_answering(self) -> (Self, bool) {
        let config = &self.config;
        let early =
            config.keepalive_after.is_some() || config.live_thinking || config.continue_partial;
        if !early {
            return (self, false);
        }
        let layer = self.with(|config| {
            config.keepalive_after = None;
            config.live_thinking = false;
            config.continue_partial = false;
        });
        (layer, true)
    }

    fn with(mut self, change: impl FnOnce(&mut Config)) -> Self {
        match Arc::get_mut(&mut self.config) {
            Some(config) => change(config),
            None => {
                // Shared with built services: change a copy, so they keep the
                // configuration they were built with.
                let mut config = (*self.config).clone();
                change(&mut config);
                self.config = Arc::new(config);
            }
        }
        // What was made for each tenant was made from the settings before.
        if let Some(config) = Arc::get_mut(&mut self.config) {
            config.tenants = Arc::default();
        }
        self
    }

    /// Turns the rescue step on or off (on by default) for the services
    /// this layer builds from now on. It gives the layer a switch of its
    /// own: a clone's setting never reaches the layer it was cloned from,
    /// nor services already built. See [`rescue_switch`](Self::rescue_switch)
    /// to flip rescue while running.
    ///
    /// ```
    /// use refusal_guard::RefusalGuardLayer;
    ///
    /// let a = RefusalGuardLayer::new();
    /// let b = a.clone().rescue(false);
    /// assert!(a.rescue_switch().is_on());
    /// assert!(!b.rescue_switch().is_on());
    /// ```
    pub fn rescue(self, on: bool) -> Self {
        self.with(|c| c.rescue = RescueSwitch::new(on))
    }

    /// Uses `switch` as the rescue on/off switch, shared with whoever holds it.
    pub fn rescue_switch_from(self, switch: crate::recovery::RescueSwitch) -> Self {
        self.with(|c| c.rescue = switch)
    }

    /// The switch that turns rescue on and off for every service this layer
    /// built or will build.
    pub fn rescue_switch(&self) -> RescueSwitch {
        self.config.rescue.clone()
    }

    /// Decides what to try after an empty refusal (default: the [`Ladder`]
    /// that the shorthand methods [`fallback_chains`](Self::fallback_chains),
    /// [`rescue_note`](Self::rescue_note) and
    /// [`rescue_model`](Self::rescue_model) configure; they have no effect
    /// on a policy given here). The rescue cap, the runtime
    /// [`rescue_switch`](Self::rescue_switch), `max_attempts` and the
    /// recovery deadline bound every policy.
    ///
    /// ```
    /// use refusal_guard::recovery::{NextStep, RecoveryState, Rescue};
    /// use refusal_guard::refusal::DeadReason;
    ///
    /// let layer = refusal_guard::RefusalGuardLayer::new().policy(|state: &RecoveryState<'_>| {
    ///     if state.rescues_tried() == 0 {
    ///         NextStep::Rescue(Rescue::new("Say plainly what you can do."))
    ///     } else {
    ///         NextStep::Stop(state.last_failure().unwrap_or(DeadReason::StillRefused))
    ///     }
    /// });
    /// # let _ = layer;
    /// ```
    pub fn policy(self, policy: impl RecoveryPolicy) -> Self {
        self.with(|c| c.policy = Some(Arc::new(policy)))
    }

    /// The note the default ladder's rescue appends (default:
    /// [`RescueNote::default`]).
    pub fn rescue_note(self, note: RescueNote) -> Self {
        self.with(|c| c.ladder = c.ladder.clone().rescue_note(note))
    }

    /// How many rescues a conversation may have before it produces real
    /// output again (default 1).
    pub fn rescue_cap(self, cap: u32) -> Self {
        self.with(|c| c.rescue_cap = cap)
    }

    /// Which model the default ladder's rescue asks once a fallback chain
    /// is exhausted (default: the one the client asked for).
    pub fn rescue_model(self, model: RescueModel) -> Self {
        self.with(|c| c.ladder = c.ladder.clone().rescue_model(model))
    }

    /// Keeps per-conversation state (rescues since output, sticky routes)
    /// in `store` (default: a [`MemoryStore`]). Share one store between
    /// replicas to give a conversation one rescue across all of them.
    pub fn store(self, store: impl ConversationStore) -> Self {
        self.with(|c| c.store = Arc::new(store))
    }

    /// Sends one record per refusal to `sink` (default: `()`, nowhere).
    pub fn telemetry(self, sink: impl TelemetrySink) -> Self {
        self.with(|c| c.telemetry = Arc::new(sink))
    }

    /// The request header that names a conversation (default
    /// [`header::CONVERSATION`](crate::header::CONVERSATION),
    /// `x-refusal-guard-conversation`); `None` turns the header off. The guard
    /// removes the header before forwarding.
    pub fn conversation_header(self, header: Option<HeaderName>) -> Self {
        self.with(|c| c.conversation_header = header)
    }

    /// Names the conversation of a request with a closure over its head and
    /// JSON body; `None` falls back to the header, then to the default key (a
    /// hash of the system prompt and the first user turn).
    pub fn conversation_key<F>(self, key: F) -> Self
    where
        F: Fn(&http::request::Parts, &Value) -> Option<String> + Send + Sync + 'static,
    {
        self.with(|c| c.conversation_fn = Some(Arc::new(key)))
    }

    /// Largest request body the guard keeps (default 16 MiB): read whole
    /// before a rewrite of the first request, else a copy kept while the
    /// body is forwarded as it arrives. A larger request is forwarded
    /// unguarded, never failed: one that declares a larger length from the
    /// start, and one that outgrows the bound after forwarding began, which
    /// goes on whole without a copy (nothing is recovered for it; logged).
    pub fn max_request_body(self, bytes: usize) -> Self {
        self.with(|c| c.max_request_body = bytes)
    }

    /// Largest non-streaming response body the guard buffers to judge
    /// (default 16 MiB). A larger one is passed through unjudged.
    pub fn max_response_body(self, bytes: usize) -> Self {
        self.with(|c| c.max_response_body = bytes)
    }

    /// Most stream bytes held back while no real output has been seen
    /// (default 4 MiB). Past it the guard commits to the stream as it is.
    pub fn max_hold_bytes(self, bytes: usize) -> Self {
        self.with(|c| c.max_hold_bytes = bytes)
    }

    /// Most SSE frames held back while no real output has been seen (default
    /// 20 000). Past it the guard commits to the stream as it is.
    pub fn max_hold_frames(self, frames: usize) -> Self {
        self.with(|c| c.max_hold_frames = frames)
    }

    /// Replaces the Anthropic server-side `fallbacks` list of requests that
    /// carry one with these models (at most three; the request's own model is
    /// left out). Requests without the list are left byte-identical unless
    /// [`inject_server_fallbacks`](Self::inject_server_fallbacks) is on.
    ///
    /// A request with `fallbacks: "default"` keeps it: the client chose the
    /// provider's own fallbacks. Server-side fallback exists on Anthropic's
    /// own API only, so requests to Claude on Vertex AI (or Foundry) never
    /// get, or keep, a retargeted list. A fallback that presents a fallback credit
    /// token carries no `fallbacks` at all (the API rejects the two
    /// together).
    pub fn retarget_fallbacks<I, M>(self, models: I) -> Self
    where
        I: IntoIterator<Item = M>,
        M: Into<String>,
    {
        let models = models.into_iter().map(Into::into).collect();
        self.with(|c| c.retarget = models)
    }

    /// Also adds the retarget list, and its beta header, to Anthropic
    /// requests that carry no `fallbacks` (off by default; first party
    /// only, never on Vertex AI).
    pub fn inject_server_fallbacks(self, inject: bool) -> Self {
        self.with(|c| c.inject_fallbacks = inject)
    }

    /// Limits, per requested model, the models a retarget may name in the
    /// server-side `fallbacks` (by default none is limited). Anthropic takes
    /// only the requested model's allowed fallback models (the Models API's
    /// `allowed_fallback_models`) and rejects the whole request otherwise;
    /// give each model you retarget the list it publishes, an empty one for
    /// a model without server-side fallback.
    ///
    /// Whatever the lists, the guard writes only entries the API accepts:
    /// the keys `model`, `max_tokens`, `thinking`, `output_config` and
    /// `speed`; never the requested model, none twice, at most three; no
    /// model that rejects the assistant prefill a request ends in. Should
    /// the provider reject the guard's list all the same (HTTP 400), the
    /// request is sent once more as the client wrote it, and that answer is
    /// the one served and decided; the attempt rejected is recorded.
    ///
    /// ```
    /// use refusal_guard::recovery::AllowedFallbacks;
    /// use refusal_guard::RefusalGuardLayer;
    ///
    /// let layer = RefusalGuardLayer::new()
    ///     .retarget_fallbacks(["claude-opus-4-8", "claude-sonnet-4-5"])
    ///     .inject_server_fallbacks(true)
    ///     .allowed_fallbacks(AllowedFallbacks::new().allow("claude-fable-5", ["claude-opus-4-8"]));
    /// # let _ = layer;
    /// ```
    pub fn allowed_fallbacks(self, allowed: AllowedFallbacks) -> Self {
        self.with(|c| c.allowed_fallbacks = c.allowed_fallbacks.clone().extend(allowed))
    }

    /// Client-side fallback chains of the default ladder: on an empty
    /// refusal, the request is sent again to each model of its chain in
    /// turn.
    pub fn fallback_chains(self, chains: FallbackChains) -> Self {
        self.with(|c| c.ladder = c.ladder.clone().fallback_chains(chains))
    }

    /// Lets fallback chain entries that name `provider` (`openai:gpt-5`,
    /// `gemini:gemini-2.5-pro`, `anthropic:claude-sonnet-4-5`) go to
    /// `endpoint`: the request is translated into that provider's API and
    /// sent with the operator's key (never the client's credentials, none
    /// of the client's headers), and the answer translated back into the
    /// client's API. An entry naming a provider without an endpoint is
    /// skipped and recorded (`no_endpoint`), as is a request that provider's
    /// API cannot express (`untranslatable`).
    ///
    /// ```
    /// use refusal_guard::recovery::{ApiKey, Endpoint, FallbackChains};
    /// use refusal_guard::refusal::Provider;
    /// use refusal_guard::RefusalGuardLayer;
    ///
    /// let openai = Endpoint::new("https://api.openai.com".parse().unwrap(), ApiKey::new("sk-x"));
    /// let layer = RefusalGuardLayer::new()
    ///     .fallback_chains(FallbackChains::new().chain("claude-opus-4-7", ["openai:gpt-5"]))
    ///     .cross_provider(Provider::OpenAi, openai);
    /// # let _ = layer;
    /// ```
    pub fn cross_provider(self, provider: Provider, endpoint: Endpoint) -> Self {
        self.with(|c| {
            c.cross_provider.insert(provider, endpoint);
        })
    }

    /// Lets the default ladder's chain step, once the model's chain is
    /// climbed, try the model Anthropic recommends in a refusal
    /// (`stop_details.recommended_model`, sent when the request carried
    /// server-side `fallbacks` the provider could not try), before the
    /// rescue (off by default). The recommendation is recorded either way.
    ///
    /// ```
    /// let layer = refusal_guard::RefusalGuardLayer::new().try_recommended_model(true);
    /// # let _ = layer;
    /// ```
    pub fn try_recommended_model(self, on: bool) -> Self {
        self.with(|c| c.ladder = c.ladder.clone().try_recommended_model(on))
    }

    /// The default ladder's steps per refusal category, in order (by
    /// default every category takes `fallback,rescue`, the whole ladder).
    /// Ignored when a custom [`policy`](Self::policy) is set.
    ///
    /// ```
    /// use refusal_guard::recovery::category::CategoryPolicy;
    /// use refusal_guard::RefusalGuardLayer;
    ///
    /// let policy: CategoryPolicy = "bio=stop;frontier_llm=stop;reasoning_extraction=stop".parse()?;
    /// let layer = RefusalGuardLayer::new().category_policy(policy);
    /// # let _ = layer;
    /// # Ok::<(), refusal_guard::recovery::category::PolicyError>(())
    /// ```
    pub fn category_policy(self, policy: CategoryPolicy) -> Self {
        self.with(|c| c.ladder = c.ladder.clone().category_policy(policy))
    }

    /// Asks Anthropic for fallback credit tokens on requests that have a
    /// chain, and presents them on the next fallback (on by default).
    pub fn fallback_credit(self, on: bool) -> Self {
        self.with(|c| c.fallback_credit = on)
    }

    /// Most requests sent upstream for one call, the original included
    /// (default 4).
    pub fn max_attempts(self, attempts: u32) -> Self {
        self.with(|c| c.budget.max_attempts = attempts.max(1))
    }

    /// Total time, from the original request, for holding it back and for
    /// every recovery attempt (default 10 minutes). Past it no recovery
    /// attempt starts and a running one is abandoned (the refused original
    /// is served); an original still held without a decision gets a `504`
    /// in the API's error shape, or a cut stream when its head has already
    /// gone out (keep-alive, live thinking).
    pub fn recovery_deadline(self, deadline: Duration) -> Self {
        self.with(|c| c.budget.deadline = deadline)
    }

    /// Longest wait from sending a request upstream (the original, each
    /// recovery attempt, and requests passed through unguarded) to its
    /// response head (default 10 minutes, as the official SDKs). Past it the
    /// client gets a `504` in the API's error shape; a recovery attempt that
    /// times out counts as an upstream error and the ladder goes on.
    ///
    /// ```
    /// use std::time::Duration;
    /// let layer = refusal_guard::RefusalGuardLayer::new()
    ///     .upstream_head_timeout(Duration::from_secs(120))
    ///     .upstream_idle_timeout(Duration::from_secs(60));
    /// # let _ = layer;
    /// ```
    pub fn upstream_head_timeout(self, timeout: Duration) -> Self {
        self.with(|c| c.head_timeout = timeout)
    }

    /// Longest gap between two chunks of an upstream body, while it is held
    /// and while it streams to the client, passed-through bodies included
    /// (default 5 minutes). Past it a body still held gets a `504` in the
    /// API's error shape and a body already streaming is cut with an
    /// [`UpstreamTimeout`](crate::guard::timeout::UpstreamTimeout) error, never
    /// ended cleanly.
    pub fn upstream_idle_timeout(self, timeout: Duration) -> Self {
        self.with(|c| c.idle_timeout = timeout)
    }

    /// Most bytes held at once across every stream held back and every
    /// guarded request body buffered by the services this layer builds
    /// (default 256 MiB). Past it a held stream is let through as it is (as
    /// at [`max_hold_bytes`](Self::max_hold_bytes), with a warning), and a
    /// request body that cannot be buffered is answered `503` in the API's
    /// error shape, without going upstream.
    pub fn max_total_held_bytes(self, bytes: usize) -> Self {
        self.with(|c| c.held = BytePool::new(bytes))
    }

    /// Once a fallback served a conversation, sends its later requests
    /// straight to that model for `ttl` (off by default).
    pub fn sticky_fallback(self, ttl: Duration) -> Self {
        self.with(|c| c.sticky_ttl = Some(ttl))
    }

    /// Treats an answer written as a prose refusal ("I can't help with
    /// that") as an empty refusal of kind text (category `text_refusal`), so
    /// the ladder applies (off by default: a false positive would throw a
    /// valid answer away). See [`crate::text`] for the detector.
    ///
    /// Streams are held while their opening text could still be a refusal:
    /// an ordinary answer is let through as soon as its opening rules a
    /// refusal out (typically within its first sentence or two), and never
    /// later than [`text_hold_bytes`](Self::text_hold_bytes) of text. Answers
    /// with a tool call are never judged.
    #[cfg(feature = "text")]
    #[cfg_attr(docsrs, doc(cfg(feature = "text")))]
    pub fn detect_text_refusals(self, on: bool) -> Self {
        self.with(|c| c.text_detection = on)
    }

    /// Most answer text held back for the text detector (default 2 KiB).
    #[cfg(feature = "text")]
    #[cfg_attr(docsrs, doc(cfg(feature = "text")))]
    pub fn text_hold_bytes(self, bytes: usize) -> Self {
        self.with(|c| c.text_hold_bytes = bytes.max(1))
    }

    /// Once a stream has been held for `after` without a decision (extended
    /// thinking can run for minutes), answers with the original response's
    /// head and sends SSE comments (`: keep-alive`), which every SSE parser
    /// ignores, every [`keepalive_interval`](Self::keepalive_interval) until
    /// the decision; whatever is served then (the original, or a recovered
    /// attempt) streams under that head. Off by default: the comments are
    /// bytes the provider did not send, and a response answered early carries
    /// its [`Refusal`](crate::Refusal) only in the
    /// [`RefusalHandle`](crate::RefusalHandle).
    ///
    /// ```
    /// use std::time::Duration;
    /// let layer = refusal_guard::RefusalGuardLayer::new()
    ///     .keepalive_after(Duration::from_secs(20))
    ///     .keepalive_interval(Duration::from_secs(10));
    /// # let _ = layer;
    /// ```
    pub fn keepalive_after(self, after: Duration) -> Self {
        self.with(|c| c.keepalive_after = Some(after))
    }

    /// Streams thinking as it comes instead of holding it (Anthropic streams;
    /// off by default). The client gets the original head at once, then
    /// `message_start`, pings and thinking blocks as they arrive; only what
    /// a decision depends on (text, tool use, the stop) is held. On an empty
    /// refusal after thinking, the recovered turn continues the same
    /// message: one `message_start`, its blocks numbered after the thinking
    /// already sent, one final `message_delta`. When nothing recovers, the
    /// rest of the original follows, so the client has it byte for byte.
    ///
    /// The typed [`Refusal`](crate::Refusal) then travels only in the
    /// [`RefusalHandle`](crate::RefusalHandle), since the head goes out before
    /// the decision.
    ///
    /// ```
    /// let layer = refusal_guard::RefusalGuardLayer::new().live_thinking(true);
    /// # let _ = layer;
    /// ```
    pub fn live_thinking(self, on: bool) -> Self {
        self.with(|c| c.live_thinking = on)
    }

    /// Continues an Anthropic response refused after real output (off by
    /// default). When the refusal's `stop_details` offers
    /// `fallback_has_prefill_claim: true` with a `fallback_credit_token`,
    /// the response started no tool call, and the client's model has a
    /// [fallback chain](Self::fallback_chains), the refusal's closing events
    /// are held back and the request goes to the chain's first model with
    /// the text already sent as an assistant prefill and the credit token.
    /// Its answer continues the same message: one `message_start`, block
    /// indices continuing, one final `message_delta`. If that attempt
    /// fails, refuses or does not answer within the
    /// [recovery deadline](Self::recovery_deadline), the client gets the
    /// held closing events byte for byte, as with the option off. The
    /// record says `fallback`, kind `partial`.
    ///
    /// Needs [`fallback_credit`](Self::fallback_credit) (on by default): the
    /// provider only offers the claim with a token. Live thinking, when on,
    /// takes precedence. A whole JSON message is continued the same way: its
    /// content array and the continuation's, merged, with the
    /// continuation's stop and usage.
    ///
    /// ```
    /// use refusal_guard::recovery::FallbackChains;
    ///
    /// let layer = refusal_guard::RefusalGuardLayer::new()
    ///     .fallback_chains(FallbackChains::new().chain("claude-opus-4-7", ["claude-sonnet-4-5"]))
    ///     .continue_partial(true);
    /// # let _ = layer;
    /// ```
    pub fn continue_partial(self, on: bool) -> Self {
        self.with(|c| c.continue_partial = on)
    }

    /// Time between keep-alive comments (default 15 s).
    pub fn keepalive_interval(self, interval: Duration) -> Self {
        self.with(|c| c.keepalive_interval = interval.max(Duration::from_millis(1)))
    }

    /// Names the tenant of each guarded request (default: [`OneTenant`],
    /// every request of the [default tenant](Tenant::default), with the
    /// layer's settings). A tenant's own settings replace the layer's for
    /// its requests; see [`crate::tenant`].
    ///
    /// ```
    /// use refusal_guard::tenant::{FromExtensions, FallbackAllowlist, Tenant};
    /// use refusal_guard::RefusalGuardLayer;
    ///
    /// // An authenticating layer in front inserts each request's `Tenant`.
    /// let layer = RefusalGuardLayer::new().tenants(FromExtensions);
    /// # let _ = layer;
    /// ```
    pub fn tenants(self, resolver: impl TenantResolver) -> Self {
        self.with(|c| c.resolver = Arc::new(resolver))
    }

    /// Orders each refusal's fallback chain with `routing` (default:
    /// [`FixedRouting`], the chain's own order); see [`crate::routing`].
    /// The chain stays the set of candidates.
    ///
    /// ```
    /// use refusal_guard::routing::LearnedRouting;
    ///
    /// let layer = refusal_guard::RefusalGuardLayer::new().route_by(LearnedRouting::new().exploration(0.05));
    /// # let _ = layer;
    /// ```
    pub fn route_by(self, routing: impl RoutingSource) -> Self {
        self.with(|c| c.routing = Arc::new(routing))
    }

    /// Marks a client-side fallback inside the served Anthropic stream with a
    /// `fallback` content block, as the provider marks its own (off by
    /// default: clients that predate the block type may reject it).
    pub fn handoff_marker(self, on: bool) -> Self {
        self.with(|c| c.handoff_marker = on)
    }
}

impl<S> Layer<S> for RefusalGuardLayer {
    type Service = RefusalGuard<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RefusalGuard::new(inner, self.config.clone())
    }
}
