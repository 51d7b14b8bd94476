//! Continuing a partial refusal on another model, with the text already
//! sent as a prefill and the refusal's credit token.

use bytes::Bytes;
use http::HeaderMap;
use serde_json::{json, Value};

use crate::dialect::{
    event_type, is_real_text, json_event, Features, FrameRewrite, PartialContinuation,
    PrefillClaim, RewriteError,
};
// `Prefill` in `prefill` is the partial-continuation tracker.
use super::handoff::*;
use super::signals::*;
use super::AnthropicMessages;
use crate::sse::Frame;

/// Continues a started message: drops the recovered attempt's own
/// `message_start` and moves its blocks after the ones already sent.
pub(super) struct Continuation {
    pub(super) offset: u64,
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
pub(super) struct Prefill {
    /// The text blocks by index, in the order they started.
    pub(super) texts: Vec<(u64, String)>,
    /// Bytes of text kept.
    pub(super) kept: usize,
    pub(super) max_text_bytes: usize,
    /// Blocks the client has seen start: a continuation's blocks go after.
    pub(super) started: u64,
    /// Something this continuation cannot carry was seen.
    pub(super) ruled_out: bool,
}

impl Prefill {
    pub(super) fn keep(&mut self, index: u64, text: &str) {
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

    pub(super) fn block_started(&mut self, index: u64, block: &Value) {
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

    pub(super) fn claim_in(&self, delta: &Value) -> Option<PrefillClaim> {
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
    fn claim(&mut self, frame: &Frame) -> Option<PrefillClaim> {
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
            ("message_delta", _) => return self.claim_in(event.get("delta")?),
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

    fn claim_json(&mut self, message: &Value) -> Option<PrefillClaim> {
        let content = message.get("content")?.as_array()?;
        for (index, block) in (0u64..).zip(content) {
            self.block_started(index, block);
        }
        self.claim_in(message)
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
