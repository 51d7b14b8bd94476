//! The error JSON of each API, for errors the guard or the proxy answers
//! with itself (a timeout, a request it cannot accept, an unreachable
//! upstream), so that clients parse them as they parse the provider's own.

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};
use serde_json::Value;

use super::facts::ErrorShape;
use super::registry;
use crate::refusal::WireApi;

impl ErrorShape {
    /// The shape of the API a wire API belongs to.
    pub(crate) fn for_wire_api(api: WireApi) -> &'static Self {
        registry::api(api).errors
    }

    /// The shape for a request path the guard may not recognise: the
    /// first shape, in the registry's order, that claims the path, else
    /// the registry's default.
    pub(crate) fn for_path(path: &str) -> &'static Self {
        let path = path.to_ascii_lowercase();
        registry::apis()
            .map(|api| api.errors)
            .find(|shape| (shape.claims_path)(&path))
            .unwrap_or(registry::DEFAULT_ERRORS)
    }

    /// The error body with the guard's `code`.
    pub(crate) fn body(&self, status: StatusCode, code: &str, message: &str) -> Value {
        (self.body)(status, code, message)
    }

    /// The body a provider itself answers a request it rejects with.
    pub(crate) fn provider_body(&self, status: StatusCode, message: &str) -> Value {
        (self.provider_body)(status, message)
    }
}

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
    shape: &ErrorShape,
    status: StatusCode,
    code: &str,
    message: &str,
) -> Response<Bytes> {
    respond(shape, status, Some(code), shape.body(status, code, message))
}

fn respond(
    shape: &ErrorShape,
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
    if let Some((name, value)) = shape.type_header.map(|header| header(status)) {
        headers.insert(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::{anthropic, gemini, openai};

    #[test]
    fn shapes_by_path() {
        assert_eq!(
            ErrorShape::for_path("/v1/messages"),
            &anthropic::errors::SHAPE
        );
        assert_eq!(
            ErrorShape::for_path("/v1/chat/completions"),
            &openai::errors::SHAPE
        );
        assert_eq!(
            ErrorShape::for_path("/v1/responses"),
            &openai::errors::SHAPE
        );
        assert_eq!(
            ErrorShape::for_path("/v1beta/models/gemini-2.5-pro:streamGenerateContent"),
            &gemini::errors::SHAPE
        );
        assert_eq!(
            ErrorShape::for_path(
                "/v1/projects/p/locations/l/publishers/anthropic/models/claude:streamRawPredict"
            ),
            &anthropic::errors::SHAPE
        );
        assert_eq!(ErrorShape::for_path("/admin"), &anthropic::errors::SHAPE);
    }

    #[test]
    fn bodies() {
        let gateway = StatusCode::GATEWAY_TIMEOUT;
        let a = anthropic::errors::SHAPE.body(gateway, "upstream_timeout", "slow");
        assert_eq!(a["type"], "error");
        assert_eq!(a["error"]["type"], "timeout_error");
        let o = openai::errors::SHAPE.body(gateway, "upstream_timeout", "slow");
        assert_eq!(o["error"]["code"], "upstream_timeout");
        assert_eq!(o["error"]["type"], "server_error");
        let g = gemini::errors::SHAPE.body(gateway, "upstream_timeout", "slow");
        assert_eq!(g["error"]["code"], 504);
        assert_eq!(g["error"]["status"], "DEADLINE_EXCEEDED");
    }

    #[test]
    fn each_wire_api_answers_in_its_own_shape() {
        assert_eq!(
            ErrorShape::for_wire_api(WireApi::AnthropicMessages),
            &anthropic::errors::SHAPE
        );
        assert_eq!(
            ErrorShape::for_wire_api(WireApi::OpenAiResponses),
            &openai::errors::SHAPE
        );
        assert_eq!(
            ErrorShape::for_wire_api(WireApi::GeminiGenerateContent),
            &gemini::errors::SHAPE
        );
        assert_eq!(
            ErrorShape::for_path("/openai/deployments/d/embeddings"),
            &openai::errors::SHAPE
        );
    }

    #[test]
    fn error_types_follow_the_status() {
        let overloaded = StatusCode::from_u16(529).unwrap();
        let a = anthropic::errors::SHAPE.body(overloaded, "c", "m");
        assert_eq!(a["error"]["type"], "overloaded_error");
        let bad = anthropic::errors::SHAPE.body(StatusCode::BAD_REQUEST, "c", "m");
        assert_eq!(bad["error"]["type"], "invalid_request_error");
        assert_eq!(bad["error"]["message"], "m");
        let o = openai::errors::SHAPE.body(StatusCode::TOO_MANY_REQUESTS, "c", "m");
        assert_eq!(o["error"]["type"], "rate_limit_error");
        assert!(o["error"]["param"].is_null());
        let g = gemini::errors::SHAPE.body(StatusCode::SERVICE_UNAVAILABLE, "c", "m");
        assert_eq!(g["error"]["status"], "UNAVAILABLE");
        assert_eq!(g["error"]["code"], 503);
    }
}
