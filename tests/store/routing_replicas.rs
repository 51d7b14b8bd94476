//! Learned routing shared by proxy replicas through one real
//! `redis-server`: a history recorded on one replica orders the fallbacks
//! on another, and the counts stay small and expire; and the same with the
//! built binary, two `refusal-guard` processes run with `--state
//! redis://... --route-by learned`, each category in its own order.

use std::time::{Duration, Instant, SystemTime};

use refusal_guard::recovery::FallbackChains;
use refusal_guard::routing::redis::RedisRouteStats;
use refusal_guard::routing::{LearnedRouting, RouteKey, RouteStats};
use refusal_guard::RefusalGuardLayer;
use serde_json::json;
use support::binary::{arg, Running, TempDir};
use support::mock_upstream::MockUpstream;
use support::proxy::{bind_proxy, post_messages};
use support::redis_server::RedisServer;
use support::requests::messages_request;

const OPUS: &str = "claude-opus-4-7";
const HAIKU: &str = "claude-haiku-4-5";
const SONNET: &str = "claude-sonnet-4-5";
const TEXT: &str = "anthropic/anthropic-sdk-python/basic_response.txt";
const EMPTY_REFUSAL: &str = "anthropic/anthropic-sdk-python/refusal_response.txt";
/// Non-streaming fixtures: an empty refusal of category `cyber`, one of
/// category `bio`, and a text answer.
const CYBER_JSON: &str = "e2e/anthropic-refusal.json";
const BIO_JSON: &str = "usage/anthropic-refusal.json";
const TEXT_JSON: &str = "e2e/message_text.json";
const DAY: Duration = Duration::from_secs(86_400);
const BIN: &str = env!("CARGO_BIN_EXE_refusal-guard");

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

/// A non-streaming Messages request on Opus that the mock answers with
/// `script`; the body the client got.
async fn refused_as_json(url: &str, script: &str, id: &str) -> String {
    let body = messages_request(OPUS, false, &format!("audit host {id}"));
    let response = post_messages(url, script, id, &body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.text().await.unwrap()
}

/// A `refusal-guard` process guarding `mock`, its learned routing's counts
/// in `redis` (no exploration: the order is the counts'), Opus's chain
/// Haiku then Sonnet, no rescue; its URL with the process.
fn replica_process(
    mock: &MockUpstream,
    redis: &RedisServer,
    log: &std::path::Path,
) -> (Running, String) {
    let chain = format!("{OPUS}={HAIKU},{SONNET}");
    let (upstream, state) = (mock.url(), redis.url());
    let running = Running::spawn(
        BIN,
        &[
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &upstream,
            "--state",
            &state,
            "--route-by",
            "learned",
            "--route-explore",
            "0",
            "--chain",
            &chain,
            "--rescue",
            "off",
            "--log",
            arg(log),
        ],
    );
    let url = running.announced("listening on http://");
    (running, url)
}

/// The counts of `key` in the shared store, waited for (at most 10 s) until
/// `learned` holds of them: the replica counts a fallback once it has
/// answered, so the count may land a moment after the client's answer.
async fn counted(
    stats: &RedisRouteStats,
    key: &RouteKey,
    learned: impl Fn(&[(String, f64, f64)]) -> bool,
) -> Vec<(String, f64, f64)> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let counts: Vec<(String, f64, f64)> = stats
            .counts(key, SystemTime::now(), DAY)
            .await
            .unwrap()
            .iter()
            .map(|c| (c.candidate.clone(), c.served, c.refused))
            .collect();
        if learned(&counts) {
            return counts;
        }
        assert!(std::time::Instant::now() < deadline, "{key:?}: {counts:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_one_replica_learned_orders_the_other_replicas_fallbacks_through_redis() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await.unwrap();
    let dir = TempDir::new("routing-replicas");
    let (_a, a) = replica_process(&mock, &redis, &dir.path().join("a.jsonl"));

    // Replica A learns: a `cyber` refusal of Opus that Haiku refuses too and
    // Sonnet serves; a `bio` one that Haiku, first in the chain, serves.
    let taught = refused_as_json(
        &a,
        &format!("{CYBER_JSON},{CYBER_JSON},{TEXT_JSON}"),
        "a-cyber",
    )
    .await;
    assert!(taught.contains("end_turn"));
    assert_eq!(models(&mock, "a-cyber"), [OPUS, HAIKU, SONNET]);
    let taught = refused_as_json(&a, &format!("{BIO_JSON},{TEXT_JSON}"), "a-bio").await;
    assert!(taught.contains("end_turn"));
    assert_eq!(models(&mock, "a-bio"), [OPUS, HAIKU]);

    // The positive control: the counts are in the shared store.
    let stats = RedisRouteStats::open(&redis.url()).unwrap();
    let has = |counts: &[(String, f64, f64)], model: &str, served: f64, refused: f64| {
        counts
            .iter()
            .any(|(c, s, r)| c == model && *s >= served && *r >= refused)
    };
    counted(&stats, &RouteKey::new(Some("cyber"), OPUS), |c| {
        has(c, SONNET, 0.99, 0.0) && has(c, HAIKU, 0.0, 0.99)
    })
    .await;
    counted(&stats, &RouteKey::new(Some("bio"), OPUS), |c| {
        has(c, HAIKU, 0.99, 0.0)
    })
    .await;

    // Replica B, started now, has learned nothing of its own: its `cyber`
    // refusal tries Sonnet first, as A learned, and its `bio` refusal Haiku
    // (counted alike, both categories would go to Sonnet first).
    let (_b, b) = replica_process(&mock, &redis, &dir.path().join("b.jsonl"));
    let served = refused_as_json(&b, &format!("{CYBER_JSON},{TEXT_JSON}"), "b-cyber").await;
    assert!(served.contains("end_turn"));
    assert_eq!(models(&mock, "b-cyber"), [OPUS, SONNET]);
    let served = refused_as_json(&b, &format!("{BIO_JSON},{TEXT_JSON}"), "b-bio").await;
    assert!(served.contains("end_turn"));
    assert_eq!(models(&mock, "b-bio"), [OPUS, HAIKU]);
}
