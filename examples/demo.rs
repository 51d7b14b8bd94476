//! The guard in one command, with nothing to set up: no network, no key.
//!
//! ```text
//! cargo run --example demo
//! ```
//!
//! It puts `RefusalGuardLayer` over the built-in simulated provider, which
//! refuses the first attempt of every conversation with an empty refusal
//! (Anthropic `stop_reason: "refusal"`, category `cyber`). The guard sees the
//! refusal before any output, sends one reframed rescue continuation, and
//! the client receives the rescued answer. The demo prints what the client
//! received, the typed `Refusal`, and the telemetry record. The simulator is
//! strict: it holds the request and the rescue to the Messages API's rules,
//! and the demo fails if either broke one.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use refusal_guard::telemetry::MemorySink;
use refusal_guard::{Refusal, RefusalGuardLayer, RefusalHandle};
use refusal_guard_testkit::Simulator;
use serde_json::Value;
use tower::{Layer, ServiceExt};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let sink = MemorySink::new();
    let simulator = Simulator::new();
    let guard = RefusalGuardLayer::new()
        .telemetry(sink.clone())
        .layer(simulator.shared());

    let request = serde_json::json!({
        "model": "claude-opus-4-7",
        "max_tokens": 1024,
        "stream": true,
        "messages": [{"role": "user", "content": "Check my server's SSH setup for weaknesses."}],
    });
    println!("client -> POST /v1/messages (streaming)\n");
    let request = http::Request::post("http://simulated/v1/messages")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(request.to_string())))?;

    let response = guard.oneshot(request).await?;
    let status = response.status();
    let refusal = response.extensions().get::<Refusal>().cloned();
    let handle = response.extensions().get::<RefusalHandle>().cloned();
    let body = response.into_body().collect().await?.to_bytes();

    // What the client's SDK would assemble from the stream it received.
    let mut text = String::new();
    let mut stop_reason = String::new();
    for line in String::from_utf8_lossy(&body).lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        let Ok(event) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        if let Some(piece) = event["delta"]["text"].as_str() {
            text.push_str(piece);
        }
        if let Some(reason) = event["delta"]["stop_reason"].as_str() {
            stop_reason = reason.to_owned();
        }
    }
    println!("client received: HTTP {status}, stop_reason {stop_reason:?}");
    println!("  text: {text}\n");
    println!(
        "upstream saw {} requests (the refused original, then the rescue)\n",
        simulator.requests()
    );
    if simulator.violations() > 0 {
        return Err(format!(
            "the strict simulator answered {} request(s) with the provider's 400",
            simulator.violations()
        )
        .into());
    }

    match refusal {
        Some(refusal) => {
            println!("typed refusal (response extensions):\n  {refusal}");
            println!("  {refusal:?}\n");
        }
        None => println!("no typed refusal in the response extensions\n"),
    }
    if let Some(handle) = handle {
        let settled = handle.settled().await;
        println!(
            "RefusalHandle settled: {}\n",
            settled.map_or("no refusal".to_owned(), |r| r.outcome.to_string())
        );
    }
    for record in sink.records() {
        println!(
            "telemetry record (one JSON line of the refusal log):\n  {}",
            String::from_utf8_lossy(&record.to_json_line()).trim_end()
        );
    }
    Ok(())
}
