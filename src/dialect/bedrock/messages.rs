//! The two Bedrock surfaces whose bodies are Anthropic Messages bodies:
//! InvokeModel (and its stream, an AWS event stream whose `chunk` events
//! carry Anthropic events) and the Messages API on Bedrock; and the path,
//! guardrail and request-id helpers Converse shares with them.
//!
//! A model swap rewrites the path's model segment, percent-encoding the new
//! id (`/` always, `:` only when the client encoded its own), so that the
//! signature the layer below computes covers the path as sent.

use http::{HeaderMap, Method, Uri};
use serde_json::{json, Value};

use super::{eventstream, frames};
use crate::dialect::anthropic::AnthropicMessages;
use crate::dialect::facts::Api;
use crate::dialect::{
    is_real_text, path_segments, Dialect, EventJudge, Features, Finding, FrameRewrite, Handoff,
    LiveSplice, RefusalInfo, RewriteError,
};
use crate::refusal::{RefusalSignal, Usage, GUARDRAIL_CATEGORY};
use crate::sse::Frame;

/// The body field Bedrock adds when one of the operator's guardrails
/// replaced the answer with its canned text.
const GUARDRAIL_ACTION: &str = "amazon-bedrock-guardrailAction";

/// The beta that opts an InvokeModel request into fallback credit, in its
/// `anthropic_beta` body array (on the refused request and on the retry),
/// Bedrock's own value rather than the first-party one.
const BEDROCK_CREDIT_BETA: &str = "fallback-credit-2026-06-09";

/// Whether an InvokeModel body opted into fallback credit.
fn asks_for_credit(body: &Value) -> bool {
    body.get("anthropic_beta")
        .and_then(Value::as_array)
        .is_some_and(|betas| {
            betas
                .iter()
                .any(|b| b.as_str() == Some(BEDROCK_CREDIT_BETA))
        })
}

/// The model segment of a Bedrock runtime path: `.../model/{id}/{action}`
/// with `action` one of `actions`, last in the path. Returns the segment's
/// index, the id as written (still encoded) and the action.
pub(super) fn model_segment<'a>(
    uri: &'a Uri,
    actions: &[&str],
) -> Option<(usize, &'a str, &'a str)> {
    let segments = path_segments(uri);
    let n = segments.len();
    if n < 3 || segments[n - 3] != "model" || !actions.contains(&segments[n - 1]) {
        return None;
    }
    Some((n - 2, segments[n - 2], segments[n - 1]))
}

/// A `POST` to one of `actions` on a model path, and the model it names
/// (decoded): what both runtime surfaces recognise.
pub(super) fn recognise_action(
    method: &Method,
    uri: &Uri,
    actions: &[&str],
) -> Option<Option<String>> {
    if method != Method::POST {
        return None;
    }
    let (_, model, _) = model_segment(uri, actions)?;
    Some(Some(percent_decode(model)))
}

/// `%XX` escapes decoded (an id that does not decode stays as written).
fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .map_or_else(|_| text.to_owned(), |decoded| decoded.into_owned())
}

/// What a model id keeps raw in a path segment: RFC 3986's unreserved
/// bytes; `:` too, unless the client encoded its own.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// [`SEGMENT`] with `:` raw, as `AnthropicBedrock` writes model ids.
const SEGMENT_RAW_COLON: &percent_encoding::AsciiSet = &SEGMENT.remove(b':');

/// A model id as one path segment: unreserved bytes as they are, `:` as
/// it is unless `encode_colon`, everything else (`/` of an ARN included)
/// `%XX`.
fn percent_encode(model: &str, encode_colon: bool) -> String {
    let set = if encode_colon {
        SEGMENT
    } else {
        SEGMENT_RAW_COLON
    };
    percent_encoding::utf8_percent_encode(model, set).to_string()
}

