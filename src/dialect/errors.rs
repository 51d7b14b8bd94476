//! The error JSON of each API, for errors the guard or the proxy answers
//! with itself (a timeout, a request it cannot accept, an unreachable
//! upstream), so that clients parse them as they parse the provider's own.

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};
use serde_json::{json, Value};

use super::{anthropic, gemini, openai};

use crate::refusal::WireApi;

/// Which API's error JSON to answer in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorShape {
    /// `{"type":"error","error":{"type":..,"message":..}}`
    Anthropic,
    /// `{"error":{"message":..,"type":..,"param":null,"code":..}}`
    OpenAi,
    /// `{"error":{"code":N,"message":..,"status":..}}`
    Google,
    /// Amazon Bedrock's runtime API (InvokeModel, Converse):
    /// `{"message":..}`, the exception's name in `x-amzn-ErrorType`.
    Bedrock,
}

impl ErrorShape {
    /// The shape of the API a wire API belongs to.
    pub(crate) fn for_wire_api(api: WireApi) -> Self {
        match api {
            WireApi::AnthropicMessages => ErrorShape::Anthropic,
            WireApi::OpenAiChatCompletions | WireApi::OpenAiResponses => ErrorShape::OpenAi,
            WireApi::GeminiGenerateContent => ErrorShape::Google,
            WireApi::BedrockInvokeModel | WireApi::BedrockConverse => ErrorShape::Bedrock,
            // The Messages API on Bedrock answers in Anthropic's shape.
            WireApi::BedrockMessages => ErrorShape::Anthropic,
        }
    }

    /// The shape for a request path the guard may not recognise (a listing,
    /// a malformed path): guessed from the path, Anthropic's by default.
    pub(crate) fn for_path(path: &str) -> Self {
        let path = path.to_ascii_lowercase();
        if path.contains(":rawpredict") || path.contains(":streamrawpredict") {
            ErrorShape::Anthropic
        } else if is_bedrock_runtime_path(&path) {
            ErrorShape::Bedrock
        } else if path.contains("/chat/completions")
            || path.contains("/responses")
            || path.contains("/openai/")
            || path.contains("/completions")
            || path.contains("/embeddings")
        {
            ErrorShape::OpenAi
        } else if path.contains(":generatecontent")
            || path.contains(":streamgeneratecontent")
            || path.contains("/models/")
            || path.contains("/publishers/")
        {
            ErrorShape::Google
        } else {
            ErrorShape::Anthropic
        }
    }

    /// The error body. `code` is a short machine-readable name
    /// (`upstream_timeout`, `path_escapes_prefix`, ...).
    pub(crate) fn body(self, status: StatusCode, code: &str, message: &str) -> Value {
        match self {
            ErrorShape::Anthropic => anthropic::errors::body(status, message),
            ErrorShape::OpenAi => openai::errors::body(status, code, message),
            ErrorShape::Bedrock => json!({"message": message}),
            ErrorShape::Google => gemini::errors::body(status, message),
        }
    }
}

impl ErrorShape {
    /// The body a provider itself answers a request it rejects with: as
    /// [`body`](Self::body), but with no code of the guard's (OpenAI's
    /// `code` is null, as OpenAI sends it for an invalid parameter).
    pub(crate) fn provider_body(self, status: StatusCode, message: &str) -> Value {
        let mut body = self.body(status, "", message);
        if self == ErrorShape::OpenAi {
            body["error"]["code"] = Value::Null;
        }
        body
    }
}

/// A Bedrock runtime path (`/model/{id}/invoke`, `.../converse-stream`, ...)
/// or one of the listings Bedrock clients call on the same host.
fn is_bedrock_runtime_path(path: &str) -> bool {
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

impl ErrorShape {
    /// The header naming the error's type, for the shapes that put it in
    /// one (Bedrock's `x-amzn-ErrorType`), with its value for `status`.
    pub(crate) fn type_header(self, status: StatusCode) -> Option<(&'static str, &'static str)> {
        match self {
            ErrorShape::Bedrock => Some(("x-amzn-errortype", bedrock_exception(status))),
            _ => None,
        }
    }
}

// Bedrock's shape stays here rather than in `bedrock/`: that folder comes
// with the `bedrock` feature, and a Bedrock path gets Bedrock's errors
// without it too.
/// Bedrock's exception names by status.
fn bedrock_exception(status: StatusCode) -> &'static str {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_by_path() {
        assert_eq!(ErrorShape::for_path("/v1/messages"), ErrorShape::Anthropic);
        assert_eq!(
            ErrorShape::for_path("/v1/chat/completions"),
            ErrorShape::OpenAi
        );
        assert_eq!(ErrorShape::for_path("/v1/responses"), ErrorShape::OpenAi);
        assert_eq!(
            ErrorShape::for_path("/v1beta/models/gemini-2.5-pro:streamGenerateContent"),
            ErrorShape::Google
        );
        assert_eq!(
            ErrorShape::for_path(
                "/v1/projects/p/locations/l/publishers/anthropic/models/claude:streamRawPredict"
            ),
            ErrorShape::Anthropic
        );
        assert_eq!(ErrorShape::for_path("/admin"), ErrorShape::Anthropic);
    }

    #[test]
    fn bodies() {
        let gateway = StatusCode::GATEWAY_TIMEOUT;
        let a = ErrorShape::Anthropic.body(gateway, "upstream_timeout", "slow");
        assert_eq!(a["type"], "error");
        assert_eq!(a["error"]["type"], "timeout_error");
        let o = ErrorShape::OpenAi.body(gateway, "upstream_timeout", "slow");
        assert_eq!(o["error"]["code"], "upstream_timeout");
        assert_eq!(o["error"]["type"], "server_error");
        let g = ErrorShape::Google.body(gateway, "upstream_timeout", "slow");
        assert_eq!(g["error"]["code"], 504);
        assert_eq!(g["error"]["status"], "DEADLINE_EXCEEDED");
    }

    #[test]
    fn each_wire_api_answers_in_its_own_shape() {
        assert_eq!(
            ErrorShape::for_wire_api(WireApi::AnthropicMessages),
            ErrorShape::Anthropic
        );
        assert_eq!(
            ErrorShape::for_wire_api(WireApi::OpenAiResponses),
            ErrorShape::OpenAi
        );
        assert_eq!(
            ErrorShape::for_wire_api(WireApi::GeminiGenerateContent),
            ErrorShape::Google
        );
        assert_eq!(
            ErrorShape::for_path("/openai/deployments/d/embeddings"),
            ErrorShape::OpenAi
        );
    }

    #[test]
    fn error_types_follow_the_status() {
        let overloaded = StatusCode::from_u16(529).unwrap();
        let a = ErrorShape::Anthropic.body(overloaded, "c", "m");
        assert_eq!(a["error"]["type"], "overloaded_error");
        let bad = ErrorShape::Anthropic.body(StatusCode::BAD_REQUEST, "c", "m");
        assert_eq!(bad["error"]["type"], "invalid_request_error");
        assert_eq!(bad["error"]["message"], "m");
        let o = ErrorShape::OpenAi.body(StatusCode::TOO_MANY_REQUESTS, "c", "m");
        assert_eq!(o["error"]["type"], "rate_limit_error");
        assert!(o["error"]["param"].is_null());
        let g = ErrorShape::Google.body(StatusCode::SERVICE_UNAVAILABLE, "c", "m");
        assert_eq!(g["error"]["status"], "UNAVAILABLE");
        assert_eq!(g["error"]["code"], 503);
    }
}
