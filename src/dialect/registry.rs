//! The registry: every provider folder, one line each, and the answers the
//! rest of the crate gets about a wire API or a provider, read from what
//! each folder declares (`facts.rs`).
//!
//! The public vocabulary (`WireApi`, `Provider`) is defined with the
//! refusal types; its per-provider facts (names, platforms, labels, entry
//! prefixes, fallback APIs, finish reasons) are the methods below, each
//! answered from a folder's declaration.

use super::facts::{Api, ErrorShape, Folder, ProviderFacts};
use super::{anthropic, bedrock, gemini, openai, Dialect};
use crate::refusal::{Provider, RefusalSignal, WireApi};

/// Every provider folder. Their wire APIs try a request in this order, and
/// a path no API recognises gets the first error shape that claims it
/// (OpenAI's before Google's: an Azure OpenAI path may hold `/models/`).
/// Adding a provider is its folder and one line here.
static FOLDERS: &[&Folder] = &[
    &bedrock::FOLDER,
    &anthropic::FOLDER,
    &openai::FOLDER,
    &gemini::FOLDER,
];

/// The error shape of a path no API claims.
pub(crate) static DEFAULT_ERRORS: &ErrorShape = &anthropic::errors::SHAPE;

/// Every wire API, in the order their dialects try a request.
pub(crate) fn apis() -> impl Iterator<Item = &'static Api> {
    FOLDERS
        .iter()
        .flat_map(|folder| folder.apis.iter().copied())
}

/// Every dialect built, in the order they try a request.
pub(crate) fn dialects() -> impl Iterator<Item = &'static dyn Dialect> {
    apis().filter_map(|api| api.dialect)
}

/// Every provider a fallback chain entry may name, in the order the proxy
/// lists them.
pub(crate) fn providers() -> impl Iterator<Item = &'static ProviderFacts> {
    FOLDERS.iter().filter_map(|folder| folder.provider)
}

/// What the registry knows of `wire_api`.
pub(crate) fn api(wire_api: WireApi) -> &'static Api {
    apis()
        .find(|api| api.wire_api == wire_api)
        .expect("every wire API is declared by a folder (see the registry's test)")
}

/// What the registry knows of `provider`.
pub(crate) fn provider(provider: Provider) -> &'static ProviderFacts {
    providers()
        .find(|facts| facts.provider == provider)
        .expect("every provider is declared by its folder (see the registry's test)")
}

impl WireApi {
    /// The snake-case name used in logs.
    ///
    /// ```
    /// use refusal_guard::refusal::WireApi;
    /// assert_eq!(WireApi::AnthropicMessages.as_str(), "anthropic_messages");
    /// ```
    pub fn as_str(self) -> &'static str {
        api(self).name
    }

    /// The platform that serves this API: `bedrock` for Amazon Bedrock's
    /// surfaces, else the provider's own name.
    ///
    /// ```
    /// use refusal_guard::refusal::WireApi;
    /// assert_eq!(WireApi::BedrockConverse.platform(), "bedrock");
    /// assert_eq!(WireApi::AnthropicMessages.platform(), "anthropic");
    /// ```
    pub fn platform(self) -> &'static str {
        api(self).platform
    }

    /// The provider whose API this is (Vertex AI's Claude is Anthropic's).
    ///
    /// ```
    /// use refusal_guard::refusal::{Provider, WireApi};
    /// assert_eq!(WireApi::OpenAiResponses.provider(), Provider::OpenAi);
    /// ```
    pub fn provider(self) -> Provider {
        api(self).provider
    }

    /// OpenTelemetry's `gen_ai.system` for a call to this API.
    pub(crate) fn gen_ai_system(self) -> &'static str {
        api(self).gen_ai_system
    }
}

