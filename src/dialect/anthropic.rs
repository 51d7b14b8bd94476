//! Anthropic Messages: `POST /v1/messages` (under any base-path prefix) and
//! Claude on Vertex AI (`.../publishers/anthropic/models/{model}:rawPredict`
//! and `:streamRawPredict`, model in the path).
//!
//! Refusals: `stop_reason: "refusal"` (category and explanation from
//! `stop_details`), and the filter's block sent as an error, an HTTP 400 or
//! a stream `error` event whose message is "Output blocked by content
//! filtering policy" (signal blocked output, category `content_filter`).
//! Such an event after real output is a partial refusal; any other error is
//! an error.

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, Uri};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::fields::{typed, Count, Flag, Obj, RawText, Str};
use super::openai_chat::CONTENT_FILTER;
use super::{
    count, event_type, is_real_text, json_event, known, merge_list_header, path_segments,
    remove_list_value, str_field, truncate_explanation, type_of, Declined, Dialect, FrameRewrite,
    Handoff, Iterations, LiveSplice, Observation, PartialContinuation, PrefillClaim, RefusalInfo,
    Retarget, RewriteError, ServerFallback, StreamInspector,
};
// `Prefill` below is this file's partial-continuation tracker.
use crate::refusal::Prefill as ClaimState;
use crate::refusal::{FallbackCredit, Provider, RefusalSignal, Usage, WireApi};
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
    let claim = details.get("fallback_has_prefill_claim");
    Some(RefusalInfo {
        signal: Some(RefusalSignal::StopReason),
        category: str_field(details, "category"),
        explanation: str_field(details, "explanation"),
        credit_token: str_field(details, "fallback_credit_token"),
        usage: None,
        recommended_model: str_field(details, "recommended_model"),
        prefill: ClaimState::from_field(claim.and_then(Value::as_bool)),
    })
}

/// How Anthropic's error message begins when its filter blocked the output,
/// lowercased.
const OUTPUT_BLOCKED: &str = "output blocked by content filtering policy";

/// A refusal sent as an error (an HTTP 400 body or a stream `error` event):
/// `{"type":"error","error":{"type":"invalid_request_error","message":"Output
/// blocked by content filtering policy"}}`. Told apart from a real invalid
/// request by its message alone; the category is `content_filter` unless
/// the error's `details` names one.
fn blocked_output(body: &Value) -> Option<RefusalInfo> {
    let error = body.get("error")?;
    let message = str_field(error, "message")?;
    if !message
        .trim_start()
        .to_ascii_lowercase()
        .starts_with(OUTPUT_BLOCKED)
    {
        return None;
    }
    let named = error.get("details").and_then(|d| str_field(d, "category"));
    Some(RefusalInfo {
        signal: Some(RefusalSignal::BlockedOutput),
        category: Some(named.unwrap_or_else(|| CONTENT_FILTER.to_owned())),
        explanation: Some(truncate_explanation(message.trim())),
        ..RefusalInfo::default()
    })
}

/// One `usage.iterations` entry's kind, model and cost.
fn iteration(entry: &Value) -> (Option<&str>, Option<String>, Option<Usage>) {
    let kind = entry.get("type").and_then(Value::as_str);
    (kind, str_field(entry, "model"), usage(entry))
}

/// What a response's `usage.iterations` says of a server-side chain:
/// something only when a fallback served (a `fallback_message` entry).
fn chain_of<'a, I>(entries: I) -> Option<Iterations>
where
    I: IntoIterator<Item = (Option<&'a str>, Option<String>, Option<Usage>)>,
{
    let mut chain = Iterations::default();
    let mut served = false;
    for (kind, model, cost) in entries {
        match kind {
            Some("fallback_message") => {
                served = true;
                chain.served_by = model;
            }
            Some("message") if !served => {
                if chain.first_declined.is_none() {
                    chain.first_declined = model;
                }
                if let Some(cost) = cost {
                    *chain.declined_usage.get_or_insert_with(Usage::default) += cost;
                }
            }
            _ => {}
        }
    }
    served.then_some(chain)
}

fn iterations(usage: &Value) -> Option<Iterations> {
    chain_of(usage.get("iterations")?.as_array()?.iter().map(iteration))
}

/// `usage.fallback_credit`: what became of a credit token presented.
fn fallback_credit(usage: &Value) -> Option<FallbackCredit> {
    let status = usage.get("fallback_credit")?.get("status")?;
    credit_status(
        status.get("type").and_then(Value::as_str),
        str_field(status, "reason"),
    )
}

fn credit_status(kind: Option<&str>, reason: Option<String>) -> Option<FallbackCredit> {
    match kind? {
        "redeemed" => Some(FallbackCredit::Redeemed),
        "not_applied" => Some(FallbackCredit::NotApplied { reason }),
        _ => None,
    }
}

/// A `usage` object: `input_tokens` already leaves the cache out.
fn usage(usage: &Value) -> Option<Usage> {
    known(Usage {
        input_tokens: count(usage, "input_tokens"),
        output_tokens: count(usage, "output_tokens"),
        cache_read_tokens: count(usage, "cache_read_input_tokens"),
        cache_write_tokens: count(usage, "cache_creation_input_tokens"),
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

/// Whether the request goes to Anthropic's own API. Server-side fallback is
/// first party only ("Refusals and fallback": not on Bedrock, Vertex AI or
/// Foundry), so `fallbacks` is never added, retargeted or kept elsewhere.
/// Bedrock's paths are not Messages paths at all; Foundry serves
/// `/anthropic/v1/messages` on `*.services.ai.azure.com`.
fn first_party(uri: &Uri) -> bool {
    let foundry = uri
        .host()
        .is_some_and(|host| host.ends_with(".services.ai.azure.com"));
    vertex_model_segment(uri).is_none() && !foundry
}

/// The fields of a whole message that [`AnthropicMessages`] inspects, read
/// straight from the body's bytes (strings borrowed where they hold no
/// escape). A body these types do not fit (a key twice, an object or a list
/// where none belongs) is read as a whole `Value` instead.
#[derive(Deserialize)]
struct MessageFields<'a> {
    #[serde(default, borrow, rename = "type")]
    kind: Str<'a>,
    #[serde(default, borrow)]
    id: Str<'a>,
    #[serde(default, borrow)]
    model: Str<'a>,
    #[serde(default, borrow)]
    content: Option<Vec<Obj<BlockFields<'a>>>>,
    #[serde(default, borrow)]
    stop_reason: Str<'a>,
    #[serde(default, borrow)]
    stop_details: Option<Obj<StopDetailsFields<'a>>>,
    #[serde(default, borrow)]
    usage: Option<Obj<UsageFields<'a>>>,
}

#[derive(Deserialize)]
struct BlockFields<'a> {
    #[serde(default, borrow, rename = "type")]
    kind: Str<'a>,
    /// Read raw: it is most of a message's bytes.
    #[serde(default, borrow)]
    text: Option<RawText<'a>>,
    /// A `fallback` block's models and trigger.
    #[serde(default, borrow)]
    from: Option<Obj<ModelFields<'a>>>,
    #[serde(default, borrow)]
    to: Option<Obj<ModelFields<'a>>>,
    #[serde(default, borrow)]
    trigger: Option<Obj<TriggerFields<'a>>>,
}

#[derive(Deserialize)]
struct ModelFields<'a> {
    #[serde(default, borrow)]
    model: Str<'a>,
}

#[derive(Deserialize)]
struct TriggerFields<'a> {
    #[serde(default, borrow)]
    category: Str<'a>,
}

#[derive(Deserialize)]
struct StopDetailsFields<'a> {
    #[serde(default, borrow)]
    category: Str<'a>,
    #[serde(default, borrow)]
    explanation: Str<'a>,
    #[serde(default, borrow)]
    fallback_credit_token: Str<'a>,
    #[serde(default)]
    fallback_has_prefill_claim: Flag,
    #[serde(default, borrow)]
    recommended_model: Str<'a>,
}

#[derive(Deserialize)]
struct UsageFields<'a> {
    #[serde(default)]
    input_tokens: Count,
    #[serde(default)]
    output_tokens: Count,
    #[serde(default)]
    cache_read_input_tokens: Count,
    #[serde(default)]
    cache_creation_input_tokens: Count,
    #[serde(default, borrow)]
    iterations: Option<Vec<Obj<IterationFields<'a>>>>,
    #[serde(default, borrow)]
    fallback_credit: Option<Obj<CreditFields<'a>>>,
}

/// One `usage.iterations` entry.
#[derive(Deserialize)]
struct IterationFields<'a> {
    #[serde(default, borrow, rename = "type")]
    kind: Str<'a>,
    #[serde(default, borrow)]
    model: Str<'a>,
    #[serde(default)]
    input_tokens: Count,
    #[serde(default)]
    output_tokens: Count,
    #[serde(default)]
    cache_read_input_tokens: Count,
    #[serde(default)]
    cache_creation_input_tokens: Count,
}

#[derive(Deserialize)]
struct CreditFields<'a> {
    #[serde(default, borrow)]
    status: Option<Obj<CreditStatusFields<'a>>>,
}

