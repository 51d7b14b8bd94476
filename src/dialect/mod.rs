//! Wire APIs the guard understands, one file per API behind one trait.
//!
//! Nothing outside this module knows a provider's JSON: the service and the
//! body only ask a [`Dialect`] what a request is, what an event or a body
//! says, and how to build a recovery request.

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, Uri};
use serde_json::Value;

use crate::refusal::{FallbackCredit, Prefill, Provider, RefusalSignal, Usage, WireApi};
use crate::sse::Frame;

pub(crate) use head::{forwarded_head, request_head};
pub(crate) use seed::{seed_part, SeedReach};

pub(crate) mod anthropic;
#[cfg(feature = "bedrock")]
pub(crate) mod bedrock;
pub(crate) mod cross;
pub(crate) mod errors;
mod fields;
pub(crate) mod gemini;
mod head;
pub(crate) mod openai;
mod seed;
pub(crate) mod skim;
pub(crate) mod text_delta;
pub(crate) mod translate;

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
    /// The tokens the refused response cost, as far as it has said yet.
    pub(crate) usage: Option<Usage>,
    /// Anthropic's suggested retry model, when a server-side fallback
    /// could not be tried.
    pub(crate) recommended_model: Option<String>,
    /// Whether the credit token carries a prefill claim.
    pub(crate) prefill: Prefill,
}

/// A server-side fallback chain as the response's per-attempt usage
/// (Anthropic `usage.iterations`) tells it: the top-level usage covers the
/// serving attempt only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Iterations {
    /// The model of the attempt that served (`fallback_message`), if a
    /// fallback served.
    pub(crate) served_by: Option<String>,
    /// The model of the first attempt that declined (`message`).
    pub(crate) first_declined: Option<String>,
    /// What the declined attempts cost, added up.
    pub(crate) declined_usage: Option<Usage>,
}

/// A recovery the provider made on its own (Anthropic server-side fallback).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ServerFallback {
    pub(crate) from: Option<String>,
    pub(crate) to: Option<String>,
    pub(crate) category: Option<String>,
}

impl ServerFallback {
    /// Keeps the first fallback's models and category, and takes the `to` of
    /// every later one: with several fallbacks, the last names the model that
    /// served.
    pub(crate) fn merge(kept: &mut Option<ServerFallback>, later: Option<ServerFallback>) {
        match (kept.as_mut(), later) {
            (None, later) => *kept = later,
            (Some(kept), Some(later)) if later.to.is_some() => kept.to = later.to,
            _ => {}
        }
    }
}

/// What one event, or one whole JSON body, showed.
///
/// Within one finding, `real_output` is taken to come before `refusal`,
/// which is how providers order them inside a single chunk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Finding {
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
    /// Usage reported after the refusal it belongs to (the last chunk of an
    /// OpenAI stream, a Responses terminal event). Event judges read usage only
    /// once they have seen a refusal (or once per response), never on every
    /// event of an answer.
    pub(crate) usage: Option<Usage>,
    /// The response's message id (Anthropic `message_start`, or a whole
    /// message's `id`).
    pub(crate) message_id: Option<String>,
    /// What became of a fallback credit token the request presented.
    pub(crate) fallback_credit: Option<FallbackCredit>,
    /// A server-side chain's attempts, when the response listed them.
    pub(crate) iterations: Option<Iterations>,
    /// A stop reason the dialect does not know, as it came (Gemini's
    /// `finishReason`): no refusal by itself, recorded when the response
    /// ends without output.
    pub(crate) unknown_stop: Option<String>,
}

/// Per-response state for reading a stream event by event.
pub(crate) trait EventJudge: Send + Sync {
    /// Looks at one complete SSE frame. `committed` is true once the
    /// response is being let through: then only refusals (for a partial
    /// record) still matter, so an event judge may skip events that cannot
    /// carry one.
    fn judge(&mut self, frame: &Frame, committed: bool) -> Finding;

