//! OpenAI Chat Completions: `POST .../chat/completions` under any prefix
//! (`/v1/chat/completions`, a proxy's own base path, Azure OpenAI's
//! `/openai/v1/chat/completions`), and Azure OpenAI deployments
//! (`/openai/deployments/{deployment}/chat/completions?api-version=...`).
//!
//! On an Azure deployment URL the deployment in the path is the model: the
//! guard reads it from there, keys fallback chains by it, and a fallback
//! swaps that path segment (and the body's `model`, if the client sent one).
//!
//! Refusals:
//! - `finish_reason: "content_filter"`: the provider's filter cut the output
//!   (signal stop reason, category `content_filter`; on Azure the
//!   explanation names the filtered categories from `content_filter_results`,
//!   and when only the protected material filters, `protected_material_text`
//!   and `protected_material_code`, cut it, it is a copyright stop recorded
//!   as `recitation`).
//! - A structured-outputs refusal: `delta.refusal` text in a stream,
//!   `message.refusal` in a JSON body (signal model refusal, category
//!   `model_refusal`, explanation the refusal text, truncated).
//! - `finish_reason: "refusal"`: Claude on Azure AI Foundry's chat endpoint
//!   passing on Anthropic's refusal stop (signal stop reason, no category:
//!   the endpoint names none).
//! - Azure's blocked prompt: HTTP 400 with `error.code: "content_filter"`
//!   (signal blocked prompt, category `content_filter`; the explanation is
//!   `error.message`, prefixed with `innererror.code` when present, e.g.
//!   `ResponsibleAIPolicyViolation: ...`).
//! - OpenAI's policy errors: HTTP 400 with `error.code` `cyber_policy` or
//!   `invalid_prompt` (signal policy error, category `cyber` or
//!   `usage_policy`, explanation `error.message`; see `openai_policy`), or
//!   the same error object as a stream's mid-stream error chunk
//!   (`data: {"error": {..}}`), where Chat streams put their errors.
//!
//! A `content_filter_results` entry that reports the filter's own error
//! (`{"error": {"code": .., "message": ..}}`: the filter did not run) names
//! nothing filtered and is no refusal.

use std::collections::BTreeMap;

use http::{HeaderMap, Method, StatusCode, Uri};
use serde_json::{json, Value};

use super::policy::{policy_blocked, policy_error, OpenAiApi};
use crate::dialect::facts::Api;
use crate::dialect::{
    count, fresh_input, is_real_text, known, path_segments, str_field, truncate_explanation,
    type_of, without_cache_marks, Dialect, EventJudge, Finding, RefusalInfo, RewriteError,
    CACHE_CONTROL,
};
use crate::refusal::{RefusalSignal, Usage, RECITATION_CATEGORY};
use crate::sse::Frame;

/// The category recorded for a refusal the model wrote in its `refusal` field.
pub(crate) const MODEL_REFUSAL: &str = "model_refusal";

/// The category OpenAI and Azure use for their output and prompt filters.
pub(crate) const CONTENT_FILTER: &str = "content_filter";

/// The finish reason of a refusal stop passed on from Claude (Azure AI
/// Foundry).
const REFUSAL_FINISH: &str = "refusal";

#[derive(Debug)]
pub(crate) struct OpenAiChat;

/// Where an Azure deployment sits in the path: the index of the segment
/// after `deployments`, when the path is `.../deployments/{d}/chat/completions`.
fn azure_deployment_segment(uri: &Uri) -> Option<(usize, &str)> {
    let segments = path_segments(uri);
    let at = segments.iter().rposition(|s| *s == "deployments")? + 1;
    let rest = segments.get(at + 1..)?;
    (rest == ["chat", "completions"]).then(|| (at, segments[at]))
}

/// `uri` with path segment `at` replaced by `value`, query kept.
pub(crate) fn with_path_segment(uri: &Uri, at: usize, value: &str) -> Result<Uri, RewriteError> {
    let mut segments: Vec<&str> = path_segments(uri);
    if at >= segments.len() {
        return Err(RewriteError("no such path segment"));
    }
    segments[at] = value;
    let mut path = format!("/{}", segments.join("/"));
    if let Some(query) = uri.query() {
        path = format!("{path}?{query}");
    }
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(
        path.parse()
            .map_err(|_| RewriteError("model does not fit in a URL path"))?,
    );
    Uri::from_parts(parts).map_err(|_| RewriteError("rebuilt URL is invalid"))
}

