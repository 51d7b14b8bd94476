//! Tenants: each client its own recovery settings behind one guard.
//!
//! A [`Tenant`] is a name and the settings that replace the layer's for its
//! requests: the steps per refusal category, the fallback chains, which
//! models and providers a recovery fallback may go to ([`FallbackAllowlist`]),
//! whether the rescue and the text detector are on, how many recovery attempts
//! it may cause per hour, and which of the operator's cross-provider keys
//! its fallbacks may spend. What a tenant leaves unset is the layer's.
//!
//! A [`TenantResolver`] names the tenant of each guarded request from its
//! head, in the spirit of tower's `retry::Policy`: [`OneTenant`] (the
//! default) gives every request the same one; [`FromExtensions`] takes the
//! tenant an earlier layer (an authenticating one, as the proxy's tenants
//! file does) put in the request's extensions.
//!
//! The tenant's name is in every refusal record (`telemetry`, above this module)
//! and metric of its requests, and scopes its conversations: two tenants
//! never share a rescue count or a sticky route.
//!
//! ```
//! use refusal_guard::recovery::FallbackChains;
//! use refusal_guard::refusal::Provider;
//! use refusal_guard::tenant::{FallbackAllowlist, Tenant};
//! use refusal_guard::RefusalGuardLayer;
//!
//! let red_team = Tenant::named("red-team")
//!     .category_policy("cyber=fallback,rescue;*=stop".parse()?)
//!     .fallback_chains(FallbackChains::new().chain("claude-opus-4-7", ["claude-sonnet-4-5"]))
//!     .allow(FallbackAllowlist::new().models(["claude-sonnet-4-5"]).providers([Provider::Anthropic]))
//!     .recovery_attempts_per_hour(100);
//! let layer = RefusalGuardLayer::new().tenants(move |_head: &http::request::Parts| red_team.clone());
//! # let _ = layer;
//! # Ok::<(), refusal_guard::recovery::category::PolicyError>(())
//! ```

mod allow;
mod attempts;

pub use allow::FallbackAllowlist;

use std::fmt;
use std::sync::Arc;

use crate::recovery::category::CategoryPolicy;
use crate::recovery::FallbackChains;
use crate::refusal::Provider;

use attempts::AttemptWindow;

/// One tenant: a name and the settings that replace the layer's for its
/// requests. Cheap to clone (shared).
///
/// [`Tenant::default`] is the one tenant of a layer without tenants: named
/// `default`, nothing of its own, every operator key allowed (it is the
/// operator's). [`Tenant::named`] starts with nothing of its own either,
/// but no operator key until [`operator_keys`](Tenant::operator_keys)
/// grants some.
///
/// ```
/// use refusal_guard::tenant::Tenant;
///
/// let tenant = Tenant::named("team-a").rescue(false).detect_text_refusals(true);
/// assert_eq!(tenant.name(), "team-a");
/// assert_eq!(tenant.rescue_setting(), Some(false));
/// assert_eq!(Tenant::default().name(), "default");
/// ```
#[derive(Clone)]
pub struct Tenant(Arc<Settings>);

#[derive(Clone)]
struct Settings {
    name: String,
    policy: Option<CategoryPolicy>,
    chains: Option<FallbackChains>,
    allow: FallbackAllowlist,
    rescue: Option<bool>,
    text_detection: Option<bool>,
    recovery_attempts_per_hour: Option<u32>,
    /// `None`: every operator key.
    operator_keys: Option<Vec<Provider>>,
    attempts: Arc<AttemptWindow>,
}

impl Default for Tenant {
    /// The one default tenant of the process: every layer's and resolver's
    /// is the same, so that a guard sees at once that a request is of it.
    fn default() -> Self {
        static DEFAULT: std::sync::OnceLock<Tenant> = std::sync::OnceLock::new();
        DEFAULT
            .get_or_init(|| {
                Tenant(Arc::new(Settings {
                    name: Tenant::DEFAULT_NAME.to_owned(),
                    policy: None,
                    chains: None,
                    allow: FallbackAllowlist::new(),
                    rescue: None,
                    text_detection: None,
                    recovery_attempts_per_hour: None,
                    operator_keys: None,
                    attempts: Arc::default(),
                }))
            })
            .clone()
    }
}

