//! Hop-by-hop headers: they describe one connection, not the message, so
//! they are dropped in both directions.

use http::header::{self, HeaderMap, HeaderName};

/// Headers that describe one connection, not the message.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Removes the hop-by-hop headers, those `Connection` names and every
/// `Proxy-*` header.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    let proxy_headers: Vec<HeaderName> = headers
        .keys()
        .filter(|name| name.as_str().starts_with("proxy-"))
        .cloned()
        .collect();
    for name in proxy_headers {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::HeaderValue;

    #[test]
    fn hop_by_hop_headers_go() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "connection",
            HeaderValue::from_static("keep-alive, x-secret-fallback"),
        );
        headers.insert("x-secret-fallback", HeaderValue::from_static("1"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.insert("proxy-authorization", HeaderValue::from_static("Basic x"));
        headers.insert("proxy-foo", HeaderValue::from_static("1"));
        headers.insert("te", HeaderValue::from_static("trailers"));
        headers.insert("upgrade", HeaderValue::from_static("h2c"));
        headers.insert("x-api-key", HeaderValue::from_static("k"));
        strip_hop_by_hop(&mut headers);
        let left: Vec<_> = headers.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["x-api-key"]);
    }
}
