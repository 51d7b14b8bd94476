//! The recovery ladder on Gemini and Vertex AI (and Claude on Vertex AI),
//! through the public API.

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use refusal_guard::recovery::FallbackChains;
use refusal_guard::refusal::{
    AttemptResult, AttemptStep, DeadReason, Provider, RefusalKind, RefusalSignal, WireApi,
};
use refusal_guard::telemetry::MemorySink;
use refusal_guard::{Outcome, RefusalGuardLayer, RefusalHandle};
use serde_json::{json, Value};
use support::*;
use tower::Layer;

const GEMINI_API: &str = "https://generativelanguage.googleapis.com";
const VERTEX: &str = "https://us-central1-aiplatform.googleapis.com/v1/projects/my-project/locations/us-central1/publishers/google";

const V: &str = "gemini/vertexai-sdk-test-data/vertexai/";
const G: &str = "gemini/vertexai-sdk-test-data/googleai/";

/// Hand-written (not recorded): a thought, then an empty SAFETY stop.
const EMPTY_SAFETY_STREAM: &[u8] = b"data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Thinking about it.\",\"thought\": true}],\"role\": \"model\"},\"index\": 0}],\"modelVersion\": \"gemini-2.5-pro\"}\r\n\r\n\
data: {\"candidates\": [{\"finishReason\": \"SAFETY\",\"index\": 0,\"safetyRatings\": [{\"category\": \"HARM_CATEGORY_DANGEROUS_CONTENT\",\"probability\": \"HIGH\",\"blocked\": true}]}],\"modelVersion\": \"gemini-2.5-pro\"}\r\n\r\n";

/// Hand-written (not recorded): a `promptFeedback.blockReason` that arrives
/// after two chunks without real output.
const LATE_BLOCK_STREAM: &[u8] = b"data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Weighing the request.\",\"thought\": true}],\"role\": \"model\"},\"index\": 0}]}\r\n\r\n\
data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \" \"}],\"role\": \"model\"},\"index\": 0}]}\r\n\r\n\
data: {\"promptFeedback\": {\"blockReason\": \"PROHIBITED_CONTENT\"}}\r\n\r\n";

fn ok_stream() -> Bytes {
    fixture(&format!("{G}streaming-success-basic-reply-short.txt"))
}

fn ok_json() -> Bytes {
    fixture(&format!("{V}unary-success-basic-reply-short.json"))
}

/// A generateContent request body with a system instruction and one user turn.
fn body(user: &str) -> Value {
    json!({
        "systemInstruction": {"parts": [{"text": "You are a security assistant."}]},
        "contents": [{"role": "user", "parts": [{"text": user}]}],
        "generationConfig": {"temperature": 0.2},
    })
}

fn gemini_post(url: &str, body: &Value) -> Request<Full<Bytes>> {
    let bytes = serde_json::to_vec(body).unwrap();
    Request::post(url)
        .header("content-type", "application/json")
        .header("content-length", bytes.len())
        .header("x-goog-api-key", "test-key")
        .body(Full::new(Bytes::from(bytes)))
        .unwrap()
}

/// A streamed request to `gemini-2.5-pro` with this user text.
fn stream_request(user: &str) -> Request<Full<Bytes>> {
    gemini_post(&stream_url("gemini-2.5-pro"), &body(user))
}

fn stream_url(model: &str) -> String {
    format!("{GEMINI_API}/v1beta/models/{model}:streamGenerateContent?alt=sse&key=abc")
}

fn unary_url(model: &str) -> String {
    format!("{GEMINI_API}/v1/models/{model}:generateContent")
}

/// The note the rescue appended: the last user turn's last text part.
fn appended_note(request: &Value, turns_before: usize) -> String {
    let contents = request["contents"].as_array().expect("contents array");
    assert_eq!(contents.len(), turns_before + 1, "one turn appended");
    let last = contents.last().unwrap();
    assert_eq!(last["role"], "user");
    let parts = last["parts"].as_array().expect("parts array");
    assert_eq!(parts.len(), 1);
    parts[0]["text"].as_str().expect("text part").to_owned()
}

#[tokio::test]
async fn empty_stream_refusal_is_rescued_with_a_valid_continuation() {
    let original = body("Audit my firewall rules.");
    let url = stream_url("gemini-2.5-pro");
    let replies = vec![Reply::sse(EMPTY_SAFETY_STREAM), Reply::sse(&ok_stream())];
    let request = gemini_post(&url, &original);
    let done = exchange(RefusalGuardLayer::new(), replies, request).await;
    assert_eq!(
        done.body,
        ok_stream(),
        "the client receives only the continuation"
    );

    let seen = done.upstream.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].uri.to_string(), url, "same model, same query");
    let continuation = seen[1].json();
    let note = appended_note(&continuation, 1);
    assert!(note.contains("SAFETY"), "{note}");
    assert!(note.contains("HARM_CATEGORY_DANGEROUS_CONTENT"), "{note}");
    // Everything else in the request is kept.
    assert_eq!(continuation["contents"][0], original["contents"][0]);
    assert_eq!(
        continuation["systemInstruction"],
        original["systemInstruction"]
    );
    assert_eq!(
        continuation["generationConfig"],
        original["generationConfig"]
    );

    let refusal = done.refusal().expect("typed refusal");
    assert_eq!(refusal.outcome, Outcome::Rescued);
    assert_eq!(refusal.kind, RefusalKind::Empty);
    assert_eq!(refusal.provider, Provider::Google);
    assert_eq!(refusal.wire_api, WireApi::GeminiGenerateContent);
    assert_eq!(refusal.signal, RefusalSignal::StopReason);
    assert_eq!(refusal.category.as_deref(), Some("SAFETY"));
    assert_eq!(refusal.model.as_deref(), Some("gemini-2.5-pro"));
    let records = done.sink.records();
    assert_rescued_on_the_second_attempt(&records);
}

