//! Every Gemini / Vertex AI chat fixture gets the verdict listed in the
//! shared fixtures README, through the public API, whatever the chunking.
//!
//! Chunkings: every file (all are under 64 KiB) is cut at every single byte
//! position (two chunks) and also fed in random chunkings; a file over the
//! limit would get `RANDOM_CHUNKINGS_LARGE` random chunkings instead.
//! Streaming fixtures are also
//! replayed in their non-SSE form (`streamGenerateContent` without
//! `alt=sse`: one JSON array of the same chunks).
//!
//! What the verdicts mean here (the guard runs with rescue off, so that every
//! body, refused or not, must come out byte-identical):
//! - `none` and `error`: no refusal record, the handle settles to `None`, one
//!   upstream request;
//! - `empty_refusal` / `blocked_prompt`: one record, kind empty, outcome
//!   dead (`rescue_off`), signal stop reason / blocked prompt, and the typed
//!   [`Refusal`] in the response extensions;
//! - `partial_refusal`: one record, kind partial, outcome partial, no
//!   recovery.
mod support;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use refusal_guard::refusal::{Provider, RefusalSignal, WireApi};
use refusal_guard::{RefusalGuardLayer, RefusalHandle};
use support::chunking::random_chunkings;
use support::fixtures::{json_lines_as_sse, Framing};
use support::judge::{judge_chunkings, judge_every_chunking, Expected, Refused, Source, Verdict};
use support::*;
use Verdict::{Error, None};

const fn empty_refusal(category: Option<&'static str>) -> Verdict {
    Verdict::Empty(Refused::by(RefusalSignal::StopReason, category))
}

const fn blocked_prompt(category: Option<&'static str>) -> Verdict {
    Verdict::Empty(Refused::by(RefusalSignal::BlockedPrompt, category))
}

const fn partial_refusal(category: &'static str) -> Verdict {
    Verdict::Partial(Refused::by(RefusalSignal::StopReason, Some(category)))
}

/// A blocked prompt after real output.
const fn partial_block(category: &'static str) -> Verdict {
    Verdict::Partial(Refused::by(RefusalSignal::BlockedPrompt, Some(category)))
}

const G: &str = "vertexai-sdk-test-data/googleai/";
const V: &str = "vertexai-sdk-test-data/vertexai/";
const VERCEL: &str = "vercel-ai/";