/// Azure's blocked prompt: a client error whose body is
/// `{"error": {"code": "content_filter", "message": .., "innererror": {"code": ..}}}`.
/// Shared with the Responses dialect, which Azure blocks the same way.
pub(crate) fn azure_blocked_prompt(status: StatusCode, body: &Value) -> Option<RefusalInfo> {
    if !status.is_client_error() {
        return None;
    }
    let error = body.get("error")?;
    if error.get("code").and_then(Value::as_str) != Some(CONTENT_FILTER) {
        return None;
    }
    let message = str_field(error, "message");
    let inner = error.get("innererror").and_then(|i| str_field(i, "code"));
    let explanation = match (inner, message) {
        (Some(code), Some(message)) => Some(format!("{code}: {message}")),
        (code, message) => code.or(message),
    };
    Some(RefusalInfo {
        signal: Some(RefusalSignal::BlockedPrompt),
        category: Some(CONTENT_FILTER.to_owned()),
        explanation: explanation.map(|e| truncate_explanation(&e)),
        credit_token: None,
        usage: None,
        ..RefusalInfo::default()
    })
}

/// Whether a Chat Completions or Responses `tool_choice` forces a call of
/// the client's own tools: `"required"`, one named function or custom tool,
/// or `allowed_tools` in mode `required` (a hosted tool answers in prose).
pub(crate) fn forces_a_tool_call(choice: &Value) -> bool {
    match choice {
        Value::String(choice) => choice == "required",
        Value::Object(_) => match choice.get("type").and_then(Value::as_str) {
            Some("function" | "custom") => true,
            Some("allowed_tools") => {
                // Chat nests the mode; Responses has it at the top.
                let mode = choice.get("allowed_tools").unwrap_or(choice).get("mode");
                mode.and_then(Value::as_str) == Some("required")
            }
            _ => false,
        },
        _ => false,
    }
}

/// The request id OpenAI (`x-request-id`) or Azure (`apim-request-id`) sent.
pub(crate) fn openai_request_id(headers: &HeaderMap) -> Option<String> {
    ["x-request-id", "apim-request-id", "request-id"]
        .iter()
        .find_map(|name| headers.get(*name)?.to_str().ok().map(str::to_owned))
}

/// A non-empty model name (Azure's prompt-filter frame carries `"model": ""`).
fn model_of(value: &Value) -> Option<String> {
    str_field(value, "model").filter(|m| !m.is_empty())
}

/// Whether a message or delta starts a tool call.
fn has_tool_call(carrier: &Value) -> bool {
    carrier
        .get("tool_calls")
        .and_then(Value::as_array)
        .is_some_and(|calls| !calls.is_empty())
        || carrier.get("function_call").is_some_and(Value::is_object)
}

/// Whether `content` holds real text: a string, or (some compatible
/// servers) an array of text parts.
/// Appends a message's or delta's text, for the opt-in text detector.
fn push_text(text: &mut String, carrier: &Value) {
    match carrier.get("content") {
        Some(Value::String(content)) => text.push_str(content),
        Some(Value::Array(parts)) => {
            for part in parts {
                if let Some(content) = part.get("text").and_then(Value::as_str) {
                    text.push_str(content);
                }
            }
        }
        _ => {}
    }
}

fn has_real_content(carrier: &Value) -> bool {
    match carrier.get("content") {
        Some(Value::String(text)) => is_real_text(text),
        Some(Value::Array(parts)) => parts.iter().any(|part| {
            part.get("text")
                .and_then(Value::as_str)
                .is_some_and(is_real_text)
        }),
        _ => false,
    }
}

/// Azure's filters for protected material (known text, code from public
/// repositories): copyright stops, not safety declines (Azure AI Foundry
/// "Protected material detection filter").
const PROTECTED_MATERIAL: &[&str] = &["protected_material_text", "protected_material_code"];

/// What Azure names as filtered in `content_filter_results`:
/// `{"violence": {"filtered": true, "severity": "medium"}, ...}`.
fn filtered(choice: &Value) -> Vec<&str> {
    let Some(results) = choice
        .get("content_filter_results")
        .and_then(Value::as_object)
    else {
        return Vec::new();
    };
    results
        .iter()
        .filter(|(_, r)| r.get("filtered").and_then(Value::as_bool) == Some(true))
        .map(|(name, _)| name.as_str())
        .collect()
}

/// A `content_filter` stop of `choice`: a copyright stop when only the
/// protected material filters cut the output, else the filter's own
/// category; the explanation names what was filtered, else the refusal text.
fn filter_stop(choice: &Value, refusal_text: Option<&str>) -> RefusalInfo {
    let names = filtered(choice);
    let copyright = !names.is_empty() && names.iter().all(|n| PROTECTED_MATERIAL.contains(n));
    let category = if copyright {
        RECITATION_CATEGORY
    } else {
        CONTENT_FILTER
    };
    let explanation = if names.is_empty() {
        refusal_text.map(truncate_explanation)
    } else {
        Some(format!("filtered: {}", names.join(", ")))
    };
    RefusalInfo {
        signal: Some(RefusalSignal::StopReason),
        category: Some(category.to_owned()),
        explanation,
        ..RefusalInfo::default()
    }
}

