//! The engine's extension points, from outside: an async conversation store
//! that is slow must not hold other requests up; `rescue(bool)` on a clone
//! leaves the original alone.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use refusal_guard::recovery::{NextStep, RecoveryState, Rescue, RescueNote};
use refusal_guard::refusal::DeadReason;
use refusal_guard::store::{ConversationKey, ConversationStore, MemoryStore, StoreFuture};
use refusal_guard::telemetry::MemorySink;
use refusal_guard::{Outcome, Refusal, RefusalGuardLayer};
use serde_json::{json, Value};
use tokio::sync::Semaphore;
use tower::{BoxError, Layer, Service, ServiceExt};

use support::anthropic::{anthropic_stream as events, events as ev};

fn refused(category: &str) -> Bytes {
    events(&[
        ev::message_start("claude-x"),
        ev::refusal(Some(category), None),
        ev::message_stop(),
    ])
}

fn answer() -> Bytes {
    events(&ev::text_answer("claude-x", "Hello"))
}

/// A provider that refuses (with the category the user turn names, after
/// `refuse:`) unless the request carries the rescue note or asks another
/// model than `claude-x`, and always after `refuse-always:`; everything
/// else is answered. A request the real API rejects gets its error, and
/// fails the test when the provider the test made goes (its clones, the
/// guard's, only record).
#[derive(Clone, Default)]
struct Provider {
    seen: Arc<std::sync::Mutex<Vec<Value>>>,
    violations: support::contract::Checked,
}

impl Provider {
    /// The model and whether the rescue note was present, per request.
    fn asked(&self) -> Vec<(String, bool)> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .map(|json| {
                let model = json["model"].as_str().unwrap_or_default().to_owned();
                (model, json.to_string().contains("[refusal-guard]"))
            })
            .collect()
    }
}

impl Service<Request<Full<Bytes>>> for Provider {
    type Response = Response<Full<Bytes>>;
    type Error = BoxError;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Response<Full<Bytes>>, BoxError>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Full<Bytes>>) -> Self::Future {
        let (seen, violations) = (self.seen.clone(), self.violations.clone());
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let bytes = body.collect().await?.to_bytes();
            let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            if let Err(broken) =
                violations.check(parts.method.as_str(), path, &parts.headers, &bytes)
            {
                return Ok(broken.response().map(Full::new));
            }
            let json: Value = serde_json::from_slice(&bytes)?;
            seen.lock().unwrap().push(json.clone());
            let text = json.to_string();
            let first = json["messages"][0]["content"].as_str().unwrap_or_default();
            if text.contains("refuse-always:") {
                let category = text.split("refuse-always:").nth(1).unwrap_or_default();
                let category: String = category
                    .chars()
                    .take_while(char::is_ascii_alphabetic)
                    .collect();
                return Ok(Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(Full::new(refused(&category)))
                    .unwrap());
            }
            let body = match first.strip_prefix("refuse:") {
                Some(_) if text.contains("[refusal-guard]") => answer(),
                Some(_) if json["model"] != "claude-x" => answer(),
                Some(category) => refused(category),
                None => answer(),
            };
            Ok(Response::builder()
                .header("content-type", "text/event-stream")
                .body(Full::new(body))
                .unwrap())
        })
    }
}

fn request(user: &str) -> Request<Full<Bytes>> {
    let body = json!({"model":"claude-x","max_tokens":64,"stream":true,
        "messages":[{"role":"user","content":user}]});
    Request::post("https://api.anthropic.com/v1/messages")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

async fn outcome<S>(service: S, user: impl AsRef<str>) -> Option<Refusal>
where
    S: Service<Request<Full<Bytes>>, Response = Response<refusal_guard::GuardBody<Full<Bytes>>>>,
    S::Error: std::fmt::Debug,
{
    let response = service.oneshot(request(user.as_ref())).await.unwrap();
    let handle = response
        .extensions()
        .get::<refusal_guard::RefusalHandle>()
        .cloned()
        .unwrap();
    response.into_body().collect().await.unwrap();
    handle.settled().await
}

/// A memory store whose rescue reservations wait for a permit, counting
/// the reservations asked for.
struct Gated {
    memory: MemoryStore,
    permits: Arc<Semaphore>,
    asked: Arc<std::sync::atomic::AtomicUsize>,
}

impl ConversationStore for Gated {
    fn reserve_rescue<'a>(&'a self, key: &'a ConversationKey, cap: u32) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _permit = self.permits.acquire().await.unwrap();
            self.memory.reserve_rescue(key, cap).await
        })
    }
    fn record_output<'a>(&'a self, key: &'a ConversationKey) -> StoreFuture<'a, ()> {
        self.memory.record_output(key)
    }
    fn sticky_route<'a>(&'a self, key: &'a ConversationKey) -> StoreFuture<'a, Option<String>> {
        self.memory.sticky_route(key)
    }
    fn set_sticky_route<'a>(
        &'a self,
        key: &'a ConversationKey,
        model: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        self.memory.set_sticky_route(key, model, ttl)
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_store_that_has_not_answered_holds_up_only_its_own_request() {
    let permits = Arc::new(Semaphore::new(0));
    let store = Gated {
        memory: MemoryStore::new(),
        permits: permits.clone(),
        asked: Arc::default(),
    };
    let asked = store.asked.clone();
    let provider = Provider::default();
    let guard = RefusalGuardLayer::new()
        .store(store)
        .layer(provider.clone());

    // One thread: had the store blocked it, nothing else could run.
    let waiting = tokio::spawn(outcome(guard.clone(), "refuse:cyber"));
    // The positive control: the refusal reached the store, which cannot
    // answer without a permit; only then is "not finished" news.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while asked.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the store was never asked"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(!waiting.is_finished(), "waiting on the store");
    for i in 0..5 {
        let other = outcome(guard.clone(), format!("hello {i}")).await;
        assert_eq!(other, None);
    }
    assert!(!waiting.is_finished());
    permits.add_permits(1);
    let refusal = waiting.await.unwrap().expect("a refusal");
    assert_eq!(refusal.outcome, Outcome::Rescued);
}

