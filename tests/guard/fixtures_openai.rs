//! Every OpenAI and Azure OpenAI fixture gets the verdict the shared fixtures
//! README lists (plus the hand-written gap fillers), streaming and JSON, under
//! every split point of its bytes and under random chunkings. Rescue is off,
//! so every response, refusal or not, must reach the client byte-identical.

use bytes::Bytes;
use http_body_util::Full;
use refusal_guard::refusal::{Provider, RefusalSignal, WireApi};
use refusal_guard::{Refusal, RefusalGuardLayer};
use support::fixtures::{json_lines_as_sse, Framing};
use support::judge::{answered_model, judge_every_chunking, Expected, Refused, Source, Verdict};
use support::*;
use Api::*;
use Format::*;

#[derive(Clone, Copy)]
enum Api {
    Chat,
    AzureChat,
    Responses,
}

impl Api {
    fn url(self) -> &'static str {
        match self {
            Api::Chat => "https://api.openai.com/v1/chat/completions",
            Api::AzureChat => "https://example.openai.azure.com/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21",
            Api::Responses => "https://api.openai.com/v1/responses",
        }
    }

    fn source(self) -> Source {
        let wire_api = match self {
            Api::Chat | Api::AzureChat => WireApi::OpenAiChatCompletions,
            Api::Responses => WireApi::OpenAiResponses,
        };
        Source {
            provider: Provider::OpenAi,
            wire_api,
            model: None,
        }
    }

    /// A request for `model`.
    fn request(self, model: &str, stream: bool) -> http::Request<Full<Bytes>> {
        let body = match self {
            Api::Chat | Api::AzureChat => serde_json::json!({
                "model": model,
                "stream": stream,
                "messages": [
                    {"role": "system", "content": "You are helpful."},
                    {"role": "user", "content": "hello"},
                ],
            }),
            Api::Responses => serde_json::json!({
                "model": model,
                "stream": stream,
                "input": "hello",
            }),
        };
        let bytes = serde_json::to_vec(&body).unwrap();
        http::Request::post(self.url())
            .header("content-type", "application/json")
            .header("content-length", bytes.len())
            .body(Full::new(Bytes::from(bytes)))
            .unwrap()
    }
}

/// How a fixture file becomes a response body.
#[derive(Clone, Copy)]
enum Format {
    /// Raw SSE bytes, as recorded.
    Sse,
    /// vercel/ai JSON lines: one event payload per line.
    Lines,
    /// A whole JSON body with this status.
    Json(u16),
}

const NONE: Verdict = Verdict::None;
const ERROR: Verdict = Verdict::Error;
const STOP: RefusalSignal = RefusalSignal::StopReason;
const MODEL: RefusalSignal = RefusalSignal::ModelRefusal;
const BLOCKED: RefusalSignal = RefusalSignal::BlockedPrompt;

const fn empty(signal: RefusalSignal, category: &'static str) -> Verdict {
    Verdict::Empty(Refused::by(signal, Some(category)))
}

const fn partial(signal: RefusalSignal, category: &'static str) -> Verdict {
    Verdict::Partial(Refused::by(signal, Some(category)))
}

/// The response body a fixture stands for.
fn body_of(path: &str, api: Api, format: Format) -> Bytes {
    let file = fixture(path);
    match (format, api) {
        (Lines, Responses) => json_lines_as_sse(&file, Framing::Named, false),
        (Lines, _) => json_lines_as_sse(&file, Framing::Data, true),
        _ => file,
    }
}

/// How the fixture is served, and its verdict.
fn expected(api: Api, format: Format, verdict: Verdict) -> Expected {
    let expected = match format {
        Json(status) => Expected::ok(true, verdict).with_status(status),
        _ => Expected::ok(false, verdict),
    };
    expected.from(api.source())
}

async fn check(path: &str, api: Api, format: Format, verdict: Verdict) {
    let body = body_of(path, api, format);
    let expected = expected(api, format, verdict);
    let stream = !expected.json;
    // The model the recorded response names, so that it is no reroute.
    let model = answered_model(&body).unwrap_or_else(|| "gpt-4o".to_owned());
    let request = || api.request(&model, stream);
    judge_every_chunking(path, &request, &body, &expected).await;
}

macro_rules! fixtures {
    ($($name:ident: $path:literal, $api:expr, $format:expr, $expect:expr;)*) => {
        $(
            #[tokio::test]
            async fn $name() {
                check($path, $api, $format, $expect).await;
            }
        )*
    };
}

