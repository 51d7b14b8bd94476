//! Shared test harness: a scripted mock upstream built with `tower::service_fn`.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use tower::{BoxError, Service, ServiceExt};

/// A response body that yields the given chunks (or errors) one by one.
pub struct Chunked {
    items: VecDeque<Result<Bytes, BoxError>>,
}

impl Chunked {
    pub fn new(chunks: Vec<Bytes>) -> Self {
        Chunked {
            items: chunks.into_iter().map(Ok).collect(),
        }
    }
    pub fn with_error(chunks: Vec<Bytes>, error: &str) -> Self {
        let mut items: VecDeque<_> = chunks.into_iter().map(Ok).collect();
        items.push_back(Err(error.to_owned().into()));
        Chunked { items }
    }
}

impl Body for Chunked {
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Poll::Ready(self.items.pop_front().map(|r| r.map(Frame::data)))
    }
}

/// One scripted answer of the mock upstream.
pub enum Reply {
    /// 200 `text/event-stream`, these chunks.
    Sse(Vec<Bytes>),
    /// 200 `text/event-stream`, these chunks, then a body error.
    SseThenError(Vec<Bytes>),
    /// 200 `application/json`.
    Json(Bytes),
    /// This status with a JSON body.
    Status(u16, Bytes),
    /// Any status and content type, these chunks.
    Raw {
        status: u16,
        content_type: String,
        chunks: Vec<Bytes>,
    },
    /// The inner service fails.
    Fail,
}

impl Reply {
    /// Any status and content type, these chunks.
    pub fn raw(status: u16, content_type: &str, chunks: Vec<Bytes>) -> Self {
        Reply::Raw {
            status,
            content_type: content_type.to_owned(),
            chunks,
        }
    }

    pub fn sse(bytes: &[u8]) -> Self {
        Reply::Sse(vec![Bytes::copy_from_slice(bytes)])
    }
}

/// What the mock received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: http::Method,
    pub uri: http::Uri,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Seen {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }
}

#[derive(Clone, Default)]
pub struct Upstream {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Upstream {
    pub fn new(replies: Vec<Reply>) -> Self {
        Upstream {
            replies: Arc::new(Mutex::new(replies.into())),
            seen: Arc::default(),
        }
    }