    /// Whether [`judge`](Self::judge) with `committed` set would find
    /// nothing in a frame, told from a glance at the raw bytes of its
    /// `event:` value ([`Frame::event_raw`]) rather than a parse: the judge
    /// of a settled stream then skips the call and the empty finding,
    /// and the framer does not even build the frame, which is most of the
    /// cost of a long stream.
    fn skips_committed(&self, _event: Option<&[u8]>) -> bool {
        false
    }

    /// For a stream framed as an AWS event stream rather than SSE: how the
    /// dialect reads each binary frame.
    #[cfg(feature = "bedrock")]
    fn eventstream(&self) -> Option<bedrock::eventstream::Translate> {
        None
    }
}

/// Rewrites a served stream frame by frame: the guard's splicing hook.
pub(crate) trait FrameRewrite: Send + Sync {
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

/// A refusal after real output that the provider lets another model
/// continue: the credit token to present with the prefill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PrefillClaim {
    pub(crate) token: String,
}

/// Partial-refusal continuation (Anthropic only): follows a stream on its
/// way to the client for what continuing it needs, and builds the request
/// and the rewrite that continue it.
pub(crate) trait PartialContinuation: Send {
    /// Looks at one frame before it goes to the client. `Some` when the
    /// frame is a refusal after real text that may be continued; it and
    /// every frame after it are then held back.
    fn claim(&mut self, frame: &Frame) -> Option<PrefillClaim>;
    /// Turns the original request into the continuation's: the text the
    /// client has seen as an appended assistant turn, and the credit token.
    fn prefill(
        &self,
        headers: &mut HeaderMap,
        body: &mut Value,
        claim: &PrefillClaim,
    ) -> Result<(), RewriteError>;
    /// The rewrite that continues the message the client has begun.
    fn continuation(&self) -> Box<dyn FrameRewrite>;
    /// [`claim`](Self::claim) for a whole JSON message.
    fn claim_json(&mut self, message: &Value) -> Option<PrefillClaim>;
    /// The original whole message continued by the continuation's: one
    /// content array, the continuation's stop and usage.
    fn merge_json(&self, original: &mut Value, continuation: &Value) -> Result<(), RewriteError>;
}

/// Who handed a turn to whom, for a handoff marker: every model that
/// declined, in order, then the one that served.
#[derive(Debug, Clone)]
pub(crate) struct Handoff<'a> {
    pub(crate) declined: &'a [Declined],
    pub(crate) to: &'a str,
    /// The id of the message the first model began: the served message
    /// keeps it, as one message of one turn.
    pub(crate) primary_id: Option<&'a str>,
}

/// One attempt of a client-side chain that declined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Declined {
    pub(crate) model: String,
    pub(crate) category: Option<String>,
    pub(crate) usage: Option<Usage>,
}

/// Why a request could not be rewritten for a recovery attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RewriteError(pub(crate) &'static str);

/// What a retarget writes into a request's server-side fallbacks: the
/// operator's `models`, never the requested `own_model`, only those in
/// `allowed` when the operator gave the requested model an allowlist;
/// `inject` adds the list to a request that had none.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Retarget<'a> {
    pub(crate) models: &'a [String],
    pub(crate) own_model: Option<&'a str>,
    pub(crate) inject: bool,
    pub(crate) allowed: Option<&'a [String]>,
}

/// What a retarget changed in a request, so that it can be taken back: the
/// client's own `fallbacks`, if it sent any, and the beta value the guard
/// added for the list, if it added one.
#[derive(Clone, Debug)]
pub(crate) struct ComposedFallbacks {
    pub(crate) previous: Option<Value>,
    pub(crate) beta: Option<&'static str>,
}

