//! Anthropic's error JSON, for errors the guard answers itself:
//! `{"type":"error","error":{"type":..,"message":..}}`.

use http::StatusCode;
use serde_json::{json, Value};

use crate::dialect::facts::ErrorShape;

/// Anthropic's error shape: also the Messages API's on Bedrock and on
/// Vertex AI, and the one a path no API claims is answered in.
pub(crate) const SHAPE: ErrorShape = ErrorShape {
    name: "anthropic",
    body: |status, _code, message| body(status, message),
    provider_body: body,
    type_header: None,
    claims_path,
};

/// Claude on Vertex AI (`:rawPredict`, `:streamRawPredict`); Anthropic's
/// own paths need no claim, its shape being the default.
fn claims_path(path: &str) -> bool {
    path.contains(":rawpredict") || path.contains(":streamrawpredict")
}

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
