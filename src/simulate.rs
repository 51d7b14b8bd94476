//! A simulated provider: an in-process tower service that refuses the first
//! attempt of every conversation and answers every later one, so the guard's
//! rescue can be seen with no network and no API key.
//!
//! It speaks just enough of two wire APIs:
//!
//! - Anthropic Messages (`POST …/v1/messages`): the first attempt gets an
//!   empty refusal (`stop_reason: "refusal"`, category `cyber`), as a stream
//!   or a JSON body as the request asks; later attempts get a short text
//!   answer.
//! - OpenAI Chat Completions (`POST …/v1/chat/completions`): the first attempt
//!   ends with `finish_reason: "content_filter"` and no content; later
//!   attempts get a short text answer.
//!
//! A conversation is named by its system prompt and first message, so the
//! guard's rescue continuation (the same conversation with a note appended)
//! is answered, and so is any later request of that conversation. Anything
//! else gets a 404 in the provider's error shape.
//!
//! ```
//! use bytes::Bytes;
//! use http_body_util::{BodyExt, Full};
//! use refusal_guard::simulate::Simulator;
//! use refusal_guard::{Outcome, Refusal, RefusalGuardLayer};
//! use tower::{Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let guard = RefusalGuardLayer::new().layer(Simulator::new());
//! let body = r#"{"model":"claude-opus-4-7","max_tokens":64,"stream":true,
//!                "messages":[{"role":"user","content":"Audit my SSH config"}]}"#;
//! let request = http::Request::post("http://simulated/v1/messages")
//!     .header("content-type", "application/json")
//!     .body(Full::new(Bytes::from(body)))
//!     .unwrap();
//! let response = guard.oneshot(request).await.unwrap();
//! let refusal = response.extensions().get::<Refusal>().cloned().unwrap();
//! assert_eq!(refusal.outcome, Outcome::Rescued);
//! let text = response.into_body().collect().await.unwrap().to_bytes();
//! assert!(std::str::from_utf8(&text).unwrap().contains("text_delta"));
//! # }
//! ```

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashSet, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower_service::Service;

use crate::BoxError;

/// The category the simulated refusals carry.
pub const CATEGORY: &str = "cyber";
/// The explanation the simulated refusals carry.
pub const EXPLANATION: &str =
    "Simulated refusal: the first attempt of every conversation is declined.";
/// The text of a simulated answer.
pub const ANSWER: &str = "Simulated answer: here is the defensive version of what you asked \
     for, step by step, with nothing that would help an attacker.";

/// Conversations remembered before the oldest are forgotten.
const MEMORY: usize = 10_000;

/// The simulated provider. Clones share what they have seen.
#[derive(Debug, Clone, Default)]
pub struct Simulator {
    seen: Arc<Mutex<Seen>>,
}

#[derive(Debug, Default)]
struct Seen {
    set: HashSet<u64>,
    order: VecDeque<u64>,
    requests: u64,
}

