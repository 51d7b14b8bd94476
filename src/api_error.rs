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
    guard_error(ErrorShape::for_path(path), status, code, message)
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
    guard_error(ErrorShape::for_wire_api(api), status, code, message)
}

/// What a provider itself answers a request it rejects with, in the error
/// shape of the API at `path`: as [`api_error`], but with no code of the
/// guard's (no `x-refusal-guard-error` header; OpenAI's `code` is null, as
/// OpenAI sends it for an invalid parameter). Test upstreams and the strict
/// simulator answer with it.
///
/// ```
/// use http::StatusCode;
/// use refusal_guard::api_error::provider_error;
///
/// let response = provider_error("/v1/chat/completions", StatusCode::BAD_REQUEST,
///     "messages: must not be empty");
/// assert!(response.headers().get("x-refusal-guard-error").is_none());
/// let json: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
/// assert_eq!(json["error"]["type"], "invalid_request_error");
/// assert!(json["error"]["code"].is_null());
/// ```
pub fn provider_error(path: &str, status: StatusCode, message: &str) -> Response<Bytes> {
    let shape = ErrorShape::for_path(path);
    respond(shape, status, None, shape.provider_body(status, message))
}

/// The same for a request of a known wire API (Bedrock's APIs answer in
/// Bedrock's shape, with its `x-amzn-errortype` header).
///
/// ```
/// use http::StatusCode;
/// use refusal_guard::{api_error::provider_error_for, refusal::WireApi};
///
/// let response = provider_error_for(WireApi::BedrockInvokeModel,
///     StatusCode::BAD_REQUEST, "Malformed input request");
/// assert_eq!(response.headers()["x-amzn-errortype"], "ValidationException");
/// ```
pub fn provider_error_for(api: WireApi, status: StatusCode, message: &str) -> Response<Bytes> {
    let shape = ErrorShape::for_wire_api(api);
    respond(shape, status, None, shape.provider_body(status, message))
}

fn guard_error(
    shape: ErrorShape,
    status: StatusCode,
    code: &str,
    message: &str,
) -> Response<Bytes> {
    respond(shape, status, Some(code), shape.body(status, code, message))
}

fn respond(
    shape: ErrorShape,
    status: StatusCode,
    code: Option<&str>,
    body: serde_json::Value,
) -> Response<Bytes> {
    let mut response = Response::new(Bytes::from(body.to_string()));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(value) = code.and_then(|code| HeaderValue::from_str(code).ok()) {
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
