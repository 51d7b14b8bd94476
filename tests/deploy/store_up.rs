//! `refusal_guard_store_up`, what the Redis alert reads, against a real
//! `redis-server` the test stops and starts again: it follows the server
//! with no request sent at all, as a replica out of its load balancer's
//! rotation sees an outage.

use std::time::Duration;

use support::otlp::OtlpReceiver;
use support::prometheus::sample;
use support::redis_server::RedisServer;

use crate::{scrape, start};

/// Scrapes until `refusal_guard_store_up{store="redis"}` reads `want`
/// (within 20 s: the proxy checks every 5 s); returns the last scrape.
async fn store_up_becomes(admin: &str, want: f64) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let text = scrape(admin).await;
        let up = sample(&text, "refusal_guard_store_up", &[("store", "redis")]);
        if up == Some(want) || tokio::time::Instant::now() > deadline {
            assert_eq!(up, Some(want), "{text}");
            return text;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn readyz(admin: &str) -> (u16, String) {
    let response = support::proxy::client()
        .get(format!("{admin}/readyz"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn the_store_gauge_follows_redis_without_traffic() {
    let mut redis = RedisServer::start();
    let receiver = OtlpReceiver::start().await;
    let proxy = start(
        &receiver.endpoint(),
        "http/protobuf",
        &["--state", &redis.url()],
    )
    .await;
    store_up_becomes(&proxy.admin, 1.0).await;

    redis.stop();
    let down = store_up_becomes(&proxy.admin, 0.0).await;
    // No request was sent: the gauge, not a fallback, saw the outage.
    assert_eq!(
        sample(&down, "refusal_guard_store_fallbacks_total", &[]),
        None,
        "{down}"
    );
    assert_eq!(
        sample(&down, "refusal_guard_requests_total", &[]),
        None,
        "{down}"
    );
    let (status, body) = readyz(&proxy.admin).await;
    assert_eq!(status, 503, "{body}");

    redis.restart().unwrap();
    store_up_becomes(&proxy.admin, 1.0).await;
    let (status, body) = readyz(&proxy.admin).await;
    assert_eq!(status, 200, "{body}");
}
