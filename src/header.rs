//! The names of the headers the crate itself reads or writes, in one place.
//!
//! Each is a `&'static str`, usable wherever `http` takes a header name.
//! The values are wire contract: clients and harnesses read them, so they
//! stay as they are (`refusal-guard-recovery` included, though it lacks the
//! `x-` the others have).

/// The response header on a response the guard recovered (a fallback,
/// a retarget or a rescue answered instead of a refusal), for harnesses to
/// show as a notice. For example `rescued; category=cyber;
/// served-by=claude-opus-4-7` or `fallback; category=bio;
/// served-by=claude-sonnet-4-5`: the outcome (`Outcome::as_str`), then the
/// refusal's category and the model that served, each left out when
/// unknown, reduced to header-safe characters (letters, digits and
/// `._:/@+-`; anything else becomes `_`) and to 100 characters.
///
/// Responses the guard did not change carry no such header. A response
/// whose head went out before the decision (keep-alive comments, live
/// thinking) cannot carry it either: the head was already sent; nor does a
/// recovery attempt the guard had to let through before it could tell
/// whether it answered (its hold bounds reached), since it may still refuse.
/// The record and the `RefusalHandle` still say what happened.
///
/// ```
/// let response = http::Response::new(());
/// assert!(response.headers().get(refusal_guard::header::RECOVERY).is_none());
/// ```
pub const RECOVERY: &str = "refusal-guard-recovery";

/// The response header on an answer another model served than the one
/// the request asked for (a reroute; see
/// [`RefusalGuardLayer::recover_reroutes`](crate::RefusalGuardLayer::recover_reroutes)),
/// when the layer is asked to say so
/// ([`reroute_header`](crate::RefusalGuardLayer::reroute_header), off by
/// default). For example `requested=gpt-5.3-codex; served=gpt-5.2`: both
/// models as the request and the response named them, reduced to
/// header-safe characters as in [`RECOVERY`].
///
/// As with [`RECOVERY`], a response whose head went out before the
/// decision (keep-alive comments, live thinking) cannot carry it; the
/// record still says what happened.
///
/// ```
/// let response = http::Response::new(());
/// assert!(response.headers().get(refusal_guard::header::REROUTE).is_none());
/// ```
pub const REROUTE: &str = "refusal-guard-reroute";

/// The response header naming why the guard or the proxy answered an error
/// itself (`api_error`), so it is never mistaken for the provider's.
///
/// ```
/// use http::StatusCode;
/// use refusal_guard::{api_error::api_error, header};
///
/// let response = api_error("/v1/messages", StatusCode::BAD_GATEWAY,
///     "upstream_unreachable", "the upstream refused the connection");
/// assert_eq!(response.headers()[header::ERROR], "upstream_unreachable");
/// ```
pub const ERROR: &str = "x-refusal-guard-error";

/// The request header that names a conversation explicitly, unless the
/// layer is configured otherwise (`RefusalGuardLayer::conversation_header`).
/// It is removed before the request goes upstream.
///
/// ```
/// let request = http::Request::post("https://api.anthropic.com/v1/messages")
///     .header(refusal_guard::header::CONVERSATION, "ticket-4711")
///     .body(())
///     .unwrap();
/// assert_eq!(request.headers()["x-refusal-guard-conversation"], "ticket-4711");
/// ```
pub const CONVERSATION: &str = "x-refusal-guard-conversation";

/// The request header a client may name the proxy key in (`--client-key`,
/// `proxy::ClientKey`); the proxy removes it before forwarding.
///
/// ```
/// let request = http::Request::post("http://127.0.0.1:8787/v1/messages")
///     .header(refusal_guard::header::CLIENT_KEY, "s3cret-proxy-key")
///     .body(())
///     .unwrap();
/// assert!(request.headers().contains_key("x-refusal-guard-key"));
/// ```
pub const CLIENT_KEY: &str = "x-refusal-guard-key";

/// A provider's word (a model, a category) as part of a header value this
/// crate writes: the characters such names are made of (letters, digits and
/// `._:/@+-`), anything else as `_`, at most 100 of them.
pub(crate) fn value_part(word: &str) -> String {
    word.chars()
        .take(100)
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '_' | ':' | '/' | '@' | '+' | '-' => c,
            _ => '_',
        })
        .collect()
}
