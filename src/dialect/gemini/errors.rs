//! Google's error JSON, for errors the guard answers itself:
//! `{"error":{"code":N,"message":..,"status":..}}`.

use http::StatusCode;
use serde_json::{json, Value};

/// The error body for `status`.
pub(crate) fn body(status: StatusCode, message: &str) -> Value {
    json!({
        "error": {
            "code": status.as_u16(),
            "message": message,
            "status": google_status(status),
        },
    })
}

/// Google's canonical status names by HTTP status.
fn google_status(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 411 | 413 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        405 | 501 => "UNIMPLEMENTED",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        502 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "INTERNAL",
    }
}
