//! OpenAI's side of the translation of fallbacks across providers: Chat
//! Completions' reader and writer (the API a fallback to OpenAI is sent
//! in), and Responses' (a client's API only).

pub(crate) mod chat;
pub(crate) mod responses;
