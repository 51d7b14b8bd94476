//! Recovery configuration: the [`RecoveryPolicy`] that decides what to try
//! after an empty refusal ([`Ladder`] by default: fallback chain fallbacks, then
//! one reframed rescue), the rescue note, the runtime rescue switch and the
//! fallback chains. Nothing here sends a request or builds a response.

pub mod category;
mod endpoint;

pub use endpoint::{chain_prefix, fallback_api, parse_entry, ApiKey, Endpoint, PROVIDERS};

pub use category::CategoryPolicy;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::recovery::category::Step;
use crate::refusal::{
    Attempt, AttemptStep, DeadReason, Provider, RefusalKind, RefusalSignal, WireApi,
};

/// The reframing note the rescue appends as a user turn.
///
/// The note is honest: it names the category and the provider's explanation,
/// asks the model to restate the work in concrete defensive terms and
/// proceed, or to say plainly what it cannot do. It never tries to get around
/// the classifier.
///
/// A custom template may use `{category}` and `{explanation}`, replaced by
/// the provider's words, or by `unspecified` / `none given` when it sent none.
///
/// ```
/// use refusal_guard::recovery::RescueNote;
///
/// let note = RescueNote::template("Declined ({category}): {explanation}. Say what you can do.");
/// assert_eq!(
///     note.render(Some("cyber"), None),
///     "Declined (cyber): none given. Say what you can do."
/// );
/// assert!(RescueNote::default().render(Some("bio"), Some("why")).contains("bio"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RescueNote {
    template: String,
}

impl RescueNote {
    /// The note used unless configured otherwise.
    pub const DEFAULT_TEMPLATE: &'static str = "[refusal-guard] The previous attempt at this \
request was stopped by the provider's safety classifier before any output (category: {category}; \
provider's explanation: {explanation}). If this work is legitimate, restate it in concrete \
defensive terms (what is being protected, which system it is, and why the work is authorised), \
then proceed with it. If you cannot help with all or part of it, say plainly what you cannot do \
and why, so the user can decide how to continue.";

    /// A note from a template with `{category}` and `{explanation}` placeholders.
    pub fn template(template: impl Into<String>) -> Self {
        RescueNote {
            template: template.into(),
        }
    }

    /// The note for one refusal.
    pub fn render(&self, category: Option<&str>, explanation: Option<&str>) -> String {
        self.template
            .replace("{category}", category.unwrap_or("unspecified"))
            .replace("{explanation}", explanation.unwrap_or("none given"))
    }
}

impl Default for RescueNote {
    fn default() -> Self {
        Self::template(Self::DEFAULT_TEMPLATE)
    }
}

/// A shared on/off switch for the rescue step, flippable while running.
///
/// ```
/// use refusal_guard::RefusalGuardLayer;
///
/// let layer = RefusalGuardLayer::new();
/// let switch = layer.rescue_switch();
/// assert!(switch.is_on());
/// switch.set(false); // every service built from `layer` stops rescuing
/// assert!(!layer.rescue_switch().is_on());
/// ```
#[derive(Debug, Clone)]
pub struct RescueSwitch(Arc<AtomicBool>);

impl RescueSwitch {
    /// A switch in the given position.
    pub fn new(on: bool) -> Self {
        RescueSwitch(Arc::new(AtomicBool::new(on)))
    }

    /// Whether rescue is on.
    pub fn is_on(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Turns rescue on or off for every service sharing this switch.
    pub fn set(&self, on: bool) {
        self.0.store(on, Ordering::Relaxed);
    }
}

impl Default for RescueSwitch {
    fn default() -> Self {
        Self::new(true)
    }
}

/// Which model the rescue asks, once a fallback chain is exhausted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RescueModel {
    /// The model the client asked for (default).
    #[default]
    Original,
    /// The last model of the fallback chain that was tried.
    LastFallback,
}

/// Per-model client-side fallback chains.
///
/// ```
/// use refusal_guard::recovery::FallbackChains;
///
/// let chains = FallbackChains::new().chain("claude-opus-4-7", ["claude-sonnet-4-5"]);
/// assert_eq!(chains.for_model("claude-opus-4-7"), ["claude-sonnet-4-5".to_string()]);
/// assert!(chains.for_model("other").is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FallbackChains(HashMap<String, Vec<String>>);

impl FallbackChains {
    /// No chains.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the chain tried when `model` refuses.
    pub fn chain<I, M>(mut self, model: impl Into<String>, fallbacks: I) -> Self
    where
        I: IntoIterator<Item = M>,
        M: Into<String>,
    {
        self.0.insert(
            model.into(),
            fallbacks.into_iter().map(Into::into).collect(),
        );
        self
    }