/// A Chat Completions `usage` object (a JSON body's, or a stream's last
/// chunk's with `stream_options.include_usage`). `prompt_tokens` counts
/// cached tokens too.
pub(crate) fn chat_usage(usage: &Value) -> Option<Usage> {
    let cached = usage
        .get("prompt_tokens_details")
        .and_then(|d| count(d, "cached_tokens"));
    known(Usage {
        input_tokens: fresh_input(count(usage, "prompt_tokens"), cached),
        output_tokens: count(usage, "completion_tokens"),
        cache_read_tokens: cached,
        cache_write_tokens: None,
    })
}

/// A refusal stop passed on from Claude: the endpoint names no category.
fn refusal_stop(text: Option<&str>) -> RefusalInfo {
    RefusalInfo {
        signal: Some(RefusalSignal::StopReason),
        category: None,
        explanation: text.map(|t| truncate_explanation(t.trim())),
        ..RefusalInfo::default()
    }
}

fn model_refusal(text: &str) -> RefusalInfo {
    RefusalInfo {
        signal: Some(RefusalSignal::ModelRefusal),
        category: Some(MODEL_REFUSAL.to_owned()),
        explanation: Some(truncate_explanation(text.trim())),
        credit_token: None,
        usage: None,
        ..RefusalInfo::default()
    }
}

impl Dialect for OpenAiChat {
    fn api(&self) -> &'static Api {
        &super::CHAT
    }

    fn recognise(&self, method: &Method, uri: &Uri) -> Option<Option<String>> {
        if method != Method::POST {
            return None;
        }
        if let Some((_, deployment)) = azure_deployment_segment(uri) {
            return Some(Some(deployment.to_owned()));
        }
        let path = uri.path().trim_end_matches('/');
        path.ends_with("/chat/completions").then_some(None)
    }

    fn is_streaming(&self, _uri: &Uri, body: &Value) -> bool {
        body.get("stream").and_then(Value::as_bool).unwrap_or(false)
    }

    fn unguardable(&self, body: &Value) -> Option<&'static str> {
        // One choice of several cannot be recovered alone.
        body.get("n")
            .and_then(Value::as_u64)
            .is_some_and(|n| n > 1)
            .then_some("n > 1: several choices")
    }

    fn conversation_seed(&self, body: &Value) -> Option<Vec<u8>> {
        let messages = body.get("messages")?.as_array()?;
        let role = |m: &Value| m.get("role").and_then(Value::as_str).map(str::to_owned);
        let first_user = messages
            .iter()
            .find(|m| role(m).as_deref() == Some("user"))?;
        let system: Vec<Value> = messages
            .iter()
            .filter(|m| matches!(role(m).as_deref(), Some("system" | "developer")))
            .map(|message| without_cache_marks(message, CACHE_CONTROL))
            .collect();
        let first_user = without_cache_marks(first_user, CACHE_CONTROL);
        Some(crate::dialect::seed::seed_bytes(&[
            &Value::Array(system),
            &first_user,
        ]))
    }

    fn event_judge(&self) -> Box<dyn EventJudge> {
        Box::new(ChatStream::default())
    }

    fn judge_json(&self, body: &Value) -> Finding {
        let mut seen = Finding {
            model: model_of(body),
            error: body.get("error").is_some_and(|e| !e.is_null()),
            ..Finding::default()
        };
        for choice in body
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let message = choice.get("message").unwrap_or(&Value::Null);
            seen.real_output |= has_real_content(message) || has_tool_call(message);
            seen.tool_call |= has_tool_call(message);
            push_text(&mut seen.text, message);
            if seen.refusal.is_some() {
                continue;
            }
            let refusal_text = message
                .get("refusal")
                .and_then(Value::as_str)
                .filter(|t| is_real_text(t));
            let finish = choice.get("finish_reason").and_then(Value::as_str);
            if finish == Some(CONTENT_FILTER) {
                seen.refusal = Some(filter_stop(choice, refusal_text));
            } else if finish == Some(REFUSAL_FINISH) {
                seen.refusal = Some(refusal_stop(refusal_text));
            } else if let Some(text) = refusal_text {
                seen.refusal = Some(model_refusal(text));
            }
        }
        if let Some(refused) = &mut seen.refusal {
            refused.usage = body.get("usage").and_then(chat_usage);
        }
        seen
    }

    fn judge_error(&self, status: StatusCode, body: &Value) -> Option<RefusalInfo> {
        azure_blocked_prompt(status, body)
            .or_else(|| policy_blocked(status, body, OpenAiApi::ChatCompletions))
    }

    fn refuses_with_errors(&self) -> bool {
        true
    }

    fn structured_output(&self, body: &Value) -> Option<&'static str> {
        if matches!(
            type_of(body, "response_format"),
            Some("json_schema" | "json_object")
        ) {
            return Some("a JSON response_format");
        }
        // The deprecated form too: `function_call: {"name": ...}`.
        let forced = body.get("tool_choice").is_some_and(forces_a_tool_call)
            || body.get("function_call").is_some_and(Value::is_object);
        forced.then_some("a forced tool_choice")
    }

    fn append_note(&self, body: &mut Value, note: &str) -> Result<(), RewriteError> {
        // `tool` messages must directly follow the assistant message that
        // called them; they already do, so the end is always a valid place.
        body.get_mut("messages")
            .and_then(Value::as_array_mut)
            .ok_or(RewriteError("request has no messages array"))?
            .push(json!({"role": "user", "content": note}));
        Ok(())
    }

    fn is_reroute(&self, uri: &Uri, requested: &str, served: &str) -> bool {
        super::models::another_model(uri, requested, served)
    }

    fn swap_model(&self, uri: &mut Uri, body: &mut Value, model: &str) -> Result<(), RewriteError> {
        let object = body
            .as_object_mut()
            .ok_or(RewriteError("request body is not an object"))?;
        if let Some((at, _)) = azure_deployment_segment(uri) {
            *uri = with_path_segment(uri, at, model)?;
            // Azure ignores a body `model` on a deployment URL; keep it
            // consistent if the client sent one.
            if object.contains_key("model") {
                object.insert("model".into(), Value::String(model.to_owned()));
            }
            return Ok(());
        }
        object.insert("model".into(), Value::String(model.to_owned()));
        Ok(())
    }

    fn request_id(&self, headers: &HeaderMap) -> Option<String> {
        openai_request_id(headers)
    }
}

