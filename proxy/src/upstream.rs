//! Where the proxy forwards, and which request targets it accepts.
//!
//! A request target is forwarded as the upstream's base URL plus the
//! request's path and query. Before that, [`Upstream::target`] refuses any
//! target that could leave the base URL's path prefix: dot segments in any
//! spelling (`..`, `%2e%2e`, `.%2E`, doubly encoded `%252e`), including those
//! hidden behind an encoded slash or a backslash (`..%2f`, `..\`, `..%5c`),
//! which some servers treat as separators. Refusing is simpler to reason
//! about than resolving: a client of an LLM API never needs a dot segment.

use std::fmt;

use http::header::HeaderValue;
use http::{Method, Uri, Version};

/// Where the proxy forwards: a base URL (`scheme://host[:port][/prefix]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
    prefix: String,
}

/// Why an upstream URL was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamError(String);

impl fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UpstreamError {}

/// Why a request's target is not forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TargetError {
    /// `CONNECT`: the proxy forwards HTTP requests to one upstream; it is
    /// not a tunnel (405).
    Connect,
    /// An absolute-form (`GET http://host/path`), authority-form or
    /// asterisk-form target (400).
    NotOriginForm,
    /// A dot segment, in any spelling, that could leave the upstream's path
    /// prefix (400).
    DotSegment,
}

impl TargetError {
    /// The HTTP status the client gets.
    pub fn status(self) -> http::StatusCode {
        match self {
            TargetError::Connect => http::StatusCode::METHOD_NOT_ALLOWED,
            _ => http::StatusCode::BAD_REQUEST,
        }
    }

    /// A short code for the access log and the `x-refusal-guard-error` header.
    pub fn code(self) -> &'static str {
        match self {
            TargetError::Connect => "method_not_allowed",
            TargetError::NotOriginForm => "bad_request_target",
            TargetError::DotSegment => "dot_segment_in_path",
        }
    }
}

impl fmt::Display for TargetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TargetError::Connect => "refusal-guard: CONNECT is not supported; this proxy is not a tunnel",
            TargetError::NotOriginForm => {
                "refusal-guard: the request target must be a path (origin form, starting with /)"
            }
            TargetError::DotSegment => {
                "refusal-guard: the request path contains a `.` or `..` segment (possibly encoded); it is not forwarded"
            }
        })
    }
}

impl std::error::Error for TargetError {}

impl Upstream {
    /// Parses a base URL: `http` or `https`, a host, an optional port and an
    /// optional path prefix; no query, no user info.
    ///
    /// ```
    /// use refusal_guard_proxy::Upstream;
    ///
    /// let up = Upstream::parse("http://127.0.0.1:9000/base/").unwrap();
    /// assert_eq!(up.to_string(), "http://127.0.0.1:9000/base");
    /// assert!(Upstream::parse("ftp://example.com").is_err());
    /// ```
    pub fn parse(url: &str) -> Result<Upstream, UpstreamError> {
        let bad = |why: &str| UpstreamError(format!("bad upstream URL `{url}`: {why}"));
        let uri: Uri = url.trim().parse().map_err(|_| bad("not a URL"))?;
        let scheme = uri
            .scheme()
            .cloned()
            .ok_or_else(|| bad("it needs a scheme, http:// or https://"))?;
        if scheme != http::uri::Scheme::HTTP && scheme != http::uri::Scheme::HTTPS {
            return Err(bad("the scheme must be http or https"));
        }
        let authority = uri.authority().cloned().ok_or_else(|| bad("no host"))?;
        if authority.as_str().contains('@') {
            return Err(bad(
                "credentials in the URL are not supported; send them as headers",
            ));
        }
        if authority.host().is_empty() {
            return Err(bad("no host"));
        }
        if uri.query().is_some() {
            return Err(bad("a base URL takes no query"));
        }
        let prefix = uri.path().trim_end_matches('/').to_owned();
        if has_dot_segment(&prefix) {
            return Err(bad("the path prefix has a dot segment"));
        }
        Ok(Upstream {
            scheme,
            authority,
            prefix,
        })
    }

    /// The upstream URL for a request, or why it is not forwarded.
    ///
    /// ```
    /// use refusal_guard_proxy::{TargetError, Upstream};
    /// use http::{Method, Version};
    ///
    /// let up = Upstream::parse("http://127.0.0.1:9000/base").unwrap();
    /// let target = |uri: &str| up.target(&Method::POST, &uri.parse().unwrap(), Version::HTTP_11);
    /// assert_eq!(target("/v1/messages?beta=true").unwrap().to_string(),
    ///            "http://127.0.0.1:9000/base/v1/messages?beta=true");
    /// assert_eq!(target("/v1/%2E%2e/admin"), Err(TargetError::DotSegment));
    /// assert_eq!(target("http://elsewhere/v1/messages"), Err(TargetError::NotOriginForm));
    /// ```
    pub fn target(&self, method: &Method, uri: &Uri, version: Version) -> Result<Uri, TargetError> {
        if method == Method::CONNECT {
            return Err(TargetError::Connect);
        }
        // HTTP/2 requests always carry :scheme and :authority; in HTTP/1 a
        // scheme or authority means an absolute-form target.
        if version < Version::HTTP_2 && (uri.scheme().is_some() || uri.authority().is_some()) {
            return Err(TargetError::NotOriginForm);
        }
        let tail = uri.path_and_query().map_or("", |p| p.as_str());
        if !tail.starts_with('/') {
            return Err(TargetError::NotOriginForm);
        }
        if has_dot_segment(uri.path()) {
            return Err(TargetError::DotSegment);
        }
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(format!("{}{}", self.prefix, tail))
            .build()
            .map_err(|_| TargetError::NotOriginForm)
    }

