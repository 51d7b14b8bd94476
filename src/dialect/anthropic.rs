//! Anthropic Messages: `POST /v1/messages` (under any base-path prefix) and
//! Claude on Vertex AI (`.../publishers/anthropic/models/{model}:rawPredict`
//! and `:streamRawPredict`, model in the path).

use bytes::Bytes;
use http::{HeaderMap, Method, Uri};
use serde_json::{json, Map, Value};

use super::{
    event_type, is_real_text, json_event, merge_list_header, path_segments, str_field, Dialect,
    FrameRewrite, Handoff, LiveSplice, Observation, PartialContinuation, PrefillClaim, RefusalInfo,
    RewriteError, ServerFallback, StreamInspector,
};
use crate::refusal::{Provider, RefusalSignal, WireApi};
use crate::sse::Frame;

/// The provider caps the server-side `fallbacks` list at three models.
pub(crate) const MAX_SERVER_FALLBACKS: usize = 3;

/// The header that carries beta opt-ins.
pub(crate) const BETA_HEADER: &str = "anthropic-beta";

/// Beta value that enables the server-side `fallbacks` list form.
pub(crate) const SERVER_FALLBACK_BETA: &str = "server-side-fallback-2026-07-01";

/// Beta value that makes a refusal carry a fallback credit token.
pub(crate) const FALLBACK_CREDIT_BETA: &str = "fallback-credit-2026-07-01";

#[derive(Debug)]
pub(crate) struct AnthropicMessages;

/// Block types that are a tool call: real output even if their input never
/// finishes.
fn is_tool_call_block(kind: &str) -> bool {
    matches!(kind, "tool_use" | "server_tool_use" | "mcp_tool_use")
}

/// Real output in a content block as it starts (or, in JSON, as it is).
fn block_is_output(block: &Value) -> bool {
    match block.get("type").and_then(Value::as_str) {
        Some("text") => block
            .get("text")
            .and_then(Value::as_str)
            .is_some_and(is_real_text),
        Some(kind) => is_tool_call_block(kind),
        None => false,
    }
}

fn block_is_tool_call(block: &Value) -> bool {
    block
        .get("type")
        .and_then(Value::as_str)
        .is_some_and(is_tool_call_block)
}

fn server_fallback(block: &Value) -> Option<ServerFallback> {
    if block.get("type").and_then(Value::as_str) != Some("fallback") {
        return None;
    }
    let model = |key: &str| block.get(key).and_then(|m| str_field(m, "model"));
    Some(ServerFallback {
        from: model("from"),
        to: model("to"),
        category: block.get("trigger").and_then(|t| str_field(t, "category")),
    })
}

/// A refusal in a `message_delta.delta` or a whole message.
fn refusal(carrier: &Value) -> Option<RefusalInfo> {
    if carrier.get("stop_reason").and_then(Value::as_str) != Some("refusal") {
        return None;
    }
    let details = carrier.get("stop_details").unwrap_or(&Value::Null);
    Some(RefusalInfo {
        signal: Some(RefusalSignal::StopReason),
        category: str_field(details, "category"),
        explanation: str_field(details, "explanation"),
        credit_token: str_field(details, "fallback_credit_token"),
    })
}

/// Where the model sits in a Vertex AI path: the segment after `models`,
/// written `{model}:{method}`.
fn vertex_model_segment(uri: &Uri) -> Option<(usize, &str, &str)> {
    let segments = path_segments(uri);
    // The last `models` segment: a base path may contain the word too.
    let at = segments.iter().rposition(|s| *s == "models")? + 1;
    let (model, method) = segments.get(at)?.split_once(':')?;
    let publisher = segments.get(at.checked_sub(2)?)?;
    (*publisher == "anthropic" && matches!(method, "rawPredict" | "streamRawPredict"))
        .then_some((at, model, method))
}

impl Dialect for AnthropicMessages {
    fn provider(&self) -> Provider {
        Provider::Anthropic
    }

    fn wire_api(&self) -> WireApi {
        WireApi::AnthropicMessages
    }

    fn recognise(&self, method: &Method, uri: &Uri) -> Option<Option<String>> {
        if method != Method::POST {
            return None;
        }
        if let Some((_, model, _)) = vertex_model_segment(uri) {
            return Some(Some(model.to_owned()));
        }
        // `/v1/messages` under any prefix; `/v1/messages/count_tokens` and
        // batches are other endpoints and pass through.
        let path = uri.path().trim_end_matches('/');
        path.ends_with("/v1/messages").then_some(None)
    }

