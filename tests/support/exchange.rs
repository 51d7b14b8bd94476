//! Sending one request through a guard over the mock inner service, and
//! what came of it.

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::{BodyExt, Full};
use refusal_guard::refusal::{AttemptResult, AttemptStep};
use refusal_guard::telemetry::{MemorySink, RefusalRecord};
use refusal_guard::{Outcome, Refusal, RefusalGuardLayer};
use tower::{Layer, Service, ServiceExt};

use super::inner::{Reply, Seen, Upstream};

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

    /// The client got `expected` (`what` says what that is, for the failure
    /// message) after exactly two upstream calls; returns those calls.
    pub fn assert_served_on_the_second_call(&self, expected: &Bytes, what: &str) -> Vec<Seen> {
        assert_eq!(self.body, expected, "{what}");
        let seen = self.upstream.seen();
        assert_eq!(seen.len(), 2);
        seen
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
    exchange_on(Upstream::new(replies), layer, request).await
}

/// [`exchange`] over this upstream (one that serves a path beyond the
/// APIs', say: [`Upstream::serving`]).
pub async fn exchange_on(
    upstream: Upstream,
    layer: RefusalGuardLayer,
    request: Request<Full<Bytes>>,
) -> Exchange {
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
