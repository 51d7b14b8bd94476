//! Converse and ConverseStream: Bedrock's own message shape.
//!
//! A whole response is `{"output": {"message": {"role", "content": [...]}},
//! "stopReason", "usage", "metrics"}`; content blocks are unions (`text`,
//! `toolUse`, `reasoningContent`, ...). A stream sends `messageStart`,
//! `contentBlockStart` (a tool call's start), `contentBlockDelta` (`text`,
//! `toolUse`, `reasoningContent`), `contentBlockStop`, `messageStop` (with
//! `stopReason`) and `metadata` (with `usage`). A `stopReason` of
//! `content_filtered` (the model's safety refusal as Converse reports it)
//! or `guardrail_intervened` (an operator's guardrail) is a refusal.

use http::{HeaderMap, Method, Uri};
use serde_json::Value;

use super::messages::{
    bedrock_request_id, converse_block_output, converse_note, converse_refusal, converse_usage,
    model_segment, swap_path_model,
};
use crate::dialect::facts::Api;
use crate::dialect::{
    event_type, is_real_text, json_event, str_field, without_cache_marks, CacheMark, Dialect,
    EventJudge, Finding, RewriteError,
};
use crate::sse::Frame;

const CONVERSE_ACTIONS: &[&str] = &["converse", "converse-stream"];

/// Converse and ConverseStream.
#[derive(Debug)]
pub(crate) struct BedrockConverse;

impl Dialect for BedrockConverse {
    fn api(&self) -> &'static Api {
        &super::CONVERSE
    }

    fn recognise(&self, method: &Method, uri: &Uri) -> Option<Option<String>> {
        super::messages::recognise_action(method, uri, CONVERSE_ACTIONS)
    }

    fn is_streaming(&self, uri: &Uri, _body: &Value) -> bool {
        model_segment(uri, CONVERSE_ACTIONS).is_some_and(|(_, _, a)| a == "converse-stream")
    }

    fn conversation_seed(&self, body: &Value) -> Option<Vec<u8>> {
        let first_user = body
            .get("messages")?
            .as_array()?
            .iter()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))?;
        let system = body.get("system").unwrap_or(&Value::Null);
        let (system, first_user) = (
            without_cache_marks(system, CACHE_POINT),
            without_cache_marks(first_user, CACHE_POINT),
        );
        Some(crate::dialect::seed::seed_bytes(&[&system, &first_user]))
    }

    fn seed_reach(&self) -> Option<crate::dialect::SeedReach> {
        crate::dialect::anthropic::AnthropicMessages.seed_reach()
    }

    fn event_judge(&self) -> Box<dyn EventJudge> {
        Box::new(ConverseStream)
    }

    fn judge_json(&self, body: &Value) -> Finding {
        let mut seen = Finding::default();
        let content = body
            .get("output")
            .and_then(|o| o.get("message"))
            .and_then(|m| m.get("content"))
            .and_then(Value::as_array);
        for block in content.into_iter().flatten() {
            let (output, tool) = converse_block_output(block);
            seen.real_output |= output;
            seen.tool_call |= tool;
            if let Some(text) = block.get("text").and_then(Value::as_str) {
                seen.text.push_str(text);
            }
        }
        seen.refusal = converse_refusal(body.get("stopReason").and_then(Value::as_str));
        if let Some(refused) = &mut seen.refusal {
            // What is left after the filter or the guardrail is not an answer.
            seen.real_output = false;
            seen.text.clear();
            refused.usage = body.get("usage").and_then(converse_usage);
        }
        seen
    }

    fn append_note(&self, body: &mut Value, note: &str) -> Result<(), RewriteError> {
        let messages = body
            .get_mut("messages")
            .and_then(Value::as_array_mut)
            .ok_or(RewriteError("request has no messages array"))?;
        match messages.last_mut() {
            // Appended after any `toolResult` blocks, which must come first.
            Some(last) if last.get("role").and_then(Value::as_str) == Some("user") => last
                .get_mut("content")
                .and_then(Value::as_array_mut)
                .ok_or(RewriteError("user message has no content array"))?
                .push(serde_json::json!({"text": note})),
            _ => messages.push(converse_note(note)),
        }
        Ok(())
    }

    fn swap_model(
        &self,
        uri: &mut Uri,
        _body: &mut Value,
        model: &str,
    ) -> Result<(), RewriteError> {
        let (at, written, _) =
            model_segment(uri, CONVERSE_ACTIONS).ok_or(RewriteError("no model in the path"))?;
        let written = written.to_owned();
        swap_path_model(uri, at, &written, model)
    }

    fn request_id(&self, headers: &HeaderMap) -> Option<String> {
        bedrock_request_id(headers)
    }
}

