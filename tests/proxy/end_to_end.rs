//! The proxy end to end: a real HTTP client, the proxy on loopback, and a
//! scripted mock upstream (a real HTTP server on loopback).

use std::time::Duration;

use bytes::Bytes;
use refusal_guard::recovery::FallbackChains;
use refusal_guard::telemetry::MemorySink;
use refusal_guard::{Outcome, RefusalGuardLayer};
use serde_json::{json, Value};
use support::fixture;
use support::mock_upstream::{marker_text, stream_text, MockUpstream};
use support::proxy::{bind_proxy, client, post_messages};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TEXT: &str = "anthropic/anthropic-sdk-python/basic_response.txt";
const EMPTY_REFUSAL: &str = "anthropic/anthropic-sdk-python/refusal_response.txt";
const PARTIAL: &str = "anthropic/anthropic-sdk-python/stream-a-refusal.sse";
const TOOL_USE: &str = "anthropic/anthropic-sdk-python/tool_use_response.txt";

struct Running {
    url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(10), &mut self.task)
            .await
            .expect("the proxy stops within 10 s")
            .unwrap()
            .unwrap();
    }
}

async fn start_proxy(upstream: &str, layer: RefusalGuardLayer) -> Running {
    let (proxy, listener, url) = bind_proxy(upstream, &layer).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(proxy.serve(listener, async {
        let _ = stopped.await;
    }));
    Running {
        url,
        stop: Some(stop),
        task,
    }
}

/// The mock, and a proxy in front of it recording into a memory sink.
async fn start_recording() -> (MockUpstream, MemorySink, Running) {
    let mock = MockUpstream::start().await.unwrap();
    let sink = MemorySink::new();
    let layer = RefusalGuardLayer::new().telemetry(sink.clone());
    let proxy = start_proxy(&mock.url(), layer).await;
    (mock, sink, proxy)
}

fn messages(model: &str, stream: bool, user: &str) -> Value {
    json!({
        "model": model,
        "max_tokens": 1024,
        "stream": stream,
        "messages": [{"role": "user", "content": user}],
    })
}

async fn post(
    proxy: &Running,
    script: &str,
    id: &str,
    body: &Value,
) -> (reqwest::StatusCode, reqwest::header::HeaderMap, Bytes) {
    let response = post_messages(&proxy.url, script, id, body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    (status, headers, response.bytes().await.unwrap())
}

#[tokio::test]
async fn normal_stream_is_byte_identical_and_host_rewritten() {
    let (mock, sink, proxy) = start_recording().await;
    let (status, headers, body) = post(
        &proxy,
        TEXT,
        "normal",
        // The model the recorded answer names: no reroute.
        &messages("claude-3-opus-latest", true, "hi"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body, fixture(TEXT));
    // Hop-by-hop response headers stay behind.
    assert!(headers.get("x-mock-fallback").is_none());
    assert!(headers.get("keep-alive").is_none());
    let seen = mock.seen_for("normal");
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].header("host"),
        Some(mock.addr().to_string().as_str())
    );
    assert_eq!(seen[0].header("x-api-key"), Some("sk-test-key"));
    assert_eq!(seen[0].path, "/v1/messages");
    assert!(sink.records().is_empty());
    proxy.shutdown().await;
}

#[tokio::test]
async fn empty_refusal_is_rescued_with_the_note() {
    let (mock, sink, proxy) = start_recording().await;
    let script = format!("{EMPTY_REFUSAL},{TOOL_USE}");
    let (status, _, body) = post(
        &proxy,
        &script,
        "rescue",
        &messages("claude-opus-4-7", true, "audit my host"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        fixture(TOOL_USE),
        "the client gets the rescued stream"
    );
    let seen = mock.seen_for("rescue");
    assert_eq!(seen.len(), 2);
    let continuation = seen[1].json();
    let note = continuation.to_string();
    assert!(note.contains("[refusal-guard]"), "{note}");
    assert!(note.contains("cyber"), "{note}");
    assert_eq!(continuation["model"], "claude-opus-4-7");
    let records = sink.records();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].outcome, Outcome::Rescued);
    proxy.shutdown().await;
}