/// A prompt-caching mark, as a wire API spells it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum CacheMark {
    /// A member of the block it marks: `cache_control` (Anthropic's API,
    /// and OpenAI-compatible gateways that pass the mark on in content
    /// parts).
    Member(&'static str),
    /// A block of its own after what it marks: Bedrock Converse's
    /// `cachePoint` (the only API that spells it so, built with the
    /// `bedrock` feature).
    #[cfg_attr(not(feature = "bedrock"), allow(dead_code))]
    Block(&'static str),
}

/// Anthropic's `cache_control`.
pub(crate) const CACHE_CONTROL: CacheMark = CacheMark::Member("cache_control");

/// `turn` (a message, or a system prompt's blocks) without its `mark`s at
/// any depth, for a conversation seed: a mark may sit on a block nested in
/// another one's content (a `tool_result`'s blocks). Clients put a
/// prompt-caching breakpoint on the newest user turn of every request, so
/// the first user turn carries one on the conversation's first request and
/// none after; the conversation is the same. A turn with no mark comes back
/// as it was.
pub(crate) fn without_cache_marks(turn: &Value, mark: CacheMark) -> Value {
    let mut turn = turn.clone();
    strip_cache_marks(&mut turn, mark);
    turn
}

fn strip_cache_marks(value: &mut Value, mark: CacheMark) {
    match value {
        Value::Array(items) => {
            if let CacheMark::Block(name) = mark {
                items.retain(|item| item.get(name).is_none());
            }
            for item in items {
                strip_cache_marks(item, mark);
            }
        }
        Value::Object(members) => {
            if let CacheMark::Member(name) = mark {
                members.remove(name);
            }
            for member in members.values_mut() {
                strip_cache_marks(member, mark);
            }
        }
        _ => {}
    }
}

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
    /// What of a request [`conversation_seed`](Self::conversation_seed)
    /// reads, so that a long stream keeps only that part of its request;
    /// `None` (the whole request kept) when the seed may read anywhere.
    fn seed_reach(&self) -> Option<SeedReach> {
        None
    }
    /// A fresh event judge for one streamed response. Its findings carry
    /// the answer's text and tool calls too, which the opt-in text detector
    /// reads.
    fn event_judge(&self) -> Box<dyn EventJudge>;
    /// Judges a whole successful JSON body.
    fn judge_json(&self, body: &Value) -> Finding;
    /// [`judge_json`](Self::judge_json) from the body's bytes, or `None`
    /// if they are not JSON. The finding carries the answer's text only
    /// if `keep_text` (only the text detector reads it). A dialect may
    /// override this to read just the fields it judges, without building
    /// a whole [`Value`]; it must find the same.
    fn judge_json_bytes(&self, body: &[u8], keep_text: bool) -> Option<Finding> {
        let json = serde_json::from_slice::<Value>(body).ok()?;
        let mut seen = self.judge_json(&json);
        if !keep_text {
            seen.text = String::new();
        }
        Some(seen)
    }
    /// Judges a non-2xx JSON body: some providers block prompts with an
    /// HTTP error (Azure's 400 `content_filter`).
    fn judge_error(&self, _status: StatusCode, _body: &Value) -> Option<RefusalInfo> {
        None
    }
    /// Whether [`judge_error`](Self::judge_error) can find anything, so
    /// that error bodies are only read when it can.
    fn refuses_with_errors(&self) -> bool {
        false
    }
    /// What in the request demands structured output, if anything: a JSON
    /// schema or JSON mode, or a forced tool call. Harnesses send small side
    /// calls like these (a conversation title, a model router's JSON
    /// choice) through the same endpoint; a rescue note appended in prose
    /// would answer them with text that is neither, so the rescue step is
    /// skipped for them (fallbacks still apply).
    fn structured_output(&self, _body: &Value) -> Option<&'static str> {
        None
    }
    /// Appends the rescue note as a user turn.
    fn append_note(&self, body: &mut Value, note: &str) -> Result<(), RewriteError>;
    /// Asks for another model (in the body or in the path).
    fn swap_model(&self, uri: &mut Uri, body: &mut Value, model: &str) -> Result<(), RewriteError>;
    /// What this dialect offers of the Anthropic Messages wire's own
    /// features, if it speaks that wire.
    fn anthropic(&self) -> Option<&dyn AnthropicFeatures> {
        None
    }
    /// The provider's request id in the response headers.
    fn request_id(&self, headers: &HeaderMap) -> Option<String> {
        ["request-id", "x-request-id"]
            .iter()
            .find_map(|name| headers.get(*name)?.to_str().ok().map(str::to_owned))
    }
}

