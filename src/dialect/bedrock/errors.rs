//! Amazon Bedrock's runtime error JSON (InvokeModel, Converse):
//! `{"message":..}`, the exception's name in `x-amzn-ErrorType`. Built
//! without the `bedrock` feature too: a request to a Bedrock path gets
//! Bedrock's errors either way.

use http::StatusCode;
use serde_json::{json, Value};

use crate::dialect::facts::ErrorShape;

/// Bedrock's runtime error shape (the Messages API on Bedrock answers in
/// Anthropic's).
pub(crate) const SHAPE: ErrorShape = ErrorShape {
    name: "bedrock",
    body: |_status, _code, message| body(message),
    provider_body: |_status, message| body(message),
    type_header: Some(type_header),
    claims_path,
};

fn body(message: &str) -> Value {
    json!({"message": message})
}

/// `x-amzn-errortype`, with Bedrock's exception name for `status`.
fn type_header(status: StatusCode) -> (&'static str, &'static str) {
    ("x-amzn-errortype", exception(status))
}

/// Bedrock's exception names by status.
fn exception(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "UnrecognizedClientException",
        403 => "AccessDeniedException",
        404 => "ResourceNotFoundException",
        408 | 504 => "ModelTimeoutException",
        429 => "ThrottlingException",
        503 => "ServiceUnavailableException",
        400..=499 => "ValidationException",
        _ => "InternalServerException",
    }
}

/// A Bedrock runtime path (`/model/{id}/invoke`, `.../converse-stream`, ...)
/// or one of the listings Bedrock clients call on the same host.
fn claims_path(path: &str) -> bool {
    let model_call = path.contains("/model/")
        && [
            "/invoke",
            "/invoke-with-response-stream",
            "/converse",
            "/converse-stream",
        ]
        .iter()
        .any(|action| path.trim_end_matches('/').ends_with(action));
    model_call || path.starts_with("/inference-profiles") || path.starts_with("/foundation-models")
}
