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
mod common;

use std::convert::Infallible;

use bytes::Bytes;
use common::{split_at, Chunked, Rng};
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use refusal_guard::refusal::{DeadReason, Provider, RefusalKind, RefusalSignal, WireApi};
use refusal_guard::telemetry::MemorySink;
use refusal_guard::{Outcome, Refusal, RefusalGuardLayer, RefusalHandle};
use tower::{Layer, Service, ServiceExt};

/// Files at least this large get random chunkings only.
const EVERY_SPLIT_LIMIT: usize = 64 * 1024;
/// Random chunkings per file for files under the limit.
const RANDOM_CHUNKINGS_SMALL: u64 = 8;
/// Random chunkings per file for larger files.
const RANDOM_CHUNKINGS_LARGE: u64 = 300;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    None,
    Error,
    EmptyRefusal(Option<&'static str>),
    PartialRefusal(&'static str),
    /// A blocked prompt after real output.
    PartialBlock(&'static str),
    BlockedPrompt(Option<&'static str>),
}
use Verdict::*;

const G: &str = "vertexai-sdk-test-data/googleai/";
const V: &str = "vertexai-sdk-test-data/vertexai/";
const VERCEL: &str = "vercel-ai/";

/// (directory, file, streaming, verdict), as in `shared/fixtures/README.md`.
/// The Imagen `predict` bodies are not chat fixtures (see the test at the end).
const FIXTURES: &[(&str, &str, bool, Verdict)] = &[
    (G, "streaming-failure-image-rejected.txt", true, Error),
    (
        G,
        "streaming-failure-prompt-blocked-safety.txt",
        true,
        BlockedPrompt(Some("SAFETY")),
    ),
    (
        G,
        "streaming-failure-recitation-no-content.txt",
        true,
        PartialRefusal("RECITATION"),
    ),
    (G, "streaming-success-basic-reply-long.txt", true, None),
    (G, "streaming-success-basic-reply-short.txt", true, None),
    (G, "streaming-success-citations.txt", true, None),
    (G, "streaming-success-code-execution.txt", true, None),
    (G, "streaming-success-empty-parts.txt", true, None),
    (G, "streaming-success-finish-message.txt", true, None),
    (G, "streaming-success-no-content-parts.txt", true, None),
    (
        G,
        "streaming-success-thinking-function-call-thought-summary-signature.txt",
        true,
        None,
    ),
    (
        G,
        "streaming-success-thinking-reply-thought-summary.txt",
        true,
        None,
    ),
    (G, "streaming-success-url-context.txt", true, None),
    (G, "unary-failure-api-key.json", false, Error),
    (G, "unary-failure-api-key.txt", false, Error),
    (
        G,
        "unary-failure-finish-reason-safety.json",
        false,
        PartialRefusal("SAFETY"),
    ),
    (
        G,
        "unary-failure-finish-reason-safety.txt",
        false,
        PartialRefusal("SAFETY"),
    ),
    (
        G,
        "unary-failure-generativelanguage-api-not-enabled.json",
        false,
        Error,
    ),
    // Judgement call: no blockReason, only a blockReasonMessage.
    (
        G,
        "unary-failure-only-prompt-feedback.json",
        false,
        BlockedPrompt(Option::None),
    ),
    (G, "unary-failure-unknown-model.json", false, Error),
    (G, "unary-failure-unknown-model.txt", false, Error),
    (
        G,
        "unary-failure-with-message-no-content.json",
        false,
        Error,
    ),
    (G, "unary-success-basic-reply-long.json", false, None),
    (G, "unary-success-basic-reply-long.txt", false, None),
    (G, "unary-success-basic-reply-short.json", false, None),
    (G, "unary-success-basic-reply-short.txt", false, None),
    (G, "unary-success-citations.json", false, None),
    (G, "unary-success-citations.txt", false, None),
    (G, "unary-success-code-execution.json", false, None),
    (G, "unary-success-google-maps-grounding.json", false, None),
    (
        G,
        "unary-success-google-search-grounding-empty-grounding-chunks.json",
        false,
        None,
    ),
    (G, "unary-success-google-search-grounding.json", false, None),
    (
        G,
        "unary-success-thinking-function-call-thought-summary-signature.json",
        false,
        None,
    ),
    (
        G,
        "unary-success-thinking-reply-thought-summary.json",
        false,
        None,
    ),
    (
        G,
        "unary-success-url-context-mixed-validity.json",
        false,
        None,
    ),
    (G, "unary-success-url-context.json", false, None),
    (V, "streaming-failure-api-key.txt", true, Error),
    (V, "streaming-failure-empty-content.txt", true, Error),
    (V, "streaming-failure-error-mid-stream.txt", true, Error),
    (
        V,
        "streaming-failure-finish-reason-safety.txt",
        true,
        PartialRefusal("SAFETY"),
    ),
    (V, "streaming-failure-http-error.txt", true, Error),
    (V, "streaming-failure-image-rejected.txt", true, Error),
    (V, "streaming-failure-invalid-json.txt", true, Error),
    (V, "streaming-failure-malformed-content.txt", true, Error),
    (
        V,
        "streaming-failure-prompt-blocked-safety-with-message.txt",
        true,
        BlockedPrompt(Some("SAFETY")),
    ),
    (
        V,
        "streaming-failure-prompt-blocked-safety.txt",
        true,
        BlockedPrompt(Some("SAFETY")),
    ),
    (
        V,
        "streaming-failure-recitation-no-content.txt",
        true,
        PartialRefusal("RECITATION"),
    ),
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
    (
        V,
        "streaming-success-image-invalid-safety-ratings.txt",
        true,
        None,
    ),
    (V, "streaming-success-quotes-escaped.txt", true, None),
    (
        V,
        "streaming-success-thinking-reply-thought-summary.txt",
        true,
        None,
    ),
    (V, "streaming-success-unknown-safety-enum.txt", true, None),
    (V, "streaming-success-url-context.txt", true, None),
    (V, "streaming-success-utf8.txt", true, None),
    (V, "unary-failure-api-key.json", false, Error),
    (
        V,
        "unary-failure-context-cache-model-doesnt-match.json",
        false,
        Error,
    ),
    (
        V,
        "unary-failure-context-cache-not-found.json",
        false,
        Error,
    ),
    (V, "unary-failure-empty-content.json", false, Error),
    (
        V,
        "unary-failure-finish-reason-safety-no-content.json",
        false,
        EmptyRefusal(Some("SAFETY")),
    ),
    (
        V,
        "unary-failure-finish-reason-safety.json",
        false,
        PartialRefusal("SAFETY"),
    ),
    (
        V,
        "unary-failure-firebaseml-api-not-enabled.json",
        false,
        Error,
    ),
    (
        V,
        "unary-failure-firebasevertexai-api-not-enabled.json",
        false,
        Error,
    ),
    (V, "unary-failure-http-error.json", false, Error),
    (V, "unary-failure-iam-permission-denied.json", false, Error),
    (V, "unary-failure-image-rejected.json", false, Error),
    (
        V,
        "unary-failure-invalid-context-cache-id.json",
        false,
        Error,
    ),
    (
        V,
        "unary-failure-invalid-location-url-not-found.html",
        false,
        Error,
    ),
    (V, "unary-failure-invalid-response.json", false, Error),
    (V, "unary-failure-malformed-content.json", false, Error),
    (V, "unary-failure-model-not-found.json", false, Error),
    (
        V,
        "unary-failure-prompt-blocked-safety-with-message.json",
        false,
        BlockedPrompt(Some("SAFETY")),
    ),
    (
        V,
        "unary-failure-prompt-blocked-safety.json",
        false,
        BlockedPrompt(Some("SAFETY")),
    ),
    (V, "unary-failure-quota-exceeded.json", false, Error),
    (
        V,
        "unary-failure-unknown-enum-finish-reason.json",
        false,
        None,
    ),
    // Judgement call: an unknown blockReason still blocks.
    (
        V,
        "unary-failure-unknown-enum-prompt-blocked.json",
        false,
        BlockedPrompt(Some("FAKE_NEW_BLOCK_REASON")),
    ),
    (V, "unary-failure-unknown-model.json", false, Error),
    (
        V,
        "unary-failure-unsupported-user-location.json",
        false,
        Error,
    ),
    (V, "unary-success-basic-reply-long.json", false, None),
    (V, "unary-success-basic-reply-short.json", false, None),
    (
        V,
        "unary-success-basic-response-long-usage-metadata.json",
        false,
        None,
    ),
    (V, "unary-success-citations-nolicense.json", false, None),
    (V, "unary-success-citations.json", false, None),
    (V, "unary-success-code-execution.json", false, None),
    (
        V,
        "unary-success-constraint-decoding-json.json",
        false,
        None,
    ),
    // countTokens bodies: not chat responses, must still pass untouched.
    (V, "unary-success-detailed-token-response.json", false, None),
    (V, "unary-success-empty-part.json", false, None),
    (V, "unary-success-empty-text-part.json", false, None),
    (
        V,
        "unary-success-function-call-complex-json-literal.json",
        false,
        None,
    ),
    (
        V,
        "unary-success-function-call-different-parallel-calls.json",
        false,
        None,
    ),
    (
        V,
        "unary-success-function-call-empty-arguments.json",
        false,
        None,
    ),
    (
        V,
        "unary-success-function-call-json-literal.json",
        false,
        None,
    ),
    (
        V,
        "unary-success-function-call-mixed-content.json",
        false,
        None,
    ),
    (
        V,
        "unary-success-function-call-no-arguments.json",
        false,
        None,
    ),
    (V, "unary-success-function-call-null.json", false, None),
    (
        V,
        "unary-success-function-call-parallel-calls.json",
        false,
        None,
    ),
    (
        V,
        "unary-success-function-call-with-arguments.json",
        false,
        None,
    ),
    (V, "unary-success-google-maps-grounding.json", false, None),
    (V, "unary-success-google-search-grounding.json", false, None),
    (
        V,
        "unary-success-image-invalid-safety-ratings.json",
        false,
        None,
    ),
    (V, "unary-success-implicit-caching.json", false, None),
    (V, "unary-success-including-severity.json", false, None),
    (V, "unary-success-missing-safety-ratings.json", false, None),
    (V, "unary-success-no-billable-characters.json", false, None),
    (V, "unary-success-partial-usage-metadata.json", false, None),
    (V, "unary-success-quote-reply.json", false, None),
    (
        V,
        "unary-success-thinking-reply-thought-summary.json",
        false,
        None,
    ),
    (V, "unary-success-total-tokens.json", false, None),
    (
        V,
        "unary-success-unknown-enum-safety-ratings.json",
        false,
        None,
    ),
    (
        V,
        "unary-success-url-context-missing-retrievedurl.json",
        false,
        None,
    ),
    (
        V,
        "unary-success-url-context-mixed-validity.json",
        false,
        None,
    ),
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

const HAND_WRITTEN: &[(&str, &[u8], Verdict)] = &[
    (
        "hand-written late blockReason",
        HAND_LATE_BLOCK,
        BlockedPrompt(Some("PROHIBITED_CONTENT")),
    ),
    (
        "hand-written late blockReason after text",
        HAND_LATE_BLOCK_AFTER_TEXT,
        PartialBlock("OTHER"),
    ),
    (
        "hand-written empty SAFETY stream",
        HAND_EMPTY_SAFETY,
        EmptyRefusal(Some("SAFETY")),
    ),
    (
        "hand-written function call then SAFETY",
        HAND_CALL_THEN_SAFETY,
        PartialRefusal("SAFETY"),
    ),
    (
        "hand-written refusal then stray text",
        HAND_REFUSAL_THEN_TEXT,
        EmptyRefusal(Some("BLOCKLIST")),
    ),
];

fn load(dir: &str, file: &str) -> Bytes {
    let raw = common::fixture(&format!("gemini/{dir}{file}"));
    if !file.ends_with(".chunks.txt") {
        return raw;
    }
    // vercel/ai JSON lines: one `data:` payload per line.
    let mut body = Vec::new();
    for line in raw.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        body.extend_from_slice(b"data: ");
        body.extend_from_slice(line);
        body.extend_from_slice(b"\n\n");
    }
    Bytes::from(body)
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

/// A guard over a one-shot upstream that answers with `chunks`.
async fn run(
    chunks: Vec<Bytes>,
    status: u16,
    content_type: &'static str,
    streaming: bool,
    sse: bool,
    sink: &MemorySink,
) -> (http::response::Parts, Bytes, usize) {
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = calls.clone();
    let chunks = std::sync::Arc::new(std::sync::Mutex::new(Some(chunks)));
    let upstream = tower::service_fn(move |_req: Request<Full<Bytes>>| {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let chunks = chunks.lock().unwrap().take().unwrap_or_default();
        async move {
            Ok::<_, Infallible>(
                Response::builder()
                    .status(status)
                    .header("content-type", content_type)
                    .body(Chunked::new(chunks))
                    .unwrap(),
            )
        }
    });
    let mut guard = RefusalGuardLayer::new()
        .rescue(false)
        .telemetry(sink.clone())
        .layer(upstream);
    let response = guard
        .ready()
        .await
        .unwrap()
        .call(request(streaming, sse))
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (parts, body, calls.load(std::sync::atomic::Ordering::SeqCst))
}

fn check(
    name: &str,
    json: bool,
    verdict: Verdict,
    expected: &Bytes,
    sink: &MemorySink,
    got: (http::response::Parts, Bytes, usize),
) {
    let (parts, body, calls) = got;
    assert!(body == *expected, "{name}: body not byte-identical");
    assert_eq!(calls, 1, "{name}: no recovery request expected");
    let handle = parts
        .extensions
        .get::<RefusalHandle>()
        .unwrap_or_else(|| panic!("{name}: no RefusalHandle"));
    assert!(handle.is_settled(), "{name}: handle not settled");
    let records = sink.take();
    let (kind, signal, category, outcome) = match verdict {
        None | Error => {
            assert!(records.is_empty(), "{name}: unexpected record {records:?}");
            assert_eq!(handle.get(), Option::None, "{name}");
            assert!(parts.extensions.get::<Refusal>().is_none(), "{name}");
            return;
        }
        EmptyRefusal(c) => (
            RefusalKind::Empty,
            RefusalSignal::StopReason,
            c,
            Outcome::Dead,
        ),
        BlockedPrompt(c) => (
            RefusalKind::Empty,
            RefusalSignal::BlockedPrompt,
            c,
            Outcome::Dead,
        ),
        PartialRefusal(c) => (
            RefusalKind::Partial,
            RefusalSignal::StopReason,
            Some(c),
            Outcome::Partial,
        ),
        PartialBlock(c) => (
            RefusalKind::Partial,
            RefusalSignal::BlockedPrompt,
            Some(c),
            Outcome::Partial,
        ),
    };
    assert_eq!(records.len(), 1, "{name}: {records:?}");
    let record = &records[0];
    assert_eq!(record.kind, Some(kind), "{name}");
    assert_eq!(record.signal, Some(signal), "{name}");
    assert_eq!(record.category.as_deref(), category, "{name}");
    assert_eq!(record.outcome, outcome, "{name}");
    assert_eq!(record.provider, Some(Provider::Google), "{name}");
    assert_eq!(
        record.wire_api,
        Some(WireApi::GeminiGenerateContent),
        "{name}"
    );
    assert_eq!(record.model.as_deref(), Some(MODEL), "{name}");
    let settled = handle
        .get()
        .unwrap_or_else(|| panic!("{name}: handle empty"));
    assert_eq!(settled.kind, kind, "{name}");
    assert_eq!(settled.category.as_deref(), category, "{name}");
    if outcome == Outcome::Dead {
        assert_eq!(record.reason, Some(DeadReason::RescueOff), "{name}");
        let typed = parts
            .extensions
            .get::<Refusal>()
            .unwrap_or_else(|| panic!("{name}: no typed Refusal"));
        assert_eq!(typed.signal, signal, "{name}");
        assert_eq!(typed.category.as_deref(), category, "{name}");
    } else if json {
        // A whole JSON body is judged before the response is returned.
        let typed = parts
            .extensions
            .get::<Refusal>()
            .unwrap_or_else(|| panic!("{name}: no typed Refusal"));
        assert_eq!(typed.kind, RefusalKind::Partial, "{name}");
    } else {
        // A stream is served at its first output; the partial refusal is
        // only known once its body has been read.
        assert!(parts.extensions.get::<Refusal>().is_none(), "{name}");
    }
}

/// Every chunking this file tests for one body.
fn chunkings(bytes: &Bytes, seed: u64) -> Vec<Vec<Bytes>> {
    let mut all = vec![vec![bytes.clone()]];
    let random = if bytes.len() < EVERY_SPLIT_LIMIT {
        all.extend((1..bytes.len()).map(|cut| split_at(bytes, &[cut])));
        RANDOM_CHUNKINGS_SMALL
    } else {
        RANDOM_CHUNKINGS_LARGE
    };
    let mut rng = Rng::new(seed);
    for i in 0..random {
        let max = [1, 3, 17, 64, 512][(i % 5) as usize];
        all.push(split_at(bytes, &rng.cuts(bytes.len(), max)));
    }
    all
}

/// A served body under every chunking, with the given verdict.
async fn judge_everywhere(name: &str, bytes: &Bytes, streaming: bool, verdict: Verdict) {
    let sink = MemorySink::new();
    let seed = bytes.len() as u64 * 31 + name.len() as u64;
    for chunks in chunkings(bytes, seed) {
        let (content_type, sse) = if streaming {
            ("text/event-stream", true)
        } else {
            ("application/json", false)
        };
        let got = run(chunks, 200, content_type, streaming, sse, &sink).await;
        check(name, !streaming, verdict, bytes, &sink, got);
    }
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
        let sink = MemorySink::new();
        let mut rng = Rng::new(array.len() as u64);
        for round in 0..6 {
            let chunks = if round == 0 {
                vec![array.clone()]
            } else {
                split_at(&array, &rng.cuts(array.len(), 1 + round * 40))
            };
            let got = run(chunks, 200, "application/json", true, false, &sink).await;
            check(
                &format!("{name} as array"),
                true,
                verdict,
                &array,
                &sink,
                got,
            );
        }
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
        let sink = MemorySink::new();
        let got = run(
            vec![bytes.clone()],
            status,
            "application/json",
            streaming,
            streaming,
            &sink,
        )
        .await;
        assert_eq!(got.0.status.as_u16(), status);
        check(
            &format!("{dir}{file} as HTTP {status}"),
            true,
            Error,
            &bytes,
            &sink,
            got,
        );
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
        let bytes = load(dir, file);
        let sink = MemorySink::new();
        let content_type = if streaming {
            "text/event-stream"
        } else {
            "application/json"
        };
        let (parts, _, _) = run(vec![bytes], 200, content_type, streaming, streaming, &sink).await;
        let refusal = parts.extensions.get::<Refusal>().expect("typed refusal");
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
        let sink = MemorySink::new();
        let served = bytes.clone();
        let upstream = tower::service_fn(move |_req: Request<Full<Bytes>>| {
            let served = served.clone();
            async move {
                Ok::<_, Infallible>(
                    Response::builder()
                        .header("content-type", "application/json")
                        .body(Chunked::new(vec![served]))
                        .unwrap(),
                )
            }
        });
        let mut guard = RefusalGuardLayer::new()
            .telemetry(sink.clone())
            .layer(upstream);
        let request = Request::post(
            "https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/us-central1/publishers/google/models/imagen-3.0-generate-002:predict",
        )
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(br#"{"instances":[{"prompt":"x"}]}"#)))
        .unwrap();
        let response = guard.ready().await.unwrap().call(request).await.unwrap();
        let (parts, body) = response.into_parts();
        assert_eq!(body.collect().await.unwrap().to_bytes(), bytes);
        assert!(sink.is_empty());
        assert!(
            parts.extensions.get::<RefusalHandle>().is_none(),
            "{file}: guarded"
        );
    }
}