/// `uri` with its model segment (at `at`) replaced by `model`.
pub(super) fn swap_path_model(
    uri: &mut Uri,
    at: usize,
    written: &str,
    model: &str,
) -> Result<(), RewriteError> {
    let encode_colon = written.to_ascii_uppercase().contains("%3A");
    let mut segments: Vec<String> = path_segments(uri).into_iter().map(str::to_owned).collect();
    segments[at] = percent_encode(model, encode_colon);
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

/// Whether a host is one of Bedrock's (`bedrock-runtime.{region}.amazonaws.com`,
/// `bedrock-mantle.{region}.api.aws`, their FIPS and VPC endpoint forms).
pub(crate) fn is_bedrock_host(host: &str) -> bool {
    let host = host.to_ascii_lowercase();
    host.starts_with("bedrock-runtime") || host.starts_with("bedrock-mantle")
}

/// A guardrail's intervention, as the refusal it is.
fn guardrail_refusal() -> RefusalInfo {
    RefusalInfo {
        signal: Some(RefusalSignal::StopReason),
        category: Some(GUARDRAIL_CATEGORY.to_owned()),
        explanation: Some("an Amazon Bedrock guardrail intervened".to_owned()),
        ..RefusalInfo::default()
    }
}

/// Whether a body or an event says a guardrail intervened.
fn guardrail_intervened(value: &Value) -> bool {
    value.get(GUARDRAIL_ACTION).and_then(Value::as_str) == Some("INTERVENED")
}

/// What a guardrail's intervention makes of an finding: its canned
/// text is no answer, and the response a refusal.
fn as_guardrail_refusal(seen: &mut Finding) {
    seen.real_output = false;
    seen.text.clear();
    seen.refusal = Some(guardrail_refusal());
}

/// InvokeModel and InvokeModelWithResponseStream on Anthropic models.
#[derive(Debug)]
pub(crate) struct BedrockInvokeModel;

const INVOKE_ACTIONS: &[&str] = &["invoke", "invoke-with-response-stream"];

impl Dialect for BedrockInvokeModel {
    fn api(&self) -> &'static Api {
        &super::INVOKE_MODEL
    }

    fn recognise(&self, method: &Method, uri: &Uri) -> Option<Option<String>> {
        recognise_action(method, uri, INVOKE_ACTIONS)
    }

    fn is_streaming(&self, uri: &Uri, _body: &Value) -> bool {
        model_segment(uri, INVOKE_ACTIONS)
            .is_some_and(|(_, _, a)| a == "invoke-with-response-stream")
    }

    fn conversation_seed(&self, body: &Value) -> Option<Vec<u8>> {
        AnthropicMessages.conversation_seed(body)
    }

    fn seed_reach(&self) -> Option<crate::dialect::SeedReach> {
        AnthropicMessages.seed_reach()
    }

    fn event_judge(&self) -> Box<dyn EventJudge> {
        Box::new(InvokeStream(AnthropicMessages.event_judge()))
    }

    fn judge_json(&self, body: &Value) -> Finding {
        let mut seen = AnthropicMessages.judge_json(body);
        if guardrail_intervened(body) {
            as_guardrail_refusal(&mut seen);
        }
        seen
    }

    fn judge_json_bytes(&self, body: &[u8], keep_text: bool) -> Option<Finding> {
        let mut seen = AnthropicMessages.judge_json_bytes(body, keep_text)?;
        if memchr::memmem::find(body, GUARDRAIL_ACTION.as_bytes()).is_some() {
            let json = serde_json::from_slice::<Value>(body).ok()?;
            if guardrail_intervened(&json) {
                as_guardrail_refusal(&mut seen);
            }
        }
        Some(seen)
    }

    fn append_note(&self, body: &mut Value, note: &str) -> Result<(), RewriteError> {
        AnthropicMessages.append_note(body, note)
    }

    fn is_reroute(&self, _uri: &Uri, requested: &str, served: &str) -> bool {
        // An application inference profile's or provisioned model's ARN
        // names no model: `another_claude` does not read it.
        crate::dialect::anthropic::models::another_claude(requested, served)
    }

    fn swap_model(
        &self,
        uri: &mut Uri,
        _body: &mut Value,
        model: &str,
    ) -> Result<(), RewriteError> {
        let (at, written, _) =
            model_segment(uri, INVOKE_ACTIONS).ok_or(RewriteError("no model in the path"))?;
        let written = written.to_owned();
        swap_path_model(uri, at, &written, model)
    }

    fn features(&self) -> &dyn Features {
        self
    }

    fn request_id(&self, headers: &HeaderMap) -> Option<String> {
        bedrock_request_id(headers)
    }
}