    /// Adds every chain of `other`, replacing chains for the same models.
    ///
    /// ```
    /// use refusal_guard::recovery::FallbackChains;
    ///
    /// let chains = FallbackChains::new()
    ///     .chain("a", ["b"])
    ///     .extend(FallbackChains::new().chain("c", ["d"]));
    /// assert_eq!(chains.for_model("c"), ["d".to_string()]);
    /// assert_eq!(chains.for_model("a"), ["b".to_string()]);
    /// ```
    pub fn extend(mut self, other: FallbackChains) -> Self {
        self.0.extend(other.0);
        self
    }

    /// Every entry of every chain (the proxy reads which providers they name).
    pub fn entries(&self) -> impl Iterator<Item = &String> {
        self.0.values().flatten()
    }

    /// The chain for a model, empty when none is configured.
    pub fn for_model(&self, model: &str) -> &[String] {
        self.0.get(model).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Whether no chain is configured.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Per requested model, the models the guard may name in the Anthropic
/// server-side `fallbacks` it writes (a retarget): the provider accepts
/// only the requested model's own allowed fallback models (the Models API
/// lists them as `allowed_fallback_models`), and rejects the whole request
/// up front otherwise. A model given no list is not limited; one given an
/// empty list gets no `fallbacks` from the guard at all (a model that does
/// not support the parameter).
///
/// ```
/// use refusal_guard::recovery::AllowedFallbacks;
///
/// let allowed = AllowedFallbacks::new()
///     .allow("claude-fable-5", ["claude-opus-4-8"])
///     .allow("claude-sonnet-5", Vec::<String>::new());
/// assert_eq!(allowed.for_model("claude-fable-5"), Some(&["claude-opus-4-8".to_string()][..]));
/// assert_eq!(allowed.for_model("claude-sonnet-5"), Some(&[][..]));
/// assert_eq!(allowed.for_model("claude-opus-4-7"), None);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedFallbacks(HashMap<String, Vec<String>>);

impl AllowedFallbacks {
    /// No model limited.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets (or replaces) the models requests to `requested` may name.
    pub fn allow<I, M>(mut self, requested: impl Into<String>, models: I) -> Self
    where
        I: IntoIterator<Item = M>,
        M: Into<String>,
    {
        let models = models.into_iter().map(Into::into).collect();
        self.0.insert(requested.into(), models);
        self
    }

    /// Adds every list of `other`, replacing lists for the same models.
    pub fn extend(mut self, other: AllowedFallbacks) -> Self {
        self.0.extend(other.0);
        self
    }

    /// The models requests to `requested` may name, `None` when not limited.
    pub fn for_model(&self, requested: &str) -> Option<&[String]> {
        self.0.get(requested).map(Vec::as_slice)
    }

    /// Whether no model is limited.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Limits on the work one call may cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budget {
    /// Most requests sent upstream for one call, the original included.
    pub(crate) max_attempts: u32,
    /// Longest time, from the original request, after which no new recovery
    /// attempt starts and a running one is abandoned.
    pub(crate) deadline: Duration,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            max_attempts: 4,
            deadline: Duration::from_secs(10 * 60),
        }
    }
}

/// What a [`RecoveryPolicy`] is asked about: the latest refusal of a call and
/// what was tried for it so far.
///
/// ```
/// use refusal_guard::recovery::{NextStep, RecoveryState};
///
/// fn describe(state: &RecoveryState<'_>) -> String {
///     format!(
///         "{} refused ({}) after {} attempt(s), {:?} in",
///         state.provider(),
///         state.category().unwrap_or("no category"),
///         state.attempts().len(),
///         state.elapsed(),
///     )
/// }
/// # let _ = describe;
/// ```
#[derive(Debug)]
pub struct RecoveryState<'a> {
    pub(crate) provider: Provider,
    pub(crate) wire_api: WireApi,
    pub(crate) category: Option<&'a str>,
    pub(crate) explanation: Option<&'a str>,
    pub(crate) signal: RefusalSignal,
    pub(crate) model: Option<&'a str>,
    pub(crate) attempts: &'a [Attempt],
    pub(crate) elapsed: Duration,
    pub(crate) fallbacks: usize,
    pub(crate) rescues: usize,
    pub(crate) retargets: usize,
    pub(crate) last_failure: Option<DeadReason>,
    /// The latest retry model a refusal of this call recommended.
    pub(crate) recommended: Option<&'a str>,
    /// The layer's fallback chain for the model, in the order the routing
    /// source gave for this refusal.
    pub(crate) order: Option<&'a [String]>,
}

