//! Google Gemini `generateContent` / `streamGenerateContent`, on the Gemini
//! API (`/v1/models/{model}:generateContent`, `/v1beta/...`, under any base
//! path) and on Vertex AI
//! (`.../projects/*/locations/*/publishers/google/models/{model}:...`).
//!
//! The model is in the URL path, so a fallback rewrites the path and
//! keeps the query string (`alt=sse`, `key=...`) as it was.
//!
//! What is guarded, and what is not:
//!
//! - `streamGenerateContent?alt=sse` is an SSE stream of
//!   `GenerateContentResponse` chunks (`data:` lines only, often with `\r\n`
//!   separators, no terminator). An error after the stream started may come
//!   as a multi-line JSON object outside SSE framing; the event judge reads it
//!   from the frame's raw bytes.
//! - `streamGenerateContent` without `alt=sse` answers with one JSON array of
//!   chunks (`application/json`). It is judged as a whole JSON body, element
//!   by element in order, so the request counts as non-streaming.
//! - `generateContent` answers with one JSON object.
//! - `countTokens`, `embedContent`, `batchEmbedContents`, model listings and
//!   every other method are not recognised and pass through unguarded.
//! - Imagen `:predict` is not a chat API (no turn to continue, no refusal stop
//!   reason: filtered images are just missing from `predictions`), so it is
//!   not guarded either.
//! - Paths under another Vertex publisher (`publishers/anthropic/...`) belong
//!   to other dialects.
//!
//! Refusals: `promptFeedback.blockReason` (any value, even one this file does
//! not know, and feedback that carries only a `blockReasonMessage`) is a
//! blocked prompt. Every `candidates[].finishReason` of the current APIs is
//! in [`FINISH_REASONS`], each with what it is: a refusal stop reason in
//! the provider's words (`SAFETY`, `BLOCKLIST`, `PROHIBITED_CONTENT`,
//! `SPII`, `IMAGE_SAFETY`, ...), a copyright stop recorded as `recitation`
//! (`RECITATION`, `IMAGE_RECITATION`: no safety decline, so the default
//! ladder falls back without the rescue note), or no refusal at all (`STOP`,
//! `MAX_TOKENS`, `LANGUAGE`, `OTHER`, tool-call faults, a missing thought
//! signature, a malformed response, an image not made). A reason this file
//! does not know is not taken for a refusal either: the API's finish
//! reasons mix policy stops with limits and faults, and a rescue would tell
//! a model it refused when it may not have. When such a reason ends a
//! response without output, the guard records it as it came (category, an
//! unrecovered refusal of reason `unknown_stop`) and passes the response
//! through.

use http::{Method, Uri};
use serde_json::{json, Value};

use super::{count, fresh_input, is_real_text, known, str_field, truncate_explanation};
use super::{path_segments, EventJudge};
use super::{Dialect, Finding};
use super::{RefusalInfo, RewriteError};
use crate::dialect::facts::{Api, Folder, ProviderFacts};
use crate::refusal::{
    Provider, RefusalSignal, Usage, WireApi, MODEL_ARMOR_CATEGORY, RECITATION_CATEGORY,
};
use crate::sse::Frame;

pub(crate) mod errors;
mod models;
pub(crate) mod translate;

/// Google's folder: the Gemini API and Vertex AI's Gemini models.
pub(crate) static FOLDER: Folder = Folder {
    provider: Some(&PROVIDER),
    apis: &[&GENERATE_CONTENT],
};

/// Google, as chain entries name it: `gemini:` (its API's name, and its
/// key's) or `google:`.
static PROVIDER: ProviderFacts = ProviderFacts {
    provider: Provider::Google,
    name: "google",
    entry_prefixes: &["gemini", "google"],
    fallback_api: WireApi::GeminiGenerateContent,
    finish_reason,
};

/// `generateContent` and `streamGenerateContent`.
static GENERATE_CONTENT: Api = Api {
    wire_api: WireApi::GeminiGenerateContent,
    name: "gemini_generate_content",
    provider: Provider::Google,
    platform: "google",
    gen_ai_system: "gcp.gemini",
    errors: &errors::SHAPE,
    translation: &translate::TRANSLATION,
    dialect: Some(&GeminiGenerateContent),
};

/// A refusal stop's finish reason: the `finishReason` itself.
fn finish_reason(_signal: RefusalSignal, category: Option<&str>) -> &str {
    category.unwrap_or("SAFETY")
}

#[derive(Debug)]
pub(crate) struct GeminiGenerateContent;

/// What a `finishReason` is to the guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finish {
    /// A refusal, recorded under this category.
    Refusal(&'static str),
    /// The end, a limit or a fault: no refusal.
    NotRefusal,
    /// A reason no current API documents.
    Unknown,
}

