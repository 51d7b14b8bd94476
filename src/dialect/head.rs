//! The head of a request body: its top-level fields without the
//! conversation, read without building the whole document.
//!
//! Deciding whether and how to guard a request needs only a few small
//! fields (`model`, `stream`, `n`, `generationConfig`); the conversation
//! (the messages, the system prompt, the tools) is most of the bytes and is
//! needed only when a rewrite or a recovery builds a new body. A body read
//! before it is sent, which the guard may rewrite, is checked whole to be
//! JSON as its head is read ([`request_head`]); one already forwarded, which
//! the provider judges, only has its members located ([`forwarded_head`]).

use std::collections::BTreeMap;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::skim::Located;

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
    match super::skim::members(body) {
        Some(members) => head_of(members.into_iter()),
        None => read_by_serde_json(body),
    }
}

/// [`request_head`] of a body already forwarded, which the provider
/// judges, read in the `chunks` it arrived in: its members located without
/// checking the rest of the document
/// ([`skim::locate`](super::skim::locate)), the head's own values still
/// read by serde_json. Only the head's members are ever joined into one
/// piece. A body the locating skim cannot cut is joined and read by
/// [`request_head`]. With the head, where the members are, when located.
pub(crate) fn forwarded_head<C: AsRef<[u8]>>(
    chunks: &[C],
) -> Option<(Value, Option<Vec<Located>>)> {
    let Some(members) = super::skim::locate(chunks) else {
        let head = request_head(&super::skim::cut(chunks, 0..usize::MAX))?;
        return Some((head, None));
    };
    let mut head = Vec::new();
    for member in &members {
        let name = super::skim::cut(chunks, member.name.clone());
        let name = std::str::from_utf8(&name).ok()?;
        if !CONVERSATION.contains(&name) {
            head.push((
                name.to_owned(),
                super::skim::cut(chunks, member.value.clone()),
            ));
        }
    }
    let head = head_of(head.iter().map(|(name, value)| (name.as_str(), &value[..])))?;
    Some((head, Some(members)))
}

/// [`request_head`] when the skim is not sure the body is a JSON object:
/// serde_json decides, and reads the members' values in place.
fn read_by_serde_json(body: &[u8]) -> Option<Value> {
    let Ok(top) = serde_json::from_slice::<BTreeMap<&str, &RawValue>>(body) else {
        // A name with an escape in it cannot be borrowed: read it all.
        return match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(mut top)) => {
                top.retain(|name, _| !CONVERSATION.contains(&name.as_str()));
                Some(Value::Object(top))
            }
            _ => None,
        };
    };
    head_of(
        top.into_iter()
            .map(|(name, raw)| (name, raw.get().as_bytes())),
    )
}

/// The head made of the members that are not conversation; `None` if one
/// of them is not JSON after all (a number out of range, say). A repeated
/// name keeps its last value, as when the whole document is read.
fn head_of<'a>(members: impl Iterator<Item = (&'a str, &'a [u8])>) -> Option<Value> {
    let mut head = Map::new();
    for (name, raw) in members {
        if !CONVERSATION.contains(&name) {
            head.insert(name.to_owned(), serde_json::from_slice(raw).ok()?);
        }
    }
    Some(Value::Object(head))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn forwarded<C: AsRef<[u8]>>(chunks: &[C]) -> Option<Value> {
        forwarded_head(chunks).map(|(head, _)| head)
    }

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

    /// Small documents with every kind of value, escape and spacing.
    const SEEDS: &[&[u8]] = &[
        br#"{"model":"claude-x","max_tokens":1024,"stream":true,"temperature":0.7,"system":[{"type":"text","text":"Be \"brief\".\n\u00e9\ud83d\ude00 ok"}],"messages":[{"role":"user","content":"hi \t there / \\ end"}],"metadata":{"user_id":"u-1"}}"#,
        b"{ \"n\" : -0.5E-7 ,\r\n\t\"messages\" : [ 1 , 20e+3, null, false, [ ], { } ],\n \"tools\":[{\"name\":\"t\",\"input_schema\":{\"type\":\"object\"}}], \"x\": \"\\u00e9t\\u00e9 caf\xc3\xa9\" }\n",
        br#"{"contents":[{"parts":[{"text":"a"}]}],"generationConfig":{"candidateCount":2,"stopSequences":["\n\n"]},"model":"m","model":"m2"}"#,
    ];

    /// Each seed, and each one-byte deletion, replacement, insertion and
    /// truncation of it.
    fn variants() -> Vec<Vec<u8>> {
        const BYTES: &[u8] = b"\"\\{}[],:0 1e-.\n\x01\x1f\x7f\xc3\xffu";
        let mut variants = Vec::new();
        for seed in SEEDS {
            variants.push(seed.to_vec());
            for at in 0..seed.len() {
                variants.push([&seed[..at], &seed[at + 1..]].concat());
                variants.push(seed[..at].to_vec());
                for &byte in BYTES {
                    let mut changed = seed.to_vec();
                    changed[at] = byte;
                    variants.push(changed.clone());
                    changed.insert(at, byte);
                    variants.push(changed);
                }
            }
        }
        variants
    }

    #[test]
    fn the_skim_reads_the_head_serde_json_reads_after_any_one_byte_change() {
        for seed in SEEDS {
            assert!(
                super::super::skim::members(seed).is_some(),
                "the skim reads the seed"
            );
        }
        let variants = variants();
        assert!(variants.len() > 10_000);
        for body in variants {
            let text = String::from_utf8_lossy(&body);
            if super::super::skim::members(&body).is_some() {
                // serde_json checks the conversation without decoding it
                // (a lone surrogate escape passes), as the skim does.
                let checked = serde_json::from_slice::<serde::de::IgnoredAny>(&body);
                assert!(checked.is_ok(), "{text}");
            }
            assert_eq!(request_head(&body), read_by_serde_json(&body), "{text}");
        }
    }

    /// Quotes after runs of backslashes: after three, text; after four,
    /// the string's end.
    const ESCAPES: &[u8] = br#"{"messages":[{"content":"a\\\\"},"b\\\"]\\\\"],"model":"m"}"#;

    #[test]
    fn the_forwarded_head_of_a_json_document_is_its_checked_head() {
        for body in variants() {
            if serde_json::from_slice::<Value>(&body).is_ok() {
                let text = String::from_utf8_lossy(&body);
                assert_eq!(forwarded(&[&body]), request_head(&body), "{text}");
            }
        }
        assert!(serde_json::from_slice::<Value>(ESCAPES).is_ok());
        assert_eq!(forwarded(&[ESCAPES]), Some(json!({"model": "m"})));
    }

    #[test]
    fn the_forwarded_head_is_the_same_wherever_the_body_was_cut() {
        for (i, body) in variants().iter().enumerate() {
            let whole = forwarded(&[body]);
            // Every cut of the documents serde_json reads; a few of the rest.
            let valid = serde_json::from_slice::<Value>(body).is_ok();
            let step = if valid { 1 } else { 17 };
            let text = String::from_utf8_lossy(body);
            for at in (i % step..=body.len()).step_by(step) {
                let cut = forwarded(&[&body[..at], &body[at..]]);
                assert_eq!(cut, whole, "{text} cut at {at}");
            }
        }
        for body in SEEDS.iter().chain([&ESCAPES]) {
            let whole = request_head(body);
            for size in 1..4 {
                let chunks: Vec<&[u8]> = body.chunks(size).collect();
                assert_eq!(forwarded(&chunks), whole, "in chunks of {size}");
            }
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
