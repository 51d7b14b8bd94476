//! OpenAI's wire APIs: Chat Completions (also on Azure) and Responses, the
//! policy errors both answer with, what their model names tell (`models`),
//! and their translation readers and writers for fallbacks across
//! providers.

pub(crate) mod chat;
pub(crate) mod errors;
pub(crate) mod models;
mod policy;
pub(crate) mod responses;
pub(crate) mod translate;

use crate::dialect::facts::{Api, Folder, ProviderFacts};
use crate::refusal::{Provider, RefusalSignal, WireApi};

/// OpenAI's folder: Chat Completions and Responses, on OpenAI and Azure.
pub(crate) static FOLDER: Folder = Folder {
    provider: Some(&PROVIDER),
    apis: &[&CHAT, &RESPONSES],
};

/// OpenAI, as chain entries name it (`openai:`): a fallback to it speaks
/// Chat Completions.
static PROVIDER: ProviderFacts = ProviderFacts {
    provider: Provider::OpenAi,
    name: "openai",
    entry_prefixes: &["openai"],
    fallback_api: WireApi::OpenAiChatCompletions,
    finish_reason,
};

/// Chat Completions (`/v1/chat/completions`).
static CHAT: Api = Api {
    wire_api: WireApi::OpenAiChatCompletions,
    name: "openai_chat_completions",
    provider: Provider::OpenAi,
    platform: "openai",
    gen_ai_system: "openai",
    errors: &errors::SHAPE,
    translation: &translate::chat::TRANSLATION,
    dialect: Some(&chat::OpenAiChat),
};

/// Responses (`/v1/responses`).
static RESPONSES: Api = Api {
    wire_api: WireApi::OpenAiResponses,
    name: "openai_responses",
    provider: Provider::OpenAi,
    platform: "openai",
    gen_ai_system: "openai",
    errors: &errors::SHAPE,
    translation: &translate::responses::TRANSLATION,
    dialect: Some(&responses::OpenAiResponses),
};

/// A refusal stop's finish reason: the model's `refusal` field, or the
/// `finish_reason` `content_filter`.
fn finish_reason(signal: RefusalSignal, _category: Option<&str>) -> &str {
    match signal {
        RefusalSignal::ModelRefusal => "refusal",
        _ => "content_filter",
    }
}