/// Every finish reason of the Gemini API and of Vertex AI, and what it is:
/// `Some(category)` for a refusal, `None` for none. Sources: the Gemini API
/// reference `FinishReason` (googleapis `google/ai/generativelanguage/v1beta/
/// generative_service.proto`), Vertex AI's (`google/cloud/aiplatform/v1/
/// content.proto`: `RECITATION` "potentially contains copyright
/// violations", `MODEL_ARMOR`), python-genai `types.FinishReason`, and the
/// google-genai and Firebase AI Kotlin references for the two the other
/// SDKs do not list yet (`MISSING_THOUGHT_SIGNATURE`, "request has at least
/// one thought signature missing"; `MALFORMED_RESPONSE`, which the API sends:
/// python-genai issue 2937).
pub(crate) const FINISH_REASONS: &[(&str, Option<&str>)] = &[
    ("FINISH_REASON_UNSPECIFIED", None),
    ("STOP", None),
    ("MAX_TOKENS", None),
    ("SAFETY", Some("SAFETY")),
    // Copyright stops, one category for both.
    ("RECITATION", Some(RECITATION_CATEGORY)),
    ("IMAGE_RECITATION", Some(RECITATION_CATEGORY)),
    // An unsupported language.
    ("LANGUAGE", None),
    // No classifier named.
    ("OTHER", None),
    ("BLOCKLIST", Some("BLOCKLIST")),
    ("PROHIBITED_CONTENT", Some("PROHIBITED_CONTENT")),
    ("SPII", Some("SPII")),
    ("IMAGE_SAFETY", Some("IMAGE_SAFETY")),
    ("IMAGE_PROHIBITED_CONTENT", Some("IMAGE_PROHIBITED_CONTENT")),
    // The operator's Model Armor screening (Vertex AI).
    ("MODEL_ARMOR", Some(MODEL_ARMOR_CATEGORY)),
    // The model's own faults, and the request's.
    ("MALFORMED_FUNCTION_CALL", None),
    ("UNEXPECTED_TOOL_CALL", None),
    ("TOO_MANY_TOOL_CALLS", None),
    ("MISSING_THOUGHT_SIGNATURE", None),
    ("MALFORMED_RESPONSE", None),
    // An image asked for and not made, for no policy reason named.
    ("IMAGE_OTHER", None),
    ("NO_IMAGE", None),
];

/// What `reason` is.
pub(crate) fn finish(reason: &str) -> Finish {
    match FINISH_REASONS.iter().find(|(known, _)| *known == reason) {
        Some((_, Some(category))) => Finish::Refusal(category),
        Some((_, None)) => Finish::NotRefusal,
        None => Finish::Unknown,
    }
}

/// The two chat methods.
const GENERATE: &str = "generateContent";
const STREAM_GENERATE: &str = "streamGenerateContent";

/// Where the model sits in the path: the last segment, written
/// `{model}:{method}` (or with the colon percent-encoded), right after a
/// `models` (or `tunedModels`) segment.
struct ModelSegment<'a> {
    /// Index of the segment among the non-empty path segments.
    at: usize,
    model: &'a str,
    /// The separator as written (`:` or `%3A`).
    separator: &'a str,
    method: &'a str,
}

fn model_segment(uri: &Uri) -> Option<ModelSegment<'_>> {
    let path = uri.path();
    // A trailing slash would make it another resource.
    if path.ends_with('/') {
        return None;
    }
    let segments = path_segments(uri);
    let at = segments.len().checked_sub(1)?;
    let last = segments[at];
    let (model, separator, method) = split_method(last)?;
    if model.is_empty() || !matches!(method, GENERATE | STREAM_GENERATE) {
        return None;
    }
    let collection = *segments.get(at.checked_sub(1)?)?;
    if !matches!(collection, "models" | "tunedModels") {
        return None;
    }
    // Vertex AI: only Google's own models speak this API.
    if at >= 3 && segments[at - 3] == "publishers" && segments[at - 2] != "google" {
        return None;
    }
    Some(ModelSegment {
        at,
        model,
        separator,
        method,
    })
}

fn split_method(segment: &str) -> Option<(&str, &str, &str)> {
    if let Some((model, method)) = segment.split_once(':') {
        return Some((model, ":", method));
    }
    let lower = segment.to_ascii_lowercase();
    let at = lower.find("%3a")?;
    Some((&segment[..at], &segment[at..at + 3], &segment[at + 3..]))
}

/// Whether the query asks for SSE (`alt=sse`).
fn wants_sse(uri: &Uri) -> bool {
    uri.query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| pair.eq_ignore_ascii_case("alt=sse"))
    })
}

/// Whether one part of a candidate's content is real output.
fn part_is_output(part: &Value) -> bool {
    if part.get("thought").and_then(Value::as_bool) == Some(true) {
        return false;
    }
    if let Some(text) = part.get("text") {
        return text.as_str().is_some_and(is_real_text);
    }
    // A function call counts even if its arguments are empty; code the model
    // wrote and media it generated are output too.
    ["functionCall", "executableCode", "inlineData", "fileData"]
        .iter()
        .any(|key| part.get(*key).is_some_and(|v| !v.is_null()))
}

