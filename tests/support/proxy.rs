//! The proxy on a loopback port, and a client posting Anthropic Messages
//! requests through it to the scripted mock upstream.

use std::sync::Arc;

use refusal_guard::RefusalGuardLayer;
use refusal_guard_proxy::{GuardedClient, Proxy, Tenants, Upstream};
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

/// A proxy as [`bind_proxy`] makes it that admits the keys of `tenants`,
/// serving on a task of its own for the rest of the test; its URL.
pub async fn serve_tenants_proxy(
    upstream: &str,
    layer: &RefusalGuardLayer,
    tenants: Arc<Tenants>,
) -> String {
    let (proxy, listener, url) = bind_proxy(upstream, layer).await;
    tokio::spawn(
        proxy
            .tenants(tenants)
            .serve(listener, std::future::pending()),
    );
    url
}

/// `GET /readyz` of the admin listener at `admin` (`http://ADDR`): its
/// status and text.
pub async fn readyz(admin: &str) -> (u16, String) {
    let response = client()
        .get(format!("{admin}/readyz"))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// Waits (at most 10 s) until `/readyz` at `admin` says what `good` looks
/// for; its status and text.
pub async fn readyz_until(admin: &str, good: impl Fn(&str) -> bool) -> (u16, String) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (status, ready) = readyz(admin).await;
        if good(&ready) {
            return (status, ready);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "/readyz never came to it: {ready}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
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

/// The proxy as `proxy/examples/proxy.rs` runs it, from these command-line flags
/// (after `--listen` on a free loopback port, `--log off` and `--quiet`), on
/// a thread of its own that lives as long as the test process. Returns its
/// URL once it accepts connections (within 10 s).
pub async fn run_proxy(flags: &[&str]) -> String {
    use clap::Parser;
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let listen = format!("127.0.0.1:{port}");
    let mut args = vec![
        "proxy",
        "--listen",
        &listen,
        "--log",
        "off",
        "--quiet",
        "--log-level",
        "error",
    ];
    args.extend_from_slice(flags);
    let options = refusal_guard_proxy::Options::try_parse_from(&args).unwrap();
    std::thread::spawn(move || refusal_guard_proxy::run(options));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while tokio::net::TcpStream::connect(&listen).await.is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the proxy did not listen within 10 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    format!("http://{listen}")
}
