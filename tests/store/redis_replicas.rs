//! Three proxy replicas, in process, sharing conversation state through one
//! real `redis-server`, in front of the scripted mock upstream.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use refusal_guard::recovery::FallbackChains;
use refusal_guard::store::failover::FailoverStore;
use refusal_guard::store::redis::RedisStore;
use refusal_guard::RefusalGuardLayer;
use serde_json::{json, Value};
use support::fixture;
use support::mock_upstream::MockUpstream;
use support::proxy::{bind_proxy, post_messages};
use support::redis_server::RedisServer;

const TEXT: &str = "anthropic/anthropic-sdk-python/basic_response.txt";
const EMPTY_REFUSAL: &str = "anthropic/anthropic-sdk-python/refusal_response.txt";
const TOOL_USE: &str = "anthropic/anthropic-sdk-python/tool_use_response.txt";

struct Replica {
    url: String,
    store: Arc<FailoverStore>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Replica {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A proxy whose conversation state is the shared Redis, as `--state
/// redis://...` builds it. The timeout is generous here: this test is about
/// sharing, and a loaded machine must not turn it into an outage test.
async fn replica(upstream: &str, redis: &str, layer: RefusalGuardLayer) -> Replica {
    replica_within(upstream, redis, layer, Duration::from_secs(5)).await
}

async fn replica_within(
    upstream: &str,
    redis: &str,
    layer: RefusalGuardLayer,
    timeout: Duration,
) -> Replica {
    let shared = RedisStore::open(redis).unwrap();
    let store = Arc::new(FailoverStore::new(shared).timeout(timeout));
    let layer = layer.store(store.clone());
    let (proxy, listener, url) = bind_proxy(upstream, &layer).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(proxy.serve(listener, async {
        let _ = stopped.await;
    }));
    Replica {
        url,
        store,
        stop: Some(stop),
    }
}

async fn three(upstream: &str, redis: &str, layer: RefusalGuardLayer) -> [Replica; 3] {
    [
        replica(upstream, redis, layer.clone()).await,
        replica(upstream, redis, layer.clone()).await,
        replica(upstream, redis, layer).await,
    ]
}

/// One conversation: the same system prompt and first user turn.
fn conversation(model: &str) -> Value {
    conversation_about(model, "audit my host")
}

fn conversation_about(model: &str, first_turn: &str) -> Value {
    json!({
        "model": model,
        "max_tokens": 1024,
        "stream": true,
        "system": "You are a security assistant.",
        "messages": [{"role": "user", "content": first_turn}],
    })
}

async fn post(replica: &str, script: &str, id: &str, body: &Value) -> Bytes {
    let response = post_messages(replica, script, id, body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.bytes().await.unwrap()
}

/// Waits (bounded) until `redis` holds keys matching `pattern` as `wanted`.
async fn wait_for_keys(redis: &RedisServer, pattern: &str, wanted: bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let present = !redis.command(&format!("KEYS {pattern}")).starts_with("*0");
        if present == wanted {
            return;
        }
        assert!(Instant::now() < deadline, "keys {pattern}: never {wanted}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_rescue_in_total_across_replicas_until_output_on_any() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await.unwrap();
    let replicas = three(&mock.url(), &redis.url(), RefusalGuardLayer::new()).await;
    let body = conversation("claude-opus-4-7");
    // The continuation refuses too: a rescue that produced output would
    // rightly clear the count for racers still arriving.
    let refusing = format!("{EMPTY_REFUSAL},{EMPTY_REFUSAL}");

    let mut calls = Vec::new();
    for i in 0..30 {
        let url = replicas[i % 3].url.clone();
        let (script, body) = (refusing.clone(), body.clone());
        calls.push(tokio::spawn(async move {
            post(&url, &script, &format!("racer-{i}"), &body).await
        }));
    }
    for call in calls {
        call.await.unwrap();
    }
    let continuations: usize = (0..30)
        .map(|i| mock.seen_for(&format!("racer-{i}")).len() - 1)
        .sum();
    assert_eq!(continuations, 1, "exactly one continuation in total");
    let rescue = format!("{EMPTY_REFUSAL},{TOOL_USE}");
    let refused = post(&replicas[0].url, &rescue, "still-capped", &body).await;
    assert_eq!(refused, fixture(EMPTY_REFUSAL), "no rescue before output");

    // Real output seen on B clears the count for every replica: C rescues.
    let output = post(&replicas[1].url, TEXT, "output-on-b", &body).await;
    assert_eq!(output, fixture(TEXT));
    wait_for_keys(&redis, "refusal-guard:*:rescues", false).await;
    let again = post(&replicas[2].url, &rescue, "rescue-on-c", &body).await;
    assert_eq!(again, fixture(TOOL_USE));
    assert_eq!(mock.seen_for("rescue-on-c").len(), 2);
    for replica in &replicas {
        assert_eq!(replica.store.fallbacks(), 0, "every decision was shared");
    }
}

#[tokio::test]
async fn a_sticky_route_set_on_one_replica_is_followed_by_another() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await.unwrap();
    let layer = RefusalGuardLayer::new()
        .fallback_chains(FallbackChains::new().chain("claude-source", ["claude-fallback"]))
        .sticky_fallback(Duration::from_secs(600));
    let [a, b, _c] = three(&mock.url(), &redis.url(), layer).await;
    let body = conversation("claude-source");

    let served = post(&a.url, &format!("{EMPTY_REFUSAL},{TEXT}"), "on-a", &body).await;
    assert_eq!(served, fixture(TEXT));
    let seen = mock.seen_for("on-a");
    assert_eq!(seen[1].json()["model"], "claude-fallback");
    wait_for_keys(&redis, "refusal-guard:*:sticky", true).await;

    let next = post(&b.url, TEXT, "on-b", &body).await;
    assert_eq!(next, fixture(TEXT));
    let seen = mock.seen_for("on-b");
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].json()["model"],
        "claude-fallback",
        "replica B goes straight to the route A set"
    );
    assert_eq!(a.store.fallbacks() + b.store.fallbacks(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_decide_from_memory_while_redis_is_down_and_share_again_after() {
    let mut redis = RedisServer::start();
    let mock = MockUpstream::start().await.unwrap();
    // The proxy's default store timeout, 50 ms.
    let within = FailoverStore::DEFAULT_TIMEOUT;
    let a = replica_within(&mock.url(), &redis.url(), RefusalGuardLayer::new(), within).await;
    let b = replica_within(&mock.url(), &redis.url(), RefusalGuardLayer::new(), within).await;
    let rescue = format!("{EMPTY_REFUSAL},{TOOL_USE}");

    redis.stop();
    for (i, replica) in [&a, &b, &a].into_iter().enumerate() {
        let started = Instant::now();
        let body = conversation_about("claude-opus-4-7", &format!("outage {i}"));
        let served = post(&replica.url, &rescue, &format!("outage-{i}"), &body).await;
        assert_eq!(
            served,
            fixture(TOOL_USE),
            "rescued from this replica's memory"
        );
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(3),
            "a request took {took:?} during the outage"
        );
    }
    assert!(a.store.fallbacks() > 0 && b.store.fallbacks() > 0);

    redis.restart().unwrap();
    // Continuations that refuse too, so no output clears the count.
    let refusing = format!("{EMPTY_REFUSAL},{EMPTY_REFUSAL}");
    let deadline = Instant::now() + Duration::from_secs(15);
    for round in 0.. {
        assert!(Instant::now() < deadline, "sharing never resumed");
        let body = conversation_about("claude-opus-4-7", &format!("after {round}"));
        let (on_a, on_b) = (format!("after-a-{round}"), format!("after-b-{round}"));
        post(&a.url, &refusing, &on_a, &body).await;
        post(&b.url, &refusing, &on_b, &body).await;
        // Shared again: B knows of A's rescue and sends no continuation.
        if mock.seen_for(&on_a).len() == 2 && mock.seen_for(&on_b).len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