#[derive(Deserialize)]
struct CreditStatusFields<'a> {
    #[serde(default, borrow, rename = "type")]
    kind: Str<'a>,
    #[serde(default, borrow)]
    reason: Str<'a>,
}

impl MessageFields<'_> {
    /// What [`AnthropicMessages::inspect_json`] observes in the same body.
    fn observe(&self, keep_text: bool) -> Observation {
        let usage = self.usage.as_ref().map(|Obj(u)| u);
        let mut seen = Observation {
            model: self.model.owned(),
            message_id: self.id.owned(),
            error: self.kind.is("error"),
            fallback_credit: usage.and_then(UsageFields::fallback_credit),
            iterations: usage.and_then(UsageFields::iterations),
            ..Observation::default()
        };
        for Obj(block) in self.content.iter().flatten() {
            seen.real_output |= block.is_output();
            seen.tool_call |= block.is_tool_call();
            if keep_text && block.kind.is("text") {
                if let Some(text) = block.text.as_ref().and_then(RawText::text) {
                    seen.text.push_str(text);
                }
            }
            ServerFallback::merge(&mut seen.server_fallback, block.server_fallback());
        }
        if self.stop_reason.is("refusal") {
            let mut refused = StopDetailsFields::refusal(&self.stop_details);
            refused.usage = self.usage.as_ref().and_then(|Obj(u)| u.usage());
            seen.refusal = Some(refused);
        }
        seen
    }
}

impl BlockFields<'_> {
    /// Whether the block is real output, as [`block_is_output`] tells from a
    /// `Value`.
    fn is_output(&self) -> bool {
        match self.kind.as_deref() {
            Some("text") => self.text.as_ref().is_some_and(RawText::is_real),
            Some(kind) => is_tool_call_block(kind),
            None => false,
        }
    }

    fn is_tool_call(&self) -> bool {
        self.kind.as_deref().is_some_and(is_tool_call_block)
    }

    /// A `fallback` block's models and trigger, as [`server_fallback`]
    /// reads them from a `Value`.
    fn server_fallback(&self) -> Option<ServerFallback> {
        let model = |m: &Option<Obj<ModelFields<'_>>>| m.as_ref().and_then(|m| m.0.model.owned());
        self.kind.is("fallback").then(|| ServerFallback {
            from: model(&self.from),
            to: model(&self.to),
            category: self.trigger.as_ref().and_then(|t| t.0.category.owned()),
        })
    }
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
        Box::<AnthropicStream>::default()
    }

    fn inspect_json(&self, body: &Value) -> Observation {
        let usage_of = body.get("usage");
        let mut seen = Observation {
            model: str_field(body, "model"),
            message_id: str_field(body, "id"),
            error: body.get("type").and_then(Value::as_str) == Some("error"),
            fallback_credit: usage_of.and_then(fallback_credit),
            iterations: usage_of.and_then(iterations),
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
            ServerFallback::merge(&mut seen.server_fallback, server_fallback(block));
        }
        seen.refusal = refusal(body);
        if let Some(refused) = &mut seen.refusal {
            refused.usage = body.get("usage").and_then(usage);
        }
        seen
    }

    fn inspect_json_bytes(&self, body: &[u8], keep_text: bool) -> Option<Observation> {
        if let Some(message) = typed::<MessageFields<'_>>(body) {
            return Some(message.observe(keep_text));
        }
        let json = serde_json::from_slice::<Value>(body).ok()?;
        let mut seen = self.inspect_json(&json);
        if !keep_text {
            seen.text = String::new();
        }
        Some(seen)
    }

    fn structured_output(&self, body: &Value) -> Option<&'static str> {
        let present = |v: Option<&Value>| v.is_some_and(|v| !v.is_null());
        if matches!(type_of(body, "tool_choice"), Some("tool" | "any")) {
            Some("a forced tool_choice")
        } else if present(body.get("output_format"))
            || present(body.get("output_config").and_then(|c| c.get("format")))
        {
            Some("an output format")
        } else {
            None
        }
    }

    fn inspect_error(&self, status: StatusCode, body: &Value) -> Option<RefusalInfo> {
        status
            .is_client_error()
            .then(|| blocked_output(body))
            .flatten()
    }

    fn refuses_with_errors(&self) -> bool {
        true
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
        // A fallback may not name the requested model: the hop's model
        // leaves the list, and an emptied list goes (the API rejects both).
        if let Some(Value::Array(list)) = object.get_mut("fallbacks") {
            list.retain(|entry| str_field(entry, "model").as_deref() != Some(model));
            if list.is_empty() {
                object.remove("fallbacks");
            }
        }
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
        let markers = handoff_blocks(handoff);
        Some(Box::new(HandoffStream {
            shift: markers.len() as u64,
            markers,
            declined: declined_iterations(handoff),
            to: handoff.to.to_owned(),
            primary_id: handoff.primary_id.map(str::to_owned),
            start_usage: None,
            inserted: false,
        }))
    }

    fn handoff_json(&self, body: &mut Value, handoff: &Handoff<'_>) -> bool {
        let Some(content) = body.get_mut("content").and_then(Value::as_array_mut) else {
            return false;
        };
        content.splice(0..0, handoff_blocks(handoff));
        if let (Some(id), Some(message)) = (handoff.primary_id, body.as_object_mut()) {
            message.insert("id".into(), Value::String(id.to_owned()));
        }
        if let Some(usage_of) = body.get_mut("usage").filter(|u| u.is_object()) {
            let served = usage(usage_of);
            let mut entries = declined_iterations(handoff);
            entries.push(iteration_entry("fallback_message", handoff.to, served));
            usage_of["iterations"] = Value::Array(entries);
        }
        true
    }

    fn request_fallback_credit(&self, headers: &mut HeaderMap) {
        merge_list_header(headers, BETA_HEADER, FALLBACK_CREDIT_BETA);
    }

    fn attach_credit_token(&self, headers: &mut HeaderMap, body: &mut Value, token: &str) {
        merge_list_header(headers, BETA_HEADER, FALLBACK_CREDIT_BETA);
        if let Some(object) = body.as_object_mut() {
            // The API rejects `fallbacks` next to a credit token in either
            // mode: a credit hop is the client's own fallback, so the
            // server-side list goes (the SDK middleware's hop body carries
            // none either). The betas stay as they were: the token is
            // redeemed under the refused request's betas.
            object.remove("fallbacks");
            // The object form with `best_effort`: a bare string turns any
            // token-layer failure into a 400 for the whole hop.
            object.insert(
                "fallback_credit_token".into(),
                json!({"token": token, "mode": "best_effort"}),
            );
        }
    }

    fn carries_server_fallbacks(&self, body: &Value) -> bool {
        // `"default"` is server-side fallbacks too: the provider's own list.
        match body.get("fallbacks") {
            Some(Value::Array(list)) => !list.is_empty(),
            Some(Value::String(_)) => true,
            _ => false,
        }
    }

    fn withdraw_fallback_credit(&self, headers: &mut HeaderMap, body: &mut Value) {
        remove_list_value(headers, BETA_HEADER, FALLBACK_CREDIT_BETA);
        if let Some(object) = body.as_object_mut() {
            object.remove("fallback_credit_token");
        }
    }

    fn retarget_fallbacks(
        &self,
        uri: &Uri,
        headers: &mut HeaderMap,
        body: &mut Value,
        retarget: Retarget<'_>,
    ) -> bool {
        let Retarget {
            models,
            own_model,
            inject,
        } = retarget;
        if !first_party(uri) {
            return false;
        }
        let Some(object) = body.as_object_mut() else {
            return false;
        };
        match object.get("fallbacks") {
            None if !inject => return false,
            // `"default"` (or any form but a list) is the client's choice
            // of the provider's own fallbacks: kept.
            Some(existing) if !existing.is_array() => return false,
            _ => {}
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

/// The `fallback` content blocks a server-side chain carries, for a
/// client-side one: one per model that declined, each naming the next, so
/// the last names the model that served.
fn handoff_blocks(handoff: &Handoff<'_>) -> Vec<Value> {
    let next = handoff.declined.iter().skip(1).map(|d| d.model.as_str());
    handoff
        .declined
        .iter()
        .zip(next.chain([handoff.to]))
        .map(|(declined, to)| {
            json!({
                "type": "fallback",
                "from": {"model": declined.model},
                "to": {"model": to},
                "trigger": {"type": "refusal", "category": declined.category},
            })
        })
        .collect()
}

/// One `usage.iterations` entry, with every count the SDKs require (`0`
/// where the response did not say).
fn iteration_entry(kind: &str, model: &str, cost: Option<Usage>) -> Value {
    let cost = cost.unwrap_or_default();
    json!({
        "type": kind,
        "model": model,
        "input_tokens": cost.input_tokens.unwrap_or(0),
        "output_tokens": cost.output_tokens.unwrap_or(0),
        "cache_read_input_tokens": cost.cache_read_tokens.unwrap_or(0),
        "cache_creation_input_tokens": cost.cache_write_tokens.unwrap_or(0),
    })
}

/// The `message` entries of the attempts that declined, in order.
fn declined_iterations(handoff: &Handoff<'_>) -> Vec<Value> {
    let entry = |d: &Declined| iteration_entry("message", &d.model, d.usage);
    handoff.declined.iter().map(entry).collect()
}

fn event_bytes(event: &Value) -> String {
    let kind = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    format!("event: {kind}\ndata: {event}\n\n")
}

/// Marks a client-side chain in the served stream as a server-side one is
/// marked: the `fallback` blocks first, right after `message_start` (which
/// keeps the first model's message id), every served block moved up past
/// them, and `usage.iterations` on the final `message_delta`, one entry
/// per attempt. The stream stays one valid message.
struct HandoffStream {
    markers: Vec<Value>,
    shift: u64,
    declined: Vec<Value>,
    to: String,
    primary_id: Option<String>,
    /// The served attempt's usage as `message_start` reported it:
    /// `message_delta` repeats only the counts that changed.
    start_usage: Option<Usage>,
    inserted: bool,
}

impl HandoffStream {
    fn marker_events(&mut self) -> String {
        self.inserted = true;
        let mut out = String::new();
        for (index, marker) in (0u64..).zip(&self.markers) {
            let start =
                json!({"type": "content_block_start", "index": index, "content_block": marker});
            let stop = json!({"type": "content_block_stop", "index": index});
            out.push_str(&(event_bytes(&start) + &event_bytes(&stop)));
        }
        out
    }

    fn message_start(&mut self, frame: &Frame, mut event: Value) -> String {
        let message = event.get_mut("message");
        self.start_usage = message
            .as_ref()
            .and_then(|m| m.get("usage"))
            .and_then(usage);
        let mut out = match (message.and_then(Value::as_object_mut), &self.primary_id) {
            (Some(message), Some(id)) => {
                message.insert("id".into(), Value::String(id.clone()));
                event_bytes(&event)
            }
            _ => String::from_utf8_lossy(frame.raw()).into_owned(),
        };
        out.push_str(&self.marker_events());
        out
    }

    fn message_delta(&self, mut event: Value) -> Option<String> {
        let usage_of = event.get_mut("usage").filter(|u| u.is_object())?;
        let mut served = self.start_usage.unwrap_or_default();
        if let Some(later) = usage(usage_of) {
            served.update(later);
        }
        let mut entries = self.declined.clone();
        entries.push(iteration_entry("fallback_message", &self.to, known(served)));
        usage_of["iterations"] = Value::Array(entries);
        Some(event_bytes(&event))
    }
}

impl FrameRewrite for HandoffStream {
    fn rewrite(&mut self, frame: &Frame) -> Option<Bytes> {
        let mut event = json_event(frame)?;
        let out = match event.get("type").and_then(Value::as_str)? {
            "message_start" if !self.inserted => self.message_start(frame, event),
            "content_block_start" | "content_block_delta" | "content_block_stop" => {
                let index = event.get("index")?.as_u64()?;
                event["index"] = json!(index + self.shift);
                let mut out = if self.inserted {
                    String::new()
                } else {
                    self.marker_events()
                };
                out.push_str(&event_bytes(&event));
                out
            }
            "message_delta" => self.message_delta(event)?,
            _ => return None,
        };
        Some(Bytes::from(out))
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
        let refused = refusal(delta)?;
        // Only a stated claim allows the appended turn. Where the field is
        // absent (some platforms leave it out) the redeeming shape is
        // unknown: the text the client has seen cannot be resent as a
        // prefill, and the refusal is left as it is.
        let offered = refused.prefill.allows_continuation();
        let real = self.texts.iter().any(|(_, text)| is_real_text(text));
        (offered && real && !self.ruled_out)
            .then_some(refused.credit_token)
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

/// Anthropic streams are all but stateless to inspect: every event names
/// its type and carries what it means. Only the usage `message_start`
/// reported is kept, for a refusal's cost: `message_delta` repeats the
/// counts that changed.
#[derive(Default)]
struct AnthropicStream {
    start_usage: Option<Usage>,
}

/// The fields of a stream event that [`AnthropicStream`] observes, read
/// like [`MessageFields`]: an event these types do not fit is read as a
/// whole `Value` instead.
#[derive(Deserialize)]
struct EventFields<'a> {
    #[serde(default, borrow, rename = "type")]
    kind: Str<'a>,
    #[serde(default, borrow)]
    message: Option<Obj<MessageFields<'a>>>,
    #[serde(default, borrow)]
    content_block: Option<Obj<BlockFields<'a>>>,
    #[serde(default, borrow)]
    delta: Option<Obj<DeltaFields<'a>>>,
    #[serde(default, borrow)]
    usage: Option<Obj<UsageFields<'a>>>,
}

/// A `content_block_delta`'s or a `message_delta`'s `delta`.
#[derive(Deserialize)]
struct DeltaFields<'a> {
    #[serde(default, borrow, rename = "type")]
    kind: Str<'a>,
    #[serde(default, borrow)]
    text: Option<RawText<'a>>,
    #[serde(default, borrow)]
    stop_reason: Str<'a>,
    #[serde(default, borrow)]
    stop_details: Option<Obj<StopDetailsFields<'a>>>,
}

impl UsageFields<'_> {
    fn usage(&self) -> Option<Usage> {
        known(Usage {
            input_tokens: self.input_tokens.0,
            output_tokens: self.output_tokens.0,
            cache_read_tokens: self.cache_read_input_tokens.0,
            cache_write_tokens: self.cache_creation_input_tokens.0,
        })
    }

    /// As [`iterations`] reads them from a `Value`.
    fn iterations(&self) -> Option<Iterations> {
        chain_of(self.iterations.as_ref()?.iter().map(|Obj(entry)| {
            let cost = known(Usage {
                input_tokens: entry.input_tokens.0,
                output_tokens: entry.output_tokens.0,
                cache_read_tokens: entry.cache_read_input_tokens.0,
                cache_write_tokens: entry.cache_creation_input_tokens.0,
            });
            (entry.kind.as_deref(), entry.model.owned(), cost)
        }))
    }

    /// As [`fallback_credit`] reads it from a `Value`.
    fn fallback_credit(&self) -> Option<FallbackCredit> {
        let Obj(status) = self.fallback_credit.as_ref()?.0.status.as_ref()?;
        credit_status(status.kind.as_deref(), status.reason.owned())
    }
}

impl StopDetailsFields<'_> {
    /// A refusal with these details, if any (usage added by the caller).
    fn refusal(details: &Option<Obj<StopDetailsFields<'_>>>) -> RefusalInfo {
        let details = details.as_ref().map(|Obj(d)| d);
        RefusalInfo {
            signal: Some(RefusalSignal::StopReason),
            category: details.and_then(|d| d.category.owned()),
            explanation: details.and_then(|d| d.explanation.owned()),
            credit_token: details.and_then(|d| d.fallback_credit_token.owned()),
            usage: None,
            recommended_model: details.and_then(|d| d.recommended_model.owned()),
            prefill: ClaimState::from_field(details.and_then(|d| d.fallback_has_prefill_claim.0)),
        }
    }
}

