//! The proxy's own error responses, in the error shape of the API the path
//! belongs to, so SDKs raise their typed error.

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::BodyExt;

use super::ProxyBody;

/// An error response for `path`: `status`, a JSON body in the API's shape
/// carrying `message`, and `x-refusal-guard-error: code`.
pub(crate) fn error_response(
    path: &str,
    status: StatusCode,
    code: &'static str,
    message: &str,
) -> Response<ProxyBody> {
    let body = shaped(path, status, code, message);
    let mut response = Response::new(
        http_body_util::Full::new(Bytes::from(body.to_string()))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        HeaderName::from_static("x-refusal-guard-error"),
        HeaderValue::from_static(code),
    );
    response
}

fn shaped(path: &str, status: StatusCode, code: &str, message: &str) -> serde_json::Value {
    if path.contains("/chat/completions") || path.ends_with("/responses") {
        serde_json::json!({"error": {"message": message, "type": "api_error",
            "param": null, "code": code}})
    } else if path.contains(":generateContent")
        || path.contains(":streamGenerateContent")
        || path.contains("/models/")
    {
        let gemini_status = match status {
            StatusCode::BAD_REQUEST => "INVALID_ARGUMENT",
            StatusCode::METHOD_NOT_ALLOWED => "UNIMPLEMENTED",
            _ => "UNAVAILABLE",
        };
        serde_json::json!({"error": {"code": status.as_u16(), "message": message,
            "status": gemini_status}})
    } else {
        let kind = match status {
            StatusCode::BAD_REQUEST | StatusCode::METHOD_NOT_ALLOWED => "invalid_request_error",
            StatusCode::SERVICE_UNAVAILABLE => "overloaded_error",
            _ => "api_error",
        };
        serde_json::json!({"type": "error", "error": {"type": kind, "message": message}})
    }
}
