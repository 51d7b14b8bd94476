//! async-openai 0.43 over `refusal_guard::client::async_openai::guarded`:
//! Chat Completions and Responses, `create` and `create_stream`.

use async_openai::config::OpenAIConfig;
use async_openai::types::chat::{
    ChatCompletionRequestUserMessageArgs, CreateChatCompletionRequest,
    CreateChatCompletionRequestArgs, FinishReason,
};
use async_openai::types::responses::{CreateResponse, CreateResponseArgs, ResponseStreamEvent};
use async_openai::Client;
use futures::StreamExt;
use refusal_guard::client::async_openai::guarded;
use refusal_guard::refusal::Outcome;
use refusal_guard::reqwest::reqwest;
use refusal_guard::telemetry::MemorySink;
use refusal_guard::{CallHandle, RefusalGuardLayer};
use refusal_guard_testkit::{Reply, Simulator, When, ANSWER};

use crate::one_record;
use crate::simulated::{chains, Simulated};

/// async-openai pointed at `base`, every request through `layer`'s guard.
fn client(base: &str, config: OpenAIConfig, layer: RefusalGuardLayer) -> Client<OpenAIConfig> {
    let config = config
        .with_api_key("sk-test")
        .with_api_base(format!("{base}/v1"));
    Client::with_config(config).with_http_service(guarded(layer, reqwest::Client::new()))
}

fn chat(model: &str, prompt: &str) -> CreateChatCompletionRequest {
    CreateChatCompletionRequestArgs::default()
        .model(model)
        .max_completion_tokens(256u32)
        .messages([ChatCompletionRequestUserMessageArgs::default()
            .content(prompt)
            .build()
            .unwrap()
            .into()])
        .build()
        .unwrap()
}

fn responses(model: &str, prompt: &str, stream: bool) -> CreateResponse {
    let mut request = CreateResponseArgs::default();
    request.model(model).input(prompt).max_output_tokens(256u32);
    if stream {
        request.stream(true);
    }
    request.build().unwrap()
}

/// The text a Chat Completions stream delivered, and its last finish reason.
async fn chat_stream_text(
    client: &Client<OpenAIConfig>,
    request: CreateChatCompletionRequest,
) -> (String, Option<FinishReason>) {
    let mut stream = client.chat().create_stream(request).await.unwrap();
    let (mut text, mut finish) = (String::new(), None);
    while let Some(chunk) = stream.next().await {
        for choice in chunk.unwrap().choices {
            text.push_str(choice.delta.content.as_deref().unwrap_or(""));
            finish = choice.finish_reason.or(finish);
        }
    }
    (text, finish)
}

#[tokio::test]
async fn a_refused_chat_completion_is_rescued_and_create_returns_the_answer() {
    let upstream = Simulated::start().await;
    let sink = MemorySink::new();
    let client = client(
        &upstream.url(),
        OpenAIConfig::new(),
        RefusalGuardLayer::new().telemetry(sink.clone()),
    );
    let handle = CallHandle::new();
    let request = chat("gpt-4o", "Audit my SSH config");
    let response = handle.scope(client.chat().create(request)).await.unwrap();

    let choice = &response.choices[0];
    assert_eq!(choice.message.content.as_deref(), Some(ANSWER));
    assert_eq!(choice.finish_reason, Some(FinishReason::Stop));
    let outcome = handle.settled().await;
    assert_eq!(outcome.to_string(), "rescued (content_filter)");
    assert_eq!(outcome.attempts, 2);
    assert_eq!(outcome.served_model.as_deref(), Some("gpt-4o"));
    one_record(&sink, "content_filter", Outcome::Rescued, 2);
    assert_eq!(upstream.simulator.requests(), 2);
}

