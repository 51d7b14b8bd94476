#![deny(missing_docs)]
#![forbid(unsafe_code)]
//! A simulated provider: an in-process tower service that refuses the first
//! attempt of every conversation and answers every later one, so the guard's
//! rescue can be seen with no network and no API key, from any harness.
//!
//! It speaks the four wire APIs the guard does, streamed and not, each
//! refusing with that API's empty-refusal signal:
//!
//! - Anthropic Messages (`POST …/v1/messages`): `stop_reason: "refusal"`,
//!   category `cyber`.
//! - OpenAI Chat Completions (`POST …/chat/completions`):
//!   `finish_reason: "content_filter"` and no content.
//! - OpenAI Responses (`POST …/responses`): `status: "incomplete"` with
//!   `incomplete_details.reason: "content_filter"` (`response.incomplete`
//!   in a stream).
//! - Gemini (`POST …/models/{model}:generateContent`, or
//!   `:streamGenerateContent`, with `alt=sse` a stream, without it one JSON
//!   array): `finishReason: "SAFETY"` and no parts.
//!
//! Anthropic's token counting (`POST …/v1/messages/count_tokens`), which
//! Claude Code calls beside Messages, gets `{"input_tokens": N}`: a rough
//! count (a token for every four bytes of the request's `system`,
//! `messages` and `tools` as JSON), not the real tokenizer's.
//!
//! Later attempts get a short text answer. A conversation is named by its
//! system prompt and first message, so the guard's rescue continuation (the
//! same conversation with a note appended) is answered, and so is any later
//! request of that conversation. Its own errors (another path or method, a
//! body that is not a JSON object) come in the API's error shape with the
//! [`header::ERROR`](refusal_guard::header::ERROR) header.
//!
//! [`Simulator::strict`] first checks every request against the providers'
//! documented request rules ([`contract`]), as the real APIs would: a
//! request that breaks one is answered with the provider's own 400 (404 for
//! a path no API serves), in its shape and without the guard's error
//! header, counted where no log filter reaches (the
//! [`CONTRACT_VIOLATIONS`] counter, [`Simulator::violations`]), and logged
//! as one `warn` line naming the rule (no header, no body). Whatever the
//! guard sends on a client's behalf, its rescue notes and fallbacks
//! included, is then held to the rules the provider keeps.
//!
//! ```
//! use bytes::Bytes;
//! use http_body_util::{BodyExt, Full};
//! use refusal_guard_testkit::Simulator;
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

pub mod contract;

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

use contract::Contract;
use refusal_guard::api_error::{api_error, api_error_for};
use refusal_guard::refusal::WireApi;
use refusal_guard::BoxError;

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

/// The counter of requests a strict simulator answered with a contract
/// error, through the [`metrics`] facade (the proxy's `/metrics` with
/// `--admin`): a channel no log filter turns off, registered at 0 when the
/// simulator is made strict, so that a reader tells "none" from "not
/// counted".
pub const CONTRACT_VIOLATIONS: &str = "refusal_guard_contract_violations_total";

/// The simulated provider. Clones share what they have seen.
#[derive(Debug, Clone, Default)]
pub struct Simulator {
    seen: Arc<Mutex<Seen>>,
    /// The rules every request is checked against first, when strict.
    contract: Option<Arc<Contract>>,
}

#[derive(Debug, Default)]
struct Seen {
    set: HashSet<u64>,
    order: VecDeque<u64>,
    requests: u64,
    violations: u64,
    /// The latest violations not yet taken, at most [`KEPT_VIOLATIONS`].
    broken: VecDeque<contract::Violation>,
}

/// Violations kept for [`Simulator::take_violations`]; older ones are
/// counted only.
const KEPT_VIOLATIONS: usize = 64;

