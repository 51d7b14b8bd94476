//! OpenAI's error JSON, for errors the guard answers itself:
//! `{"error":{"message":..,"type":..,"param":null,"code":..}}`.

use http::StatusCode;
use serde_json::{json, Value};

use crate::dialect::facts::ErrorShape;

/// OpenAI's error shape: Chat Completions' and Responses', on OpenAI and on
/// Azure.
pub(crate) const SHAPE: ErrorShape = ErrorShape {
    name: "openai",
    body,
    provider_body,
    type_header: None,
    claims_path,
};

/// OpenAI's and Azure OpenAI's resources.
fn claims_path(path: &str) -> bool {
    [
        "/chat/completions",
        "/responses",
        "/openai/",
        "/completions",
        "/embeddings",
    ]
    .iter()
    .any(|part| path.contains(part))
}

/// As a provider answers a request it rejects: `code` is null, as OpenAI
/// sends it for an invalid parameter.
fn provider_body(status: StatusCode, message: &str) -> Value {
    let mut body = body(status, "", message);
    body["error"]["code"] = Value::Null;
    body
}

/// The error body for `status`, with the guard's `code`.
pub(crate) fn body(status: StatusCode, code: &str, message: &str) -> Value {
    json!({
        "error": {
            "message": message,
            "type": openai_type(status),
            "param": null,
            "code": code,
        },
    })
}

fn openai_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        _ => "server_error",
    }
}