/// Reads a ConverseStream event by event.
struct ConverseStream;

impl EventJudge for ConverseStream {
    fn judge(&mut self, frame: &Frame, committed: bool) -> Finding {
        let mut seen = Finding::default();
        if committed && self.skips_committed(frame.event_raw()) {
            return seen;
        }
        let Some(event) = json_event(frame) else {
            return seen;
        };
        match event_type(&event, frame) {
            "contentBlockStart" => {
                let tool = event.get("start").and_then(|s| s.get("toolUse")).is_some();
                seen.real_output = tool;
                seen.tool_call = tool;
            }
            "contentBlockDelta" => {
                let delta = event.get("delta").unwrap_or(&Value::Null);
                if let Some(text) = str_field(delta, "text") {
                    seen.real_output = is_real_text(&text);
                    seen.text = text;
                } else if delta.get("toolUse").is_some() {
                    seen.real_output = true;
                    seen.tool_call = true;
                }
            }
            "messageStop" => {
                seen.refusal = converse_refusal(event.get("stopReason").and_then(Value::as_str));
            }
            "metadata" => seen.usage = event.get("usage").and_then(converse_usage),
            "error" => seen.error = true,
            _ => {}
        }
        seen
    }

    /// Deltas are most of a long stream and never carry a stop reason.
    fn skips_committed(&self, event: Option<&[u8]>) -> bool {
        event == Some(b"contentBlockDelta".as_slice())
    }

    fn eventstream(&self) -> Option<super::eventstream::Translate> {
        Some(super::frames::converse_frame)
    }
}