impl Simulator {
    /// A simulator that has seen no conversation yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A simulator that answers a request breaking the providers'
    /// documented rules ([`contract`]) the way the provider does, with its
    /// 400 in its shape, counts it ([`violations`](Self::violations), and
    /// the [`CONTRACT_VIOLATIONS`] counter, which no log filter hides) and
    /// logs it (`warn`, one line: the request's method and path, the API,
    /// the rule and what is wrong).
    ///
    /// ```
    /// use refusal_guard_testkit::Simulator;
    ///
    /// let simulator = Simulator::new().strict();
    /// let request = http::Request::post("/v1/messages").body(()).unwrap();
    /// let (parts, ()) = request.into_parts();
    /// // No `max_tokens`: the Messages API rejects the request.
    /// let body = br#"{"model":"claude-opus-4-7","messages":[{"role":"user","content":"hi"}]}"#;
    /// let response = simulator.respond(&parts, body);
    /// assert_eq!(response.status(), 400);
    /// assert_eq!(simulator.violations(), 1);
    /// ```
    pub fn strict(self) -> Self {
        metrics::describe_counter!(
            CONTRACT_VIOLATIONS,
            "Requests the strict simulated provider answered with a contract error"
        );
        metrics::counter!(CONTRACT_VIOLATIONS).increment(0);
        Simulator {
            contract: Some(Arc::new(Contract::new())),
            ..self
        }
    }

    /// How many requests it has answered.
    pub fn requests(&self) -> u64 {
        self.lock().requests
    }

    /// How many requests it answered with a contract error (always 0 unless
    /// [`strict`](Self::strict)).
    pub fn violations(&self) -> u64 {
        self.lock().violations
    }

    /// The violations answered since the last call, oldest first (the
    /// latest 64 at most; [`violations`](Self::violations) counts them
    /// all): for a harness that fails the test that caused them.
    pub fn take_violations(&self) -> Vec<contract::Violation> {
        self.lock().broken.drain(..).collect()
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
        if let Some(broken) = self.broken(parts, body) {
            return from_error(broken);
        }
        let path = parts.uri.path().trim_end_matches('/');
        let Some(wire) = Wire::recognise(&parts.uri) else {
            let served = "the simulated provider serves POST …/v1/messages (and \
                 …/v1/messages/count_tokens), …/chat/completions, …/responses and \
                 …/models/{model}:generateContent (or :streamGenerateContent)";
            let error = api_error(path, StatusCode::NOT_FOUND, "simulated_not_found", served);
            return from_error(error);
        };
        if parts.method != http::Method::POST {
            let error = api_error_for(
                wire.api(),
                StatusCode::METHOD_NOT_ALLOWED,
                "simulated_method_not_allowed",
                "the simulated provider answers POST only",
            );
            return from_error(error);
        }
        let Ok(request @ Value::Object(_)) = serde_json::from_slice::<Value>(body) else {
            let error = api_error_for(
                wire.api(),
                StatusCode::BAD_REQUEST,
                "simulated_invalid_body",
                "the body must be a JSON object",
            );
            return from_error(error);
        };
        let model = match &wire {
            Wire::Gemini { model, .. } => model.clone(),
            _ => request["model"]
                .as_str()
                .unwrap_or("simulated-model")
                .to_owned(),
        };
        let stream = request["stream"].as_bool().unwrap_or(false);
        // Counting tokens is no attempt of a conversation: nothing to remember.
        let counting = matches!(wire, Wire::AnthropicCountTokens);
        let refuse = !counting && self.first_attempt(conversation_key(wire.api(), &request));
        match (wire, stream, refuse) {
            (Wire::AnthropicCountTokens, ..) => {
                json_body(json!({"input_tokens": rough_token_count(&request)}))
            }
            (Wire::Anthropic, true, true) => sse(anthropic_refusal_stream(&model)),
            (Wire::Anthropic, true, false) => sse(anthropic_text_stream(&model)),
            (Wire::Anthropic, false, true) => json_body(anthropic_message(&model, None)),
            (Wire::Anthropic, false, false) => json_body(anthropic_message(&model, Some(ANSWER))),
            (Wire::OpenAiChat, true, refuse) => sse(openai_stream(&model, refuse)),
            (Wire::OpenAiChat, false, refuse) => json_body(openai_completion(&model, refuse)),
            (Wire::OpenAiResponses, true, refuse) => sse(responses_stream(&model, refuse)),
            (Wire::OpenAiResponses, false, refuse) => json_body(responses_body(&model, refuse)),
            (Wire::Gemini { sse: true, .. }, _, refuse) => sse(gemini_stream(&model, refuse)),
            (Wire::Gemini { array, .. }, _, refuse) => {
                let chunks = gemini_chunks(&model, refuse);
                json_body(if array {
                    Value::Array(chunks)
                } else {
                    gemini_whole(&model, refuse)
                })
            }
        }
    }
}

