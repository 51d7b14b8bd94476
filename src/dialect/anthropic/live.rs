//! Live thinking: what of a held stream may go out before the decision.

use serde_json::Value;

use crate::dialect::{FrameRewrite, LiveSplice};

use super::prefill::*;
use crate::sse::Frame;

/// Live thinking: `message_start`, pings and thinking blocks go out as they
/// come; anything else (text, tool use, the stop) waits for the decision.
#[derive(Default)]
pub(super) struct LiveThinking {
    pub(super) thinking_blocks: Vec<u64>,
    /// Blocks the client has seen start: a continuation's blocks go after.
    pub(super) forwarded_blocks: u64,
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
