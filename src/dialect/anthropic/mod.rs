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

pub(crate) mod errors;
mod fallbacks;
mod handoff;
mod live;
pub(crate) mod models;
mod prefill;
mod redeem;
mod shapes;
mod signals;
mod stream;
#[cfg(test)]
mod tests;
mod trailing;
pub(crate) mod translate;

use http::{HeaderMap, Method, StatusCode, Uri};
use serde_json::{json, Value};

use super::fields::typed;
use super::{
    merge_list_header, path_segments, remove_list_value, str_field, type_of, without_cache_marks,
    ComposedFallbacks, Dialect, EventJudge, Features, Finding, FrameRewrite, Handoff, LiveSplice,
    PartialContinuation, RefusalInfo, Retarget, RewriteError, ServerFallback, CACHE_CONTROL,
};
// `Prefill` in `prefill` is the partial-continuation tracker.
use crate::dialect::facts::{Api, Folder, ProviderFacts};
use crate::refusal::{Provider, RefusalSignal, WireApi};

/// Anthropic's folder: the Messages API, first party and on Vertex AI.
pub(crate) static FOLDER: Folder = Folder {
    provider: Some(&PROVIDER),
    apis: &[&MESSAGES],
};

/// Anthropic, as chain entries name it (`anthropic:`).
static PROVIDER: ProviderFacts = ProviderFacts {
    provider: Provider::Anthropic,
    name: "anthropic",
    entry_prefixes: &["anthropic"],
    fallback_api: WireApi::AnthropicMessages,
    finish_reason,
};

/// The Messages API (`/v1/messages`, Vertex AI's `:rawPredict`).
static MESSAGES: Api = Api {
    wire_api: WireApi::AnthropicMessages,
    name: "anthropic_messages",
    provider: Provider::Anthropic,
    platform: "anthropic",
    gen_ai_system: "anthropic",
    errors: &errors::SHAPE,
    translation: &translate::TRANSLATION,
    dialect: Some(&AnthropicMessages),
};

/// A refusal stop's finish reason: the `stop_reason` `refusal`.
fn finish_reason(_signal: RefusalSignal, _category: Option<&str>) -> &str {
    "refusal"
}

/// The provider caps the server-side `fallbacks` list at three models
/// (platform docs "Refusals and fallback", Naming your own fallback models:
/// "you can set `fallbacks` to a list of up to three models").
pub(crate) const MAX_SERVER_FALLBACKS: usize = 3;

/// The header that carries beta opt-ins.
pub(crate) const BETA_HEADER: &str = "anthropic-beta";

/// Beta value that enables the server-side `fallbacks` list form.
pub(crate) const SERVER_FALLBACK_BETA: &str = "server-side-fallback-2026-07-01";

/// Beta value that makes a refusal carry a fallback credit token.
pub(crate) const FALLBACK_CREDIT_BETA: &str = "fallback-credit-2026-07-01";

#[derive(Debug)]
pub(crate) struct AnthropicMessages;

use self::{handoff::*, live::*, prefill::*, shapes::*, signals::*, stream::*};

impl Dialect for AnthropicMessages {
    fn api(&self) -> &'static Api {
        &MESSAGES
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
        let (system, first_user) = (
            without_cache_marks(system, CACHE_CONTROL),
            without_cache_marks(first_user, CACHE_CONTROL),
        );
        Some(crate::dialect::seed::seed_bytes(&[&system, &first_user]))
    }

    fn seed_reach(&self) -> Option<crate::dialect::SeedReach> {
        Some(crate::dialect::SeedReach {
            members: &["system"],
            turns: "messages",
            is_user: |role| role == Some("user"),
        })
    }

    fn event_judge(&self) -> Box<dyn EventJudge> {
        Box::<AnthropicStream>::default()
    }

    fn judge_json(&self, body: &Value) -> Finding {
        let usage_of = body.get("usage");
        let mut seen = Finding {
            model: str_field(body, "model"),
            message_id: str_field(body, "id"),
            error: body.get("type").and_then(Value::as_str) == Some("error"),
            fallback_credit: usage_of.and_then(fallback_credit),
            iterations: usage_of.and_then(iterations),
            ..Finding::default()
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

    fn judge_json_bytes(&self, body: &[u8], keep_text: bool) -> Option<Finding> {
        if let Some(message) = typed::<MessageFields<'_>>(body) {
            return Some(message.judge(keep_text));
        }
        let json = serde_json::from_slice::<Value>(body).ok()?;
        let mut seen = self.judge_json(&json);
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

    fn judge_error(&self, status: StatusCode, body: &Value) -> Option<RefusalInfo> {
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
        // Mid-conversation system messages may end the conversation, but
        // only after a user turn (or a server tool's result): the note goes
        // before them, into the turn they follow, or no one would take it.
        let role = |m: &Value| m.get("role").and_then(Value::as_str).map(str::to_owned);
        let trailing_system = messages
            .iter()
            .rev()
            .take_while(|m| role(m).as_deref() == Some("system"))
            .count();
        let at = messages.len() - trailing_system;
        match at.checked_sub(1).map(|last| &mut messages[last]) {
            // The API merges consecutive user turns anyway; appending to the
            // last one keeps any `tool_result` blocks first, as it requires.
            Some(last) if role(last).as_deref() == Some("user") => {
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
            _ => messages.insert(at, json!({"role": "user", "content": [note_block]})),
        }
        Ok(())
    }

    fn is_reroute(&self, uri: &Uri, requested: &str, served: &str) -> bool {
        // On Foundry the request names a deployment.
        !on_foundry(uri) && models::another_claude(requested, served)
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
        // A fallback may not name the requested model: the fallback's model
        // leaves the list, and an emptied list goes (the API rejects both).
        if let Some(Value::Array(list)) = object.get_mut("fallbacks") {
            list.retain(|entry| str_field(entry, "model").as_deref() != Some(model));
            if list.is_empty() {
                object.remove("fallbacks");
            }
        }
        Ok(())
    }

    fn features(&self) -> &dyn Features {
        self
    }
}

impl Features for AnthropicMessages {
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

    fn asks_fallback_credit(&self) -> bool {
        true
    }

    fn has_server_fallbacks(&self) -> bool {
        true
    }

    fn server_fallbacks_on(&self, uri: &Uri) -> bool {
        first_party(uri)
    }

    fn attach_credit_token(&self, headers: &mut HeaderMap, body: &mut Value, token: &str) {
        merge_list_header(headers, BETA_HEADER, FALLBACK_CREDIT_BETA);
        if let Some(object) = body.as_object_mut() {
            // The API rejects `fallbacks` next to a credit token in either
            // mode: a credit fallback is the client's own fallback, so the
            // server-side list goes (the SDK middleware's fallback body carries
            // none either). The betas stay as they were: the token is
            // redeemed under the refused request's betas.
            object.remove("fallbacks");
            // The object form with `best_effort`: a bare string turns any
            // token-layer failure into a 400 for the whole fallback.
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
    ) -> Option<ComposedFallbacks> {
        fallbacks::compose(uri, headers, body, retarget)
    }

    fn restore_fallbacks(
        &self,
        headers: &mut HeaderMap,
        body: &mut Value,
        composed: &ComposedFallbacks,
    ) {
        fallbacks::restore(headers, body, composed);
    }

    fn fit_prefill(&self, body: &mut Value, model: &str) -> bool {
        trailing::fold_prefill(body, model)
    }

    fn drop_unredeemable_fields(&self, body: &mut Value, fields: &[String]) {
        redeem::drop_fields(body, fields);
    }
}