impl<'a> RecoveryState<'a> {
    /// The provider that refused.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// The wire API of the request.
    pub fn wire_api(&self) -> WireApi {
        self.wire_api
    }

    /// The category of the latest refusal in the provider's words (`cyber`,
    /// `content_filter`, `SAFETY`, ...), when it gave one.
    pub fn category(&self) -> Option<&'a str> {
        self.category
    }

    /// The provider's explanation of the latest refusal, when it gave one.
    pub fn explanation(&self) -> Option<&'a str> {
        self.explanation
    }

    /// How the latest refusal was expressed.
    pub fn signal(&self) -> RefusalSignal {
        self.signal
    }

    /// Empty or partial. Only empty refusals are recovered, so this is
    /// [`RefusalKind::Empty`] today.
    pub fn kind(&self) -> RefusalKind {
        RefusalKind::Empty
    }

    /// The model the client asked for.
    pub fn model(&self) -> Option<&'a str> {
        self.model
    }

    /// The model the provider suggested retrying on, in the latest refusal
    /// of this call that suggested one (Anthropic
    /// `stop_details.recommended_model`: the request carried server-side
    /// `fallbacks`, and the one the provider would have tried was rate
    /// limited or overloaded), unless a request of this call already went
    /// to it.
    ///
    /// ```
    /// use refusal_guard::recovery::{NextStep, RecoveryState};
    /// use refusal_guard::refusal::DeadReason;
    ///
    /// // Take the provider's suggestion, else stop.
    /// let policy = |state: &RecoveryState<'_>| match state.recommended_model() {
    ///     Some(model) => NextStep::Fallback(model.to_owned()),
    ///     None => NextStep::Stop(DeadReason::PolicyStop),
    /// };
    /// let layer = refusal_guard::RefusalGuardLayer::new().policy(policy);
    /// # let _ = layer;
    /// ```
    pub fn recommended_model(&self) -> Option<&'a str> {
        let model = self.recommended?;
        let tried = self
            .attempts
            .iter()
            .any(|a| a.step != AttemptStep::Rescue && a.model.as_deref() == Some(model));
        (!tried).then_some(model)
    }

    /// `chain` in the order the layer's routing source gave for this
    /// refusal (the `routing` module, which sits above this one): its
    /// entries the source ordered first, in that order, then the others as
    /// they were. With the default fixed routing, `chain` as it is. The order is fixed for the whole refusal, so a policy may
    /// index it by [`fallbacks_tried`](Self::fallbacks_tried).
    ///
    /// ```
    /// use refusal_guard::recovery::{NextStep, RecoveryState};
    /// use refusal_guard::refusal::DeadReason;
    ///
    /// let chain = vec!["claude-sonnet-4-5".to_owned(), "openai:gpt-5".to_owned()];
    /// let policy = move |state: &RecoveryState<'_>| match state.ranked(&chain).get(state.fallbacks_tried()) {
    ///     Some(model) => NextStep::Fallback(model.clone()),
    ///     None => NextStep::Stop(DeadReason::StillRefused),
    /// };
    /// # let _ = refusal_guard::RefusalGuardLayer::new().policy(policy);
    /// ```
    pub fn ranked<'c>(&self, chain: &'c [String]) -> std::borrow::Cow<'c, [String]> {
        let Some(order) = self.order else {
            return std::borrow::Cow::Borrowed(chain);
        };
        let position = |entry: &String| order.iter().position(|o| o == entry).unwrap_or(usize::MAX);
        let mut ranked = chain.to_vec();
        ranked.sort_by_key(position);
        std::borrow::Cow::Owned(ranked)
    }

    /// Every request sent upstream for the call so far, the original first.
    pub fn attempts(&self) -> &'a [Attempt] {
        self.attempts
    }

    /// Time since the client's request arrived.
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }

    /// Fallback steps taken so far (including any whose request could not
    /// be built).
    pub fn fallbacks_tried(&self) -> usize {
        self.fallbacks
    }

    /// Rescue steps taken so far.
    pub fn rescues_tried(&self) -> usize {
        self.rescues
    }

    /// Retarget steps taken so far (including skipped ones).
    pub fn retargets_tried(&self) -> usize {
        self.retargets
    }

    /// Why the latest step did not recover, if one was taken.
    pub fn last_failure(&self) -> Option<DeadReason> {
        self.last_failure
    }
}