/// (directory, file, streaming, verdict), as in `shared/fixtures/README.md`.
/// The Imagen `predict` bodies are not chat fixtures (see the test at the end).
#[rustfmt::skip]
const FIXTURES: &[(&str, &str, bool, Verdict)] = &[
    (G, "streaming-failure-image-rejected.txt", true, Error),
    (G, "streaming-failure-prompt-blocked-safety.txt", true, blocked_prompt(Some("SAFETY"))),
    (G, "streaming-failure-recitation-no-content.txt", true, partial_refusal("RECITATION")),
    (G, "streaming-success-basic-reply-long.txt", true, None),
    (G, "streaming-success-basic-reply-short.txt", true, None),
    (G, "streaming-success-citations.txt", true, None),
    (G, "streaming-success-code-execution.txt", true, None),
    (G, "streaming-success-empty-parts.txt", true, None),
    (G, "streaming-success-finish-message.txt", true, None),
    (G, "streaming-success-no-content-parts.txt", true, None),
    (G, "streaming-success-thinking-function-call-thought-summary-signature.txt", true, None),
    (G, "streaming-success-thinking-reply-thought-summary.txt", true, None),
    (G, "streaming-success-url-context.txt", true, None),
    (G, "unary-failure-api-key.json", false, Error),
    (G, "unary-failure-api-key.txt", false, Error),
    (G, "unary-failure-finish-reason-safety.json", false, partial_refusal("SAFETY")),
    (G, "unary-failure-finish-reason-safety.txt", false, partial_refusal("SAFETY")),
    (G, "unary-failure-generativelanguage-api-not-enabled.json", false, Error),
    // Judgement call: no blockReason, only a blockReasonMessage.
    (G, "unary-failure-only-prompt-feedback.json", false, blocked_prompt(Option::None)),
    (G, "unary-failure-unknown-model.json", false, Error),
    (G, "unary-failure-unknown-model.txt", false, Error),
    (G, "unary-failure-with-message-no-content.json", false, Error),
    (G, "unary-success-basic-reply-long.json", false, None),
    (G, "unary-success-basic-reply-long.txt", false, None),
    (G, "unary-success-basic-reply-short.json", false, None),
    (G, "unary-success-basic-reply-short.txt", false, None),
    (G, "unary-success-citations.json", false, None),
    (G, "unary-success-citations.txt", false, None),
    (G, "unary-success-code-execution.json", false, None),
    (G, "unary-success-google-maps-grounding.json", false, None),
    (G, "unary-success-google-search-grounding-empty-grounding-chunks.json", false, None),
    (G, "unary-success-google-search-grounding.json", false, None),
    (G, "unary-success-thinking-function-call-thought-summary-signature.json", false, None),
    (G, "unary-success-thinking-reply-thought-summary.json", false, None),
    (G, "unary-success-url-context-mixed-validity.json", false, None),
    (G, "unary-success-url-context.json", false, None),
    (V, "streaming-failure-api-key.txt", true, Error),
    (V, "streaming-failure-empty-content.txt", true, Error),
    (V, "streaming-failure-error-mid-stream.txt", true, Error),
    (V, "streaming-failure-finish-reason-safety.txt", true, partial_refusal("SAFETY")),
    (V, "streaming-failure-http-error.txt", true, Error),
    (V, "streaming-failure-image-rejected.txt", true, Error),
    (V, "streaming-failure-invalid-json.txt", true, Error),
    (V, "streaming-failure-malformed-content.txt", true, Error),
    (V, "streaming-failure-prompt-blocked-safety-with-message.txt", true, blocked_prompt(Some("SAFETY"))),
    (V, "streaming-failure-prompt-blocked-safety.txt", true, blocked_prompt(Some("SAFETY"))),
    (V, "streaming-failure-recitation-no-content.txt", true, partial_refusal("RECITATION")),
    // Judgement call: unknown finish reasons are not refusals.
    (V, "streaming-failure-unknown-finish-enum.txt", true, None),
    (V, "streaming-failure-unknown-model.txt", true, Error),
    (V, "streaming-success-basic-reply-long.txt", true, None),
    (V, "streaming-success-basic-reply-parts.txt", true, None),
    (V, "streaming-success-basic-reply-short.txt", true, None),
    (V, "streaming-success-citations.txt", true, None),
    (V, "streaming-success-code-execution.txt", true, None),
    (V, "streaming-success-empty-text-part.txt", true, None),
    (V, "streaming-success-function-call-short.txt", true, None),
    (V, "streaming-success-image-invalid-safety-ratings.txt", true, None),
    (V, "streaming-success-quotes-escaped.txt", true, None),
    (V, "streaming-success-thinking-reply-thought-summary.txt", true, None),
    (V, "streaming-success-unknown-safety-enum.txt", true, None),
    (V, "streaming-success-url-context.txt", true, None),
    (V, "streaming-success-utf8.txt", true, None),
    (V, "unary-failure-api-key.json", false, Error),
    (V, "unary-failure-context-cache-model-doesnt-match.json", false, Error),
    (V, "unary-failure-context-cache-not-found.json", false, Error),
    (V, "unary-failure-empty-content.json", false, Error),
    (V, "unary-failure-finish-reason-safety-no-content.json", false, empty_refusal(Some("SAFETY"))),
    (V, "unary-failure-finish-reason-safety.json", false, partial_refusal("SAFETY")),
    (V, "unary-failure-firebaseml-api-not-enabled.json", false, Error),
    (V, "unary-failure-firebasevertexai-api-not-enabled.json", false, Error),
    (V, "unary-failure-http-error.json", false, Error),
    (V, "unary-failure-iam-permission-denied.json", false, Error),
    (V, "unary-failure-image-rejected.json", false, Error),
    (V, "unary-failure-invalid-context-cache-id.json", false, Error),
    (V, "unary-failure-invalid-location-url-not-found.html", false, Error),
    (V, "unary-failure-invalid-response.json", false, Error),
    (V, "unary-failure-malformed-content.json", false, Error),
    (V, "unary-failure-model-not-found.json", false, Error),
    (V, "unary-failure-prompt-blocked-safety-with-message.json", false, blocked_prompt(Some("SAFETY"))),
    (V, "unary-failure-prompt-blocked-safety.json", false, blocked_prompt(Some("SAFETY"))),
    (V, "unary-failure-quota-exceeded.json", false, Error),
    (V, "unary-failure-unknown-enum-finish-reason.json", false, None),
    // Judgement call: an unknown blockReason still blocks.
    (V, "unary-failure-unknown-enum-prompt-blocked.json", false, blocked_prompt(Some("FAKE_NEW_BLOCK_REASON"))),
    (V, "unary-failure-unknown-model.json", false, Error),
    (V, "unary-failure-unsupported-user-location.json", false, Error),
    (V, "unary-success-basic-reply-long.json", false, None),
    (V, "unary-success-basic-reply-short.json", false, None),
    (V, "unary-success-basic-response-long-usage-metadata.json", false, None),
    (V, "unary-success-citations-nolicense.json", false, None),
    (V, "unary-success-citations.json", false, None),
    (V, "unary-success-code-execution.json", false, None),
    (V, "unary-success-constraint-decoding-json.json", false, None),
    // countTokens bodies: not chat responses, must still pass untouched.
    (V, "unary-success-detailed-token-response.json", false, None),
    (V, "unary-success-empty-part.json", false, None),
    (V, "unary-success-empty-text-part.json", false, None),
    (V, "unary-success-function-call-complex-json-literal.json", false, None),
    (V, "unary-success-function-call-different-parallel-calls.json", false, None),
    (V, "unary-success-function-call-empty-arguments.json", false, None),
    (V, "unary-success-function-call-json-literal.json", false, None),
    (V, "unary-success-function-call-mixed-content.json", false, None),
    (V, "unary-success-function-call-no-arguments.json", false, None),
    (V, "unary-success-function-call-null.json", false, None),
    (V, "unary-success-function-call-parallel-calls.json", false, None),
    (V, "unary-success-function-call-with-arguments.json", false, None),
    (V, "unary-success-google-maps-grounding.json", false, None),
    (V, "unary-success-google-search-grounding.json", false, None),
    (V, "unary-success-image-invalid-safety-ratings.json", false, None),
    (V, "unary-success-implicit-caching.json", false, None),
    (V, "unary-success-including-severity.json", false, None),
    (V, "unary-success-missing-safety-ratings.json", false, None),
    (V, "unary-success-no-billable-characters.json", false, None),
    (V, "unary-success-partial-usage-metadata.json", false, None),
    (V, "unary-success-quote-reply.json", false, None),
    (V, "unary-success-thinking-reply-thought-summary.json", false, None),
    (V, "unary-success-total-tokens.json", false, None),
    (V, "unary-success-unknown-enum-safety-ratings.json", false, None),
    (V, "unary-success-url-context-missing-retrievedurl.json", false, None),
    (V, "unary-success-url-context-mixed-validity.json", false, None),
    (V, "unary-success-url-context.json", false, None),
    (V, "unary-success-usage-metadata.json", false, None),
    (VERCEL, "google-text.chunks.txt", true, None),
    (VERCEL, "google-reasoning-gemini3.chunks.txt", true, None),
    (VERCEL, "google-tool-call-gemini3.chunks.txt", true, None),
    (VERCEL, "google-429-retry-info.json", false, Error),
];

