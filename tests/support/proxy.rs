//! The proxy on a loopback port, and a client posting Anthropic Messages
//! requests through it to the scripted mock upstream.

use refusal_guard::proxy::{GuardedClient, Proxy, Upstream};
use refusal_guard::RefusalGuardLayer;
use serde_json::Value;
use tokio::net::TcpListener;

/// A proxy (access log off) guarding `upstream` with `layer`, the loopback
/// listener it is to serve, and that listener's URL.
pub async fn bind_proxy(
    upstream: &str,
    layer: &RefusalGuardLayer,
) -> (Proxy<GuardedClient>, TcpListener, String) {
    let proxy = Proxy::new(Upstream::parse(upstream).unwrap(), layer)
        .unwrap()
        .access_log(false);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (proxy, listener, url)
}

/// An HTTP client that ignores any proxy set in the environment.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// A Messages POST of `body` to `base` with a test key, telling the mock
/// upstream which `script` to play and the `id` to record the call under.
pub fn post_messages(base: &str, script: &str, id: &str, body: &Value) -> reqwest::RequestBuilder {
    client()
        .post(format!("{base}/v1/messages"))
        .header("content-type", "application/json")
        .header("x-api-key", "sk-test-key")
        .header("anthropic-version", "2023-06-01")
        .header("x-mock-script", script)
        .header("x-mock-id", id)
        .body(body.to_string())
}