impl fmt::Debug for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.0;
        f.debug_struct("Tenant")
            .field("name", &s.name)
            .field("policy", &s.policy.as_ref().map(ToString::to_string))
            .field("chains", &s.chains)
            .field("allow", &s.allow)
            .field("rescue", &s.rescue)
            .field("text_detection", &s.text_detection)
            .field("recovery_attempts_per_hour", &s.recovery_attempts_per_hour)
            .field("operator_keys", &s.operator_keys)
            .finish()
    }
}

impl Tenant {
    /// The name of the one tenant of a layer without tenants.
    pub const DEFAULT_NAME: &'static str = "default";

    /// A tenant named `name`, with the layer's settings and no operator key.
    pub fn named(name: impl Into<String>) -> Self {
        let tenant = Tenant::default().operator_keys([]);
        tenant.with(|s| s.name = name.into())
    }

    fn with(mut self, change: impl FnOnce(&mut Settings)) -> Self {
        // A tenant made from the default one counts its own recovery attempts.
        let fresh = self.same(&Tenant::default());
        let settings = Arc::make_mut(&mut self.0);
        if fresh {
            settings.attempts = Arc::default();
        }
        change(settings);
        self
    }

    /// The tenant's name, as records and metrics show it.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Its steps per refusal category, instead of the layer's.
    pub fn category_policy(self, policy: CategoryPolicy) -> Self {
        self.with(|s| s.policy = Some(policy))
    }

    /// Its fallback chains, instead of the layer's.
    pub fn fallback_chains(self, chains: FallbackChains) -> Self {
        self.with(|s| s.chains = Some(chains))
    }

    /// Where its recovery fallbacks may go (default: anywhere the chains say).
    /// A fallback outside it is never sent: it is recorded skipped, dead reason
    /// `not_allowed`.
    pub fn allow(self, allow: FallbackAllowlist) -> Self {
        self.with(|s| s.allow = allow)
    }

    /// Whether its refusals may be rescued (the layer's runtime switch
    /// still has the last word).
    pub fn rescue(self, on: bool) -> Self {
        self.with(|s| s.rescue = Some(on))
    }

    /// Whether prose refusals count as refusals for it.
    #[cfg(feature = "text")]
    #[cfg_attr(docsrs, doc(cfg(feature = "text")))]
    pub fn detect_text_refusals(self, on: bool) -> Self {
        self.with(|s| s.text_detection = Some(on))
    }

    /// Most recovery attempts (fallbacks, rescues, retargets, continuations)
    /// its requests may cause in the last hour, counted by the minute in
    /// this process; past it a refusal is served as it came, dead reason
    /// `capped`.
    pub fn recovery_attempts_per_hour(self, attempts: u32) -> Self {
        self.with(|s| s.recovery_attempts_per_hour = Some(attempts))
    }

    /// The providers whose operator key (set with
    /// [`cross_provider`](crate::RefusalGuardLayer::cross_provider)) its
    /// cross-provider fallbacks may spend; the others are skipped as without an
    /// endpoint (`no_endpoint`).
    pub fn operator_keys<I: IntoIterator<Item = Provider>>(self, providers: I) -> Self {
        let providers = providers.into_iter().collect();
        self.with(|s| s.operator_keys = Some(providers))
    }

    /// Keeps counting recovery attempts where `earlier` (a tenant of the same name, say
    /// from the tenants file before a reload) had got to.
    pub fn counting_attempts_with(self, earlier: &Tenant) -> Self {
        let attempts = earlier.0.attempts.clone();
        self.with(|s| s.attempts = attempts)
    }

    /// Its category policy, when it has its own.
    pub fn policy_setting(&self) -> Option<&CategoryPolicy> {
        self.0.policy.as_ref()
    }

    /// Its fallback chains, when it has its own.
    pub fn chains_setting(&self) -> Option<&FallbackChains> {
        self.0.chains.as_ref()
    }

    /// Where its fallbacks may go.
    pub fn allowlist(&self) -> &FallbackAllowlist {
        &self.0.allow
    }

    /// Its rescue setting, when it has its own.
    pub fn rescue_setting(&self) -> Option<bool> {
        self.0.rescue
    }

    /// Its text detection setting, when it has its own.
    pub fn text_detection_setting(&self) -> Option<bool> {
        self.0.text_detection
    }

    /// Its cap on recovery attempts per hour, if any.
    pub fn recovery_attempts_per_hour_setting(&self) -> Option<u32> {
        self.0.recovery_attempts_per_hour
    }

