//! async-openai with the guard in its HTTP stack: a streamed chat
//! completion, its text as it comes, then the guard's outcome line.
//!
//! ```sh
//! cargo run -p refusal-guard-clients --example async_openai
//! ```
//!
//! Offline by default: the testkit's simulated provider, which refuses the
//! first attempt of every conversation, answers in process (no URL, no
//! key), so what prints is a rescued answer and `outcome: rescued
//! (content_filter)`. With `OPENAI_API_KEY` set (and `OPENAI_BASE_URL`,
//! `OPENAI_MODEL` if wanted) it calls the real API through the same guard.

use std::io::Write;

use async_openai::config::OpenAIConfig;
use async_openai::types::chat::{
    ChatCompletionRequestUserMessageArgs, CreateChatCompletionRequestArgs,
};
use async_openai::Client;
use futures::StreamExt;
use refusal_guard::client::async_openai::{guarded, FactoryService};
use refusal_guard::reqwest::reqwest;
use refusal_guard::{CallHandle, RefusalGuardLayer};
use refusal_guard_testkit::Simulator;
use tower::Layer;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let layer = RefusalGuardLayer::new();
    let (client, model) = match std::env::var("OPENAI_API_KEY") {
        Ok(key) => {
            let mut config = OpenAIConfig::new().with_api_key(key);
            if let Ok(base) = std::env::var("OPENAI_BASE_URL") {
                config = config.with_api_base(base);
            }
            let model = std::env::var("OPENAI_MODEL").unwrap_or_else(|_| "gpt-4o".into());
            let service = guarded(layer, reqwest::Client::new());
            (
                Client::with_config(config).with_http_service(service),
                model,
            )
        }
        Err(_) => {
            eprintln!("no OPENAI_API_KEY: answering from the simulated provider");
            let config = OpenAIConfig::new()
                .with_api_key("sk-simulated")
                .with_api_base("http://simulated/v1");
            let service = FactoryService::new(layer.layer(Simulator::new().shared()));
            (
                Client::with_config(config).with_http_service(service),
                "gpt-4o".into(),
            )
        }
    };

    let request = CreateChatCompletionRequestArgs::default()
        .model(model)
        .max_completion_tokens(512u32)
        .messages([ChatCompletionRequestUserMessageArgs::default()
            .content("How do I harden the SSH server on my own machine?")
            .build()?
            .into()])
        .build()?;
    // async-openai reads the response itself: the handle is how this call's
    // outcome comes back.
    let handle = CallHandle::new();
    handle
        .scope(async {
            let mut stream = client.chat().create_stream(request).await?;
            let mut out = std::io::stdout().lock();
            while let Some(chunk) = stream.next().await {
                for choice in chunk?.choices {
                    write!(out, "{}", choice.delta.content.unwrap_or_default())?;
                }
                out.flush()?;
            }
            writeln!(out)?;
            Ok::<_, Error>(())
        })
        .await?;
    println!("outcome: {}", handle.settled().await);
    Ok(())
}
