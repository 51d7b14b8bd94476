//! Where a tenant's recovery fallbacks may go.

use crate::refusal::Provider;

/// The models and providers a tenant's recovery fallbacks may go to. Unset
/// (the default), each allows all; set, a fallback must match both. A model
/// pattern is a name, or a prefix ending in `*` (`claude-sonnet-*`); a
/// chain entry `provider:model` matches by its model and its provider.
///
/// ```
/// use refusal_guard::refusal::Provider;
/// use refusal_guard::tenant::FallbackAllowlist;
///
/// let allow = FallbackAllowlist::new()
///     .models(["claude-sonnet-*", "gpt-5"])
///     .providers([Provider::Anthropic]);
/// assert!(allow.allows(Provider::Anthropic, "claude-sonnet-4-5"));
/// assert!(!allow.allows(Provider::OpenAi, "gpt-5"));
/// assert!(!allow.allows(Provider::Anthropic, "claude-opus-4-7"));
/// assert!(FallbackAllowlist::new().allows(Provider::Google, "anything"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FallbackAllowlist {
    models: Option<Vec<String>>,
    providers: Option<Vec<Provider>>,
}

impl FallbackAllowlist {
    /// Allows every fallback.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only fallbacks to these models (names, or prefixes ending in `*`).
    pub fn models<I, M>(mut self, models: I) -> Self
    where
        I: IntoIterator<Item = M>,
        M: Into<String>,
    {
        self.models = Some(models.into_iter().map(Into::into).collect());
        self
    }

    /// Only fallbacks to these providers.
    pub fn providers<I: IntoIterator<Item = Provider>>(mut self, providers: I) -> Self {
        self.providers = Some(providers.into_iter().collect());
        self
    }

    /// Whether a fallback to `model` on `provider` may be sent.
    pub fn allows(&self, provider: Provider, model: &str) -> bool {
        let provider_ok = self
            .providers
            .as_ref()
            .map_or(true, |providers| providers.contains(&provider));
        let model_ok = self.models.as_ref().map_or(true, |patterns| {
            patterns
                .iter()
                .any(|pattern| match pattern.strip_suffix('*') {
                    Some(prefix) => model.starts_with(prefix),
                    None => pattern == model,
                })
        });
        provider_ok && model_ok
    }

    /// Whether it allows every fallback.
    pub fn is_open(&self) -> bool {
        self.models.is_none() && self.providers.is_none()
    }
}
