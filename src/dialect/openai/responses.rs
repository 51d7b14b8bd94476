//! OpenAI Responses: `POST .../responses` under any prefix (`/v1/responses`,
//! Azure OpenAI's `/openai/v1/responses` and `/openai/responses?api-version=`;
//! on Azure the body's `model` names the deployment).
//!
//! Refusals:
//! - `response.incomplete` (or a JSON body with `status: "incomplete"`) whose
//!   `incomplete_details.reason` is `content_filter` (signal stop reason,
//!   category `content_filter`).
//! - A content part of type `refusal` (`response.content_part.added`,
//!   `response.refusal.delta` / `.done`; in JSON, a message's `refusal`
//!   part): signal model refusal, category `model_refusal`, explanation the
//!   refusal text, truncated.
//! - Azure's blocked prompt: HTTP 400 with `error.code: "content_filter"`,
//!   as for Chat Completions.
//! - OpenAI's policy errors: `error.code` `cyber_policy`, `bio_policy`,
//!   `invalid_prompt` or `image_content_policy_violation` (signal policy
//!   error, category `cyber`, `bio`, `usage_policy` or `image_content`,
//!   explanation `error.message`; see `openai_policy`) in an HTTP 4xx body,
//!   in a stream's `response.failed` (or a JSON body with `status:
//!   "failed"`), or in a stream's `error` event. After output it is a
//!   partial refusal, as any other.
//!
//! Real output: `response.output_text.delta` with non-whitespace text, and
//! any tool-call output item (`function_call`, `custom_tool_call`, hosted
//! `*_call` items, `mcp_approval_request`). Reasoning items and reasoning
//! summaries are not.

use http::{HeaderMap, Method, StatusCode, Uri};
use serde_json::{json, Value};

use super::chat::{
    azure_blocked_prompt, forces_a_tool_call, openai_request_id, CONTENT_FILTER, MODEL_REFUSAL,
};
use super::policy::{policy_blocked, policy_error, policy_error_event, OpenAiApi};
use crate::dialect::facts::Api;
use crate::dialect::{
    count, event_type, fresh_input, is_real_text, json_event, known, str_field,
    truncate_explanation, Dialect, EventJudge, Finding, RefusalInfo, RewriteError,
};
use crate::refusal::{Provider, RefusalSignal, Usage};
use crate::sse::Frame;

#[derive(Debug)]
pub(crate) struct OpenAiResponses;

/// Output item types that are a tool call: real output even if their
/// arguments never finish.
fn is_tool_call_item(kind: &str) -> bool {
    kind.ends_with("_call") || kind == "mcp_approval_request"
}

fn model_refusal(text: Option<&str>) -> RefusalInfo {
    RefusalInfo {
        signal: Some(RefusalSignal::ModelRefusal),
        category: Some(MODEL_REFUSAL.to_owned()),
        explanation: text
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(truncate_explanation),
        credit_token: None,
        usage: None,
        ..RefusalInfo::default()
    }
}

/// What one content part is.
enum Part<'a> {
    Output,
    Refusal(Option<&'a str>),
    Other,
}

fn part(part: &Value) -> Part<'_> {
    match part.get("type").and_then(Value::as_str) {
        Some("output_text")
            if part
                .get("text")
                .and_then(Value::as_str)
                .is_some_and(is_real_text) =>
        {
            Part::Output
        }
        Some("refusal") => Part::Refusal(part.get("refusal").and_then(Value::as_str)),
        _ => Part::Other,
    }
}

/// Reads one output item into `seen`: tool calls and message text are
/// output, a message's refusal part is a refusal.
fn scan_item(item: &Value, seen: &mut Finding) {
    match item.get("type").and_then(Value::as_str) {
        Some("message") => {
            for content in item
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                match part(content) {
                    Part::Output => {
                        seen.real_output = true;
                        if let Some(text) = content.get("text").and_then(Value::as_str) {
                            seen.text.push_str(text);
                        }
                    }
                    Part::Refusal(text) => {
                        seen.refusal.get_or_insert_with(|| model_refusal(text));
                    }
                    Part::Other => {}
                }
            }
        }
        Some(kind) => {
            seen.real_output |= is_tool_call_item(kind);
            seen.tool_call |= is_tool_call_item(kind);
        }
        None => {}
    }
}

