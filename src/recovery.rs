//! The recovery ladder: fallback chain hops, then one reframed rescue, then
//! dead. This file holds the ladder's configuration pieces: the rescue note,
//! the runtime switch and the per-call budget.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

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

    /// The chain for a model, empty when none is configured.
    pub fn for_model(&self, model: &str) -> &[String] {
        self.0.get(model).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Whether no chain is configured.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Limits on the work one call may cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Most requests sent upstream for one call, the original included.
    pub max_attempts: u32,
    /// Longest time, from the original request, after which no new recovery
    /// attempt starts and a running one is abandoned.
    pub deadline: Duration,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            max_attempts: 4,
            deadline: Duration::from_secs(10 * 60),
        }
    }
}
