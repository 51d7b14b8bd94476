//! OpenAI's error JSON, for errors the guard answers itself:
//! `{"error":{"message":..,"type":..,"param":null,"code":..}}`.

use http::StatusCode;
use serde_json::{json, Value};

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