/// Hand-written (not recorded): the shared fixtures have no stream whose
/// `promptFeedback.blockReason` arrives after earlier chunks. Built from the
/// documented chunk shape: a thought-only chunk, an empty text part, then the
/// prompt feedback on its own, CRLF-separated as Gemini sends them.
const HAND_LATE_BLOCK: &[u8] = b"data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Weighing the request.\",\"thought\": true}],\"role\": \"model\"},\"index\": 0}],\"modelVersion\": \"gemini-2.5-pro\"}\r\n\r\n\
data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"\"}],\"role\": \"model\"},\"index\": 0}],\"modelVersion\": \"gemini-2.5-pro\"}\r\n\r\n\
data: {\"promptFeedback\": {\"blockReason\": \"PROHIBITED_CONTENT\"},\"usageMetadata\": {\"promptTokenCount\": 12,\"totalTokenCount\": 12},\"modelVersion\": \"gemini-2.5-pro\"}\r\n\r\n";

/// Hand-written (not recorded): the same late block after real text, which
/// makes it a partial refusal (the text was already sent).
const HAND_LATE_BLOCK_AFTER_TEXT: &[u8] = b"data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Here is the first step.\"}],\"role\": \"model\"},\"index\": 0}],\"modelVersion\": \"gemini-2.5-pro\"}\r\n\r\n\
data: {\"promptFeedback\": {\"blockReason\": \"OTHER\"},\"modelVersion\": \"gemini-2.5-pro\"}\r\n\r\n";

