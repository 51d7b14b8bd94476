//! Google's error JSON, for errors the guard answers itself:
//! `{"error":{"code":N,"message":..,"status":..}}`.

use http::StatusCode;
use serde_json::{json, Value};

use crate::dialect::facts::ErrorShape;

/// Google's error shape: the Gemini API's and Vertex AI's.
pub(crate) const SHAPE: ErrorShape = ErrorShape {
    name: "google",
    body: |status, _code, message| body(status, message),
    provider_body: body,
    type_header: None,
    claims_path,
};

/// The Gemini API's and Vertex AI's methods and resources.
fn claims_path(path: &str) -> bool {
    [
        ":generatecontent",
        ":streamgeneratecontent",
        "/models/",
        "/publishers/",
    ]
    .iter()
    .any(|part| path.contains(part))
}

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
