//! The shipped operations material against the real binary: the OTLP
//! export (`otlp`), the metric names the alert rules and the Grafana
//! dashboard in deploy/ use (`names`), the gauge the Redis alert reads
//! against a real `redis-server` (`store_up`), and the code layout release
//! builds link with (`layout`).

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

mod layout;
mod names;
mod otlp;
mod store_up;

const BIN: &str = env!("CARGO_BIN_EXE_refusal-guard");

/// The proxy binary, killed when dropped, and its two addresses.
pub(crate) struct Proxy {
    _child: tokio::process::Child,
    pub(crate) url: String,
    pub(crate) admin: String,
}

/// Starts `refusal-guard --simulate --strict --otlp` with the admin listener and
/// `flags`, the export sent to `endpoint` over `protocol`, short export
/// intervals.
pub(crate) async fn start(endpoint: &str, protocol: &str, flags: &[&str]) -> Proxy {
    let mut child = tokio::process::Command::new(BIN)
        .args([
            "--simulate",
            "--strict",
            "--otlp",
            "--log",
            "off",
            "--quiet",
        ])
        .args(flags)
        .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "1000")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
        .env("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let (mut url, mut admin) = (None, None);
    let read = tokio::time::timeout(Duration::from_secs(20), async {
        while url.is_none() || admin.is_none() {
            let line = lines.next_line().await.unwrap().expect("the proxy exited");
            // `... listening on http://ADDR -> ...`, `... admin on http://ADDR: ...`
            let after = |marker: &str| {
                let rest = line.split(marker).nth(1)?;
                let addr = rest.split_whitespace().next()?.trim_end_matches(':');
                Some(format!("http://{addr}"))
            };
            if let Some(found) = after("listening on http://") {
                url = Some(found);
            }
            if let Some(found) = after("admin on http://") {
                admin = Some(found);
            }
        }
    });
    read.await.expect("the proxy announces its addresses");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Proxy {
        _child: child,
        url: url.unwrap(),
        admin: admin.unwrap(),
    }
}

/// Posts a first turn the simulator refuses (and the guard rescues).
pub(crate) async fn refused_then_rescued(base: &str, conversation: &str, stream: bool) -> String {
    refused_as(base, conversation, stream, None).await
}

/// The same, presenting the client key `key` when given.
pub(crate) async fn refused_as(
    base: &str,
    conversation: &str,
    stream: bool,
    key: Option<&str>,
) -> String {
    let body = json!({"model": "claude-opus-4-7", "max_tokens": 64, "stream": stream,
        "messages": [{"role": "user", "content": format!("Check my SSH config ({conversation})")}]});
    let mut request = support::proxy::client()
        .post(format!("{base}/v1/messages"))
        .header("content-type", "application/json");
    if let Some(key) = key {
        request = request.header("x-refusal-guard-key", key);
    }
    let response = request
        .body(body.to_string())
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.text().await.unwrap()
}

/// The admin listener's `/metrics`.
pub(crate) async fn scrape(admin: &str) -> String {
    support::proxy::client()
        .get(format!("{admin}/metrics"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}