    /// The base URL, for endpoints of cross-provider fallbacks that share it.
    pub(crate) fn base_uri(&self) -> Option<Uri> {
        format!("{}://{}{}", self.scheme, self.authority, self.prefix)
            .parse()
            .ok()
    }

    /// The `Host` header value for the upstream.
    pub fn host(&self) -> HeaderValue {
        HeaderValue::from_str(self.authority.as_str())
            .unwrap_or(HeaderValue::from_static("localhost"))
    }
}

impl fmt::Display for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.authority, self.prefix)
    }
}

impl std::str::FromStr for Upstream {
    type Err = UpstreamError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Upstream::parse(s)
    }
}

/// How many rounds of percent-decoding are undone before judging a segment:
/// enough for double and triple encoding (`%25252e`).
const DECODE_ROUNDS: usize = 3;

/// Whether any segment of `path`, percent-decoded up to [`DECODE_ROUNDS`]
/// times and split at `/` and `\`, is `.` or `..`.
fn has_dot_segment(path: &str) -> bool {
    let mut text = path.as_bytes().to_vec();
    for _ in 0..=DECODE_ROUNDS {
        if text
            .split(|&b| b == b'/' || b == b'\\')
            .any(|segment| segment == b"." || segment == b"..")
        {
            return true;
        }
        match percent_decode(&text) {
            Some(decoded) => text = decoded,
            None => return false,
        }
    }
    false
}

/// One round of percent-decoding; `None` when there was nothing to decode.
fn percent_decode(input: &[u8]) -> Option<Vec<u8>> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(input.len());
    let mut changed = false;
    let mut i = 0;
    while i < input.len() {
        let pair = input
            .get(i + 1)
            .copied()
            .and_then(hex)
            .zip(input.get(i + 2).copied().and_then(hex));
        match (input[i], pair) {
            (b'%', Some((high, low))) => {
                out.push(high << 4 | low);
                changed = true;
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(path: &str) -> Result<Uri, TargetError> {
        let up = Upstream::parse("http://127.0.0.1:9/base").unwrap();
        up.target(&Method::POST, &path.parse().unwrap(), Version::HTTP_11)
    }

    #[test]
    fn upstream_urls() {
        assert!(Upstream::parse("127.0.0.1:80").is_err());
        assert!(Upstream::parse("http://user:pw@host").is_err());
        assert!(Upstream::parse("http://host/?q=1").is_err());
        assert!(Upstream::parse("http://host/a/../b").is_err());
        let up = Upstream::parse("https://api.anthropic.com").unwrap();
        let uri = "/v1/messages".parse().unwrap();
        assert_eq!(
            up.target(&Method::POST, &uri, Version::HTTP_11)
                .unwrap()
                .to_string(),
            "https://api.anthropic.com/v1/messages"
        );
        assert_eq!(up.host(), "api.anthropic.com");
    }

    #[test]
    fn dot_segments_in_every_spelling_are_refused() {
        for path in [
            "/../admin",
            "/%2e%2e/admin",
            "/%2E%2E/admin",
            "/.%2e/admin",
            "/%2e./admin",
            "/v1/../../admin",
            "/v1/./messages",
            "/v1/%2e/messages",
            "/%252e%252e/admin",
            "/..%2fadmin",
            "/..%5cadmin",
            "/..\\admin",
            "/v1/..",
            "/..",
        ] {
            assert_eq!(target(path), Err(TargetError::DotSegment), "{path}");
        }
        for path in [
            "/v1/messages",
            "/v1/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
            "/v1/a.b/c..d/...",
            "/v1/%2e%2e%2e",
            "/",
        ] {
            assert!(target(path).is_ok(), "{path}");
        }
    }

    #[test]
    fn only_origin_form_targets_are_forwarded() {
        let up = Upstream::parse("http://127.0.0.1:9").unwrap();
        let get = |uri: &str, version| up.target(&Method::GET, &uri.parse().unwrap(), version);
        assert_eq!(
            get("http://evil.example/v1/messages", Version::HTTP_11),
            Err(TargetError::NotOriginForm)
        );
        assert_eq!(
            get("evil.example:443", Version::HTTP_11),
            Err(TargetError::NotOriginForm)
        );
        assert_eq!(get("*", Version::HTTP_11), Err(TargetError::NotOriginForm));
        assert!(get("https://any/v1/messages", Version::HTTP_2).is_ok());
        let connect = up.target(
            &Method::CONNECT,
            &"evil.example:443".parse().unwrap(),
            Version::HTTP_11,
        );
        assert_eq!(connect, Err(TargetError::Connect));
    }
}