    fn is_streaming(&self, uri: &Uri, body: &Value) -> bool {
        body.get("stream").and_then(Value::as_bool).unwrap_or(false)
            || vertex_model_segment(uri).is_some_and(|(_, _, m)| m == "streamRawPredict")
    }

    fn conversation_seed(&self, body: &Value) -> Option<Vec<u8>> {
        let first_user = body
            .get("messages")?
            .as_array()?
            .iter()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))?;
        let system = body.get("system").unwrap_or(&Value::Null);
        serde_json::to_vec(&(system, first_user)).ok()
    }

    fn stream_inspector(&self) -> Box<dyn StreamInspector> {
        Box::new(AnthropicStream)
    }

    fn inspect_json(&self, body: &Value) -> Observation {
        let mut seen = Observation {
            model: str_field(body, "model"),
            error: body.get("type").and_then(Value::as_str) == Some("error"),
            ..Observation::default()
        };
        for block in body
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            seen.real_output |= block_is_output(block);
            seen.tool_call |= block_is_tool_call(block);
            if block.get("type").and_then(Value::as_str) == Some("text") {
                if let Some(text) = block.get("text").and_then(Value::as_str) {
                    seen.text.push_str(text);
                }
            }
            if seen.server_fallback.is_none() {
                seen.server_fallback = server_fallback(block);
            }
        }
        seen.refusal = refusal(body);
        seen
    }

    fn append_note(&self, body: &mut Value, note: &str) -> Result<(), RewriteError> {
        let messages = body
            .get_mut("messages")
            .and_then(Value::as_array_mut)
            .ok_or(RewriteError("request has no messages array"))?;
        let note_block = json!({"type": "text", "text": note});
        match messages.last_mut() {
            // The API merges consecutive user turns anyway; appending to the
            // last one keeps any `tool_result` blocks first, as it requires.
            Some(last) if last.get("role").and_then(Value::as_str) == Some("user") => {
                let content = last
                    .get_mut("content")
                    .ok_or(RewriteError("user message has no content"))?;
                match content {
                    Value::String(text) => {
                        let text = std::mem::take(text);
                        *content = json!([{"type": "text", "text": text}, note_block]);
                    }
                    Value::Array(blocks) => blocks.push(note_block),
                    _ => return Err(RewriteError("user content is neither text nor blocks")),
                }
            }
            _ => messages.push(json!({"role": "user", "content": [note_block]})),
        }
        Ok(())
    }

    fn swap_model(&self, uri: &mut Uri, body: &mut Value, model: &str) -> Result<(), RewriteError> {
        if let Some((at, _, method)) = vertex_model_segment(uri) {
            let mut segments: Vec<String> =
                path_segments(uri).into_iter().map(str::to_owned).collect();
            segments[at] = format!("{model}:{method}");
            let mut path = format!("/{}", segments.join("/"));
            if let Some(query) = uri.query() {
                path = format!("{path}?{query}");
            }
            let mut parts = uri.clone().into_parts();
            parts.path_and_query = Some(
                path.parse()
                    .map_err(|_| RewriteError("model does not fit in a URL path"))?,
            );
            *uri = Uri::from_parts(parts).map_err(|_| RewriteError("rebuilt URL is invalid"))?;
            return Ok(());
        }
        let object = body
            .as_object_mut()
            .ok_or(RewriteError("request body is not an object"))?;
        object.insert("model".into(), Value::String(model.to_owned()));
        Ok(())
    }

    fn live_splice(&self) -> Option<Box<dyn LiveSplice>> {
        Some(Box::<LiveThinking>::default())
    }

    fn partial_continuation(&self, max_text_bytes: usize) -> Option<Box<dyn PartialContinuation>> {
        Some(Box::new(Prefill {
            max_text_bytes,
            ..Prefill::default()
        }))
    }

    fn handoff_stream(&self, handoff: &Handoff<'_>) -> Option<Box<dyn FrameRewrite>> {
        Some(Box::new(HandoffStream {
            marker: handoff_block(handoff),
            inserted: false,
        }))
    }

    fn handoff_json(&self, body: &mut Value, handoff: &Handoff<'_>) -> bool {
        match body.get_mut("content").and_then(Value::as_array_mut) {
            Some(content) => {
                content.insert(0, handoff_block(handoff));
                true
            }
            None => false,
        }
    }

    fn request_fallback_credit(&self, headers: &mut HeaderMap) {
        merge_list_header(headers, BETA_HEADER, FALLBACK_CREDIT_BETA);
    }

    fn attach_credit_token(&self, headers: &mut HeaderMap, body: &mut Value, token: &str) {
        merge_list_header(headers, BETA_HEADER, FALLBACK_CREDIT_BETA);
        if let Some(object) = body.as_object_mut() {
            // The object form with `best_effort`: a bare string turns any
            // token-layer failure into a 400 for the whole hop.
            object.insert(
                "fallback_credit_token".into(),
                json!({"token": token, "mode": "best_effort"}),
            );
        }
    }

    fn retarget_fallbacks(
        &self,
        headers: &mut HeaderMap,
        body: &mut Value,
        models: &[String],
        own_model: Option<&str>,
        inject: bool,
    ) -> bool {
        let Some(object) = body.as_object_mut() else {
            return false;
        };
        if !object.contains_key("fallbacks") && !inject {
            return false;
        }
        // Keep the client's own per-model options (max_tokens, thinking, ...)
        // for models it already listed.
        let existing: Vec<Value> = object
            .get("fallbacks")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut chosen: Vec<Value> = Vec::new();
        for model in models {
            if Some(model.as_str()) == own_model
                || chosen
                    .iter()
                    .any(|c| str_field(c, "model").as_deref() == Some(model))
            {
                continue;
            }
            if chosen.len() == MAX_SERVER_FALLBACKS {
                break;
            }
            let entry = existing
                .iter()
                .find(|e| str_field(e, "model").as_deref() == Some(model))
                .cloned()
                .unwrap_or_else(|| {
                    let mut entry = Map::new();
                    entry.insert("model".into(), Value::String(model.clone()));
                    Value::Object(entry)
                });
            chosen.push(entry);
        }
        if chosen.is_empty() {
            return false;
        }
        let chosen = Value::Array(chosen);
        if object.get("fallbacks") == Some(&chosen) {
            return false;
        }
        if inject && !object.contains_key("fallbacks") {
            merge_list_header(headers, BETA_HEADER, SERVER_FALLBACK_BETA);
        }
        object.insert("fallbacks".into(), chosen);
        true
    }
}