/// Safety ratings the provider marked as the cause, as `CATEGORY (PROBABILITY)`.
fn blocking_ratings(ratings: Option<&Value>) -> Option<String> {
    let ratings = ratings?.as_array()?;
    let describe = |rating: &Value| {
        let category = str_field(rating, "category")?;
        Some(match str_field(rating, "probability") {
            Some(probability) => format!("{category} ({probability})"),
            None => category,
        })
    };
    let mut named: Vec<String> = ratings
        .iter()
        .filter(|r| r.get("blocked").and_then(Value::as_bool) == Some(true))
        .filter_map(describe)
        .collect();
    if named.is_empty() {
        named = ratings
            .iter()
            .filter(|r| str_field(r, "probability").as_deref() == Some("HIGH"))
            .filter_map(describe)
            .collect();
    }
    (!named.is_empty()).then(|| named.join("; "))
}

/// A chunk's `usageMetadata`: the prompt count includes cached tokens, and
/// the candidates' count leaves thinking out.
fn usage(chunk: &Value) -> Option<Usage> {
    let metadata = chunk.get("usageMetadata")?;
    let cached = count(metadata, "cachedContentTokenCount");
    let candidates = count(metadata, "candidatesTokenCount");
    let thoughts = count(metadata, "thoughtsTokenCount");
    let output = match (candidates, thoughts) {
        (None, None) => None,
        (c, t) => Some(c.unwrap_or(0).saturating_add(t.unwrap_or(0))),
    };
    known(Usage {
        input_tokens: fresh_input(count(metadata, "promptTokenCount"), cached),
        output_tokens: output,
        cache_read_tokens: cached,
        cache_write_tokens: None,
    })
}

/// A blocked prompt in `promptFeedback`.
fn prompt_block(chunk: &Value) -> Option<RefusalInfo> {
    let feedback = chunk.get("promptFeedback")?;
    let reason = str_field(feedback, "blockReason");
    let message = str_field(feedback, "blockReasonMessage");
    if reason.is_none() && message.is_none() {
        return None;
    }
    Some(RefusalInfo {
        signal: Some(RefusalSignal::BlockedPrompt),
        category: reason,
        explanation: message.or_else(|| blocking_ratings(feedback.get("safetyRatings"))),
        credit_token: None,
        usage: None,
        ..RefusalInfo::default()
    })
}

/// A refusal finish of `category`: the provider's message explains it, else
/// what the candidate says caused it: the sources a copyright stop cites,
/// the ratings that blocked any other.
fn finish_refusal(candidate: &Value, category: &str) -> RefusalInfo {
    let cause = || match category {
        RECITATION_CATEGORY => cited_sources(candidate.get("citationMetadata")),
        _ => blocking_ratings(candidate.get("safetyRatings")),
    };
    let explanation = str_field(candidate, "finishMessage").or_else(cause);
    RefusalInfo {
        signal: Some(RefusalSignal::StopReason),
        category: Some(category.to_owned()),
        explanation: explanation.map(|e| truncate_explanation(&e)),
        ..RefusalInfo::default()
    }
}

/// The sources a candidate's `citationMetadata` names, once each, as
/// `cites: URI, URI`: `citationSources` on the Gemini API, `citations` on
/// Vertex AI, each with a `uri` (Vertex may give a `title` instead).
fn cited_sources(metadata: Option<&Value>) -> Option<String> {
    let metadata = metadata?;
    let mut named: Vec<String> = Vec::new();
    for key in ["citationSources", "citations"] {
        let sources = metadata.get(key).and_then(Value::as_array);
        for source in sources.into_iter().flatten() {
            let name = str_field(source, "uri").or_else(|| str_field(source, "title"));
            if let Some(name) = name.filter(|n| !n.is_empty() && !named.contains(n)) {
                named.push(name);
            }
        }
    }
    (!named.is_empty()).then(|| format!("cites: {}", named.join(", ")))
}

