//! Learned routing through the proxy: after a history in which Sonnet
//! served `cyber` refusals of Opus and Haiku refused them, a `cyber`
//! refusal tries Sonnet first, though the operator's chain names Haiku
//! first; an exploration draw still tries another first. Two categories
//! whose best fallbacks are opposite are each tried in their own order
//! (a key that ignored the category would order both alike).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use refusal_guard::recovery::FallbackChains;
use refusal_guard::routing::{LearnedRouting, MemoryRouteStats, RouteKey, RouteStats};
use refusal_guard::telemetry::MemorySink;
use refusal_guard::RefusalGuardLayer;
use support::mock_upstream::MockUpstream;
use support::proxy::{bind_proxy, post_messages};
use support::requests::messages_request;

use super::{models_seen, HAIKU, OPUS, REFUSAL, SONNET, TEXT};

/// Non-streaming fixtures: an empty refusal of category `cyber`, one of
/// category `bio`, and a text answer.
const CYBER_JSON: &str = "e2e/anthropic-refusal.json";
const BIO_JSON: &str = "usage/anthropic-refusal.json";
const TEXT_JSON: &str = "e2e/message_text.json";
const DAY: Duration = Duration::from_secs(86_400);

/// A proxy whose layer routes Opus's refusals over Haiku then Sonnet by
/// learned counts in `stats`, drawing exploration from `draws` (in
/// thousandths); its URL.
const NOW: Duration = Duration::from_secs(1_800_000_000);

async fn learned(mock: &MockUpstream, stats: MemoryRouteStats, draws: Arc<AtomicU64>) -> String {
    let now = UNIX_EPOCH + NOW;
    let routing = LearnedRouting::new()
        .stats(stats)
        .clock(move || now)
        .random(move || draws.load(Ordering::Relaxed) as f64 / 1000.0);
    let layer = RefusalGuardLayer::new()
        .fallback_chains(FallbackChains::new().chain(OPUS, [HAIKU, SONNET]))
        .rescue(false)
        .telemetry(MemorySink::new())
        .route_by(routing);
    let (proxy, listener, url) = bind_proxy(&mock.url(), &layer).await;
    tokio::spawn(proxy.serve(listener, std::future::pending()));
    url
}

async fn refused(url: &str, script: &str, id: &str) -> String {
    let body = messages_request(OPUS, true, &format!("audit host {id}"));
    let response = post_messages(url, script, id, &body).send().await.unwrap();
    response.text().await.unwrap()
}

#[tokio::test]
async fn a_cyber_refusal_tries_first_the_model_that_accepted_cyber() {
    let mock = MockUpstream::start().await.unwrap();
    let stats = MemoryRouteStats::new();
    let never = Arc::new(AtomicU64::new(999));
    let url = learned(&mock, stats.clone(), never.clone()).await;

    // Nothing learned yet: the operator's order, Haiku first. The history:
    // Haiku refuses `cyber`, Sonnet serves it.
    let history = format!("{REFUSAL},{REFUSAL},{TEXT}");
    assert!(refused(&url, &history, "history")
        .await
        .contains("end_turn"));
    assert_eq!(models_seen(&mock, "history"), [OPUS, HAIKU, SONNET]);
    let key = RouteKey::new(Some("cyber"), OPUS);
    let counts = stats.counts_now(&key, UNIX_EPOCH + NOW, Duration::from_secs(86_400));
    let count = |model: &str| {
        let c = counts.iter().find(|c| c.candidate == model).unwrap();
        (c.served, c.refused)
    };
    assert_eq!((count(HAIKU), count(SONNET)), ((0.0, 1.0), (1.0, 0.0)));

    // Now Sonnet first: one fallback, not two.
    let script = format!("{REFUSAL},{TEXT}");
    assert!(refused(&url, &script, "learned").await.contains("end_turn"));
    assert_eq!(models_seen(&mock, "learned"), [OPUS, SONNET]);

    // An exploration draw (below the 0.1 share) tries the other first.
    never.store(50, Ordering::Relaxed);
    assert!(refused(&url, &script, "explored")
        .await
        .contains("end_turn"));
    assert_eq!(models_seen(&mock, "explored"), [OPUS, HAIKU]);
}

#[tokio::test]
async fn two_categories_whose_best_fallbacks_are_opposite_are_each_tried_in_their_own_order() {
    let mock = MockUpstream::start().await.unwrap();
    let stats = MemoryRouteStats::new();
    let now = UNIX_EPOCH + NOW;
    // The history: Sonnet served `cyber` and Haiku refused it; for `bio`,
    // the other way round, as often.
    for (category, served, refused) in [("cyber", SONNET, HAIKU), ("bio", HAIKU, SONNET)] {
        let key = RouteKey::new(Some(category), OPUS);
        for _ in 0..3 {
            stats.add(&key, served, true, now, DAY).await.unwrap();
            stats.add(&key, refused, false, now, DAY).await.unwrap();
        }
    }
    let url = learned(&mock, stats, Arc::new(AtomicU64::new(999))).await;

    // A `cyber` refusal: Sonnet first (not the operator's Haiku), served.
    let cyber = refused_as_json(&url, &format!("{CYBER_JSON},{TEXT_JSON}"), "cyber").await;
    assert!(cyber.contains("end_turn"), "{cyber}");
    assert_eq!(models_seen(&mock, "cyber"), [OPUS, SONNET]);
    // A `bio` refusal of the same model: Haiku first, served.
    let bio = refused_as_json(&url, &format!("{BIO_JSON},{TEXT_JSON}"), "bio").await;
    assert!(bio.contains("end_turn"), "{bio}");
    assert_eq!(models_seen(&mock, "bio"), [OPUS, HAIKU]);
}

/// A non-streaming Messages request on Opus that the mock answers with
/// `script`; the body the client got.
async fn refused_as_json(url: &str, script: &str, id: &str) -> String {
    let body = messages_request(OPUS, false, &format!("audit host {id}"));
    let response = post_messages(url, script, id, &body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.text().await.unwrap()
}