/// The `fallback` content block the provider uses to mark its own
/// server-side fallbacks.
fn handoff_block(handoff: &Handoff<'_>) -> Value {
    json!({
        "type": "fallback",
        "from": {"model": handoff.from},
        "to": {"model": handoff.to},
        "trigger": {"type": "refusal", "category": handoff.category},
    })
}

fn event_bytes(event: &Value) -> String {
    let kind = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    format!("event: {kind}\ndata: {event}\n\n")
}

/// Puts the marker block at index 0, right after `message_start`, and moves
/// every served block one index up, so the stream stays one valid message.
struct HandoffStream {
    marker: Value,
    inserted: bool,
}

impl HandoffStream {
    fn marker_events(&mut self) -> String {
        self.inserted = true;
        let start =
            json!({"type": "content_block_start", "index": 0, "content_block": self.marker});
        let stop = json!({"type": "content_block_stop", "index": 0});
        event_bytes(&start) + &event_bytes(&stop)
    }
}

impl FrameRewrite for HandoffStream {
    fn rewrite(&mut self, frame: &Frame) -> Option<Bytes> {
        let mut event = json_event(frame)?;
        match event.get("type").and_then(Value::as_str)? {
            "message_start" if !self.inserted => {
                let mut out = String::from_utf8_lossy(frame.raw()).into_owned();
                out.push_str(&self.marker_events());
                Some(Bytes::from(out))
            }
            "content_block_start" | "content_block_delta" | "content_block_stop" => {
                let index = event.get("index")?.as_u64()?;
                event["index"] = json!(index + 1);
                let mut out = if self.inserted {
                    String::new()
                } else {
                    self.marker_events()
                };
                out.push_str(&event_bytes(&event));
                Some(Bytes::from(out))
            }
            _ => None,
        }
    }
}

/// Live thinking: `message_start`, pings and thinking blocks go out as they
/// come; anything else (text, tool use, the stop) waits for the decision.
#[derive(Default)]
struct LiveThinking {
    thinking_blocks: Vec<u64>,
    /// Blocks the client has seen start: a continuation's blocks go after.
    forwarded_blocks: u64,
}

