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

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use refusal_guard::refusal::{DeadReason, Provider, RefusalSignal, WireApi};
use refusal_guard::{RefusalGuardLayer, RefusalHandle};
use support::chunking::random_chunkings;
use support::fixtures::{fixtures_dir, json_lines_as_sse, Framing};
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

/// What a fixture's name says: a `failure` (or an error body) passes
/// through as an error, anything else (`success`, including the countTokens
/// bodies, which are not chat responses) passes untouched; `streaming-` and
/// vercel/ai `.chunks.txt` files are streams. [`VERDICTS`] lists where the
/// shared `shared/fixtures/README.md` says otherwise.
fn named_verdict(file: &str) -> Verdict {
    if file.contains("failure") || file.contains("error") || file.contains("429") {
        Error
    } else {
        None
    }
}

/// The verdicts that differ from what the name says, as in the README.
#[rustfmt::skip]
const VERDICTS: &[(&str, &str, Verdict)] = &[
    (G, "streaming-failure-prompt-blocked-safety.txt", blocked_prompt(Some("SAFETY"))),
    (G, "streaming-failure-recitation-no-content.txt", partial_refusal("recitation")),
    (G, "unary-failure-finish-reason-safety.json", partial_refusal("SAFETY")),
    (G, "unary-failure-finish-reason-safety.txt", partial_refusal("SAFETY")),
    // Judgement call: no blockReason, only a blockReasonMessage.
    (G, "unary-failure-only-prompt-feedback.json", blocked_prompt(Option::None)),
    (V, "streaming-failure-finish-reason-safety.txt", partial_refusal("SAFETY")),
    (V, "streaming-failure-prompt-blocked-safety-with-message.txt", blocked_prompt(Some("SAFETY"))),
    (V, "streaming-failure-prompt-blocked-safety.txt", blocked_prompt(Some("SAFETY"))),
    (V, "streaming-failure-recitation-no-content.txt", partial_refusal("recitation")),
    // Judgement call: unknown finish reasons are not refusals.
    (V, "streaming-failure-unknown-finish-enum.txt", None),
    (V, "unary-failure-finish-reason-safety-no-content.json", empty_refusal(Some("SAFETY"))),
    (V, "unary-failure-finish-reason-safety.json", partial_refusal("SAFETY")),
    (V, "unary-failure-prompt-blocked-safety-with-message.json", blocked_prompt(Some("SAFETY"))),
    (V, "unary-failure-prompt-blocked-safety.json", blocked_prompt(Some("SAFETY"))),
    (V, "unary-failure-unknown-enum-finish-reason.json", None),
    // Judgement call: an unknown blockReason still blocks.
    (V, "unary-failure-unknown-enum-prompt-blocked.json", blocked_prompt(Some("FAKE_NEW_BLOCK_REASON"))),
];

/// The Imagen `predict` bodies are not chat fixtures (see the test at the end).
const IMAGEN: &[&str] = &[
    "unary-failure-generate-images-all-filtered.json",
    "unary-failure-generate-images-gcs-some-filtered.json",
];

/// Every chat fixture: (directory, file, streaming, verdict).
fn fixtures() -> Vec<(&'static str, String, bool, Verdict)> {
    let mut all = Vec::new();
    for dir in [G, V, VERCEL] {
        let path = fixtures_dir().join("gemini").join(dir);
        let mut files: Vec<String> = std::fs::read_dir(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|file| !IMAGEN.contains(&file.as_str()))
            .collect();
        files.sort();
        for file in files {
            let streaming = file.starts_with("streaming-") || file.ends_with(".chunks.txt");
            let verdict = VERDICTS
                .iter()
                .find(|&&(d, f, _)| d == dir && f == file)
                .map_or_else(|| named_verdict(&file), |row| row.2);
            all.push((dir, file, streaming, verdict));
        }
    }
    all
}

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

/// Hand-written (not recorded): an empty copyright stop. No recorded stream
/// has one (both recorded RECITATION streams have text first).
const HAND_EMPTY_RECITATION: &[u8] = b"data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Recalling it.\",\"thought\": true}],\"role\": \"model\"},\"index\": 0}]}\r\n\r\n\
data: {\"candidates\": [{\"finishReason\": \"RECITATION\",\"citationMetadata\": {\"citationSources\": [{\"startIndex\": 0,\"endIndex\": 80,\"uri\": \"https://www.google.com/\"}]},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 9,\"totalTokenCount\": 9}}\r\n\r\n";