/// What only the Anthropic Messages wire has: fallback credit, server-side
/// fallbacks, handoff marks, live thinking and partial-refusal
/// continuation. Each method's default is "not offered", because each host
/// of that wire offers a part of it (Bedrock's Messages API the marks and
/// live thinking, its InvokeModel a credit token in the body).
pub(crate) trait AnthropicFeatures: Send + Sync {
    /// Asks the provider to mint fallback credit on a refusal.
    fn request_fallback_credit(&self, _headers: &mut HeaderMap) {}
    /// Whether [`request_fallback_credit`](Self::request_fallback_credit)
    /// asks for anything on this host of the wire.
    fn asks_fallback_credit(&self) -> bool {
        false
    }
    /// Whether the platform behind `uri` has server-side fallbacks, so that
    /// [`retarget_fallbacks`](Self::retarget_fallbacks) may change a
    /// request to it.
    fn server_fallbacks_on(&self, _uri: &Uri) -> bool {
        false
    }
    /// Presents a fallback credit token on a fallback.
    fn attach_credit_token(&self, _headers: &mut HeaderMap, _body: &mut Value, _token: &str) {}
    /// Whether the request already carries server-side fallbacks (a list or
    /// `"default"`): the provider climbed them before it refused.
    fn carries_server_fallbacks(&self, _body: &Value) -> bool {
        false
    }
    /// Takes every trace of fallback credit off a fallback (its beta, a token in
    /// its body), for when credit is off.
    fn withdraw_fallback_credit(&self, _headers: &mut HeaderMap, _body: &mut Value) {}
    /// Replaces an existing server-side `fallbacks` list, or adds one (and
    /// whatever header enables it) when `inject` is set, with entries the
    /// API accepts; never where the platform behind `uri` has no server-side
    /// fallback, and never over the client's `"default"`. What it changed,
    /// when it changed the body.
    fn retarget_fallbacks(
        &self,
        _uri: &Uri,
        _headers: &mut HeaderMap,
        _body: &mut Value,
        _retarget: Retarget<'_>,
    ) -> Option<ComposedFallbacks> {
        None
    }
    /// Takes back what [`retarget_fallbacks`](Self::retarget_fallbacks)
    /// changed: the request carries the client's own `fallbacks` again.
    fn restore_fallbacks(
        &self,
        _headers: &mut HeaderMap,
        _body: &mut Value,
        _composed: &ComposedFallbacks,
    ) {
    }
    /// Makes a request the guard aims at `model` one that model takes when
    /// it ends in the client's assistant prefill and `model` rejects
    /// prefill. Returns whether the body changed.
    fn fit_prefill(&self, _body: &mut Value, _model: &str) -> bool {
        false
    }
    /// Drops the request fields a credit token's response named as keeping
    /// it from being redeemed (`remove_to_redeem`), before a fallback presents a
    /// token.
    fn drop_unredeemable_fields(&self, _body: &mut Value, _fields: &[String]) {}
    /// A rewrite that marks a client-side fallback inside the served stream,
    /// the way the provider marks its own.
    fn handoff_stream(&self, _handoff: &Handoff<'_>) -> Option<Box<dyn FrameRewrite>> {
        None
    }
    /// Live thinking support: see [`LiveSplice`].
    fn live_splice(&self) -> Option<Box<dyn LiveSplice>> {
        None
    }
    /// Partial-refusal continuation support, keeping at most
    /// `max_text_bytes` of the text sent: see [`PartialContinuation`].
    fn partial_continuation(&self, _max_text_bytes: usize) -> Option<Box<dyn PartialContinuation>> {
        None
    }
    /// The same mark in a whole JSON body. Returns whether the body changed.
    fn handoff_json(&self, _body: &mut Value, _handoff: &Handoff<'_>) -> bool {
        false
    }
}