/// What one `GenerateContentResponse` (a whole body or one stream chunk)
/// shows. Output in a candidate comes before its finish reason.
fn judge_chunk(chunk: &Value) -> Finding {
    let mut seen = Finding {
        model: str_field(chunk, "modelVersion"),
        error: chunk.get("error").is_some_and(Value::is_object),
        ..Finding::default()
    };
    if let Some(block) = prompt_block(chunk) {
        seen.refusal = Some(block);
    }
    for candidate in chunk
        .get("candidates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for part in candidate
            .get("content")
            .and_then(|c| c.get("parts"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            seen.real_output |= part_is_output(part);
            seen.tool_call |= part.get("functionCall").is_some_and(|v| !v.is_null());
            if part.get("thought").and_then(Value::as_bool) != Some(true) {
                if let Some(text) = part.get("text").and_then(Value::as_str) {
                    seen.text.push_str(text);
                }
            }
        }
        if seen.refusal.is_some() {
            continue;
        }
        let Some(reason) = str_field(candidate, "finishReason") else {
            continue;
        };
        match finish(&reason) {
            Finish::Refusal(category) => seen.refusal = Some(finish_refusal(candidate, category)),
            Finish::NotRefusal => {}
            Finish::Unknown => {
                tracing::warn!(
                    finish_reason = %reason,
                    "a Gemini finish reason the guard does not know; not taken for a refusal"
                );
                seen.unknown_stop.get_or_insert(reason);
            }
        }
    }
    // Every chunk reports usage; only a refusal's is read.
    if let Some(refused) = &mut seen.refusal {
        refused.usage = usage(chunk);
    }
    seen
}

impl Dialect for GeminiGenerateContent {
    fn api(&self) -> &'static Api {
        &GENERATE_CONTENT
    }

    fn recognise(&self, method: &Method, uri: &Uri) -> Option<Option<String>> {
        if method != Method::POST {
            return None;
        }
        model_segment(uri).map(|segment| Some(segment.model.to_owned()))
    }

    fn request_model(&self, path_model: Option<&str>, _body: &Value) -> Option<String> {
        path_model.map(str::to_owned)
    }

    fn is_streaming(&self, uri: &Uri, _body: &Value) -> bool {
        // Without `alt=sse` the stream method answers with one JSON array.
        model_segment(uri).is_some_and(|s| s.method == STREAM_GENERATE) && wants_sse(uri)
    }

    fn unguardable(&self, body: &Value) -> Option<&'static str> {
        // One candidate of several cannot be recovered alone.
        body.get("generationConfig")
            .and_then(|c| c.get("candidateCount"))
            .and_then(Value::as_u64)
            .is_some_and(|n| n > 1)
            .then_some("candidateCount > 1: several candidates")
    }

    fn structured_output(&self, body: &Value) -> Option<&'static str> {
        // The API reads both spellings of every field.
        let field = |value: &Value, camel: &str, snake: &str| -> Option<Value> {
            value.get(camel).or_else(|| value.get(snake)).cloned()
        };
        let present = |v: &Option<Value>| v.as_ref().is_some_and(|v| !v.is_null());
        let config = field(body, "generationConfig", "generation_config").unwrap_or_default();
        let mime = field(&config, "responseMimeType", "response_mime_type");
        let mime = mime
            .as_ref()
            .and_then(Value::as_str)
            .unwrap_or("text/plain");
        // `application/json`, and `text/x.enum` (one of a list of values).
        let typed = !mime.eq_ignore_ascii_case("text/plain");
        if typed
            || present(&field(&config, "responseSchema", "response_schema"))
            || present(&field(
                &config,
                "responseJsonSchema",
                "response_json_schema",
            ))
        {
            return Some("a structured response MIME type or schema");
        }
        let tools = field(body, "toolConfig", "tool_config").unwrap_or_default();
        let calling = field(&tools, "functionCallingConfig", "function_calling_config");
        let mode = calling.and_then(|c| field(&c, "mode", "mode"));
        let forced = mode
            .as_ref()
            .and_then(Value::as_str)
            .is_some_and(|m| m.eq_ignore_ascii_case("ANY"));
        forced.then_some("a forced function calling mode (ANY)")
    }

    fn conversation_seed(&self, body: &Value) -> Option<Vec<u8>> {
        // The role may be left out on user turns.
        let first_user = body.get("contents")?.as_array()?.iter().find(|c| {
            matches!(
                c.get("role").and_then(Value::as_str),
                None | Some("user") | Some("")
            )
        })?;
        let system = body
            .get("systemInstruction")
            .or_else(|| body.get("system_instruction"))
            .unwrap_or(&Value::Null);
        Some(crate::dialect::seed::seed_bytes(&[system, first_user]))
    }

    fn seed_reach(&self) -> Option<crate::dialect::SeedReach> {
        Some(crate::dialect::SeedReach {
            members: &["systemInstruction", "system_instruction"],
            turns: "contents",
            is_user: |role| matches!(role, None | Some("user") | Some("")),
        })
    }

    fn event_judge(&self) -> Box<dyn EventJudge> {
        Box::<GeminiStream>::default()
    }

    fn judge_json(&self, body: &Value) -> Finding {
        let Some(chunks) = body.as_array() else {
            return judge_chunk(body);
        };
        // A `streamGenerateContent` answer without `alt=sse`: the chunks in
        // order, up to the first refusal.
        let mut seen = Finding::default();
        for chunk in chunks {
            let one = judge_chunk(chunk);
            seen.real_output |= one.real_output;
            seen.tool_call |= one.tool_call;
            seen.text.push_str(&one.text);
            seen.error |= one.error;
            if seen.model.is_none() {
                seen.model = one.model;
            }
            if seen.unknown_stop.is_none() {
                seen.unknown_stop = one.unknown_stop;
            }
            if one.refusal.is_some() {
                seen.refusal = one.refusal;
                break;
            }
        }
        seen
    }

    fn append_note(&self, body: &mut Value, note: &str) -> Result<(), RewriteError> {
        let contents = body
            .get_mut("contents")
            .and_then(Value::as_array_mut)
            .ok_or(RewriteError("request has no contents array"))?;
        contents.push(json!({"role": "user", "parts": [{"text": note}]}));
        Ok(())
    }

    fn is_reroute(&self, _uri: &Uri, requested: &str, served: &str) -> bool {
        models::another_model(requested, served)
    }

    fn swap_model(
        &self,
        uri: &mut Uri,
        _body: &mut Value,
        model: &str,
    ) -> Result<(), RewriteError> {
        if model.is_empty()
            || model
                .chars()
                .any(|c| matches!(c, '/' | '?' | '#' | ':' | '%') || c.is_whitespace())
        {
            return Err(RewriteError("model does not fit in a URL path segment"));
        }
        let segment = model_segment(uri).ok_or(RewriteError("no model in the URL path"))?;
        let mut segments: Vec<String> = path_segments(uri).into_iter().map(str::to_owned).collect();
        segments[segment.at] = format!("{model}{}{}", segment.separator, segment.method);
        let mut path = format!("/{}", segments.join("/"));
        if let Some(query) = uri.query() {
            path = format!("{path}?{query}");
        }
        let mut parts = uri.clone().into_parts();
        parts.path_and_query = Some(
            path.parse()
                .map_err(|_| RewriteError("model does not fit in a URL path"))?,
        );
        *uri = Uri::from_parts(parts).map_err(|_| RewriteError("rebuilt URL is invalid"))?;
        Ok(())
    }

    fn request_id(&self, headers: &http::HeaderMap) -> Option<String> {
        ["x-goog-request-id", "x-request-id", "request-id"]
            .iter()
            .find_map(|name| headers.get(*name)?.to_str().ok().map(str::to_owned))
    }
}

