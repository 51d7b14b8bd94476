//! OpenAI Chat Completions stream and error builders.

use bytes::Bytes;
use serde_json::{json, Value};

/// A Chat Completions stream of `chunks`, each one `data:` line, ended by
/// `data: [DONE]` when `done` (a stream cut by an error has none).
pub fn chat_stream(chunks: &[Value], done: bool) -> Bytes {
    let mut out = String::new();
    for chunk in chunks {
        out.push_str(&format!("data: {chunk}\n\n"));
    }
    if done {
        out.push_str("data: [DONE]\n\n");
    }
    Bytes::from(out)
}

/// The first chunk of an answer: the assistant's role, no content yet.
pub fn chat_role_chunk(model: &str) -> Value {
    json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1767225600,
        "model": model, "choices": [{"index": 0,
            "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]})
}

/// OpenAI's error object for a policy block, `{"error": {..}}`, with the
/// policy in `code`: the body of a 400, or a stream's error chunk.
pub fn policy_error(code: &str, message: &str) -> Value {
    json!({"error": {"message": message, "type": "invalid_request_error",
        "param": null, "code": code}})
}