impl Simulator {
    /// A simulator that has seen no conversation yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many requests it has answered.
    pub fn requests(&self) -> u64 {
        self.lock().requests
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether this is the first attempt of the conversation; remembers it.
    fn first_attempt(&self, key: u64) -> bool {
        let mut seen = self.lock();
        seen.requests += 1;
        if !seen.set.insert(key) {
            return false;
        }
        seen.order.push_back(key);
        if seen.order.len() > MEMORY {
            if let Some(old) = seen.order.pop_front() {
                seen.set.remove(&old);
            }
        }
        true
    }

    /// Answers one request whose body has been read.
    pub fn respond(&self, parts: &http::request::Parts, body: &[u8]) -> Response<SimulatedBody> {
        let path = parts.uri.path();
        let wire = if path.ends_with("/chat/completions") {
            Wire::OpenAiChat
        } else if path.ends_with("/messages") {
            Wire::Anthropic
        } else {
            return error(
                Wire::from_path(path),
                StatusCode::NOT_FOUND,
                "not_found_error",
                "the simulated provider serves POST /v1/messages and /v1/chat/completions",
            );
        };
        if parts.method != http::Method::POST {
            return error(
                wire,
                StatusCode::METHOD_NOT_ALLOWED,
                "invalid_request_error",
                "use POST",
            );
        }
        let Ok(request @ Value::Object(_)) = serde_json::from_slice::<Value>(body) else {
            return error(
                wire,
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "the body must be a JSON object",
            );
        };
        let model = request["model"]
            .as_str()
            .unwrap_or("simulated-model")
            .to_owned();
        let stream = request["stream"].as_bool().unwrap_or(false);
        let refuse = self.first_attempt(conversation_key(&request));
        match (wire, stream, refuse) {
            (Wire::Anthropic, true, true) => sse(anthropic_refusal_stream(&model)),
            (Wire::Anthropic, true, false) => sse(anthropic_text_stream(&model)),
            (Wire::Anthropic, false, true) => json_body(anthropic_message(&model, None)),
            (Wire::Anthropic, false, false) => json_body(anthropic_message(&model, Some(ANSWER))),
            (Wire::OpenAiChat, true, refuse) => sse(openai_stream(&model, refuse)),
            (Wire::OpenAiChat, false, refuse) => json_body(openai_completion(&model, refuse)),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Wire {
    Anthropic,
    OpenAiChat,
}

impl Wire {
    fn from_path(path: &str) -> Wire {
        if path.contains("/chat/") || path.ends_with("/responses") {
            Wire::OpenAiChat
        } else {
            Wire::Anthropic
        }
    }
}

/// The system prompt and the first message: the same for every attempt of a
/// conversation, whatever the guard appends.
fn conversation_key(request: &Value) -> u64 {
    let mut hasher = DefaultHasher::new();
    request
        .get("system")
        .map(Value::to_string)
        .hash(&mut hasher);
    request
        .get("messages")
        .and_then(|m| m.get(0))
        .map(first_text)
        .hash(&mut hasher);
    hasher.finish()
}

/// The text of a message, whether its content is a string or blocks (the
/// guard may turn a string into blocks to append its note).
fn first_text(message: &Value) -> String {
    match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .find_map(|b| b["text"].as_str())
            .unwrap_or("")
            .to_owned(),
        other => other.to_string(),
    }
}

fn event(name: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

fn anthropic_start(model: &str) -> Bytes {
    event(
        "message_start",
        &json!({"type":"message_start","message":{"id":"msg_simulated","type":"message",
            "role":"assistant","content":[],"model":model,"stop_reason":null,
            "stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}),
    )
}

fn anthropic_refusal_stream(model: &str) -> Vec<Bytes> {
    vec![
        anthropic_start(model),
        event(
            "message_delta",
            &json!({"type":"message_delta","delta":{"stop_reason":"refusal","stop_sequence":null,
                "stop_details":{"type":"refusal","category":CATEGORY,"explanation":EXPLANATION}},
                "usage":{"output_tokens":0}}),
        ),
        event("message_stop", &json!({"type":"message_stop"})),
    ]
}

fn anthropic_text_stream(model: &str) -> Vec<Bytes> {
    let mut chunks = vec![
        anthropic_start(model),
        event(
            "content_block_start",
            &json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        ),
    ];
    for piece in ANSWER.split_inclusive(' ') {
        chunks.push(event(
            "content_block_delta",
            &json!({"type":"content_block_delta","index":0,
                "delta":{"type":"text_delta","text":piece}}),
        ));
    }
    chunks.push(event(
        "content_block_stop",
        &json!({"type":"content_block_stop","index":0}),
    ));
    chunks.push(event(
        "message_delta",
        &json!({"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},
            "usage":{"output_tokens":24}}),
    ));
    chunks.push(event("message_stop", &json!({"type":"message_stop"})));
    chunks
}

fn anthropic_message(model: &str, answer: Option<&str>) -> Value {
    match answer {
        Some(text) => json!({"id":"msg_simulated","type":"message","role":"assistant",
            "model":model,"content":[{"type":"text","text":text}],"stop_reason":"end_turn",
            "stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":24}}),
        None => json!({"id":"msg_simulated","type":"message","role":"assistant",
            "model":model,"content":[],"stop_reason":"refusal","stop_sequence":null,
            "stop_details":{"type":"refusal","category":CATEGORY,"explanation":EXPLANATION},
            "usage":{"input_tokens":12,"output_tokens":0}}),
    }
}

fn openai_chunk(model: &str, delta: Value, finish: Option<&str>) -> Bytes {
    let chunk = json!({"id":"chatcmpl-simulated","object":"chat.completion.chunk","created":0,
        "model":model,"choices":[{"index":0,"delta":delta,"finish_reason":finish}]});
    Bytes::from(format!("data: {chunk}\n\n"))
}

fn openai_stream(model: &str, refuse: bool) -> Vec<Bytes> {
    let mut chunks = vec![openai_chunk(
        model,
        json!({"role":"assistant","content":""}),
        None,
    )];
    if refuse {
        chunks.push(openai_chunk(model, json!({}), Some("content_filter")));
    } else {
        for piece in ANSWER.split_inclusive(' ') {
            chunks.push(openai_chunk(model, json!({"content":piece}), None));
        }
        chunks.push(openai_chunk(model, json!({}), Some("stop")));
    }
    chunks.push(Bytes::from_static(b"data: [DONE]\n\n"));
    chunks
}

fn openai_completion(model: &str, refuse: bool) -> Value {
    let (content, finish) = if refuse {
        (Value::Null, "content_filter")
    } else {
        (Value::from(ANSWER), "stop")
    };
    json!({"id":"chatcmpl-simulated","object":"chat.completion","created":0,"model":model,
        "choices":[{"index":0,"message":{"role":"assistant","content":content,"refusal":null},
            "finish_reason":finish}],
        "usage":{"prompt_tokens":12,"completion_tokens":24,"total_tokens":36}})
}

fn sse(chunks: Vec<Bytes>) -> Response<SimulatedBody> {
    respond(StatusCode::OK, "text/event-stream", chunks)
}

fn json_body(value: Value) -> Response<SimulatedBody> {
    respond(
        StatusCode::OK,
        "application/json",
        vec![Bytes::from(value.to_string())],
    )
}

fn error(wire: Wire, status: StatusCode, kind: &str, message: &str) -> Response<SimulatedBody> {
    let body = match wire {
        Wire::Anthropic => json!({"type":"error","error":{"type":kind,"message":message}}),
        Wire::OpenAiChat => {
            json!({"error":{"message":message,"type":kind,"param":null,"code":null}})
        }
    };
    respond(
        status,
        "application/json",
        vec![Bytes::from(body.to_string())],
    )
}

fn respond(status: StatusCode, content_type: &str, chunks: Vec<Bytes>) -> Response<SimulatedBody> {
    let mut response = Response::new(SimulatedBody {
        chunks: chunks.into(),
    });
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_str(content_type)
            .unwrap_or(http::HeaderValue::from_static("application/octet-stream")),
    );
    response.headers_mut().insert(
        http::HeaderName::from_static("request-id"),
        http::HeaderValue::from_static("req_simulated"),
    );
    response
}

/// The response body of the [`Simulator`]: its chunks, one frame each, as a
/// provider's stream would arrive.
#[derive(Debug)]
pub struct SimulatedBody {
    chunks: VecDeque<Bytes>,
}

impl Body for SimulatedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.chunks.pop_front().map(|chunk| Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.chunks.iter().map(|c| c.len() as u64).sum())
    }
}

impl<B> Service<Request<B>> for Simulator
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    type Response = Response<SimulatedBody>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let body = body.collect().await.map_err(Into::into)?.to_bytes();
            Ok(this.respond(&parts, &body))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(response: Response<SimulatedBody>) -> Vec<u8> {
        response
            .into_body()
            .chunks
            .iter()
            .flatten()
            .copied()
            .collect()
    }

    fn parts(path: &str) -> http::request::Parts {
        Request::post(path).body(()).unwrap().into_parts().0
    }

    #[test]
    fn first_attempt_refused_then_answered() {
        let sim = Simulator::new();
        let body = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        let first = sim.respond(&parts("/v1/messages"), body);
        let text = bytes(first);
        assert!(String::from_utf8_lossy(&text).contains("\"refusal\""));
        // The guard's continuation turns the content into blocks.
        let again = br#"{"model":"m","messages":[{"role":"user","content":[
            {"type":"text","text":"hi"},{"type":"text","text":"note"}]}]}"#;
        let second = sim.respond(&parts("/v1/messages"), again);
        let text = bytes(second);
        assert!(String::from_utf8_lossy(&text).contains("end_turn"));
        assert_eq!(sim.requests(), 2);
    }

    #[test]
    fn openai_first_attempt_is_filtered() {
        let sim = Simulator::new();
        let body = br#"{"model":"gpt","stream":true,"messages":[{"role":"user","content":"x"}]}"#;
        let first = sim.respond(&parts("/v1/chat/completions"), body);
        let text = String::from_utf8(bytes(first)).unwrap();
        assert!(text.contains("content_filter") && text.ends_with("data: [DONE]\n\n"));
    }

    #[test]
    fn unknown_path_is_404() {
        let response = Simulator::new().respond(&parts("/v2/other"), b"{}");
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
    }
}