/// Converse's prompt-caching mark: a block of its own.
const CACHE_POINT: CacheMark = CacheMark::Block("cachePoint");

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::dialect::tests::event;

    #[test]
    fn a_conversation_is_seeded_the_same_whichever_turn_carries_the_cache_point() {
        let point = json!({"cachePoint": {"type": "default"}});
        let first = json!({"system": [{"text": "You are an agent."}, point.clone()],
            "messages": [{"role": "user", "content": [{"text": "fix the build"}, point.clone()]}]});
        let later = json!({"system": [{"text": "You are an agent."}, point.clone()], "messages": [
            {"role": "user", "content": [{"text": "fix the build"}]},
            {"role": "assistant", "content": [{"text": "done"}]},
            {"role": "user", "content": [{"text": "now test it"}, point]},
        ]});
        let seed = |body: &Value| BedrockConverse.conversation_seed(body).unwrap();
        assert_eq!(seed(&first), seed(&later));
        let other = json!({"messages": [{"role": "user", "content": [{"text": "another task"}]}]});
        assert_ne!(seed(&first), seed(&other));
    }

    #[test]
    fn a_cache_point_nested_in_the_first_user_turn_is_left_out_of_its_seed() {
        let turn = |result: &str, point: bool| {
            let mut content = vec![json!({"text": result})];
            if point {
                content.push(json!({"cachePoint": {"type": "default"}}));
            }
            json!({"messages": [{"role": "user", "content": [
                {"toolResult": {"toolUseId": "t1", "content": content}},
                {"text": "fix the build"},
            ]}]})
        };
        let seed = |body: &Value| BedrockConverse.conversation_seed(body).unwrap();
        assert_eq!(
            seed(&turn("build failed", true)),
            seed(&turn("build failed", false))
        );
        assert_ne!(
            seed(&turn("build failed", true)),
            seed(&turn("tests failed", true))
        );
    }

    #[test]
    fn a_content_filtered_stop_is_a_refusal_and_its_metadata_the_cost() {
        let mut judge = BedrockConverse.event_judge();
        let events = [
            event("messageStart", &json!({"role": "assistant"})),
            event(
                "contentBlockDelta",
                &json!({"delta": {"reasoningContent": {"text": "hmm"}}, "contentBlockIndex": 0}),
            ),
            event("messageStop", &json!({"stopReason": "content_filtered"})),
            event(
                "metadata",
                &json!({"usage": {"inputTokens": 12, "outputTokens": 3, "totalTokens": 15}}),
            ),
        ];
        let seen: Vec<Finding> = events.iter().map(|f| judge.judge(f, false)).collect();
        assert!(seen.iter().all(|s| !s.real_output));
        assert_eq!(
            seen[2].refusal.as_ref().unwrap().category.as_deref(),
            Some("content_filtered")
        );
        assert_eq!(seen[3].usage.unwrap().input_tokens, Some(12));
    }

    #[test]
    fn text_and_tool_calls_are_output_and_a_guardrail_is_a_refusal() {
        let mut judge = BedrockConverse.event_judge();
        let text = event(
            "contentBlockDelta",
            &json!({"delta": {"text": "Hello"}, "contentBlockIndex": 0}),
        );
        assert!(judge.judge(&text, false).real_output);
        let blank = event(
            "contentBlockDelta",
            &json!({"delta": {"text": " \n"}, "contentBlockIndex": 0}),
        );
        assert!(!judge.judge(&blank, false).real_output);
        let tool = event(
            "contentBlockStart",
            &json!({"start": {"toolUse": {"toolUseId": "t", "name": "f"}}, "contentBlockIndex": 1}),
        );
        assert!(judge.judge(&tool, false).tool_call);
        let stop = event(
            "messageStop",
            &json!({"stopReason": "guardrail_intervened"}),
        );
        let refused = judge.judge(&stop, true).refusal.unwrap();
        assert_eq!(
            refused.category.as_deref(),
            Some(crate::refusal::GUARDRAIL_CATEGORY)
        );
        let ended = event("messageStop", &json!({"stopReason": "end_turn"}));
        assert!(judge.judge(&ended, false).refusal.is_none());
        let error = event(
            "error",
            &json!({"type": "error", "error": {"type": "modelStreamErrorException"}}),
        );
        assert!(judge.judge(&error, false).error);
    }

    #[test]
    fn a_whole_response_is_judged_by_its_stop_reason_and_content() {
        let filtered = json!({"output": {"message": {"role": "assistant", "content": []}},
            "stopReason": "content_filtered", "usage": {"inputTokens": 5, "outputTokens": 0}});
        let seen = BedrockConverse.judge_json(&filtered);
        assert!(!seen.real_output);
        assert_eq!(seen.refusal.unwrap().usage.unwrap().input_tokens, Some(5));
        let answer = json!({"output": {"message": {"role": "assistant", "content": [{"text": "Hi"}]}},
            "stopReason": "end_turn"});
        let seen = BedrockConverse.judge_json(&answer);
        assert!(seen.real_output && seen.refusal.is_none());
        assert_eq!(seen.text, "Hi");
    }

    #[test]
    fn the_rescue_note_follows_tool_results_or_opens_a_user_turn() {
        let mut body = json!({"messages": [{"role": "user", "content": [
            {"toolResult": {"toolUseId": "t", "content": [{"text": "ok"}]}}]}]});
        BedrockConverse.append_note(&mut body, "NOTE").unwrap();
        assert_eq!(body["messages"][0]["content"][1], json!({"text": "NOTE"}));
        let mut after = json!({"messages": [{"role": "user", "content": [{"text": "a"}]},
            {"role": "assistant", "content": [{"text": "b"}]}]});
        BedrockConverse.append_note(&mut after, "NOTE").unwrap();
        assert_eq!(
            after["messages"][2],
            json!({"role": "user", "content": [{"text": "NOTE"}]})
        );
        assert!(BedrockConverse.append_note(&mut json!({}), "NOTE").is_err());
    }
}