    /// Whether its fallbacks may spend the operator's key for `provider`.
    ///
    /// ```
    /// use refusal_guard::refusal::Provider;
    /// use refusal_guard::tenant::Tenant;
    ///
    /// assert!(Tenant::default().may_use_operator_key(Provider::OpenAi));
    /// assert!(!Tenant::named("a").may_use_operator_key(Provider::OpenAi));
    /// assert!(Tenant::named("b").operator_keys([Provider::OpenAi]).may_use_operator_key(Provider::OpenAi));
    /// ```
    pub fn may_use_operator_key(&self, provider: Provider) -> bool {
        self.0
            .operator_keys
            .as_ref()
            .map_or(true, |keys| keys.contains(&provider))
    }

    /// Takes one recovery attempt from its hourly cap; `false` when none is left.
    pub(crate) fn take_attempt(&self) -> bool {
        match self.0.recovery_attempts_per_hour {
            Some(cap) => self.0.attempts.take(cap),
            None => true,
        }
    }

    /// Gives back an attempt taken for a step that was never sent.
    pub(crate) fn give_back_attempt(&self) {
        if self.0.recovery_attempts_per_hour.is_some() {
            self.0.attempts.give_back();
        }
    }

    /// Whether it is this very tenant (the same settings, not a copy).
    pub(crate) fn same(&self, other: &Tenant) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Names the tenant of each guarded request from its head (method, URI,
/// headers, extensions). [`OneTenant`] is the default; any
/// `Fn(&http::request::Parts) -> Tenant + Send + Sync + 'static` is one.
///
/// It runs on every guarded request: keep it to a lookup, and hand out
/// tenants built beforehand (a [`Tenant`] is shared, and a guard prepares
/// its settings once per tenant it sees).
///
/// ```
/// use refusal_guard::tenant::{Tenant, TenantResolver};
///
/// struct ByHeader { team_a: Tenant }
///
/// impl TenantResolver for ByHeader {
///     fn tenant(&self, head: &http::request::Parts) -> Tenant {
///         match head.headers.get("x-team").map(|v| v.as_bytes()) {
///             Some(b"a") => self.team_a.clone(),
///             _ => Tenant::default(),
///         }
///     }
/// }
/// let layer = refusal_guard::RefusalGuardLayer::new()
///     .tenants(ByHeader { team_a: Tenant::named("team-a").rescue(false) });
/// # let _ = layer;
/// ```
pub trait TenantResolver: Send + Sync + 'static {
    /// The tenant of the request with this head.
    fn tenant(&self, head: &http::request::Parts) -> Tenant;
}

impl<F> TenantResolver for F
where
    F: Fn(&http::request::Parts) -> Tenant + Send + Sync + 'static,
{
    fn tenant(&self, head: &http::request::Parts) -> Tenant {
        self(head)
    }
}

/// Every request is of the same tenant ([`Tenant::default`] unless given):
/// the default resolver.
///
/// ```
/// use refusal_guard::tenant::{OneTenant, Tenant, TenantResolver};
///
/// let head = http::Request::new(()).into_parts().0;
/// assert_eq!(OneTenant::default().tenant(&head).name(), "default");
/// assert_eq!(OneTenant::new(Tenant::named("solo")).tenant(&head).name(), "solo");
/// ```
#[derive(Debug, Clone, Default)]
pub struct OneTenant(Tenant);

impl OneTenant {
    /// Every request is of `tenant`.
    pub fn new(tenant: Tenant) -> Self {
        OneTenant(tenant)
    }
}

impl TenantResolver for OneTenant {
    fn tenant(&self, _head: &http::request::Parts) -> Tenant {
        self.0.clone()
    }
}

/// The [`Tenant`] an earlier layer put in the request's extensions (say,
/// the one that checked the client's key), else the default one.
///
/// ```
/// use refusal_guard::tenant::{FromExtensions, Tenant, TenantResolver};
///
/// let mut head = http::Request::new(()).into_parts().0;
/// assert_eq!(FromExtensions.tenant(&head).name(), "default");
/// head.extensions.insert(Tenant::named("team-a"));
/// assert_eq!(FromExtensions.tenant(&head).name(), "team-a");
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct FromExtensions;

impl TenantResolver for FromExtensions {
    fn tenant(&self, head: &http::request::Parts) -> Tenant {
        head.extensions.get::<Tenant>().cloned().unwrap_or_default()
    }
}