impl Simulator {
    /// The provider's answer to a request that breaks the contract, when
    /// strict; logged and counted.
    fn broken(&self, parts: &http::request::Parts, body: &[u8]) -> Option<Response<Bytes>> {
        let contract = self.contract.as_ref()?;
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let violation = contract
            .check(parts.method.as_str(), path, &parts.headers, body)
            .err()?;
        tracing::warn!(
            rule = violation.rule,
            "simulated provider: contract violation: {violation}"
        );
        metrics::counter!(CONTRACT_VIOLATIONS).increment(1);
        let response = violation.response();
        let mut seen = self.lock();
        seen.requests += 1;
        seen.violations += 1;
        if seen.broken.len() == KEPT_VIOLATIONS {
            seen.broken.pop_front();
        }
        seen.broken.push_back(violation);
        Some(response)
    }
}

/// The wire API a request speaks, told from its path.
#[derive(Debug, Clone)]
enum Wire {
    Anthropic,
    /// Anthropic's token counting, answered without a conversation.
    AnthropicCountTokens,
    OpenAiChat,
    OpenAiResponses,
    /// The model is in the path. `sse` for `streamGenerateContent?alt=sse`,
    /// `array` for `streamGenerateContent` without it (one JSON array).
    Gemini {
        model: String,
        sse: bool,
        array: bool,
    },
}

impl Wire {
    fn recognise(uri: &http::Uri) -> Option<Wire> {
        let path = uri.path().trim_end_matches('/');
        if path.ends_with("/chat/completions") {
            return Some(Wire::OpenAiChat);
        }
        if path.ends_with("/responses") {
            return Some(Wire::OpenAiResponses);
        }
        if path.ends_with("/messages") {
            return Some(Wire::Anthropic);
        }
        if path.ends_with("/messages/count_tokens") {
            return Some(Wire::AnthropicCountTokens);
        }
        let last = path.rsplit('/').next()?;
        let (model, method) = last.split_once(':')?;
        let streaming = match method {
            "generateContent" => false,
            "streamGenerateContent" => true,
            _ => return None,
        };
        let sse = streaming
            && uri
                .query()
                .is_some_and(|q| q.split('&').any(|p| p.eq_ignore_ascii_case("alt=sse")));
        Some(Wire::Gemini {
            model: model.to_owned(),
            sse,
            array: streaming && !sse,
        })
    }

    fn api(&self) -> WireApi {
        match self {
            Wire::Anthropic | Wire::AnthropicCountTokens => WireApi::AnthropicMessages,
            Wire::OpenAiChat => WireApi::OpenAiChatCompletions,
            Wire::OpenAiResponses => WireApi::OpenAiResponses,
            Wire::Gemini { .. } => WireApi::GeminiGenerateContent,
        }
    }
}

/// A plausible `input_tokens` for a token-counting request: a token for
/// every four bytes of its `system`, `messages` and `tools` as JSON, at
/// least one.
fn rough_token_count(request: &Value) -> u64 {
    let bytes: usize = ["system", "messages", "tools"]
        .iter()
        .filter_map(|key| request.get(*key))
        .map(|value| value.to_string().len())
        .sum();
    (bytes as u64).div_ceil(4).max(1)
}

/// The system prompt and the first message: the same for every attempt of a
/// conversation, whatever the guard appends (in each API's fields).
fn conversation_key(api: WireApi, request: &Value) -> u64 {
    let mut hasher = DefaultHasher::new();
    // Each provider meets a conversation afresh.
    api.to_string().hash(&mut hasher);
    for system in [
        "system",
        "instructions",
        "systemInstruction",
        "system_instruction",
    ] {
        request.get(system).map(Value::to_string).hash(&mut hasher);
    }
    let first = ["messages", "contents"]
        .iter()
        .find_map(|key| request.get(*key)?.get(0))
        .map(first_text)
        .or_else(|| match request.get("input")? {
            Value::String(text) => Some(text.clone()),
            Value::Array(items) => items.first().map(first_text),
            _ => None,
        });
    first.hash(&mut hasher);
    hasher.finish()
}