impl AnthropicStream {
    /// What an event says, read in typed fields when it fits them (the
    /// same as [`AnthropicStream::observe_value`] would say).
    fn observe_fields(&mut self, event: &EventFields<'_>, frame: &Frame) -> Observation {
        let mut seen = Observation::default();
        match event.kind.as_deref().or(frame.event()).unwrap_or_default() {
            "message_start" => {
                let message = event.message.as_ref().map(|Obj(m)| m);
                seen.model = message.and_then(|m| m.model.owned());
                seen.message_id = message.and_then(|m| m.id.owned());
                self.start_usage = message.and_then(|m| m.usage.as_ref()?.0.usage());
            }
            "content_block_start" => {
                if let Some(Obj(block)) = &event.content_block {
                    seen.real_output = block.is_output();
                    seen.tool_call = block.is_tool_call();
                    if block.kind.is("text") {
                        let text = block.text.as_ref().and_then(RawText::text);
                        seen.text = text.unwrap_or_default().to_owned();
                    }
                    seen.server_fallback = block.server_fallback();
                }
            }
            "content_block_delta" => {
                if let Some(Obj(delta)) = &event.delta {
                    if delta.kind.is("text_delta") {
                        let text = delta.text.as_ref().and_then(RawText::text);
                        seen.text = text.unwrap_or_default().to_owned();
                        seen.real_output = is_real_text(&seen.text);
                    }
                }
            }
            "message_delta" => {
                let usage = event.usage.as_ref().map(|Obj(u)| u);
                seen.fallback_credit = usage.and_then(UsageFields::fallback_credit);
                seen.iterations = usage.and_then(UsageFields::iterations);
                let delta = event.delta.as_ref().map(|Obj(d)| d);
                if let Some(delta) = delta.filter(|d| d.stop_reason.is("refusal")) {
                    let mut refused = StopDetailsFields::refusal(&delta.stop_details);
                    let mut total = self.start_usage.unwrap_or_default();
                    if let Some(delta) = event.usage.as_ref().and_then(|Obj(u)| u.usage()) {
                        total.update(delta);
                    }
                    refused.usage = known(total);
                    seen.refusal = Some(refused);
                }
            }
            // Rare, and read whole: it may be a refusal sent as an error.
            "error" => return self.observe_value(frame),
            _ => {}
        }
        seen
    }