/// Every dialect, in the order they are tried.
static DIALECTS: &[&dyn Dialect] = &[
    #[cfg(feature = "bedrock")]
    &bedrock::BedrockMessages,
    #[cfg(feature = "bedrock")]
    &bedrock::BedrockInvokeModel,
    #[cfg(feature = "bedrock")]
    &bedrock::BedrockConverse,
    &anthropic::AnthropicMessages,
    &gemini::GeminiGenerateContent,
    &openai::chat::OpenAiChat,
    &openai::responses::OpenAiResponses,
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

/// A non-negative integer field, or `None`.
pub(crate) fn count(value: &Value, key: &str) -> Option<u64> {
    value.get(key)?.as_u64()
}

/// `usage`, unless it knows no count.
pub(crate) fn known(usage: Usage) -> Option<Usage> {
    (!usage.is_empty()).then_some(usage)
}

/// Prompt tokens read fresh: a prompt count that includes cached tokens,
/// less those.
pub(crate) fn fresh_input(prompt: Option<u64>, cached: Option<u64>) -> Option<u64> {
    prompt.map(|p| p.saturating_sub(cached.unwrap_or(0)))
}

/// The `type` of an object field (`response_format`, `tool_choice`, ...).
pub(crate) fn type_of<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key)?.get("type")?.as_str()
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

/// Removes one value from a comma-separated list header, keeping the others
/// (the header goes when nothing is left).
pub(crate) fn remove_list_value(headers: &mut HeaderMap, name: &'static str, value: &str) {
    let kept: Vec<String> = headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty() && v != value)
        .collect();
    headers.remove(name);
    if let Ok(joined) = http::HeaderValue::from_str(&kept.join(",")) {
        if !kept.is_empty() {
            headers.insert(name, joined);
        }
    }
}