impl LiveSplice for LiveThinking {
    fn forward(&mut self, frame: &Frame) -> bool {
        let Some(event) = frame
            .data()
            .and_then(|d| serde_json::from_str::<Value>(d).ok())
        else {
            return frame.is_comment_only();
        };
        let index = event.get("index").and_then(Value::as_u64);
        match event.get("type").and_then(Value::as_str) {
            Some("message_start" | "ping") => true,
            Some("content_block_start") => {
                let kind = event
                    .get("content_block")
                    .and_then(|b| b.get("type"))
                    .and_then(Value::as_str);
                match (kind, index) {
                    (Some("thinking" | "redacted_thinking"), Some(index)) => {
                        self.thinking_blocks.push(index);
                        self.forwarded_blocks = self.forwarded_blocks.max(index + 1);
                        true
                    }
                    _ => false,
                }
            }
            Some("content_block_delta" | "content_block_stop") => {
                index.is_some_and(|i| self.thinking_blocks.contains(&i))
            }
            _ => false,
        }
    }

    fn continuation(&self) -> Box<dyn FrameRewrite> {
        Box::new(Continuation {
            offset: self.forwarded_blocks,
        })
    }
}

/// Continues a started message: drops the recovered attempt's own
/// `message_start` and moves its blocks after the ones already sent.
struct Continuation {
    offset: u64,
}

impl FrameRewrite for Continuation {
    fn rewrite(&mut self, frame: &Frame) -> Option<Bytes> {
        let mut event = json_event(frame)?;
        match event.get("type").and_then(Value::as_str)? {
            "message_start" => Some(Bytes::new()),
            "content_block_start" | "content_block_delta" | "content_block_stop" => {
                let index = event.get("index")?.as_u64()?;
                event["index"] = json!(index + self.offset);
                Some(Bytes::from(event_bytes(&event)))
            }
            _ => None,
        }
    }
}

/// Partial-refusal continuation: keeps the text blocks as the client got
/// them, and offers a continuation only for a refusal that carries the
/// prefill claim and a credit token, after real text, in a response that
/// started no block other than text and thinking. A tool call, open or
/// finished, rules it out: the prefill would have to carry a call without
/// its result, which no other model can continue, and the client would be
/// left with a call the continuation knows nothing of. Thinking is not
/// carried (its signature belongs to the refusing model).
#[derive(Default)]
struct Prefill {
    /// The text blocks by index, in the order they started.
    texts: Vec<(u64, String)>,
    /// Bytes of text kept.
    kept: usize,
    max_text_bytes: usize,
    /// Blocks the client has seen start: a continuation's blocks go after.
    started: u64,
    /// Something this continuation cannot carry was seen.
    ruled_out: bool,
}

impl Prefill {
    fn keep(&mut self, index: u64, text: &str) {
        self.kept += text.len();
        if self.kept > self.max_text_bytes {
            self.ruled_out = true;
            return;
        }
        match self.texts.iter_mut().find(|(i, _)| *i == index) {
            Some((_, kept)) => kept.push_str(text),
            None => self.ruled_out = true,
        }
    }

    fn block_started(&mut self, index: u64, block: &Value) {
        self.started = self.started.max(index + 1);
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                self.texts.push((index, String::new()));
                self.keep(
                    index,
                    block.get("text").and_then(Value::as_str).unwrap_or(""),
                );
            }
            Some("thinking" | "redacted_thinking") => {}
            _ => self.ruled_out = true,
        }
    }

    fn claim(&self, delta: &Value) -> Option<PrefillClaim> {
        let details = delta.get("stop_details")?;
        let offered = details.get("fallback_has_prefill_claim") == Some(&Value::Bool(true));
        let real = self.texts.iter().any(|(_, text)| is_real_text(text));
        (refusal(delta).is_some() && offered && real && !self.ruled_out)
            .then(|| str_field(details, "fallback_credit_token"))
            .flatten()
            .map(|token| PrefillClaim { token })
    }
}

impl PartialContinuation for Prefill {
    fn observe(&mut self, frame: &Frame) -> Option<PrefillClaim> {
        let event = json_event(frame)?;
        let index = event.get("index").and_then(Value::as_u64);
        match (event_type(&event, frame), index) {
            ("content_block_start", Some(index)) => {
                self.block_started(index, event.get("content_block")?);
            }
            ("content_block_delta", Some(index)) => {
                let delta = event.get("delta")?;
                if delta.get("type").and_then(Value::as_str) == Some("text_delta") {
                    self.keep(index, delta.get("text").and_then(Value::as_str)?);
                }
            }
            ("message_delta", _) => return self.claim(event.get("delta")?),
            ("content_block_start" | "content_block_delta", None) => self.ruled_out = true,
            _ => {}
        }
        None
    }