#[tokio::test]
async fn a_refused_chat_stream_falls_back_and_create_stream_yields_one_answer() {
    let upstream = Simulated::start().await;
    let sink = MemorySink::new();
    let layer = RefusalGuardLayer::new()
        .telemetry(sink.clone())
        .fallback_chains(chains());
    let client = client(&upstream.url(), OpenAIConfig::new(), layer);
    let handle = CallHandle::new();
    let request = chat("gpt-4o", "Explain this exploit's mitigation");
    let (text, finish) = handle.scope(chat_stream_text(&client, request)).await;

    assert_eq!(text, ANSWER);
    assert_eq!(finish, Some(FinishReason::Stop));
    let outcome = handle.settled().await;
    assert_eq!(outcome.to_string(), "fallback (content_filter)");
    assert_eq!(outcome.served_model.as_deref(), Some("gpt-4o-mini"));
    let record = one_record(&sink, "content_filter", Outcome::Fallback, 2);
    assert_eq!(record.attempts[1].model.as_deref(), Some("gpt-4o-mini"));
}

#[tokio::test]
async fn a_refused_response_is_rescued_through_the_responses_api_streamed_or_not() {
    for stream in [false, true] {
        let upstream = Simulated::start().await;
        let sink = MemorySink::new();
        let layer = RefusalGuardLayer::new().telemetry(sink.clone());
        let client = client(&upstream.url(), OpenAIConfig::new(), layer);
        let handle = CallHandle::new();
        let request = responses("gpt-5.5", "Review my firewall rules", stream);
        let text = if stream {
            handle
                .scope(async {
                    let mut events = client.responses().create_stream(request).await.unwrap();
                    let mut text = String::new();
                    while let Some(event) = events.next().await {
                        if let ResponseStreamEvent::ResponseOutputTextDelta(delta) = event.unwrap()
                        {
                            text.push_str(&delta.delta);
                        }
                    }
                    text
                })
                .await
        } else {
            let response = handle
                .scope(client.responses().create(request))
                .await
                .unwrap();
            response.output_text().unwrap()
        };

        assert_eq!(text, ANSWER, "stream: {stream}");
        let outcome = handle.settled().await;
        assert_eq!(
            outcome.to_string(),
            "rescued (content_filter)",
            "stream: {stream}"
        );
        one_record(&sink, "content_filter", Outcome::Rescued, 2);
    }
}

#[tokio::test]
async fn a_responses_policy_error_is_rescued_and_create_returns_the_answer() {
    // OpenAI's HTTP 400 `cyber_policy` error for the first attempt.
    let script =
        Simulator::answering().when(When::any().attempt(1), Reply::policy_error("cyber_policy"));
    let upstream = Simulated::scripted(script).await;
    let sink = MemorySink::new();
    let layer = RefusalGuardLayer::new().telemetry(sink.clone());
    let client = client(&upstream.url(), OpenAIConfig::new(), layer);
    let handle = CallHandle::new();
    let request = responses("gpt-4o", "Scan my own network for open ports", false);
    let response = handle
        .scope(client.responses().create(request))
        .await
        .unwrap();

    assert_eq!(response.output_text().as_deref(), Some(ANSWER));
    let outcome = handle.settled().await;
    assert_eq!(outcome.to_string(), "rescued (cyber)");
    let record = one_record(&sink, "cyber", Outcome::Rescued, 2);
    assert_eq!(
        record.signal,
        Some(refusal_guard::refusal::RefusalSignal::PolicyError)
    );
    assert_eq!(upstream.simulator.requests(), 2);
}

#[tokio::test]
async fn a_partial_refusal_reaches_create_stream_as_sent() {
    let script = Simulator::answering().when(When::any(), Reply::partial("Here is the first step"));
    let upstream = Simulated::scripted(script).await;
    let sink = MemorySink::new();
    let layer = RefusalGuardLayer::new().telemetry(sink.clone());
    let client = client(&upstream.url(), OpenAIConfig::new(), layer);
    let handle = CallHandle::new();
    let request = chat("gpt-4o", "Walk me through the procedure");
    let (text, finish) = handle.scope(chat_stream_text(&client, request)).await;

    assert_eq!(text, "Here is the first step");
    assert_eq!(finish, Some(FinishReason::ContentFilter));
    let outcome = handle.settled().await;
    assert_eq!(
        outcome.refusal.as_ref().map(|r| r.outcome),
        Some(Outcome::Partial)
    );
    assert_eq!(outcome.attempts, 1);
    let record = &sink.records()[0];
    assert_eq!(
        (record.outcome, record.attempts.len()),
        (Outcome::Partial, 1)
    );
    assert_eq!(upstream.simulator.requests(), 1);
}
