//! `RedisStore` and `FailoverStore` against a real `redis-server` that each
//! test starts on a free loopback port (see `support/redis_server.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use refusal_guard::store::failover::FailoverStore;
use refusal_guard::store::redis::RedisStore;
use refusal_guard::store::{ConversationKey, ConversationStore, MemoryStore, StickyLookup};
use support::log_capture::LogCapture;
use support::redis_server::RedisServer;
use tracing::Level;

/// A generous bound on waits for the server to expire something.
const EVENTUALLY: Duration = Duration::from_secs(10);

fn key(text: &str) -> ConversationKey {
    ConversationKey::from_bytes(text.as_bytes())
}

/// Waits (bounded by [`EVENTUALLY`]) until `check` holds.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + EVENTUALLY;
    while Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{what}: not within {EVENTUALLY:?}");
}

/// The integer of a `:N` reply.
fn integer(reply: &str) -> i64 {
    reply
        .trim()
        .strip_prefix(':')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not an integer reply: {reply:?}"))
}

/// Every key on the server, asked without the code under test.
fn all_keys(server: &RedisServer) -> Vec<String> {
    let reply = server.command("KEYS *");
    reply
        .split("\r\n")
        .skip(1)
        .filter(|line| !line.is_empty() && !line.starts_with('$'))
        .map(str::to_owned)
        .collect()
}

