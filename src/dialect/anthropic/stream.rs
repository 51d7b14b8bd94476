//! The stream judge: what each Anthropic event says.

use serde_json::Value;

use crate::dialect::fields::{typed, Obj, RawText};
use crate::dialect::{event_type, is_real_text, json_event, known, str_field, EventJudge, Finding};

use super::shapes::*;
use super::signals::*;
use crate::refusal::Usage;
use crate::sse::Frame;

/// Anthropic streams are all but stateless to judge: every event names
/// its type and carries what it means. Only the usage `message_start`
/// reported is kept, for a refusal's cost: `message_delta` repeats the
/// counts that changed.
#[derive(Default)]
pub(super) struct AnthropicStream {
    pub(super) start_usage: Option<Usage>,
}

impl AnthropicStream {
    /// What an event says, read in typed fields when it fits them (the
    /// same as [`AnthropicStream::judge_value`] would say).
    pub(super) fn judge_fields(&mut self, event: &EventFields<'_>, frame: &Frame) -> Finding {
        let mut seen = Finding::default();
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
            "error" => return self.judge_value(frame),
            _ => {}
        }
        seen
    }

    /// What an event says, read as a whole `Value`.
    pub(super) fn judge_value(&mut self, frame: &Frame) -> Finding {
        let mut seen = Finding::default();
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

impl EventJudge for AnthropicStream {
    fn judge(&mut self, frame: &Frame, committed: bool) -> Finding {
        if committed && self.skips_committed(frame.event_raw()) {
            return Finding::default();
        }
        let Some(data) = frame.data() else {
            return Finding::default();
        };
        // Typed first: most events fit, and are read without building a
        // tree of values.
        match typed::<EventFields<'_>>(data.as_bytes()) {
            Some(event) => self.judge_fields(&event, frame),
            None => self.judge_value(frame),
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
