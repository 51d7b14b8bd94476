//! The replies, in each wire API's shape: one file per API, each turning a
//! [`Reply`] into the bytes that API sends (a JSON body, or the frames of
//! its stream).

mod anthropic;
mod chat;
mod gemini;
mod responses;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use serde_json::Value;

use super::request::{Turn, Wire};
use super::script::{Reply, ReplyKind};
use refusal_guard::api_error::provider_error_for;

/// The response body of the simulator: its chunks, one frame each, as a
/// provider's stream would arrive.
///
/// ```
/// use http_body_util::BodyExt;
/// use refusal_guard_testkit::Simulator;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let (parts, ()) = http::Request::post("/v1/chat/completions").body(()).unwrap().into_parts();
/// let body = br#"{"model":"gpt-5","messages":[{"role":"user","content":"hi"}]}"#;
/// let response = Simulator::answering().respond(&parts, body);
/// let bytes = response.into_body().collect().await.unwrap().to_bytes();
/// assert!(bytes.starts_with(b"{"));
/// # }
/// ```
#[derive(Debug)]
pub struct SimulatedBody {
    chunks: VecDeque<Bytes>,
}

impl SimulatedBody {
    fn new(chunks: Vec<Bytes>) -> Self {
        SimulatedBody {
            chunks: chunks.into(),
        }
    }
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

/// An Anthropic server-side fallback that served: the models that refused
/// (the requested one first), the refusal's category, the model that
/// served.
#[derive(Debug, Clone)]
pub(crate) struct Handoff {
    pub(crate) refused: Vec<String>,
    pub(crate) category: Option<String>,
    pub(crate) served: String,
}

/// What one reply says, resolved for one request: the text it sends, the
/// category and explanation a refusal carries, the usage it reports.
struct Said<'a> {
    model: &'a str,
    kind: ReplyKind,
    text: &'a str,
    category: &'a str,
    explanation: &'a str,
    code: Option<&'a str>,
    input_tokens: u64,
    output_tokens: u64,
    handoff: Option<&'a Handoff>,
}

impl Said<'_> {
    fn refused(&self) -> bool {
        self.kind.is_refusal()
    }
}

/// `reply` to the request read as `turn`, in its API's shape (a token
/// count is answered with its count, whatever the reply), served by the
/// `handoff`'s model when a server-side fallback served it.
pub(crate) fn render(
    turn: &Turn,
    reply: &Reply,
    handoff: Option<&Handoff>,
) -> Response<SimulatedBody> {
    if let Some(status) = reply.error_status() {
        return provider_failure(turn, status, reply.retry_after_seconds());
    }
    let text = reply.text_sent();
    let said = Said {
        model: &turn.model,
        kind: reply.kind(),
        text,
        category: reply.category_named().unwrap_or(super::script::CATEGORY),
        explanation: reply.explanation_sent(),
        code: reply.code_named(),
        input_tokens: turn.input_tokens,
        output_tokens: text.split_whitespace().count() as u64,
        handoff,
    };
    match (&turn.wire, turn.stream) {
        (Wire::AnthropicCountTokens, _) => token_count(turn),
        (Wire::Anthropic, _) if said.kind == ReplyKind::Blocked => anthropic::blocked(&said),
        (Wire::Anthropic, true) => sse(anthropic::stream(&said)),
        (Wire::Anthropic, false) => json(anthropic::message(&said)),
        (Wire::OpenAiChat, _) if said.kind == ReplyKind::Blocked => chat::blocked(&said),
        (Wire::OpenAiChat, true) => sse(chat::stream(&said, turn.include_usage)),
        (Wire::OpenAiChat, false) => json(chat::completion(&said)),
        (Wire::OpenAiResponses, _) if said.kind == ReplyKind::Blocked => responses::blocked(&said),
        (Wire::OpenAiResponses, true) => sse(responses::stream(&said)),
        (Wire::OpenAiResponses, false) => json(responses::response(&said, None)),
        (Wire::Gemini { sse: true, .. }, _) => sse(gemini::stream(&said)),
        (Wire::Gemini { array: true, .. }, _) => json(Value::Array(gemini::chunks(&said))),
        (Wire::Gemini { .. }, _) => json(gemini::whole(&said)),
    }
}

/// Anthropic's token counting: `{"input_tokens": N}`, whatever the script.
fn token_count(turn: &Turn) -> Response<SimulatedBody> {
    json(serde_json::json!({"input_tokens": turn.input_tokens}))
}

/// A plain error of the provider, in its API's shape.
fn provider_failure(
    turn: &Turn,
    status: StatusCode,
    retry_after: Option<u64>,
) -> Response<SimulatedBody> {
    let message =
        format!("Simulated error: the simulator's script answers this request with {status}.");
    let mut response = from_bytes(provider_error_for(turn.wire.api(), status, &message));
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(http::header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// OpenAI's error object for a policy block (Chat Completions and
/// Responses alike), in a 400.
fn policy_error(said: &Said<'_>, code: &str) -> Response<SimulatedBody> {
    json_with(
        StatusCode::BAD_REQUEST,
        &serde_json::json!({"error":{"message":said.explanation,"type":"invalid_request_error",
            "param":null,"code":code}}),
    )
}

/// An SSE event with a name.
fn event(name: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

/// `text` in the pieces a stream sends it in: a word (and the space after
/// it) each.
fn pieces(text: &str) -> impl Iterator<Item = &str> {
    text.split_inclusive(' ')
}

fn sse(chunks: Vec<Bytes>) -> Response<SimulatedBody> {
    respond(StatusCode::OK, "text/event-stream", chunks)
}

fn json(value: Value) -> Response<SimulatedBody> {
    json_with(StatusCode::OK, &value)
}

fn json_with(status: StatusCode, value: &Value) -> Response<SimulatedBody> {
    respond(
        status,
        "application/json",
        vec![Bytes::from(value.to_string())],
    )
}

/// A response made elsewhere (an error of the guard's or a provider's
/// shape), as a simulated body.
pub(crate) fn from_bytes(response: Response<Bytes>) -> Response<SimulatedBody> {
    let (parts, body) = response.into_parts();
    Response::from_parts(parts, SimulatedBody::new(vec![body]))
}

fn respond(status: StatusCode, content_type: &str, chunks: Vec<Bytes>) -> Response<SimulatedBody> {
    let mut response = Response::new(SimulatedBody::new(chunks));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_str(content_type)
            .unwrap_or(HeaderValue::from_static("application/octet-stream")),
    );
    response.headers_mut().insert(
        http::HeaderName::from_static("request-id"),
        HeaderValue::from_static("req_simulated"),
    );
    response
}
