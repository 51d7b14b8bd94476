//! Anthropic's error JSON, for errors the guard answers itself:
//! `{"type":"error","error":{"type":..,"message":..}}`.

use http::StatusCode;
use serde_json::{json, Value};

/// The error body for `status`.
pub(crate) fn body(status: StatusCode, message: &str) -> Value {
    json!({
        "type": "error",
        "error": {"type": anthropic_type(status), "message": message},
    })
}

/// Anthropic's documented error types by status.
fn anthropic_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        504 => "timeout_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    }
}