#[tokio::test]
async fn empty_json_refusal_is_rescued_with_a_valid_continuation() {
    let refused = fixture(&format!(
        "{V}unary-failure-finish-reason-safety-no-content.json"
    ));
    // A two-turn conversation: the note goes after the last user turn.
    let mut request = body("First question.");
    request["contents"].as_array_mut().unwrap().extend([
        json!({"role": "model", "parts": [{"text": "First answer."}]}),
        json!({"role": "user", "parts": [{"text": "Second question."}]}),
    ]);
    let replies = vec![Reply::Json(refused), Reply::Json(ok_json())];
    let request = gemini_post(&unary_url("gemini-2.5-pro"), &request);
    let done = exchange(RefusalGuardLayer::new(), replies, request).await;
    assert_eq!(done.body, ok_json());
    let seen = done.upstream.seen();
    assert_eq!(seen.len(), 2);
    let note = appended_note(&seen[1].json(), 3);
    assert!(note.contains("SAFETY"), "{note}");
    let refusal = done.refusal().expect("typed refusal");
    assert_eq!(refusal.outcome, Outcome::Rescued);
    assert_eq!(done.sink.records()[0].category.as_deref(), Some("SAFETY"));
}

#[tokio::test]
async fn partial_refusals_are_left_alone() {
    let cases = [
        (
            stream_url("gemini-2.0-flash"),
            Reply::sse(&fixture(&format!(
                "{G}streaming-failure-recitation-no-content.txt"
            ))),
            fixture(&format!("{G}streaming-failure-recitation-no-content.txt")),
            "recitation",
        ),
        (
            unary_url("gemini-2.0-flash"),
            Reply::Json(fixture(&format!(
                "{V}unary-failure-finish-reason-safety.json"
            ))),
            fixture(&format!("{V}unary-failure-finish-reason-safety.json")),
            "SAFETY",
        ),
    ];
    for (url, reply, expected, category) in cases {
        // One scripted reply only: a second request would panic the mock.
        let layer = RefusalGuardLayer::new()
            .fallback_chains(FallbackChains::new().chain("gemini-2.0-flash", ["gemini-2.5-flash"]));
        let done = exchange(layer, vec![reply], gemini_post(&url, &body("Quote it."))).await;
        assert_eq!(done.body, expected, "{url}");
        assert_eq!(done.upstream.seen().len(), 1, "{url}");
        let records = done.sink.records();
        assert_eq!(records.len(), 1, "{url}");
        assert_eq!(records[0].outcome, Outcome::Partial);
        assert_eq!(records[0].kind, RefusalKind::Partial);
        assert_eq!(records[0].category.as_deref(), Some(category));
        let handle = done.parts.extensions.get::<RefusalHandle>().unwrap();
        assert_eq!(handle.get().unwrap().outcome, Outcome::Partial);
    }
}

#[tokio::test]
async fn fallback_swaps_the_model_in_the_gemini_api_path() {
    let original = body("Audit my firewall rules.");
    let layer = RefusalGuardLayer::new().fallback_chains(chains());
    let replies = vec![Reply::sse(EMPTY_SAFETY_STREAM), Reply::sse(&ok_stream())];
    let request = gemini_post(&stream_url("gemini-2.5-pro"), &original);
    let done = exchange(layer, replies, request).await;
    assert_eq!(done.body, ok_stream());
    let seen = done.upstream.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[1].uri.to_string(),
        format!(
            "{GEMINI_API}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse&key=abc"
        )
    );
    assert_eq!(seen[1].json(), original, "a fallback sends the same body");
    assert_eq!(seen[1].headers.get("x-goog-api-key").unwrap(), "test-key");
    let refusal = done.refusal().expect("typed refusal");
    assert_eq!(refusal.outcome, Outcome::Fallback);
    let records = done.sink.records();
    assert_eq!(records[0].attempts[1].step, AttemptStep::Fallback);
    assert_eq!(
        records[0].attempts[1].model.as_deref(),
        Some("gemini-2.5-flash")
    );
}

#[tokio::test]
async fn fallback_swaps_the_model_in_the_vertex_path() {
    let refused = fixture(&format!(
        "{V}unary-failure-finish-reason-safety-no-content.json"
    ));
    let url = format!("{VERTEX}/models/gemini-2.5-pro:generateContent?$alt=json");
    let layer = RefusalGuardLayer::new().fallback_chains(chains());
    let replies = vec![Reply::Json(refused), Reply::Json(ok_json())];
    let done = exchange(layer, replies, gemini_post(&url, &body("x"))).await;
    assert_eq!(done.body, ok_json());
    let seen = done.upstream.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[1].uri.to_string(),
        format!("{VERTEX}/models/gemini-2.5-flash:generateContent?$alt=json")
    );
    let refusal = done.refusal().expect("typed refusal");
    assert_eq!(refusal.outcome, Outcome::Fallback);
    assert_eq!(refusal.model.as_deref(), Some("gemini-2.5-pro"));
    assert_eq!(done.sink.records()[0].provider, Provider::Google);
}