    pub fn push(&self, reply: Reply) {
        self.replies.lock().unwrap().push_back(reply);
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The mock as a tower service.
    pub fn service(
        &self,
    ) -> impl Service<
        Request<Full<Bytes>>,
        Response = Response<Chunked>,
        Error = BoxError,
        Future = impl Send,
    > + Clone
           + Send
           + 'static {
        let this = self.clone();
        tower::service_fn(move |request: Request<Full<Bytes>>| {
            let this = this.clone();
            async move {
                let (parts, body) = request.into_parts();
                let body = match body.collect().await {
                    Ok(c) => c.to_bytes(),
                    Err(e) => match e {},
                };
                if let Some(len) = parts.headers.get(http::header::CONTENT_LENGTH) {
                    assert_eq!(
                        len.to_str().unwrap().parse::<usize>().unwrap(),
                        body.len(),
                        "Content-Length must match the body sent"
                    );
                }
                this.seen.lock().unwrap().push(Seen {
                    method: parts.method,
                    uri: parts.uri,
                    headers: parts.headers,
                    body,
                });
                let reply = this
                    .replies
                    .lock()
                    .unwrap()
                    .pop_front()
                    .expect("the mock upstream ran out of scripted replies");
                let (status, kind, body): (u16, String, Chunked) = match reply {
                    Reply::Raw {
                        status,
                        content_type,
                        chunks,
                    } => (status, content_type, Chunked::new(chunks)),
                    Reply::Sse(chunks) => (200, "text/event-stream".into(), Chunked::new(chunks)),
                    Reply::SseThenError(chunks) => (
                        200,
                        "text/event-stream".into(),
                        Chunked::with_error(chunks, "connection reset"),
                    ),
                    Reply::Json(bytes) => {
                        (200, "application/json".into(), Chunked::new(vec![bytes]))
                    }
                    Reply::Status(code, bytes) => {
                        (code, "application/json".into(), Chunked::new(vec![bytes]))
                    }
                    Reply::Fail => {
                        return Err::<Response<Chunked>, BoxError>("connection refused".into())
                    }
                };
                Ok(Response::builder()
                    .status(StatusCode::from_u16(status).unwrap())
                    .header("content-type", kind)
                    .header("request-id", "req_test_123")
                    .body(body)
                    .unwrap())
            }
        })
    }
}

pub fn fixture(name: &str) -> Bytes {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    Bytes::from(std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

/// A Messages request body.
pub fn messages_request(model: &str, stream: bool, user: &str) -> Value {
    serde_json::json!({
        "model": model,
        "max_tokens": 1024,
        "stream": stream,
        "system": "You are a security assistant.",
        "messages": [{"role": "user", "content": user}],
    })
}

pub fn post(path: &str, body: &Value) -> Request<Full<Bytes>> {
    let bytes = serde_json::to_vec(body).unwrap();
    Request::post(format!("https://api.anthropic.com{path}"))
        .header("content-type", "application/json")
        .header("content-length", bytes.len())
        .header("x-api-key", "sk-test")
        .body(Full::new(Bytes::from(bytes)))
        .unwrap()
}

/// Drives a service once and collects the response body.
pub async fn call<S, B>(
    service: &mut S,
    request: Request<Full<Bytes>>,
) -> (http::response::Parts, Bytes)
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
    B: Body,
    B::Error: std::fmt::Debug,
{
    let response = service.ready().await.unwrap().call(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    (parts, bytes)
}

/// Splits bytes into chunks at the given positions.
pub fn split_at(bytes: &Bytes, cuts: &[usize]) -> Vec<Bytes> {
    let mut chunks = Vec::new();
    let mut start = 0;
    for &cut in cuts {
        if cut > start && cut < bytes.len() {
            chunks.push(bytes.slice(start..cut));
            start = cut;
        }
    }
    chunks.push(bytes.slice(start..));
    chunks
}

/// A tiny deterministic PRNG (xorshift64*) for random chunkings.
pub struct Rng(u64);
impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }
    /// Random cut points, chunks of 1..=max bytes.
    pub fn cuts(&mut self, len: usize, max: usize) -> Vec<usize> {
        let mut cuts = Vec::new();
        let mut at = 0;
        while at < len {
            at += 1 + (self.next() as usize % max);
            cuts.push(at);
        }
        cuts
    }
}

/// Builds an Anthropic stream from event payloads (each names its `type`).
pub fn anthropic_stream(events: &[Value]) -> Bytes {
    let mut out = String::new();
    for event in events {
        let kind = event["type"].as_str().unwrap_or("unknown");
        out.push_str(&format!("event: {kind}\ndata: {event}\n\n"));
    }
    Bytes::from(out)
}

pub mod events {
    use serde_json::{json, Value};

    pub fn message_start(model: &str) -> Value {
        json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":model,"stop_reason":null,"usage":{"input_tokens":10,"output_tokens":1}}})
    }
    pub fn block_start(index: u64, block: Value) -> Value {
        json!({"type":"content_block_start","index":index,"content_block":block})
    }
    pub fn text_delta(index: u64, text: &str) -> Value {
        json!({"type":"content_block_delta","index":index,"delta":{"type":"text_delta","text":text}})
    }
    pub fn thinking_delta(index: u64, text: &str) -> Value {
        json!({"type":"content_block_delta","index":index,"delta":{"type":"thinking_delta","thinking":text}})
    }
    pub fn block_stop(index: u64) -> Value {
        json!({"type":"content_block_stop","index":index})
    }
    pub fn stop(reason: &str) -> Value {
        json!({"type":"message_delta","delta":{"stop_reason":reason,"stop_sequence":null},"usage":{"output_tokens":5}})
    }
    pub fn refusal(category: Option<&str>, explanation: Option<&str>) -> Value {
        json!({"type":"message_delta","delta":{"stop_reason":"refusal","stop_sequence":null,"stop_details":{"type":"refusal","category":category,"explanation":explanation}},"usage":{"output_tokens":5}})
    }
    pub fn message_stop() -> Value {
        json!({"type":"message_stop"})
    }
    pub fn ping() -> Value {
        json!({"type":"ping"})
    }

    /// A whole text answer.
    pub fn text_answer(model: &str, text: &str) -> Vec<Value> {
        vec![
            message_start(model),
            block_start(0, json!({"type":"text","text":""})),
            text_delta(0, text),
            block_stop(0),
            stop("end_turn"),
            message_stop(),
        ]
    }

    /// Thinking, then a refusal with no output.
    pub fn think_then_refuse(model: &str, category: &str) -> Vec<Value> {
        vec![
            message_start(model),
            block_start(0, json!({"type":"thinking","thinking":""})),
            thinking_delta(0, "Let me consider this request carefully."),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM"}}),
            block_stop(0),
            ping(),
            refusal(Some(category), Some("Declined under the usage policy.")),
            message_stop(),
        ]
    }
}