/// Hand-written (not recorded): a streamed empty SAFETY refusal after a
/// thought, which no recorded stream shows (the recorded SAFETY stream has
/// text first).
const HAND_EMPTY_SAFETY: &[u8] = b"data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Thinking about it.\",\"thought\": true}],\"role\": \"model\"},\"index\": 0}]}\n\n\
data: {\"candidates\": [{\"finishReason\": \"SAFETY\",\"index\": 0,\"safetyRatings\": [{\"category\": \"HARM_CATEGORY_DANGEROUS_CONTENT\",\"probability\": \"HIGH\",\"blocked\": true}]}]}\n\n";

/// Hand-written (not recorded): a function call (no text), then a SAFETY
/// stop in a later chunk. The call is real output, so the refusal is partial.
const HAND_CALL_THEN_SAFETY: &[u8] = b"data: {\"candidates\": [{\"content\": {\"parts\": [{\"functionCall\": {\"name\": \"run_scan\",\"args\": {}}}],\"role\": \"model\"},\"index\": 0}]}\r\n\r\n\
data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"\"}],\"role\": \"model\"},\"finishReason\": \"SAFETY\",\"index\": 0}]}\r\n\r\n";

/// Hand-written (not recorded): a refusal chunk followed by a stray text
/// chunk. The refusal came first, so nothing real preceded it: empty.
const HAND_REFUSAL_THEN_TEXT: &[u8] = b"data: {\"candidates\": [{\"finishReason\": \"BLOCKLIST\",\"index\": 0}]}\n\n\
data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"stray\"}],\"role\": \"model\"},\"index\": 0}]}\n\n";

#[rustfmt::skip]
const HAND_WRITTEN: &[(&str, &[u8], Verdict)] = &[
    ("hand-written late blockReason", HAND_LATE_BLOCK, blocked_prompt(Some("PROHIBITED_CONTENT"))),
    ("hand-written late blockReason after text", HAND_LATE_BLOCK_AFTER_TEXT, partial_block("OTHER")),
    ("hand-written empty SAFETY stream", HAND_EMPTY_SAFETY, empty_refusal(Some("SAFETY"))),
    ("hand-written function call then SAFETY", HAND_CALL_THEN_SAFETY, partial_refusal("SAFETY")),
    ("hand-written refusal then stray text", HAND_REFUSAL_THEN_TEXT, empty_refusal(Some("BLOCKLIST"))),
];

fn load(dir: &str, file: &str) -> Bytes {
    let raw = fixture(&format!("gemini/{dir}{file}"));
    if !file.ends_with(".chunks.txt") {
        return raw;
    }
    // vercel/ai JSON lines: one `data:` payload per line.
    json_lines_as_sse(&raw, Framing::Data, false)
}