    /// What an event says, read as a whole `Value`.
    fn observe_value(&mut self, frame: &Frame) -> Observation {
        let mut seen = Observation::default();
        let Some(event) = json_event(frame) else {
            return seen;
        };
        match event_type(&event, frame) {
            "message_start" => {
                let message = event.get("message");
                seen.model = message.and_then(|m| str_field(m, "model"));
                seen.message_id = message.and_then(|m| str_field(m, "id"));
                self.start_usage = message.and_then(|m| m.get("usage")).and_then(usage);
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
                let usage_of = event.get("usage");
                seen.fallback_credit = usage_of.and_then(fallback_credit);
                seen.iterations = usage_of.and_then(iterations);
                seen.refusal = event.get("delta").and_then(refusal);
                if let Some(refused) = &mut seen.refusal {
                    let mut total = self.start_usage.unwrap_or_default();
                    if let Some(delta) = event.get("usage").and_then(usage) {
                        total.update(delta);
                    }
                    refused.usage = known(total);
                }
            }
            "error" => match blocked_output(&event) {
                Some(refused) => seen.refusal = Some(refused),
                None => seen.error = true,
            },
            _ => {}
        }
        seen
    }
}

impl StreamInspector for AnthropicStream {
    fn observe(&mut self, frame: &Frame, committed: bool) -> Observation {
        if committed && self.skips_committed(frame.event_raw()) {
            return Observation::default();
        }
        let Some(data) = frame.data() else {
            return Observation::default();
        };
        // Typed first: most events fit, and are read without building a
        // tree of values.
        match typed::<EventFields<'_>>(data.as_bytes()) {
            Some(event) => self.observe_fields(&event, frame),
            None => self.observe_value(frame),
        }
    }

    /// Deltas and pings are most of a long stream and never carry a stop
    /// reason: once committed, they need no parse. (Names without U+FFFD:
    /// their raw bytes match exactly when the decoded name does.)
    ///
    /// The names are compared as arrays, which compiles to a few word
    /// compares rather than a `memcmp` call per name.
    fn skips_committed(&self, event: Option<&[u8]>) -> bool {
        event.is_some_and(|name| {
            <[u8; 19]>::try_from(name).ok() == Some(*b"content_block_delta")
                || <[u8; 4]>::try_from(name).ok() == Some(*b"ping")
        })
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;
    use crate::dialect::tests::{data, event, frames, observe};

    /// Every event of the recorded Anthropic streams (and some shaped to
    /// test the edges), observed in typed fields and as a `Value`, in
    /// order: the two readings agree, and the typed one is what was used
    /// for most.
    #[test]
    fn typed_and_value_readings_of_stream_events_agree() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let mut streams: Vec<Vec<Frame>> = Vec::new();
        for dir in [
            "anthropic/anthropic-sdk-python",
            "anthropic/vercel-ai",
            "e2e",
        ] {
            for entry in std::fs::read_dir(root.join(dir)).unwrap() {
                let path = entry.unwrap().path();
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let name = path.to_string_lossy().into_owned();
                if name.ends_with(".sse") {
                    streams.push(frames(&text));
                } else if name.ends_with(".chunks.txt") {
                    streams.push(text.lines().map(data).collect());
                }
            }
        }
        streams.push(
            [
                json!({"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 5, "cache_read_input_tokens": 2}}}),
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": " \n"}}),
                json!({"type": "content_block_start", "index": 1, "content_block": {"type": "fallback", "from": {"model": "a"}, "to": {"model": "b"}, "trigger": {"category": "cyber"}}}),
                json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "name": "t"}}),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "caf\u{e9} \"x\""}}),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": 7}}),
                json!({"type": "message_delta", "delta": {"stop_reason": "refusal"}, "usage": {"output_tokens": 3}}),
                json!({"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_details": {"category": 1, "explanation": "e"}}}),
                json!({"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_details": "odd"}}),
                json!({"message": {"model": "no type"}}),
                json!({"type": "error", "error": {"type": "overloaded_error"}}),
                json!({"type": "message_start", "message": {"id": "msg_1", "model": "m"}}),
                json!({"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_details":
                    {"fallback_credit_token": "t", "fallback_has_prefill_claim": false, "recommended_model": "r"}}}),
                json!({"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_details":
                    {"fallback_has_prefill_claim": "yes", "recommended_model": 3}}}),
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 4,
                    "iterations": [{"type": "message", "model": "a", "input_tokens": 9, "output_tokens": 1},
                                   {"type": "compaction", "input_tokens": 2},
                                   {"type": "fallback_message", "model": "b", "input_tokens": 9}],
                    "fallback_credit": {"status": {"type": "not_applied", "reason": "expired"}}}}),
                json!({"type": "message_delta", "usage": {"iterations": [{"type": "fallback_message"}],
                    "fallback_credit": {"status": {"type": "redeemed"}}}}),
                json!({"type": "message_delta", "usage": {"iterations": [{"type": "message", "model": "a"}],
                    "fallback_credit": {"status": {"type": "later"}}}}),
            ]
            .iter()
            .map(|event| data(&event.to_string()))
            .collect(),
        );
        let (mut compared, mut fitted) = (0, 0);
        for stream in &streams {
            let (mut typed_side, mut value_side) =
                (AnthropicStream::default(), AnthropicStream::default());
            for frame in stream {
                let value = value_side.observe_value(frame);
                let Some(fields) = frame
                    .data()
                    .and_then(|d| typed::<EventFields<'_>>(d.as_bytes()))
                else {
                    typed_side.observe_value(frame);
                    continue;
                };
                assert_eq!(
                    typed_side.observe_fields(&fields, frame),
                    value,
                    "{frame:?}"
                );
                assert_eq!(typed_side.start_usage, value_side.start_usage, "{frame:?}");
                fitted += 1;
            }
            compared += stream.len();
        }
        assert!(compared > 150, "{compared} events compared");
        assert!(
            fitted * 10 > compared * 9,
            "{fitted} of {compared} fitted the typed fields"
        );
    }

    fn one(frame: Frame) -> Observation {
        observe(&AnthropicMessages, &[frame]).remove(0)
    }

    fn stop(delta: Value) -> Observation {
        one(event(
            "message_delta",
            &json!({"type": "message_delta", "delta": delta, "usage": {"output_tokens": 3}}),
        ))
    }

    #[test]
    fn a_refusal_stop_in_a_stream_names_its_category_and_explanation() {
        let seen = stop(json!({"stop_reason": "refusal", "stop_details":
            {"type": "refusal", "category": "cyber", "explanation": "Declined."}}));
        let info = seen.refusal.unwrap();
        assert_eq!(info.signal, Some(RefusalSignal::StopReason));
        assert_eq!(info.category.as_deref(), Some("cyber"));
        assert_eq!(info.explanation.as_deref(), Some("Declined."));
        assert_eq!(info.credit_token, None);
        assert!(!seen.real_output);
    }

    #[test]
    fn a_refusal_may_carry_a_credit_token() {
        let seen = stop(json!({"stop_reason": "refusal", "stop_details":
            {"type": "refusal", "category": "bio", "fallback_credit_token": "tok_1"}}));
        assert_eq!(seen.refusal.unwrap().credit_token.as_deref(), Some("tok_1"));
    }

    #[test]
    fn a_refusal_without_details_or_with_a_null_category_is_still_one() {
        let bare = stop(json!({"stop_reason": "refusal"})).refusal.unwrap();
        assert_eq!((bare.category, bare.explanation), (None, None));
        let null = stop(json!({"stop_reason": "refusal",
            "stop_details": {"type": "refusal", "category": null, "explanation": null}}));
        assert_eq!(null.refusal.unwrap().category, None);
        assert!(stop(json!({"stop_reason": "end_turn"})).refusal.is_none());
    }

    #[test]
    fn thinking_and_blank_text_are_not_output() {
        let start = |block: Value| {
            one(event(
                "content_block_start",
                &json!({"type": "content_block_start", "index": 0, "content_block": block}),
            ))
        };
        assert!(!start(json!({"type": "thinking", "thinking": ""})).real_output);
        assert!(!start(json!({"type": "redacted_thinking", "data": "x"})).real_output);
        assert!(!start(json!({"type": "text", "text": " \n"})).real_output);
        assert!(start(json!({"type": "text", "text": "Hi"})).real_output);
        let tool = start(json!({"type": "tool_use", "id": "t", "name": "f", "input": {}}));
        assert!(tool.real_output && tool.tool_call);
        let delta = |delta: Value| {
            one(event(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": 0, "delta": delta}),
            ))
        };
        assert!(!delta(json!({"type": "thinking_delta", "thinking": "hm"})).real_output);
        let text = delta(json!({"type": "text_delta", "text": "Sure"}));
        assert!(text.real_output);
        assert_eq!(text.text, "Sure");
    }

    #[test]
    fn unknown_events_and_broken_json_are_tolerated() {
        let seen = observe(
            &AnthropicMessages,
            &frames(concat!(
                "event: future_event\ndata: {\"type\":\"future_event\",\"stop_reason\":\"refusal\"}\n\n",
                "event: content_block_delta\ndata: {broken\n\n",
                ": keep-alive\n\n",
            )),
        );
        assert_eq!(seen.len(), 3);
        assert!(seen.iter().all(|o| *o == Observation::default()));
        let error = one(event(
            "error",
            &json!({"type": "error", "error": {"type": "overloaded_error"}}),
        ));
        assert!(error.error);
    }

    #[test]
    fn the_model_comes_from_message_start() {
        let seen = one(event(
            "message_start",
            &json!({"type": "message_start", "message": {"model": "claude-sonnet-4-5", "content": []}}),
        ));
        assert_eq!(seen.model.as_deref(), Some("claude-sonnet-4-5"));
    }

    #[test]
    fn deltas_are_skipped_once_committed() {
        let frame = event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": "Sure"}}),
        );
        let mut inspector = AnthropicMessages.stream_inspector();
        assert_eq!(inspector.observe(&frame, true), Observation::default());
        assert!(inspector.observe(&frame, false).real_output);
    }

    #[test]
    fn only_deltas_and_pings_are_skipped_by_name() {
        let inspector = AnthropicMessages.stream_inspector();
        let skips = |name: &[u8]| inspector.skips_committed(Some(name));
        assert!(skips(b"content_block_delta") && skips(b"ping"));
        for name in [
            &b"content_block_deltas"[..],
            b"content_block_delt",
            b"content_block_start",
            b"message_delta",
            b"pin",
            b"ping ",
            b"Ping",
            b"",
        ] {
            assert!(!skips(name), "{name:?}");
        }
        assert!(!inspector.skips_committed(None));
    }

    #[test]
    fn a_server_side_fallback_block_is_read() {
        let block = json!({"type": "fallback", "from": {"model": "claude-opus-4-7"},
            "to": {"model": "claude-sonnet-4-5"}, "trigger": {"type": "refusal", "category": "cyber"}});
        let seen = one(event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": 0, "content_block": block}),
        ));
        let fallback = seen.server_fallback.unwrap();
        assert_eq!(fallback.from.as_deref(), Some("claude-opus-4-7"));
        assert_eq!(fallback.to.as_deref(), Some("claude-sonnet-4-5"));
        assert_eq!(fallback.category.as_deref(), Some("cyber"));
        assert!(!seen.real_output);
    }

    #[test]
    fn a_json_body_shows_an_empty_or_a_partial_refusal() {
        let empty = AnthropicMessages.inspect_json(&json!({"type": "message",
            "model": "claude-opus-4-7", "content": [], "stop_reason": "refusal",
            "stop_details": {"type": "refusal", "category": "cyber", "explanation": "No."}}));
        assert!(!empty.real_output);
        assert_eq!(empty.model.as_deref(), Some("claude-opus-4-7"));
        assert_eq!(empty.refusal.unwrap().explanation.as_deref(), Some("No."));
        let partial = AnthropicMessages.inspect_json(&json!({"type": "message",
            "content": [{"type": "thinking", "thinking": "x"}, {"type": "text", "text": "Part"}],
            "stop_reason": "refusal"}));
        assert!(partial.real_output && partial.refusal.is_some());
        assert_eq!(partial.text, "Part");
        let error = AnthropicMessages.inspect_json(&json!({"type": "error", "error": {}}));
        assert!(error.error && error.refusal.is_none());
    }

    #[test]
    fn a_body_read_from_its_bytes_shows_what_its_value_shows() {
        let bodies = [
            r#"{"id":"msg_b","type":"message","model":"m","content":[{"type":"fallback","from":{"model":"a"},
                "to":{"model":"b"},"trigger":{"category":"cyber"}},{"type":"fallback","from":{"model":"b"},
                "to":{"model":"c"}},{"type":"text","text":"Hi"}],"stop_reason":"end_turn",
                "usage":{"input_tokens":3,"iterations":[{"type":"message","model":"a","input_tokens":5},
                {"type":"message","model":"b","output_tokens":2},{"type":"fallback_message","model":"c"}],
                "fallback_credit":{"status":{"type":"not_applied","reason":"body_mismatch"}}}}"#,
            r#"{"content":[],"stop_reason":"refusal","stop_details":{"fallback_credit_token":"t",
                "fallback_has_prefill_claim":true,"recommended_model":"r"},"usage":{"input_tokens":1,
                "fallback_credit":{"status":{"type":"redeemed"}}}}"#,
            r#"{"type":"message","model":"claude-opus-4-7","content":[],"stop_reason":"refusal",
                "stop_details":{"type":"refusal","category":"cyber","explanation":"No.",
                "fallback_credit_token":"tok"},"usage":{"input_tokens":5,"output_tokens":2,
                "cache_read_input_tokens":1,"cache_creation_input_tokens":0}}"#,
            r#"{"content":[{"type":"thinking","thinking":"x"},{"type":"text","text":"Pa\nrt"},
                {"type":"text","text":" "}],"stop_reason":"refusal","stop_details":null,
                "usage":{"input_tokens":-1,"output_tokens":1.5}}"#,
            r#"{"content":[{"type":"tool_use","id":"t","name":"n","input":{"a":[1,{"b":null}]}}],
                "stop_reason":"tool_use"}"#,
            r#"{"content":[{"type":"fallback","from":{"model":"a"},"to":{"model":"b"},
                "trigger":{"category":"cyber"}},{"type":"fallback","from":{"model":"c"}},
                {"type":"text","text":"Hi"}],"model":null}"#,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"x"}}"#,
            // Leaves of other types read as absent.
            r#"{"type":7,"model":["m"],"content":[{"type":{"x":1},"text":"y"}],"stop_reason":"refusal",
                "stop_details":{"category":1,"explanation":true},"usage":{"input_tokens":"3"}}"#,
            // Shapes the typed read does not fit: read as a whole Value.
            r#"{"model":"a","model":"b","content":[{"type":"text","text":"x"}]}"#,
            r#"{"content":{"type":"text","text":"x"},"stop_reason":"refusal","usage":5}"#,
            r#"{"content":["text",{"type":"text","text":"y"}],"stop_reason":"refusal","stop_details":"x"}"#,
            r#"{"content":[{"type":"fallback","from":"a","trigger":[]}]}"#,
            r#"[{"type":"error"}]"#,
            r#"{"content":[{"type":"text","text":3},{"type":"text","text":null}]}"#,
            r#"["error","m"]"#,
            r#"{"content":[["text","Hi"]],"stop_reason":"refusal","stop_details":["cyber"],"usage":[1,2]}"#,
        ];
        let compact = bodies.map(|body| body.lines().map(str::trim).collect::<String>());
        let pretty = "{\n  \"content\": [{\"type\": \"text\", \"text\": \"x\"}]\n}".to_owned();
        for (at, body) in compact.iter().chain([&pretty]).enumerate() {
            // The first eight fit the typed read, the others take the Value.
            let fits = typed::<MessageFields<'_>>(body.as_bytes()).is_some();
            assert_eq!(fits, at < 8, "{body}");
            let value: Value = serde_json::from_str(body).unwrap();
            let from_value = AnthropicMessages.inspect_json(&value);
            let read = AnthropicMessages.inspect_json_bytes(body.as_bytes(), true);
            assert_eq!(read.as_ref(), Some(&from_value), "{body}");
            let without_text = AnthropicMessages.inspect_json_bytes(body.as_bytes(), false);
            let expected = Observation {
                text: String::new(),
                ..from_value
            };
            assert_eq!(without_text, Some(expected), "{body}");
        }
        assert_eq!(AnthropicMessages.inspect_json_bytes(b"{broken", true), None);
    }

    #[test]
    fn the_rescue_note_joins_the_last_user_turn_after_its_tool_results() {
        let mut body = json!({"messages": [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
        ]});
        AnthropicMessages.append_note(&mut body, "NOTE").unwrap();
        let content = body["messages"][1]["content"].as_array().unwrap();
        assert_eq!(body["messages"].as_array().unwrap().len(), 2);
        assert_eq!(content[0]["type"], "tool_result");
        assert_eq!(content[1], json!({"type": "text", "text": "NOTE"}));
    }

    #[test]
    fn the_rescue_note_turns_text_content_into_blocks_or_adds_a_turn() {
        let mut text = json!({"messages": [{"role": "user", "content": "Audit this"}]});
        AnthropicMessages.append_note(&mut text, "NOTE").unwrap();
        assert_eq!(
            text["messages"][0]["content"],
            json!([{"type": "text", "text": "Audit this"}, {"type": "text", "text": "NOTE"}])
        );
        let mut after = json!({"messages": [{"role": "user", "content": "a"},
                                            {"role": "assistant", "content": "b"}]});
        AnthropicMessages.append_note(&mut after, "NOTE").unwrap();
        assert_eq!(after["messages"][2]["role"], "user");
        assert_eq!(after["messages"][2]["content"][0]["text"], "NOTE");
        assert!(AnthropicMessages
            .append_note(&mut json!({}), "NOTE")
            .is_err());
        let mut odd = json!({"messages": [{"role": "user", "content": 7}]});
        assert!(AnthropicMessages.append_note(&mut odd, "NOTE").is_err());
    }

    #[test]
    fn a_model_swap_rewrites_the_body_or_the_vertex_path() {
        let mut uri: Uri = "https://h/v1/messages".parse().unwrap();
        let mut body = json!({"model": "claude-opus-4-7", "messages": []});
        AnthropicMessages
            .swap_model(&mut uri, &mut body, "claude-sonnet-4-5")
            .unwrap();
        assert_eq!(body["model"], "claude-sonnet-4-5");
        assert_eq!(uri, "https://h/v1/messages");

        let vertex = "https://h/v1/projects/p/locations/l/publishers/anthropic/models/claude-opus-4-7:streamRawPredict?x=1";
        let mut uri: Uri = vertex.parse().unwrap();
        let mut body = json!({"anthropic_version": "vertex-2023-10-16", "messages": []});
        assert!(AnthropicMessages.is_streaming(&uri, &body));
        AnthropicMessages
            .swap_model(&mut uri, &mut body, "claude-sonnet-4-5")
            .unwrap();
        assert_eq!(
            uri,
            "https://h/v1/projects/p/locations/l/publishers/anthropic/models/claude-sonnet-4-5:streamRawPredict?x=1"
        );
        assert!(body.get("model").is_none());
        let recognised = AnthropicMessages.recognise(&Method::POST, &uri);
        assert_eq!(recognised, Some(Some("claude-sonnet-4-5".to_owned())));
    }

    #[test]
    fn vertex_paths_of_other_publishers_or_methods_are_not_claude() {
        let other = |path: &str| AnthropicMessages.recognise(&Method::POST, &path.parse().unwrap());
        let base = "https://h/v1/projects/p/locations/l/publishers";
        assert_eq!(
            other(&format!("{base}/google/models/gemini:rawPredict")),
            None
        );
        assert_eq!(
            other(&format!("{base}/anthropic/models/claude:countTokens")),
            None
        );
        let uri: Uri = format!("{base}/anthropic/models/claude:rawPredict")
            .parse()
            .unwrap();
        assert!(!AnthropicMessages.is_streaming(&uri, &json!({"stream": false})));
        assert!(AnthropicMessages.is_streaming(&uri, &json!({"stream": true})));
    }

    #[test]
    fn a_credit_token_goes_in_the_body_with_its_beta() {
        let mut headers = HeaderMap::new();
        headers.insert(BETA_HEADER, HeaderValue::from_static("other-beta"));
        let mut body = json!({"model": "m"});
        AnthropicMessages.attach_credit_token(&mut headers, &mut body, "tok_1");
        assert_eq!(
            body["fallback_credit_token"],
            json!({"token": "tok_1", "mode": "best_effort"})
        );
        assert_eq!(
            headers[BETA_HEADER],
            format!("other-beta,{FALLBACK_CREDIT_BETA}")
        );
        let mut asked = HeaderMap::new();
        AnthropicMessages.request_fallback_credit(&mut asked);
        assert_eq!(asked[BETA_HEADER], FALLBACK_CREDIT_BETA);
    }

    #[test]
    fn server_fallbacks_are_retargeted_or_injected_within_the_cap() {
        let models: Vec<String> = ["claude-opus-4-7", "a", "b", "a", "c", "d"]
            .map(str::to_owned)
            .to_vec();
        let own = Some("claude-opus-4-7");
        let mut headers = HeaderMap::new();
        let mut body = json!({"model": "claude-opus-4-7"});
        // Nothing to retarget and no injection asked for.
        let uri: Uri = "https://api.anthropic.com/v1/messages".parse().unwrap();
        assert!(!AnthropicMessages.retarget_fallbacks(
            &uri,
            &mut headers,
            &mut body,
            Retarget {
                models: &models,
                own_model: own,
                inject: false,
            }
        ));
        assert!(body.get("fallbacks").is_none());

        assert!(AnthropicMessages.retarget_fallbacks(
            &uri,
            &mut headers,
            &mut body,
            Retarget {
                models: &models,
                own_model: own,
                inject: true,
            }
        ));
        let listed: Vec<&str> = body["fallbacks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["model"].as_str().unwrap())
            .collect();
        assert_eq!(listed, ["a", "b", "c"]);
        assert_eq!(headers[BETA_HEADER], SERVER_FALLBACK_BETA);

        // The client's own options for a model it listed are kept.
        let mut headers = HeaderMap::new();
        let mut body = json!({"fallbacks": [{"model": "b", "max_tokens": 9}]});
        let two = ["b".to_owned(), "e".to_owned()];
        assert!(AnthropicMessages.retarget_fallbacks(
            &uri,
            &mut headers,
            &mut body,
            Retarget {
                models: &two,
                own_model: own,
                inject: false,
            }
        ));
        assert_eq!(
            body["fallbacks"],
            json!([{"model": "b", "max_tokens": 9}, {"model": "e"}])
        );
        assert!(headers.get(BETA_HEADER).is_none());
    }

    #[test]
    fn default_fallbacks_and_other_platforms_are_never_retargeted() {
        let models = ["b".to_owned()];
        let first_party: Uri = "https://api.anthropic.com/v1/messages".parse().unwrap();
        let mut body = json!({"model": "a", "fallbacks": "default"});
        let mut headers = HeaderMap::new();
        assert!(AnthropicMessages.carries_server_fallbacks(&body));
        assert!(!AnthropicMessages.retarget_fallbacks(
            &first_party,
            &mut headers,
            &mut body,
            Retarget {
                models: &models,
                own_model: Some("a"),
                inject: true,
            }
        ));
        assert_eq!(body["fallbacks"], "default");
        for elsewhere in [
            "https://us-east5-aiplatform.googleapis.com/v1/projects/p/locations/us-east5/publishers/anthropic/models/a:rawPredict",
            "https://r.services.ai.azure.com/anthropic/v1/messages",
        ] {
            let uri: Uri = elsewhere.parse().unwrap();
            let mut body = json!({"max_tokens": 5});
            assert!(!AnthropicMessages.retarget_fallbacks(
                &uri,
                &mut headers,
                &mut body,
                Retarget {
                    models: &models,
                    own_model: Some("a"),
                    inject: true,
                }
            ));
            assert!(body.get("fallbacks").is_none(), "{elsewhere}");
        }
        assert!(headers.is_empty());
    }

    #[test]
    fn a_hop_drops_fallbacks_that_name_its_model_or_that_a_token_replaces() {
        let mut uri: Uri = "https://api.anthropic.com/v1/messages".parse().unwrap();
        let mut body = json!({"model": "a", "fallbacks": [{"model": "b"}, {"model": "c"}]});
        AnthropicMessages
            .swap_model(&mut uri, &mut body, "b")
            .unwrap();
        assert_eq!(body["fallbacks"], json!([{"model": "c"}]));
        AnthropicMessages
            .swap_model(&mut uri, &mut body, "c")
            .unwrap();
        assert!(body.get("fallbacks").is_none(), "an emptied list goes");

        let mut headers = HeaderMap::new();
        let mut body = json!({"model": "b", "fallbacks": "default"});
        AnthropicMessages.attach_credit_token(&mut headers, &mut body, "tok");
        assert!(body.get("fallbacks").is_none());
        assert_eq!(body["fallback_credit_token"]["token"], "tok");
    }

    #[test]
    fn a_handoff_is_marked_first_in_json_and_in_the_stream() {
        let declined = [Declined {
            model: "claude-opus-4-7".into(),
            category: Some("cyber".into()),
            usage: None,
        }];
        let handoff = Handoff {
            declined: &declined,
            to: "claude-sonnet-4-5",
            primary_id: None,
        };
        let mut body = json!({"content": [{"type": "text", "text": "Hi"}]});
        assert!(AnthropicMessages.handoff_json(&mut body, &handoff));
        assert_eq!(body["content"][0]["type"], "fallback");
        assert_eq!(body["content"][0]["to"]["model"], "claude-sonnet-4-5");
        assert_eq!(body["content"][1]["text"], "Hi");

        let mut rewrite = AnthropicMessages.handoff_stream(&handoff).unwrap();
        let start = data(r#"{"type":"message_start","message":{"content":[]}}"#);
        let out = rewrite.rewrite(&start).unwrap();
        let out = std::str::from_utf8(&out).unwrap();
        assert!(out.starts_with("data: {\"type\":\"message_start\""));
        let marked = frames(&out[start.raw().len()..]);
        assert_eq!(
            json_event(&marked[0]).unwrap()["content_block"]["type"],
            "fallback"
        );
        assert_eq!(
            json_event(&marked[1]).unwrap()["type"],
            "content_block_stop"
        );
        let block = data(
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        );
        let moved = frames(std::str::from_utf8(&rewrite.rewrite(&block).unwrap()).unwrap());
        assert_eq!(json_event(&moved[0]).unwrap()["index"], 1);
        assert!(rewrite.rewrite(&data(r#"{"type":"ping"}"#)).is_none());
    }

    fn prefill_after(events: &[Value]) -> (Box<dyn PartialContinuation>, Option<PrefillClaim>) {
        let mut track = AnthropicMessages.partial_continuation(1 << 20).unwrap();
        let mut claim = None;
        for payload in events {
            let kind = payload["type"].as_str().unwrap();
            claim = claim.or(track.observe(&event(kind, payload)));
        }
        (track, claim)
    }

    fn claimed_refusal() -> Value {
        json!({"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_details":
            {"type": "refusal", "category": "cyber", "explanation": null,
             "fallback_credit_token": "tok", "fallback_has_prefill_claim": true}}})
    }

    fn text_block(index: u64, text: &str) -> [Value; 2] {
        [
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}}),
        ]
    }

    #[test]
    fn a_claimed_refusal_after_text_is_offered_and_prefilled_after_the_clients_own_prefill() {
        let [start, delta] = text_block(1, "continued \n");
        let thinking = json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "thinking", "thinking": ""}});
        let (track, claim) = prefill_after(&[thinking, start, delta, claimed_refusal()]);
        let claim = claim.expect("offered");
        assert_eq!(claim.token, "tok");
        // The client's own prefill, as a string: the text goes after it.
        let mut body = json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Sure:"},
        ]});
        let mut headers = HeaderMap::new();
        headers.insert(BETA_HEADER, HeaderValue::from_static("other-beta"));
        track.prefill(&mut headers, &mut body, &claim).unwrap();
        assert_eq!(
            body["messages"][1],
            json!({"role": "assistant", "content": [
                {"type": "text", "text": "Sure:"},
                {"type": "text", "text": "continued"},
            ]})
        );
        assert_eq!(body["messages"].as_array().unwrap().len(), 2);
        assert_eq!(
            body["fallback_credit_token"],
            json!({"token": "tok", "mode": "best_effort"})
        );
        assert_eq!(
            headers[BETA_HEADER],
            "other-beta,fallback-credit-2026-07-01"
        );
    }

    #[test]
    fn no_offer_without_real_text_or_after_a_tool_call() {
        let [start, blank] = text_block(0, "  ");
        assert!(prefill_after(&[start.clone(), blank, claimed_refusal()])
            .1
            .is_none());
        let [_, delta] = text_block(0, "text");
        let tool = json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "mcp_tool_use", "id": "t", "name": "n", "input": {}}});
        let stop = json!({"type": "content_block_stop", "index": 1});
        assert!(
            prefill_after(&[start, delta, tool, stop, claimed_refusal()])
                .1
                .is_none()
        );
    }

    #[test]
    fn merged_json_keeps_both_contents_and_ends_as_the_continuation_ended() {
        let mut original = json!({"id": "a", "content": [{"type": "text", "text": "one"}],
            "stop_reason": "refusal", "stop_details": {"type": "refusal"}, "usage": {"output_tokens": 1}});
        let more = json!({"id": "b", "content": [{"type": "text", "text": "two"}],
            "stop_reason": "end_turn", "stop_sequence": null, "usage": {"output_tokens": 2}});
        let track = AnthropicMessages.partial_continuation(1024).unwrap();
        track.merge_json(&mut original, &more).unwrap();
        assert_eq!(
            original,
            json!({"id": "a", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
                "stop_reason": "end_turn", "stop_sequence": null, "usage": {"output_tokens": 2}})
        );
    }

    #[test]
    fn the_filters_block_sent_as_an_error_is_a_refusal_and_other_errors_are_not() {
        let blocked = json!({"type": "error", "error": {"details": null,
            "type": "invalid_request_error",
            "message": "Output blocked by content filtering policy"},
            "request_id": "req_1"});
        let bad = StatusCode::BAD_REQUEST;
        let info = AnthropicMessages.inspect_error(bad, &blocked).unwrap();
        assert_eq!(info.signal, Some(RefusalSignal::BlockedOutput));
        assert_eq!(info.category.as_deref(), Some("content_filter"));
        assert_eq!(
            info.explanation.as_deref(),
            Some("Output blocked by content filtering policy")
        );
        let named = json!({"type": "error", "error": {"type": "invalid_request_error",
            "message": "Output blocked by content filtering policy",
            "details": {"category": "cyber"}}});
        let info = AnthropicMessages.inspect_error(bad, &named).unwrap();
        assert_eq!(info.category.as_deref(), Some("cyber"));
        // Real invalid requests, and the same words on a server error.
        for message in [
            "messages.1.content: Input should be a valid list",
            "prompt is too long: 210000 tokens > 200000 maximum",
            "content filtering policy",
        ] {
            let other = json!({"type": "error",
                "error": {"type": "invalid_request_error", "message": message}});
            assert_eq!(
                AnthropicMessages.inspect_error(bad, &other),
                None,
                "{message}"
            );
        }
        let server = StatusCode::INTERNAL_SERVER_ERROR;
        assert_eq!(AnthropicMessages.inspect_error(server, &blocked), None);
        assert!(AnthropicMessages.refuses_with_errors());
    }

    #[test]
    fn a_blocked_output_error_event_is_a_refusal_and_an_overload_an_error() {
        let blocked = json!({"type": "error", "error": {"type": "invalid_request_error",
            "message": "Output blocked by content filtering policy"}});
        let seen = one(event("error", &blocked));
        assert!(!seen.error);
        let refusal = seen.refusal.unwrap();
        assert_eq!(refusal.signal, Some(RefusalSignal::BlockedOutput));
        assert_eq!(refusal.category.as_deref(), Some("content_filter"));
        let overloaded = json!({"type": "error",
            "error": {"type": "overloaded_error", "message": "Overloaded"}});
        let seen = one(event("error", &overloaded));
        assert!(seen.error && seen.refusal.is_none());
        // After text the same event is a partial refusal.
        let text = [
            event(
                "content_block_start",
                &json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
            ),
            event(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": "Here is"}}),
            ),
            event("error", &blocked),
        ];
        let seen = observe(&AnthropicMessages, &text);
        assert!(seen[1].real_output);
        assert!(seen[2].refusal.is_some());
    }

    #[test]
    fn structured_output_is_a_forced_tool_or_an_output_format() {
        let demands = |body: Value| AnthropicMessages.structured_output(&body).is_some();
        assert!(demands(
            json!({"tool_choice": {"type": "tool", "name": "title"}})
        ));
        assert!(demands(json!({"tool_choice": {"type": "any"}})));
        assert!(demands(
            json!({"output_format": {"type": "json_schema", "schema": {}}})
        ));
        assert!(demands(
            json!({"output_config": {"format": {"type": "json_schema",
            "schema": {}}}})
        ));
        assert!(!demands(json!({"tool_choice": {"type": "auto"}})));
        assert!(!demands(json!({"tool_choice": {"type": "none"}})));
        assert!(!demands(json!({"output_config": {"effort": "high"}})));
        assert!(!demands(json!({"output_format": null})));
    }

    fn json_seen(body: Value) -> Observation {
        let bytes = body.to_string();
        let seen = AnthropicMessages.inspect_json(&body);
        assert_eq!(
            AnthropicMessages.inspect_json_bytes(bytes.as_bytes(), true),
            Some(seen.clone())
        );
        seen
    }

    #[test]
    fn a_refusal_names_its_recommended_model_and_its_prefill_claim_in_three_states() {
        let details = |extra: Value| {
            let mut details =
                json!({"type": "refusal", "category": "cyber", "fallback_credit_token": "t"});
            details
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            details
        };
        let read = |extra: Value| {
            let delta = json!({"stop_reason": "refusal", "stop_details": details(extra.clone())});
            let streamed = stop(delta).refusal.unwrap();
            let whole = json_seen(json!({"content": [], "stop_reason": "refusal",
                "stop_details": details(extra)}))
            .refusal
            .unwrap();
            assert!(streamed.usage.is_some());
            assert_eq!(
                (streamed.prefill, streamed.recommended_model.clone()),
                (whole.prefill, whole.recommended_model)
            );
            (streamed.prefill, streamed.recommended_model)
        };
        assert_eq!(
            read(
                json!({"fallback_has_prefill_claim": true, "recommended_model": "claude-haiku-5-5"})
            ),
            (ClaimState::Claimed, Some("claude-haiku-5-5".into()))
        );
        assert_eq!(
            read(json!({"fallback_has_prefill_claim": false, "recommended_model": null})),
            (ClaimState::NotClaimed, None)
        );
        // Absent is unknown, not false; so is a value of another type.
        assert_eq!(read(json!({})), (ClaimState::Unknown, None));
        assert_eq!(
            read(json!({"fallback_has_prefill_claim": "true"})),
            (ClaimState::Unknown, None)
        );
    }

    #[test]
    fn a_server_side_chain_is_read_from_its_iterations_and_its_last_fallback_block() {
        let seen = json_seen(json!({
            "id": "msg_1", "model": "claude-c", "stop_reason": "end_turn",
            "content": [
                {"type": "fallback", "from": {"model": "claude-a"}, "to": {"model": "claude-b"},
                 "trigger": {"type": "refusal", "category": "cyber"}},
                {"type": "fallback", "from": {"model": "claude-b"}, "to": {"model": "claude-c"},
                 "trigger": {"type": "refusal", "category": "bio"}},
                {"type": "text", "text": "Answer"},
            ],
            "usage": {"input_tokens": 30, "output_tokens": 7, "iterations": [
                {"type": "message", "model": "claude-a", "input_tokens": 30, "output_tokens": 1,
                 "cache_read_input_tokens": 0, "cache_creation_input_tokens": 4},
                {"type": "message", "model": "claude-b", "input_tokens": 30, "output_tokens": 2,
                 "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
                {"type": "fallback_message", "model": "claude-c", "input_tokens": 30, "output_tokens": 7,
                 "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
            ]},
        }));
        let fallback = seen.server_fallback.unwrap();
        assert_eq!(fallback.from.as_deref(), Some("claude-a"));
        assert_eq!(
            fallback.to.as_deref(),
            Some("claude-c"),
            "the last block names the served model"
        );
        assert_eq!(fallback.category.as_deref(), Some("cyber"));
        assert_eq!(seen.message_id.as_deref(), Some("msg_1"));
        let chain = seen.iterations.unwrap();
        assert_eq!(chain.served_by.as_deref(), Some("claude-c"));
        assert_eq!(chain.first_declined.as_deref(), Some("claude-a"));
        let declined = chain.declined_usage.unwrap();
        assert_eq!(
            (
                declined.input_tokens,
                declined.output_tokens,
                declined.cache_write_tokens
            ),
            (Some(60), Some(3), Some(4))
        );
        // A sticky-routed turn lists only the serving attempt; iterations
        // without a fallback_message are no chain at all.
        let sticky = json_seen(json!({"content": [], "usage": {"iterations": [
            {"type": "fallback_message", "model": "claude-c"}]}}));
        assert_eq!(sticky.iterations.unwrap().first_declined, None);
        let tools = json_seen(json!({"content": [], "usage": {"iterations": [
            {"type": "message", "model": "claude-a"}, {"type": "message", "model": "claude-a"}]}}));
        assert_eq!(tools.iterations, None);
    }

    #[test]
    fn the_fate_of_a_credit_token_is_read_from_usage() {
        let streamed = one(event(
            "message_delta",
            &json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 3, "fallback_credit": {"status": {"type": "redeemed"}}}}),
        ));
        assert_eq!(streamed.fallback_credit, Some(FallbackCredit::Redeemed));
        let whole = json_seen(json!({"content": [], "usage": {"input_tokens": 1,
            "fallback_credit": {"status": {"type": "not_applied", "reason": "variant_fields_present",
                "remove_to_redeem": ["speed"]}}}}));
        assert_eq!(
            whole.fallback_credit,
            Some(FallbackCredit::not_applied("variant_fields_present"))
        );
        let unknown = json_seen(
            json!({"content": [], "usage": {"fallback_credit": {"status": {"type": "later"}}}}),
        );
        assert_eq!(unknown.fallback_credit, None);
    }

    #[test]
    fn an_absent_or_false_prefill_claim_is_never_continued() {
        let [start, delta] = text_block(0, "Some text");
        let with = |claim: Option<bool>| {
            let mut refusal = claimed_refusal();
            let details = refusal["delta"]["stop_details"].as_object_mut().unwrap();
            match claim {
                Some(claim) => details.insert("fallback_has_prefill_claim".into(), json!(claim)),
                None => details.remove("fallback_has_prefill_claim"),
            };
            prefill_after(&[start.clone(), delta.clone(), refusal]).1
        };
        assert!(with(Some(true)).is_some());
        assert!(with(Some(false)).is_none());
        assert!(with(None).is_none(), "absent is unknown: not a claim");
        let mut track = AnthropicMessages.partial_continuation(1 << 20).unwrap();
        let message = json!({"content": [{"type": "text", "text": "Some text"}], "stop_reason": "refusal",
            "stop_details": {"type": "refusal", "fallback_credit_token": "tok"}});
        assert!(track.observe_json(&message).is_none());
    }

    fn chain_handoff() -> (Vec<Declined>, &'static str) {
        let declined = vec![
            Declined {
                model: "claude-opus-4-7".into(),
                category: Some("cyber".into()),
                usage: Some(Usage::new().input_tokens(12).output_tokens(1)),
            },
            Declined {
                model: "claude-sonnet-4-5".into(),
                category: Some("bio".into()),
                usage: None,
            },
        ];
        (declined, "claude-haiku-4-5")
    }

    #[test]
    fn a_chain_is_marked_in_json_as_the_provider_marks_its_own() {
        let (declined, to) = chain_handoff();
        let handoff = Handoff {
            declined: &declined,
            to,
            primary_id: Some("msg_primary"),
        };
        let mut body = json!({"id": "msg_served", "content": [{"type": "text", "text": "Hi"}],
            "usage": {"input_tokens": 20, "output_tokens": 5}});
        assert!(AnthropicMessages.handoff_json(&mut body, &handoff));
        assert_eq!(body["id"], "msg_primary");
        let content = body["content"].as_array().unwrap();
        assert_eq!(content.len(), 3);
        assert_eq!(content[0]["from"]["model"], "claude-opus-4-7");
        assert_eq!(content[0]["to"]["model"], "claude-sonnet-4-5");
        assert_eq!(
            content[0]["trigger"],
            json!({"type": "refusal", "category": "cyber"})
        );
        assert_eq!(content[1]["from"]["model"], "claude-sonnet-4-5");
        assert_eq!(content[1]["to"]["model"], "claude-haiku-4-5");
        assert_eq!(content[2]["text"], "Hi");
        assert_eq!(
            body["usage"]["input_tokens"], 20,
            "top-level usage stays the served attempt's"
        );
        let kinds: Vec<(&str, &str, u64)> = body["usage"]["iterations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["type"].as_str().unwrap(),
                    e["model"].as_str().unwrap(),
                    e["input_tokens"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("message", "claude-opus-4-7", 12),
                ("message", "claude-sonnet-4-5", 0),
                ("fallback_message", "claude-haiku-4-5", 20)
            ]
        );
        // What the provider would read back is a served chain.
        let seen = AnthropicMessages.inspect_json(&body);
        assert_eq!(
            seen.server_fallback.unwrap().to.as_deref(),
            Some("claude-haiku-4-5")
        );
    }

    #[test]
    fn a_chain_is_marked_in_the_stream_with_indices_rising_and_the_primarys_id() {
        let (declined, to) = chain_handoff();
        let handoff = Handoff {
            declined: &declined,
            to,
            primary_id: Some("msg_primary"),
        };
        let mut rewrite = AnthropicMessages.handoff_stream(&handoff).unwrap();
        let served = [
            json!({"type": "message_start", "message": {"id": "msg_served", "model": "claude-haiku-4-5",
                "content": [], "usage": {"input_tokens": 20, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}}),
            json!({"type": "message_stop"}),
        ];
        let mut out = String::new();
        for payload in &served {
            let frame = event(payload["type"].as_str().unwrap(), payload);
            match rewrite.rewrite(&frame) {
                Some(bytes) => out.push_str(std::str::from_utf8(&bytes).unwrap()),
                None => out.push_str(std::str::from_utf8(frame.raw()).unwrap()),
            }
        }
        let events: Vec<Value> = frames(&out)
            .iter()
            .map(|f| json_event(f).unwrap())
            .collect();
        let shape: Vec<(String, Option<u64>)> = events
            .iter()
            .map(|e| (e["type"].as_str().unwrap().to_owned(), e["index"].as_u64()))
            .collect();
        let expected = [
            ("message_start", None),
            ("content_block_start", Some(0)),
            ("content_block_stop", Some(0)),
            ("content_block_start", Some(1)),
            ("content_block_stop", Some(1)),
            ("content_block_start", Some(2)),
            ("content_block_delta", Some(2)),
            ("content_block_stop", Some(2)),
            ("message_delta", None),
            ("message_stop", None),
        ];
        let expected: Vec<(String, Option<u64>)> =
            expected.iter().map(|(t, i)| (t.to_string(), *i)).collect();
        assert_eq!(shape, expected);
        assert_eq!(events[0]["message"]["id"], "msg_primary");
        assert_eq!(events[1]["content_block"]["type"], "fallback");
        assert_eq!(
            events[3]["content_block"]["to"]["model"],
            "claude-haiku-4-5"
        );
        let iterations = events[8]["usage"]["iterations"].as_array().unwrap();
        assert_eq!(iterations.len(), 3);
        assert_eq!(iterations[2]["type"], "fallback_message");
        // The served attempt's counts: message_start's input, the delta's output.
        assert_eq!(
            (
                iterations[2]["input_tokens"].as_u64(),
                iterations[2]["output_tokens"].as_u64()
            ),
            (Some(20), Some(5))
        );
        assert_eq!(iterations[0]["output_tokens"], 1);
    }
}
