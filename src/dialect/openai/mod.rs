//! OpenAI's wire APIs: Chat Completions (also on Azure) and Responses, the
//! policy errors both answer with, and their translation readers and
//! writers for fallbacks across providers.

pub(crate) mod chat;
pub(crate) mod errors;
mod policy;
pub(crate) mod responses;
pub(crate) mod translate;