impl Features for BedrockInvokeModel {
    fn attach_credit_token(&self, _headers: &mut HeaderMap, body: &mut Value, token: &str) {
        // Bedrock redeems a token only under the beta the refused request
        // carried; the guard never adds the client's betas for it. The token
        // goes as a top-level string, the only form Bedrock documents.
        if !asks_for_credit(body) {
            return;
        }
        if let Some(object) = body.as_object_mut() {
            object.insert("fallback_credit_token".into(), json!(token));
        }
    }

    fn withdraw_fallback_credit(&self, _headers: &mut HeaderMap, body: &mut Value) {
        // The beta is the client's own and stays; only a token goes.
        if let Some(object) = body.as_object_mut() {
            object.remove("fallback_credit_token");
        }
    }

    fn fit_prefill(&self, body: &mut Value, model: &str) -> bool {
        AnthropicMessages.fit_prefill(body, model)
    }

    fn drop_unredeemable_fields(&self, body: &mut Value, fields: &[String]) {
        AnthropicMessages.drop_unredeemable_fields(body, fields);
    }
}

/// Bedrock's request id header.
pub(super) fn bedrock_request_id(headers: &HeaderMap) -> Option<String> {
    ["x-amzn-requestid", "x-amzn-request-id", "request-id"]
        .iter()
        .find_map(|name| headers.get(*name)?.to_str().ok().map(str::to_owned))
}

/// The Anthropic event judge over an InvokeModel event stream's chunks, plus
/// the guardrail's mark on a chunk.
struct InvokeStream(Box<dyn EventJudge>);

impl EventJudge for InvokeStream {
    fn judge(&mut self, frame: &Frame, committed: bool) -> Finding {
        let mut seen = self.0.judge(frame, committed);
        let marked = frame.data().is_some_and(|d| {
            memchr::memmem::find(d.as_bytes(), GUARDRAIL_ACTION.as_bytes()).is_some()
        });
        if marked
            && crate::dialect::json_event(frame).is_some_and(|event| guardrail_intervened(&event))
        {
            as_guardrail_refusal(&mut seen);
        }
        seen
    }

    fn skips_committed(&self, event: Option<&[u8]>) -> bool {
        self.0.skips_committed(event)
    }

    fn eventstream(&self) -> Option<eventstream::Translate> {
        Some(frames::invoke_frame)
    }
}

/// The Messages API on Bedrock: the Anthropic wire, minus what Bedrock
/// does not offer (server-side fallbacks, fallback credit).
#[derive(Debug)]
pub(crate) struct BedrockMessages;

impl Dialect for BedrockMessages {
    fn api(&self) -> &'static Api {
        &super::MESSAGES
    }

    fn recognise(&self, method: &Method, uri: &Uri) -> Option<Option<String>> {
        let host = uri.host()?;
        let path = uri.path().trim_end_matches('/');
        (method == Method::POST
            && is_bedrock_host(host)
            && path.ends_with("/anthropic/v1/messages"))
        .then_some(None)
    }

    fn is_streaming(&self, uri: &Uri, body: &Value) -> bool {
        AnthropicMessages.is_streaming(uri, body)
    }

    fn conversation_seed(&self, body: &Value) -> Option<Vec<u8>> {
        AnthropicMessages.conversation_seed(body)
    }

    fn seed_reach(&self) -> Option<crate::dialect::SeedReach> {
        AnthropicMessages.seed_reach()
    }

    fn event_judge(&self) -> Box<dyn EventJudge> {
        AnthropicMessages.event_judge()
    }

    fn judge_json(&self, body: &Value) -> Finding {
        AnthropicMessages.judge_json(body)
    }

    fn judge_json_bytes(&self, body: &[u8], keep_text: bool) -> Option<Finding> {
        AnthropicMessages.judge_json_bytes(body, keep_text)
    }

    fn append_note(&self, body: &mut Value, note: &str) -> Result<(), RewriteError> {
        AnthropicMessages.append_note(body, note)
    }

    fn is_reroute(&self, _uri: &Uri, requested: &str, served: &str) -> bool {
        // An application inference profile's or provisioned model's ARN
        // names no model: `another_claude` does not read it.
        crate::dialect::anthropic::models::another_claude(requested, served)
    }

    fn swap_model(&self, uri: &mut Uri, body: &mut Value, model: &str) -> Result<(), RewriteError> {
        AnthropicMessages.swap_model(uri, body, model)
    }

    fn features(&self) -> &dyn Features {
        self
    }

    fn request_id(&self, headers: &HeaderMap) -> Option<String> {
        bedrock_request_id(headers)
    }
}