/// Gemini chunks are self-contained: each one is a whole
/// `GenerateContentResponse`. After a refusal, a later chunk's usage (a
/// running total) is the refusal's cost.
#[derive(Default)]
struct GeminiStream {
    refused: bool,
}

impl EventJudge for GeminiStream {
    // Any chunk may carry a finish reason or prompt feedback, so every one
    // is read, committed or not.
    fn judge(&mut self, frame: &Frame, _committed: bool) -> Finding {
        let text = match frame.data() {
            Some(data) => data.to_owned(),
            // Not SSE: an error body sent as plain (often multi-line) JSON,
            // which the framer hands over as odd field lines.
            None => String::from_utf8_lossy(frame.raw()).into_owned(),
        };
        let text = text.trim();
        if text.is_empty() {
            return Finding::default();
        }
        let (mut seen, chunk) = match serde_json::from_str::<Value>(text) {
            Ok(chunks @ Value::Array(_)) => (GeminiGenerateContent.judge_json(&chunks), None),
            Ok(chunk) => (judge_chunk(&chunk), Some(chunk)),
            // Broken JSON is passed through, not judged.
            Err(_) => return Finding::default(),
        };
        if self.refused && seen.refusal.is_none() {
            seen.usage = chunk.as_ref().and_then(usage);
        }
        self.refused |= seen.refusal.is_some();
        seen
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use serde_json::json;

    use super::*;
    use crate::sse::SseFramer;

    fn blocked(usage: Value) -> Value {
        json!({"candidates": [{"finishReason": "SAFETY"}], "usageMetadata": usage})
    }

    #[test]
    fn a_refusal_takes_its_chunks_usage_with_thinking_as_output() {
        let usage = json!({"promptTokenCount": 40, "cachedContentTokenCount": 10,
            "candidatesTokenCount": 2, "thoughtsTokenCount": 25});
        let refusal = GeminiGenerateContent
            .judge_json(&blocked(usage))
            .refusal
            .unwrap();
        let expected = Usage::new()
            .input_tokens(30)
            .output_tokens(27)
            .cache_read_tokens(10);
        assert_eq!(refusal.usage, Some(expected));
    }

    #[test]
    fn only_chunks_after_a_refusal_report_usage() {
        let answer = json!({"candidates": [{"content": {"parts": [{"text": "Hi"}]}}],
            "usageMetadata": {"promptTokenCount": 5}});
        let later = json!({"usageMetadata": {"promptTokenCount": 40, "candidatesTokenCount": 1}});
        let stream = format!(
            "data: {answer}\n\ndata: {}\n\ndata: {later}\n\n",
            blocked(json!({"promptTokenCount": 40}))
        );
        let mut framer = SseFramer::new();
        framer.push(Bytes::from(stream)).unwrap();
        let mut judge = GeminiGenerateContent.event_judge();
        let seen: Vec<Finding> = std::iter::from_fn(|| framer.next_frame())
            .map(|frame| judge.judge(&frame, false))
            .collect();
        assert_eq!(seen[0].usage, None);
        assert_eq!(
            seen[1].refusal.as_ref().unwrap().usage,
            Some(Usage::new().input_tokens(40))
        );
        assert_eq!(
            seen[2].usage,
            Some(Usage::new().input_tokens(40).output_tokens(1))
        );
    }
}

#[cfg(test)]
mod usage_tests {
    use super::*;
    use crate::dialect::tests::{data, frames, judge_frames};

