//! A request the guard aims at another model, ending in the client's own
//! assistant turn (a prefill) that the other model rejects.

use serde_json::Value;

use super::models::rejects_prefill;
use crate::dialect::{is_real_text, Dialect};

/// What the folded prefill becomes: an instruction in the last user turn.
const FOLDED: &str = "[refusal-guard] Your reply continues a response that already begins with \
the text below. Write only what comes after it, without repeating it:\n\n";

/// Whether the conversation's last turn is the assistant's.
pub(super) fn ends_in_assistant_turn(body: &Value) -> bool {
    let last = body
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|messages| messages.last());
    last.and_then(|m| m.get("role")).and_then(Value::as_str) == Some("assistant")
}

/// Makes `body`, aimed at `model`, end in a user turn when `model` rejects
/// assistant prefill ([`rejects_prefill`]) and the request presents no
/// fallback credit token (the token's appended-assistant form is the one
/// prefill such a model takes). Returns whether the body changed.
///
/// The trailing assistant turn (or turns: the API reads consecutive ones as
/// one) is the client's prefill, written for a model that took it. It is
/// folded, not dropped: its text goes into the last user turn as an
/// instruction to continue from it, which is what the platform's migration
/// guide offers in place of prefill ("system prompt instructions"), and
/// what keeps the prefill's point, an answer that starts where the client's
/// text ends. Dropped, the turn would leave an answer that starts afresh
/// and, joined by the client to its own prefill, repeats or contradicts it.
/// Thinking in the turn is not carried (its signature belongs to the model
/// that wrote it).
pub(super) fn fold_prefill(body: &mut Value, model: &str) -> bool {
    if !rejects_prefill(model)
        || !ends_in_assistant_turn(body)
        || body.get("fallback_credit_token").is_some()
    {
        return false;
    }
    let Some(messages) = body.get_mut("messages").and_then(Value::as_array_mut) else {
        return false;
    };
    let kept = messages
        .iter()
        .rposition(|m| m.get("role").and_then(Value::as_str) != Some("assistant"))
        .map_or(0, |last_other| last_other + 1);
    if kept == 0 {
        // Nothing but assistant turns: there is no user turn to fold into.
        return false;
    }
    let prefill: String = messages.drain(kept..).map(|turn| text_of(&turn)).collect();
    let prefill = prefill.trim_end();
    if is_real_text(prefill) {
        let note = format!("{FOLDED}{prefill}");
        // The last turn is a user turn now: the note joins it, after any
        // `tool_result` blocks, as the rescue note does.
        let _ = super::AnthropicMessages.append_note(body, &note);
    }
    true
}

/// The text of a turn's content: a string, or its text blocks in order.
fn text_of(turn: &Value) -> String {
    match turn.get("content") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn prefilled(last: Value) -> Value {
        json!({"model": "claude-haiku-4-5", "max_tokens": 64, "messages": [
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
            last,
        ]})
    }

    #[test]
    fn a_prefill_aimed_at_a_model_that_rejects_it_is_folded_into_the_last_user_turn() {
        let mut body = prefilled(json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hm", "signature": "s"},
            {"type": "text", "text": "{\"verdict\": "}]}));
        assert!(fold_prefill(&mut body, "claude-opus-4-7"));
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 1, "{body}");
        let blocks = messages[0]["content"].as_array().unwrap();
        assert_eq!(blocks[0]["type"], "tool_result", "results stay first");
        let note = blocks[1]["text"].as_str().unwrap();
        assert!(note.starts_with("[refusal-guard]"), "{note}");
        assert!(
            note.ends_with("{\"verdict\":"),
            "trailing space trimmed: {note}"
        );
    }

    #[test]
    fn a_prefill_stays_for_a_model_that_takes_it_or_beside_a_credit_token() {
        let last = json!({"role": "assistant", "content": "Sure,"});
        let mut body = prefilled(last.clone());
        assert!(!fold_prefill(&mut body, "claude-haiku-4-5"));
        assert!(!fold_prefill(&mut body, "claude-x"));
        body["fallback_credit_token"] = json!({"token": "t", "mode": "best_effort"});
        assert!(!fold_prefill(&mut body, "claude-fable-5"));
        assert_eq!(body["messages"][1], last);
    }

    #[test]
    fn consecutive_assistant_turns_fold_as_one_and_a_turn_without_text_goes() {
        let mut body = json!({"model": "m", "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "One, "},
            {"role": "assistant", "content": [{"type": "text", "text": "two"}]},
        ]});
        assert!(fold_prefill(&mut body, "claude-sonnet-5"));
        let note = body["messages"][0]["content"][1]["text"].as_str().unwrap();
        assert!(note.ends_with("One, two"), "{note}");
        let mut thinking_only = json!({"model": "m", "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "x"}]},
        ]});
        assert!(fold_prefill(&mut thinking_only, "claude-fable-5"));
        assert_eq!(
            thinking_only["messages"],
            json!([{"role": "user", "content": "go"}])
        );
    }
}
