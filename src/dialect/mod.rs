//! Wire APIs the guard understands, one file per API behind one trait.
//!
//! Nothing outside this module knows a provider's JSON: the service and the
//! body only ask a [`Dialect`] what a request is, what an event or a body
//! says, and how to build a recovery request.

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, Uri};
use serde_json::Value;

use crate::refusal::{Provider, RefusalSignal, WireApi};
use crate::sse::Frame;

pub(crate) use head::request_head;

pub(crate) mod anthropic;
pub(crate) mod errors;
pub(crate) mod gemini;
mod head;
pub(crate) mod openai_chat;
pub(crate) mod openai_responses;

/// What a request was recognised as, before its body was read.
#[derive(Debug, Clone)]
pub(crate) struct Recognised {
    pub(crate) dialect: &'static dyn Dialect,
    /// The model named in the URL path (Vertex AI, Gemini), if any.
    pub(crate) path_model: Option<String>,
}

/// A refusal as one response expressed it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RefusalInfo {
    pub(crate) signal: Option<RefusalSignal>,
    pub(crate) category: Option<String>,
    pub(crate) explanation: Option<String>,
    /// Anthropic fallback credit: redeemable once, on another model.
    pub(crate) credit_token: Option<String>,
}

/// A recovery the provider made on its own (Anthropic server-side fallback).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ServerFallback {
    pub(crate) from: Option<String>,
    pub(crate) to: Option<String>,
    pub(crate) category: Option<String>,
}

/// What one event, or one whole JSON body, showed.
///
/// Within one observation, `real_output` is taken to come before `refusal`,
/// which is how providers order them inside a single chunk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Observation {
    pub(crate) real_output: bool,
    /// Text this event added to the answer (for the opt-in text detector).
    pub(crate) text: String,
    /// The event started a tool call.
    pub(crate) tool_call: bool,
    pub(crate) refusal: Option<RefusalInfo>,
    pub(crate) server_fallback: Option<ServerFallback>,
    /// The model the response says served it.
    pub(crate) model: Option<String>,
    /// A provider error event inside an otherwise successful stream.
    pub(crate) error: bool,
}

/// Per-response state for reading a stream event by event.
pub(crate) trait StreamInspector: Send {
    /// Looks at one complete SSE frame. `committed` is true once the
    /// response is being let through: then only refusals (for a partial
    /// record) still matter, so an inspector may skip events that cannot
    /// carry one.
    fn observe(&mut self, frame: &Frame, committed: bool) -> Observation;
}

/// Rewrites a served stream frame by frame: the guard's splicing hook.
pub(crate) trait FrameRewrite: Send {
    /// The bytes to send instead of this frame, or `None` to send it as it is.
    fn rewrite(&mut self, frame: &Frame) -> Option<Bytes>;
}

/// Live thinking: which frames of a held stream may reach the client before
/// the decision, and how a recovered turn continues the message they began.
pub(crate) trait LiveSplice: Send {
    /// Whether this frame of the original may go out now. Once one may not,
    /// nothing after it does either, so order is kept.
    fn forward(&mut self, frame: &Frame) -> bool;
    /// The rewrite that continues the already started message with a
    /// recovered attempt's stream.
    fn continuation(&self) -> Box<dyn FrameRewrite>;
}

/// Who handed a turn to whom, for a handoff marker.
#[derive(Debug, Clone)]
pub(crate) struct Handoff<'a> {
    pub(crate) from: &'a str,
    pub(crate) to: &'a str,
    pub(crate) category: Option<&'a str>,
}

/// Why a request could not be rewritten for a recovery attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RewriteError(pub(crate) &'static str);