/// Reads a Chat Completions stream. Refusal text arrives in pieces, so it
/// is gathered per choice and reported when the choice finishes (or at
/// `[DONE]`), with the whole text as its explanation.
#[derive(Default)]
struct ChatStream {
    /// Refusal text gathered so far, per choice index.
    refusals: BTreeMap<u64, String>,
    /// A refusal was reported: the usage that follows is its cost.
    refused: bool,
}

impl ChatStream {
    fn gather(&mut self, index: u64, piece: &str) {
        let text = self.refusals.entry(index).or_default();
        // Only the explanation needs the text: stop gathering once it is long
        // enough to be truncated anyway.
        if text.len() <= crate::dialect::MAX_EXPLANATION_BYTES {
            text.push_str(piece);
        }
    }

    /// The gathered refusal of a choice, if it said anything.
    fn take(&mut self, index: u64) -> Option<String> {
        self.refusals.remove(&index).filter(|t| is_real_text(t))
    }
}

impl EventJudge for ChatStream {
    fn judge(&mut self, frame: &Frame, _committed: bool) -> Finding {
        let mut seen = Finding::default();
        let Some(data) = frame.data() else {
            return seen;
        };
        if data.trim() == "[DONE]" {
            let indices: Vec<u64> = self.refusals.keys().copied().collect();
            seen.refusal = indices
                .into_iter()
                .find_map(|i| self.take(i))
                .map(|text| model_refusal(&text));
            self.refusals.clear();
            return seen;
        }
        let Ok(chunk) = serde_json::from_str::<Value>(data) else {
            // Broken JSON inside an event is passed through, not judged.
            return seen;
        };
        seen.model = model_of(&chunk);
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            match policy_error(error, OpenAiApi::ChatCompletions) {
                Some(refused) => seen.refusal = Some(refused),
                None => seen.error = true,
            }
        }
        self.choices(&chunk, &mut seen);
        self.refused |= seen.refusal.is_some();
        if self.refused {
            // With `stream_options.include_usage`, a last chunk without
            // choices carries the usage, after the finish reason.
            seen.usage = chunk.get("usage").and_then(chat_usage);
        }
        seen
    }
}

