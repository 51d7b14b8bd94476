//! What each provider folder (`src/dialect/<provider>/`) declares about
//! itself: the folder ([`Folder`]), the provider when chain entries may
//! name it ([`ProviderFacts`]), and each of its wire APIs ([`Api`]): names,
//! labels, its error JSON ([`ErrorShape`]), its part in the translation of
//! fallbacks ([`Translation`]) and its dialect. The registry
//! (`registry.rs`) lists the folders and answers from these; nothing else
//! in the crate keeps a per-provider fact.

use http::StatusCode;
use serde_json::Value;

use super::translate::{Prompt, ReadStream, Reply, Untranslatable, WriteStream};
use super::Dialect;
use crate::refusal::{Provider, RefusalSignal, WireApi};

/// One provider folder, as the registry lists it.
pub(crate) struct Folder {
    /// The provider a fallback chain entry names this folder by, when it
    /// is a provider's own (Bedrock's folder hosts another's models: none).
    pub(crate) provider: Option<&'static ProviderFacts>,
    /// Its wire APIs, in the order their dialects try a request.
    pub(crate) apis: &'static [&'static Api],
}

/// A provider a fallback chain entry may name (`openai:gpt-5`).
pub(crate) struct ProviderFacts {
    pub(crate) provider: Provider,
    /// The lower-case name in logs, records and metrics.
    pub(crate) name: &'static str,
    /// The prefixes a chain entry names it by; the first is the one the
    /// proxy's flags and listings use.
    pub(crate) entry_prefixes: &'static [&'static str],
    /// The wire API a fallback to it is sent in.
    pub(crate) fallback_api: WireApi,
    /// A refusal stop's finish reason on this provider, as OpenTelemetry's
    /// `gen_ai.response.finish_reasons` lists it, for the signals that are
    /// the provider's own (a stop reason, a model's refusal field); the
    /// category is the provider's word when it has one.
    pub(crate) finish_reason: for<'a> fn(RefusalSignal, Option<&'a str>) -> &'a str,
}

/// One wire API.
pub(crate) struct Api {
    pub(crate) wire_api: WireApi,
    /// The snake-case name in logs, records and metrics labels.
    pub(crate) name: &'static str,
    /// The provider whose models it serves.
    pub(crate) provider: Provider,
    /// The platform that serves it: the provider's name, or the host's
    /// (`bedrock`).
    pub(crate) platform: &'static str,
    /// OpenTelemetry's `gen_ai.system` for a call to it.
    pub(crate) gen_ai_system: &'static str,
    /// Its error JSON.
    pub(crate) errors: &'static ErrorShape,
    /// Its part in the translation of fallbacks across providers.
    pub(crate) translation: &'static Translation,
    /// The dialect that reads it; `None` when the crate is built without
    /// the feature that brings it.
    pub(crate) dialect: Option<&'static dyn Dialect>,
}

/// The header naming an error's type, and its value for a status.
pub(crate) type TypeHeader = fn(StatusCode) -> (&'static str, &'static str);

/// An API's error JSON, declared in its provider's `errors.rs` and named by
/// its wire APIs in the registry.
pub(crate) struct ErrorShape {
    /// The shape's name (`anthropic`, `openai`, `google`, `bedrock`).
    pub(crate) name: &'static str,
    /// The error body for a status, the guard's short machine-readable
    /// code (`upstream_timeout`, `path_escapes_prefix`, ...) and a message.
    pub(crate) body: fn(StatusCode, &str, &str) -> Value,
    /// The body a provider itself answers a request it rejects with: no
    /// code of the guard's.
    pub(crate) provider_body: fn(StatusCode, &str) -> Value,
    /// The header naming the error's type, for the shapes that put it in
    /// one, with its value for a status.
    pub(crate) type_header: Option<TypeHeader>,
    /// Whether a request path the guard may not recognise (a listing, a
    /// malformed path), lower-cased, looks like one of this shape's APIs.
    pub(crate) claims_path: fn(&str) -> bool,
}

impl PartialEq for ErrorShape {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl std::fmt::Debug for ErrorShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// What a wire API takes part in of the translation of fallbacks across
/// providers, declared in its folder's `translate` module and named by the
/// API in the registry.
pub(crate) struct Translation {
    /// As a client's API: its requests read, a fallback's answer written
    /// in it.
    pub(crate) client: Option<ClientSide>,
    /// As the API a fallback is sent in: its requests written, its answers
    /// read.
    pub(crate) target: Option<TargetSide>,
    /// Why it takes no fallback, when it has a client side but no target
    /// side (said in the log); otherwise "`api` has no translation".
    pub(crate) no_target: Option<&'static str>,
}

impl Translation {
    /// An API that takes no part in the translation.
    pub(crate) const NONE: Translation = Translation {
        client: None,
        target: None,
        no_target: None,
    };
}

/// A client's API in a translation.
pub(crate) struct ClientSide {
    /// Reads a request of the API.
    pub(crate) read_request: fn(&Value) -> Result<Prompt, Untranslatable>,
    /// Writes a whole answer in the API.
    pub(crate) write_reply: fn(&Reply) -> Result<Value, Untranslatable>,
    /// A writer of a streamed answer in the API; `include_usage`: the
    /// client asked for usage in its stream (Chat's
    /// `stream_options.include_usage`).
    pub(crate) stream_writer: fn(include_usage: bool) -> Box<dyn WriteStream>,
}

/// Writes a request of an API for a model: its path (and query) and body.
pub(crate) type WriteRequest = fn(&Prompt, &str) -> Result<(String, Value), Untranslatable>;

/// The API a fallback is sent in, in a translation.
pub(crate) struct TargetSide {
    /// Writes a request of the API for a model: its path (and query) and
    /// body.
    pub(crate) write_request: WriteRequest,
    /// Reads a whole answer of the API.
    pub(crate) read_reply: fn(&Value) -> Result<Reply, Untranslatable>,
    /// A reader of a streamed answer of the API.
    pub(crate) stream_reader: fn() -> Box<dyn ReadStream>,
    /// Whether the API takes a tool of this name: a renamed tool would not
    /// be the client's.
    pub(crate) takes_tool_name: fn(&str) -> bool,
    /// The headers of a fallback in the API that are not the key: the
    /// content type, and any version header it requires.
    pub(crate) headers: &'static [(&'static str, &'static str)],
    /// The header that carries the operator's key, and how it is written.
    pub(crate) key_header: (&'static str, fn(&str) -> String),
}
