//! Learned routing shared by three proxy replicas through one real
//! `redis-server`: a history recorded on one replica orders the fallback
//! fallbacks on another, and the counts stay small and expire.

use std::time::{Duration, Instant};

use refusal_guard::recovery::FallbackChains;
use refusal_guard::routing::redis::RedisRouteStats;
use refusal_guard::routing::LearnedRouting;
use refusal_guard::RefusalGuardLayer;
use serde_json::json;
use support::mock_upstream::MockUpstream;
use support::proxy::{bind_proxy, post_messages};
use support::redis_server::RedisServer;

const OPUS: &str = "claude-opus-4-7";
const HAIKU: &str = "claude-haiku-4-5";
const SONNET: &str = "claude-sonnet-4-5";
const TEXT: &str = "anthropic/anthropic-sdk-python/basic_response.txt";
const EMPTY_REFUSAL: &str = "anthropic/anthropic-sdk-python/refusal_response.txt";

/// A replica routing Opus's refusals over Haiku then Sonnet by the counts
/// in `redis`, never exploring; its URL.
async fn replica(upstream: &str, redis: &str) -> String {
    let stats = RedisRouteStats::open(redis)
        .unwrap()
        .timeout(Duration::from_secs(5));
    let routing = LearnedRouting::new().stats(stats).random(|| 0.99);
    let layer = RefusalGuardLayer::new()
        .fallback_chains(FallbackChains::new().chain(OPUS, [HAIKU, SONNET]))
        .rescue(false)
        .route_by(routing);
    let (proxy, listener, url) = bind_proxy(upstream, &layer).await;
    tokio::spawn(proxy.serve(listener, std::future::pending()));
    url
}

async fn refused(url: &str, script: &str, id: &str) {
    let body = json!({
        "model": OPUS, "max_tokens": 1024, "stream": true,
        "messages": [{"role": "user", "content": format!("audit host {id}")}],
    });
    let response = post_messages(url, script, id, &body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(text.contains("end_turn"), "{id}: recovered");
}

fn models(mock: &MockUpstream, id: &str) -> Vec<String> {
    let seen = mock.seen_for(id);
    seen.iter()
        .map(|s| s.json()["model"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_recorded_on_one_replica_orders_the_fallbacks_on_another() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await.unwrap();
    let a = replica(&mock.url(), &redis.url()).await;
    let _b = replica(&mock.url(), &redis.url()).await;
    let c = replica(&mock.url(), &redis.url()).await;

    // On A: Haiku refuses the cyber refusal, Sonnet serves it.
    let history = format!("{EMPTY_REFUSAL},{EMPTY_REFUSAL},{TEXT}");
    refused(&a, &history, "on-a").await;
    assert_eq!(models(&mock, "on-a"), [OPUS, HAIKU, SONNET]);
    // The counts are written on their own task: wait for both.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let keys = redis.command("KEYS refusal-guard:route:*");
        let fields = keys
            .lines()
            .find(|l| l.starts_with("refusal-guard:route:"))
            .map(|key| redis.command(&format!("HLEN {key}")));
        if fields.is_some_and(|n| n.contains(":6")) {
            break;
        }
        assert!(Instant::now() < deadline, "counts never written: {keys}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // On C, which saw nothing itself: Sonnet first.
    refused(&c, &format!("{EMPTY_REFUSAL},{TEXT}"), "on-c").await;
    assert_eq!(models(&mock, "on-c"), [OPUS, SONNET]);

    // One small hash, three fields per candidate, and it expires.
    let keys = redis.command("KEYS refusal-guard:route:*");
    let key = keys
        .lines()
        .find(|l| l.starts_with("refusal-guard:route:"))
        .unwrap()
        .to_owned();
    let ttl = redis.command(&format!("PTTL {key}"));
    let ttl: i64 = ttl.trim().trim_start_matches(':').parse().unwrap();
    assert!(ttl > 0, "the counts expire: {ttl}");
    assert!(redis.command(&format!("HLEN {key}")).contains(":6"));
}