async fn racing_reservations(url: &str, cap: u32, racers: usize) -> usize {
    // Several connections, as several replicas would have.
    let stores: Vec<RedisStore> = (0..8).map(|_| RedisStore::open(url).unwrap()).collect();
    let conversation = key(&format!("race cap {cap}"));
    let mut tasks = Vec::new();
    for i in 0..racers {
        let store = stores[i % stores.len()].clone();
        let conversation = conversation.clone();
        tasks.push(tokio::spawn(async move {
            store.reserve_rescue(&conversation, cap).await.unwrap()
        }));
    }
    let mut reserved = 0;
    for task in tasks {
        reserved += usize::from(task.await.unwrap());
    }
    reserved
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_reservations_never_exceed_the_cap() {
    let server = RedisServer::start();
    assert_eq!(racing_reservations(&server.url(), 1, 1000).await, 1);
    assert_eq!(racing_reservations(&server.url(), 3, 300).await, 3);
}

/// Two stores on one server, as two replicas would open it.
fn two_replicas(server: &RedisServer) -> (RedisStore, RedisStore) {
    let open = || RedisStore::open(&server.url()).unwrap();
    (open(), open())
}

#[tokio::test]
async fn output_clears_the_count_for_every_replica() {
    let server = RedisServer::start();
    let (a, b) = two_replicas(&server);
    let conversation = key("output clears");

    assert!(a.reserve_rescue(&conversation, 1).await.unwrap());
    assert!(!b.reserve_rescue(&conversation, 1).await.unwrap());
    b.record_output(&conversation).await.unwrap();
    assert!(a.reserve_rescue(&conversation, 1).await.unwrap());
    assert!(!a.reserve_rescue(&conversation, 1).await.unwrap());
    // Output for a conversation never seen is harmless.
    a.record_output(&key("never seen")).await.unwrap();
}

#[tokio::test]
async fn sticky_routes_are_shared_and_expire_with_their_ttl() {
    let server = RedisServer::start();
    let (a, b) = two_replicas(&server);
    let conversation = key("sticky");

    assert_eq!(b.sticky_route(&conversation).await.unwrap(), None);
    let ttl = Duration::from_millis(400);
    a.set_sticky_route(&conversation, "claude-fallback", ttl)
        .await
        .unwrap();
    assert_eq!(
        b.sticky_route(&conversation).await.unwrap().as_deref(),
        Some("claude-fallback")
    );
    let sticky_key = format!("refusal-guard:{}:sticky", conversation.as_str());
    let pttl = integer(&server.command(&format!("PTTL {sticky_key}")));
    assert!((1..=400).contains(&pttl), "sticky PTTL {pttl}");

    eventually("the sticky route expires", || async {
        b.sticky_route(&conversation).await.unwrap().is_none()
    })
    .await;
}

#[tokio::test]
async fn idle_conversations_expire_on_the_memory_stores_schedule() {
    let server = RedisServer::start();
    let conversation = key("idle");
    let rescues_key = format!("refusal-guard:{}:rescues", conversation.as_str());

    let default = RedisStore::open(&server.url()).unwrap();
    assert!(default.reserve_rescue(&conversation, 1).await.unwrap());
    let pttl = integer(&server.command(&format!("PTTL {rescues_key}")));
    let idle = MemoryStore::DEFAULT_IDLE_TTL.as_millis() as i64;
    assert!(
        (idle - 60_000..=idle).contains(&pttl),
        "PTTL {pttl} vs idle TTL {idle}"
    );
    default.record_output(&conversation).await.unwrap();

    let short = RedisStore::open(&server.url())
        .unwrap()
        .idle_ttl(Duration::from_millis(300));
    assert!(short.reserve_rescue(&conversation, 1).await.unwrap());
    server.command(&format!("PEXPIRE {rescues_key} 100000"));
    // A refused reservation touches the conversation: the idle TTL restarts.
    assert!(!short.reserve_rescue(&conversation, 1).await.unwrap());
    let pttl = integer(&server.command(&format!("PTTL {rescues_key}")));
    assert!((1..=300).contains(&pttl), "refreshed PTTL {pttl}");

    // Polled without touching it (a refusal would restart the idle TTL).
    eventually("the idle conversation is forgotten", || async {
        integer(&server.command(&format!("EXISTS {rescues_key}"))) == 0
    })
    .await;
    assert!(short.reserve_rescue(&conversation, 1).await.unwrap());
}

#[tokio::test]
async fn the_end_of_a_sticky_route_is_reported_once_across_replicas() {
    let server = RedisServer::start();
    let (a, b) = two_replicas(&server);
    let conversation = key("restored");
    assert_eq!(
        b.sticky_lookup(&conversation).await.unwrap(),
        StickyLookup::Unrouted
    );
    a.set_sticky_route(&conversation, "claude-fallback", Duration::from_millis(300))
        .await
        .unwrap();
    // Generous: the route is asked for at once, well within its 300 ms.
    let first = b.sticky_lookup(&conversation).await.unwrap();
    assert!(
        matches!(&first, StickyLookup::Routed(m) if m == "claude-fallback")
            || matches!(&first, StickyLookup::Ended(_)),
        "{first:?}"
    );
    let mut ended = usize::from(matches!(first, StickyLookup::Ended(_)));
    // Both replicas keep asking after the end: exactly one hears of it.
    let deadline = Instant::now() + EVENTUALLY;
    while Instant::now() < deadline {
        for replica in [&a, &b] {
            if let StickyLookup::Ended(model) = replica.sticky_lookup(&conversation).await.unwrap()
            {
                assert_eq!(model, "claude-fallback");
                ended += 1;
            }
        }
        if ended > 0 && b.sticky_route(&conversation).await.unwrap().is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    for replica in [&a, &b] {
        assert_eq!(
            replica.sticky_lookup(&conversation).await.unwrap(),
            StickyLookup::Unrouted
        );
    }
    assert_eq!(ended, 1, "the end is reported once");
}

#[tokio::test]
async fn keys_carry_the_prefix_and_no_prompt_text() {
    let server = RedisServer::start();
    let prompt = "SYSTEM: you are helpful. USER: the secret plan is PINEAPPLE";
    let conversation = key(prompt);
    let team_a = RedisStore::open(&server.url())
        .unwrap()
        .key_prefix("team-a:");
    let team_b = RedisStore::open(&server.url())
        .unwrap()
        .key_prefix("team-b:");

    assert!(team_a.reserve_rescue(&conversation, 1).await.unwrap());
    assert!(team_b.reserve_rescue(&conversation, 1).await.unwrap());
    team_a
        .set_sticky_route(&conversation, "model-x", Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(team_b.sticky_route(&conversation).await.unwrap(), None);

    let mut keys = all_keys(&server);
    keys.sort();
    let hex = conversation.as_str();
    assert_eq!(
        keys,
        [
            format!("team-a:{hex}:rescues"),
            format!("team-a:{hex}:sticky"),
            format!("team-a:{hex}:sticky-was"),
            format!("team-b:{hex}:rescues"),
        ]
    );
    for stored in &keys {
        let value = server.command(&format!("GET {stored}"));
        for word in ["PINEAPPLE", "secret", "SYSTEM", "helpful"] {
            assert!(!stored.contains(word) && !value.contains(word), "{stored}");
        }
    }
}

/// Two replicas, each a `FailoverStore` with its own memory.
fn replicas(url: &str) -> (FailoverStore, FailoverStore) {
    let replica = || {
        FailoverStore::new(RedisStore::open(url).unwrap())
            .local(Arc::new(MemoryStore::new()))
            .timeout(Duration::from_millis(50))
            .rest(Duration::from_millis(200))
    };
    (replica(), replica())
}

/// Runs `call`, asserting it answered within a generous bound on the 50 ms
/// timeout.
async fn bounded<T>(call: impl std::future::Future<Output = T>) -> T {
    let started = Instant::now();
    let answer = call.await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(1), "a store call took {took:?}");
    answer
}

#[tokio::test]
async fn a_stopped_server_is_answered_for_from_memory_then_sharing_resumes() {
    let capture = LogCapture::this_thread();
    let mut server = RedisServer::start();
    let (a, b) = replicas(&server.url());
    let shared = key("reserved while shared");
    assert!(a.reserve_rescue(&shared, 1).await);
    assert!(!b.reserve_rescue(&shared, 1).await);

    server.stop();
    // A remembers the rescue it reserved through the server.
    assert!(!bounded(a.reserve_rescue(&shared, 1)).await);
    let alone = key("decided alone");
    assert!(bounded(a.reserve_rescue(&alone, 1)).await);
    assert!(!bounded(a.reserve_rescue(&alone, 1)).await);
    // The documented trade-off: B decides alone too.
    assert!(bounded(b.reserve_rescue(&alone, 1)).await);
    bounded(a.set_sticky_route(&alone, "fallback-model", Duration::from_secs(60))).await;
    assert_eq!(
        bounded(a.sticky_route(&alone)).await.as_deref(),
        Some("fallback-model")
    );
    for _ in 0..20 {
        bounded(b.record_output(&alone)).await;
        bounded(b.sticky_route(&alone)).await;
    }
    assert!(a.fallbacks() >= 5 && b.fallbacks() >= 40);
    let warnings = capture.events(Level::WARN, "refusal_guard::store");
    assert_eq!(warnings.len(), 2, "one warning per replica: {warnings:?}");

    server.restart().unwrap();
    let mut round = 0;
    eventually("sharing resumes", || {
        round += 1;
        let conversation = key(&format!("after restart {round}"));
        let (a, b) = (&a, &b);
        async move {
            a.reserve_rescue(&conversation, 1).await && !b.reserve_rescue(&conversation, 1).await
        }
    })
    .await;
    let recovered = capture.events(Level::INFO, "refusal_guard::store");
    assert!(
        !recovered.is_empty(),
        "no line says the store answers again"
    );
    assert_eq!(capture.events(Level::WARN, "refusal_guard::store").len(), 2);
}

#[tokio::test]
async fn a_paused_server_is_answered_for_within_the_timeout() {
    let server = RedisServer::start();
    let (a, _b) = replicas(&server.url());
    let conversation = key("paused");
    assert!(a.reserve_rescue(&conversation, 1).await);
    assert_eq!(a.fallbacks(), 0);

    // Every client's commands wait 2 s: a slow server, not a dead one.
    assert!(server.command("CLIENT PAUSE 2000 ALL").starts_with("+OK"));
    assert!(!bounded(a.reserve_rescue(&conversation, 1)).await);
    assert!(bounded(a.reserve_rescue(&key("new while paused"), 1)).await);
    assert_eq!(a.fallbacks(), 2);
}

/// `/readyz` of the admin listener reports the Redis store: ready while it
/// answers `PING`, not ready while it is down, ready again once it is back.
#[tokio::test]
async fn readiness_follows_the_redis_store() {
    use refusal_guard_proxy::admin::{self, AdminState, RedisStoreProbe};

    let mut server = RedisServer::start();
    let store = RedisStore::open(&server.url()).unwrap();
    let state = AdminState::new()
        .store_probe(RedisStoreProbe::new(store, "redis-under-test"))
        .probe_timeout(Duration::from_millis(500));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/readyz", listener.local_addr().unwrap());
    let serving = tokio::spawn(admin::serve(listener, state, std::future::pending()));
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let ready = |client: reqwest::Client, base: String| async move {
        let response = client.get(base).send().await.unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    };

    let (status, text) = ready(client.clone(), base.clone()).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("store redis-under-test: ok"), "{text}");
    assert!(!text.contains("store memory"), "{text}");

    server.stop();
    eventually("readiness fails with Redis down", || {
        let (client, base) = (client.clone(), base.clone());
        async move { ready(client, base).await.0 == 503 }
    })
    .await;

    server.restart().unwrap();
    eventually("readiness returns with Redis", || {
        let (client, base) = (client.clone(), base.clone());
        async move { ready(client, base).await.0 == 200 }
    })
    .await;
    serving.abort();
}