impl ChatStream {
    /// Reads each choice of a chunk: output, tool calls, refusal text and
    /// finish reasons.
    fn choices(&mut self, chunk: &Value, seen: &mut Finding) {
        for choice in chunk
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = choice.get("index").and_then(Value::as_u64).unwrap_or(0);
            // Azure's asynchronous-filter frames carry no `delta`.
            if let Some(delta) = choice.get("delta") {
                seen.real_output |= has_real_content(delta) || has_tool_call(delta);
                seen.tool_call |= has_tool_call(delta);
                push_text(&mut seen.text, delta);
                if let Some(piece) = delta.get("refusal").and_then(Value::as_str) {
                    self.gather(index, piece);
                }
            }
            let Some(finish) = choice.get("finish_reason").and_then(Value::as_str) else {
                continue;
            };
            let gathered = self.take(index);
            if seen.refusal.is_some() {
                continue;
            }
            if finish == CONTENT_FILTER {
                seen.refusal = Some(filter_stop(choice, gathered.as_deref()));
            } else if finish == REFUSAL_FINISH {
                seen.refusal = Some(refusal_stop(gathered.as_deref()));
            } else if let Some(text) = gathered {
                seen.refusal = Some(model_refusal(&text));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use serde_json::json;

    use super::*;
    use crate::sse::SseFramer;

    #[test]
    fn a_conversation_is_seeded_the_same_whichever_turn_a_gateway_cache_mark_is_on() {
        let mark = json!({"type": "ephemeral"});
        let system = json!({"role": "system", "content": [{"type": "text", "text": "s", "cache_control": mark}]});
        let first = json!({"messages": [system, {"role": "user", "content": [
            {"type": "text", "text": "fix the build", "cache_control": mark}]}]});
        let later = json!({"messages": [system, {"role": "user", "content": [
            {"type": "text", "text": "fix the build"}]},
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": [{"type": "text", "text": "now test", "cache_control": mark}]}]});
        let seed = |body: &Value| OpenAiChat.conversation_seed(body).unwrap();
        assert_eq!(seed(&first), seed(&later));
    }

    fn judge_all(stream: &str) -> Vec<Finding> {
        let mut framer = SseFramer::new();
        framer.push(Bytes::from(stream.to_owned())).unwrap();
        let mut judge = OpenAiChat.event_judge();
        std::iter::from_fn(|| framer.next_frame())
            .map(|frame| judge.judge(&frame, false))
            .collect()
    }

    fn chunk(choices: Value, usage: Value) -> String {
        let chunk = json!({"object": "chat.completion.chunk", "model": "gpt-4o",
            "choices": choices, "usage": usage});
        format!("data: {chunk}\n\n")
    }

    #[test]
    fn a_refused_body_reports_usage_with_cached_tokens_taken_out() {
        let body = json!({
            "model": "gpt-4o",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null},
                "finish_reason": "content_filter"}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 0, "total_tokens": 1000,
                "prompt_tokens_details": {"cached_tokens": 400}},
        });
        let refusal = OpenAiChat.judge_json(&body).refusal.unwrap();
        let expected = Usage::new()
            .input_tokens(600)
            .output_tokens(0)
            .cache_read_tokens(400);
        assert_eq!(refusal.usage, Some(expected));
    }

    #[test]
    fn a_stream_reports_the_usage_after_its_refusal_and_never_an_answers() {
        let usage = json!({"prompt_tokens": 50, "completion_tokens": 0});
        let refused = chunk(
            json!([{"index": 0, "delta": {}, "finish_reason": "content_filter"}]),
            Value::Null,
        ) + &chunk(json!([]), usage.clone())
            + "data: [DONE]\n\n";
        let seen = judge_all(&refused);
        assert!(seen[0].refusal.is_some());
        let expected = Usage::new().input_tokens(50).output_tokens(0);
        assert_eq!(seen[1].usage, Some(expected));

        let answered = chunk(
            json!([{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}]),
            Value::Null,
        ) + &chunk(json!([]), usage)
            + "data: [DONE]\n\n";
        assert!(judge_all(&answered).iter().all(|seen| seen.usage.is_none()));
    }
}

#[cfg(test)]
mod usage_tests {
    use http::HeaderValue;

    use super::*;
    use crate::dialect::tests::{data, frames, judge_frames};

    fn chunk(choice: Value) -> String {
        json!({"id": "c1", "object": "chat.completion.chunk", "model": "gpt-5", "choices": [choice]})
            .to_string()
    }

    #[test]
    fn a_content_filter_stop_in_a_stream_is_a_refusal() {
        let seen = judge_frames(
            &OpenAiChat,
            &[data(&chunk(
                json!({"index": 0, "delta": {}, "finish_reason": "content_filter"}),
            ))],
        );
        let info = seen[0].refusal.clone().unwrap();
        assert_eq!(info.signal, Some(RefusalSignal::StopReason));
        assert_eq!(info.category.as_deref(), Some(CONTENT_FILTER));
        assert_eq!(info.explanation, None);
        assert_eq!(seen[0].model.as_deref(), Some("gpt-5"));
    }

    #[test]
    fn azure_names_the_filtered_categories() {
        let choice = json!({"index": 0, "delta": {}, "finish_reason": "content_filter",
            "content_filter_results": {"hate": {"filtered": false, "severity": "safe"},
                                       "violence": {"filtered": true, "severity": "medium"}}});
        let seen = judge_frames(&OpenAiChat, &[data(&chunk(choice))]);
        let explanation = seen[0].refusal.clone().unwrap().explanation;
        assert_eq!(explanation.as_deref(), Some("filtered: violence"));
    }

    #[test]
    fn refusal_text_is_gathered_until_the_choice_finishes() {
        let seen = judge_frames(
            &OpenAiChat,
            &[
                data(&chunk(
                    json!({"index": 0, "delta": {"role": "assistant", "refusal": ""}}),
                )),
                data(&chunk(
                    json!({"index": 0, "delta": {"refusal": "I can't "}}),
                )),
                data(&chunk(
                    json!({"index": 0, "delta": {"refusal": "help with that."}}),
                )),
                data(&chunk(
                    json!({"index": 0, "delta": {}, "finish_reason": "stop"}),
                )),
            ],
        );
        assert!(seen[..3]
            .iter()
            .all(|o| o.refusal.is_none() && !o.real_output));
        let info = seen[3].refusal.clone().unwrap();
        assert_eq!(info.signal, Some(RefusalSignal::ModelRefusal));
        assert_eq!(info.category.as_deref(), Some(MODEL_REFUSAL));
        assert_eq!(info.explanation.as_deref(), Some("I can't help with that."));
    }

    #[test]
    fn refusal_text_without_a_finish_is_reported_at_done() {
        let seen = judge_frames(
            &OpenAiChat,
            &[
                data(&chunk(json!({"index": 0, "delta": {"refusal": "No."}}))),
                data("[DONE]"),
            ],
        );
        let info = seen[1].refusal.clone().unwrap();
        assert_eq!(info.explanation.as_deref(), Some("No."));
        // Blank refusal text is no refusal.
        let blank = judge_frames(
            &OpenAiChat,
            &[
                data(&chunk(json!({"index": 0, "delta": {"refusal": "  "}}))),
                data("[DONE]"),
            ],
        );
        assert!(blank[1].refusal.is_none());
    }

    #[test]
    fn content_and_tool_calls_are_output() {
        let seen = judge_frames(
            &OpenAiChat,
            &[
                data(&chunk(
                    json!({"index": 0, "delta": {"role": "assistant", "content": ""}}),
                )),
                data(&chunk(json!({"index": 0, "delta": {"content": "Hi"}}))),
                data(&chunk(
                    json!({"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "t"}]}}),
                )),
            ],
        );
        assert!(!seen[0].real_output);
        assert!(seen[1].real_output && !seen[1].tool_call);
        assert_eq!(seen[1].text, "Hi");
        assert!(seen[2].real_output && seen[2].tool_call);
    }

    #[test]
    fn azure_prompt_filter_frames_and_broken_json_are_tolerated() {
        let prompt_filter = json!({"id": "", "model": "", "choices": [],
            "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}]});
        let seen = judge_frames(
            &OpenAiChat,
            &frames(&format!(
                "data: {prompt_filter}\n\ndata: {{broken\n\n: ping\n\n"
            )),
        );
        assert_eq!(seen.len(), 3);
        assert!(seen.iter().all(|o| *o == Finding::default()));
        let error = judge_frames(&OpenAiChat, &[data(r#"{"error":{"message":"boom"}}"#)]);
        assert!(error[0].error);
    }

    #[test]
    fn a_json_body_shows_filter_stops_and_model_refusals() {
        let filtered = OpenAiChat.judge_json(&json!({"model": "gpt-5", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": null}, "finish_reason": "content_filter"}]}));
        assert_eq!(
            filtered.refusal.unwrap().signal,
            Some(RefusalSignal::StopReason)
        );
        let refused = OpenAiChat.judge_json(&json!({"choices": [
            {"index": 0, "message": {"role": "assistant", "content": null, "refusal": "Sorry, no."},
             "finish_reason": "stop"}]}));
        assert!(!refused.real_output);
        let info = refused.refusal.unwrap();
        assert_eq!(info.signal, Some(RefusalSignal::ModelRefusal));
        assert_eq!(info.explanation.as_deref(), Some("Sorry, no."));
        let answered = OpenAiChat.judge_json(&json!({"choices": [
            {"index": 0, "message": {"role": "assistant", "content": [{"type": "text", "text": "Hi"}]},
             "finish_reason": "stop"}]}));
        assert!(answered.real_output && answered.refusal.is_none());
    }

    #[test]
    fn azure_blocks_a_prompt_with_a_400() {
        let body = json!({"error": {"code": "content_filter", "message": "Filtered.",
            "innererror": {"code": "ResponsibleAIPolicyViolation"}}});
        let info = OpenAiChat
            .judge_error(StatusCode::BAD_REQUEST, &body)
            .unwrap();
        assert_eq!(info.signal, Some(RefusalSignal::BlockedPrompt));
        assert_eq!(
            info.explanation.as_deref(),
            Some("ResponsibleAIPolicyViolation: Filtered.")
        );
        assert!(OpenAiChat
            .judge_error(StatusCode::INTERNAL_SERVER_ERROR, &body)
            .is_none());
        let other = json!({"error": {"code": "rate_limit", "message": "slow down"}});
        assert!(OpenAiChat
            .judge_error(StatusCode::BAD_REQUEST, &other)
            .is_none());
    }

    #[test]
    fn openai_blocks_a_prompt_with_a_policy_error() {
        let body = json!({"error": {"message": "Invalid prompt: your prompt was flagged as potentially violating our usage policy.",
            "type": "invalid_request_error", "param": null, "code": "invalid_prompt"}});
        let info = OpenAiChat
            .judge_error(StatusCode::BAD_REQUEST, &body)
            .unwrap();
        assert_eq!(info.signal, Some(RefusalSignal::PolicyError));
        assert_eq!(info.category.as_deref(), Some("usage_policy"));
        assert!(info.explanation.unwrap().starts_with("Invalid prompt"));
        let stream = judge_frames(
            &OpenAiChat,
            &[data(
                r#"{"error":{"message":"flagged","type":"invalid_request","code":"cyber_policy"}}"#,
            )],
        );
        let info = stream[0].refusal.clone().unwrap();
        assert_eq!(info.category.as_deref(), Some("cyber"));
        assert!(!stream[0].error);
        let bio = json!({"error": {"message": "m", "code": "bio_policy"}});
        assert!(OpenAiChat
            .judge_error(StatusCode::BAD_REQUEST, &bio)
            .is_none());
    }

    #[test]
    fn the_rescue_note_is_a_user_turn_at_the_end() {
        let mut body = json!({"messages": [
            {"role": "user", "content": "a"},
            {"role": "assistant", "tool_calls": [{"id": "t", "type": "function"}]},
            {"role": "tool", "tool_call_id": "t", "content": "ok"},
        ]});
        OpenAiChat.append_note(&mut body, "NOTE").unwrap();
        assert_eq!(body["messages"][2]["role"], "tool");
        assert_eq!(
            body["messages"][3],
            json!({"role": "user", "content": "NOTE"})
        );
        assert!(OpenAiChat.append_note(&mut json!({}), "NOTE").is_err());
    }

    #[test]
    fn a_model_swap_on_azure_rewrites_the_deployment() {
        let azure = "https://r.openai.azure.com/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21";
        let mut uri: Uri = azure.parse().unwrap();
        assert_eq!(
            OpenAiChat.recognise(&Method::POST, &uri),
            Some(Some("gpt-4o".to_owned()))
        );
        let mut body = json!({"messages": []});
        OpenAiChat
            .swap_model(&mut uri, &mut body, "gpt-4o-mini")
            .unwrap();
        assert_eq!(
            uri,
            "https://r.openai.azure.com/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-10-21"
        );
        // No body model is added where the client sent none.
        assert!(body.get("model").is_none());
        let mut with_model = json!({"model": "gpt-4o"});
        OpenAiChat
            .swap_model(&mut uri, &mut with_model, "gpt-5")
            .unwrap();
        assert_eq!(with_model["model"], "gpt-5");

        let mut plain: Uri = "https://h/v1/chat/completions".parse().unwrap();
        let mut body = json!({"model": "gpt-5"});
        OpenAiChat
            .swap_model(&mut plain, &mut body, "gpt-5-mini")
            .unwrap();
        assert_eq!(body["model"], "gpt-5-mini");
        assert_eq!(plain, "https://h/v1/chat/completions");
    }

    #[test]
    fn several_choices_cannot_be_guarded() {
        assert!(OpenAiChat.unguardable(&json!({"n": 2})).is_some());
        assert!(OpenAiChat.unguardable(&json!({"n": 1})).is_none());
        assert!(OpenAiChat.unguardable(&json!({})).is_none());
    }

    #[test]
    fn request_ids_come_from_openai_or_azure_headers() {
        let mut headers = HeaderMap::new();
        headers.insert("apim-request-id", HeaderValue::from_static("azure-1"));
        assert_eq!(OpenAiChat.request_id(&headers).as_deref(), Some("azure-1"));
        headers.insert("x-request-id", HeaderValue::from_static("req_1"));
        assert_eq!(OpenAiChat.request_id(&headers).as_deref(), Some("req_1"));
    }

    #[test]
    fn a_filter_that_reports_its_own_error_filtered_nothing() {
        let results = json!({"error": {"code": "content_filter_error",
            "message": "The contents are not filtered"}});
        let answered = json!({"model": "gpt-4o", "choices": [{"index": 0,
            "message": {"role": "assistant", "content": "Hello."},
            "finish_reason": "stop", "content_filter_results": results}]});
        let seen = OpenAiChat.judge_json(&answered);
        assert!(seen.real_output && seen.refusal.is_none());
        let empty = json!({"model": "gpt-4o", "choices": [{"index": 0,
            "message": {"role": "assistant", "content": ""},
            "finish_reason": "stop", "content_filter_results": results}]});
        assert_eq!(OpenAiChat.judge_json(&empty).refusal, None);
        let stream = chunk(json!({"index": 0, "delta": {}, "finish_reason": "stop",
            "content_filter_results": results}));
        let seen = judge_frames(&OpenAiChat, &[data(&stream)]);
        assert!(seen.iter().all(|o| o.refusal.is_none()));
        // Beside a category it did filter, the error entry is not named.
        let mixed = json!({"error": {"code": "content_filter_error", "message": "x"},
            "violence": {"filtered": true, "severity": "high"},
            "hate": {"filtered": false, "severity": "safe"}});
        let filtered = json!({"model": "gpt-4o", "choices": [{"index": 0,
            "message": {"role": "assistant", "content": null},
            "finish_reason": "content_filter", "content_filter_results": mixed}]});
        let refusal = OpenAiChat.judge_json(&filtered).refusal.unwrap();
        assert_eq!(refusal.explanation.as_deref(), Some("filtered: violence"));
    }

    #[test]
    fn azures_protected_material_filters_alone_make_a_copyright_stop() {
        let stop = |results: Value| {
            let body = json!({"model": "gpt-4o", "choices": [{"index": 0,
                "message": {"role": "assistant", "content": null},
                "finish_reason": "content_filter", "content_filter_results": results}]});
            let whole = OpenAiChat.judge_json(&body).refusal.unwrap();
            let streamed = chunk(
                json!({"index": 0, "delta": {}, "finish_reason": "content_filter",
                "content_filter_results": body["choices"][0]["content_filter_results"]}),
            );
            let seen = judge_frames(&OpenAiChat, &[data(&streamed)]);
            assert_eq!(
                seen[0].refusal.as_ref(),
                Some(&whole),
                "a stream reads the same"
            );
            (whole.category.unwrap(), whole.explanation)
        };
        let code = json!({"protected_material_code": {"filtered": true, "detected": true,
                "citation": {"URL": "https://github.com/o/r", "license": "GPL-3.0"}},
            "protected_material_text": {"filtered": false, "detected": false},
            "hate": {"filtered": false, "severity": "safe"}});
        assert_eq!(
            stop(code),
            (
                "recitation".to_owned(),
                Some("filtered: protected_material_code".to_owned())
            )
        );
        let text = json!({"protected_material_text": {"filtered": true, "detected": true}});
        assert_eq!(stop(text).0, "recitation");
        // Beside a harm it filtered, the stop is the filter's.
        let both = json!({"protected_material_text": {"filtered": true, "detected": true},
            "violence": {"filtered": true, "severity": "high"}});
        assert_eq!(stop(both).0, "content_filter");
        assert_eq!(stop(json!({})).0, "content_filter");
    }

    #[test]
    fn claude_on_foundry_refuses_with_a_refusal_finish_reason() {
        let body = json!({"model": "claude-opus-4-7", "choices": [{"index": 0,
            "message": {"role": "assistant", "content": null},
            "finish_reason": "refusal"}]});
        let refusal = OpenAiChat.judge_json(&body).refusal.unwrap();
        assert_eq!(refusal.signal, Some(RefusalSignal::StopReason));
        assert_eq!(refusal.category, None);
        let stream = chunk(json!({"index": 0, "delta": {}, "finish_reason": "refusal"}));
        let seen = judge_frames(&OpenAiChat, &[data(&stream)]);
        assert_eq!(seen[0].refusal.as_ref().unwrap().category, None);
    }

    #[test]
    fn structured_output_is_json_modes_and_forced_tool_calls() {
        let demands = |extra: Value| {
            let mut body = json!({"model": "gpt-4o", "messages": []});
            body.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            OpenAiChat.structured_output(&body).is_some()
        };
        assert!(demands(json!({"response_format": {"type": "json_schema",
            "json_schema": {"name": "title", "schema": {}}}})));
        assert!(demands(json!({"response_format": {"type": "json_object"}})));
        assert!(demands(json!({"tool_choice": "required"})));
        assert!(demands(json!({"tool_choice": {"type": "function",
            "function": {"name": "pick"}}})));
        assert!(demands(json!({"tool_choice": {"type": "allowed_tools",
            "allowed_tools": {"mode": "required", "tools": []}}})));
        assert!(demands(json!({"function_call": {"name": "pick"}})));
        assert!(!demands(json!({})));
        assert!(!demands(json!({"response_format": {"type": "text"}})));
        assert!(!demands(json!({"tool_choice": "auto"})));
        assert!(!demands(json!({"tool_choice": "none"})));
        assert!(!demands(json!({"function_call": "auto"})));
        assert!(!demands(json!({"tool_choice": {"type": "allowed_tools",
            "allowed_tools": {"mode": "auto", "tools": []}}})));
    }
}
