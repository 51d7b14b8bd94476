//! What Anthropic's responses say about a refusal, server-side fallbacks and
//! its cost: the signals every other part of the dialect reads.

use http::Uri;
use serde_json::Value;

use crate::dialect::openai::chat::CONTENT_FILTER;
use crate::dialect::{
    count, is_real_text, known, path_segments, str_field, truncate_explanation, Iterations,
    RefusalInfo, ServerFallback,
};

use crate::refusal::Prefill as ClaimState;
use crate::refusal::{FallbackCredit, RefusalSignal, Usage};

/// Block types that are a tool call: real output even if their input never
/// finishes.
pub(super) fn is_tool_call_block(kind: &str) -> bool {
    matches!(kind, "tool_use" | "server_tool_use" | "mcp_tool_use")
}

/// Real output in a content block as it starts (or, in JSON, as it is).
pub(super) fn block_is_output(block: &Value) -> bool {
    match block.get("type").and_then(Value::as_str) {
        Some("text") => block
            .get("text")
            .and_then(Value::as_str)
            .is_some_and(is_real_text),
        Some(kind) => is_tool_call_block(kind),
        None => false,
    }
}

pub(super) fn block_is_tool_call(block: &Value) -> bool {
    block
        .get("type")
        .and_then(Value::as_str)
        .is_some_and(is_tool_call_block)
}

pub(super) fn server_fallback(block: &Value) -> Option<ServerFallback> {
    if block.get("type").and_then(Value::as_str) != Some("fallback") {
        return None;
    }
    let model = |key: &str| block.get(key).and_then(|m| str_field(m, "model"));
    Some(ServerFallback {
        from: model("from"),
        to: model("to"),
        category: block.get("trigger").and_then(|t| str_field(t, "category")),
    })
}

/// A refusal in a `message_delta.delta` or a whole message.
pub(super) fn refusal(carrier: &Value) -> Option<RefusalInfo> {
    if carrier.get("stop_reason").and_then(Value::as_str) != Some("refusal") {
        return None;
    }
    let details = carrier.get("stop_details").unwrap_or(&Value::Null);
    let claim = details.get("fallback_has_prefill_claim");
    Some(RefusalInfo {
        signal: Some(RefusalSignal::StopReason),
        category: str_field(details, "category"),
        explanation: str_field(details, "explanation"),
        credit_token: str_field(details, "fallback_credit_token"),
        usage: None,
        recommended_model: str_field(details, "recommended_model"),
        prefill: ClaimState::from_field(claim.and_then(Value::as_bool)),
    })
}

/// How Anthropic's error message begins when its filter blocked the output,
/// lowercased.
pub(super) const OUTPUT_BLOCKED: &str = "output blocked by content filtering policy";

/// A refusal sent as an error (an HTTP 400 body or a stream `error` event):
/// `{"type":"error","error":{"type":"invalid_request_error","message":"Output
/// blocked by content filtering policy"}}`. Told apart from a real invalid
/// request by its message alone; the category is `content_filter` unless
/// the error's `details` names one.
pub(super) fn blocked_output(body: &Value) -> Option<RefusalInfo> {
    let error = body.get("error")?;
    let message = str_field(error, "message")?;
    if !message
        .trim_start()
        .to_ascii_lowercase()
        .starts_with(OUTPUT_BLOCKED)
    {
        return None;
    }
    let named = error.get("details").and_then(|d| str_field(d, "category"));
    Some(RefusalInfo {
        signal: Some(RefusalSignal::BlockedOutput),
        category: Some(named.unwrap_or_else(|| CONTENT_FILTER.to_owned())),
        explanation: Some(truncate_explanation(message.trim())),
        ..RefusalInfo::default()
    })
}

/// One `usage.iterations` entry's kind, model and cost.
pub(super) fn iteration(entry: &Value) -> (Option<&str>, Option<String>, Option<Usage>) {
    let kind = entry.get("type").and_then(Value::as_str);
    (kind, str_field(entry, "model"), usage(entry))
}