/// A rescue step: the note appended as a user turn, and the model to ask
/// (the client's own unless set).
///
/// ```
/// use refusal_guard::recovery::Rescue;
///
/// let rescue = Rescue::new("Restate the task defensively.").on_model("claude-sonnet-4-5");
/// assert_eq!(rescue.note(), "Restate the task defensively.");
/// assert_eq!(rescue.model(), Some("claude-sonnet-4-5"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rescue {
    note: String,
    model: Option<String>,
}

impl Rescue {
    /// A rescue with this note, on the client's model.
    pub fn new(note: impl Into<String>) -> Self {
        Rescue {
            note: note.into(),
            model: None,
        }
    }

    /// Asks `model` instead of the client's.
    pub fn on_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// The note.
    pub fn note(&self) -> &str {
        &self.note
    }

    /// The model asked, when not the client's.
    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }
}

/// What to do next about an empty refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NextStep {
    /// Send the request again to this model.
    Fallback(String),
    /// Send the request again with a reframing note. The guard still keeps
    /// the conversation to its rescue cap and honours the runtime
    /// [`RescueSwitch`].
    Rescue(Rescue),
    /// Send the refused request again to the same model with the layer's
    /// [retarget list](crate::RefusalGuardLayer::retarget_fallbacks) as
    /// Anthropic server-side `fallbacks`, so the provider climbs it. The
    /// guard skips the step (and asks the policy again) when no retarget
    /// list is configured, when the request already carried server-side
    /// fallbacks (they were climbed already), or for another provider.
    Retarget,
    /// Recover no further: the client gets the refusal as sent, recorded
    /// dead for this reason.
    Stop(DeadReason),
}

/// Decides, refusal by refusal, what the guard tries next: in the spirit of
/// tower's `retry::Policy`.
///
/// The guard asks after the original refused and again after every step
/// that did not recover, until the policy says [`NextStep::Stop`] or the
/// call's budget ([`max_attempts`](crate::RefusalGuardLayer::max_attempts),
/// [`recovery_deadline`](crate::RefusalGuardLayer::recovery_deadline)) runs
/// out. [`Ladder`] is the default. Any
/// `Fn(&RecoveryState) -> NextStep + Send + Sync + 'static` closure is a
/// policy.
///
/// ```
/// use refusal_guard::recovery::{NextStep, RecoveryState, Rescue};
/// use refusal_guard::refusal::DeadReason;
/// use refusal_guard::RefusalGuardLayer;
///
/// // Never retry `bio`; only fall back for `reasoning_extraction`; rescue
/// // everything else once.
/// let layer = RefusalGuardLayer::new().policy(|state: &RecoveryState<'_>| {
///     match state.category() {
///         Some("bio") => NextStep::Stop(DeadReason::PolicyStop),
///         Some("reasoning_extraction") if state.fallbacks_tried() == 0 => {
///             NextStep::Fallback("claude-sonnet-4-5".into())
///         }
///         Some("reasoning_extraction") => NextStep::Stop(DeadReason::StillRefused),
///         _ if state.rescues_tried() == 0 => NextStep::Rescue(Rescue::new("Say what you can do.")),
///         _ => NextStep::Stop(state.last_failure().unwrap_or(DeadReason::StillRefused)),
///     }
/// });
/// # let _ = layer;
/// ```
pub trait RecoveryPolicy: Send + Sync + 'static {
    /// The next step for this refusal.
    fn next_step(&self, state: &RecoveryState<'_>) -> NextStep;
}

