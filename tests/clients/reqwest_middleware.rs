//! reqwest-middleware 0.5 with `RefusalGuardMiddleware`: a
//! `ClientWithMiddleware` call, every attempt down the rest of the chain.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::StatusCode;
use refusal_guard::client::reqwest_middleware::RefusalGuardMiddleware;
use refusal_guard::refusal::Outcome;
use refusal_guard::reqwest::reqwest;
use refusal_guard::telemetry::MemorySink;
use refusal_guard::{CallHandle, Refusal, RefusalGuardLayer};
use refusal_guard_testkit::{Reply, Simulator, When, ANSWER};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next, RequestBuilder};
use serde_json::{json, Value};

use crate::one_record;
use crate::simulated::Simulated;

/// A middleware after the guard's: counts the requests that reach it.
#[derive(Clone, Default)]
struct Counted(Arc<AtomicUsize>);

#[async_trait::async_trait]
impl Middleware for Counted {
    async fn handle(
        &self,
        req: reqwest::Request,
        extensions: &mut http::Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        self.0.fetch_add(1, Ordering::SeqCst);
        next.run(req, extensions).await
    }
}

fn client(layer: RefusalGuardLayer, counted: &Counted) -> ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new())
        .with(RefusalGuardMiddleware::new(layer))
        .with(counted.clone())
        .build()
}

/// A Messages call to `upstream`, with the headers the API requires.
fn messages_call(client: &ClientWithMiddleware, upstream: &str) -> RequestBuilder {
    client
        .post(format!("{upstream}/v1/messages"))
        .header("x-api-key", "sk-ant-test")
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
}

fn messages(prompt: &str) -> Value {
    json!({"model": "claude-opus-4-7", "max_tokens": 256,
        "messages": [{"role": "user", "content": prompt}]})
}

#[tokio::test]
async fn a_refused_call_is_rescued_down_the_chain() {
    let upstream = Simulated::start().await;
    let sink = MemorySink::new();
    let counted = Counted::default();
    let client = client(RefusalGuardLayer::new().telemetry(sink.clone()), &counted);
    let handle = CallHandle::new();
    let response = messages_call(&client, &upstream.url())
        .body(messages("Audit my SSH config").to_string())
        .with_extension(handle.clone())
        .send()
        .await
        .unwrap();

    assert_eq!(response.status(), 200);
    assert_eq!(response.url().path(), "/v1/messages");
    let refusal = response.extensions().get::<Refusal>().cloned().unwrap();
    assert_eq!(refusal.outcome, Outcome::Rescued);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["content"][0]["text"], ANSWER);
    assert_eq!(body["stop_reason"], "end_turn");
    assert_eq!(handle.settled().await.to_string(), "rescued (cyber)");
    one_record(&sink, "cyber", Outcome::Rescued, 2);
    // The original and the rescue both went down the rest of the chain.
    assert_eq!(counted.0.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_stream_body_goes_down_the_chain_unguarded_and_the_handle_says_so() {
    let upstream = Simulated::start().await;
    let sink = MemorySink::new();
    let counted = Counted::default();
    let client = client(RefusalGuardLayer::new().telemetry(sink.clone()), &counted);
    let handle = CallHandle::new();
    let body = Bytes::from(messages("Audit my SSH config").to_string());
    let response = messages_call(&client, &upstream.url())
        .body(reqwest::Body::wrap(http_body_util::Full::new(body)))
        .with_extension(handle.clone())
        .send()
        .await
        .unwrap();

    // The simulator's refusal, as it sent it: nothing recovered it.
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["stop_reason"], "refusal");
    let outcome = handle.settled().await;
    assert_eq!(
        outcome.unguarded,
        Some("a request body that cannot be replayed (a stream)")
    );
    assert!(sink.records().is_empty());
    assert_eq!(counted.0.load(Ordering::SeqCst), 1);
    assert_eq!(upstream.simulator.requests(), 1);
}

#[tokio::test]
async fn answers_that_begin_before_the_decision_are_turned_off_so_the_rescue_still_goes_down_the_chain(
) {
    let upstream = Simulated::start().await;
    let sink = MemorySink::new();
    let counted = Counted::default();
    // Either would answer before the decision and send the rescue after the
    // middleware returned, when the chain is no longer there.
    let layer = RefusalGuardLayer::new()
        .telemetry(sink.clone())
        .keepalive_after(std::time::Duration::from_millis(1))
        .live_thinking(true);
    let client = client(layer, &counted);
    let mut request = messages("Audit my SSH config");
    request["stream"] = json!(true);
    let response = messages_call(&client, &upstream.url())
        .body(request.to_string())
        .send()
        .await
        .unwrap();

    let text = response.text().await.unwrap();
    assert!(text.contains("\"stop_reason\":\"end_turn\""), "{text}");
    assert!(!text.contains(": keep-alive"), "{text}");
    one_record(&sink, "cyber", Outcome::Rescued, 2);
    assert_eq!(counted.0.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_request_the_guard_does_not_judge_settles_its_handle_at_once() {
    let upstream = Simulated::start().await;
    let counted = Counted::default();
    let client = client(RefusalGuardLayer::new(), &counted);
    let handle = CallHandle::new();
    let response = client
        .get(format!("{}/v1/models", upstream.url()))
        .header("x-api-key", "sk-ant-test")
        .with_extension(handle.clone())
        .send()
        .await
        .unwrap();

    // Passed down the chain as it was, and answered by the simulator.
    assert!(response.headers().contains_key("content-type"));
    let outcome = handle.get().expect("settled before the response came back");
    assert_eq!(
        outcome.unguarded,
        Some("not a request the guard judges (its method or path)")
    );
    assert_eq!(
        outcome.to_string(),
        "unguarded: not a request the guard judges (its method or path)"
    );
    assert_eq!(counted.0.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_response_the_guard_does_not_judge_says_so_in_the_handle() {
    let script =
        Simulator::answering().when(When::any(), Reply::error(StatusCode::TOO_MANY_REQUESTS));
    let upstream = Simulated::scripted(script).await;
    let counted = Counted::default();
    let client = client(RefusalGuardLayer::new(), &counted);
    let handle = CallHandle::new();
    let response = messages_call(&client, &upstream.url())
        .body(messages("Audit my SSH config").to_string())
        .with_extension(handle.clone())
        .send()
        .await
        .unwrap();

    assert_eq!(response.status(), 429);
    let outcome = handle.settled().await;
    assert_eq!(
        outcome.unguarded,
        Some("a response the guard does not judge (an error status, another type)")
    );
    assert_eq!((outcome.refusal, outcome.attempts), (None, 1));
}