/// Handoff marks and live thinking as on the first-party API; no partial
/// continuation, which needs the fallback credit Bedrock does not mint.
impl Features for BedrockMessages {
    fn handoff_stream(&self, handoff: &Handoff<'_>) -> Option<Box<dyn FrameRewrite>> {
        AnthropicMessages.handoff_stream(handoff)
    }

    fn handoff_json(&self, body: &mut Value, handoff: &Handoff<'_>) -> bool {
        AnthropicMessages.handoff_json(body, handoff)
    }

    fn live_splice(&self) -> Option<Box<dyn LiveSplice>> {
        AnthropicMessages.live_splice()
    }

    fn fit_prefill(&self, body: &mut Value, model: &str) -> bool {
        AnthropicMessages.fit_prefill(body, model)
    }
}

/// A `usage` object of Converse (`inputTokens` leaves the cache out).
pub(super) fn converse_usage(usage: &Value) -> Option<Usage> {
    crate::dialect::known(Usage {
        input_tokens: crate::dialect::count(usage, "inputTokens"),
        output_tokens: crate::dialect::count(usage, "outputTokens"),
        cache_read_tokens: crate::dialect::count(usage, "cacheReadInputTokens"),
        cache_write_tokens: crate::dialect::count(usage, "cacheWriteInputTokens"),
    })
}

/// A Converse `stopReason` that is a refusal.
pub(super) fn converse_refusal(stop_reason: Option<&str>) -> Option<RefusalInfo> {
    let category = match stop_reason? {
        "content_filtered" => "content_filtered",
        "guardrail_intervened" => GUARDRAIL_CATEGORY,
        _ => return None,
    };
    Some(RefusalInfo {
        signal: Some(RefusalSignal::StopReason),
        category: Some(category.to_owned()),
        ..RefusalInfo::default()
    })
}

/// Whether a Converse content block is real output: text that is not
/// blank, or a tool call (reasoning is not).
pub(super) fn converse_block_output(block: &Value) -> (bool, bool) {
    let tool = block.get("toolUse").is_some();
    let text = block
        .get("text")
        .and_then(Value::as_str)
        .is_some_and(is_real_text);
    (text || tool, tool)
}

/// A user turn holding just the rescue note, in Converse's shape.
pub(super) fn converse_note(note: &str) -> Value {
    json!({"role": "user", "content": [{"text": note}]})
}