/// The `data:` payloads of an SSE body as one JSON array: the same chunks as
/// `streamGenerateContent` sends them without `alt=sse`. `None` when the body
/// has no data lines (a raw error body).
fn as_json_array(sse: &[u8]) -> Option<Bytes> {
    let text = std::str::from_utf8(sse).ok()?;
    let payloads: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .collect();
    if payloads.is_empty() {
        return Option::None;
    }
    Some(Bytes::from(format!("[{}]", payloads.join(",\r\n"))))
}

const MODEL: &str = "gemini-2.5-pro";

fn request(streaming: bool, sse: bool) -> Request<Full<Bytes>> {
    let method = if streaming {
        "streamGenerateContent"
    } else {
        "generateContent"
    };
    let query = if sse {
        "?alt=sse&key=test"
    } else {
        "?key=test"
    };
    let body = serde_json::to_vec(&serde_json::json!({
        "contents": [{"role": "user", "parts": [{"text": "Tell me about strawberries."}]}],
    }))
    .unwrap();
    Request::post(format!(
        "https://generativelanguage.googleapis.com/v1beta/models/{MODEL}:{method}{query}"
    ))
    .header("content-type", "application/json")
    .body(Full::new(Bytes::from(body)))
    .unwrap()
}

/// Every record names Gemini and the model of the request.
const SOURCE: Source = Source {
    provider: Provider::Google,
    wire_api: WireApi::GeminiGenerateContent,
    model: Some(MODEL),
};

/// A 200 body, JSON unless streamed, with this verdict.
fn served(streaming: bool, verdict: Verdict) -> Expected {
    Expected::ok(!streaming, verdict).from(SOURCE)
}

/// A served body under every chunking, with the given verdict.
async fn judge_everywhere(name: &str, bytes: &Bytes, streaming: bool, verdict: Verdict) {
    let expected = served(streaming, verdict);
    judge_every_chunking(name, &|| request(streaming, streaming), bytes, &expected).await;
}

/// The fixtures of one directory, one streaming kind, under every chunking.
async fn judge_fixtures(dir: &str, streaming: bool) {
    let mut judged = 0;
    for &(d, file, s, verdict) in FIXTURES {
        if d != dir || s != streaming {
            continue;
        }
        let bytes = load(d, file);
        judge_everywhere(&format!("{d}{file}"), &bytes, streaming, verdict).await;
        judged += 1;
    }
    assert!(judged > 0);
}

// Split by directory and kind so the test harness can run them in parallel.

#[tokio::test]
async fn googleai_streams_get_their_verdicts_under_every_chunking() {
    judge_fixtures(G, true).await;
}

#[tokio::test]
async fn googleai_bodies_get_their_verdicts_under_every_chunking() {
    judge_fixtures(G, false).await;
}

#[tokio::test]
async fn vertexai_streams_get_their_verdicts_under_every_chunking() {
    judge_fixtures(V, true).await;
}

#[tokio::test]
async fn vertexai_bodies_get_their_verdicts_under_every_chunking() {
    judge_fixtures(V, false).await;
}

#[tokio::test]
async fn vercel_fixtures_get_their_verdicts_under_every_chunking() {
    judge_fixtures(VERCEL, true).await;
    judge_fixtures(VERCEL, false).await;
}

#[test]
fn the_table_covers_every_chat_fixture_once() {
    assert_eq!(FIXTURES.len(), 124);
    let mut names: Vec<String> = FIXTURES.iter().map(|f| format!("{}{}", f.0, f.1)).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), FIXTURES.len());
    for name in &names {
        let path = format!(
            "{}/tests/fixtures/gemini/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        assert!(std::path::Path::new(&path).is_file(), "{path}");
    }
}

#[tokio::test]
async fn hand_written_streams_get_their_verdicts_under_every_chunking() {
    for &(name, bytes, verdict) in HAND_WRITTEN {
        judge_everywhere(name, &Bytes::from_static(bytes), true, verdict).await;
    }
}

