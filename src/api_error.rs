//! Errors the guard or the proxy answers with itself, in the error shape of
//! the API the request was for (Anthropic, OpenAI or Gemini JSON), so that
//! SDKs raise them as the provider's own errors.

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};

use crate::dialect::errors::ErrorShape;
use crate::refusal::WireApi;

/// An error response for a request to `path`, in that API's error shape,
/// with `code` in the [`header::ERROR`](crate::header::ERROR) header.
///
/// ```
/// use http::StatusCode;
/// use refusal_guard::api_error::api_error;
///
/// let response = api_error("/v1/chat/completions", StatusCode::GATEWAY_TIMEOUT,
///     "upstream_timeout", "the upstream sent no response head within 600 s");
/// assert_eq!(response.status(), 504);
/// assert_eq!(response.headers()["x-refusal-guard-error"], "upstream_timeout");
/// let json: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
/// assert_eq!(json["error"]["code"], "upstream_timeout");
/// ```
pub fn api_error(path: &str, status: StatusCode, code: &str, message: &str) -> Response<Bytes> {
    respond(ErrorShape::for_path(path), status, code, message)
}

/// The same for a request of a known wire API.
///
/// ```
/// use http::StatusCode;
/// use refusal_guard::{api_error::api_error_for, refusal::WireApi};
///
/// let response = api_error_for(WireApi::GeminiGenerateContent,
///     StatusCode::SERVICE_UNAVAILABLE, "overloaded", "too many held streams");
/// let json: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
/// assert_eq!(json["error"]["status"], "UNAVAILABLE");
/// ```
pub fn api_error_for(
    api: WireApi,
    status: StatusCode,
    code: &str,
    message: &str,
) -> Response<Bytes> {
    respond(ErrorShape::for_wire_api(api), status, code, message)
}

fn respond(shape: ErrorShape, status: StatusCode, code: &str, message: &str) -> Response<Bytes> {
    let body = Bytes::from(shape.body(status, code, message).to_string());
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Ok(value) = HeaderValue::from_str(code) {
        headers.insert(HeaderName::from_static(crate::header::ERROR), value);
    }
    if let Some((name, value)) = shape.type_header(status) {
        headers.insert(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
    }
    response
}