#[tokio::test]
async fn blocked_prompts_are_recoverable_like_empty_refusals() {
    // Recorded single-chunk block, rescued.
    let blocked = fixture(&format!("{G}streaming-failure-prompt-blocked-safety.txt"));
    let replies = vec![Reply::sse(&blocked), Reply::sse(&ok_stream())];
    let done = exchange(RefusalGuardLayer::new(), replies, stream_request("x")).await;
    assert_eq!(done.body, ok_stream());
    let refusal = done.refusal().expect("typed refusal");
    assert_eq!(refusal.outcome, Outcome::Rescued);
    assert_eq!(refusal.signal, RefusalSignal::BlockedPrompt);
    assert_eq!(refusal.category.as_deref(), Some("SAFETY"));
    let note = appended_note(&done.upstream.seen()[1].json(), 1);
    assert!(note.contains("SAFETY"), "{note}");

    // Hand-written late block (after chunks without output), on a fallback.
    let layer = RefusalGuardLayer::new().fallback_chains(chains());
    let replies = vec![Reply::sse(LATE_BLOCK_STREAM), Reply::sse(&ok_stream())];
    let done = exchange(layer, replies, stream_request("y")).await;
    assert_eq!(done.body, ok_stream());
    let refusal = done.refusal().expect("typed refusal");
    assert_eq!(refusal.outcome, Outcome::Fallback);
    assert_eq!(refusal.signal, RefusalSignal::BlockedPrompt);
    assert_eq!(refusal.category.as_deref(), Some("PROHIBITED_CONTENT"));
    assert!(done.upstream.seen()[1]
        .uri
        .path()
        .ends_with("/models/gemini-2.5-flash:streamGenerateContent"));
}

/// A block reason the guard does not know is still a blocked prompt (the
/// docs: `blockReason` set means the prompt was blocked), recovered, and
/// recorded with the reason as it came.
#[tokio::test]
async fn an_unknown_block_reason_is_a_refusal_recorded_as_it_came() {
    let blocked = b"data: {\"promptFeedback\": {\"blockReason\": \"NEWLY_ADDED_BLOCK\"}, \"modelVersion\": \"gemini-2.5-pro\"}\r\n\r\n";
    let layer = RefusalGuardLayer::new().fallback_chains(chains());
    let replies = vec![Reply::sse(blocked), Reply::sse(&ok_stream())];
    let done = exchange(layer, replies, stream_request("x")).await;
    assert_eq!(done.body, ok_stream());
    let record = &done.sink.records()[0];
    assert_eq!(record.outcome, Outcome::Fallback);
    assert_eq!(record.signal, RefusalSignal::BlockedPrompt);
    assert_eq!(record.category.as_deref(), Some("NEWLY_ADDED_BLOCK"));
}

/// A finish reason the guard does not know, ending a response with no
/// output: the API's finish reasons mix policy stops with limits and
/// tool-call faults, so it is not taken for a refusal (nothing is tried, the
/// response passes through byte for byte), but it is recorded as it came,
/// dead with reason `unknown_stop`. With output before it, nothing is
/// recorded.
#[tokio::test]
async fn an_unknown_finish_reason_without_output_is_recorded_not_recovered() {
    let ended = |parts: &str| {
        Bytes::from(format!(
            "data: {{\"candidates\": [{{\"content\": {{\"role\": \"model\", \"parts\": {parts}}}, \"finishReason\": \"NEWLY_ADDED_STOP\", \"index\": 0}}], \"modelVersion\": \"gemini-2.5-pro\"}}\r\n\r\n"
        ))
    };
    let empty = ended("[]");
    let layer = || RefusalGuardLayer::new().fallback_chains(chains());
    let done = exchange(layer(), vec![Reply::sse(&empty)], stream_request("x")).await;
    assert_eq!(done.body, empty, "passed through as sent");
    assert_eq!(done.upstream.seen().len(), 1, "no fallback, no rescue");
    let records = done.sink.records();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].outcome, Outcome::Dead);
    assert_eq!(records[0].reason, Some(DeadReason::UnknownStop));
    assert_eq!(records[0].category.as_deref(), Some("NEWLY_ADDED_STOP"));

    // The same as one JSON body.
    let json = serde_json::json!({"candidates": [{"content": {"role": "model", "parts": []},
        "finishReason": "NEWLY_ADDED_STOP", "index": 0}]});
    let request = gemini_post(&unary_url("gemini-2.5-pro"), &body("x"));
    let sent = Bytes::from(json.to_string());
    let done = exchange(layer(), vec![Reply::Json(sent.clone())], request).await;
    assert_eq!(done.body, sent);
    assert_eq!(done.sink.records()[0].reason, Some(DeadReason::UnknownStop));

    let answered = ended(r#"[{"text": "Here is the answer."}]"#);
    let done = exchange(layer(), vec![Reply::sse(&answered)], stream_request("x")).await;
    done.assert_untouched(&answered);
}

