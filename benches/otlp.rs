//! What the OTLP export costs a request, and whether a dead collector costs
//! more: a refused-then-rescued request (`--simulate --strict`, a new conversation
//! each time, so every request makes three spans) through the real
//! `refusal-guard` binary on loopback, with the export off, on with a
//! collector that takes everything (tests/support's OTLP receiver), and on
//! with nothing listening where the collector should be. The three proxies
//! run at once, so that the machine's load falls on all of them alike.
//!
//! `cargo bench -p refusal-guard-proxy --features bedrock,otlp --bench otlp`. The acceptance: with
//! the collector down, latency is that of the export with a collector up,
//! within the bench's noise.

use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use support::otlp::OtlpReceiver;
use tokio::io::{AsyncBufReadExt, BufReader};

const BIN: &str = env!("CARGO_BIN_EXE_refusal-guard");

/// Starts the binary with `args` and `env`; its URL once it listens.
async fn start(args: &[&str], env: &[(&str, String)]) -> (tokio::process::Child, String) {
    let mut child = tokio::process::Command::new(BIN)
        .args([
            "--simulate",
            "--strict",
            "--log",
            "off",
            "--quiet",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines.next_line().await.unwrap().expect("the proxy exited");
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, url)
}

async fn rescued(client: &reqwest::Client, url: &str, n: u64) {
    let body = serde_json::json!({"model": "claude-opus-4-7", "max_tokens": 64,
        "messages": [{"role": "user", "content": format!("Check my SSH config, conversation {n}")}]});
    let response = client
        .post(format!("{url}/v1/messages"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.bytes().await.unwrap();
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (receiver, proxies) = runtime.block_on(async {
        let receiver = OtlpReceiver::start().await;
        let dead = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}", probe.local_addr().unwrap())
        };
        let export = |endpoint: String| {
            vec![
                ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
                ("OTEL_BSP_SCHEDULE_DELAY", "200".to_owned()),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "1000".to_owned()),
            ]
        };
        let off = start(&[], &[]).await;
        let up = start(&["--otlp"], &export(receiver.endpoint())).await;
        let down = start(&["--otlp"], &export(dead)).await;
        (
            receiver,
            [("off", off), ("collector_up", up), ("collector_down", down)],
        )
    });
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let conversation = AtomicU64::new(0);
    let mut group = c.benchmark_group("rescued_request");
    group.measurement_time(Duration::from_secs(10));
    for (name, (_, url)) in &proxies {
        group.bench_function(*name, |b| {
            b.to_async(&runtime).iter(|| {
                let n = conversation.fetch_add(1, Ordering::Relaxed);
                rescued(&client, url, n)
            })
        });
    }
    group.finish();
    // The export with a collector really exported.
    assert!(!receiver.spans().is_empty(), "no span reached the receiver");
}

criterion_group!(benches, bench);
criterion_main!(benches);