/// One wire API.
pub(crate) trait Dialect: Send + Sync + std::fmt::Debug {
    fn provider(&self) -> Provider;
    fn wire_api(&self) -> WireApi;
    /// Recognises a request this dialect guards from its method and URL alone.
    fn recognise(&self, method: &Method, uri: &Uri) -> Option<Option<String>>;
    /// The model the request asks for: the one in the path, else the body's
    /// `model`. This, [`is_streaming`](Self::is_streaming) and
    /// [`unguardable`](Self::unguardable) read the request's head
    /// ([`request_head`]): the body without its conversation fields.
    fn request_model(&self, path_model: Option<&str>, body: &Value) -> Option<String> {
        path_model
            .map(str::to_owned)
            .or_else(|| str_field(body, "model"))
    }
    /// Whether the request asks for a stream.
    fn is_streaming(&self, uri: &Uri, body: &Value) -> bool;
    /// Why this request cannot be guarded at all, if it cannot (OpenAI
    /// `n` > 1: one choice of several cannot be recovered alone). Such a
    /// request is forwarded with its bytes untouched.
    fn unguardable(&self, _body: &Value) -> Option<&'static str> {
        None
    }
    /// The parts of the request that stay the same for a whole conversation
    /// (the system prompt and the first user turn), for the default key.
    fn conversation_seed(&self, body: &Value) -> Option<Vec<u8>>;
    /// A fresh inspector for one streamed response. Its observations carry
    /// the answer's text and tool calls too, which the opt-in text detector
    /// reads.
    fn stream_inspector(&self) -> Box<dyn StreamInspector>;
    /// Inspects a whole successful JSON body.
    fn inspect_json(&self, body: &Value) -> Observation;
    /// Inspects a non-2xx JSON body: some providers block prompts with an
    /// HTTP error (Azure's 400 `content_filter`).
    fn inspect_error(&self, _status: StatusCode, _body: &Value) -> Option<RefusalInfo> {
        None
    }
    /// Whether [`inspect_error`](Self::inspect_error) can find anything, so
    /// that error bodies are only read when it can.
    fn refuses_with_errors(&self) -> bool {
        false
    }
    /// Appends the rescue note as a user turn.
    fn append_note(&self, body: &mut Value, note: &str) -> Result<(), RewriteError>;
    /// Asks for another model (in the body or in the path).
    fn swap_model(&self, uri: &mut Uri, body: &mut Value, model: &str) -> Result<(), RewriteError>;
    /// Asks the provider to mint fallback credit on a refusal (Anthropic only).
    fn request_fallback_credit(&self, _headers: &mut HeaderMap) {}
    /// Presents a fallback credit token on a hop (Anthropic only).
    fn attach_credit_token(&self, _headers: &mut HeaderMap, _body: &mut Value, _token: &str) {}
    /// Replaces an existing server-side `fallbacks` list, or adds one (and
    /// whatever header enables it) when `inject` is set. Returns whether the
    /// body changed.
    fn retarget_fallbacks(
        &self,
        _headers: &mut HeaderMap,
        _body: &mut Value,
        _models: &[String],
        _own_model: Option<&str>,
        _inject: bool,
    ) -> bool {
        false
    }
    /// A rewrite that marks a client-side fallback inside the served stream,
    /// the way the provider marks its own (Anthropic only).
    fn handoff_stream(&self, _handoff: &Handoff<'_>) -> Option<Box<dyn FrameRewrite>> {
        None
    }
    /// Live thinking support (Anthropic only): see [`LiveSplice`].
    fn live_splice(&self) -> Option<Box<dyn LiveSplice>> {
        None
    }
    /// The same mark in a whole JSON body. Returns whether the body changed.
    fn handoff_json(&self, _body: &mut Value, _handoff: &Handoff<'_>) -> bool {
        false
    }
    /// The provider's request id in the response headers.
    fn request_id(&self, headers: &HeaderMap) -> Option<String> {
        ["request-id", "x-request-id"]
            .iter()
            .find_map(|name| headers.get(*name)?.to_str().ok().map(str::to_owned))
    }
}

/// Every dialect, in the order they are tried.
static DIALECTS: &[&dyn Dialect] = &[
    &anthropic::AnthropicMessages,
    &gemini::GeminiGenerateContent,
    &openai_chat::OpenAiChat,
    &openai_responses::OpenAiResponses,
];

/// Finds the dialect that guards this request, if any.
pub(crate) fn recognise(method: &Method, uri: &Uri) -> Option<Recognised> {
    DIALECTS.iter().find_map(|dialect| {
        dialect.recognise(method, uri).map(|path_model| Recognised {
            dialect: *dialect,
            path_model,
        })
    })
}

/// A frame's `data:` parsed as JSON. `None` for frames without data or with
/// broken JSON, which are passed through unjudged.
pub(crate) fn json_event(frame: &Frame) -> Option<Value> {
    serde_json::from_str(frame.data()?).ok()
}

/// An event's type: its JSON `type`, else the frame's `event:` name (the
/// APIs that name events repeat the name in `type`).
pub(crate) fn event_type<'a>(event: &'a Value, frame: &'a Frame) -> &'a str {
    event
        .get("type")
        .and_then(Value::as_str)
        .or(frame.event())
        .unwrap_or_default()
}

/// Whether text counts as real output: anything but whitespace.
pub(crate) fn is_real_text(text: &str) -> bool {
    !text.trim().is_empty()
}

/// The longest explanation kept from a provider's free text (a model's
/// refusal, an error message), in bytes.
pub(crate) const MAX_EXPLANATION_BYTES: usize = 500;

/// `text` cut to [`MAX_EXPLANATION_BYTES`] at a character boundary, with an
/// ellipsis when cut.
pub(crate) fn truncate_explanation(text: &str) -> String {
    if text.len() <= MAX_EXPLANATION_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_EXPLANATION_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// A string field, or `None` for null, missing or non-string values.
pub(crate) fn str_field(value: &Value, key: &str) -> Option<String> {
    value.get(key)?.as_str().map(str::to_owned)
}

/// Adds `value` to a comma-separated header (such as `anthropic-beta`)
/// unless it is already listed there.
pub(crate) fn merge_list_header(headers: &mut HeaderMap, name: &'static str, value: &str) {
    let present: Vec<String> = headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect();
    if present.iter().any(|v| v == value) {
        return;
    }
    let mut merged = present;
    merged.push(value.to_owned());
    if let Ok(joined) = http::HeaderValue::from_str(&merged.join(",")) {
        headers.remove(name);
        headers.insert(name, joined);
    }
}

/// Splits a URL path into its segments, ignoring empty ones.
pub(crate) fn path_segments(uri: &Uri) -> Vec<&str> {
    uri.path().split('/').filter(|s| !s.is_empty()).collect()
}
