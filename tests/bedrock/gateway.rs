//! The proxy in Bedrock gateway mode, in process: it signs with its own
//! credentials, so a client must present its client key; a refused client
//! gets 401 in Bedrock's error shape and nothing goes upstream.

use refusal_guard::aws::{Credentials, SigV4Layer};
use refusal_guard::header;
use refusal_guard::RefusalGuardLayer;
use refusal_guard_proxy::{ClientKey, Proxy, Upstream};
use serde_json::{json, Value};
use support::bedrock::{self as br, BedrockUpstream};

const KEY: &str = "proxy-client-key-0123456789";
const OPUS: &str = "us.anthropic.claude-opus-4-7-v1:0";

async fn gateway(upstream: &BedrockUpstream) -> String {
    let keys = Credentials::keys(br::ACCESS_KEY_ID, br::SECRET_ACCESS_KEY, None);
    let proxy = Proxy::signed(
        Upstream::parse(&upstream.url()).unwrap(),
        &RefusalGuardLayer::new(),
        SigV4Layer::new(keys, br::REGION),
    )
    .unwrap()
    .access_log(false)
    .client_key(KEY.parse::<ClientKey>().unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(proxy.serve(listener, std::future::pending()));
    url
}

fn body() -> String {
    json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 16,
        "messages": [{"role": "user", "content": "hi"}]})
    .to_string()
}

#[tokio::test]
async fn without_the_client_key_nothing_goes_upstream_and_with_it_the_request_is_signed() {
    let answer = json!({"type": "message", "role": "assistant", "model": OPUS,
        "content": [{"type": "text", "text": "Hi"}], "stop_reason": "end_turn"});
    let upstream = BedrockUpstream::start(vec![br::Reply::json(&answer)], None, None).await;
    let url = gateway(&upstream).await;
    let client = support::proxy::client();
    let invoke = format!("{url}/model/{OPUS}/invoke");

    for wrong in [None, Some("proxy-client-key-wrong-000")] {
        let mut request = client
            .post(&invoke)
            .header("content-type", "application/json")
            .body(body());
        if let Some(wrong) = wrong {
            request = request.header(header::CLIENT_KEY, wrong);
        }
        let response = tokio::time::timeout(std::time::Duration::from_secs(10), request.send())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(response.status(), 401);
        assert!(response.headers()["x-amzn-errortype"]
            .to_str()
            .unwrap()
            .starts_with("UnrecognizedClientException"));
        let error: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
        assert!(error["message"].as_str().unwrap().contains("client key"));
        assert!(!error.to_string().contains(br::SECRET_ACCESS_KEY));
    }
    assert!(
        upstream.seen().is_empty(),
        "a refused client reaches nothing"
    );

    let response = client
        .post(&invoke)
        .header("content-type", "application/json")
        .header(header::CLIENT_KEY, KEY)
        .body(body())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let served: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(served, answer);
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].verified, Ok(()));
    assert!(
        seen[0].headers.get(header::CLIENT_KEY).is_none(),
        "the client key stays in the proxy"
    );

    // The key as a Bedrock API key (AnthropicBedrock(api_key=...)).
    let listing = client
        .get(format!("{url}/inference-profiles?type=SYSTEM_DEFINED"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(listing.status(), 200);
    let seen = upstream.seen();
    assert_eq!(seen[1].verified, Ok(()));
    assert!(seen[1].headers["authorization"]
        .to_str()
        .unwrap()
        .starts_with("AWS4-HMAC-SHA256"));
}
