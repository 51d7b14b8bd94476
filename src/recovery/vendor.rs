//! Fallback hops to another vendor: which vendors a chain entry may name
//! (`vendor:model`), and the endpoint and key the operator gives for each.
//!
//! A chain entry such as `openai:gpt-5` sends the refused request, translated
//! into that vendor's API, to the endpoint configured with
//! [`RefusalGuardLayer::cross_provider`](crate::RefusalGuardLayer::cross_provider),
//! with the operator's key; the answer is translated back into the client's
//! API. Without an endpoint for the vendor, the entry is skipped and
//! recorded: a refused prompt only ever goes to a vendor the operator named
//! in both the chain and the endpoints.

use std::fmt;

use http::Uri;

use crate::refusal::WireApi;

/// A vendor a fallback chain entry may name, with the API the hop speaks.
///
/// ```
/// use refusal_guard::recovery::Vendor;
///
/// assert_eq!(Vendor::parse_entry("openai:gpt-5"), Some((Vendor::OpenAi, "gpt-5")));
/// assert_eq!(Vendor::parse_entry("gemini:gemini-2.5-pro"), Some((Vendor::Gemini, "gemini-2.5-pro")));
/// assert_eq!(Vendor::parse_entry("claude-sonnet-4-5"), None);
/// assert_eq!(Vendor::OpenAi.as_str(), "openai");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Vendor {
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
    /// OpenAI Chat Completions (`/v1/chat/completions`).
    OpenAi,
    /// Gemini (`/v1beta/models/{model}:generateContent`).
    Gemini,
}

impl Vendor {
    /// Every vendor, in the order the proxy lists them.
    pub const ALL: [Vendor; 3] = [Vendor::Anthropic, Vendor::OpenAi, Vendor::Gemini];

    /// The prefix a chain entry names it by.
    pub fn as_str(self) -> &'static str {
        match self {
            Vendor::Anthropic => "anthropic",
            Vendor::OpenAi => "openai",
            Vendor::Gemini => "gemini",
        }
    }

    /// The vendor and model of a chain entry `vendor:model`, or `None` for
    /// a plain model name (a hop on the client's own API).
    pub fn parse_entry(entry: &str) -> Option<(Vendor, &str)> {
        let (prefix, model) = entry.split_once(':')?;
        let vendor = Vendor::ALL.into_iter().find(|v| v.as_str() == prefix)?;
        (!model.is_empty()).then_some((vendor, model))
    }

    /// The wire API a hop to this vendor speaks.
    pub(crate) fn wire_api(self) -> WireApi {
        match self {
            Vendor::Anthropic => WireApi::AnthropicMessages,
            Vendor::OpenAi => WireApi::OpenAiChatCompletions,
            Vendor::Gemini => WireApi::GeminiGenerateContent,
        }
    }
}

impl fmt::Display for Vendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An operator's API key for a vendor. Its `Debug` never shows it.
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

/// Where a cross-vendor hop goes: the vendor's base URI (its API paths are
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
    fn only_known_vendors_with_a_model_are_entries() {
        assert_eq!(Vendor::parse_entry("openai:"), None);
        assert_eq!(Vendor::parse_entry("azure:gpt-5"), None);
        assert_eq!(
            Vendor::parse_entry("anthropic:claude-opus-4-7"),
            Some((Vendor::Anthropic, "claude-opus-4-7"))
        );
    }
}
