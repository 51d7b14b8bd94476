//! The proxy started in process on a loopback port (`Proxy::start`), for
//! clients that take only a base URL: a plain client is guarded through
//! it, and it stops when told or when its handle is dropped.

use std::time::{Duration, Instant};

use refusal_guard::refusal::WireApi;
use refusal_guard::{header, RefusalGuardLayer};
use refusal_guard_proxy::{Proxy, Upstream};
use refusal_guard_testkit::{Simulator, ANSWER};
use support::proxy::client;
use support::wire::{read, request};
use tokio::net::TcpStream;

/// A streamed Messages request through `base`: the recovery header and
/// the text read out of the stream.
async fn ask(base: &str) -> (Option<String>, String) {
    let (path, body) = request(
        WireApi::AnthropicMessages,
        "claude-opus-4-7",
        "Audit my SSH config",
        true,
    );
    let response = client()
        .post(format!("{base}{path}"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .unwrap();
    let recovery = response
        .headers()
        .get(header::RECOVERY)
        .map(|v| v.to_str().unwrap().to_owned());
    let text = read(WireApi::AnthropicMessages, &response.text().await.unwrap()).text;
    (recovery, text)
}

#[tokio::test]
async fn a_plain_client_is_guarded_through_it_and_shutdown_closes_it() {
    let provider = Simulator::new();
    let upstream = provider.serve().await;
    let guard = Proxy::new(
        Upstream::parse(&upstream.base_url()).unwrap(),
        &RefusalGuardLayer::new(),
    )
    .unwrap()
    .access_log(false)
    .start()
    .await
    .unwrap();
    assert!(guard.local_addr().ip().is_loopback());
    assert_eq!(guard.base_url(), format!("http://{}", guard.local_addr()));

    let (recovery, text) = ask(&guard.base_url()).await;
    assert!(recovery.unwrap_or_default().starts_with("rescued"));
    assert_eq!(text, ANSWER);
    assert_eq!(
        provider.requests(),
        2,
        "the refused original, then the rescue"
    );
    provider.assert_no_violations();

    let addr = guard.local_addr();
    guard.shutdown().await.unwrap();
    let refused = TcpStream::connect(addr).await;
    assert!(refused.is_err(), "still listening after shutdown");
}

#[tokio::test]
async fn a_response_begun_finishes_across_shutdown_and_a_dropped_handle_stops_it() {
    let provider = Simulator::new();
    let upstream = provider.serve().await;
    let start = || async {
        Proxy::new(
            Upstream::parse(&upstream.base_url()).unwrap(),
            &RefusalGuardLayer::new(),
        )
        .unwrap()
        .access_log(false)
        .start()
        .await
        .unwrap()
    };

    // The head received, the body not yet read: shutdown waits for it.
    let guard = start().await;
    let (path, body) = request(
        WireApi::OpenAiChatCompletions,
        "gpt-5",
        "Port scan my host",
        true,
    );
    let response = client()
        .post(format!("{}{path}", guard.base_url()))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let stopping = tokio::spawn(guard.shutdown());
    let text = read(
        WireApi::OpenAiChatCompletions,
        &response.text().await.unwrap(),
    )
    .text;
    assert_eq!(text, ANSWER);
    stopping.await.unwrap().unwrap();

    // Dropped: it was listening, and stops.
    let guard = start().await;
    let addr = guard.local_addr();
    TcpStream::connect(addr)
        .await
        .expect("listening while held");
    drop(guard);
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).await.is_ok() {
        assert!(
            Instant::now() < deadline,
            "still listening 10 s after the handle was dropped"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