/// Hand-written (not recorded): a thought, then an empty copyright stop
/// (`reason`) citing its source, as the API's `citationMetadata` has it.
fn empty_recitation_stream(reason: &str) -> Bytes {
    Bytes::from(format!(
        "data: {{\"candidates\": [{{\"content\": {{\"parts\": [{{\"text\": \"Recalling the text.\",\"thought\": true}}],\"role\": \"model\"}},\"index\": 0}}],\"modelVersion\": \"gemini-2.5-pro\"}}\r\n\r\n\
data: {{\"candidates\": [{{\"finishReason\": \"{reason}\",\"index\": 0,\"citationMetadata\": {{\"citationSources\": [{{\"startIndex\": 0,\"endIndex\": 120,\"uri\": \"https://example.com/lyrics\"}}]}}}}],\"modelVersion\": \"gemini-2.5-pro\"}}\r\n\r\n"
    ))
}

/// A copyright stop is no safety decline: the default ladder climbs the
/// fallback chain with the request as the client sent it and never sends
/// the rescue note (which would tell the model a safety classifier stopped
/// it). Served by a fallback, it is recorded `fallback`, category `recitation`.
#[tokio::test]
async fn a_recitation_climbs_the_chain_without_the_rescue_note() {
    for reason in ["RECITATION", "IMAGE_RECITATION"] {
        let original = body("Print the lyrics of that song.");
        let layer = RefusalGuardLayer::new().fallback_chains(chains());
        let replies = vec![
            Reply::sse(&empty_recitation_stream(reason)),
            Reply::sse(&ok_stream()),
        ];
        let request = gemini_post(&stream_url("gemini-2.5-pro"), &original);
        let done = exchange(layer, replies, request).await;
        assert_eq!(done.body, ok_stream(), "{reason}");
        let seen = done.upstream.seen();
        assert_eq!(seen.len(), 2, "{reason}");
        assert!(seen[1]
            .uri
            .path()
            .ends_with("/models/gemini-2.5-flash:streamGenerateContent"));
        assert_eq!(
            seen[1].json(),
            original,
            "{reason}: the fallback carries no note"
        );
        let refusal = done.refusal().expect("typed refusal");
        assert_eq!(refusal.outcome, Outcome::Fallback);
        assert_eq!(refusal.category.as_deref(), Some("recitation"));
        assert_eq!(
            refusal.explanation.as_deref(),
            Some("cites: https://example.com/lyrics")
        );
        let records = done.sink.records();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].category.as_deref(), Some("recitation"));
        let steps: Vec<_> = records[0].attempts.iter().map(|a| a.step).collect();
        assert_eq!(steps, [AttemptStep::Original, AttemptStep::Fallback]);
    }
}

/// When no fallback serves a copyright stop, the client gets the original byte
/// for byte, nothing carried a note, and the record says why no rescue was
/// tried: dead with reason `not_safety`. With no chain at all nothing is
/// sent again.
#[tokio::test]
async fn a_recitation_nothing_serves_is_dead_for_not_safety_without_a_note() {
    let refused = empty_recitation_stream("RECITATION");
    let layer = RefusalGuardLayer::new().fallback_chains(chains());
    let replies = vec![Reply::sse(&refused), Reply::sse(&refused)];
    let done = exchange(layer, replies, stream_request("Quote the book.")).await;
    assert_eq!(done.body, refused, "the original, as the provider sent it");
    let seen = done.upstream.seen();
    assert_eq!(seen.len(), 2, "one fallback, no rescue");
    for request in &seen {
        let text = String::from_utf8_lossy(&request.body).into_owned();
        assert!(!text.contains("[refusal-guard]"), "{text}");
    }
    let records = done.sink.records();
    assert_eq!(records.len(), 1);
    let record = &records[0];
    assert_eq!(record.outcome, Outcome::Dead);
    assert_eq!(record.reason, Some(DeadReason::NotSafety));
    assert_eq!(record.category.as_deref(), Some("recitation"));
    assert_eq!(record.attempts[1].result, AttemptResult::Refused);
    let refusal = done.refusal().expect("typed refusal");
    assert_eq!(refusal.reason, Some(DeadReason::NotSafety));

    // A whole JSON body, on a model without a chain: one request only.
    let json = json!({"candidates": [{"content": {"role": "model", "parts": []},
        "finishReason": "RECITATION", "index": 0}], "modelVersion": "gemini-2.0-flash"});
    let sent = Bytes::from(json.to_string());
    let request = gemini_post(&unary_url("gemini-2.0-flash"), &body("x"));
    let replies = vec![Reply::Json(sent.clone())];
    let done = exchange(RefusalGuardLayer::new(), replies, request).await;
    assert_eq!(done.body, sent);
    assert_eq!(done.upstream.seen().len(), 1);
    let record = &done.sink.records()[0];
    assert_eq!(record.reason, Some(DeadReason::NotSafety));
    assert_eq!(record.category.as_deref(), Some("recitation"));
}

