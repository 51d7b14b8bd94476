//! The proxy key (`--client-key`): when the proxy spends credentials of its
//! own (Bedrock gateway mode), a client must present it.
//!
//! A client sends it as `x-refusal-guard-key: KEY`, `x-api-key: KEY` or
//! `Authorization: Bearer KEY` (what `AnthropicBedrock(api_key=...)` and
//! Claude Code's `ANTHROPIC_CUSTOM_HEADERS` can send). The header that
//! carried it never goes upstream. A missing or wrong key is answered 401
//! in the API's error shape and nothing is forwarded.

use std::fmt;

use http::header::AUTHORIZATION;
use http::HeaderMap;
use sha2::{Digest, Sha256};

use refusal_guard::header::CLIENT_KEY;

/// A proxy key. `Debug` never shows it.
///
/// ```
/// use refusal_guard_proxy::ClientKey;
///
/// let key: ClientKey = "s3cret-proxy-key".parse().unwrap();
/// assert!(!format!("{key:?}").contains("s3cret"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ClientKey(String);

impl fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClientKey(..)")
    }
}

impl std::str::FromStr for ClientKey {
    type Err = String;

    fn from_str(key: &str) -> Result<Self, String> {
        let key = key.trim();
        if key.len() < 16 {
            return Err("a client key needs at least 16 characters".to_owned());
        }
        if !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("a client key is printable ASCII without spaces".to_owned());
        }
        Ok(ClientKey(key.to_owned()))
    }
}

impl ClientKey {
    /// Whether `headers` present this key; the header that did is removed
    /// (as is `x-refusal-guard-key` in any case), so the key never leaves.
    pub(crate) fn admits(&self, headers: &mut HeaderMap) -> bool {
        presented(headers, |sent| self.matches(sent).then_some(())).is_some()
    }

    /// Compares in time independent of where the keys differ: both are
    /// hashed first (so their lengths do not show either), then every byte
    /// of the digests is folded into one difference, with no early exit.
    fn matches(&self, sent: &[u8]) -> bool {
        let want = Sha256::digest(self.0.as_bytes());
        let got = Sha256::digest(sent);
        let difference = want
            .iter()
            .zip(got.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        difference == 0
    }
}

/// What `find` makes of the key `headers` present: `x-refusal-guard-key`
/// (removed in any case), else `x-api-key`, and `Authorization: Bearer`.
/// Each header whose key `find` knows is removed, so the key never leaves;
/// the others (a provider key beside it) go on.
pub(crate) fn presented<T>(
    headers: &mut HeaderMap,
    mut find: impl FnMut(&[u8]) -> Option<T>,
) -> Option<T> {
    let mut found = headers
        .remove(CLIENT_KEY)
        .and_then(|sent| find(sent.as_bytes()));
    if found.is_none() {
        found = headers.get("x-api-key").and_then(|v| find(v.as_bytes()));
        if found.is_some() {
            headers.remove("x-api-key");
        }
    }
    let bearer = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .and_then(|key| find(key.trim().as_bytes()));
    if let Some(bearer) = bearer {
        headers.remove(AUTHORIZATION);
        found = found.or(Some(bearer));
    }
    found
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    #[test]
    fn each_form_admits_and_is_removed_and_a_wrong_key_does_not() {
        let key: ClientKey = "proxy-key-0123456789".parse().unwrap();
        for (name, value) in [
            (CLIENT_KEY, "proxy-key-0123456789"),
            ("x-api-key", "proxy-key-0123456789"),
            ("authorization", "Bearer proxy-key-0123456789"),
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(name, HeaderValue::from_static(value));
            assert!(key.admits(&mut headers), "{name}");
            assert!(headers.get(name).is_none(), "{name} is not forwarded");
        }
        let mut wrong = HeaderMap::new();
        wrong.insert(CLIENT_KEY, HeaderValue::from_static("proxy-key-0123456780"));
        wrong.insert(
            "authorization",
            HeaderValue::from_static("Bearer someone-elses-key"),
        );
        assert!(!key.admits(&mut wrong));
        assert!(wrong.get(CLIENT_KEY).is_none());
        assert!(!key.admits(&mut HeaderMap::new()));
        assert!("short".parse::<ClientKey>().is_err());
    }
}
