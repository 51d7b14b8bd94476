//! The head of a request body: its top-level fields without the
//! conversation, read without building the whole document.
//!
//! Deciding whether and how to guard a request needs only a few small
//! fields (`model`, `stream`, `n`, `generationConfig`); the conversation
//! (the messages, the system prompt, the tools) is most of the bytes and is
//! needed only when a rewrite or a recovery builds a new body. The whole
//! document is still checked to be JSON, as it is read.

use std::collections::BTreeMap;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// The top-level fields that carry the conversation in any wire API:
/// nothing the head is asked about lives in them.
const CONVERSATION: &[&str] = &[
    "messages",
    "system",
    "tools",
    "input",
    "instructions",
    "contents",
    "systemInstruction",
];

/// The top-level object of `body` without its conversation fields, for
/// [`Dialect::request_model`](super::Dialect::request_model),
/// [`is_streaming`](super::Dialect::is_streaming) and
/// [`unguardable`](super::Dialect::unguardable). `None` when the body is
/// not a JSON object.
pub(crate) fn request_head(body: &[u8]) -> Option<Value> {
    let Ok(top) = serde_json::from_slice::<BTreeMap<&str, &RawValue>>(body) else {
        // A name with an escape in it cannot be borrowed: read it all.
        return match serde_json::from_slice::<Value>(body) {
            Ok(json @ Value::Object(_)) => Some(json),
            _ => None,
        };
    };
    let mut head = Map::new();
    for (name, raw) in top {
        if !CONVERSATION.contains(&name) {
            head.insert(name.to_owned(), serde_json::from_str(raw.get()).ok()?);
        }
    }
    Some(Value::Object(head))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_head_keeps_the_small_fields_and_leaves_out_the_conversation() {
        let body =
            br#"{"model":"m","stream":true,"n":2,"messages":[{"role":"user","content":"hi"}],
            "system":"s","generationConfig":{"candidateCount":3},"tools":[]}"#;
        let head = request_head(body).unwrap();
        assert_eq!(
            head,
            json!({"model": "m", "stream": true, "n": 2, "generationConfig": {"candidateCount": 3}})
        );
    }

    #[test]
    fn only_a_json_object_has_a_head() {
        for body in [
            &b"[1]"[..],
            b"\"s\"",
            b"",
            b"{\"model\":",
            b"{\"messages\":[}",
        ] {
            assert_eq!(
                request_head(body),
                None,
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn escaped_names_and_repeated_fields_read_as_the_whole_document_would() {
        let escaped = br#"{"mo\u0064el":"m","stream":true}"#;
        assert_eq!(
            request_head(escaped),
            Some(json!({"model": "m", "stream": true}))
        );
        let repeated = br#"{"model":"a","model":"b"}"#;
        let whole: Value = serde_json::from_slice(repeated).unwrap();
        assert_eq!(request_head(repeated), Some(whole));
    }
}