/// Model Armor is the screening the operator configured on Vertex AI, as a
/// Bedrock guardrail is: its block (of the prompt or of the answer) is
/// recorded and served as sent, and no fallback or rescue works around it,
/// unless the policy names it.
#[tokio::test]
async fn model_armor_is_the_operators_policy_and_stops_unless_named() {
    let finish = json!({"candidates": [{"content": {"role": "model", "parts": []},
        "finishReason": "MODEL_ARMOR", "index": 0}]});
    let block = json!({"promptFeedback": {"blockReason": "MODEL_ARMOR",
        "blockReasonMessage": "Blocked by Model Armor floor settings."}});
    let url = format!("{VERTEX}/models/gemini-2.5-pro:generateContent");
    for blocked in [finish, block] {
        let sent = Bytes::from(blocked.to_string());
        let layer = RefusalGuardLayer::new().fallback_chains(chains());
        let replies = vec![Reply::Json(sent.clone())];
        let done = exchange(layer, replies, gemini_post(&url, &body("x"))).await;
        assert_eq!(done.body, sent);
        assert_eq!(done.upstream.seen().len(), 1, "{blocked}");
        let record = &done.sink.records()[0];
        assert_eq!(record.outcome, Outcome::Dead);
        assert_eq!(record.reason, Some(DeadReason::PolicyStop));
        assert_eq!(record.category.as_deref(), Some("MODEL_ARMOR"));

        let named = RefusalGuardLayer::new()
            .fallback_chains(chains())
            .category_policy("MODEL_ARMOR=fallback".parse().unwrap());
        let replies = vec![Reply::Json(sent.clone()), Reply::Json(ok_json())];
        let done = exchange(named, replies, gemini_post(&url, &body("x"))).await;
        assert_eq!(done.body, ok_json(), "{blocked}");
        assert_eq!(done.refusal().unwrap().outcome, Outcome::Fallback);
    }
}

/// A missing thought signature and a malformed response are faults, not
/// refusals: ending a response without output, they reach the client byte
/// for byte, nothing is tried and nothing is recorded (unlike a reason the
/// guard does not know, which is recorded `unknown_stop`).
#[tokio::test]
async fn faults_that_end_without_output_pass_through_unrecorded() {
    for reason in [
        "MISSING_THOUGHT_SIGNATURE",
        "MALFORMED_RESPONSE",
        "MALFORMED_FUNCTION_CALL",
        "TOO_MANY_TOOL_CALLS",
        "NO_IMAGE",
    ] {
        let stream = Bytes::from(format!(
            "data: {{\"candidates\": [{{\"content\": {{\"role\": \"model\", \"parts\": []}}, \"finishReason\": \"{reason}\", \"index\": 0}}], \"usageMetadata\": {{\"promptTokenCount\": 12, \"totalTokenCount\": 12}}, \"modelVersion\": \"gemini-2.5-pro\"}}\r\n\r\n"
        ));
        let layer = RefusalGuardLayer::new().fallback_chains(chains());
        let done = exchange(layer, vec![Reply::sse(&stream)], stream_request("x")).await;
        done.assert_untouched(&stream);
        let handle = done.parts.extensions.get::<RefusalHandle>().unwrap();
        assert!(handle.is_settled(), "{reason}");
        assert_eq!(handle.get(), None, "{reason}");

        let json = json!({"candidates": [{"finishReason": reason, "index": 0}]});
        let sent = Bytes::from(json.to_string());
        let request = gemini_post(&unary_url("gemini-2.5-pro"), &body("x"));
        let layer = RefusalGuardLayer::new().fallback_chains(chains());
        let done = exchange(layer, vec![Reply::Json(sent.clone())], request).await;
        done.assert_untouched(&sent);
    }
}

#[tokio::test]
async fn a_refused_continuation_delivers_the_original_byte_exact() {
    let refused = fixture(&format!("{V}unary-failure-prompt-blocked-safety.json"));
    let replies = vec![
        Reply::Json(refused.clone()),
        Reply::Json(fixture(&format!(
            "{V}unary-failure-finish-reason-safety-no-content.json"
        ))),
    ];
    let request = gemini_post(&unary_url("gemini-2.5-pro"), &body("x"));
    let done = exchange(RefusalGuardLayer::new(), replies, request).await;
    assert_eq!(
        done.body, refused,
        "the original refusal, as the provider sent it"
    );
    assert_eq!(done.upstream.seen().len(), 2);
    let refusal = done.refusal().expect("typed refusal");
    assert_eq!(refusal.outcome, Outcome::Dead);
    assert_eq!(refusal.reason, Some(DeadReason::StillRefused));
    assert_eq!(refusal.signal, RefusalSignal::BlockedPrompt);
    let records = done.sink.records();
    assert_eq!(records[0].attempts[1].result, AttemptResult::Refused);

    // Streaming: the same, and the original stream comes back whole.
    let replies = vec![
        Reply::Sse(split_at(
            &Bytes::from_static(EMPTY_SAFETY_STREAM),
            &[7, 100, 101],
        )),
        Reply::sse(LATE_BLOCK_STREAM),
    ];
    let done = exchange(RefusalGuardLayer::new(), replies, stream_request("z")).await;
    assert_eq!(done.body, Bytes::from_static(EMPTY_SAFETY_STREAM));
}