/// A response's `usage`: `input_tokens` counts cached tokens too.
fn response_usage(usage: &Value) -> Option<Usage> {
    let cached = usage
        .get("input_tokens_details")
        .and_then(|d| count(d, "cached_tokens"));
    known(Usage {
        input_tokens: fresh_input(count(usage, "input_tokens"), cached),
        output_tokens: count(usage, "output_tokens"),
        cache_read_tokens: cached,
        cache_write_tokens: None,
    })
}

/// Reads a whole response object (a JSON body, or the one a terminal event
/// carries). Its usage is read once per response, here at its end. Returns
/// whether it failed on a policy error (a refusal, not an error).
fn scan_response(response: &Value, seen: &mut Finding) -> bool {
    if seen.model.is_none() {
        seen.model = str_field(response, "model").filter(|m| !m.is_empty());
    }
    for item in response
        .get("output")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        scan_item(item, seen);
    }
    let filtered = response
        .get("incomplete_details")
        .and_then(|d| d.get("reason"))
        .and_then(Value::as_str)
        == Some(CONTENT_FILTER);
    if filtered && seen.refusal.is_none() {
        seen.refusal = Some(RefusalInfo {
            signal: Some(RefusalSignal::StopReason),
            category: Some(CONTENT_FILTER.to_owned()),
            explanation: None,
            credit_token: None,
            usage: None,
            ..RefusalInfo::default()
        });
    }
    seen.usage = response.get("usage").and_then(response_usage);
    let error = response.get("error").filter(|e| !e.is_null());
    match error.and_then(|e| policy_error(e, OpenAiApi::Responses)) {
        Some(refused) => {
            seen.refusal.get_or_insert(refused);
            true
        }
        None => {
            seen.error |=
                response.get("status").and_then(Value::as_str) == Some("failed") || error.is_some();
            false
        }
    }
}

impl Dialect for OpenAiResponses {
    fn api(&self) -> &'static Api {
        &super::RESPONSES
    }

    /// An `openai:` entry names this API's own provider: translating it
    /// into Chat Completions, OpenAI's fallback API, would lose what
    /// Responses alone carries.
    fn serves_entries_of(&self, provider: Provider) -> bool {
        provider == Provider::OpenAi
    }

    fn recognise(&self, method: &Method, uri: &Uri) -> Option<Option<String>> {
        // Creation only: `/responses/{id}`, `/cancel`, `/input_items` and
        // the like are other endpoints and pass through.
        (method == Method::POST && uri.path().trim_end_matches('/').ends_with("/responses"))
            .then_some(None)
    }

    fn is_streaming(&self, _uri: &Uri, body: &Value) -> bool {
        body.get("stream").and_then(Value::as_bool).unwrap_or(false)
    }

    fn conversation_seed(&self, body: &Value) -> Option<Vec<u8>> {
        // A server-side conversation names itself.
        if let Some(conversation) = body.get("conversation").filter(|c| !c.is_null()) {
            let id = conversation.get("id").unwrap_or(conversation);
            return serde_json::to_vec(&("conversation", id)).ok();
        }
        let instructions = body.get("instructions").unwrap_or(&Value::Null);
        let first_user = match body.get("input")? {
            text @ Value::String(_) => text,
            Value::Array(items) => items
                .iter()
                .find(|i| i.get("role").and_then(Value::as_str) == Some("user"))?,
            _ => return None,
        };
        Some(crate::dialect::seed::seed_bytes(&[
            instructions,
            first_user,
        ]))
    }

    fn seed_reach(&self) -> Option<crate::dialect::SeedReach> {
        Some(crate::dialect::SeedReach {
            members: &["conversation", "instructions"],
            turns: "input",
            is_user: |role| role == Some("user"),
        })
    }

    fn event_judge(&self) -> Box<dyn EventJudge> {
        Box::new(ResponsesStream::default())
    }

    fn judge_json(&self, body: &Value) -> Finding {
        let mut seen = Finding::default();
        scan_response(body, &mut seen);
        seen
    }

    fn judge_error(&self, status: StatusCode, body: &Value) -> Option<RefusalInfo> {
        azure_blocked_prompt(status, body)
            .or_else(|| policy_blocked(status, body, OpenAiApi::Responses))
    }

    fn refuses_with_errors(&self) -> bool {
        true
    }

    fn structured_output(&self, body: &Value) -> Option<&'static str> {
        let format = body.get("text").and_then(|t| t.get("format"));
        let kind = format.and_then(|f| f.get("type")).and_then(Value::as_str);
        if matches!(kind, Some("json_schema" | "json_object")) {
            Some("a JSON text.format")
        } else if body.get("tool_choice").is_some_and(forces_a_tool_call) {
            Some("a forced tool_choice")
        } else {
            None
        }
    }

    fn append_note(&self, body: &mut Value, note: &str) -> Result<(), RewriteError> {
        let object = body
            .as_object_mut()
            .ok_or(RewriteError("request body is not an object"))?;
        let note_item = json!({"role": "user", "content": note});
        // With `previous_response_id` the input is only the new turn; the
        // note still belongs after it.
        match object.get_mut("input") {
            None | Some(Value::Null) => {
                object.insert("input".into(), json!([note_item]));
            }
            Some(Value::String(text)) => {
                let text = std::mem::take(text);
                object.insert(
                    "input".into(),
                    json!([{"role": "user", "content": text}, note_item]),
                );
            }
            Some(Value::Array(items)) => items.push(note_item),
            Some(_) => return Err(RewriteError("input is neither text nor a list of items")),
        }
        Ok(())
    }

    fn is_reroute(&self, uri: &Uri, requested: &str, served: &str) -> bool {
        super::models::another_model(uri, requested, served)
    }

    fn swap_model(
        &self,
        _uri: &mut Uri,
        body: &mut Value,
        model: &str,
    ) -> Result<(), RewriteError> {
        body.as_object_mut()
            .ok_or(RewriteError("request body is not an object"))?
            .insert("model".into(), Value::String(model.to_owned()));
        Ok(())
    }

    fn request_id(&self, headers: &HeaderMap) -> Option<String> {
        openai_request_id(headers)
    }
}