fixtures! {
    // openai-python: Chat Completions streams.
    py_refusal_173417: "openai/openai-python/173417d553406f034f643e5db3f8d591fb691ebac56f5ae39a22cc7d455c5353.bin", Chat, Sse, empty(MODEL, "model_refusal");
    py_tools_2018fe: "openai/openai-python/2018feb66ae13fcf5333d61b95849decc68d3f63bd38172889367e1afb1e04f7.bin", Chat, Sse, NONE;
    py_length_4cc50a: "openai/openai-python/4cc50a6135d254573a502310e6af1246f55edb6ad95fa24059f160996b68866d.bin", Chat, Sse, NONE;
    py_refusal_logprobs_569c87: "openai/openai-python/569c877e69429d4cbc1577d2cd6dd33878095c68badc6b6654a69769b391a1c1.bin", Chat, Sse, empty(MODEL, "model_refusal");
    py_json_7e5ea4: "openai/openai-python/7e5ea4d12e7cc064399b6631415e65923f182256b6e6b752950a3aaa2ad2320a.bin", Chat, Sse, NONE;
    py_logprobs_83b060: "openai/openai-python/83b060bae42eb41c4f1edbb7c1542b954b37d9dfd1910b964ddebc9677e6ae85.bin", Chat, Sse, NONE;
    py_strict_tools_a247c4: "openai/openai-python/a247c49c5fcd492bfb7a02a3306ad615ed8d8f649888ebfddfbc3ee151f44d46.bin", Chat, Sse, NONE;
    py_three_choices_a491ad: "openai/openai-python/a491adda08c3d4fde95f5b2ee3f60f7f745f1a56d82e62f58031cc2add502380.bin", Chat, Sse, NONE;
    py_pydantic_tool_c6aa7e: "openai/openai-python/c6aa7e397b7123c3501f25df3a05d4daf7e8ad6d61ffa406ab5361fe36a8d5b1.bin", Chat, Sse, NONE;
    py_long_d61558: "openai/openai-python/d615580118391ee13492193e3a8bb74642d23ac1ca13fe37cb6e889b66f759f6.bin", Chat, Sse, NONE;
    py_disclaimer_e2aad4: "openai/openai-python/e2aad469b71d1d4894ff833ea147020a9d875eb7ce644a0ff355581690a4cbfd.bin", Chat, Sse, NONE;
    py_parallel_tools_f82268: "openai/openai-python/f82268f2fefd5cfbc7eeb59c297688be2f6ca0849a6e4f17851b517310841d9b.bin", Chat, Sse, NONE;
    // semantic-kernel (OpenAI connector).
    sk_streaming_refusal: "openai/semantic-kernel/chat_completion_streaming_refusal_test_response.txt", Chat, Sse, empty(MODEL, "model_refusal");
    sk_json_refusal: "openai/semantic-kernel/chat_completion_refusal_test_response.json", Chat, Json(200), empty(MODEL, "model_refusal");
    // vercel/ai.
    va_responses_error_stream: "openai/vercel-ai/responses/openai-error.1.chunks.txt", Responses, Lines, ERROR;
    va_responses_error_json_200: "openai/vercel-ai/responses/openai-error.1.json", Responses, Json(200), ERROR;
    va_responses_error_json_429: "openai/vercel-ai/responses/openai-error.1.json", Responses, Json(429), ERROR;
    va_responses_phase: "openai/vercel-ai/responses/openai-phase.1.chunks.txt", Responses, Lines, NONE;
    va_responses_custom_tool: "openai/vercel-ai/responses/openai-custom-tool.1.chunks.txt", Responses, Lines, NONE;
    va_responses_reasoning: "openai/vercel-ai/responses/openai-reasoning-encrypted-content.1.chunks.txt", Responses, Lines, NONE;
    va_chat_text_json: "openai/vercel-ai/chat/openai-text.json", Chat, Json(200), NONE;
    // Azure OpenAI.
    az_sk_async_filter: "azure/semantic-kernel/chat_completion_streaming_async_filter_response.txt", AzureChat, Sse, NONE;
    az_sk_function_calls: "azure/semantic-kernel/chat_completion_streaming_multiple_function_calls_test_async_filter_response.txt", AzureChat, Sse, NONE;
    az_va_model_router: "azure/vercel-ai/chat/azure-model-router.1.chunks.txt", AzureChat, Lines, NONE;
    az_va_responses_text: "azure/vercel-ai/responses/azure-text.1.chunks.txt", Responses, Lines, NONE;
    az_va_responses_text_json: "azure/vercel-ai/responses/azure-text.1.json", Responses, Json(200), NONE;
    az_va_responses_tool_call: "azure/vercel-ai/responses/azure-tool-call.1.chunks.txt", Responses, Lines, NONE;
    // Hand-written from the documented shapes (see the SOURCES.md files).
    hw_chat_filter_empty: "openai/hand-written/chat_content_filter_empty.sse", Chat, Sse, empty(STOP, "content_filter");
    hw_chat_filter_partial: "openai/hand-written/chat_content_filter_partial.sse", Chat, Sse, partial(STOP, "content_filter");
    hw_chat_filter_same_chunk: "openai/hand-written/chat_content_filter_same_chunk.sse", Chat, Sse, partial(STOP, "content_filter");
    hw_chat_filter_empty_json: "openai/hand-written/chat_content_filter_empty.json", Chat, Json(200), empty(STOP, "content_filter");
    hw_chat_mid_stream_error: "openai/hand-written/chat_mid_stream_error.sse", Chat, Sse, ERROR;
    hw_responses_refusal: "openai/hand-written/responses_refusal.sse", Responses, Sse, empty(MODEL, "model_refusal");
    hw_responses_refusal_json: "openai/hand-written/responses_refusal.json", Responses, Json(200), empty(MODEL, "model_refusal");
    hw_responses_incomplete: "openai/hand-written/responses_incomplete_content_filter.sse", Responses, Sse, empty(STOP, "content_filter");
    hw_responses_incomplete_json: "openai/hand-written/responses_incomplete_content_filter.json", Responses, Json(200), empty(STOP, "content_filter");
    hw_responses_incomplete_partial: "openai/hand-written/responses_incomplete_partial.sse", Responses, Sse, partial(STOP, "content_filter");
    hw_azure_filter_empty: "azure/hand-written/chat_stream_content_filter_empty.sse", AzureChat, Sse, empty(STOP, "content_filter");
    hw_azure_filter_partial: "azure/hand-written/chat_stream_content_filter_partial.sse", AzureChat, Sse, partial(STOP, "content_filter");
    hw_azure_prompt_400: "azure/hand-written/chat_prompt_content_filter_400.json", AzureChat, Json(400), empty(BLOCKED, "content_filter");
    hw_azure_prompt_400_responses: "azure/hand-written/chat_prompt_content_filter_400.json", Responses, Json(400), empty(BLOCKED, "content_filter");
}

