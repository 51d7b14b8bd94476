//! Rust agent code calling the Anthropic Messages API with streaming,
//! through `RefusalGuardLayer` over reqwest.
//!
//! ```text
//! ANTHROPIC_API_KEY=sk-ant-... cargo run --features reqwest --example agent -- "Review my nginx config"
//! cargo run --features reqwest --example agent -- --base-url http://127.0.0.1:8787 "..."   # via the proxy or a mock
//! ```
//!
//! Without `ANTHROPIC_API_KEY` it prints how to run it and exits 0. The text
//! is printed as it streams; at the end, the typed refusal (if any) is
//! printed from the response's `RefusalHandle`.

use std::io::Write;
use std::process::ExitCode;

use http_body_util::BodyExt;
use refusal_guard::reqwest::ReqwestService;
use refusal_guard::sse::SseFramer;
use refusal_guard::telemetry::TracingSink;
use refusal_guard::{RefusalGuardLayer, RefusalHandle};
use serde_json::Value;
use tower::{Service, ServiceBuilder, ServiceExt};

const USAGE: &str = "\
usage: agent [--base-url URL] [--model MODEL] PROMPT...

Reads the API key from ANTHROPIC_API_KEY. --base-url (or ANTHROPIC_BASE_URL)
defaults to https://api.anthropic.com; point it at the refusal-guard proxy
or a mock. Try it with no key and no network:

  cargo run -p refusal-guard-proxy -- --simulate &     # or: refusal-guard --simulate &
  ANTHROPIC_API_KEY=dummy cargo run --features reqwest --example agent -- --base-url http://127.0.0.1:8787 hello";

#[tokio::main]
async fn main() -> ExitCode {
    let mut base_url = std::env::var("ANTHROPIC_BASE_URL")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "https://api.anthropic.com".to_owned());
    let mut model = "claude-opus-4-7".to_owned();
    let mut prompt = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            "--base-url" | "--model" => {
                let Some(value) = args.next() else {
                    eprintln!("agent: {arg} needs a value\n\n{USAGE}");
                    return ExitCode::from(2);
                };
                if arg == "--model" {
                    model = value;
                } else {
                    base_url = value;
                }
            }
            _ => prompt.push(arg),
        }
    }
    let Some(key) = std::env::var("ANTHROPIC_API_KEY")
        .ok()
        .filter(|k| !k.is_empty())
    else {
        println!("agent: set ANTHROPIC_API_KEY to run this example.\n\n{USAGE}");
        return ExitCode::SUCCESS;
    };
    let prompt = if prompt.is_empty() {
        "Explain how to harden an SSH server.".to_owned()
    } else {
        prompt.join(" ")
    };

    // The guard in front of reqwest: one ServiceBuilder line.
    let mut client = ServiceBuilder::new()
        .layer(RefusalGuardLayer::new().telemetry(TracingSink::new()))
        .service(ReqwestService::new(reqwest::Client::new()));

    let body = serde_json::json!({
        "model": model,
        "max_tokens": 1024,
        "stream": true,
        "messages": [{"role": "user", "content": prompt}],
    });
    let request = http::Request::post(format!("{}/v1/messages", base_url.trim_end_matches('/')))
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
        .body(reqwest::Body::from(body.to_string()));
    let request = match request {
        Ok(request) => request,
        Err(error) => {
            eprintln!("agent: bad request: {error}");
            return ExitCode::from(2);
        }
    };

    let response = match ServiceExt::<http::Request<reqwest::Body>>::ready(&mut client).await {
        Ok(ready) => ready.call(request).await,
        Err(error) => Err(error),
    };
    let response = match response {
        Ok(response) => response,
        Err(error) => {
            eprintln!("agent: request failed: {error}");
            return ExitCode::FAILURE;
        }
    };
    let status = response.status();
    let handle = response.extensions().get::<RefusalHandle>().cloned();
    let mut body = response.into_body();
    if !status.is_success() {
        let bytes = body
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        eprintln!("agent: HTTP {status}: {}", String::from_utf8_lossy(&bytes));
        return ExitCode::FAILURE;
    }

    // Print text deltas as they arrive.
    let mut framer = SseFramer::new();
    let mut stop_reason = None;
    let mut stdout = std::io::stdout();
    while let Some(frame) = body.frame().await {
        let data = match frame {
            Ok(frame) => match frame.into_data() {
                Ok(data) => data,
                Err(_) => continue,
            },
            Err(error) => {
                eprintln!("\nagent: stream failed: {error}");
                return ExitCode::FAILURE;
            }
        };
        if framer.push(data).is_err() {
            eprintln!("\nagent: an event was too large");
            return ExitCode::FAILURE;
        }
        while let Some(event) = framer.next_frame() {
            let Some(json) = event
                .data()
                .and_then(|d| serde_json::from_str::<Value>(d).ok())
            else {
                continue;
            };
            if let Some(text) = json["delta"]["text"].as_str() {
                let _ = write!(stdout, "{text}");
                let _ = stdout.flush();
            }
            if let Some(reason) = json["delta"]["stop_reason"].as_str() {
                stop_reason = Some(reason.to_owned());
            }
        }
    }
    println!(
        "\n\n[stop_reason: {}]",
        stop_reason.as_deref().unwrap_or("?")
    );
    if let Some(handle) = handle {
        match handle.settled().await {
            Some(refusal) => println!("[refusal-guard: {refusal}]"),
            None => println!("[refusal-guard: no refusal]"),
        }
    }
    ExitCode::SUCCESS
}
