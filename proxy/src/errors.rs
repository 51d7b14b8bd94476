//! The proxy's own error responses, in the error shape of the API the path
//! belongs to (see [`refusal_guard::api_error`]), so SDKs raise their typed error.

use http::{Response, StatusCode};
use http_body_util::{BodyExt, Full};

use super::ProxyBody;
use refusal_guard::api_error::api_error;

/// [`api_error`] with the proxy's body type.
pub(crate) fn error_response(
    path: &str,
    status: StatusCode,
    code: &str,
    message: &str,
) -> Response<ProxyBody> {
    api_error(path, status, code, message).map(|bytes| {
        Full::new(bytes)
            .map_err(|never| match never {})
            .boxed_unsync()
    })
}
