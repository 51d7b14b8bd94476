//! OpenAI Chat Completions: a completion, or its `data:` chunks ending in
//! `[DONE]`; the error-shaped refusal is the API's 400 policy error.

use bytes::Bytes;
use http::Response;
use serde_json::{json, Value};

use super::{pieces, policy_error, Said, SimulatedBody};

fn finish_reason(said: &Said<'_>) -> &'static str {
    if said.refused() {
        "content_filter"
    } else {
        "stop"
    }
}

fn usage(said: &Said<'_>) -> Value {
    json!({"prompt_tokens":said.input_tokens,"completion_tokens":said.output_tokens,
        "total_tokens":said.input_tokens + said.output_tokens})
}

fn chunk(said: &Said<'_>, delta: Value, finish: Option<&str>) -> Bytes {
    let chunk = json!({"id":"chatcmpl-simulated","object":"chat.completion.chunk","created":0,
        "model":said.model,"choices":[{"index":0,"delta":delta,"finish_reason":finish}]});
    Bytes::from(format!("data: {chunk}\n\n"))
}

/// The stream: the role, the text a word at a time, the finish reason, the
/// usage chunk when the request asked for it (`stream_options.include_usage`),
/// `[DONE]`.
pub(super) fn stream(said: &Said<'_>, include_usage: bool) -> Vec<Bytes> {
    let mut chunks = vec![chunk(said, json!({"role":"assistant","content":""}), None)];
    for piece in pieces(said.text) {
        chunks.push(chunk(said, json!({"content":piece}), None));
    }
    chunks.push(chunk(said, json!({}), Some(finish_reason(said))));
    if include_usage {
        let usage = json!({"id":"chatcmpl-simulated","object":"chat.completion.chunk",
            "created":0,"model":said.model,"choices":[],"usage":usage(said)});
        chunks.push(Bytes::from(format!("data: {usage}\n\n")));
    }
    chunks.push(Bytes::from_static(b"data: [DONE]\n\n"));
    chunks
}

/// The whole completion.
pub(super) fn completion(said: &Said<'_>) -> Value {
    let content = if said.text.is_empty() && said.refused() {
        Value::Null
    } else {
        Value::from(said.text)
    };
    json!({"id":"chatcmpl-simulated","object":"chat.completion","created":0,"model":said.model,
        "choices":[{"index":0,"message":{"role":"assistant","content":content,"refusal":null},
            "finish_reason":finish_reason(said)}],
        "usage":usage(said)})
}

/// The policy error: HTTP 400, `error.code` the reply's code, else
/// `cyber_policy` for `cyber` and `invalid_prompt` for any other category
/// (the codes Chat Completions answers with).
pub(super) fn blocked(said: &Said<'_>) -> Response<SimulatedBody> {
    let code = said.code.unwrap_or(match said.category {
        "cyber" => "cyber_policy",
        _ => "invalid_prompt",
    });
    policy_error(said, code)
}