/// The model id a Converse or Invoke path names, decoded.
#[cfg(test)]
fn path_model(uri: &str) -> Option<String> {
    let uri: Uri = uri.parse().ok()?;
    crate::dialect::recognise(&Method::POST, &uri)?.path_model
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::bedrock::BedrockConverse;
    use crate::refusal::WireApi;

    #[test]
    fn the_three_surfaces_are_recognised_and_other_calls_pass() {
        let api = |method: Method, uri: &str| {
            crate::dialect::recognise(&method, &uri.parse().unwrap()).map(|r| r.dialect.wire_api())
        };
        let host = "https://bedrock-runtime.us-east-1.amazonaws.com";
        assert_eq!(
            api(
                Method::POST,
                &format!("{host}/model/anthropic.claude-opus-4-7-v1:0/invoke")
            ),
            Some(WireApi::BedrockInvokeModel)
        );
        assert_eq!(
            api(
                Method::POST,
                &format!("{host}/model/a/invoke-with-response-stream")
            ),
            Some(WireApi::BedrockInvokeModel)
        );
        assert_eq!(
            api(Method::POST, &format!("{host}/model/a/converse-stream")),
            Some(WireApi::BedrockConverse)
        );
        assert_eq!(
            api(
                Method::POST,
                "https://bedrock-mantle.us-east-1.api.aws/anthropic/v1/messages"
            ),
            Some(WireApi::BedrockMessages)
        );
        // Elsewhere, `/anthropic/v1/messages` is a gateway's prefix before
        // the first-party path.
        assert_eq!(
            api(
                Method::POST,
                "https://gateway.example/anthropic/v1/messages"
            ),
            Some(WireApi::AnthropicMessages)
        );
        assert_eq!(
            api(
                Method::GET,
                &format!("{host}/inference-profiles?type=SYSTEM_DEFINED")
            ),
            None
        );
        assert_eq!(api(Method::GET, &format!("{host}/model/a/invoke")), None);
        assert_eq!(
            api(Method::POST, &format!("{host}/model/a/count-tokens")),
            None
        );
        assert_eq!(
            api(Method::POST, &format!("{host}/guardrail/g/version/1/apply")),
            None
        );
    }

    #[test]
    fn path_models_are_decoded_as_every_client_writes_them() {
        let host = "http://127.0.0.1:9";
        let sdk = path_model(&format!(
            "{host}/model/us.anthropic.claude-opus-4-7-v1:0/invoke"
        ));
        assert_eq!(sdk.as_deref(), Some("us.anthropic.claude-opus-4-7-v1:0"));
        let boto = path_model(&format!(
            "{host}/model/us.anthropic.claude-opus-4-7-v1%3A0/converse"
        ));
        assert_eq!(boto.as_deref(), Some("us.anthropic.claude-opus-4-7-v1:0"));
        let arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude";
        let encoded = path_model(&format!(
            "{host}/model/{}/invoke",
            percent_encode(arn, true)
        ));
        assert_eq!(encoded.as_deref(), Some(arn));
    }

    #[test]
    fn a_swap_encodes_the_new_model_as_the_client_encoded_its_own() {
        let arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-4-5-v1:0";
        let mut sdk: Uri =
            "http://h/model/anthropic.claude-opus-4-7-v1:0/invoke-with-response-stream?x=1"
                .parse()
                .unwrap();
        BedrockInvokeModel
            .swap_model(&mut sdk, &mut json!({}), arn)
            .unwrap();
        assert_eq!(
            sdk.to_string(),
            "http://h/model/arn:aws:bedrock:us-east-1:123456789012:inference-profile%2Fus.anthropic.claude-sonnet-4-5-v1:0/invoke-with-response-stream?x=1"
        );
        let mut boto: Uri = "http://h/model/anthropic.claude-opus-4-7-v1%3A0/converse"
            .parse()
            .unwrap();
        BedrockConverse
            .swap_model(
                &mut boto,
                &mut json!({}),
                "anthropic.claude-sonnet-4-5-v1:0",
            )
            .unwrap();
        assert_eq!(
            boto.to_string(),
            "http://h/model/anthropic.claude-sonnet-4-5-v1%3A0/converse"
        );
        assert_eq!(
            path_model(&boto.to_string()).as_deref(),
            Some("anthropic.claude-sonnet-4-5-v1:0")
        );
    }

    #[test]
    fn a_guardrails_canned_answer_is_a_refusal_not_output() {
        let body = json!({"type": "message", "content": [{"type": "text", "text": "Sorry, the model cannot answer this question."}],
            "stop_reason": "end_turn", GUARDRAIL_ACTION: "INTERVENED"});
        let seen = BedrockInvokeModel.judge_json(&body);
        assert!(!seen.real_output);
        assert_eq!(
            seen.refusal.unwrap().category.as_deref(),
            Some(GUARDRAIL_CATEGORY)
        );
        let bytes = serde_json::to_vec(&body).unwrap();
        let read = BedrockInvokeModel.judge_json_bytes(&bytes, true).unwrap();
        assert!(!read.real_output && read.refusal.is_some());
        let plain = json!({"content": [{"type": "text", "text": "Hi"}], "stop_reason": "end_turn"});
        assert!(BedrockInvokeModel.judge_json(&plain).real_output);
    }

    #[test]
    fn bedrock_messages_offers_no_fallback_credit_continuation() {
        let features = BedrockMessages.features();
        assert!(features.partial_continuation(1024).is_none());
        assert!(!features.carries_server_fallbacks(&json!({"fallbacks": [{"model": "m"}]})));
    }
}