/// `streamGenerateContent` without `alt=sse` answers with a JSON array of
/// the same chunks: judged element by element, same verdicts.
#[tokio::test]
async fn streams_as_json_arrays_get_the_same_verdicts() {
    let streams =
        FIXTURES
            .iter()
            .filter(|f| f.2)
            .map(|&(dir, file, _, verdict)| (format!("{dir}{file}"), load(dir, file), verdict))
            .chain(HAND_WRITTEN.iter().map(|&(name, bytes, verdict)| {
                (name.to_owned(), Bytes::from_static(bytes), verdict)
            }));
    let mut arrays = 0;
    for (name, sse, verdict) in streams {
        let Some(array) = as_json_array(&sse) else {
            continue;
        };
        arrays += 1;
        let mut chunkings = vec![vec![array.clone()]];
        chunkings.extend(random_chunkings(&array, 5));
        let expected = served(false, verdict);
        let name = format!("{name} as array");
        judge_chunkings(
            &name,
            &|| request(true, false),
            &array,
            chunkings,
            &expected,
        )
        .await;
    }
    assert!(arrays > 30, "only {arrays} streams had data lines");
}

/// Error bodies served with the status they name pass through untouched.
#[tokio::test]
async fn error_bodies_with_their_status_pass_through() {
    let mut checked = 0;
    for &(dir, file, streaming, verdict) in FIXTURES {
        if verdict != Error {
            continue;
        }
        let bytes = load(dir, file);
        let status = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v["error"]["code"].as_u64())
            .map(|c| c as u16)
            .filter(|c| *c >= 400);
        let Some(status) = status else {
            continue;
        };
        checked += 1;
        let expected = served(false, Error).with_status(status);
        let name = format!("{dir}{file} as HTTP {status}");
        let chunkings = vec![vec![bytes.clone()]];
        judge_chunkings(
            &name,
            &|| request(streaming, streaming),
            &bytes,
            chunkings,
            &expected,
        )
        .await;
    }
    assert!(checked >= 20, "{checked}");
}

/// The explanation comes from the provider: the blocked safety category or
/// its message.
#[tokio::test]
async fn explanations_carry_the_providers_words() {
    let cases: &[(&str, &str, bool, &str)] = &[
        (
            V,
            "unary-failure-finish-reason-safety-no-content.json",
            false,
            "HARM_CATEGORY_HARASSMENT",
        ),
        (
            G,
            "streaming-failure-prompt-blocked-safety.txt",
            true,
            "HARM_CATEGORY_HATE_SPEECH",
        ),
        (
            V,
            "streaming-failure-prompt-blocked-safety-with-message.txt",
            true,
            "Reasons",
        ),
        (
            G,
            "unary-failure-only-prompt-feedback.json",
            false,
            "Message",
        ),
    ];
    for &(dir, file, streaming, needle) in cases {
        let expected = served(streaming, Verdict::None);
        let reply = Reply::raw(200, expected.content_type(), vec![load(dir, file)]);
        let request = request(streaming, streaming);
        let layer = RefusalGuardLayer::new().rescue(false);
        let done = exchange(layer, vec![reply], request).await;
        let refusal = done.refusal().expect("typed refusal");
        let explanation = refusal.explanation.clone().unwrap_or_default();
        assert!(explanation.contains(needle), "{file}: {explanation:?}");
    }
}

/// Imagen `predict` is not a chat API: even a body whose images were all
/// filtered passes through without a verdict.
#[tokio::test]
async fn imagen_predict_is_not_guarded() {
    for file in [
        "unary-failure-generate-images-all-filtered.json",
        "unary-failure-generate-images-gcs-some-filtered.json",
    ] {
        let bytes = load(V, file);
        let request = Request::post(
            "https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/us-central1/publishers/google/models/imagen-3.0-generate-002:predict",
        )
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(br#"{"instances":[{"prompt":"x"}]}"#)))
        .unwrap();
        let replies = vec![Reply::Json(bytes.clone())];
        let done = exchange(RefusalGuardLayer::new(), replies, request).await;
        assert_eq!(done.body, bytes);
        assert!(done.sink.is_empty());
        assert!(
            done.parts.extensions.get::<RefusalHandle>().is_none(),
            "{file}: guarded"
        );
    }
}
