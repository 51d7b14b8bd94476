//! rig (rig-core 0.44) over `refusal_guard::client::rig::GuardedClient`:
//! completion and streaming completion on its Anthropic, OpenAI (Chat
//! Completions and Responses) and Gemini providers.

use futures::StreamExt;
use refusal_guard::client::rig::GuardedClient;
use refusal_guard::refusal::Outcome;
use refusal_guard::reqwest::reqwest;
use refusal_guard::telemetry::MemorySink;
use refusal_guard::{CallHandle, CallOutcome, RefusalGuardLayer};
use refusal_guard_testkit::ANSWER;
use rig_core::completion::CompletionRequest;
use rig_core::operation::Completion;
use rig_core::providers::anthropic::AnthropicConfig;
use rig_core::providers::gemini::GeminiConfig;
use rig_core::providers::openai::OpenAIConfig;
use rig_core::streaming::{Item, StreamEvent};
use rig_core::DynModel;

use crate::one_record;
use crate::simulated::{chains, Simulated};

/// One provider's completion model, and what its refusal is recorded as.
struct Provider {
    name: &'static str,
    model: fn(&str, GuardedClient) -> DynModel<Completion>,
    category: &'static str,
    /// The model the test chains fall back to.
    fallback: &'static str,
}

const PROVIDERS: [Provider; 4] = [
    Provider {
        name: "anthropic",
        model: |url, http| {
            let config = AnthropicConfig::new("sk-ant-test").with_base_url(url);
            config.connect(http).completion("claude-opus-4-7").erase()
        },
        category: "cyber",
        fallback: "claude-sonnet-4-5",
    },
    Provider {
        name: "openai chat",
        model: |url, http| {
            let config = OpenAIConfig::new("sk-test").with_base_url(format!("{url}/v1"));
            config.connect(http).chat("gpt-4o").erase()
        },
        category: "content_filter",
        fallback: "gpt-4o-mini",
    },
    Provider {
        name: "openai responses",
        model: |url, http| {
            let config = OpenAIConfig::new("sk-test").with_base_url(format!("{url}/v1"));
            config.connect(http).responses("gpt-5.5").erase()
        },
        category: "content_filter",
        fallback: "gpt-5.4-mini",
    },
    Provider {
        name: "gemini",
        model: |url, http| {
            let config = GeminiConfig::new("gemini-test").with_base_url(url);
            config.connect(http).completion("gemini-2.5-pro").erase()
        },
        category: "SAFETY",
        fallback: "gemini-2.5-flash",
    },
];

fn request(prompt: &str) -> CompletionRequest {
    CompletionRequest::new(prompt).max_tokens(256)
}

/// The text of a completion's stream, read through rig's own events.
async fn streamed_text(model: &DynModel<Completion>, prompt: &str) -> String {
    let mut stream = model.stream(request(prompt)).unwrap();
    let mut text = String::new();
    while let Some(item) = stream.next().await {
        if let Item::Event(StreamEvent::Text { text: part, .. }) = item.unwrap() {
            text.push_str(&part);
        }
    }
    text
}

/// The outcome a handle got, checked against the sink's one record.
fn checked(provider: &Provider, outcome: &CallOutcome, sink: &MemorySink, expected: Outcome) {
    let name = provider.name;
    let refusal = outcome
        .refusal
        .as_ref()
        .unwrap_or_else(|| panic!("{name}: {outcome:?}"));
    assert_eq!(refusal.outcome, expected, "{name}");
    assert_eq!(refusal.code(), provider.category, "{name}");
    assert_eq!(outcome.attempts, 2, "{name}");
    one_record(sink, provider.category, expected, 2);
}

#[tokio::test]
async fn a_refused_completion_is_rescued_on_every_provider() {
    let upstream = Simulated::start().await;
    for provider in &PROVIDERS {
        let sink = MemorySink::new();
        let layer = RefusalGuardLayer::new().telemetry(sink.clone());
        let http = GuardedClient::new(layer, reqwest::Client::new());
        let model = (provider.model)(&upstream.url(), http);
        let handle = CallHandle::new();
        let prompt = format!("Audit my SSH config ({})", provider.name);
        let response = handle.scope(model.call(request(&prompt))).await;
        let response = response.unwrap_or_else(|e| panic!("{}: {e}", provider.name));

        assert_eq!(response.text(), ANSWER, "{}", provider.name);
        checked(provider, &handle.settled().await, &sink, Outcome::Rescued);
    }
    assert_eq!(upstream.simulator.requests(), 8);
}

#[tokio::test]
async fn a_refused_streaming_completion_falls_back_on_every_provider() {
    let upstream = Simulated::start().await;
    for provider in &PROVIDERS {
        let sink = MemorySink::new();
        let layer = RefusalGuardLayer::new()
            .telemetry(sink.clone())
            .fallback_chains(chains());
        let http = GuardedClient::new(layer, reqwest::Client::new());
        let model = (provider.model)(&upstream.url(), http);
        let handle = CallHandle::new();
        let prompt = format!("Explain the mitigation ({})", provider.name);
        let text = handle.scope(streamed_text(&model, &prompt)).await;

        assert_eq!(text, ANSWER, "{}", provider.name);
        let outcome = handle.settled().await;
        assert_eq!(
            outcome.served_model.as_deref(),
            Some(provider.fallback),
            "{}",
            provider.name
        );
        checked(provider, &outcome, &sink, Outcome::Fallback);
    }
}