/// The refusal text and the provider's words reach the typed metadata.
#[tokio::test]
async fn explanations_carry_the_providers_words() {
    async fn refusal_of(path: &str, api: Api, format: Format) -> Refusal {
        let body = body_of(path, api, format);
        let served = expected(api, format, NONE);
        let reply = Reply::raw(served.status, served.content_type(), vec![body]);
        let layer = RefusalGuardLayer::new().rescue(false);
        let done = exchange(layer, vec![reply], api.request("gpt-4o", !served.json)).await;
        done.refusal().cloned().expect("refusal")
    }
    let streamed = refusal_of(
        "openai/openai-python/173417d553406f034f643e5db3f8d591fb691ebac56f5ae39a22cc7d455c5353.bin",
        Chat,
        Sse,
    )
    .await;
    assert_eq!(
        streamed.explanation.as_deref(),
        Some("I'm sorry, I can't assist with that request."),
        "the whole streamed refusal text, not its first piece"
    );
    assert_eq!(streamed.model.as_deref(), Some("gpt-4o"));
    let responses = refusal_of("openai/hand-written/responses_refusal.sse", Responses, Sse).await;
    assert_eq!(
        responses.explanation.as_deref(),
        Some("I'm sorry, but I can't help with that.")
    );
    let azure = refusal_of(
        "azure/hand-written/chat_stream_content_filter_empty.sse",
        AzureChat,
        Sse,
    )
    .await;
    assert_eq!(azure.explanation.as_deref(), Some("filtered: violence"));
    assert_eq!(
        azure.model.as_deref(),
        Some("gpt-4o"),
        "the deployment in the path"
    );
    let blocked = refusal_of(
        "azure/hand-written/chat_prompt_content_filter_400.json",
        AzureChat,
        Json(400),
    )
    .await;
    let explanation = blocked.explanation.unwrap();
    assert!(
        explanation.starts_with("ResponsibleAIPolicyViolation: The response was filtered"),
        "{explanation}"
    );
}