impl Provider {
    /// The lower-case name used in logs (`anthropic`, `openai`, `google`).
    ///
    /// ```
    /// assert_eq!(refusal_guard::refusal::Provider::OpenAi.as_str(), "openai");
    /// ```
    pub fn as_str(self) -> &'static str {
        provider(self).name
    }

    /// Every provider a fallback chain entry may name, in the order the
    /// proxy lists them.
    pub(crate) fn every() -> impl Iterator<Item = Provider> {
        providers().map(|facts| facts.provider)
    }

    /// The provider a chain entry's prefix (`openai` of `openai:gpt-5`)
    /// names, if any.
    pub(crate) fn named_by_prefix(prefix: &str) -> Option<Provider> {
        providers()
            .find(|facts| facts.entry_prefixes.contains(&prefix))
            .map(|facts| facts.provider)
    }

    /// The prefix a chain entry names this provider by, and its key's flag.
    pub(crate) fn entry_prefix(self) -> &'static str {
        provider(self).entry_prefixes[0]
    }

    /// The wire API a fallback to this provider is sent in.
    pub(crate) fn fallback_api(self) -> WireApi {
        provider(self).fallback_api
    }

    /// A refusal stop's finish reason on this provider, as OpenTelemetry's
    /// `gen_ai.response.finish_reasons` lists it.
    pub(crate) fn finish_reason(self, signal: RefusalSignal, category: Option<&str>) -> &str {
        (provider(self).finish_reason)(signal, category)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    /// Every variant of the public vocabulary. A variant added to an enum
    /// fails to compile here until it is listed, and then fails the tests
    /// below until its folder declares it.
    fn every_wire_api() -> Vec<WireApi> {
        let listed = |api: WireApi| match api {
            WireApi::AnthropicMessages
            | WireApi::OpenAiChatCompletions
            | WireApi::OpenAiResponses
            | WireApi::GeminiGenerateContent
            | WireApi::BedrockInvokeModel
            | WireApi::BedrockConverse
            | WireApi::BedrockMessages => api,
        };
        [
            WireApi::AnthropicMessages,
            WireApi::OpenAiChatCompletions,
            WireApi::OpenAiResponses,
            WireApi::GeminiGenerateContent,
            WireApi::BedrockInvokeModel,
            WireApi::BedrockConverse,
            WireApi::BedrockMessages,
        ]
        .map(listed)
        .to_vec()
    }

    fn every_provider() -> Vec<Provider> {
        let listed = |provider: Provider| match provider {
            Provider::Anthropic | Provider::OpenAi | Provider::Google => provider,
        };
        [Provider::Anthropic, Provider::OpenAi, Provider::Google]
            .map(listed)
            .to_vec()
    }

    #[test]
    fn every_wire_api_is_declared_once_with_every_part() {
        let declared: Vec<WireApi> = apis().map(|api| api.wire_api).collect();
        let unique: HashSet<WireApi> = declared.iter().copied().collect();
        assert_eq!(unique.len(), declared.len(), "declared twice: {declared:?}");
        for wire_api in every_wire_api() {
            let api = apis().find(|api| api.wire_api == wire_api);
            let api = api.unwrap_or_else(|| panic!("no folder declares {wire_api:?}"));
            // The name is the one records and configuration spell.
            let spelt = serde_json::to_value(wire_api).unwrap();
            assert_eq!(spelt, api.name, "{wire_api:?}: name");
            assert!(!api.platform.is_empty() && !api.gen_ai_system.is_empty());
            // Its provider is one chain entries may name.
            provider(api.provider);
            // An error body of its shape, for a status the guard answers.
            let body = api.errors.body(http::StatusCode::GATEWAY_TIMEOUT, "c", "m");
            assert!(
                body.to_string().contains("\"m\""),
                "{wire_api:?}: error body"
            );
            // Its translation says what it offers: a client side unless it
            // says why not, and a target side or why not.
            let translation = api.translation;
            if translation.target.is_none() && translation.client.is_some() {
                assert!(
                    translation.no_target.is_some(),
                    "{wire_api:?}: why no target"
                );
            }
            // Its dialect is built with the crate's features, and is its own.
            let built = cfg!(feature = "bedrock") || api.platform != "bedrock";
            assert_eq!(api.dialect.is_some(), built, "{wire_api:?}: dialect");
            if let Some(dialect) = api.dialect {
                assert_eq!(dialect.wire_api(), wire_api);
                assert!(std::ptr::eq(dialect.api(), api));
            }
        }
    }

    #[test]
    fn every_provider_is_declared_once_with_every_part() {
        let declared: Vec<Provider> = Provider::every().collect();
        let unique: HashSet<Provider> = declared.iter().copied().collect();
        assert_eq!(unique.len(), declared.len(), "declared twice: {declared:?}");
        for provider in every_provider() {
            assert!(
                declared.contains(&provider),
                "no folder declares {provider:?}"
            );
            assert_eq!(serde_json::to_value(provider).unwrap(), provider.as_str());
            let prefix = provider.entry_prefix();
            assert_eq!(Provider::named_by_prefix(prefix), Some(provider));
            // A fallback to it is sent in an API that takes fallbacks.
            let target = api(provider.fallback_api());
            assert_eq!(target.provider, provider);
            assert!(
                target.translation.target.is_some(),
                "{provider:?}: fallback API"
            );
            let reason = provider.finish_reason(RefusalSignal::StopReason, None);
            assert!(!reason.is_empty());
        }
    }
}
