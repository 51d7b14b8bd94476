//! OpenAI's wire APIs: Chat Completions (also on Azure) and Responses, the
//! policy errors both answer with, what their model names tell (`models`),
//! and their translation readers and writers for fallbacks across
//! providers.

pub(crate) mod chat;
pub(crate) mod errors;
pub(crate) mod models;
mod policy;
pub(crate) mod responses;
pub(crate) mod translate_chat;
pub(crate) mod translate_responses;
