//! rig with the guard as its HTTP client: a streamed completion on rig's
//! Anthropic provider, its text as it comes, then the guard's outcome line.
//!
//! ```sh
//! cargo run -p refusal-guard-clients --example rig
//! ```
//!
//! Offline by default: the testkit's simulated provider, which refuses the
//! first attempt of every conversation, answers in process (no URL, no
//! key), so what prints is a rescued answer and `outcome: rescued (cyber)`.
//! With `ANTHROPIC_API_KEY` set (and `ANTHROPIC_BASE_URL`,
//! `ANTHROPIC_MODEL` if wanted) it calls the real API through the same
//! guard.

use std::io::Write;

use futures::StreamExt;
use refusal_guard::client::rig::GuardedClient;
use refusal_guard::reqwest::reqwest;
use refusal_guard::{CallHandle, RefusalGuardLayer};
use refusal_guard_testkit::Simulator;
use rig_core::completion::CompletionRequest;
use rig_core::providers::anthropic::{Anthropic, AnthropicConfig};
use rig_core::streaming::{Item, StreamEvent};
use tower::Layer;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let layer = RefusalGuardLayer::new();
    let (anthropic, model): (Anthropic, String) = match std::env::var("ANTHROPIC_API_KEY") {
        Ok(key) => {
            let mut config = AnthropicConfig::new(key);
            if let Ok(base) = std::env::var("ANTHROPIC_BASE_URL") {
                config = config.with_base_url(base);
            }
            let model =
                std::env::var("ANTHROPIC_MODEL").unwrap_or_else(|_| "claude-opus-4-7".into());
            let http = GuardedClient::new(layer, reqwest::Client::new());
            (config.connect(http), model)
        }
        Err(_) => {
            eprintln!("no ANTHROPIC_API_KEY: answering from the simulated provider");
            let config = AnthropicConfig::new("sk-ant-simulated").with_base_url("http://simulated");
            let http = GuardedClient::over(
                layer.layer(Simulator::new().shared()),
                reqwest::Client::new(),
            );
            (config.connect(http), "claude-opus-4-7".into())
        }
    };

    let model = anthropic.completion(model);
    let request =
        CompletionRequest::new("How do I harden the SSH server on my own machine?").max_tokens(512);
    // rig reads the response itself: the handle is how this call's outcome
    // comes back.
    let handle = CallHandle::new();
    handle
        .scope(async {
            let mut stream = model.stream(request)?;
            let mut out = std::io::stdout().lock();
            while let Some(item) = stream.next().await {
                if let Item::Event(StreamEvent::Text { text, .. }) = item? {
                    write!(out, "{text}")?;
                    out.flush()?;
                }
            }
            writeln!(out)?;
            Ok::<_, Error>(())
        })
        .await?;
    println!("outcome: {}", handle.settled().await);
    Ok(())
}