/// A memory store that takes 50 ms to answer anything.
struct Slow(MemoryStore);

impl ConversationStore for Slow {
    fn reserve_rescue<'a>(&'a self, key: &'a ConversationKey, cap: u32) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.0.reserve_rescue(key, cap).await
        })
    }
    fn record_output<'a>(&'a self, key: &'a ConversationKey) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.0.record_output(key).await
        })
    }
    fn sticky_route<'a>(&'a self, key: &'a ConversationKey) -> StoreFuture<'a, Option<String>> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.0.sticky_route(key).await
        })
    }
    fn set_sticky_route<'a>(
        &'a self,
        key: &'a ConversationKey,
        model: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.0.set_sticky_route(key, model, ttl).await
        })
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_store_taking_50_ms_per_call_keeps_its_rules_and_lets_others_through() {
    let sink = MemorySink::new();
    let provider = Provider::default();
    let guard = RefusalGuardLayer::new()
        .store(Slow(MemoryStore::new()))
        .sticky_fallback(Duration::from_secs(60))
        .telemetry(sink.clone())
        .layer(provider.clone());

    // Twenty conversations at once, each rescued once, on one thread.
    let calls: Vec<_> = (0..20)
        .map(|i| tokio::spawn(outcome(guard.clone(), format!("refuse:cyber {i}"))))
        .collect();
    for call in calls {
        let refusal = call.await.unwrap().unwrap();
        assert_eq!(refusal.outcome, Outcome::Rescued);
    }
    // A conversation whose rescue got no output has spent it, whatever the
    // store's latency.
    let first = outcome(guard.clone(), "refuse-always:bio").await.unwrap();
    assert_eq!(first.reason, Some(DeadReason::StillRefused), "{first:?}");
    let again = outcome(guard.clone(), "refuse-always:bio").await.unwrap();
    assert_eq!(again.outcome, Outcome::Dead);
    assert_eq!(again.reason, Some(DeadReason::RescueCap));
}

#[tokio::test]
async fn rescue_off_on_a_clone_leaves_the_original_and_its_services_alone() {
    let provider = Provider::default();
    let a = RefusalGuardLayer::new();
    let built_from_a = a.layer(provider.clone());
    let b = a.clone().rescue(false);

    let from_b = outcome(b.layer(provider.clone()), "refuse:cyber b").await;
    assert_eq!(from_b.unwrap().reason, Some(DeadReason::RescueOff));
    let from_a = outcome(a.layer(provider.clone()), "refuse:cyber a").await;
    assert_eq!(from_a.unwrap().outcome, Outcome::Rescued);
    let built = outcome(built_from_a, "refuse:cyber built").await;
    assert_eq!(built.unwrap().outcome, Outcome::Rescued);
    assert!(a.rescue_switch().is_on());
}

/// Never retry `bio`; only fall back (once) for `reasoning_extraction`;
/// rescue `cyber` (once).
fn by_category(state: &RecoveryState<'_>) -> NextStep {
    let stop = NextStep::Stop(state.last_failure().unwrap_or(DeadReason::StillRefused));
    match state.category() {
        Some("bio") => NextStep::Stop(DeadReason::PolicyStop),
        Some("reasoning_extraction") if state.fallbacks_tried() == 0 => {
            NextStep::Fallback("claude-fallback".into())
        }
        Some("cyber") if state.rescues_tried() == 0 => {
            let note = RescueNote::default().render(state.category(), state.explanation());
            NextStep::Rescue(Rescue::new(note))
        }
        _ => stop,
    }
}

#[tokio::test]
async fn a_custom_policy_decides_per_category() {
    let cases = [
        ("bio", Outcome::Dead, vec![("claude-x", false)]),
        (
            "reasoning_extraction",
            Outcome::Fallback,
            vec![("claude-x", false), ("claude-fallback", false)],
        ),
        (
            "cyber",
            Outcome::Rescued,
            vec![("claude-x", false), ("claude-x", true)],
        ),
    ];
    for (category, outcome_wanted, asked) in cases {
        let provider = Provider::default();
        let guard = RefusalGuardLayer::new()
            .fallback_chains(
                // Shorthand for the default ladder: the custom policy wins.
                refusal_guard::recovery::FallbackChains::new().chain("claude-x", ["claude-y"]),
            )
            .policy(by_category)
            .layer(provider.clone());
        let refusal = outcome(guard, format!("refuse:{category}")).await.unwrap();
        assert_eq!(refusal.outcome, outcome_wanted, "{category}");
        let wanted: Vec<(String, bool)> = asked
            .into_iter()
            .map(|(m, note)| (m.to_owned(), note))
            .collect();
        assert_eq!(provider.asked(), wanted, "{category}");
        if category == "bio" {
            assert_eq!(refusal.reason, Some(DeadReason::PolicyStop));
        }
    }
}
