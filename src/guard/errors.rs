//! The errors the guard answers itself, each in the error shape of the
//! request's API (`api_error`): a body that could not be read, no room for
//! it under the layer-wide bound, an upstream that timed out. Every stage
//! that answers with one comes here, so their codes and wording stay one.

use http::{Response, StatusCode};

use crate::api_error::{api_error, api_error_for};
use crate::guard::body::GuardBody;
use crate::guard::timeout::UpstreamTimeout;
use crate::refusal::WireApi;
use crate::BoxError;

/// Whose error shape an answer the guard makes itself takes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Shape<'a> {
    /// A request the guard recognised.
    Api(WireApi),
    /// Any other request, by its path.
    Path(&'a str),
}

/// An error the guard answers itself, in the API's own shape.
pub(crate) fn error_response<R>(
    shape: Shape<'_>,
    status: StatusCode,
    code: &str,
    message: &str,
) -> Response<GuardBody<R>> {
    let response = match shape {
        Shape::Api(api) => api_error_for(api, status, code, message),
        Shape::Path(path) => api_error(path, status, code, message),
    };
    response.map(GuardBody::full)
}

/// A `504` for an upstream that went quiet before anything was sent to the
/// client. It carries the timeout in its extensions, so that an answer
/// already begun (keep-alive, live thinking) is cut with it instead.
pub(crate) fn timed_out<R>(shape: Shape<'_>, timeout: UpstreamTimeout) -> Response<GuardBody<R>> {
    tracing::warn!(%timeout, "upstream timeout");
    let status = StatusCode::GATEWAY_TIMEOUT;
    let mut response = error_response(shape, status, timeout.code(), &timeout.to_string());
    response.extensions_mut().insert(timeout);
    response
}

/// The client's body failed before the request was whole: a `400` of its
/// API, never the request forwarded as if it were complete.
pub(crate) fn unreadable<R>(api: Shape<'_>, error: &BoxError) -> Response<GuardBody<R>> {
    let message = format!("the request body could not be read: {error}");
    error_response(api, StatusCode::BAD_REQUEST, "request_body_error", &message)
}

/// The layer-wide bound on held bytes leaves no room for the request.
pub(crate) fn overloaded<R>(api: Shape<'_>) -> Response<GuardBody<R>> {
    let message = "the guard holds as many bytes as it may; retry shortly";
    error_response(
        api,
        StatusCode::SERVICE_UNAVAILABLE,
        "guard_overloaded",
        message,
    )
}