/// What a response's `usage.iterations` says of its server-side fallbacks:
/// something only when a fallback served (a `fallback_message` entry).
pub(super) fn chain_of<'a, I>(entries: I) -> Option<Iterations>
where
    I: IntoIterator<Item = (Option<&'a str>, Option<String>, Option<Usage>)>,
{
    let mut chain = Iterations::default();
    let mut served = false;
    for (kind, model, cost) in entries {
        match kind {
            Some("fallback_message") => {
                served = true;
                chain.served_by = model;
            }
            Some("message") if !served => {
                if chain.first_declined.is_none() {
                    chain.first_declined = model;
                }
                if let Some(cost) = cost {
                    *chain.declined_usage.get_or_insert_with(Usage::default) += cost;
                }
            }
            _ => {}
        }
    }
    served.then_some(chain)
}

pub(super) fn iterations(usage: &Value) -> Option<Iterations> {
    chain_of(usage.get("iterations")?.as_array()?.iter().map(iteration))
}

/// `usage.fallback_credit`: what became of a credit token presented.
/// `status` is `{"type": "redeemed"}` or `{"type": "not_applied", "reason":
/// ..}`, the latter with `remove_to_redeem`, a list of the request's field
/// names, exactly when the reason is `variant_fields_present`
/// (anthropic-sdk-python `types/beta/beta_fallback_credit_usage.py`,
/// `beta_fallback_credit_not_applied.py`: "a corrected re-send inside the
/// token's five-minute window can still redeem").
pub(super) fn fallback_credit(usage: &Value) -> Option<FallbackCredit> {
    let status = usage.get("fallback_credit")?.get("status")?;
    let fields = status.get("remove_to_redeem").and_then(Value::as_array);
    let fields = fields.into_iter().flatten().filter_map(Value::as_str);
    credit_status(
        status.get("type").and_then(Value::as_str),
        str_field(status, "reason"),
        fields.map(str::to_owned).collect(),
    )
}

pub(super) fn credit_status(
    kind: Option<&str>,
    reason: Option<String>,
    remove_to_redeem: Vec<String>,
) -> Option<FallbackCredit> {
    match kind? {
        "redeemed" => Some(FallbackCredit::Redeemed),
        "not_applied" => Some(FallbackCredit::NotApplied {
            reason,
            remove_to_redeem,
        }),
        _ => None,
    }
}

/// A `usage` object: `input_tokens` already leaves the cache out.
pub(super) fn usage(usage: &Value) -> Option<Usage> {
    known(Usage {
        input_tokens: count(usage, "input_tokens"),
        output_tokens: count(usage, "output_tokens"),
        cache_read_tokens: count(usage, "cache_read_input_tokens"),
        cache_write_tokens: count(usage, "cache_creation_input_tokens"),
    })
}

/// Where the model sits in a Vertex AI path: the segment after `models`,
/// written `{model}:{method}`.
pub(super) fn vertex_model_segment(uri: &Uri) -> Option<(usize, &str, &str)> {
    let segments = path_segments(uri);
    // The last `models` segment: a base path may contain the word too.
    let at = segments.iter().rposition(|s| *s == "models")? + 1;
    let (model, method) = segments.get(at)?.split_once(':')?;
    let publisher = segments.get(at.checked_sub(2)?)?;
    // Vertex AI counts a Claude request's tokens at the model name
    // `count-tokens` (`.../anthropic/models/count-tokens:rawPredict`, Vertex
    // AI docs "Count tokens" for Claude): no model answers it, nothing to
    // guard.
    let counting = model == "count-tokens";
    let messages = matches!(method, "rawPredict" | "streamRawPredict");
    (*publisher == "anthropic" && messages && !counting).then_some((at, model, method))
}

/// Whether the request goes to Anthropic's own API. Server-side fallback is
/// first party only ("Refusals and fallback": not on Bedrock, Vertex AI or
/// Foundry), so `fallbacks` is never added, retargeted or kept elsewhere.
/// Bedrock's paths are not Messages paths at all; Foundry serves
/// `/anthropic/v1/messages` on `*.services.ai.azure.com`.
pub(super) fn first_party(uri: &Uri) -> bool {
    vertex_model_segment(uri).is_none() && !on_foundry(uri)
}

/// Whether the request goes to Claude on Azure AI Foundry, whose `model`
/// names a deployment rather than a model.
pub(super) fn on_foundry(uri: &Uri) -> bool {
    uri.host()
        .is_some_and(|host| host.ends_with(".services.ai.azure.com"))
}