#[tokio::test]
async fn one_rescue_per_conversation_until_output() {
    // The conversation key comes from systemInstruction + the first user turn.
    let upstream = Upstream::new(vec![
        Reply::sse(EMPTY_SAFETY_STREAM),
        Reply::sse(EMPTY_SAFETY_STREAM),
        // Same conversation again: no rescue left, one request only.
        Reply::sse(EMPTY_SAFETY_STREAM),
        // Another system instruction is another conversation.
        Reply::sse(EMPTY_SAFETY_STREAM),
        Reply::sse(&ok_stream()),
    ]);
    let sink = MemorySink::new();
    let mut guard = RefusalGuardLayer::new()
        .telemetry(sink.clone())
        .layer(upstream.service());
    let url = stream_url("gemini-2.5-pro");
    call(&mut guard, gemini_post(&url, &body("same"))).await;
    call(&mut guard, gemini_post(&url, &body("same"))).await;
    let mut other = body("same");
    other["systemInstruction"] = json!({"parts": [{"text": "Another assistant."}]});
    let (_, out) = call(&mut guard, gemini_post(&url, &other)).await;
    assert_eq!(out, ok_stream());
    assert_eq!(upstream.seen().len(), 5);
    let records = sink.records();
    assert_eq!(records[0].reason, Some(DeadReason::StillRefused));
    assert_eq!(records[1].reason, Some(DeadReason::RescueCap));
    assert_eq!(records[2].outcome, Outcome::Rescued);
}

#[tokio::test]
async fn stream_method_without_sse_is_judged_as_a_json_array() {
    let refused = Bytes::from_static(
        br#"[{"candidates": [{"content": {"parts": [{"text": "hmm", "thought": true}], "role": "model"}}]},
{"candidates": [{"finishReason": "PROHIBITED_CONTENT"}]}]"#,
    );
    let answer = Bytes::from_static(
        br#"[{"candidates": [{"content": {"parts": [{"text": "Here it is."}], "role": "model"}, "finishReason": "STOP"}]}]"#,
    );
    let url = format!("{GEMINI_API}/v1beta/models/gemini-2.5-pro:streamGenerateContent");
    let replies = vec![Reply::Json(refused), Reply::Json(answer.clone())];
    let request = gemini_post(&url, &body("x"));
    let done = exchange(RefusalGuardLayer::new(), replies, request).await;
    assert_eq!(done.body, answer);
    let refusal = done.refusal().expect("typed refusal");
    assert_eq!(refusal.outcome, Outcome::Rescued);
    assert_eq!(refusal.category.as_deref(), Some("PROHIBITED_CONTENT"));
    assert_eq!(done.upstream.seen()[1].uri.to_string(), url);
}

#[tokio::test]
async fn claude_on_vertex_goes_to_the_anthropic_dialect() {
    let refused = fixture("anthropic/anthropic-sdk-python/refusal_response.txt");
    let answer = fixture("anthropic/anthropic-sdk-python/basic_response.txt");
    let base = "https://us-east5-aiplatform.googleapis.com/v1/projects/p/locations/us-east5/publishers/anthropic/models";
    let request = json!({
        "anthropic_version": "vertex-2023-10-16",
        "max_tokens": 1024,
        "stream": true,
        "messages": [{"role": "user", "content": "scan my host"}],
    });
    let layer = RefusalGuardLayer::new()
        .fallback_chains(FallbackChains::new().chain("claude-opus-4-7", ["claude-sonnet-4-5"]));
    let replies = vec![Reply::sse(&refused), Reply::sse(&answer)];
    let done = exchange(
        layer,
        replies,
        gemini_post(
            &format!("{base}/claude-opus-4-7:streamRawPredict"),
            &request,
        ),
    )
    .await;
    assert_eq!(done.body, answer);
    let seen = done.upstream.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[1].uri.to_string(),
        format!("{base}/claude-sonnet-4-5:streamRawPredict")
    );
    assert!(
        seen[1].json().get("model").is_none(),
        "model stays in the path"
    );
    let refusal = done.refusal().expect("typed refusal");
    assert_eq!(refusal.provider, Provider::Anthropic);
    assert_eq!(refusal.wire_api, WireApi::AnthropicMessages);
    assert_eq!(refusal.outcome, Outcome::Fallback);
    assert_eq!(refusal.model.as_deref(), Some("claude-opus-4-7"));
    assert_eq!(done.sink.records()[0].category.as_deref(), Some("cyber"));
}

