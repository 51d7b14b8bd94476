//! What the simulator received: one [`Received`] per request, for the test
//! to read what the agent (and the guard on its behalf) sent.

use http::{HeaderMap, HeaderValue, Method, StatusCode};
use serde_json::Value;

use super::script::Reply;
use refusal_guard::refusal::WireApi;

/// Headers whose values are credentials: kept with their values replaced.
const CREDENTIALS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "cookie",
];

/// What a credential's value is replaced with.
///
/// ```
/// use refusal_guard_testkit::{Simulator, REDACTED};
///
/// let simulator = Simulator::new();
/// let (parts, ()) = http::Request::post("/v1beta/models/gemini-2.5-pro:generateContent?key=AIza-secret")
///     .body(())
///     .unwrap()
///     .into_parts();
/// simulator.respond(&parts, br#"{"contents":[{"parts":[{"text":"hi"}]}]}"#);
/// assert!(simulator.received()[0].path.ends_with(&format!("key={REDACTED}")));
/// ```
pub const REDACTED: &str = "<redacted>";

/// One request the simulator received, and what it answered. Credentials
/// are never kept: the values of `authorization`, `x-api-key`, `api-key`,
/// `x-goog-api-key`, `proxy-authorization` and `cookie`, and of a `key`
/// query parameter (Gemini's), read [`REDACTED`].
///
/// ```
/// use refusal_guard_testkit::{ReplyKind, Simulator};
///
/// let simulator = Simulator::new();
/// let (parts, ()) = http::Request::post("/v1/messages")
///     .header("x-api-key", "sk-secret")
///     .body(())
///     .unwrap()
///     .into_parts();
/// let body = br#"{"model":"claude-opus-4-7","max_tokens":64,
///                 "messages":[{"role":"user","content":"Audit my SSH config"}]}"#;
/// simulator.respond(&parts, body);
/// let sent = &simulator.received()[0];
/// assert_eq!(sent.model.as_deref(), Some("claude-opus-4-7"));
/// assert_eq!(sent.body["max_tokens"], 64);
/// assert_eq!(sent.headers["x-api-key"], "<redacted>");
/// assert_eq!(sent.reply.as_ref().map(|r| r.kind()), Some(ReplyKind::Refusal));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Received {
    /// The request's method.
    pub method: Method,
    /// Its path and query.
    pub path: String,
    /// Its headers.
    pub headers: HeaderMap,
    /// The wire API its path names, if any.
    pub api: Option<WireApi>,
    /// The model it asked for (the body's `model`, or the path's for
    /// Gemini), if it was read.
    pub model: Option<String>,
    /// Its prompt (the first user message's first text), if it was read.
    pub prompt: Option<String>,
    /// The prompt's category (see
    /// [`Simulator::categorize`](super::Simulator::categorize)).
    pub category: Option<String>,
    /// Which request of its conversation it was (from 1; 0 when it was no
    /// turn of a conversation).
    pub attempt: u32,
    /// Which request of its conversation to its model it was (from 1).
    pub attempt_on_model: u32,
    /// Its body as JSON (`Null` when it was not JSON).
    pub body: Value,
    /// The model that served it when a server-side fallback did (an
    /// Anthropic request's `fallbacks`, its model refusing).
    pub served_model: Option<String>,
    /// The scripted reply it got; `None` when the simulator answered it
    /// otherwise (a contract violation, a token count, a path it serves no
    /// API at).
    pub reply: Option<Reply>,
    /// The status it was answered with.
    pub status: StatusCode,
}

impl Received {
    pub(crate) fn new(parts: &http::request::Parts, body: &[u8]) -> Self {
        let mut headers = parts.headers.clone();
        for name in CREDENTIALS {
            if let http::header::Entry::Occupied(mut entry) = headers.entry(*name) {
                for value in entry.iter_mut() {
                    *value = HeaderValue::from_static(REDACTED);
                }
            }
        }
        Received {
            method: parts.method.clone(),
            path: redact_key(parts.uri.path_and_query().map_or("/", |p| p.as_str())),
            headers,
            api: None,
            model: None,
            prompt: None,
            category: None,
            attempt: 0,
            attempt_on_model: 0,
            body: serde_json::from_slice(body).unwrap_or(Value::Null),
            served_model: None,
            reply: None,
            status: StatusCode::OK,
        }
    }
}

/// The path and query with a `key` parameter's value replaced.
fn redact_key(path: &str) -> String {
    let Some((path, query)) = path.split_once('?') else {
        return path.to_owned();
    };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if name.eq_ignore_ascii_case("key") => format!("{name}={REDACTED}"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{path}?{}", query.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_in_the_query_is_redacted() {
        assert_eq!(
            redact_key("/v1beta/models/m:streamGenerateContent?alt=sse&key=AIza"),
            "/v1beta/models/m:streamGenerateContent?alt=sse&key=<redacted>"
        );
        assert_eq!(redact_key("/v1/messages"), "/v1/messages");
    }
}