    const STREAM: &str =
        "https://h/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse&key=k";

    fn chunk(candidate: Value) -> Value {
        json!({"candidates": [candidate], "modelVersion": "gemini-2.5-pro"})
    }

    #[test]
    fn a_safety_finish_in_a_stream_names_the_blocking_ratings() {
        let candidate = json!({"content": {"role": "model", "parts": []}, "finishReason": "SAFETY",
            "safetyRatings": [
                {"category": "HARM_CATEGORY_HARASSMENT", "probability": "NEGLIGIBLE"},
                {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": true}]});
        let seen = judge_frames(
            &GeminiGenerateContent,
            &[data(&chunk(candidate).to_string())],
        );
        let info = seen[0].refusal.clone().unwrap();
        assert_eq!(info.signal, Some(RefusalSignal::StopReason));
        assert_eq!(info.category.as_deref(), Some("SAFETY"));
        assert_eq!(
            info.explanation.as_deref(),
            Some("HARM_CATEGORY_DANGEROUS_CONTENT (HIGH)")
        );
        assert_eq!(seen[0].model.as_deref(), Some("gemini-2.5-pro"));
    }

    #[test]
    fn a_finish_message_is_the_explanation_and_unknown_reasons_are_not_refusals() {
        let with_message = judge_chunk(&chunk(
            json!({"finishReason": "PROHIBITED_CONTENT", "finishMessage": "Blocked."}),
        ));
        assert_eq!(
            with_message.refusal.unwrap().explanation.as_deref(),
            Some("Blocked.")
        );
        for reason in ["STOP", "MAX_TOKENS", "SOMETHING_NEW"] {
            let seen = judge_chunk(&chunk(json!({"finishReason": reason})));
            assert!(seen.refusal.is_none(), "{reason}");
            let unknown = (reason == "SOMETHING_NEW").then_some(reason);
            assert_eq!(seen.unknown_stop.as_deref(), unknown, "kept as it came");
        }
    }

    #[test]
    fn a_blocked_prompt_is_read_from_prompt_feedback() {
        let blocked = judge_chunk(&json!({"promptFeedback": {"blockReason": "OTHER"}}));
        let info = blocked.refusal.unwrap();
        assert_eq!(info.signal, Some(RefusalSignal::BlockedPrompt));
        assert_eq!(info.category.as_deref(), Some("OTHER"));
        // A reason this file does not know, or only a message, still blocks.
        let message_only =
            judge_chunk(&json!({"promptFeedback": {"blockReasonMessage": "Not allowed."}}));
        let info = message_only.refusal.unwrap();
        assert_eq!(info.category, None);
        assert_eq!(info.explanation.as_deref(), Some("Not allowed."));
        let ratings_only = judge_chunk(
            &json!({"promptFeedback": {"safetyRatings": [{"category": "X", "probability": "HIGH"}]}}),
        );
        assert!(ratings_only.refusal.is_none());
    }

    #[test]
    fn thoughts_are_not_output_and_calls_and_code_are() {
        let parts = |parts: Value| judge_chunk(&chunk(json!({"content": {"parts": parts}})));
        let thought = parts(json!([{"text": "pondering", "thought": true}]));
        assert!(!thought.real_output);
        assert_eq!(thought.text, "");
        assert!(!parts(json!([{"text": "  "}])).real_output);
        let text = parts(json!([{"text": "Hi"}]));
        assert!(text.real_output);
        assert_eq!(text.text, "Hi");
        let call = parts(json!([{"functionCall": {"name": "f", "args": {}}}]));
        assert!(call.real_output && call.tool_call);
        assert!(parts(json!([{"executableCode": {"code": "1"}}])).real_output);
        assert!(!parts(json!([{"functionCall": null}])).real_output);
    }

    #[test]
    fn a_chunk_array_is_judged_in_order_up_to_the_first_refusal() {
        let body = json!([
            chunk(json!({"content": {"parts": [{"text": "Part"}]}})),
            chunk(json!({"finishReason": "RECITATION"})),
            chunk(json!({"finishReason": "SAFETY"})),
        ]);
        let seen = GeminiGenerateContent.judge_json(&body);
        assert!(seen.real_output);
        assert_eq!(
            seen.refusal.unwrap().category.as_deref(),
            Some("recitation")
        );
        assert_eq!(seen.model.as_deref(), Some("gemini-2.5-pro"));
    }

    #[test]
    fn an_error_outside_sse_framing_is_read_from_raw_bytes() {
        let raw =
            "{\n  \"error\": {\n    \"code\": 500,\n    \"message\": \"Internal\"\n  }\n}\n\n";
        let seen = judge_frames(&GeminiGenerateContent, &frames(raw));
        assert!(seen.iter().any(|o| o.error), "{seen:?}");
        let tolerated = judge_frames(&GeminiGenerateContent, &frames("data: {broken\n\n: c\n\n"));
        assert!(tolerated.iter().all(|o| *o == Finding::default()));
    }

    #[test]
    fn the_model_is_in_the_path_on_both_apis() {
        let model =
            |path: &str| GeminiGenerateContent.recognise(&Method::POST, &path.parse().unwrap());
        assert_eq!(model(STREAM), Some(Some("gemini-2.5-pro".to_owned())));
        assert_eq!(
            model("https://h/v1/projects/p/locations/us/publishers/google/models/gemini-2.0-flash:generateContent"),
            Some(Some("gemini-2.0-flash".to_owned()))
        );
        assert_eq!(
            model("https://h/v1beta/models/gemini-2.5-pro%3AgenerateContent"),
            Some(Some("gemini-2.5-pro".to_owned()))
        );
        assert_eq!(
            model("https://h/v1/projects/p/locations/us/publishers/anthropic/models/claude:generateContent"),
            None
        );
        assert_eq!(
            model("https://h/v1beta/models/gemini-2.5-pro:countTokens"),
            None
        );
        assert_eq!(
            model("https://h/v1beta/models/gemini-2.5-pro:generateContent/"),
            None
        );
        assert_eq!(
            GeminiGenerateContent.recognise(&Method::GET, &STREAM.parse().unwrap()),
            None
        );
    }

    #[test]
    fn only_alt_sse_is_a_stream() {
        let body = json!({});
        let streaming =
            |path: &str| GeminiGenerateContent.is_streaming(&path.parse().unwrap(), &body);
        assert!(streaming(STREAM));
        assert!(!streaming(
            "https://h/v1beta/models/gemini-2.5-pro:streamGenerateContent"
        ));
        assert!(!streaming(
            "https://h/v1beta/models/gemini-2.5-pro:generateContent?alt=sse"
        ));
    }

    #[test]
    fn a_model_swap_rewrites_the_path_and_keeps_the_query() {
        let mut uri: Uri = STREAM.parse().unwrap();
        let mut body = json!({"contents": []});
        GeminiGenerateContent
            .swap_model(&mut uri, &mut body, "gemini-2.5-flash")
            .unwrap();
        assert_eq!(
            uri,
            "https://h/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse&key=k"
        );
        assert_eq!(body, json!({"contents": []}));
        let mut encoded: Uri = "https://h/v1beta/models/a%3AgenerateContent"
            .parse()
            .unwrap();
        GeminiGenerateContent
            .swap_model(&mut encoded, &mut body, "b")
            .unwrap();
        assert_eq!(encoded, "https://h/v1beta/models/b%3AgenerateContent");
        for bad in ["", "a/b", "a:b", "a b", "a?b"] {
            assert!(
                GeminiGenerateContent
                    .swap_model(&mut uri, &mut body, bad)
                    .is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_rescue_note_is_a_user_content_at_the_end() {
        let mut body = json!({"contents": [{"role": "user", "parts": [{"text": "a"}]},
                                           {"role": "model", "parts": [{"text": "b"}]}]});
        GeminiGenerateContent
            .append_note(&mut body, "NOTE")
            .unwrap();
        assert_eq!(
            body["contents"][2],
            json!({"role": "user", "parts": [{"text": "NOTE"}]})
        );
        assert!(GeminiGenerateContent
            .append_note(&mut json!({}), "NOTE")
            .is_err());
    }

    #[test]
    fn several_candidates_cannot_be_guarded() {
        let body = json!({"generationConfig": {"candidateCount": 2}});
        assert!(GeminiGenerateContent.unguardable(&body).is_some());
        assert!(GeminiGenerateContent.unguardable(&json!({})).is_none());
    }

    #[test]
    fn every_block_reason_is_a_refusal_recorded_as_it_came() {
        for reason in [
            "SAFETY",
            "OTHER",
            "BLOCKLIST",
            "PROHIBITED_CONTENT",
            "IMAGE_SAFETY",
            "MODEL_ARMOR",
            "JAILBREAK",
            "A_REASON_NOT_YET_PUBLISHED",
        ] {
            let seen = judge_chunk(&json!({"promptFeedback": {"blockReason": reason}}));
            let info = seen.refusal.expect(reason);
            assert_eq!(info.signal, Some(RefusalSignal::BlockedPrompt));
            assert_eq!(info.category.as_deref(), Some(reason), "kept as it came");
        }
    }

    /// Each finish reason of the current APIs by what it is, written out
    /// here apart from the table, so that a reason moved in the table fails.
    #[test]
    fn every_finish_reason_of_the_current_apis_is_a_refusal_a_copyright_stop_or_none() {
        let refusals = [
            ("SAFETY", "SAFETY"),
            ("BLOCKLIST", "BLOCKLIST"),
            ("PROHIBITED_CONTENT", "PROHIBITED_CONTENT"),
            ("SPII", "SPII"),
            ("IMAGE_SAFETY", "IMAGE_SAFETY"),
            ("IMAGE_PROHIBITED_CONTENT", "IMAGE_PROHIBITED_CONTENT"),
            ("MODEL_ARMOR", "MODEL_ARMOR"),
            ("RECITATION", "recitation"),
            ("IMAGE_RECITATION", "recitation"),
        ];
        let none = [
            "FINISH_REASON_UNSPECIFIED",
            "STOP",
            "MAX_TOKENS",
            "LANGUAGE",
            "OTHER",
            "MALFORMED_FUNCTION_CALL",
            "UNEXPECTED_TOOL_CALL",
            "TOO_MANY_TOOL_CALLS",
            "MISSING_THOUGHT_SIGNATURE",
            "MALFORMED_RESPONSE",
            "IMAGE_OTHER",
            "NO_IMAGE",
        ];
        assert_eq!(FINISH_REASONS.len(), refusals.len() + none.len());
        for (reason, category) in refusals {
            let seen = judge_chunk(&chunk(json!({"finishReason": reason})));
            let info = seen.refusal.expect(reason);
            assert_eq!(info.signal, Some(RefusalSignal::StopReason));
            assert_eq!(info.category.as_deref(), Some(category), "{reason}");
            assert_eq!(seen.unknown_stop, None);
        }
        for reason in none {
            let seen = judge_chunk(&chunk(json!({"content": {"role": "model", "parts": []},
                "finishReason": reason})));
            assert_eq!(seen.refusal, None, "{reason}");
            assert_eq!(
                seen.unknown_stop, None,
                "{reason}: a known reason, not recorded"
            );
        }
        let unknown = judge_chunk(&chunk(
            json!({"finishReason": "A_REASON_NOT_YET_PUBLISHED"}),
        ));
        assert_eq!(unknown.refusal, None);
        assert_eq!(
            unknown.unknown_stop.as_deref(),
            Some("A_REASON_NOT_YET_PUBLISHED")
        );
    }

    #[test]
    fn a_copyright_stop_is_explained_by_its_message_else_by_the_sources_it_cites() {
        let gemini = json!({"finishReason": "RECITATION", "citationMetadata": {"citationSources": [
            {"startIndex": 1, "endIndex": 9, "uri": "https://example.com/a"},
            {"startIndex": 10, "endIndex": 20, "uri": "https://example.com/a"},
            {"uri": "https://example.com/b", "license": "mit"}]},
            "safetyRatings": [{"category": "HARM_CATEGORY_HARASSMENT", "probability": "HIGH"}]});
        let info = judge_chunk(&chunk(gemini)).refusal.unwrap();
        assert_eq!(info.category.as_deref(), Some("recitation"));
        assert_eq!(
            info.explanation.as_deref(),
            Some("cites: https://example.com/a, https://example.com/b")
        );
        let vertex = json!({"finishReason": "IMAGE_RECITATION", "citationMetadata": {"citations": [
            {"title": "A Book"}, {"uri": "https://example.com/c"}]}});
        let info = judge_chunk(&chunk(vertex)).refusal.unwrap();
        assert_eq!(
            info.explanation.as_deref(),
            Some("cites: A Book, https://example.com/c")
        );
        let told = json!({"finishReason": "RECITATION", "finishMessage": "Recited.",
            "citationMetadata": {"citations": [{"uri": "https://example.com/c"}]}});
        let info = judge_chunk(&chunk(told)).refusal.unwrap();
        assert_eq!(info.explanation.as_deref(), Some("Recited."));
        let bare = judge_chunk(&chunk(json!({"finishReason": "RECITATION"})));
        assert_eq!(bare.refusal.unwrap().explanation, None);
    }

    #[test]
    fn structured_output_is_a_json_or_enum_type_a_schema_or_forced_calls() {
        let demands = |body: Value| GeminiGenerateContent.structured_output(&body).is_some();
        assert!(demands(
            json!({"generationConfig": {"responseMimeType": "application/json"}})
        ));
        assert!(demands(
            json!({"generation_config": {"response_mime_type": "text/x.enum"}})
        ));
        assert!(demands(
            json!({"generationConfig": {"responseSchema": {"type": "OBJECT"}}})
        ));
        assert!(demands(
            json!({"generationConfig": {"responseJsonSchema": {"type": "object"}}})
        ));
        assert!(demands(
            json!({"toolConfig": {"functionCallingConfig": {"mode": "ANY"}}})
        ));
        assert!(!demands(json!({})));
        assert!(!demands(
            json!({"generationConfig": {"responseMimeType": "text/plain", "temperature": 0}})
        ));
        assert!(!demands(
            json!({"toolConfig": {"functionCallingConfig": {"mode": "AUTO"}}})
        ));
    }
}