/// The text of a message, whether its content is a string or blocks (the
/// guard may turn a string into blocks to append its note), or a Gemini
/// content's parts.
fn first_text(message: &Value) -> String {
    let blocks = match (&message["content"], &message["parts"]) {
        (Value::String(text), _) => return text.clone(),
        (Value::Array(blocks), _) | (_, Value::Array(blocks)) => blocks,
        (other, _) => return other.to_string(),
    };
    blocks
        .iter()
        .find_map(|b| b["text"].as_str())
        .unwrap_or("")
        .to_owned()
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

/// A Responses `response` object: incomplete by the content filter with no
/// output, or completed with the answer.
fn responses_body(model: &str, refuse: bool) -> Value {
    let (status, details, output) = if refuse {
        ("incomplete", json!({"reason": "content_filter"}), json!([]))
    } else {
        (
            "completed",
            Value::Null,
            json!([responses_message("completed", ANSWER)]),
        )
    };
    json!({"id":"resp_simulated","object":"response","created_at":0,"status":status,
        "error":null,"incomplete_details":details,"model":model,"output":output,
        "usage":{"input_tokens":12,"output_tokens":24,"total_tokens":36}})
}

fn responses_message(status: &str, text: &str) -> Value {
    json!({"id":"msg_simulated","type":"message","status":status,"role":"assistant",
        "content":[{"type":"output_text","text":text,"annotations":[]}]})
}

fn responses_stream(model: &str, refuse: bool) -> Vec<Bytes> {
    let mut started = responses_body(model, false);
    started["status"] = json!("in_progress");
    started["output"] = json!([]);
    started["usage"] = Value::Null;
    let mut events = vec![json!({"type":"response.created","response":started})];
    if refuse {
        events.push(json!({"type":"response.incomplete","response":responses_body(model, true)}));
    } else {
        let mut item = responses_message("in_progress", "");
        item["content"] = json!([]);
        events.push(json!({"type":"response.output_item.added","output_index":0,"item":item}));
        events.push(
            json!({"type":"response.content_part.added","item_id":"msg_simulated",
            "output_index":0,"content_index":0,
            "part":{"type":"output_text","text":"","annotations":[]}}),
        );
        for piece in ANSWER.split_inclusive(' ') {
            events.push(
                json!({"type":"response.output_text.delta","item_id":"msg_simulated",
                "output_index":0,"content_index":0,"delta":piece}),
            );
        }
        events.push(
            json!({"type":"response.output_text.done","item_id":"msg_simulated",
            "output_index":0,"content_index":0,"text":ANSWER}),
        );
        events.push(
            json!({"type":"response.content_part.done","item_id":"msg_simulated",
            "output_index":0,"content_index":0,
            "part":{"type":"output_text","text":ANSWER,"annotations":[]}}),
        );
        events.push(json!({"type":"response.output_item.done","output_index":0,
            "item":responses_message("completed", ANSWER)}));
        events.push(json!({"type":"response.completed","response":responses_body(model, false)}));
    }
    events
        .into_iter()
        .enumerate()
        .map(|(n, mut data)| {
            data["sequence_number"] = json!(n);
            let name = data["type"].as_str().unwrap_or("message").to_owned();
            event(&name, &data)
        })
        .collect()
}

/// The chunks of a Gemini answer: an empty `SAFETY` stop, or the answer in
/// pieces ending with `STOP`.
fn gemini_chunks(model: &str, refuse: bool) -> Vec<Value> {
    let chunk = |candidate: Value| {
        json!({"candidates":[candidate],"modelVersion":model,
            "usageMetadata":{"promptTokenCount":12,"candidatesTokenCount":24,"totalTokenCount":36}})
    };
    if refuse {
        return vec![chunk(
            json!({"finishReason":"SAFETY","index":0,"safetyRatings":[
            {"category":"HARM_CATEGORY_DANGEROUS_CONTENT","probability":"HIGH","blocked":true}]}),
        )];
    }
    let pieces: Vec<&str> = ANSWER.split_inclusive(". ").collect();
    let last = pieces.len() - 1;
    pieces
        .iter()
        .enumerate()
        .map(|(n, piece)| {
            let mut candidate =
                json!({"content":{"role":"model","parts":[{"text":piece}]},"index":0});
            if n == last {
                candidate["finishReason"] = json!("STOP");
            }
            chunk(candidate)
        })
        .collect()
}

/// A whole `generateContent` answer.
fn gemini_whole(model: &str, refuse: bool) -> Value {
    let mut chunks = gemini_chunks(model, refuse);
    let mut whole = chunks.remove(0);
    if !refuse {
        whole["candidates"][0] = json!({"content":{"role":"model","parts":[{"text":ANSWER}]},
            "finishReason":"STOP","index":0});
    }
    whole
}

fn gemini_stream(model: &str, refuse: bool) -> Vec<Bytes> {
    gemini_chunks(model, refuse)
        .into_iter()
        .map(|chunk| Bytes::from(format!("data: {chunk}\r\n\r\n")))
        .collect()
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

/// One of the guard's own error responses (the API's shape, the
/// [`header::ERROR`](refusal_guard::header::ERROR) header), as a simulated body.
fn from_error(error: Response<Bytes>) -> Response<SimulatedBody> {
    let (parts, body) = error.into_parts();
    Response::from_parts(
        parts,
        SimulatedBody {
            chunks: VecDeque::from([body]),
        },
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
    fn unknown_path_is_a_404_of_its_api_with_the_error_header() {
        let response = Simulator::new().respond(&parts("/v2/other"), b"{}");
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            response.headers()[refusal_guard::header::ERROR],
            "simulated_not_found"
        );
        let gemini = "/v1beta/models/gemini-2.5-pro:generateContent";
        let response = Simulator::new().respond(&parts(gemini), b"[1]");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let json: Value = serde_json::from_slice(&bytes(response)).unwrap();
        assert_eq!(json["error"]["status"], "INVALID_ARGUMENT");
    }

    #[test]
    fn strict_answers_a_broken_request_as_its_provider_and_remembers_nothing() {
        let sim = Simulator::new().strict();
        // A note before the tool results it follows: the API's 400.
        let broken = br#"{"model":"m","max_tokens":8,"messages":[
            {"role":"user","content":"x"},
            {"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},
            {"role":"user","content":[{"type":"text","text":"note"},
                {"type":"tool_result","tool_use_id":"t","content":"r"}]}]}"#;
        let response = sim.respond(&parts("/v1/messages"), broken);
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert!(response
            .headers()
            .get(refusal_guard::header::ERROR)
            .is_none());
        let json: Value = serde_json::from_slice(&bytes(response)).unwrap();
        assert_eq!(json["error"]["type"], "invalid_request_error");
        assert!(json["error"]["message"].as_str().unwrap().contains("A4"));
        assert_eq!((sim.requests(), sim.violations()), (1, 1));
        assert_eq!(sim.take_violations()[0].rule, "A4");
        assert!(sim.take_violations().is_empty(), "taken");
        // The same conversation, kept to the rules: its first attempt yet.
        let kept = br#"{"model":"m","max_tokens":8,"messages":[
            {"role":"user","content":"x"},
            {"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"r"},
                {"type":"text","text":"note"}]}]}"#;
        let first = bytes(sim.respond(&parts("/v1/messages"), kept));
        assert!(String::from_utf8_lossy(&first).contains("\"refusal\""));
        assert_eq!(sim.violations(), 1);
        let lenient = Simulator::new().respond(&parts("/v1/messages"), broken);
        assert_eq!(lenient.status(), StatusCode::OK);
    }

    #[test]
    fn responses_and_gemini_refuse_first_then_answer() {
        let sim = Simulator::new();
        let body = br#"{"model":"gpt-4o","stream":true,"input":"x"}"#;
        let first = String::from_utf8(bytes(sim.respond(&parts("/v1/responses"), body))).unwrap();
        assert!(first.contains("event: response.incomplete") && first.contains("content_filter"));
        let again = br#"{"model":"gpt-4o","stream":true,"input":[{"role":"user","content":"x"},
            {"role":"user","content":"note"}]}"#;
        let second = String::from_utf8(bytes(sim.respond(&parts("/v1/responses"), again))).unwrap();
        assert!(second.contains("response.output_text.delta"));
        let path = "/v1beta/models/gemini-2.5-pro:streamGenerateContent";
        let body = br#"{"contents":[{"role":"user","parts":[{"text":"y"}]}]}"#;
        let array: Value = serde_json::from_slice(&bytes(sim.respond(&parts(path), body))).unwrap();
        assert_eq!(array[0]["candidates"][0]["finishReason"], "SAFETY");
        let sse = format!("{path}?alt=sse");
        let answer = String::from_utf8(bytes(sim.respond(&parts(&sse), body))).unwrap();
        assert!(answer.starts_with("data: ") && answer.contains("\"STOP\""));
    }
}