impl<F> RecoveryPolicy for F
where
    F: Fn(&RecoveryState<'_>) -> NextStep + Send + Sync + 'static,
{
    fn next_step(&self, state: &RecoveryState<'_>) -> NextStep {
        self(state)
    }
}

impl<P: RecoveryPolicy + ?Sized> RecoveryPolicy for Arc<P> {
    fn next_step(&self, state: &RecoveryState<'_>) -> NextStep {
        (**self).next_step(state)
    }
}

/// The default policy: each model of the client model's fallback chain in
/// turn, then one reframed rescue, then stop; or, per refusal category, the
/// steps a [`CategoryPolicy`] gives it, in its order. A category that is no
/// safety decline (a copyright stop, `recitation`) climbs the chain without
/// the rescue, whose note speaks of a safety classifier, and is dead with
/// [`DeadReason::NotSafety`] when no fallback serves; the operator's own policy
/// (a Bedrock guardrail, Model Armor) stops (see
/// [`CategoryKind`](category::CategoryKind)).
///
/// The category of the latest refusal decides: when a fallback refuses
/// with another category, that category's steps apply from then on (a step
/// already taken is not taken again). A step list that ends without a
/// recovery stops with the last step's failure, or
/// [`DeadReason::PolicyStop`] when the policy took no step at all.
///
/// The layer's shorthand methods
/// ([`fallback_chains`](crate::RefusalGuardLayer::fallback_chains),
/// [`rescue_note`](crate::RefusalGuardLayer::rescue_note),
/// [`rescue_model`](crate::RefusalGuardLayer::rescue_model)) configure the
/// ladder the layer uses unless given another policy.
///
/// ```
/// use refusal_guard::recovery::{FallbackChains, Ladder, RescueModel, RescueNote};
/// use refusal_guard::RefusalGuardLayer;
///
/// let ladder = Ladder::new()
///     .fallback_chains(FallbackChains::new().chain("claude-opus-4-7", ["claude-sonnet-4-5"]))
///     .rescue_note(RescueNote::template("Declined ({category}). Restate defensively."))
///     .rescue_model(RescueModel::LastFallback);
/// let layer = RefusalGuardLayer::new().policy(ladder);
/// # let _ = layer;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ladder {
    chains: FallbackChains,
    note: RescueNote,
    rescue_model: RescueModel,
    no_rescue: bool,
    categories: CategoryPolicy,
    recommended: bool,
}

impl Ladder {
    /// No fallback chains; a rescue with the default note on the client's
    /// model.
    pub fn new() -> Self {
        Ladder::default()
    }

    /// The fallback chains to climb before the rescue.
    pub fn fallback_chains(mut self, chains: FallbackChains) -> Self {
        self.chains = chains;
        self
    }

    /// The note the rescue appends.
    pub fn rescue_note(mut self, note: RescueNote) -> Self {
        self.note = note;
        self
    }

    /// Which model the rescue asks.
    pub fn rescue_model(mut self, model: RescueModel) -> Self {
        self.rescue_model = model;
        self
    }

    /// Whether the ladder ends in a rescue (on by default).
    pub fn rescue(mut self, on: bool) -> Self {
        self.no_rescue = !on;
        self
    }

    /// Whether the chain step, once the model's chain is climbed, also
    /// tries the model the provider recommends
    /// ([`RecoveryState::recommended_model`]), before the rescue (off by
    /// default: the operator chooses which models a request may reach).
    ///
    /// ```
    /// use refusal_guard::recovery::Ladder;
    ///
    /// let ladder = Ladder::new().try_recommended_model(true);
    /// # let _ = ladder;
    /// ```
    pub fn try_recommended_model(mut self, on: bool) -> Self {
        self.recommended = on;
        self
    }

    /// The steps per refusal category (replacing any set before).
    ///
    /// ```
    /// use refusal_guard::recovery::category::CategoryPolicy;
    /// use refusal_guard::recovery::Ladder;
    ///
    /// let policy: CategoryPolicy = "bio=stop;frontier_llm=stop;*=fallback,rescue".parse()?;
    /// let ladder = Ladder::new().category_policy(policy);
    /// # let _ = ladder;
    /// # Ok::<(), refusal_guard::recovery::category::PolicyError>(())
    /// ```
    pub fn category_policy(mut self, policy: CategoryPolicy) -> Self {
        self.categories = policy;
        self
    }