#[tokio::test]
async fn partial_refusal_passes_as_sent() {
    let (mock, sink, proxy) = start_recording().await;
    let (_, _, body) = post(&proxy, PARTIAL, "partial", &messages("m", true, "x")).await;
    assert_eq!(body, fixture(PARTIAL));
    assert_eq!(mock.seen_for("partial").len(), 1);
    // The record is written once the body has ended.
    for _ in 0..50 {
        if !sink.records().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(sink.records()[0].outcome, Outcome::Partial);
    proxy.shutdown().await;
}

#[tokio::test]
async fn json_empty_refusal_is_rescued() {
    let mock = MockUpstream::start().await.unwrap();
    let proxy = start_proxy(&mock.url(), RefusalGuardLayer::new()).await;
    let (status, _, body) = post(
        &proxy,
        "e2e/anthropic-refusal.json,e2e/message_text.json",
        "json",
        &messages("claude-opus-4-7", false, "x"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body, fixture("e2e/message_text.json"));
    assert_eq!(mock.seen_for("json").len(), 2);
    proxy.shutdown().await;
}

#[tokio::test]
async fn retarget_and_chain_models_are_as_configured() {
    let mock = MockUpstream::start().await.unwrap();
    let layer = RefusalGuardLayer::new()
        .retarget_fallbacks(["claude-retarget-a", "claude-retarget-b"])
        .fallback_chains(
            FallbackChains::new().chain("claude-chain-source", ["claude-chain-target"]),
        );
    let proxy = start_proxy(&mock.url(), layer).await;
    let mut body = messages("claude-chain-source", true, "x");
    body["fallbacks"] = json!([{"model": "claude-client-choice"}]);
    // The API takes `fallbacks` only with its beta.
    let response = post_messages(
        &proxy.url,
        &format!("{EMPTY_REFUSAL},{TEXT}"),
        "chain",
        &body,
    )
    .header("anthropic-beta", "server-side-fallback-2026-07-01")
    .send()
    .await
    .unwrap();
    let received = response.bytes().await.unwrap();
    assert_eq!(received, fixture(TEXT));
    let seen = mock.seen_for("chain");
    assert_eq!(seen.len(), 2);
    let first = seen[0].json();
    let retargeted: Vec<&str> = first["fallbacks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["model"].as_str().unwrap())
        .collect();
    assert_eq!(retargeted, ["claude-retarget-a", "claude-retarget-b"]);
    assert_eq!(first["model"], "claude-chain-source");
    assert_eq!(seen[1].json()["model"], "claude-chain-target");
    assert!(!seen[1].json().to_string().contains("[refusal-guard]"));
    proxy.shutdown().await;
}

#[tokio::test]
async fn injected_fallbacks_carry_the_beta_header() {
    let mock = MockUpstream::start().await.unwrap();
    let layer = RefusalGuardLayer::new()
        .retarget_fallbacks(["claude-retarget-a"])
        .inject_server_fallbacks(true);
    let proxy = start_proxy(&mock.url(), layer).await;
    post(
        &proxy,
        TEXT,
        "inject",
        &messages("claude-opus-4-7", true, "x"),
    )
    .await;
    let seen = mock.seen_for("inject");
    assert_eq!(seen[0].json()["fallbacks"][0]["model"], "claude-retarget-a");
    assert!(seen[0]
        .header("anthropic-beta")
        .is_some_and(|b| b.contains("server-side-fallback")));
    proxy.shutdown().await;
}

#[tokio::test]
async fn hop_by_hop_request_headers_are_dropped() {
    let mock = MockUpstream::start().await.unwrap();
    let proxy = start_proxy(&mock.url(), RefusalGuardLayer::new()).await;
    let body = messages("m", true, "x").to_string();
    let addr = proxy.url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /v1/messages?beta=true HTTP/1.1\r\nHost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close, x-fallback-custom\r\nx-fallback-custom: 1\r\n\
         keep-alive: timeout=5\r\nproxy-authorization: Basic c2VjcmV0\r\nte: trailers\r\n\
         x-mock-script: {TEXT}\r\nx-mock-id: fallback\r\nx-api-key: sk-fallback\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let response = String::from_utf8_lossy(&response);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let seen = mock.seen_for("fallback");
    assert_eq!(seen.len(), 1);
    for gone in [
        "x-fallback-custom",
        "keep-alive",
        "proxy-authorization",
        "te",
    ] {
        assert!(
            seen[0].header(gone).is_none(),
            "{gone} reached the upstream"
        );
    }
    // hyper's client adds its own `connection` only when it means it; the
    // client's value must not arrive.
    assert!(seen[0]
        .header("connection")
        .map_or(true, |v| !v.contains("x-fallback-custom")));
    assert_eq!(
        seen[0].header("host"),
        Some(mock.addr().to_string().as_str())
    );
    assert_eq!(seen[0].header("x-api-key"), Some("sk-fallback"));
    assert_eq!(seen[0].path, "/v1/messages?beta=true");
    proxy.shutdown().await;
}

#[tokio::test]
async fn credentials_never_follow_a_redirect() {
    let mock = MockUpstream::start().await.unwrap();
    let elsewhere = MockUpstream::start().await.unwrap();
    let proxy = start_proxy(&mock.url(), RefusalGuardLayer::new()).await;
    let script = format!("redirect={}/v1/messages", elsewhere.url());
    let client = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let response = client
        .post(format!("{}/v1/messages", proxy.url))
        .header("x-api-key", "sk-must-stay")
        .header("x-mock-script", script)
        .body(messages("m", false, "x").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        307,
        "the redirect goes back to the client"
    );
    assert_eq!(mock.seen().len(), 1);
    assert!(elsewhere.seen().is_empty(), "the proxy followed a redirect");
    proxy.shutdown().await;
}

#[tokio::test]
async fn unreachable_upstream_is_a_502_in_the_provider_shape() {
    let closed = support::socket::ClosedPort::new();
    let url = closed.url();
    let proxy = start_proxy(&url, RefusalGuardLayer::new()).await;
    let (status, _, body) = post(&proxy, TEXT, "down", &messages("m", true, "x")).await;
    assert_eq!(status, 502);
    let error: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "api_error");
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("unreachable"));

    let response = client()
        .post(format!("{}/v1/chat/completions", proxy.url))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 502);
    let error: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(error["error"]["code"], "upstream_unreachable");
    proxy.shutdown().await;
}

