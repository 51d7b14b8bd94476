//! [`StreamText`]: the answer's text out of a guarded stream, per wire API,
//! for a program that prints a stream as it comes without a client SDK.
//!
//! The guard hands the client the provider's own stream (a recovered one
//! included), so its text is read the way the provider's SDK would: text
//! deltas only, not thinking, tool calls or refusal text. It reads the SSE
//! streams of Anthropic Messages, OpenAI Chat Completions and Responses,
//! and Gemini (`alt=sse`); Bedrock's event streams are not SSE and give no
//! text here.
//!
//! ```
//! use http_body_util::BodyExt;
//! use refusal_guard::refusal::WireApi;
//! use refusal_guard::stream_text::StreamText;
//! use refusal_guard::RefusalGuardLayer;
//! use refusal_guard_testkit::{Simulator, ANSWER};
//! use tower::{Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let guard = RefusalGuardLayer::new().layer(Simulator::new().shared());
//! let request = http::Request::post("http://simulated/v1/chat/completions")
//!     .header("content-type", "application/json")
//!     .body(http_body_util::Full::new(bytes::Bytes::from(
//!         r#"{"model":"gpt-4o","stream":true,
//!             "messages":[{"role":"user","content":"Audit my SSH config"}]}"#,
//!     )))?;
//! let mut body = guard.oneshot(request).await?.into_body();
//!
//! let mut text = StreamText::new(WireApi::OpenAiChatCompletions);
//! let mut answer = String::new();
//! while let Some(frame) = body.frame().await {
//!     if let Ok(chunk) = frame?.into_data() {
//!         answer.push_str(&text.push(chunk)?); // print! it as it comes
//!     }
//! }
//! answer.push_str(&text.finish());
//! assert_eq!(answer, ANSWER);
//! # Ok(())
//! # }
//! ```

use bytes::Bytes;

use crate::dialect::text_delta::text_delta;
use crate::refusal::WireApi;
use crate::sse::{FrameTooLarge, SseFramer};

/// The text of one stream of `wire_api`, pushed chunk by chunk.
///
/// ```
/// use refusal_guard::refusal::WireApi;
/// use refusal_guard::stream_text::StreamText;
///
/// let mut text = StreamText::new(WireApi::OpenAiResponses);
/// let chunk = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n";
/// assert_eq!(text.push(chunk.into()).unwrap(), "Hi");
/// ```
#[derive(Debug)]
pub struct StreamText {
    wire_api: WireApi,
    framer: SseFramer,
}

impl StreamText {
    /// Reads a stream of `wire_api`; one event may take up to
    /// [`SseFramer::DEFAULT_MAX_FRAME_BYTES`].
    pub fn new(wire_api: WireApi) -> Self {
        StreamText {
            wire_api,
            framer: SseFramer::new(),
        }
    }

    /// The text the events `chunk` completes add (empty when it completes
    /// none, or none with text), or the error of an event that outgrew the
    /// bound: then stop reading, the stream is not one to print.
    pub fn push(&mut self, chunk: Bytes) -> Result<String, FrameTooLarge> {
        self.framer.push(chunk)?;
        let mut text = String::new();
        while let Some(frame) = self.framer.next_frame() {
            self.add(&frame, &mut text);
        }
        Ok(text)
    }

    /// The text of an event the stream ended on without its blank line.
    pub fn finish(&mut self) -> String {
        let mut text = String::new();
        while let Some(frame) = self.framer.finish() {
            self.add(&frame, &mut text);
        }
        text
    }

    fn add(&self, frame: &crate::sse::Frame, text: &mut String) {
        if let Some(delta) = frame
            .data()
            .and_then(|data| text_delta(self.wire_api, data))
        {
            text.push_str(&delta);
        }
    }
}
