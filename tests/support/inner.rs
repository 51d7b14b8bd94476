//! A scripted mock inner service built with `tower::service_fn`: answers
//! scripted in order ([`Upstream`]) or by a closure ([`answering`]).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use tower::{BoxError, Service};

pub use super::contract::{Contract, Tripwire, Violation, Violations};
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

    /// One whole-body SSE reply per recorded fixture, in order.
    pub fn fixtures(paths: &[&str]) -> Vec<Reply> {
        paths
            .iter()
            .map(|path| Reply::sse(&super::fixtures::fixture(path)))
            .collect()
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

/// The scripted upstream as the test holds it: its script, what it saw,
/// and the check of what it saw. Its clones are the test's; the service
/// ([`Upstream::service`]) carries the script and the recorder, not the
/// check, so that wherever a guard keeps the service (a task of its own),
/// the test fails, when its last handle goes outside a panic, if the
/// upstream received a request the real API rejects.
#[derive(Clone)]
pub struct Upstream {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    violations: Violations,
    /// The check, when the test's last handle goes.
    _tripwire: Arc<Tripwire>,
}

impl Default for Upstream {
    fn default() -> Self {
        Upstream::keeping(Contract::new(), Vec::new())
    }
}

impl Upstream {
    pub fn new(replies: Vec<Reply>) -> Self {
        Upstream::keeping(Contract::new(), replies)
    }

    fn keeping(contract: Contract, replies: Vec<Reply>) -> Self {
        let violations = Violations::keeping(contract);
        Upstream {
            replies: Arc::new(Mutex::new(replies.into())),
            seen: Arc::default(),
            _tripwire: Arc::new(Tripwire(violations.clone())),
            violations,
        }
    }

    /// Also serves `POST`s to paths ending in `path`, under no rules (the
    /// contract answers other paths no API serves with a 404): for a test
    /// of what the guard passes through.
    pub fn serving(self, path: &str) -> Self {
        let replies = std::mem::take(&mut *self.replies.lock().unwrap());
        Upstream::keeping(Contract::new().serving(path), replies.into())
    }

    /// The requests this upstream answered with a contract error, cleared
    /// (for a test that sends a broken request on purpose).
    pub fn take_violations(&self) -> Vec<Violation> {
        self.violations.take()
    }

    pub fn push(&self, reply: Reply) {
        self.replies.lock().unwrap().push_back(reply);
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The mock as a tower service (without the check: see [`Upstream`]).
    pub fn service(&self) -> impl MockInner {
        let this = Served {
            replies: self.replies.clone(),
            seen: self.seen.clone(),
            violations: self.violations.clone(),
        };
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
                let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
                let verdict =
                    this.violations
                        .check(parts.method.as_str(), path, &parts.headers, &body);
                this.seen.lock().unwrap().push(Seen {
                    method: parts.method,
                    uri: parts.uri,
                    headers: parts.headers,
                    body,
                });
                if let Err(violation) = verdict {
                    return Ok(violation_response(&violation));
                }
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

/// What the service of an [`Upstream`] keeps: all but the check.
#[derive(Clone)]
struct Served {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    violations: Violations,
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

/// The provider's answer to a request that breaks its contract.
pub fn violation_response(violation: &Violation) -> Response<Chunked> {
    violation.response().map(|body| Chunked::chunks(vec![body]))
}

/// A mock inner service answering every request with `answer(request)`,
/// except one that breaks the provider's contract: that is answered with
/// the provider's error and recorded. The test holds what this returns and
/// hands the guard its [`service`](Answering::service): when the test lets
/// go of it (outside a panic), it fails if a violation was recorded, even
/// while a task the guard spawned still holds the service.
pub fn answering<F, Fut>(answer: F) -> Answering<impl MockInner>
where
    F: Fn(Request<Full<Bytes>>) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Response<Chunked>> + Send + 'static,
{
    let violations = Violations::default();
    let recorder = violations.clone();
    let service = tower::service_fn(move |request: Request<Full<Bytes>>| {
        let (answer, violations) = (answer.clone(), recorder.clone());
        async move {
            let (parts, body) = request.into_parts();
            let body = match body.collect().await {
                Ok(c) => c.to_bytes(),
                Err(e) => match e {},
            };
            let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            if let Err(violation) =
                violations.check(parts.method.as_str(), path, &parts.headers, &body)
            {
                return Ok(violation_response(&violation));
            }
            let request = Request::from_parts(parts, Full::new(body));
            Ok::<_, BoxError>(answer(request).await)
        }
    });
    Answering {
        service,
        tripwire: Tripwire(violations),
    }
}

/// An [`answering`] service and the check of what it received, which the
/// test holds: dropping it (outside a panic) fails the test if a request
/// broke the provider's contract and the test did not take it.
#[must_use = "the check runs when the test lets go of this: bind it for the whole test"]
pub struct Answering<S> {
    service: S,
    tripwire: Tripwire,
}

impl<S: Clone> Answering<S> {
    /// The service, for the guard.
    pub fn service(&self) -> S {
        self.service.clone()
    }

    /// The requests answered with a contract error, cleared (for a test
    /// that sends a broken request on purpose).
    pub fn take_violations(&self) -> Vec<Violation> {
        self.tripwire.0.take()
    }
}