/// Reads a Responses stream. A refusal part is reported once its text is
/// known (`response.refusal.done`, the part's or item's `.done`, or the
/// terminal event), so that the explanation is the whole text.
#[derive(Default)]
struct ResponsesStream {
    /// Refusal text gathered from deltas, once a refusal part has started.
    refusal: Option<String>,
}

impl ResponsesStream {
    fn gather(&mut self, piece: &str) {
        let text = self.refusal.get_or_insert_with(String::new);
        if text.len() <= crate::dialect::MAX_EXPLANATION_BYTES {
            text.push_str(piece);
        }
    }

    /// Reports the refusal in progress, preferring the provider's full text.
    fn report(&mut self, full: Option<&str>, seen: &mut Finding) {
        let gathered = self.refusal.take();
        let text = full.or(gathered.as_deref());
        seen.refusal.get_or_insert_with(|| model_refusal(text));
    }
}

impl EventJudge for ResponsesStream {
    fn judge(&mut self, frame: &Frame, _committed: bool) -> Finding {
        let mut seen = Finding::default();
        let Some(event) = json_event(frame) else {
            return seen;
        };
        let kind = event_type(&event, frame);
        let null = Value::Null;
        match kind {
            "response.created" | "response.in_progress" => {
                if let Some(response) = event.get("response") {
                    seen.model = str_field(response, "model").filter(|m| !m.is_empty());
                }
            }
            "response.output_item.added" => {
                scan_item(event.get("item").unwrap_or(&null), &mut seen);
            }
            "response.content_part.added" => match part(event.get("part").unwrap_or(&null)) {
                Part::Output => seen.real_output = true,
                Part::Refusal(text) => self.gather(text.unwrap_or_default()),
                Part::Other => {}
            },
            "response.output_text.delta" => {
                seen.text = str_field(&event, "delta").unwrap_or_default();
                seen.real_output = is_real_text(&seen.text);
            }
            "response.refusal.delta" => {
                self.gather(
                    event
                        .get("delta")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                );
            }
            "response.refusal.done" => {
                self.report(event.get("refusal").and_then(Value::as_str), &mut seen);
            }
            "response.content_part.done" => {
                if let Part::Refusal(text) = part(event.get("part").unwrap_or(&null)) {
                    self.report(text, &mut seen);
                }
            }
            "response.output_item.done" => {
                scan_item(event.get("item").unwrap_or(&null), &mut seen);
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                if self.refusal.is_some() {
                    self.report(None, &mut seen);
                }
                let blocked = event
                    .get("response")
                    .is_some_and(|response| scan_response(response, &mut seen));
                seen.error |= kind == "response.failed" && !blocked;
            }
            "error" => match policy_error_event(&event) {
                Some(refused) => seen.refusal = Some(refused),
                None => seen.error = true,
            },
            _ => {}
        }
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::tests::{event, frames, judge_frames};

    /// One Responses event, framed with its name as the provider does.
    fn named(body: Value) -> Frame {
        let kind = body["type"].as_str().unwrap().to_owned();
        event(&kind, &body)
    }

    #[test]
    fn an_incomplete_response_for_content_filter_is_a_refusal() {
        let seen = judge_frames(
            &OpenAiResponses,
            &[named(json!({"type": "response.incomplete", "response": {
                "model": "gpt-5", "status": "incomplete", "output": [],
                "incomplete_details": {"reason": "content_filter"}}}))],
        );
        let info = seen[0].refusal.clone().unwrap();
        assert_eq!(info.signal, Some(RefusalSignal::StopReason));
        assert_eq!(info.category.as_deref(), Some(CONTENT_FILTER));
        assert_eq!(seen[0].model.as_deref(), Some("gpt-5"));
        let long = judge_frames(
            &OpenAiResponses,
            &[named(json!({"type": "response.incomplete", "response": {
                "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}}))],
        );
        assert!(long[0].refusal.is_none());
    }

    #[test]
    fn a_refusal_part_is_reported_with_its_whole_text() {
        let seen = judge_frames(
            &OpenAiResponses,
            &[
                named(
                    json!({"type": "response.content_part.added", "item_id": "m", "output_index": 0,
                    "content_index": 0, "part": {"type": "refusal", "refusal": ""}}),
                ),
                named(json!({"type": "response.refusal.delta", "delta": "I can't "})),
                named(json!({"type": "response.refusal.delta", "delta": "do that."})),
                named(json!({"type": "response.refusal.done", "refusal": "I can't do that."})),
            ],
        );
        assert!(seen[..3].iter().all(|o| o.refusal.is_none()));
        let info = seen[3].refusal.clone().unwrap();
        assert_eq!(info.signal, Some(RefusalSignal::ModelRefusal));
        assert_eq!(info.category.as_deref(), Some(MODEL_REFUSAL));
        assert_eq!(info.explanation.as_deref(), Some("I can't do that."));
    }

    #[test]
    fn gathered_refusal_text_is_reported_at_the_terminal_event() {
        let seen = judge_frames(
            &OpenAiResponses,
            &[
                named(json!({"type": "response.refusal.delta", "delta": "No."})),
                named(
                    json!({"type": "response.completed", "response": {"status": "completed", "output": []}}),
                ),
            ],
        );
        let info = seen[1].refusal.clone().unwrap();
        assert_eq!(info.explanation.as_deref(), Some("No."));
    }

    #[test]
    fn text_and_tool_calls_are_output_and_reasoning_is_not() {
        let seen = judge_frames(
            &OpenAiResponses,
            &[
                named(
                    json!({"type": "response.output_item.added", "item": {"type": "reasoning", "summary": []}}),
                ),
                named(
                    json!({"type": "response.reasoning_summary_text.delta", "delta": "thinking"}),
                ),
                named(json!({"type": "response.output_text.delta", "delta": " "})),
                named(json!({"type": "response.output_text.delta", "delta": "Hi"})),
                named(
                    json!({"type": "response.output_item.added", "item": {"type": "function_call", "name": "f"}}),
                ),
                named(
                    json!({"type": "response.output_item.added", "item": {"type": "mcp_approval_request"}}),
                ),
            ],
        );
        let output: Vec<bool> = seen.iter().map(|o| o.real_output).collect();
        assert_eq!(output, [false, false, false, true, true, true]);
        assert_eq!(seen[3].text, "Hi");
        assert!(seen[4].tool_call);
    }

    #[test]
    fn unknown_events_and_broken_json_are_tolerated() {
        let seen = judge_frames(
            &OpenAiResponses,
            &frames(concat!(
                "event: response.future\ndata: {\"type\":\"response.future\",\"refusal\":\"x\"}\n\n",
                "data: {broken\n\n",
            )),
        );
        assert!(seen.iter().all(|o| *o == Finding::default()));
        let failed = judge_frames(
            &OpenAiResponses,
            &[named(
                json!({"type": "response.failed", "response": {"status": "failed",
                "error": {"code": "server_error"}}}),
            )],
        );
        assert!(failed[0].error && failed[0].refusal.is_none());
    }

    #[test]
    fn policy_errors_are_refusals_wherever_they_arrive() {
        let error = json!({"code": "cyber_policy",
            "message": "This content was flagged for possible cybersecurity risk."});
        let seen = judge_frames(
            &OpenAiResponses,
            &[
                named(
                    json!({"type": "response.created", "response": {"model": "gpt-5.5",
                    "status": "in_progress", "output": []}}),
                ),
                named(
                    json!({"type": "response.failed", "response": {"model": "gpt-5.5",
                    "status": "failed", "output": [], "error": error}}),
                ),
            ],
        );
        let info = seen[1].refusal.clone().unwrap();
        assert_eq!(info.signal, Some(RefusalSignal::PolicyError));
        assert_eq!(info.category.as_deref(), Some("cyber"));
        assert_eq!(
            info.explanation.as_deref(),
            Some("This content was flagged for possible cybersecurity risk.")
        );
        assert!(!seen[1].error, "a refusal, not an error");

        let event = judge_frames(
            &OpenAiResponses,
            &[named(json!({"type": "error", "sequence_number": 2,
                "error": {"type": "invalid_request", "code": "bio_policy", "message": "m",
                    "param": null}}))],
        );
        let info = event[0].refusal.clone().unwrap();
        assert_eq!(info.category.as_deref(), Some("bio"));
        assert!(!event[0].error);

        let body = json!({"model": "gpt-5.5", "status": "failed", "output": [],
            "error": {"code": "invalid_prompt", "message": "m"}});
        let info = OpenAiResponses.judge_json(&body).refusal.unwrap();
        assert_eq!(info.category.as_deref(), Some("usage_policy"));
        let http = json!({"error": {"message": "m", "type": "invalid_request", "param": null,
            "code": "image_content_policy_violation"}});
        let info = OpenAiResponses
            .judge_error(StatusCode::BAD_REQUEST, &http)
            .unwrap();
        assert_eq!(info.signal, Some(RefusalSignal::PolicyError));
        assert_eq!(info.category.as_deref(), Some("image_content"));
    }

    #[test]
    fn a_json_body_shows_refusal_parts_and_output() {
        let refused = OpenAiResponses.judge_json(&json!({"model": "gpt-5", "status": "completed",
            "output": [{"type": "message", "content": [{"type": "refusal", "refusal": "Not this."}]}]}));
        assert!(!refused.real_output);
        assert_eq!(
            refused.refusal.unwrap().explanation.as_deref(),
            Some("Not this.")
        );
        let answered = OpenAiResponses.judge_json(&json!({"status": "completed",
            "output": [{"type": "message", "content": [{"type": "output_text", "text": "Hi"}]}]}));
        assert!(answered.real_output && answered.refusal.is_none());
        assert_eq!(answered.text, "Hi");
    }

    #[test]
    fn the_rescue_note_follows_the_input_whatever_its_form() {
        let note = json!({"role": "user", "content": "NOTE"});
        let mut text = json!({"input": "Audit this"});
        OpenAiResponses.append_note(&mut text, "NOTE").unwrap();
        assert_eq!(
            text["input"],
            json!([{"role": "user", "content": "Audit this"}, note])
        );
        let mut items =
            json!({"input": [{"type": "function_call_output", "call_id": "c", "output": "ok"}]});
        OpenAiResponses.append_note(&mut items, "NOTE").unwrap();
        assert_eq!(items["input"][0]["type"], "function_call_output");
        assert_eq!(items["input"][1], note);
        let mut chained = json!({"previous_response_id": "resp_1"});
        OpenAiResponses.append_note(&mut chained, "NOTE").unwrap();
        assert_eq!(chained["input"], json!([note]));
        assert!(OpenAiResponses
            .append_note(&mut json!({"input": 3}), "NOTE")
            .is_err());
    }

    #[test]
    fn a_model_swap_changes_the_body_model_only() {
        let mut uri: Uri = "https://h/openai/v1/responses".parse().unwrap();
        let mut body = json!({"model": "my-deployment", "input": "x"});
        OpenAiResponses
            .swap_model(&mut uri, &mut body, "other")
            .unwrap();
        assert_eq!(body["model"], "other");
        assert_eq!(uri, "https://h/openai/v1/responses");
        assert!(OpenAiResponses
            .swap_model(&mut uri, &mut json!([]), "other")
            .is_err());
    }

    #[test]
    fn only_creation_is_recognised() {
        let is = |path: &str| OpenAiResponses.recognise(&Method::POST, &path.parse().unwrap());
        assert_eq!(is("https://h/v1/responses"), Some(None));
        assert_eq!(
            is("https://h/openai/responses?api-version=2025-04-01-preview"),
            Some(None)
        );
        assert_eq!(is("https://h/v1/responses/resp_1/cancel"), None);
        assert_eq!(is("https://h/v1/responses/resp_1"), None);
    }

    #[test]
    fn a_server_side_conversation_names_itself() {
        let a = json!({"conversation": {"id": "conv_1"}, "input": "one"});
        let b = json!({"conversation": "conv_1", "input": "two"});
        assert_eq!(
            OpenAiResponses.conversation_seed(&a),
            OpenAiResponses.conversation_seed(&b)
        );
        let c = json!({"instructions": "sys", "input": "one"});
        let d = json!({"instructions": "sys", "input": "two"});
        assert_ne!(
            OpenAiResponses.conversation_seed(&c),
            OpenAiResponses.conversation_seed(&d)
        );
    }
}

#[cfg(test)]
mod usage_tests {
    use bytes::Bytes;
    use serde_json::json;

    use super::*;
    use crate::sse::SseFramer;

    #[test]
    fn the_terminal_event_carries_the_refusals_usage() {
        let response = json!({
            "model": "gpt-4o", "status": "incomplete", "output": [],
            "incomplete_details": {"reason": "content_filter"},
            "usage": {"input_tokens": 900, "input_tokens_details": {"cached_tokens": 600},
                "output_tokens": 3},
        });
        let event = json!({"type": "response.incomplete", "response": response});
        let mut framer = SseFramer::new();
        framer
            .push(Bytes::from(format!(
                "event: response.incomplete\ndata: {event}\n\n"
            )))
            .unwrap();
        let frame = framer.next_frame().unwrap();
        let seen = OpenAiResponses.event_judge().judge(&frame, false);
        let expected = Usage::new()
            .input_tokens(300)
            .output_tokens(3)
            .cache_read_tokens(600);
        assert!(seen.refusal.is_some());
        assert_eq!(seen.usage, Some(expected));
        assert_eq!(OpenAiResponses.judge_json(&response).usage, Some(expected));
    }

    #[test]
    fn structured_output_is_a_json_text_format_or_a_forced_tool_call() {
        let demands = |body: Value| OpenAiResponses.structured_output(&body).is_some();
        assert!(demands(json!({"text": {"format": {"type": "json_schema",
            "name": "route", "schema": {}}}})));
        assert!(demands(
            json!({"text": {"format": {"type": "json_object"}}})
        ));
        assert!(demands(json!({"tool_choice": "required"})));
        assert!(demands(
            json!({"tool_choice": {"type": "function", "name": "pick"}})
        ));
        assert!(demands(json!({"tool_choice": {"type": "allowed_tools",
            "mode": "required", "tools": []}})));
        assert!(!demands(json!({"text": {"format": {"type": "text"}}})));
        assert!(!demands(json!({"text": {"verbosity": "low"}})));
        assert!(!demands(
            json!({"tool_choice": {"type": "web_search_preview"}})
        ));
        assert!(!demands(json!({"tool_choice": "auto"})));
    }
}
