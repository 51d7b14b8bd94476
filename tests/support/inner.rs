//! A scripted mock inner service built with `tower::service_fn`, and the
//! requests that drive a guard over it.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use refusal_guard::refusal::{AttemptResult, AttemptStep};
use refusal_guard::telemetry::{MemorySink, RefusalRecord};
use refusal_guard::{Outcome, Refusal, RefusalGuardLayer};
use serde_json::Value;
use tower::{BoxError, Layer, Service, ServiceExt};

pub use super::mock_upstream::{Drip, Step};

/// A response body that yields the given chunks (or errors) one by one, at
/// once.
pub type Chunked = Drip;

impl Drip {
    /// These chunks, at once.
    pub fn chunks(chunks: Vec<Bytes>) -> Self {
        Drip::new(chunks, Duration::ZERO)
    }

    /// These chunks at once, then a body error.
    pub fn with_error(chunks: Vec<Bytes>, error: &str) -> Self {
        let mut steps: Vec<Step> = chunks.into_iter().map(Step::Data).collect();
        steps.push(Step::Fail(error.to_owned()));
        Drip::steps(steps, Duration::ZERO)
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

    /// The last of the request body's `messages`.
    pub fn last_message(&self) -> Value {
        let body = self.json();
        let messages = body["messages"].as_array().expect("a messages list");
        messages.last().expect("a message").clone()
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
    pub fn service(&self) -> impl MockInner {
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
                    } => (status, content_type, Chunked::chunks(chunks)),
                    Reply::Sse(chunks) => {
                        (200, "text/event-stream".into(), Chunked::chunks(chunks))
                    }
                    Reply::SseThenError(chunks) => (
                        200,
                        "text/event-stream".into(),
                        Chunked::with_error(chunks, "connection reset"),
                    ),
                    Reply::Json(bytes) => {
                        (200, "application/json".into(), Chunked::chunks(vec![bytes]))
                    }
                    Reply::Status(code, bytes) => (
                        code,
                        "application/json".into(),
                        Chunked::chunks(vec![bytes]),
                    ),
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

/// A Messages request (`POST /v1/messages`).
pub fn messages(model: &str, stream: bool, user: &str) -> Request<Full<Bytes>> {
    post("/v1/messages", &messages_request(model, stream, user))
}

/// What one guarded request came to.
pub struct Exchange {
    pub parts: http::response::Parts,
    pub body: Bytes,
    /// The mock upstream, with what it received.
    pub upstream: Upstream,
    /// Every refusal the guard recorded.
    pub sink: MemorySink,
}

impl Exchange {
    /// The upstream's one answer reached the client as sent, and nothing
    /// was recorded.
    pub fn assert_untouched(&self, sent: &Bytes) {
        assert_eq!(self.body, sent);
        assert_eq!(self.upstream.seen().len(), 1);
        assert!(self.sink.records().is_empty());
    }

    /// The typed refusal in the response extensions.
    pub fn refusal(&self) -> Option<&Refusal> {
        self.parts.extensions.get::<Refusal>()
    }
}

/// Sends `request` through `layer`, recording into a fresh memory sink, over
/// a mock upstream scripted with `replies`.
pub async fn exchange(
    layer: RefusalGuardLayer,
    replies: Vec<Reply>,
    request: Request<Full<Bytes>>,
) -> Exchange {
    let upstream = Upstream::new(replies);
    let sink = MemorySink::new();
    let mut guard = layer.telemetry(sink.clone()).layer(upstream.service());
    let (parts, body) = call(&mut guard, request).await;
    Exchange {
        parts,
        body,
        upstream,
        sink,
    }
}

/// One record: rescued, by a second attempt (the rescue) that was served.
pub fn assert_rescued_on_the_second_attempt(records: &[RefusalRecord]) {
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].outcome, Outcome::Rescued);
    assert_eq!(records[0].attempts.len(), 2);
    assert_eq!(records[0].attempts[1].step, AttemptStep::Rescue);
    assert_eq!(records[0].attempts[1].result, AttemptResult::Served);
}

/// A trait alias: the trait, and its implementation for every type that
/// meets its bounds.
macro_rules! trait_alias {
    ($(#[$doc:meta])* $name:ident = $($bound:tt)+) => {
        $(#[$doc])*
        pub trait $name: $($bound)+ {}
        impl<S: $($bound)+> $name for S {}
    };
}

trait_alias! {
    /// What a mock inner service is: what a guard can wrap.
    MockInner = Service<
        Request<Full<Bytes>>,
        Response = Response<Chunked>,
        Error = BoxError,
        Future: Send + 'static,
    > + Clone + Send + 'static
}

/// A 200 `text/event-stream` response with this body.
pub fn sse_response(body: Chunked) -> Response<Chunked> {
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(body)
        .unwrap()
}

/// A mock inner service answering every request with `answer(request)`.
pub fn answering<F, Fut>(answer: F) -> impl MockInner
where
    F: Fn(Request<Full<Bytes>>) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Response<Chunked>> + Send + 'static,
{
    tower::service_fn(move |request| {
        let answer = answer(request);
        async move { Ok::<_, BoxError>(answer.await) }
    })
}