    /// Makes `category` a category of this kind; see
    /// [`CategoryPolicy::treat`].
    ///
    /// ```
    /// use refusal_guard::recovery::category::{CategoryKind, Step};
    /// use refusal_guard::recovery::Ladder;
    ///
    /// let ladder = Ladder::new().treat("frontier_llm", CategoryKind::NotSafety);
    /// assert_eq!(ladder.categories().steps_for(Some("frontier_llm")), [Step::Fallback]);
    /// ```
    pub fn treat(mut self, category: impl Into<String>, kind: category::CategoryKind) -> Self {
        self.categories = self.categories.treat(category, kind);
        self
    }

    /// The steps a refusal of `category` takes (`*` for every category
    /// without its own), in order; see [`CategoryPolicy::category`].
    ///
    /// ```
    /// use refusal_guard::recovery::category::Step;
    /// use refusal_guard::recovery::Ladder;
    ///
    /// let ladder = Ladder::new()
    ///     .for_category("bio", [Step::Stop])
    ///     .for_category("reasoning_extraction", [Step::Fallback]);
    /// assert_eq!(ladder.categories().steps_for(Some("bio")), [Step::Stop]);
    /// ```
    pub fn for_category<I>(mut self, category: impl Into<String>, steps: I) -> Self
    where
        I: IntoIterator<Item = Step>,
    {
        self.categories = self.categories.category(category, steps);
        self
    }

    /// The chains this ladder climbs.
    pub fn chains(&self) -> &FallbackChains {
        &self.chains
    }

    /// The steps per refusal category.
    pub fn categories(&self) -> &CategoryPolicy {
        &self.categories
    }

    fn rescue_step(&self, state: &RecoveryState<'_>) -> NextStep {
        let note = self.note.render(state.category(), state.explanation());
        let rescue = Rescue::new(note);
        let last_fallback = state
            .attempts()
            .iter()
            .rev()
            .find(|a| a.step == AttemptStep::Fallback)
            .and_then(|a| a.model.clone());
        NextStep::Rescue(match (self.rescue_model, last_fallback) {
            (RescueModel::LastFallback, Some(fallback)) => rescue.on_model(fallback),
            _ => rescue,
        })
    }
}