#[tokio::test]
async fn openai_traffic_passes_byte_identical() {
    let mock = MockUpstream::start().await.unwrap();
    let proxy = start_proxy(&mock.url(), RefusalGuardLayer::new()).await;
    let stream_fixture = "e2e/openai_chat_text_e2aad469.bin";
    let response = client()
        .post(format!("{}/v1/chat/completions", proxy.url))
        .header("authorization", "Bearer sk-openai")
        .header("x-mock-script", stream_fixture)
        .header("x-mock-id", "openai")
        .body(
            json!({"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]})
                .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.bytes().await.unwrap(), fixture(stream_fixture));
    let seen = mock.seen_for("openai");
    assert_eq!(seen[0].header("authorization"), Some("Bearer sk-openai"));
    proxy.shutdown().await;
}

#[tokio::test]
async fn shutdown_finishes_streams_in_flight() {
    let mock = MockUpstream::start().await.unwrap();
    let proxy = start_proxy(&mock.url(), RefusalGuardLayer::new()).await;
    let url = format!("{}/v1/messages", proxy.url);
    let response = client()
        .post(url)
        .header("x-mock-script", "marker")
        .header("x-mock-id", "slow")
        .header("x-mock-marker", "inflight")
        .body(messages("m", true, "x").to_string())
        .send()
        .await
        .unwrap();
    // Headers are in (the guard committed); now stop the proxy mid-stream.
    let stopping = tokio::spawn(proxy.shutdown());
    let body = response.text().await.unwrap();
    assert!(stream_text(&body).contains(&marker_text("inflight")));
    assert!(body.contains("message_stop"));
    stopping.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_streams_each_get_their_own() {
    let mock = MockUpstream::start().await.unwrap();
    let proxy = start_proxy(&mock.url(), RefusalGuardLayer::new()).await;
    let client = client();
    let url = format!("{}/v1/messages", proxy.url);
    let mut tasks = Vec::new();
    for i in 0..200 {
        let client = client.clone();
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let marker = format!("client{i}");
            let body = messages("m", true, &marker).to_string();
            let response = client
                .post(url)
                .header("x-mock-script", "marker")
                .header("x-mock-id", &marker)
                .header("x-mock-marker", &marker)
                .body(body)
                .send()
                .await?;
            let status = response.status();
            let text = response.text().await?;
            Ok::<_, reqwest::Error>((marker, status, text))
        }));
    }
    let results = tokio::time::timeout(Duration::from_secs(60), async {
        let mut out = Vec::new();
        for task in tasks {
            out.push(task.await.unwrap());
        }
        out
    })
    .await
    .expect("200 streams within 60 s");
    for result in results {
        let (marker, status, body) = result.expect("no transport error");
        assert_eq!(status, 200);
        assert_eq!(
            stream_text(&body),
            marker_text(&marker),
            "{marker} got another stream"
        );
    }
    assert_eq!(mock.seen().len(), 200);
    proxy.shutdown().await;
}
