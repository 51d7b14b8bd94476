//! Reading Bedrock's event-stream frames as the frames the event judges know.
//!
//! Every frame carries `:message-type`: `event` frames name their event in
//! `:event-type` and hold its JSON; `exception` frames name the exception in
//! `:exception-type` and hold `{"message": ...}`; `error` frames carry
//! `:error-code` and `:error-message`. An InvokeModel stream's events are
//! `chunk`s whose payload is `{"bytes": base64}` of one Anthropic Messages
//! event (with a random `p` field as padding); a ConverseStream's events
//! are Bedrock's own (`messageStart`, `contentBlockDelta`, `messageStop`,
//! `metadata`, ...).
//!
//! Whatever signals a failure (an exception or error frame, a frame that
//! fails its CRC) becomes an `error` event in Anthropic's shape, which both
//! Bedrock event judges read as a provider error: never framed as success.

use aws_smithy_types::event_stream::{HeaderValue, Message};
use base64::Engine as _;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;

use super::eventstream::Cut;
use crate::sse::Frame;

/// A string header of a frame.
fn header<'a>(message: &'a Message, name: &str) -> Option<&'a str> {
    message
        .headers()
        .iter()
        .find(|h| h.name().as_str() == name)
        .and_then(|h| match h.value() {
            HeaderValue::String(value) => Some(value.as_str()),
            _ => None,
        })
}

/// An `error` event in Anthropic's shape.
fn error_frame(raw: Bytes, kind: &str, message: &str) -> Frame {
    let data = json!({"type": "error", "error": {"type": kind, "message": message}});
    Frame::synthetic(raw, Some("error".into()), Some(data.to_string()))
}

#[derive(Deserialize)]
struct ExceptionBody<'a> {
    #[serde(default, borrow)]
    message: Option<std::borrow::Cow<'a, str>>,
}

/// A failure frame (`exception` or `error`), or `None` for an event.
fn failure(raw: &Bytes, message: &Message) -> Option<Frame> {
    match header(message, ":message-type") {
        Some("exception") => {
            let kind = header(message, ":exception-type").unwrap_or("exception");
            let text = serde_json::from_slice::<ExceptionBody<'_>>(message.payload())
                .ok()
                .and_then(|m| m.message.map(|m| m.into_owned()))
                .unwrap_or_default();
            Some(error_frame(raw.clone(), kind, &text))
        }
        Some("error") => {
            let kind = header(message, ":error-code").unwrap_or("error");
            let text = header(message, ":error-message").unwrap_or_default();
            Some(error_frame(raw.clone(), kind, text))
        }
        _ => None,
    }
}

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow)]
    bytes: std::borrow::Cow<'a, str>,
}

#[derive(Deserialize)]
struct Typed<'a> {
    #[serde(default, borrow, rename = "type")]
    kind: Option<std::borrow::Cow<'a, str>>,
}

/// InvokeModelWithResponseStream: each `chunk` as the Anthropic event it
/// carries, named by its `type` (so the Anthropic event judge's name-based
/// shortcuts apply).
pub(crate) fn invoke_frame(raw: Bytes, cut: Cut<'_>) -> Frame {
    let message = match cut {
        Cut::Message(message) => message,
        Cut::Broken(why) => return error_frame(raw, "eventstream_corrupt", why),
        Cut::Opaque => return Frame::synthetic(raw, None, None),
    };
    if let Some(failed) = failure(&raw, message) {
        return failed;
    }
    let event = header(message, ":event-type").map(str::to_owned);
    if event.as_deref() != Some("chunk") {
        return Frame::synthetic(raw, event, None);
    }
    let inner = serde_json::from_slice::<Chunk<'_>>(message.payload())
        .ok()
        .and_then(|chunk| {
            base64::engine::general_purpose::STANDARD
                .decode(chunk.bytes.as_bytes())
                .ok()
        })
        .and_then(|bytes| String::from_utf8(bytes).ok());
    let Some(inner) = inner else {
        return error_frame(
            raw,
            "eventstream_corrupt",
            "a chunk without base64 JSON bytes",
        );
    };
    let kind = serde_json::from_str::<Typed<'_>>(&inner)
        .ok()
        .and_then(|t| t.kind.map(|k| k.into_owned()));
    Frame::synthetic(raw, kind.or(event), Some(inner))
}