impl RecoveryPolicy for Ladder {
    fn next_step(&self, state: &RecoveryState<'_>) -> NextStep {
        let plan = self.categories.plan(state.category());
        let steps = &plan.steps;
        let chain = state.model().map_or(&[][..], |m| self.chains.for_model(m));
        let chain = state.ranked(chain);
        for step in steps {
            match step {
                Step::Retarget if state.retargets_tried() == 0 => return NextStep::Retarget,
                Step::Fallback => {
                    if let Some(model) = chain.get(state.fallbacks_tried()) {
                        return NextStep::Fallback(model.clone());
                    }
                    if let Some(model) = state.recommended_model().filter(|_| self.recommended) {
                        return NextStep::Fallback(model.to_owned());
                    }
                }
                Step::Rescue if state.rescues_tried() == 0 && !self.no_rescue => {
                    return self.rescue_step(state)
                }
                Step::Stop => return NextStep::Stop(DeadReason::PolicyStop),
                _ => {}
            }
        }
        // A rescue left out because its note would be untrue names the
        // reason, as a structured-output call's skipped rescue does.
        if plan.rescue_withheld {
            return NextStep::Stop(DeadReason::NotSafety);
        }
        // Every step taken: why the last one failed, else why none was.
        let untried = if steps.contains(&Step::Rescue) && self.no_rescue {
            DeadReason::RescueOff
        } else if state.attempts().len() > 1 || state.rescues_tried() > 0 {
            DeadReason::StillRefused
        } else {
            DeadReason::PolicyStop
        };
        NextStep::Stop(state.last_failure().unwrap_or(untried))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPUS: &str = "claude-opus-4-7";

    /// The steps `ladder` takes for a refusal of `category` when every step
    /// fails (a step sent is refused again; a retarget is sent only when
    /// `retarget_sent`), as words, ending with the stop reason.
    fn climb(ladder: &Ladder, category: Option<&str>, retarget_sent: bool) -> String {
        climb_recommended(ladder, category, retarget_sent, None)
    }

    /// [`climb`], with every refusal recommending `recommended`.
    fn climb_recommended(
        ladder: &Ladder,
        category: Option<&str>,
        retarget_sent: bool,
        recommended: Option<&str>,
    ) -> String {
        let attempt = |step: &str, model: &str| -> Attempt {
            let attempt = serde_json::json!({
                "step": step, "model": model, "result": "refused", "latency_ms": 1
            });
            serde_json::from_value(attempt).unwrap()
        };
        let mut attempts = vec![attempt("original", OPUS)];
        let (mut fallbacks, mut rescues, mut retargets) = (0, 0, 0);
        let mut last_failure = None;
        let mut taken = Vec::new();
        for _ in 0..10 {
            let state = RecoveryState {
                provider: Provider::Anthropic,
                wire_api: WireApi::AnthropicMessages,
                category,
                explanation: None,
                signal: RefusalSignal::StopReason,
                model: Some(OPUS),
                attempts: &attempts,
                elapsed: Duration::ZERO,
                fallbacks,
                rescues,
                retargets,
                last_failure,
                recommended,
                order: None,
            };
            match ladder.next_step(&state) {
                NextStep::Fallback(model) => {
                    fallbacks += 1;
                    taken.push(format!("fallback:{model}"));
                    attempts.push(attempt("fallback", &model));
                }
                NextStep::Rescue(rescue) => {
                    rescues += 1;
                    let model = rescue.model().unwrap_or(OPUS).to_owned();
                    taken.push(format!("rescue:{model}"));
                    attempts.push(attempt("rescue", &model));
                }
                NextStep::Retarget => {
                    retargets += 1;
                    if !retarget_sent {
                        continue;
                    }
                    taken.push("retarget".to_owned());
                    attempts.push(attempt("retarget", OPUS));
                }
                NextStep::Stop(reason) => {
                    taken.push(format!("stop:{}", reason.as_str()));
                    return taken.join(" ");
                }
            }
            last_failure = Some(DeadReason::StillRefused);
        }
        panic!("the ladder never stopped: {taken:?}");
    }

    #[test]
    fn each_category_climbs_the_steps_its_spec_gives_in_order() {
        let chains = FallbackChains::new().chain(OPUS, ["sonnet", "haiku"]);
        let ladder = |spec: Option<&str>| {
            let ladder = Ladder::new().fallback_chains(chains.clone());
            match spec {
                Some(spec) => ladder.category_policy(spec.parse().unwrap()),
                None => ladder,
            }
        };
        let whole = "fallback:sonnet fallback:haiku rescue:claude-opus-4-7 stop:still_refused";
        let spec = "bio=stop;cyber=fallback;reasoning_extraction=rescue,fallback;\
                    SAFETY=retarget,rescue;frontier_llm=retarget;*=fallback,rescue";
        let no_star = "bio=stop;cyber=rescue";
        #[rustfmt::skip]
        let table: &[(Option<&str>, Option<&str>, bool, &str)] = &[
            // The default: every category, named or not, climbs the whole ladder.
            (None, Some("bio"), true, whole),
            (None, Some("cyber"), true, whole),
            (None, None, true, whole),
            (Some(spec), Some("bio"), true, "stop:policy_stop"),
            (Some(spec), Some("BIO"), true, "stop:policy_stop"),
            (Some(spec), Some("cyber"), true, "fallback:sonnet fallback:haiku stop:still_refused"),
            (Some(spec), Some("reasoning_extraction"), true,
                "rescue:claude-opus-4-7 fallback:sonnet fallback:haiku stop:still_refused"),
            (Some(spec), Some("safety"), true, "retarget rescue:claude-opus-4-7 stop:still_refused"),
            // A retarget that cannot be sent is skipped.
            (Some(spec), Some("SAFETY"), false, "rescue:claude-opus-4-7 stop:still_refused"),
            (Some(spec), Some("frontier_llm"), true, "retarget stop:still_refused"),
            (Some(spec), Some("frontier_llm"), false, "stop:policy_stop"),
            (Some(spec), Some("content_filter"), true, whole),
            (Some(spec), Some("PROHIBITED_CONTENT"), true, whole),
            (Some(spec), None, true, whole),
            // Not safety: the steps less the rescue, dead for that reason;
            // its own entry is its steps, as any category's.
            (None, Some("recitation"), true, "fallback:sonnet fallback:haiku stop:not_safety"),
            (Some(spec), Some("RECITATION"), true, "fallback:sonnet fallback:haiku stop:not_safety"),
            (Some("*=rescue"), Some("recitation"), true, "stop:not_safety"),
            (Some("*=fallback"), Some("recitation"), true,
                "fallback:sonnet fallback:haiku stop:still_refused"),
            (Some("recitation=fallback,rescue"), Some("recitation"), true, whole),
            // The operator's own policy stops unless it has an entry.
            (None, Some("MODEL_ARMOR"), true, "stop:policy_stop"),
            (Some(spec), Some("guardrail_intervened"), true, "stop:policy_stop"),
            (Some("MODEL_ARMOR=fallback"), Some("MODEL_ARMOR"), true,
                "fallback:sonnet fallback:haiku stop:still_refused"),
            // Without `*`, other categories take the default steps.
            (Some(no_star), Some("bio"), true, "stop:policy_stop"),
            (Some(no_star), Some("cyber"), true, "rescue:claude-opus-4-7 stop:still_refused"),
            (Some(no_star), Some("text_refusal"), true, whole),
            (Some(no_star), None, true, whole),
        ];
        for (spec, category, retarget_sent, expected) in table {
            let taken = climb(&ladder(*spec), *category, *retarget_sent);
            assert_eq!(taken, *expected, "{spec:?} × {category:?}");
        }
    }

    #[test]
    fn rescue_off_still_stops_with_rescue_off_and_chain_only_with_policy_stop() {
        let chains = FallbackChains::new().chain(OPUS, ["sonnet"]);
        let off = Ladder::new().fallback_chains(chains.clone()).rescue(false);
        assert_eq!(
            climb(&off, Some("cyber"), true),
            "fallback:sonnet stop:still_refused"
        );
        assert_eq!(
            climb(&Ladder::new().rescue(false), Some("cyber"), true),
            "stop:rescue_off"
        );
        let chain_only = Ladder::new().for_category("*", [Step::Fallback]);
        assert_eq!(climb(&chain_only, Some("cyber"), true), "stop:policy_stop");
        // A rescue left out for a category that is not safety says so,
        // chain or none, rescue on or off.
        assert_eq!(
            climb(&Ladder::new(), Some("recitation"), true),
            "stop:not_safety"
        );
        assert_eq!(
            climb(&off, Some("recitation"), true),
            "fallback:sonnet stop:not_safety"
        );
        let treated = Ladder::new().treat("cyber", category::CategoryKind::NotSafety);
        assert_eq!(climb(&treated, Some("cyber"), true), "stop:not_safety");
        let last_fallback = Ladder::new()
            .fallback_chains(chains)
            .rescue_model(RescueModel::LastFallback);
        assert_eq!(
            climb(&last_fallback, None, true),
            "fallback:sonnet rescue:sonnet stop:still_refused"
        );
    }

    #[test]
    fn the_recommended_model_is_tried_after_the_chain_once_when_allowed() {
        let chains = FallbackChains::new().chain(OPUS, ["sonnet"]);
        let ladder = Ladder::new().fallback_chains(chains);
        let recommended = Some("claude-haiku-5-5");
        // Off by default: the recommendation is recorded, never followed.
        assert_eq!(
            climb_recommended(&ladder, Some("cyber"), true, recommended),
            "fallback:sonnet rescue:claude-opus-4-7 stop:still_refused"
        );
        let allowed = ladder.clone().try_recommended_model(true);
        assert_eq!(
            climb_recommended(&allowed, Some("cyber"), true, recommended),
            "fallback:sonnet fallback:claude-haiku-5-5 rescue:claude-opus-4-7 stop:still_refused"
        );
        // A recommendation of a model already asked is not followed again.
        assert_eq!(
            climb_recommended(&allowed, Some("cyber"), true, Some("sonnet")),
            "fallback:sonnet rescue:claude-opus-4-7 stop:still_refused"
        );
        // Without a chain step, nothing follows it either.
        let rescue_only = allowed.for_category("*", [Step::Rescue]);
        assert_eq!(
            climb_recommended(&rescue_only, None, true, recommended),
            "rescue:claude-opus-4-7 stop:still_refused"
        );
    }
}
