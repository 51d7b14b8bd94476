//! Fallbacks to another provider: which providers a chain entry may name
//! (`provider:model`), and the endpoint and key the operator gives for each.
//!
//! A chain entry such as `openai:gpt-5` sends the refused request, translated
//! into that provider's API, to the endpoint configured with
//! [`RefusalGuardLayer::cross_provider`](crate::RefusalGuardLayer::cross_provider),
//! with the operator's key; the answer is translated back into the client's
//! API. Without an endpoint for the provider, the entry is skipped and
//! recorded: a refused prompt only ever goes to a provider the operator named
//! in both the chain and the endpoints.

use std::fmt;

use http::Uri;

use crate::refusal::{Provider, WireApi};

/// The providers a fallback chain entry may name, in the order the proxy
/// lists them.
pub const PROVIDERS: [Provider; 3] = [Provider::Anthropic, Provider::OpenAi, Provider::Google];

/// The provider and model of a fallback chain entry `provider:model`, or
/// `None` for a plain model name (a fallback on the client's own API). Google is
/// named `gemini:` (its API's name, and its key's), or `google:`.
///
/// ```
/// use refusal_guard::recovery::parse_entry;
/// use refusal_guard::refusal::Provider;
///
/// assert_eq!(parse_entry("openai:gpt-5"), Some((Provider::OpenAi, "gpt-5")));
/// assert_eq!(parse_entry("gemini:gemini-2.5-pro"), Some((Provider::Google, "gemini-2.5-pro")));
/// assert_eq!(parse_entry("google:gemini-2.5-pro"), Some((Provider::Google, "gemini-2.5-pro")));
/// assert_eq!(parse_entry("claude-sonnet-4-5"), None);
/// ```
pub fn parse_entry(entry: &str) -> Option<(Provider, &str)> {
    let (prefix, model) = entry.split_once(':')?;
    let provider = match prefix {
        "google" => Provider::Google,
        _ => PROVIDERS.into_iter().find(|p| chain_prefix(*p) == prefix)?,
    };
    (!model.is_empty()).then_some((provider, model))
}

/// The prefix a chain entry names `provider` by, and its key's flag.
pub fn chain_prefix(provider: Provider) -> &'static str {
    match provider {
        Provider::Google => "gemini",
        other => other.as_str(),
    }
}

/// The wire API a fallback to `provider` speaks.
pub fn fallback_api(provider: Provider) -> WireApi {
    match provider {
        Provider::Anthropic => WireApi::AnthropicMessages,
        Provider::OpenAi => WireApi::OpenAiChatCompletions,
        Provider::Google => WireApi::GeminiGenerateContent,
    }
}

/// An operator's API key for a provider. Its `Debug` never shows it.
///
/// ```
/// use refusal_guard::recovery::ApiKey;
///
/// let key = ApiKey::new("sk-secret");
/// assert_eq!(format!("{key:?}"), "ApiKey(<redacted>)");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key.
    pub fn new(key: impl Into<String>) -> Self {
        ApiKey(key.into())
    }

    /// The key itself, for the request header that carries it.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// Where a cross-provider fallback goes: the provider's base URI (its API paths are
/// appended) and the operator's key.
///
/// ```
/// use refusal_guard::recovery::{ApiKey, Endpoint};
///
/// let endpoint = Endpoint::new("https://api.openai.com".parse().unwrap(), ApiKey::new("sk-x"));
/// assert_eq!(endpoint.base().host(), Some("api.openai.com"));
/// assert!(!format!("{endpoint:?}").contains("sk-x"));
/// ```
#[derive(Debug, Clone)]
pub struct Endpoint {
    base: Uri,
    key: ApiKey,
}

impl Endpoint {
    /// An endpoint at `base` with the operator's `key`.
    pub fn new(base: Uri, key: ApiKey) -> Self {
        Endpoint { base, key }
    }

    /// The base URI.
    pub fn base(&self) -> &Uri {
        &self.base
    }

    pub(crate) fn key(&self) -> &ApiKey {
        &self.key
    }

    /// The URI of `path_and_query` under the base (its own path kept as a
    /// prefix).
    pub(crate) fn uri(&self, path_and_query: &str) -> Option<Uri> {
        let prefix = self.base.path().trim_end_matches('/');
        let mut parts = self.base.clone().into_parts();
        parts.path_and_query = Some(format!("{prefix}{path_and_query}").parse().ok()?);
        Uri::from_parts(parts).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_path_is_kept_before_the_api_path() {
        let endpoint = Endpoint::new(
            "http://127.0.0.1:9/proxy/".parse().unwrap(),
            ApiKey::new("k"),
        );
        assert_eq!(
            endpoint.uri("/v1/chat/completions").unwrap().to_string(),
            "http://127.0.0.1:9/proxy/v1/chat/completions"
        );
        let bare = Endpoint::new("http://127.0.0.1:9".parse().unwrap(), ApiKey::new("k"));
        assert_eq!(
            bare.uri("/v1beta/models/g:streamGenerateContent?alt=sse")
                .unwrap()
                .to_string(),
            "http://127.0.0.1:9/v1beta/models/g:streamGenerateContent?alt=sse"
        );
    }

    #[test]
    fn only_known_providers_with_a_model_are_entries() {
        assert_eq!(parse_entry("openai:"), None);
        assert_eq!(parse_entry("azure:gpt-5"), None);
        assert_eq!(
            parse_entry("anthropic:claude-opus-4-7"),
            Some((Provider::Anthropic, "claude-opus-4-7"))
        );
        for provider in PROVIDERS {
            let entry = format!("{}:m", chain_prefix(provider));
            assert_eq!(parse_entry(&entry), Some((provider, "m")));
        }
    }
}
