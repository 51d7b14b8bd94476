//! Every OpenAI and Azure OpenAI fixture gets the verdict the shared fixtures
//! README lists (plus the hand-written gap fillers), streaming and JSON, under
//! every split point of its bytes and under random chunkings. Rescue is off,
//! so every response, refusal or not, must reach the client byte-identical.
mod common;

use bytes::Bytes;
use common::*;
use http_body_util::Full;
use refusal_guard::refusal::{DeadReason, Provider, RefusalKind, RefusalSignal, WireApi};
use refusal_guard::telemetry::MemorySink;
use refusal_guard::{Outcome, Refusal, RefusalGuardLayer, RefusalHandle};
use tower::Layer;

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

    fn wire_api(self) -> WireApi {
        match self {
            Api::Chat | Api::AzureChat => WireApi::OpenAiChatCompletions,
            Api::Responses => WireApi::OpenAiResponses,
        }
    }

    fn request(self, stream: bool) -> http::Request<Full<Bytes>> {
        let body = match self {
            Api::Chat | Api::AzureChat => serde_json::json!({
                "model": "gpt-4o",
                "stream": stream,
                "messages": [
                    {"role": "system", "content": "You are helpful."},
                    {"role": "user", "content": "hello"},
                ],
            }),
            Api::Responses => serde_json::json!({
                "model": "gpt-4o",
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

#[derive(Clone, Copy, Debug)]
enum Expect {
    None,
    /// An error body or event: passed through, nothing recorded.
    Error,
    Empty(RefusalSignal, &'static str),
    Partial(RefusalSignal, &'static str),
}

const STOP: RefusalSignal = RefusalSignal::StopReason;
const MODEL: RefusalSignal = RefusalSignal::ModelRefusal;
const BLOCKED: RefusalSignal = RefusalSignal::BlockedPrompt;

/// The response body a fixture stands for.
fn body_of(path: &str, api: Api, format: Format) -> Bytes {
    let file = fixture(path);
    if !matches!(format, Format::Lines) {
        return file;
    }
    let text = std::str::from_utf8(&file).unwrap();
    let mut out = String::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if let Api::Responses = api {
            let event: serde_json::Value = serde_json::from_str(line).unwrap();
            out.push_str(&format!("event: {}\n", event["type"].as_str().unwrap()));
        }
        out.push_str(&format!("data: {line}\n\n"));
    }
    if !matches!(api, Api::Responses) {
        out.push_str("data: [DONE]\n\n");
    }
    Bytes::from(out)
}

async fn run_once(
    api: Api,
    format: Format,
    expect: Expect,
    body: &Bytes,
    chunks: Vec<Bytes>,
    label: &str,
) {
    let (status, kind, stream) = match format {
        Format::Json(status) => (status, "application/json", false),
        _ => (200, "text/event-stream", true),
    };
    let upstream = Upstream::new(vec![Reply::raw(status, kind, chunks)]);
    let sink = MemorySink::new();
    let mut guard = RefusalGuardLayer::new()
        .rescue(false)
        .telemetry(sink.clone())
        .layer(upstream.service());
    let (parts, got) = call(&mut guard, api.request(stream)).await;
    assert_eq!(parts.status.as_u16(), status, "{label}: status");
    assert!(got == *body, "{label}: body must be byte-identical");
    assert_eq!(upstream.seen().len(), 1, "{label}: no extra request");
    let handle = parts
        .extensions
        .get::<RefusalHandle>()
        .unwrap_or_else(|| panic!("{label}: a guarded response carries a handle"));
    assert!(handle.is_settled(), "{label}: settled once the body ended");
    let decided = parts.extensions.get::<Refusal>();
    let records = sink.records();
    match expect {
        Expect::None | Expect::Error => {
            assert!(records.is_empty(), "{label}: no record, got {records:?}");
            assert_eq!(handle.get(), None, "{label}");
            assert!(decided.is_none(), "{label}");
        }
        Expect::Empty(signal, category) | Expect::Partial(signal, category) => {
            assert_eq!(records.len(), 1, "{label}: one record, got {records:?}");
            let record = &records[0];
            let refusal = record.refusal();
            assert_eq!(refusal.provider, Provider::OpenAi, "{label}");
            assert_eq!(refusal.wire_api, api.wire_api(), "{label}");
            assert_eq!(refusal.signal, signal, "{label}");
            assert_eq!(refusal.category.as_deref(), Some(category), "{label}");
            assert_eq!(handle.get().as_ref(), Some(&refusal), "{label}: handle");
            if let Expect::Empty(..) = expect {
                assert_eq!(refusal.kind, RefusalKind::Empty, "{label}");
                assert_eq!(refusal.outcome, Outcome::Dead, "{label}");
                assert_eq!(refusal.reason, Some(DeadReason::RescueOff), "{label}");
                assert_eq!(
                    decided,
                    Some(&refusal),
                    "{label}: typed refusal in extensions"
                );
            } else {
                assert_eq!(refusal.kind, RefusalKind::Partial, "{label}");
                assert_eq!(refusal.outcome, Outcome::Partial, "{label}");
                assert!(decided.is_none(), "{label}: only known once the body ended");
            }
        }
    }
}

async fn check(path: &str, api: Api, format: Format, expect: Expect) {
    let body = body_of(path, api, format);
    // Every single split point (0 and len give the whole body in one chunk).
    for cut in 0..=body.len() {
        let chunks = split_at(&body, &[cut]);
        run_once(
            api,
            format,
            expect,
            &body,
            chunks,
            &format!("{path} cut at {cut}"),
        )
        .await;
    }
    // Random chunkings, from byte-sized to frame-sized pieces.
    let mut rng = Rng::new(0x5eed ^ body.len() as u64);
    for round in 0..24 {
        let max = [1, 2, 3, 7, 16, 64, 256, 1024][round % 8];
        let cuts = rng.cuts(body.len(), max);
        let chunks = split_at(&body, &cuts);
        run_once(
            api,
            format,
            expect,
            &body,
            chunks,
            &format!("{path} random round {round}"),
        )
        .await;
    }
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

use Api::*;
use Expect::{Empty, Error, None as NoRefusal, Partial};
use Format::*;

fixtures! {
    // openai-python: Chat Completions streams.
    py_refusal_173417: "openai/openai-python/173417d553406f034f643e5db3f8d591fb691ebac56f5ae39a22cc7d455c5353.bin", Chat, Sse, Empty(MODEL, "model_refusal");
    py_tools_2018fe: "openai/openai-python/2018feb66ae13fcf5333d61b95849decc68d3f63bd38172889367e1afb1e04f7.bin", Chat, Sse, NoRefusal;
    py_length_4cc50a: "openai/openai-python/4cc50a6135d254573a502310e6af1246f55edb6ad95fa24059f160996b68866d.bin", Chat, Sse, NoRefusal;
    py_refusal_logprobs_569c87: "openai/openai-python/569c877e69429d4cbc1577d2cd6dd33878095c68badc6b6654a69769b391a1c1.bin", Chat, Sse, Empty(MODEL, "model_refusal");
    py_json_7e5ea4: "openai/openai-python/7e5ea4d12e7cc064399b6631415e65923f182256b6e6b752950a3aaa2ad2320a.bin", Chat, Sse, NoRefusal;
    py_logprobs_83b060: "openai/openai-python/83b060bae42eb41c4f1edbb7c1542b954b37d9dfd1910b964ddebc9677e6ae85.bin", Chat, Sse, NoRefusal;
    py_strict_tools_a247c4: "openai/openai-python/a247c49c5fcd492bfb7a02a3306ad615ed8d8f649888ebfddfbc3ee151f44d46.bin", Chat, Sse, NoRefusal;
    py_three_choices_a491ad: "openai/openai-python/a491adda08c3d4fde95f5b2ee3f60f7f745f1a56d82e62f58031cc2add502380.bin", Chat, Sse, NoRefusal;
    py_pydantic_tool_c6aa7e: "openai/openai-python/c6aa7e397b7123c3501f25df3a05d4daf7e8ad6d61ffa406ab5361fe36a8d5b1.bin", Chat, Sse, NoRefusal;
    py_long_d61558: "openai/openai-python/d615580118391ee13492193e3a8bb74642d23ac1ca13fe37cb6e889b66f759f6.bin", Chat, Sse, NoRefusal;
    py_disclaimer_e2aad4: "openai/openai-python/e2aad469b71d1d4894ff833ea147020a9d875eb7ce644a0ff355581690a4cbfd.bin", Chat, Sse, NoRefusal;
    py_parallel_tools_f82268: "openai/openai-python/f82268f2fefd5cfbc7eeb59c297688be2f6ca0849a6e4f17851b517310841d9b.bin", Chat, Sse, NoRefusal;
    // semantic-kernel (OpenAI connector).
    sk_streaming_refusal: "openai/semantic-kernel/chat_completion_streaming_refusal_test_response.txt", Chat, Sse, Empty(MODEL, "model_refusal");
    sk_json_refusal: "openai/semantic-kernel/chat_completion_refusal_test_response.json", Chat, Json(200), Empty(MODEL, "model_refusal");
    // vercel/ai.
    va_responses_error_stream: "openai/vercel-ai/responses/openai-error.1.chunks.txt", Responses, Lines, Error;
    va_responses_error_json_200: "openai/vercel-ai/responses/openai-error.1.json", Responses, Json(200), Error;
    va_responses_error_json_429: "openai/vercel-ai/responses/openai-error.1.json", Responses, Json(429), Error;
    va_responses_phase: "openai/vercel-ai/responses/openai-phase.1.chunks.txt", Responses, Lines, NoRefusal;
    va_responses_custom_tool: "openai/vercel-ai/responses/openai-custom-tool.1.chunks.txt", Responses, Lines, NoRefusal;
    va_responses_reasoning: "openai/vercel-ai/responses/openai-reasoning-encrypted-content.1.chunks.txt", Responses, Lines, NoRefusal;
    va_chat_text_json: "openai/vercel-ai/chat/openai-text.json", Chat, Json(200), NoRefusal;
    // Azure OpenAI.
    az_sk_async_filter: "azure/semantic-kernel/chat_completion_streaming_async_filter_response.txt", AzureChat, Sse, NoRefusal;
    az_sk_function_calls: "azure/semantic-kernel/chat_completion_streaming_multiple_function_calls_test_async_filter_response.txt", AzureChat, Sse, NoRefusal;
    az_va_model_router: "azure/vercel-ai/chat/azure-model-router.1.chunks.txt", AzureChat, Lines, NoRefusal;
    az_va_responses_text: "azure/vercel-ai/responses/azure-text.1.chunks.txt", Responses, Lines, NoRefusal;
    az_va_responses_text_json: "azure/vercel-ai/responses/azure-text.1.json", Responses, Json(200), NoRefusal;
    az_va_responses_tool_call: "azure/vercel-ai/responses/azure-tool-call.1.chunks.txt", Responses, Lines, NoRefusal;
    // Hand-written from the documented shapes (see the SOURCES.md files).
    hw_chat_filter_empty: "openai/hand-written/chat_content_filter_empty.sse", Chat, Sse, Empty(STOP, "content_filter");
    hw_chat_filter_partial: "openai/hand-written/chat_content_filter_partial.sse", Chat, Sse, Partial(STOP, "content_filter");
    hw_chat_filter_same_chunk: "openai/hand-written/chat_content_filter_same_chunk.sse", Chat, Sse, Partial(STOP, "content_filter");
    hw_chat_filter_empty_json: "openai/hand-written/chat_content_filter_empty.json", Chat, Json(200), Empty(STOP, "content_filter");
    hw_chat_mid_stream_error: "openai/hand-written/chat_mid_stream_error.sse", Chat, Sse, Error;
    hw_responses_refusal: "openai/hand-written/responses_refusal.sse", Responses, Sse, Empty(MODEL, "model_refusal");
    hw_responses_refusal_json: "openai/hand-written/responses_refusal.json", Responses, Json(200), Empty(MODEL, "model_refusal");
    hw_responses_incomplete: "openai/hand-written/responses_incomplete_content_filter.sse", Responses, Sse, Empty(STOP, "content_filter");
    hw_responses_incomplete_json: "openai/hand-written/responses_incomplete_content_filter.json", Responses, Json(200), Empty(STOP, "content_filter");
    hw_responses_incomplete_partial: "openai/hand-written/responses_incomplete_partial.sse", Responses, Sse, Partial(STOP, "content_filter");
    hw_azure_filter_empty: "azure/hand-written/chat_stream_content_filter_empty.sse", AzureChat, Sse, Empty(STOP, "content_filter");
    hw_azure_filter_partial: "azure/hand-written/chat_stream_content_filter_partial.sse", AzureChat, Sse, Partial(STOP, "content_filter");
    hw_azure_prompt_400: "azure/hand-written/chat_prompt_content_filter_400.json", AzureChat, Json(400), Empty(BLOCKED, "content_filter");
    hw_azure_prompt_400_responses: "azure/hand-written/chat_prompt_content_filter_400.json", Responses, Json(400), Empty(BLOCKED, "content_filter");
}

/// The refusal text and the provider's words reach the typed metadata.
#[tokio::test]
async fn explanations_carry_the_providers_words() {
    async fn refusal_of(path: &str, api: Api, format: Format) -> Refusal {
        let body = body_of(path, api, format);
        let (status, kind, stream) = match format {
            Format::Json(status) => (status, "application/json", false),
            _ => (200, "text/event-stream", true),
        };
        let upstream = Upstream::new(vec![Reply::raw(status, kind, vec![body])]);
        let mut guard = RefusalGuardLayer::new()
            .rescue(false)
            .layer(upstream.service());
        let (parts, _) = call(&mut guard, api.request(stream)).await;
        parts.extensions.get::<Refusal>().cloned().expect("refusal")
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