    fn prefill(
        &self,
        headers: &mut HeaderMap,
        body: &mut Value,
        claim: &PrefillClaim,
    ) -> Result<(), RewriteError> {
        let mut blocks: Vec<Value> = Vec::new();
        for (_, text) in self.texts.iter().filter(|(_, text)| !text.is_empty()) {
            blocks.push(json!({"type": "text", "text": text}));
        }
        // The API rejects a final assistant turn that ends in whitespace.
        match blocks.last_mut() {
            Some(last) => {
                let trimmed = last["text"].as_str().unwrap_or("").trim_end().to_owned();
                last["text"] = Value::String(trimmed);
            }
            None => return Err(RewriteError("no text to continue from")),
        }
        let messages = body
            .get_mut("messages")
            .and_then(Value::as_array_mut)
            .ok_or(RewriteError("request has no messages array"))?;
        match messages.last_mut() {
            // The client's own prefill: the refused response continued it.
            Some(last) if last.get("role").and_then(Value::as_str) == Some("assistant") => {
                let content = last
                    .get_mut("content")
                    .ok_or(RewriteError("assistant message has no content"))?;
                if let Value::String(text) = content {
                    let text = std::mem::take(text);
                    *content = json!([{"type": "text", "text": text}]);
                }
                content
                    .as_array_mut()
                    .ok_or(RewriteError("assistant content is neither text nor blocks"))?
                    .extend(blocks);
            }
            _ => messages.push(json!({"role": "assistant", "content": blocks})),
        }
        AnthropicMessages.attach_credit_token(headers, body, &claim.token);
        Ok(())
    }

    fn continuation(&self) -> Box<dyn FrameRewrite> {
        Box::new(Continuation {
            offset: self.started,
        })
    }

    fn observe_json(&mut self, message: &Value) -> Option<PrefillClaim> {
        let content = message.get("content")?.as_array()?;
        for (index, block) in (0u64..).zip(content) {
            self.block_started(index, block);
        }
        self.claim(message)
    }

    fn merge_json(&self, original: &mut Value, continuation: &Value) -> Result<(), RewriteError> {
        let more = continuation
            .get("content")
            .and_then(Value::as_array)
            .ok_or(RewriteError("the continuation has no content"))?;
        original
            .get_mut("content")
            .and_then(Value::as_array_mut)
            .ok_or(RewriteError("the original has no content"))?
            .extend(more.iter().cloned());
        let message = original
            .as_object_mut()
            .ok_or(RewriteError("the original is not an object"))?;
        // How the message ends is how the continuation ended.
        for key in ["stop_reason", "stop_sequence", "stop_details", "usage"] {
            match continuation.get(key) {
                Some(value) => message.insert(key.into(), value.clone()),
                None => message.remove(key),
            };
        }
        Ok(())
    }
}

/// Anthropic streams are stateless to inspect: every event names its type
/// and carries what it means.
struct AnthropicStream;

impl StreamInspector for AnthropicStream {
    fn observe(&mut self, frame: &Frame, committed: bool) -> Observation {
        let mut seen = Observation::default();
        // Deltas and pings are most of a long stream and never carry a stop
        // reason: once committed, skip parsing them.
        if committed && matches!(frame.event(), Some("content_block_delta" | "ping")) {
            return seen;
        }
        let Some(event) = json_event(frame) else {
            return seen;
        };
        match event_type(&event, frame) {
            "message_start" => {
                seen.model = event.get("message").and_then(|m| str_field(m, "model"));
            }
            "content_block_start" => {
                if let Some(block) = event.get("content_block") {
                    seen.real_output = block_is_output(block);
                    seen.tool_call = block_is_tool_call(block);
                    if block.get("type").and_then(Value::as_str) == Some("text") {
                        seen.text = str_field(block, "text").unwrap_or_default();
                    }
                    seen.server_fallback = server_fallback(block);
                }
            }
            "content_block_delta" => {
                let delta = event.get("delta").unwrap_or(&Value::Null);
                if delta.get("type").and_then(Value::as_str) == Some("text_delta") {
                    seen.text = str_field(delta, "text").unwrap_or_default();
                    seen.real_output = is_real_text(&seen.text);
                }
            }
            "message_delta" => {
                seen.refusal = event.get("delta").and_then(refusal);
            }
            "error" => seen.error = true,
            _ => {}
        }
        seen
    }
}