/// ConverseStream: each event named by `:event-type`, its JSON as the data.
pub(crate) fn converse_frame(raw: Bytes, cut: Cut<'_>) -> Frame {
    let message = match cut {
        Cut::Message(message) => message,
        Cut::Broken(why) => return error_frame(raw, "eventstream_corrupt", why),
        Cut::Opaque => return Frame::synthetic(raw, None, None),
    };
    if let Some(failed) = failure(&raw, message) {
        return failed;
    }
    let event = header(message, ":event-type").map(str::to_owned);
    let data = String::from_utf8_lossy(message.payload()).into_owned();
    Frame::synthetic(raw, event, Some(data))
}

#[cfg(test)]
mod tests {
    use aws_smithy_types::event_stream::Header;

    use super::*;

    fn message(headers: &[(&str, &str)], payload: &str) -> Message {
        headers.iter().fold(
            Message::new(Bytes::copy_from_slice(payload.as_bytes())),
            |m, (name, value)| {
                m.add_header(Header::new(
                    name.to_string(),
                    HeaderValue::String(value.to_string().into()),
                ))
            },
        )
    }

    #[test]
    fn a_chunk_reads_as_the_anthropic_event_it_carries() {
        let event = r#"{"type":"message_delta","delta":{"stop_reason":"refusal"}}"#;
        let encoded = base64::engine::general_purpose::STANDARD.encode(event);
        let payload = format!(r#"{{"bytes":"{encoded}","p":"abcdefgh"}}"#);
        let chunk = message(
            &[(":message-type", "event"), (":event-type", "chunk")],
            &payload,
        );
        let frame = invoke_frame(Bytes::from_static(b"raw"), Cut::Message(&chunk));
        assert_eq!(frame.event(), Some("message_delta"));
        assert_eq!(frame.data(), Some(event));
        assert_eq!(frame.raw().as_ref(), b"raw");
    }

    #[test]
    fn exceptions_errors_and_corruption_read_as_error_events() {
        let exception = message(
            &[
                (":message-type", "exception"),
                (":exception-type", "throttlingException"),
            ],
            r#"{"message":"Too many requests"}"#,
        );
        let error = message(
            &[
                (":message-type", "error"),
                (":error-code", "InternalFailure"),
                (":error-message", "boom"),
            ],
            "",
        );
        for read in [invoke_frame, converse_frame] {
            let frame = read(Bytes::new(), Cut::Message(&exception));
            let data: serde_json::Value = serde_json::from_str(frame.data().unwrap()).unwrap();
            assert_eq!(frame.event(), Some("error"));
            assert_eq!(data["error"]["type"], "throttlingException");
            assert_eq!(data["error"]["message"], "Too many requests");
            let frame = read(Bytes::new(), Cut::Message(&error));
            assert!(frame.data().unwrap().contains("InternalFailure"));
            let frame = read(Bytes::new(), Cut::Broken("bad crc"));
            assert_eq!(frame.event(), Some("error"));
            assert!(read(Bytes::new(), Cut::Opaque).event().is_none());
        }
        let bad_chunk = message(
            &[(":message-type", "event"), (":event-type", "chunk")],
            "{}",
        );
        assert_eq!(
            invoke_frame(Bytes::new(), Cut::Message(&bad_chunk)).event(),
            Some("error")
        );
    }

    #[test]
    fn a_converse_event_keeps_its_name_and_json() {
        let stop = message(
            &[(":message-type", "event"), (":event-type", "messageStop")],
            r#"{"stopReason":"content_filtered"}"#,
        );
        let frame = converse_frame(Bytes::new(), Cut::Message(&stop));
        assert_eq!(frame.event(), Some("messageStop"));
        assert_eq!(frame.data(), Some(r#"{"stopReason":"content_filtered"}"#));
    }
}