/// Splits a URL path into its segments, ignoring empty ones.
pub(crate) fn path_segments(uri: &Uri) -> Vec<&str> {
    uri.path().split('/').filter(|s| !s.is_empty()).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use http::HeaderValue;
    use serde_json::json;

    use super::*;
    use crate::sse::SseFramer;

    /// The frames of `text`, as the guard's framer cuts them.
    pub(crate) fn frames(text: &str) -> Vec<Frame> {
        let mut framer = SseFramer::new();
        framer
            .push(Bytes::copy_from_slice(text.as_bytes()))
            .unwrap();
        let mut frames = Vec::new();
        while let Some(frame) = framer.next_frame() {
            frames.push(frame);
        }
        while let Some(frame) = framer.finish() {
            frames.push(frame);
        }
        frames
    }

    /// One frame carrying `data` (as JSON text) under the event name `event`.
    pub(crate) fn event(event: &str, data: &Value) -> Frame {
        let mut framed = frames(&format!("event: {event}\ndata: {data}\n\n"));
        assert_eq!(framed.len(), 1);
        framed.remove(0)
    }

    /// One frame carrying only `data:` lines.
    pub(crate) fn data(data: &str) -> Frame {
        let mut framed = frames(&format!("data: {data}\n\n"));
        assert_eq!(framed.len(), 1);
        framed.remove(0)
    }

    /// What one fresh event judge of `dialect` finds in `frames`, in order.
    pub(crate) fn judge_frames(dialect: &dyn Dialect, frames: &[Frame]) -> Vec<Finding> {
        let mut judge = dialect.event_judge();
        frames.iter().map(|f| judge.judge(f, false)).collect()
    }

    fn api_of(method: Method, uri: &str) -> Option<(WireApi, Option<String>)> {
        let found = recognise(&method, &uri.parse().unwrap())?;
        Some((found.dialect.wire_api(), found.path_model))
    }

    #[test]
    fn each_path_goes_to_its_dialect() {
        let post = Method::POST;
        let anthropic = Some((WireApi::AnthropicMessages, None));
        assert_eq!(api_of(post.clone(), "https://h/v1/messages"), anthropic);
        assert_eq!(
            api_of(post.clone(), "https://h/base/v1/messages/"),
            anthropic
        );
        assert_eq!(
            api_of(post.clone(), "https://h/v1/chat/completions"),
            Some((WireApi::OpenAiChatCompletions, None))
        );
        assert_eq!(
            api_of(post.clone(), "https://h/v1/responses"),
            Some((WireApi::OpenAiResponses, None))
        );
        let vertex_claude = "https://h/v1/projects/p/locations/l/publishers/anthropic/models/claude-opus-4-7:rawPredict";
        assert_eq!(
            api_of(post.clone(), vertex_claude),
            Some((WireApi::AnthropicMessages, Some("claude-opus-4-7".into())))
        );
        let vertex_gemini = "https://h/v1/projects/p/locations/l/publishers/google/models/gemini-2.5-pro:generateContent";
        assert_eq!(
            api_of(post.clone(), vertex_gemini),
            Some((
                WireApi::GeminiGenerateContent,
                Some("gemini-2.5-pro".into())
            ))
        );
        // Other endpoints and methods pass through.
        assert_eq!(
            api_of(post.clone(), "https://h/v1/messages/count_tokens"),
            None
        );
        assert_eq!(api_of(post, "https://h/v1/models"), None);
        assert_eq!(api_of(Method::GET, "https://h/v1/messages"), None);
    }

    #[test]
    fn explanations_are_cut_at_a_character_boundary() {
        assert_eq!(truncate_explanation("short"), "short");
        // 'é' is two bytes: a cut at 500 would fall inside one.
        let long = format!("a{}", "é".repeat(400));
        let cut = truncate_explanation(&long);
        assert!(cut.ends_with('…'));
        assert!(cut.len() <= MAX_EXPLANATION_BYTES + '…'.len_utf8());
        assert!(long.starts_with(cut.trim_end_matches('…')));
    }

    #[test]
    fn list_headers_gain_a_value_once() {
        let mut headers = HeaderMap::new();
        headers.insert("anthropic-beta", HeaderValue::from_static("a, b"));
        merge_list_header(&mut headers, "anthropic-beta", "c");
        assert_eq!(headers["anthropic-beta"], "a,b,c");
        merge_list_header(&mut headers, "anthropic-beta", "b");
        assert_eq!(headers["anthropic-beta"], "a,b,c");
        let mut empty = HeaderMap::new();
        merge_list_header(&mut empty, "anthropic-beta", "c");
        assert_eq!(empty["anthropic-beta"], "c");
    }

    #[test]
    fn event_types_fall_back_to_the_event_name() {
        let named = event("message_stop", &json!({"x": 1}));
        let parsed = json_event(&named).unwrap();
        assert_eq!(event_type(&parsed, &named), "message_stop");
        let typed = data(r#"{"type":"ping"}"#);
        assert_eq!(event_type(&json_event(&typed).unwrap(), &typed), "ping");
        assert!(json_event(&data("{broken")).is_none());
        assert!(json_event(&frames(": comment\n\n")[0]).is_none());
    }

    #[test]
    fn string_fields_ignore_null_and_other_types() {
        let value = json!({"a": "x", "b": null, "c": 3});
        assert_eq!(str_field(&value, "a").as_deref(), Some("x"));
        assert_eq!(str_field(&value, "b"), None);
        assert_eq!(str_field(&value, "c"), None);
        assert_eq!(str_field(&value, "d"), None);
        assert!(!is_real_text(" \n\t"));
        assert!(is_real_text(" x "));
    }
}