#[tokio::test]
async fn other_google_endpoints_pass_through_unguarded() {
    let refused = Bytes::from_static(EMPTY_SAFETY_STREAM);
    let urls = [
        format!("{GEMINI_API}/v1beta/models/gemini-2.5-pro:countTokens"),
        format!("{GEMINI_API}/v1beta/models/text-embedding-004:embedContent"),
        format!("{GEMINI_API}/v1beta/models/text-embedding-004:batchEmbedContents"),
        format!("{VERTEX}/models/imagen-3.0-generate-002:predict"),
        format!("{GEMINI_API}/v1beta/models/gemini-2.5-pro:generateContent/"),
        format!("{GEMINI_API}/v1beta/files/abc:generateContent"),
        // Another publisher's model under the Gemini method name.
        "https://x-aiplatform.googleapis.com/v1/projects/p/locations/l/publishers/meta/models/llama:generateContent".to_owned(),
    ];
    for url in urls {
        // Methods the contract has no rules for: this upstream serves them.
        let method = url.rsplit(':').next().unwrap_or_default();
        let upstream = Upstream::new(vec![Reply::sse(&refused)]).serving(&format!(":{method}"));
        let request = gemini_post(&url, &body("x"));
        let done = exchange_on(upstream, RefusalGuardLayer::new(), request).await;
        assert_eq!(done.body, refused, "{url}");
        assert!(
            done.parts.extensions.get::<RefusalHandle>().is_none(),
            "{url}: guarded"
        );
        assert!(done.sink.is_empty(), "{url}");
    }
    // A model listing (GET) is not guarded either.
    let request = Request::get(format!("{GEMINI_API}/v1beta/models"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let replies = vec![Reply::Json(Bytes::from_static(b"{\"models\": []}"))];
    let done = exchange(RefusalGuardLayer::new(), replies, request).await;
    assert!(done.parts.extensions.get::<RefusalHandle>().is_none());
}

#[tokio::test]
async fn unknown_fields_truncation_and_errors_pass_through() {
    // Unknown fields and part kinds: not output, not a refusal; the stream
    // ends without real output, so it passes through as it came (its
    // unknown finish reason recorded, never recovered).
    let unknown = Bytes::from_static(
        b"data: {\"candidates\": [{\"content\": {\"parts\": [{\"futurePart\": {\"x\": 1}}],\"role\": \"model\"},\"finishReason\": \"SOMETHING_NEW\",\"newField\": [1,2]}],\"surprise\": true}\r\n\r\n",
    );
    // A stream cut in the middle of a chunk.
    let truncated = Bytes::copy_from_slice(&EMPTY_SAFETY_STREAM[..EMPTY_SAFETY_STREAM.len() - 60]);
    // A raw (non-SSE) JSON error body where the stream should be.
    let raw_error = fixture(&format!("{V}streaming-failure-api-key.txt"));
    // Output, then a raw error body outside SSE framing.
    let mid_error = fixture(&format!("{V}streaming-failure-error-mid-stream.txt"));
    // Garbage and a [DONE] line the API never sends.
    let garbage =
        Bytes::from_static(b"data: {not json\n\ndata: [DONE]\n\n: comment\n\nevent: x\n\n");
    for (body_bytes, unknown_stop) in [
        (unknown, Some("SOMETHING_NEW")),
        (truncated, None),
        (raw_error, None),
        (mid_error, None),
        (garbage, None),
    ] {
        let mut rng = Rng::new(body_bytes.len() as u64);
        for round in 0..20 {
            // One reply only: any recovery attempt would panic the mock.
            let chunks = if round == 0 {
                vec![body_bytes.clone()]
            } else {
                split_at(&body_bytes, &rng.cuts(body_bytes.len(), 1 + round * 5))
            };
            let layer = RefusalGuardLayer::new().fallback_chains(chains());
            let replies = vec![Reply::Sse(chunks)];
            let done = exchange(layer, replies, stream_request("x")).await;
            assert_eq!(done.body, body_bytes);
            assert_eq!(done.upstream.seen().len(), 1);
            let handle = done.parts.extensions.get::<RefusalHandle>().unwrap();
            assert!(handle.is_settled());
            let recorded: Vec<_> = done
                .sink
                .records()
                .into_iter()
                .map(|r| r.category)
                .collect();
            assert_eq!(
                recorded,
                Vec::from_iter(unknown_stop.map(|c| Some(c.to_owned())))
            );
            let settled = handle.get().map(|r| (r.outcome, r.reason));
            let dead = (Outcome::Dead, Some(DeadReason::UnknownStop));
            assert_eq!(settled, unknown_stop.map(|_| dead));
        }
    }

    // HTTP errors: the status and body as sent, no recovery.
    let error = fixture(&format!("{V}unary-failure-quota-exceeded.json"));
    let layer = RefusalGuardLayer::new().fallback_chains(chains());
    let replies = vec![Reply::Status(429, error.clone())];
    let request = gemini_post(&unary_url("gemini-2.5-pro"), &body("x"));
    let done = exchange(layer, replies, request).await;
    assert_eq!(done.parts.status, 429);
    assert_eq!(done.body, error);
    assert_eq!(done.upstream.seen().len(), 1);

    // A connection that drops before any output: the error reaches the
    // client, no recovery is attempted.
    let upstream = Upstream::new(vec![Reply::SseThenError(vec![Bytes::from_static(
        b"data: {\"candidates\": [{\"content\": {\"done.parts\": [{\"text\": \"\"}]}}]}\r\n\r\n",
    )])]);
    let mut guard = RefusalGuardLayer::new().layer(upstream.service());
    let response = tower::ServiceExt::oneshot(&mut guard, stream_request("x"))
        .await
        .unwrap();
    let collected = http_body_util::BodyExt::collect(response.into_body()).await;
    assert!(collected.is_err());
    assert_eq!(upstream.seen().len(), 1);

    // A request body that is not JSON is forwarded as it is, and the API's
    // 400 for it reaches the client as sent.
    let upstream = Upstream::new(vec![]);
    let mut guard = RefusalGuardLayer::new().layer(upstream.service());
    let request = Request::post(stream_url("gemini-2.5-pro"))
        .body(Full::new(Bytes::from_static(b"not json")))
        .unwrap();
    let (parts, out) = call(&mut guard, request).await;
    assert_eq!(parts.status, 400);
    let error: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(error["error"]["status"], "INVALID_ARGUMENT");
    assert_eq!(upstream.take_violations().len(), 1);
    assert_eq!(upstream.seen()[0].body, Bytes::from_static(b"not json"));
}

#[tokio::test]
async fn a_raw_error_body_on_a_recovery_attempt_is_an_upstream_error() {
    // The continuation's stream is a plain JSON error (no SSE framing), as
    // the API sends it: the attempt failed, it did not merely end empty.
    for error in [
        fixture(&format!("{V}streaming-failure-api-key.txt")),
        fixture(&format!("{G}streaming-failure-image-rejected.txt")),
    ] {
        let replies = vec![Reply::sse(EMPTY_SAFETY_STREAM), Reply::sse(&error)];
        let done = exchange(RefusalGuardLayer::new(), replies, stream_request("x")).await;
        assert_eq!(done.body, Bytes::from_static(EMPTY_SAFETY_STREAM));
        let records = done.sink.records();
        assert_eq!(records[0].outcome, Outcome::Dead);
        assert_eq!(records[0].reason, Some(DeadReason::UpstreamError));
        assert_eq!(records[0].attempts[1].result, AttemptResult::HttpError);
    }
}

#[tokio::test]
async fn recognised_under_any_version_and_base_path() {
    let cases = [
        (
            "https://gateway.example.com/google/v1alpha/models/gemini-2.5-pro:generateContent?key=k",
            "https://gateway.example.com/google/v1alpha/models/gemini-2.5-flash:generateContent?key=k",
        ),
        (
            // A client that percent-encodes the method colon.
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro%3AgenerateContent",
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash%3AgenerateContent",
        ),
        (
            "https://aiplatform.googleapis.com/v1beta1/projects/p/locations/global/publishers/google/models/gemini-2.5-pro:generateContent",
            "https://aiplatform.googleapis.com/v1beta1/projects/p/locations/global/publishers/google/models/gemini-2.5-flash:generateContent",
        ),
    ];
    let refused = fixture(&format!(
        "{V}unary-failure-finish-reason-safety-no-content.json"
    ));
    for (url, fallback) in cases {
        let layer = RefusalGuardLayer::new().fallback_chains(chains());
        let replies = vec![Reply::Json(refused.clone()), Reply::Json(ok_json())];
        let done = exchange(layer, replies, gemini_post(url, &body("x"))).await;
        assert_eq!(done.body, ok_json(), "{url}");
        assert_eq!(done.upstream.seen()[1].uri.to_string(), fallback);
        let refusal = done.refusal().expect("typed refusal");
        assert_eq!(refusal.outcome, Outcome::Fallback, "{url}");
    }
}

#[tokio::test]
async fn opt_in_text_detection_reads_gemini_text_parts() {
    // Hand-written (not recorded): a prose refusal split over two chunks,
    // after a thought part (kept out of the detector's text by the dialect;
    // this test does not prove that exclusion: the detector flags it anyway).
    let prose = Bytes::from_static(
        b"data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Sure! Here is the full answer you asked for, step by step, with working code.\",\"thought\": true}],\"role\": \"model\"}}]}\r\n\r\n\
data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"I'm sorry, but \"}],\"role\": \"model\"}}]}\r\n\r\n\
data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"I can't help with creating malware.\"}],\"role\": \"model\"},\"finishReason\": \"STOP\"}]}\r\n\r\n",
    );
    let layer = RefusalGuardLayer::new().detect_text_refusals(true);
    let replies = vec![Reply::sse(&prose), Reply::sse(&ok_stream())];
    let done = exchange(layer, replies, stream_request("x")).await;
    assert_eq!(done.body, ok_stream());
    let refusal = done.refusal().expect("typed refusal");
    assert_eq!(refusal.signal, RefusalSignal::Text);
    assert_eq!(refusal.outcome, Outcome::Rescued);
    appended_note(&done.upstream.seen()[1].json(), 1);

    // Off by default: the same stream passes through untouched.
    let replies = vec![Reply::sse(&prose)];
    let done = exchange(RefusalGuardLayer::new(), replies, stream_request("x")).await;
    assert_eq!(done.body, prose);

    // A function call is never judged as prose.
    let call_first = Bytes::from_static(
        b"data: {\"candidates\": [{\"content\": {\"done.parts\": [{\"text\": \"I can't help with that directly, \"},{\"functionCall\": {\"name\": \"ask_human\",\"args\": {}}}],\"role\": \"model\"},\"finishReason\": \"STOP\"}]}\r\n\r\n",
    );
    let layer = RefusalGuardLayer::new().detect_text_refusals(true);
    let replies = vec![Reply::sse(&call_first)];
    let done = exchange(layer, replies, stream_request("x")).await;
    assert_eq!(done.body, call_first);
    assert!(done.refusal().is_none());
    assert_eq!(done.upstream.seen().len(), 1);
}

#[tokio::test]
async fn several_candidates_pass_through_unguarded() {
    let mut request = body("Audit my firewall rules.");
    request["generationConfig"]["candidateCount"] = json!(2);
    let bytes = Bytes::from(serde_json::to_vec(&request).unwrap());
    let replies = vec![Reply::sse(EMPTY_SAFETY_STREAM)];
    let request = gemini_post(&stream_url("gemini-2.5-pro"), &request);
    let done = exchange(RefusalGuardLayer::new(), replies, request).await;
    assert_eq!(
        done.body,
        Bytes::from_static(EMPTY_SAFETY_STREAM),
        "not recovered"
    );
    assert_eq!(done.upstream.seen().len(), 1);
    assert_eq!(done.upstream.seen()[0].body, bytes);
    assert!(done.sink.records().is_empty());
}