/// Hand-written (not recorded): the two faults the SDKs' test data has no
/// stream of, ending a stream without output.
const HAND_MISSING_SIGNATURE: &[u8] = b"data: {\"candidates\": [{\"content\": {\"role\": \"model\",\"parts\": []},\"finishReason\": \"MISSING_THOUGHT_SIGNATURE\",\"index\": 0}],\"modelVersion\": \"gemini-2.5-pro\"}\r\n\r\n";
const HAND_MALFORMED_RESPONSE: &[u8] = b"data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Weighing it.\",\"thought\": true}],\"role\": \"model\"},\"index\": 0}]}\r\n\r\n\
data: {\"candidates\": [{\"finishReason\": \"MALFORMED_RESPONSE\",\"index\": 0}],\"modelVersion\": \"gemini-2.5-pro\"}\r\n\r\n";

/// An empty copyright stop with rescue off: no rescue was ever in its
/// steps, so it is dead for being no safety decline.
const EMPTY_RECITATION: Verdict = Verdict::Empty(
    Refused::by(RefusalSignal::StopReason, Some("recitation")).dead_for(DeadReason::NotSafety),
);

#[rustfmt::skip]
const HAND_WRITTEN: &[(&str, &[u8], Verdict)] = &[
    ("hand-written empty RECITATION stream", HAND_EMPTY_RECITATION, EMPTY_RECITATION),
    ("hand-written MISSING_THOUGHT_SIGNATURE stream", HAND_MISSING_SIGNATURE, None),
    ("hand-written MALFORMED_RESPONSE stream", HAND_MALFORMED_RESPONSE, None),
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
    for (d, file, s, verdict) in fixtures() {
        if d != dir || s != streaming {
            continue;
        }
        let bytes = load(d, &file);
        judge_everywhere(&format!("{d}{file}"), &bytes, streaming, verdict).await;
        judged += 1;
    }
    assert!(judged > 0);
}

/// One test per line, each judging the fixtures of a directory and a
/// streaming kind: split so the test harness can run them in parallel.
macro_rules! judged {
    ($($name:ident: $($dir:ident $streaming:literal),+;)*) => {$(
        #[tokio::test]
        async fn $name() {
            $(judge_fixtures($dir, $streaming).await;)+
        }
    )*};
}

judged! {
    googleai_streams_get_their_verdicts_under_every_chunking: G true;
    googleai_bodies_get_their_verdicts_under_every_chunking: G false;
    vertexai_streams_get_their_verdicts_under_every_chunking: V true;
    vertexai_bodies_get_their_verdicts_under_every_chunking: V false;
    vercel_fixtures_get_their_verdicts_under_every_chunking: VERCEL true, VERCEL false;
}

#[test]
fn the_table_covers_every_chat_fixture_once() {
    let fixtures = fixtures();
    assert_eq!(fixtures.len(), 124);
    let mut names: Vec<String> = fixtures.iter().map(|f| format!("{}{}", f.0, f.1)).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), fixtures.len());
    for &(dir, file, _) in VERDICTS {
        assert!(names.contains(&format!("{dir}{file}")), "{dir}{file}");
    }
    for name in &names {
        let path = format!(
            "{}/tests/fixtures/gemini/{name}",
            concat!(env!("CARGO_MANIFEST_DIR"), "/..")
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
        fixtures()
            .into_iter()
            .filter(|f| f.2)
            .map(|(dir, file, _, verdict)| (format!("{dir}{file}"), load(dir, &file), verdict))
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
        let array_request = || request(true, false);
        judge_chunkings(&name, &array_request, &array, chunkings, &expected).await;
    }
    assert!(arrays > 30, "only {arrays} streams had data lines");
}

/// Error bodies served with the status they name pass through untouched.
#[tokio::test]
async fn error_bodies_with_their_status_pass_through() {
    let mut checked = 0;
    for (dir, file, streaming, verdict) in fixtures() {
        if verdict != Error {
            continue;
        }
        let bytes = load(dir, &file);
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
        let same_request = || request(streaming, streaming);
        judge_chunkings(&name, &same_request, &bytes, chunkings, &expected).await;
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
        let upstream = Upstream::new(vec![Reply::Json(bytes.clone())]).serving(":predict");
        let done = exchange_on(upstream, RefusalGuardLayer::new(), request).await;
        assert_eq!(done.body, bytes);
        assert!(done.sink.is_empty());
        assert!(
            done.parts.extensions.get::<RefusalHandle>().is_none(),
            "{file}: guarded"
        );
    }
}
