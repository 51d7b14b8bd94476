//! A fallback chain's handoff marked as the provider marks its server-side
//! fallbacks: the `fallback` blocks and `usage.iterations` the official SDK
//! middleware writes.

use bytes::Bytes;
use serde_json::{json, Value};

use crate::dialect::{json_event, known, Declined, FrameRewrite, Handoff};

use super::signals::*;
use crate::refusal::Usage;
use crate::sse::Frame;

/// The `fallback` content blocks the provider's server-side fallbacks
/// carry, for a handoff of the fallback chain: one per model that declined,
/// each naming the next, so the last names the model that served.
pub(super) fn handoff_blocks(handoff: &Handoff<'_>) -> Vec<Value> {
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
pub(super) fn iteration_entry(kind: &str, model: &str, cost: Option<Usage>) -> Value {
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
pub(super) fn declined_iterations(handoff: &Handoff<'_>) -> Vec<Value> {
    let entry = |d: &Declined| iteration_entry("message", &d.model, d.usage);
    handoff.declined.iter().map(entry).collect()
}

pub(super) fn event_bytes(event: &Value) -> String {
    let kind = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    format!("event: {kind}\ndata: {event}\n\n")
}

/// Marks a fallback chain's handoff in the served stream as server-side
/// fallbacks are marked: the `fallback` blocks first, right after
/// `message_start` (which keeps the first model's message id), every served
/// block moved up past them, and `usage.iterations` on the final `message_delta`, one entry
/// per attempt. The stream stays one valid message.
pub(super) struct HandoffStream {
    pub(super) markers: Vec<Value>,
    pub(super) shift: u64,
    pub(super) declined: Vec<Value>,
    pub(super) to: String,
    pub(super) primary_id: Option<String>,
    /// The served attempt's usage as `message_start` reported it:
    /// `message_delta` repeats only the counts that changed.
    pub(super) start_usage: Option<Usage>,
    pub(super) inserted: bool,
}

impl HandoffStream {
    pub(super) fn marker_events(&mut self) -> String {
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

    pub(super) fn message_start(&mut self, frame: &Frame, mut event: Value) -> String {
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

    pub(super) fn message_delta(&self, mut event: Value) -> Option<String> {
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
